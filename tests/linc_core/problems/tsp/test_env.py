"""TSP environment: closed tours, hand-computed lengths and consequence tables, free first move."""

from __future__ import annotations

import pytest
import torch

from linc_core.instances import Instance
from linc_core.problems import TSPEnv, complete_rollouts, random_feasible_actions


def square() -> Instance:
    return Instance.from_arrays("tsp", [(0, 0), (0, 3), (4, 3), (4, 0)], dtype=torch.float64)


@pytest.mark.parametrize(
    ("tour", "length"),
    [([0, 1, 2, 3], 14.0), ([1, 2, 3, 0], 14.0), ([0, 2, 1, 3], 5 + 4 + 5 + 4)],
)
def test_closed_tour_lengths(tour: list[int], length: float) -> None:
    # A 4 x 3 rectangle: perimeter 14; 0-2-1-3 crosses both diagonals (5 each) -> 18.
    env = TSPEnv(square(), num_rollouts=1)
    s = env.reset()
    assert s.mask.all()
    for node in tour:
        s = env.step(s, torch.tensor([[node]]))
    assert bool(s.finished.item())
    assert s.cost.item() == pytest.approx(length)


def test_padding_after_finish_changes_nothing() -> None:
    env = TSPEnv(square(), num_rollouts=1)
    s = env.reset()
    for node in [3, 2, 1, 0]:
        s = env.step(s, torch.tensor([[node]]))
    assert s.mask[0, 0].tolist() == [False, False, False, True]  # the first city, harmless
    again = env.step(s, torch.tensor([[3]]))
    assert again.cost.item() == s.cost.item() == pytest.approx(14.0)


def test_random_rollouts_visit_every_city_once() -> None:
    gen = torch.Generator().manual_seed(3)
    locs = torch.rand(4, 12, 2, generator=gen)
    env = TSPEnv(Instance.from_arrays("tsp", locs), num_rollouts=5)
    final, actions = complete_rollouts(env, lambda s, _: random_feasible_actions(s.mask, gen))
    assert actions.shape == (4, 5, 12)
    assert (actions.sort(-1).values == torch.arange(12)).all()
    dist = torch.cdist(locs.double(), locs.double())
    closed = torch.cat([actions, actions[..., :1]], dim=-1)
    for b in range(4):
        for k in range(5):
            path = closed[b, k]
            expected = dist[b, path[:-1], path[1:]].sum()
            assert final.cost[b, k].item() == pytest.approx(expected.item(), rel=1e-5)


def test_consequence_table_by_hand() -> None:
    """Four cities at the tips of a rhombus about its centroid (3, 4):

        city 0 (6, 4)  east,  angle 0        city 2 (0, 4)  west,  angle pi
        city 1 (3, 8)  north, angle pi / 2   city 3 (3, 0)  south, angle -pi / 2

    Distances: 0-1 = 0-3 = 2-1 = 2-3 = sqrt(3^2 + 4^2) = 5, 0-2 = 6, 1-3 = 8 (the largest, so
    every distance feature is over 8). Distance to the centroid: 3, 4, 3, 4 -> 3/8 = 0.375 and
    4/8 = 0.5. Angle: |wrap(theta_j - theta_current)| / pi.
    """
    instance = Instance.from_arrays("tsp", [(6, 4), (3, 8), (0, 4), (3, 0)], dtype=torch.float64)
    env = TSPEnv(instance, num_rollouts=1)
    assert env.feature_names == ("travel", "dist_to_start", "dist_to_centroid", "angle")

    def table(state) -> torch.Tensor:
        return env.consequences(state)[0, 0]  # [N, 4]: one row per city

    state = env.reset()
    assert torch.equal(table(state), torch.zeros(4, 4))  # no current city yet: all zero

    # Rows are cities, columns (travel, dist_to_start, dist_to_centroid, angle).
    moves = [
        # Start at city 1 (north): travel = dist_to_start (city 1 is current and first), 5/8,
        # 0, 5/8, 8/8. Angle from pi/2: city 0 |0 - pi/2| -> 0.5, city 1 0, city 2
        # |pi - pi/2| -> 0.5, city 3 |-pi/2 - pi/2| = pi -> 1.
        (
            1,
            [
                [0.625, 0.625, 0.375, 0.5],
                [0, 0, 0.5, 0],
                [0.625, 0.625, 0.375, 0.5],
                [1, 1, 0.5, 1],
            ],
        ),
        # On to city 0 (east), city 1 stays first: travel from city 0 0, 5/8, 6/8, 5/8;
        # dist_to_start as before. Angle from 0: 0, pi/2 -> 0.5, pi -> 1, -pi/2 -> 0.5.
        (
            0,
            [
                [0, 0.625, 0.375, 0],
                [0.625, 0, 0.5, 0.5],
                [0.75, 0.625, 0.375, 1],
                [0.625, 1, 0.5, 0.5],
            ],
        ),
    ]
    for city, expected in moves:
        state = env.step(state, torch.tensor([[city]]))
        torch.testing.assert_close(table(state), torch.tensor(expected, dtype=torch.float64))
