"""The 8 dihedral augmentations preserve every distance, window and cost."""

from __future__ import annotations

import torch

from linc_core.instances import Instance
from linc_core.problems import CVRPTWEnv, augment_dihedral, dihedral_coordinates
from linc_core.problems.base import euclidean_distances


def test_eight_distinct_images_with_identical_distances() -> None:
    gen = torch.Generator().manual_seed(0)
    locs = torch.rand(3, 7, 2, generator=gen, dtype=torch.float64) * 100
    grid = torch.full((3,), 100.0, dtype=torch.float64)
    images = dihedral_coordinates(locs, grid)
    assert images.shape == (8, 3, 7, 2)
    torch.testing.assert_close(images[0], locs)
    reference = euclidean_distances(locs)
    for a in range(8):
        torch.testing.assert_close(euclidean_distances(images[a]), reference)
        assert images[a].min() >= 0 and images[a].max() <= 100
    flat = images.flatten(1)
    assert len({tuple(row.tolist()) for row in flat}) == 8
    # (G - y, G - x) is the last one: a point (10, 20) maps to (80, 90).
    point = dihedral_coordinates(torch.tensor([[[10.0, 20.0]]]), torch.tensor([100.0]))
    assert point[:, 0, 0].tolist() == [
        [10, 20],
        [90, 20],
        [10, 80],
        [90, 80],
        [20, 10],
        [80, 10],
        [20, 90],
        [80, 90],
    ]


def test_augmented_batch_is_augmentation_major_and_costs_agree() -> None:
    instance = Instance.from_arrays(
        "cvrptw",
        [[(50, 50), (60, 50), (50, 80), (20, 30)], [(50, 50), (10, 10), (90, 90), (50, 55)]],
        demand=[[0, 1, 2, 3], [0, 3, 2, 1]],
        capacity=[5.0, 5.0],
        time_windows=[[(0, 300), (0, 100), (0, 200), (0, 300)]] * 2,
        service_time=[[0, 5, 5, 5]] * 2,
        grid_size=[100.0, 100.0],
        names=["a", "b"],
        dtype=torch.float64,
    )
    aug = augment_dihedral(instance)
    assert aug.batch_size == 16
    assert aug.names == ("a", "b") * 8
    torch.testing.assert_close(aug.demand[2:4], instance.demand)
    env = CVRPTWEnv(aug, num_rollouts=1)
    actions = torch.tensor([1, 2, 0, 3, 0]).expand(16, 1, 5)
    costs = env.route_length(actions).view(8, 2)
    torch.testing.assert_close(costs, costs[:1].expand(8, 2))
