"""TSP environment: closed tours, hand-computed lengths, free first move."""

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
