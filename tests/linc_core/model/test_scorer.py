"""The fast scorer equals the paper's form of it, for every scorer and variant switch.

``CandidateScorer.forward`` folds the paper's algebra (centring after the projection, beta in
the projection, ``1 + gamma`` as ``2 sigmoid(2x)``, rows without a choice left out);
``CandidateScorer.paper_scores`` writes section 3.4 out plainly. Along random feasible episodes
of every problem, with weights drawn wide enough that gamma, beta and alpha are far from their
neutral values, the two agree to 1e-10 in float64 on every rollout with a choice, with and
without autograd (the fast form takes other paths under each).
"""

from __future__ import annotations

import pytest
import torch

from linc_core.presets import PRESETS
from linc_core.problems import make_env, random_feasible_actions
from tests.conftest import tiny_policy
from tests.linc_core.model.test_model import PROBLEMS, make_instances, rollout_inputs


def _widened(preset: str, problem: str):
    """A tiny float64 ``preset`` policy whose weights are N(0, 0.3): the modulation is far
    from gamma = beta = 0, alpha = 1, so a wrong term would show."""
    policy = tiny_policy(preset, problem, seed=5, dtype=torch.float64)
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return policy


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "autograd"])
@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("preset", list(PRESETS))
def test_fast_scores_equal_the_papers_form(preset: str, problem: str, grad: bool) -> None:
    batch, k, size = 2, 5, 9
    policy = _widened(preset, problem)
    instance = make_instances(problem, batch, size, seed=3)
    z, starts = rollout_inputs(policy, batch, k, seed=2)
    if z is not None:
        z = z.double()
    env = make_env(instance, k)
    state = env.reset()
    if starts is not None:
        state = env.step(state, starts)
    generator = torch.Generator().manual_seed(7)
    compared = 0
    with torch.set_grad_enabled(grad):
        cache, time_scale = policy.encode(instance)
        while not bool(state.finished.all()):
            inputs = policy.step_inputs(env, state, time_scale, torch.float64)
            context = policy.decoder(
                cache, inputs.current, inputs.scalars, inputs.mask, z, inputs.first
            )
            arguments = (context, cache.embeddings, inputs.table, inputs.mask, instance.has_depot)
            fast = policy.scorer(*arguments)
            plain = policy.scorer.paper_scores(*arguments)
            choice = state.mask.sum(-1) > 1  # forced rollouts get neutral values in the fast form
            torch.testing.assert_close(fast[choice], plain[choice], atol=1e-10, rtol=1e-10)
            compared += int(choice.sum())
            state = env.step(state, random_feasible_actions(state.mask, generator))
    assert compared >= batch * k * (size // 2)


def test_the_papers_form_differs_when_a_term_is_dropped() -> None:
    """The comparison above can fail: the paper's form without its step summary (gamma = beta
    = 0, alpha = 1) is far from full LINC's fast scores on the same state."""
    policy = _widened("full_linc", "cvrptw")
    instance = make_instances("cvrptw", 1, 9, seed=3)
    z, _ = rollout_inputs(policy, 1, 4, seed=2)
    env = make_env(instance, 4)
    state = env.reset()
    with torch.no_grad():
        cache, time_scale = policy.encode(instance)
        inputs = policy.step_inputs(env, state, time_scale, torch.float64)
        context = policy.decoder(cache, inputs.current, inputs.scalars, inputs.mask, z.double())
        arguments = (context, cache.embeddings, inputs.table, inputs.mask, True)
        fast = policy.scorer(*arguments)
        policy.scorer.summary_mode = "none"
        without_summary = policy.scorer.paper_scores(*arguments)
    assert float((fast - without_summary).abs().max()) > 1e-2
