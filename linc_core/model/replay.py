"""Replay of sampled decisions with gradients: the weighted log-likelihood of a trajectory.

Sampling K rollouts under autograd keeps the graph of every rollout and step alive until the
backward pass. When only some rollouts carry weight (the best-only mask keeps one per instance),
it is cheaper to sample without autograd, keep the trajectory, and recompute with gradients only
the decisions that can move the gradient (``replay_log_likelihood``): the loss and its gradient
are the same (tests compare them to 1e-12 in float64).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from linc_core.model.decisions import StepInputs, Trajectory
from linc_core.model.decoder import DecoderCache

if TYPE_CHECKING:
    from linc_core.model.policy import LincPolicy


def replay_log_likelihood(
    policy: LincPolicy, trajectory: Trajectory, cache: DecoderCache, weight: Tensor
) -> Tensor:
    """``sum_{b,k} weight_bk * log p(rollout_bk)``, recomputed (with gradients) from a
    trajectory sampled without them.

    Equal in value and gradient to weighting ``rollout(...).log_likelihood`` under autograd,
    but only the decisions that can move the gradient are recomputed, in one batched pass:
    rollouts with a non-zero weight (the best-only mask leaves one per instance), and steps
    with at least two feasible actions (a forced step has log-probability exactly 0 and zero
    gradient). The recomputed decisions of instance b are packed as pseudo-rollouts
    ``[B, M, ...]`` that share its encoder cache, M the largest count over instances; an
    instance with fewer is padded with other recorded decisions, weighted 0.

    Args:
        policy: the policy the trajectory was sampled with (same weights).
        trajectory: from ``rollout(..., keep_trajectory=True)``.
        cache: the decoder cache the trajectory was sampled with (built with gradients).
        weight: ``[B, K]``.

    Returns:
        a scalar.
    """
    steps = len(trajectory.actions)
    b, k = weight.shape
    device = weight.device
    active = weight != 0  # [B, K]
    if steps == 0 or not bool(active.any()):
        # Nothing carries weight: a zero that still reaches the parameters, so that
        # backward() and the optimiser step behave as for any other batch.
        return (cache.embeddings.sum() * 0.0).to(weight.dtype)
    r = max(int(active.sum(-1).max()), 1)
    if r == k:
        rollout_index = None
        row_weight = weight
    else:  # active rollouts first; padding rows (weight 0) after them
        rollout_index = torch.argsort((~active).to(torch.uint8), dim=1, stable=True)[:, :r]
        row_weight = weight.gather(1, rollout_index)
        rollout_rows = (rollout_index + torch.arange(b, device=device).unsqueeze(1) * k).flatten()

    def per_decision(values: list[Tensor]) -> Tensor:
        """``[B, K, ...]`` per step -> ``[B, R * T, ...]`` over the kept rollouts."""
        if rollout_index is not None:
            values = [
                v.flatten(0, 1).index_select(0, rollout_rows).view(b, r, *v.shape[2:])
                for v in values
            ]
        return torch.stack(values, dim=2).flatten(1, 2)

    masks = per_decision([step.mask for step in trajectory.inputs])  # [B, R*T, N]
    decision_weight = row_weight.repeat_interleave(steps, dim=1)
    decision_weight = decision_weight * (masks.sum(-1) > 1).to(weight.dtype)
    contributing = decision_weight != 0
    m = max(int(contributing.sum(-1).max()), 1)
    order = torch.argsort((~contributing).to(torch.uint8), dim=1, stable=True)[:, :m]
    flat_order = (order + torch.arange(b, device=device).unsqueeze(1) * r * steps).flatten()

    def packed(values: list[Tensor] | Tensor) -> Tensor:
        """Per-step ``[B, K, ...]`` (or ``[B, R*T, ...]``) -> ``[B, M, ...]``."""
        flat = values if isinstance(values, Tensor) else per_decision(values)
        return flat.flatten(0, 1).index_select(0, flat_order).view(b, m, *flat.shape[2:])

    inputs = trajectory.inputs
    table = None
    if inputs[0].table is not None:
        # Tables are feature-major underneath ([B, K, F, N]); pack them that way.
        table = packed([step.table.transpose(-1, -2) for step in inputs]).transpose(-1, -2)
    decisions = StepInputs(
        current=packed([step.current for step in inputs]),
        scalars=packed([step.scalars for step in inputs]),
        mask=packed(masks),
        first=None if inputs[0].first is None else packed([step.first for step in inputs]),
        table=table,
    )
    z = None
    if trajectory.z is not None:
        z = packed([trajectory.z] * steps)
    scores = policy.scores(decisions, cache, z, trajectory.has_depot)
    if trajectory.morph_base_scores is not None:
        base = packed(trajectory.morph_base_scores)
        scores = base + trajectory.morph_lambda * (scores - base)
    log_probs = policy.log_probs(scores, decisions.mask)
    action = packed(trajectory.actions)
    chosen = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)  # [B, M]
    return (packed(decision_weight) * chosen).sum()


__all__ = ["replay_log_likelihood"]
