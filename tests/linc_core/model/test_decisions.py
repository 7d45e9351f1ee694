"""The policy as the rollout engine's choice rule: running the model only for rollouts that have
a choice decides every rollout exactly as running it for all of them."""

from __future__ import annotations

import pytest
import torch

from linc_core.model import LincPolicy
from linc_core.model.decisions import PolicyChooser
from linc_core.model.sampling import greedy, keyed_sampler, rollout_keys, row_seeds, sample_z
from linc_core.problems import make_env
from linc_core.problems.rollout import complete_rollouts, pomo_starts, start_rollouts
from linc_core.train.data import generate
from tests.conftest import tiny_configs


@pytest.mark.parametrize(
    ("preset", "problem", "sample"),
    [
        ("full_linc", "cvrptw", True),
        ("full_linc", "cvrptw", False),
        ("naive_mlp", "cvrptw", True),
        ("baseline", "cvrp", True),
        ("pomo", "tsp", True),
    ],
)
def test_skipping_forced_rollouts_decides_every_rollout_the_same(
    preset: str, problem: str, sample: bool
) -> None:
    model, _ = tiny_configs(preset, problem)
    torch.manual_seed(0)
    policy = LincPolicy(model).double().eval()
    instance = generate(problem, 3, 15, seed=4).to(dtype=torch.float64)
    k = 10
    z = sample_z(row_seeds(1, 3), k, 16).double() if model.z_dim else None
    starts = pomo_starts(instance, k) if model.z_dim == 0 else None
    outcomes = {}
    for skip in (False, True):
        env = make_env(instance, k)
        pick = keyed_sampler(rollout_keys(row_seeds(2, 3), 0, k)) if sample else greedy
        chooser = PolicyChooser(
            policy, env, policy.encode(instance), z, pick, keep_trajectory=True, skip_forced=skip
        )
        state, _ = start_rollouts(env, starts)
        final, actions = complete_rollouts(env, chooser, state)
        outcomes[skip] = (actions, chooser.log_likelihood, final.cost)
        forced = sum(int((s.mask.sum(-1) == 1).sum()) for s in chooser.trajectory.states)
    (actions, log_likelihood, cost), (actions_skip, log_likelihood_skip, cost_skip) = (
        outcomes[False],
        outcomes[True],
    )
    assert torch.equal(actions, actions_skip)
    torch.testing.assert_close(log_likelihood_skip, log_likelihood, rtol=1e-12, atol=1e-12)
    assert torch.equal(cost, cost_skip)
    # the rollouts did have forced decisions to skip (finished or a single feasible action)
    assert forced > 0
