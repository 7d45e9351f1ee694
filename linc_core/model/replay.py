"""Replay of sampled decisions with gradients: the weighted log-likelihood of a trajectory.

A training step samples its K rollouts without autograd, keeps the decision states
(``Trajectory``), and then recomputes with gradients only the decisions that can move the
gradient: those of rollouts with a non-zero weight (the best-only mask keeps one per instance)
at steps with at least two feasible actions (a forced step has log-probability exactly 0 and no
gradient). The recomputed decisions of instance b are packed as pseudo-rollouts ``[B, M, ...]``
that share its encoder cache, M the largest count over instances (an instance with fewer is
padded with other recorded decisions, weighted 0).

``backward_replay`` recomputes the packed decisions in chunks of at most ``chunk_rollouts x T``
per instance and runs each chunk's backward pass before the next, accumulating the gradient:
peak memory is bounded by the chunk, not by K x T, whatever the credit (dense or best-only).
The chunks meet at the decoder cache, whose gradient is accumulated and sent through the
encoder once. Loss and gradient equal those of weighting ``LincPolicy.rollout``'s
log-likelihood under autograd (tests compare them to 1e-10 in float64).

A chunk's forward pass (``chunk_log_likelihood``) is pure tensor code: ``compiled=True`` runs it
under ``torch.compile`` (``linc_core.utils.compiling``), its backward too (AOT autograd); the
packing around it reads counts from the device and stays eager. The packed width changes from
step to step, so that dimension goes symbolic after the first change (one more compile).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from linc_core.model.decoder import DecoderCache
from linc_core.model.types import ScoringPolicy, Trajectory, morph_scores
from linc_core.problems.packing import first_where
from linc_core.problems.protocol import RolloutState, RoutingEnv
from linc_core.utils.compiling import compile_step, mask_values, read_mask_values


@dataclass(frozen=True)
class PackedDecisions:
    """The decisions a replay recomputes, packed per instance: ``[B, M, ...]``.

    Attributes:
        state: the decision states (every field ``[B, M, ...]``).
        action: ``[B, M]`` the recorded actions.
        weight: ``[B, M]`` the weight of each decision (0 on padding).
        z: ``[B, M, z_dim]`` or None.
        morph_base_scores: ``[B, M, N]`` or None.
    """

    state: RolloutState
    action: Tensor
    weight: Tensor
    z: Tensor | None
    morph_base_scores: Tensor | None

    @property
    def count(self) -> int:
        return self.action.shape[1]


def pack_decisions(trajectory: Trajectory, weight: Tensor) -> PackedDecisions | None:
    """The weighted, unforced decisions of ``trajectory`` packed per instance (None: none).

    Args:
        weight: ``[B, K]`` per-rollout weight.
    """
    steps = len(trajectory.actions)
    b, k = weight.shape
    device = weight.device
    active = weight != 0  # [B, K]
    if steps == 0 or not bool(active.any()):
        return None
    r = max(int(active.sum(-1).max()), 1)
    if r == k:
        rollout_index = None
        row_weight = weight
    else:  # active rollouts first; padding rows (weight 0) after them
        rollout_index = first_where(active, r)
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

    states = trajectory.states
    masks = per_decision([state.mask for state in states])  # [B, R*T, N]
    decision_weight = row_weight.repeat_interleave(steps, dim=1)
    decision_weight = decision_weight * (masks.sum(-1) > 1).to(weight.dtype)
    contributing = decision_weight != 0
    m = max(int(contributing.sum(-1).max()), 1)
    order = first_where(contributing, m)
    flat_order = (order + torch.arange(b, device=device).unsqueeze(1) * r * steps).flatten()

    def packed(values: list[Tensor] | Tensor) -> Tensor:
        """Per-step ``[B, K, ...]`` (or ``[B, R*T, ...]``) -> ``[B, M, ...]``."""
        flat = values if isinstance(values, Tensor) else per_decision(values)
        return flat.flatten(0, 1).index_select(0, flat_order).view(b, m, *flat.shape[2:])

    state = replace(
        states[0],
        **{
            f.name: packed(masks)
            if f.name == "mask"
            else packed([getattr(s, f.name) for s in states])
            for f in fields(states[0])
        },
    )
    base = trajectory.morph_base_scores
    return PackedDecisions(
        state=state,
        action=packed(trajectory.actions),
        weight=packed(decision_weight),
        z=None if trajectory.z is None else packed([trajectory.z] * steps),
        morph_base_scores=None if base is None else packed(base),
    )


def chunk_log_likelihood(
    policy: ScoringPolicy,
    env: RoutingEnv,
    time_scale: Tensor,
    cache: DecoderCache,
    state: RolloutState,
    action: Tensor,
    weight: Tensor,
    z: Tensor | None,
    morph: tuple[Tensor, float] | None,
    mask: Tensor | None = None,
) -> Tensor:
    """``sum weight * log p(action)`` of packed decisions ``[B, M]`` (pure tensor code).

    Args:
        state: the decision states (every field ``[B, M, ...]``); action, weight: ``[B, M]``.
        z: ``[B, M, z_dim]`` or None. morph: (``[B, M, N]`` base scores, lambda) or None.
        mask: ``state.mask`` as 0/1 floats, read in its place (a compiled pass on CPU:
            ``linc_core.utils.compiling.mask_values``); None: ``state.mask``.
    """
    state = read_mask_values(state, mask)
    inputs = policy.step_inputs(env, state, time_scale, cache.embeddings.dtype)
    scores = policy.scores(inputs, cache, z, env.instance.has_depot)
    if morph is not None:
        scores = morph_scores(morph[0], scores, morph[1])
    log_probs = policy.log_probs(scores, state.mask)
    chosen = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
    return (weight * chosen).sum()


def _chunk_sums(
    policy: ScoringPolicy,
    trajectory: Trajectory,
    decisions: PackedDecisions,
    cache: DecoderCache,
    chunk: int,
    compiled: bool = False,
) -> Iterator[Tensor]:
    """``sum weight * log p(action)`` of every chunk of ``chunk`` packed decisions."""
    forward = chunk_log_likelihood
    if compiled:  # the packed width varies: symbolic after its first change
        forward = compile_step(forward, decisions.action.device, dynamic=None, cuda_graphs=False)
    for start in range(0, decisions.count, chunk):
        stop = min(start + chunk, decisions.count)
        morph = None
        if decisions.morph_base_scores is not None:
            morph = (decisions.morph_base_scores[:, start:stop], trajectory.morph_lambda)
        state = decisions.state.rollout_range(start, stop)
        yield forward(
            policy,
            trajectory.env,
            trajectory.time_scale,
            cache,
            state,
            decisions.action[:, start:stop],
            decisions.weight[:, start:stop],
            None if decisions.z is None else decisions.z[:, start:stop],
            morph,
            mask_values(state.mask) if compiled else None,
        )


def _zero(cache: DecoderCache, weight: Tensor) -> Tensor:
    """A zero that still reaches the parameters, so that backward() and the optimiser step
    behave as for any other batch when nothing carries weight."""
    return (cache.embeddings.sum() * 0.0).to(weight.dtype)


def replay_log_likelihood(
    policy: ScoringPolicy, trajectory: Trajectory, cache: DecoderCache, weight: Tensor
) -> Tensor:
    """``sum_{b,k} weight_bk * log p(rollout_bk)``, recomputed (with gradients) in one pass.

    Args:
        policy: the policy the trajectory was sampled with (same weights).
        trajectory: from ``rollout(..., keep_trajectory=True)``.
        cache: the decoder cache the trajectory was sampled with (built with gradients).
        weight: ``[B, K]``.

    Returns:
        a scalar connected to the graph.
    """
    decisions = pack_decisions(trajectory, weight)
    if decisions is None:
        return _zero(cache, weight)
    return next(_chunk_sums(policy, trajectory, decisions, cache, decisions.count))


def at_least_float32(values: Tensor) -> Tensor:
    """``values`` in float32 when half precision (a sum under autocast), else in their own
    dtype: a loss or a credit is never computed below float32, nor below the model's dtype
    (a float64 run keeps float64)."""
    return values.to(torch.promote_types(values.dtype, torch.float32))


def backward_replay(
    policy: ScoringPolicy,
    trajectory: Trajectory,
    cache: DecoderCache,
    weight: Tensor,
    *,
    loss_scale: float,
    chunk_rollouts: int,
    backward: Callable[[Tensor], None] = Tensor.backward,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    compiled: bool = False,
) -> Tensor:
    """Accumulate the gradient of ``loss_scale * sum_{b,k} weight_bk log p(rollout_bk)`` into
    the parameters' ``.grad``, in chunks of bounded memory (module docstring).

    Args:
        cache: the decoder cache the trajectory was sampled with (built with gradients).
        weight: ``[B, K]``.
        loss_scale: the factor of the loss (e.g. ``-1 / (B K)``).
        chunk_rollouts: decisions of at most this many rollouts per instance are recomputed
            at once (``chunk_rollouts x T`` packed decisions); 0 recomputes all at once.
        backward: runs a chunk's backward pass (``lambda loss: scaler.scale(loss).backward()``
            under fp16 mixed precision).
        autocast: the context each chunk's forward pass runs in (mixed precision); backward
            runs outside.
        compiled: each chunk's forward (and backward) pass under ``torch.compile``.

    Returns:
        the detached ``sum weight * log p`` in ``weight``'s dtype.
    """
    names = [f.name for f in fields(cache) if getattr(cache, f.name) is not None]
    leaves = {name: getattr(cache, name).detach().requires_grad_() for name in names}
    leaf_cache = replace(cache, **leaves)
    decisions = pack_decisions(trajectory, weight)
    if decisions is None:
        sums: Iterator[Tensor] = iter([_zero(leaf_cache, weight)])
    else:
        steps = len(trajectory.actions)
        chunk = decisions.count if chunk_rollouts <= 0 else max(1, chunk_rollouts * steps)
        sums = _chunk_sums(policy, trajectory, decisions, leaf_cache, chunk, compiled)
    total = torch.zeros((), dtype=weight.dtype, device=weight.device)
    while True:
        with autocast():
            chunk_sum = next(sums, None)
        if chunk_sum is None:
            break
        backward(at_least_float32(chunk_sum) * loss_scale)
        total = total + chunk_sum.detach().to(weight.dtype)
    # The chunks' gradients met at the cache: one backward pass through the encoder.
    roots = [(getattr(cache, n), leaves[n].grad) for n in names if leaves[n].grad is not None]
    roots = [(tensor, grad) for tensor, grad in roots if tensor.requires_grad]
    if roots:
        torch.autograd.backward([t for t, _ in roots], [g for _, g in roots])
    return total


__all__ = [
    "at_least_float32",
    "PackedDecisions",
    "backward_replay",
    "chunk_log_likelihood",
    "pack_decisions",
    "replay_log_likelihood",
]
