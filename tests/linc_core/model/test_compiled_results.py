"""Compiled steps give eager's results: the same rollouts, solutions, losses and gradients.

``torch.compile`` fuses the arithmetic (inductor's C++ loops on CPU), so results agree up to
float rounding, not bit for bit. Stated tolerances:

- float64 (where rounding is far below any decision): the same actions and solutions, exact
  costs equal; log-likelihoods, losses and gradients to 1e-9 relative;
- float32 (training and decoding's dtype): the same actions on these batches, log-likelihoods
  to 1e-4 absolute (about 50 decisions of rounding ~1e-6 each).

Compiling costs seconds per shape (each test compiles its own: 5-60 s here on 2 shared cores
from a cold inductor cache), so these are few and small; the decodes of the three problems and
the dense-credit step are marked slow (the default run decodes with ``DecodeConfig.compile`` in
the GPU check's CPU mode, ``tests/bench/test_gpu_check.py``, costs to 1e-3).
``test_compiled_steps.py`` covers every preset and problem for graph breaks.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from linc_core.decoding import DecodeConfig, decode
from linc_core.model import LincPolicy
from linc_core.model.decisions import PolicyChooser
from linc_core.model.sampling import greedy, row_seeds, sample_z
from linc_core.problems import make_env, random_feasible_actions
from linc_core.problems.packing import first_true
from linc_core.problems.rollout import start_rollouts
from linc_core.train import train_step
from linc_core.train.data import generate
from tests.conftest import tiny_configs

SIZE = 10


def _policy(preset: str, problem: str, dtype: torch.dtype) -> LincPolicy:
    model, _ = tiny_configs(preset, problem)
    torch.manual_seed(0)
    return LincPolicy(model).to(dtype).eval()


@pytest.mark.parametrize(
    ("preset", "problem", "method"),
    [
        pytest.param("full_linc", "cvrptw", "sampling", marks=pytest.mark.slow),
        pytest.param("full_linc", "cvrp", "greedy", marks=pytest.mark.slow),
        pytest.param("pomo", "tsp", "multistart", marks=pytest.mark.slow),
    ],
)
def test_compiled_decoding_finds_the_eager_solutions(
    preset: str, problem: str, method: str
) -> None:
    policy = _policy(preset, problem, torch.float64)
    instances = generate(problem, 2, SIZE, seed=7)
    config = DecodeConfig(method=method, num_z=6, augment=8, seed=3)
    eager = decode(policy, instances, config)
    compiled = decode(policy, instances, dataclasses.replace(config, compile=True))
    assert compiled.routes == eager.routes
    assert compiled.aug_routes == eager.aug_routes
    assert torch.equal(compiled.cost, eager.cost)  # exact lengths of the same routes


@pytest.mark.parametrize("grad_mode", ["no_grad", "inference_mode"])
def test_compiled_float32_rollouts_match_eager_within_the_stated_tolerance(grad_mode: str) -> None:
    """Decoding's own dtype and both of its autograd modes (AOT autograd once failed under
    inference_mode): the same actions and costs, log-likelihoods to 1e-4."""
    policy = _policy("full_linc", "cvrptw", torch.float32)
    instance = generate("cvrptw", 3, SIZE, seed=2)
    k = 8
    z = sample_z(row_seeds(1, 3), k, policy.config.z_dim)
    seeds = row_seeds(4, 3)
    context = torch.no_grad if grad_mode == "no_grad" else torch.inference_mode
    results = {}
    for compiled in (False, True):
        with context():
            results[compiled] = policy.rollout(
                instance, k, z=z, sample_seeds=seeds, compiled=compiled
            )
    eager, fused = results[False], results[True]
    assert torch.equal(fused.actions, eager.actions)
    assert torch.equal(fused.cost, eager.cost)
    torch.testing.assert_close(fused.log_likelihood, eager.log_likelihood, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("preset", "progress"),
    [("full_linc", 0.5), pytest.param("baseline", 0.0, marks=pytest.mark.slow)],
)
def test_a_compiled_training_step_has_the_eager_loss_and_update(
    preset: str, progress: float
) -> None:
    """One step from the same weights, float64: the same rollouts (costs), the loss and every
    updated weight to 1e-9 relative (best-only credit at 50% of training; dense credit)."""
    model, config = tiny_configs(preset, "cvrptw", num_rollouts=6, batch_size=3)
    instance = generate("cvrptw", 3, SIZE, seed=5).to(dtype=torch.float64)
    torch.manual_seed(0)
    start = LincPolicy(model).double()
    outcome = {}
    for compiled in (False, True):
        policy = copy.deepcopy(start)
        optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
        step_config = dataclasses.replace(config, compile=compiled)
        metrics = train_step(policy, optimizer, instance, step_config, progress, seed=3)
        outcome[compiled] = (metrics, [p.detach().clone() for p in policy.parameters()])
    (eager, eager_weights), (fused, fused_weights) = outcome[False], outcome[True]
    assert (fused.mean_cost, fused.best_cost, fused.steps) == (
        eager.mean_cost,
        eager.best_cost,
        eager.steps,
    )
    assert fused.loss == pytest.approx(eager.loss, rel=1e-9, abs=1e-12)
    moved = 0.0
    for before, a, b in zip(start.parameters(), eager_weights, fused_weights, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-12)
        moved = max(moved, float((a - before.detach()).abs().max()))
    assert moved > 0  # the step did move the weights


def test_a_compiled_packed_decision_is_eager_s_with_morphing() -> None:
    """A decision where some rollouts are forced and some choose (the packed path: selected and
    scattered back inside the graph), float64, greedy, with score morphing: the same actions,
    log-likelihoods to 1e-9 and the choosing rollouts' morph base scores."""
    policy = _policy("full_linc", "cvrptw", torch.float64)
    frozen = _policy("full_linc", "cvrptw", torch.float64)
    with torch.no_grad():  # a frozen policy that differs from the trained one
        for weight in frozen.parameters():
            weight.mul_(0.5)
    instance = generate("cvrptw", 2, SIZE, seed=4).to(dtype=torch.float64)
    k = 6
    env = make_env(instance, k)
    z = sample_z(row_seeds(1, 2), k, policy.config.z_dim).double()
    state, _ = start_rollouts(env)
    generator = torch.Generator().manual_seed(2)
    for _ in range(30):  # until a rollout is forced to a customer while others have a choice
        choice = state.mask.sum(-1) > 1
        forced_to_customer = ~choice & (first_true(state.mask) > 0)
        if 0 < int(choice.sum(-1).max()) < k and bool(forced_to_customer.any()):
            break
        state = env.step(state, random_feasible_actions(state.mask, generator))
    else:
        pytest.fail("no state with a rollout forced to a customer beside choosing ones")
    decided = {}
    with torch.no_grad():
        encoded = policy.encode(instance)
        for compiled in (False, True):
            chooser = PolicyChooser(
                policy,
                env,
                encoded,
                z,
                greedy,
                morph=(frozen, 0.5),
                keep_trajectory=True,
                compiled=compiled,
            )
            action = chooser(state, 7)
            decided[compiled] = (action, chooser.log_likelihood, chooser.trajectory)
    (eager_action, eager_ll, eager_record), (action, ll, record) = decided[False], decided[True]
    assert torch.equal(action, eager_action)
    torch.testing.assert_close(ll, eager_ll, rtol=1e-9, atol=1e-12)
    forced = state.mask.sum(-1) <= 1
    assert bool(forced.any()) and bool((ll[forced] == 0).all())
    base, eager_base = record.morph_base_scores[0], eager_record.morph_base_scores[0]
    # A forced rollout's base scores are never read (the replay skips forced decisions), and
    # eager gives a packed one neutral modulation where the graph computes it: compare the rest.
    torch.testing.assert_close(base[~forced], eager_base[~forced], rtol=1e-9, atol=1e-12)
    assert bool((base[~forced] != 0).any())
