"""The fast scorer equals the paper's form of it, for every scorer and variant switch.

``CandidateScorer.forward`` folds the paper's algebra (centring after the projection, beta in
the projection, ``1 + gamma`` as ``2 sigmoid(2x)``, rows without a choice left out);
``CandidateScorer.paper_scores`` writes section 3.4 out plainly. Along random feasible episodes
of every problem, with weights drawn wide enough that gamma, beta and alpha are far from their
neutral values, the two agree to 1e-10 in float64 on every rollout with a choice, with and
without autograd (the fast form takes other paths under each).

The step summary r_t and the centred rows phi match the reference scorer's own recorded values
at every step (golden cases); the minimum over F ignores rows outside F at every dtype.
"""

from __future__ import annotations

import pytest
import torch

from linc_core.model.feasible_set import feasible_customers, feasible_weight, masked_minima
from linc_core.model.scorer import CandidateScorer
from linc_core.presets import PRESETS, preset_configs
from linc_core.problems import CVRPTWEnv, make_env, random_feasible_actions
from linc_core.problems.spec import BUILTIN_PROBLEMS
from tests.conftest import make_instances, rollout_inputs, tiny_policy
from tests.golden import load_golden
from tests.linc_core.problems.cvrptw.test_env import instance_from_golden


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
@pytest.mark.parametrize("problem", BUILTIN_PROBLEMS)
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


# ---------------------------------------------------------------------------------------------
# step summary and centred rows against the reference scorer
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case_index", [0, 1])
def test_summary_and_centred_rows_match_reference(case_index: int) -> None:
    """r_t (partial and full mean) and the centred rows, depot row included, at every step.

    When no customer is feasible the reference floors |F| at 1 (rho = 1/n) where the paper's
    formula gives 0; we keep the reference's constant (only the depot is feasible there, so the
    policy is the same either way) and match its recorded values at every step.
    """
    case = load_golden("cvrptw_env_golden.json")["cases"][case_index]
    instance = instance_from_golden(case)
    n = instance.num_customers
    partial = CandidateScorer(preset_configs("full_linc")[0])
    full_mean = CandidateScorer(preset_configs("full_mu_summary")[0])
    env = CVRPTWEnv(instance, num_rollouts=1)
    state = env.reset()
    empty_steps = 0
    for record, action in zip(case["steps"], case["actions"][1:], strict=True):
        table = env.consequences(state)
        feasible = feasible_customers(state.mask, has_depot=True)
        assert feasible[0, 0].nonzero().flatten().tolist() == record["feasible_customers"]
        got_partial = partial.step_summary(table, feasible, n)[0, 0]
        got_full = full_mean.step_summary(table, feasible, n)[0, 0]
        want_partial = torch.tensor(record["summary_partial"])
        want_full = torch.tensor(record["summary_full_mean"])
        assert got_partial.shape == (4,) and got_full.shape == (7,)
        if not record["feasible_customers"]:
            empty_steps += 1
            assert state.mask[0, 0].tolist() == [True] + [False] * n  # only the depot
            assert record["summary_partial"][0] == pytest.approx(1.0 / n, abs=1e-5)
        torch.testing.assert_close(got_partial, want_partial, atol=1e-5, rtol=0)
        torch.testing.assert_close(got_full, want_full, atol=1e-5, rtol=0)

        for scorer in (partial, full_mean):
            phi, ratio = scorer.centred_features(table, state.mask, has_depot=True)
            torch.testing.assert_close(
                phi[0, 0, 0], torch.tensor(record["centered_features_depot"]), atol=1e-5, rtol=0
            )
            torch.testing.assert_close(
                phi[0, 0, 1:],
                torch.tensor(record["centered_features_customers"]),
                atol=1e-5,
                rtol=0,
            )
            assert ratio.item() == pytest.approx(max(len(record["feasible_customers"]), 1) / n)
        state = env.step(state, torch.tensor([[action]]))
    assert empty_steps >= 2  # the empty-F branch was exercised


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_masked_minimum_ignores_rows_outside_f_at_every_dtype(dtype: torch.dtype) -> None:
    """The minimum over F equals a masked fill's, bit for bit, where the overall minimum lies
    outside F, with large values of either sign, and 0 on an empty F (half precision too,
    where a fixed penalty of 1e30 would overflow to inf and give nan)."""
    rows = torch.tensor(
        [[[-5.0, 0.25, -0.5, 3.0], [2.0, -1.0, 100.0, 7.5], [1.0, -2.0, 0.0, 4.0]]], dtype=dtype
    )
    feasible = torch.tensor(
        [[[False, True, True, False], [True, False, True, True], [False, False, False, False]]]
    )
    weight, count, _ = feasible_weight(feasible, dtype, num_customers=4)
    got = masked_minima(rows, weight, count)
    want = rows.masked_fill(~feasible, float("inf")).amin(-1)
    want = torch.where(count.squeeze(-1) > 0, want, torch.zeros_like(want))
    assert torch.equal(got, want)
    assert got.tolist() == [[-0.5, 2.0, 0.0]]


def test_centred_mlp_rows_centre_every_column_and_zero_the_depot() -> None:
    """centered_mlp: all six columns (angle included) centred over F, depot row 0; naive_mlp
    and raw_linear: the raw table."""
    case = load_golden("cvrptw_env_golden.json")["cases"][0]
    env = CVRPTWEnv(instance_from_golden(case), num_rollouts=1)
    state = env.reset()
    table = env.consequences(state)
    feasible = feasible_customers(state.mask, has_depot=True)[0, 0]
    assert int(feasible.sum()) >= 2
    rows = table[0, 0]
    mean = rows[feasible].mean(0)
    centred = CandidateScorer(preset_configs("centered_mlp")[0])
    phi, _ = centred.centred_features(table, state.mask, has_depot=True)
    assert phi[0, 0, 0].abs().max().item() == 0.0
    torch.testing.assert_close(phi[0, 0, 1:], rows[1:] - mean, atol=1e-6, rtol=0)
    assert phi[0, 0, 1:][feasible[1:]].mean(0).abs().max().item() < 1e-6
    for raw in ("naive_mlp", "raw_linear"):
        phi, _ = CandidateScorer(preset_configs(raw)[0]).centred_features(
            table, state.mask, has_depot=True
        )
        assert torch.equal(phi[0, 0], rows)
