"""The rollout engine (``linc_core.problems.rollout``): where it stops, and how often it looks."""

from __future__ import annotations

import pytest
import torch

from linc_core.problems import make_env, random_feasible_actions
from linc_core.problems.rollout import complete_rollouts
from linc_core.train.data import generate


def per_step_loop(env, choose) -> torch.Tensor:
    """The engine's old loop: read ``finished`` after every decision."""
    state, actions = env.reset(), []
    for step in range(env.max_steps):
        if bool(state.finished.all()):
            break
        action = choose(state, step)
        actions.append(action)
        state = env.step(state, action)
    return torch.stack(actions, dim=-1)


@pytest.mark.parametrize("problem", ["cvrptw", "cvrp", "tsp"])
def test_the_engine_stops_where_a_check_after_every_decision_stops(
    problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same actions and length as the per-decision loop, with a handful of reads of the
    batch's progress (each a host-device synchronisation on CUDA) instead of one per decision."""
    instance = generate(problem, 3, 30, seed=8)
    env = make_env(instance, 16)

    def choose_with(seed: int):
        generator = torch.Generator().manual_seed(seed)
        return lambda state, step: random_feasible_actions(state.mask, generator)

    expected = per_step_loop(env, choose_with(1))
    reads = []
    original = type(env).decisions_left
    monkeypatch.setattr(
        type(env), "decisions_left", lambda self, state: reads.append(1) or original(self, state)
    )
    final, actions = complete_rollouts(env, choose_with(1))
    assert torch.equal(actions, expected)
    assert bool(final.finished.all())
    decisions = expected.shape[-1]
    assert decisions >= 30
    assert len(reads) <= decisions // 4, (len(reads), decisions)


def test_a_rollout_that_cannot_finish_in_time_raises() -> None:
    instance = generate("cvrp", 1, 10, seed=0)
    env = make_env(instance, 2)
    env.max_steps = 3  # fewer decisions than the 10 customers and the return need
    with pytest.raises(RuntimeError, match="did not finish within 3 decisions"):
        complete_rollouts(env, lambda state, step: state.mask.to(torch.uint8).argmax(-1))
