"""Shared environment helpers: gathers, the uniform feasible sampler, route splitting."""

from __future__ import annotations

import torch

from linc_core.problems.base import (
    actions_to_routes,
    angle_difference_norm,
    gather_pairs,
    gather_rows,
    random_feasible_actions,
)


def test_gather_rows_and_pairs_index_per_instance() -> None:
    matrix = torch.arange(2 * 3 * 3, dtype=torch.float32).view(2, 3, 3)
    index = torch.tensor([[2, 0], [1, 1]])
    rows = gather_rows(matrix, index)
    assert rows[0, 0].tolist() == [6, 7, 8] and rows[1, 1].tolist() == [12, 13, 14]
    cols = torch.tensor([[1, 2], [0, 2]])
    assert gather_pairs(matrix, index, cols).tolist() == [[7, 2], [12, 14]]


def test_random_feasible_actions_is_uniform_over_feasible_nodes() -> None:
    """60,000 draws over 3 feasible nodes: each count within 5 sigma of 20,000, none elsewhere."""
    mask = torch.tensor([False, True, False, True, True, False]).expand(1, 60_000, 6)
    actions = random_feasible_actions(mask.contiguous(), torch.Generator().manual_seed(1))
    counts = torch.bincount(actions.flatten(), minlength=6).tolist()
    assert counts[0] == counts[2] == counts[5] == 0
    sigma = (60_000 * (1 / 3) * (2 / 3)) ** 0.5
    for c in (counts[1], counts[3], counts[4]):
        assert abs(c - 20_000) < 5 * sigma


def test_random_feasible_actions_single_choice_and_seeded() -> None:
    mask = torch.zeros(4, 5, 7, dtype=torch.bool)
    mask[..., 6] = True
    assert (random_feasible_actions(mask) == 6).all()
    full = torch.ones(4, 5, 7, dtype=torch.bool)
    a = random_feasible_actions(full, torch.Generator().manual_seed(9))
    b = random_feasible_actions(full, torch.Generator().manual_seed(9))
    assert torch.equal(a, b)


def test_angle_difference_wraps_to_pi() -> None:
    angles = torch.tensor([[[3.0, -3.0, 0.5]]])
    current = torch.tensor([[[-3.0]]])
    out = angle_difference_norm(angles, current)[0, 0]
    # 3 - (-3) = 6 wraps to 6 - 2 pi; -3 - (-3) = 0; 0.5 + 3 = 3.5 wraps to 3.5 - 2 pi.
    expected = torch.tensor([2 * torch.pi - 6.0, 0.0, 2 * torch.pi - 3.5]) / torch.pi
    torch.testing.assert_close(out, expected)


def test_actions_to_routes_drops_depots_and_padding() -> None:
    assert actions_to_routes(torch.tensor([3, 1, 0, 2, 0, 0, 0])) == [[3, 1], [2]]
    assert actions_to_routes([0, 0]) == []
