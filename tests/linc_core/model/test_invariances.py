"""Invariances of the policy over every scorer kind, preset and problem.

- permutation equivariance: permuting the customers permutes the scores and log-probabilities;
- masked actions get probability exactly 0 and are never sampled, in every preset; the additive
  mask equals a masked fill in value and gradient; the sampler never draws a masked action.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import Tensor

from linc_core.instances import Instance
from linc_core.model.feasible_set import mask_offsets
from linc_core.model.sampling import sample_with_uniforms
from linc_core.presets import PRESETS
from linc_core.problems import random_feasible_actions
from linc_core.problems.spec import BUILTIN_PROBLEMS
from tests.conftest import drive, make_instances, rollout_inputs, tiny_policy

# ---------------------------------------------------------------------------------------------
# permutation equivariance
# ---------------------------------------------------------------------------------------------
SCORER_KINDS = {
    "baseline": "baseline",
    "linc partial": "full_linc",
    "linc full_mean": "full_mu_summary",
    "linc none": "no_step_summary",
    "linc raw": "raw_linear",
    "mlp raw": "naive_mlp",
    "mlp centred": "centered_mlp",
}


def permute_nodes(instance: Instance, perm: Tensor) -> Instance:
    """Node i of the result is node ``perm[b, i]`` of ``instance`` (``perm``: ``[B, N]``)."""

    def take(t: Tensor) -> Tensor:
        index = perm.view(*perm.shape, *([1] * (t.dim() - 2))).expand_as(t)
        return t.gather(1, index)

    return dataclasses.replace(
        instance,
        locs=take(instance.locs),
        demand=take(instance.demand),
        time_windows=take(instance.time_windows),
        service_time=take(instance.service_time),
    )


@pytest.mark.parametrize("problem", BUILTIN_PROBLEMS)
@pytest.mark.parametrize("kind", list(SCORER_KINDS))
def test_permuting_customers_permutes_scores(kind: str, problem: str) -> None:
    """u and log-probs of the permuted instance are the permuted ones, at every step of a
    rollout replayed with the permuted actions (node 0, depot or TSP start city, fixed)."""
    batch, k, size = 2, 3, 9
    policy = tiny_policy(SCORER_KINDS[kind], problem, seed=1, dtype=torch.float64)
    instance = make_instances(problem, batch, size, seed=7)
    n = instance.num_nodes
    generator = torch.Generator().manual_seed(3)
    perm = torch.stack(
        [
            torch.cat(
                [torch.zeros(1, dtype=torch.long), 1 + torch.randperm(n - 1, generator=generator)]
            )
            for _ in range(batch)
        ]
    )
    assert not torch.equal(perm, torch.arange(n).expand(batch, n))
    inverse = perm.argsort(-1)
    permuted = permute_nodes(instance, perm)
    z, starts = rollout_inputs(policy, batch, k, seed=4)

    actions: list[Tensor] = []

    def record(_step: int, _log_probs: Tensor, mask: Tensor) -> Tensor:
        actions.append(random_feasible_actions(mask, generator))
        return actions[-1]

    def replay(step: int, _log_probs: Tensor, _mask: Tensor) -> Tensor:
        return inverse.gather(1, actions[step])

    with torch.no_grad():
        original = drive(policy, instance, k, z, starts, record)
        mirrored = drive(policy, permuted, k, z, starts, replay)
    assert len(original) == len(mirrored) >= size - (problem == "tsp")
    index = perm.unsqueeze(1).expand(batch, k, n)
    for (u, log_probs, mask), (u_p, log_probs_p, mask_p) in zip(original, mirrored, strict=True):
        assert torch.equal(mask.gather(-1, index), mask_p)
        torch.testing.assert_close(u.gather(-1, index), u_p, atol=1e-9, rtol=1e-9)
        torch.testing.assert_close(log_probs.gather(-1, index), log_probs_p, atol=1e-9, rtol=0)


# ---------------------------------------------------------------------------------------------
# masked actions have probability exactly 0
# ---------------------------------------------------------------------------------------------
def draw_actions(log_probs: Tensor, generator: torch.Generator) -> Tensor:
    """One inverse-CDF draw per rollout with float64 uniforms from ``generator``."""
    uniforms = torch.rand(log_probs.shape[:-1], generator=generator, dtype=torch.float64)
    return sample_with_uniforms(log_probs, uniforms)


@pytest.mark.parametrize("problem", BUILTIN_PROBLEMS)
@pytest.mark.parametrize("preset", list(PRESETS))
def test_masked_actions_have_zero_probability(preset: str, problem: str) -> None:
    batch, k = 2, 4
    policy = tiny_policy(preset, problem, seed=2)
    instance = make_instances(problem, batch, 8, seed=11).to(dtype=torch.float32)
    z, starts = rollout_inputs(policy, batch, k, seed=5)
    generator = torch.Generator().manual_seed(6)

    def sample(_step: int, log_probs: Tensor, mask: Tensor) -> Tensor:
        probs = log_probs.exp()
        assert bool((probs[~mask] == 0).all())
        assert bool(torch.isfinite(log_probs[mask]).all())
        torch.testing.assert_close(probs.sum(-1), torch.ones_like(probs[..., 0]))
        action = draw_actions(log_probs, generator)
        assert bool(mask.gather(-1, action.unsqueeze(-1)).all())
        return action

    with torch.no_grad():
        steps = drive(policy, instance, k, z, starts, sample)
    assert len(steps) >= 8 - (starts is not None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_log_probs_equal_a_masked_fill_in_value_and_gradient(dtype: torch.dtype) -> None:
    """The additive 0 / -inf mask gives the masked fill's log-probabilities bit for bit, and
    the same gradient (0 on masked scores, no nan), at every dtype's extreme scores."""
    policy = tiny_policy("full_linc", "cvrptw", seed=0)
    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(2, 3, 7, generator=generator, dtype=torch.float64) * 40
    scores[0, 0, 1] = torch.finfo(dtype).max
    scores[0, 0, 2] = torch.finfo(dtype).min
    scores = scores.to(dtype).requires_grad_()
    mask = torch.rand(2, 3, 7, generator=generator) > 0.5
    mask[..., 3] = True  # every row keeps a feasible action
    mask[1, 2] = False
    mask[1, 2, 6] = True  # a row with one feasible action (log-probability 0)
    got = policy.log_probs(scores, mask)
    clip, scale = policy.config.logit_clip, policy.score_scale
    reference = torch.sigmoid(scores * (2.0 * scale)) * (2.0 * clip)
    want = reference.masked_fill(~mask, float("-inf")).log_softmax(-1)
    assert torch.equal(got, want)
    assert mask_offsets(mask, dtype).tolist() == torch.where(mask, 0.0, -math.inf).tolist()
    chosen = mask.to(torch.uint8).argmax(-1, keepdim=True)
    weight = torch.linspace(-1, 1, 6).view(2, 3, 1).to(dtype)
    (grad_got,) = torch.autograd.grad((got.gather(-1, chosen) * weight).sum(), scores)
    (grad_want,) = torch.autograd.grad((want.gather(-1, chosen) * weight).sum(), scores)
    assert torch.equal(grad_got, grad_want)
    assert bool((grad_got[~mask] == 0).all()) and bool(torch.isfinite(grad_got).all())


def test_sampler_never_draws_a_zero_probability_action() -> None:
    """Many draws over rows with masked entries first, last and in between."""
    generator = torch.Generator().manual_seed(0)
    mask = torch.rand(64, 32, 7, generator=generator) < 0.5
    mask[..., 3] = True
    mask[0, 0] = torch.tensor([False, False, False, True, False, False, False])
    logits = torch.randn(64, 32, 7, generator=generator) * 5
    log_probs = logits.masked_fill(~mask, -math.inf).log_softmax(-1)
    for _ in range(20):
        action = draw_actions(log_probs, generator)
        assert bool(mask.gather(-1, action.unsqueeze(-1)).all())
    assert bool((action[0, 0] == 3).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sampler_extreme_uniforms_never_draw_a_masked_action(dtype: torch.dtype) -> None:
    """u = 0 and the largest u below 1: masked entries at both ends are still skipped."""
    mask = torch.tensor([[[False, True, False, True, False]], [[False, False, True, True, True]]])
    logits = torch.tensor([[[0.0, 1.0, 2.0, -1.0, 3.0]], [[5.0, 4.0, -9.0, 0.0, -3.0]]])
    log_probs = logits.to(dtype).masked_fill(~mask, -math.inf).log_softmax(-1)
    largest_below_one = 1.0 - torch.finfo(dtype).eps / 2
    for u, expected in ((0.0, [[1], [2]]), (largest_below_one, [[3], [4]])):
        action = sample_with_uniforms(log_probs, torch.full((2, 1), u, dtype=dtype))
        assert action.tolist() == expected, u
