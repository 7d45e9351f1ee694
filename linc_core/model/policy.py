"""The constructive policy: encoder, decoder context, candidate scorer, and the rollout loop.

A rollout batch is B instances x K rollouts. The encoder runs once per instance; every decoder
step works on ``[B, K, ...]`` tensors with no Python loop over batch or nodes. Rollout k of an
instance is conditioned on its own z-vector (PolyNet) or starts at its own first customer
(POMO multi-start).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from linc_core.config import ModelConfig
from linc_core.instances import Instance
from linc_core.model.decoder import Decoder, DecoderCache
from linc_core.model.encoder import Encoder
from linc_core.model.features import node_inputs
from linc_core.model.scorer import CandidateScorer
from linc_core.problems import make_env

Decoding = Literal["sample", "greedy"]


@dataclass
class RolloutResult:
    """Outcome of decoding B instances x K rollouts.

    Attributes:
        actions: ``[B, K, T]`` chosen nodes (after the forced depot start; padded).
        log_likelihood: ``[B, K]`` sum of log-probabilities of the chosen actions.
        cost: ``[B, K]`` total Euclidean distance.
        steps: T.
    """

    actions: Tensor
    log_likelihood: Tensor
    cost: Tensor
    steps: int
    trajectory: Trajectory | None = None


@dataclass(frozen=True)
class StepInputs:
    """What the decoder and the scorer read from a decision state.

    Attributes:
        current: ``[B, K]`` node the vehicle stands on.
        scalars: ``[B, K, S]`` load / time context inputs (S = 2, 1, 0 for CVRPTW, CVRP, TSP).
        mask: ``[B, K, N]`` bool feasibility.
        first: ``[B, K]`` start city (TSP) or None.
        table: ``[B, K, N, F]`` consequence table (None when the scorer reads none).
    """

    current: Tensor
    scalars: Tensor
    mask: Tensor
    first: Tensor | None
    table: Tensor | None


@dataclass
class Trajectory:
    """A rollout's decision steps, kept so that log-probabilities can be recomputed later.

    Attributes:
        inputs: per step t, the step's ``StepInputs``.
        actions: per step t, ``[B, K]`` the sampled action.
        reference_scores: per step t, ``[B, K, N]`` the morphing reference's scores (or None).
        z: ``[B, K, z_dim]`` or None.
        has_depot: node 0 is a depot.
        morph_lambda: the morphing weight used while sampling (None without morphing).
    """

    inputs: list[StepInputs]
    actions: list[Tensor]
    reference_scores: list[Tensor] | None
    z: Tensor | None
    has_depot: bool
    morph_lambda: float | None


def sample_z(
    batch: int,
    num_rollouts: int,
    z_dim: int,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> Tensor:
    """Distinct binary z-vectors per instance, drawn uniformly without replacement.

    Returns:
        ``[B, K, z_dim]`` float in {0, 1}; rows of an instance are pairwise different.
    """
    pool = 2**z_dim
    if num_rollouts > pool:
        raise ValueError(f"cannot draw {num_rollouts} distinct z from 2^{z_dim} vectors")
    # The K smallest of pool uniform keys form a uniform K-subset.
    keys = torch.rand(batch, pool, generator=generator, device=device)
    index = keys.topk(num_rollouts, dim=-1, largest=False).indices  # [B, K]
    bits = torch.arange(z_dim - 1, -1, -1, device=device)
    return ((index.unsqueeze(-1) >> bits) & 1).float()


@dataclass(frozen=True)
class BatchRows:
    """Rows ``[start, stop)`` of a batch of ``total`` instances (a data-parallel worker's share).

    Random draws meant for the whole batch are made for all ``total`` rows and then sliced to
    these rows, so the rollouts of a global instance do not depend on how the batch is split.
    """

    start: int
    stop: int
    total: int

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.stop <= self.total:
            raise ValueError(
                f"rows [{self.start}, {self.stop}) are not a non-empty part of {self.total}"
            )

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def index(self) -> slice:
        return slice(self.start, self.stop)


def sample_from_log_probs(
    log_probs: Tensor, generator: torch.Generator | None, rows: BatchRows | None = None
) -> Tensor:
    """Inverse-CDF sampling; an action of probability 0 is never drawn.

    Args:
        log_probs: ``[B, K, N]``.
        rows: when the B instances are rows of a larger batch, the uniforms are drawn for
            ``[rows.total, K, 1]`` and sliced, consuming ``generator`` as the whole batch would.

    Returns:
        ``[B, K]`` long.
    """
    cdf = log_probs.exp().cumsum(-1)
    shape = cdf.shape[:-1] + (1,)
    if rows is not None:
        shape = (rows.total,) + shape[1:]
    u = torch.rand(shape, generator=generator, device=cdf.device, dtype=cdf.dtype)
    if rows is not None:
        u = u[rows.index]
    index = (cdf <= u * cdf[..., -1:]).sum(-1)
    return index.clamp_max(log_probs.shape[-1] - 1)


class LincPolicy(nn.Module):
    """Encoder + decoder + scorer for one problem (``config.problem``)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.scorer = CandidateScorer(config)
        self.score_scale = 1.0 / math.sqrt(config.embedding_dim)

    # ------------------------------------------------------------------ pieces
    def encode(self, instance: Instance) -> tuple[DecoderCache, Tensor]:
        """(decoder cache, ``[B]`` time scale of the decoder's time input)."""
        inputs = node_inputs(instance, self.config)
        embeddings = self.encoder(inputs)
        return self.decoder.precompute(embeddings), inputs.time_scale

    def step_inputs(
        self, env: object, state: object, time_scale: Tensor, dtype: torch.dtype
    ) -> StepInputs:
        """The decoder and scorer inputs at ``state`` (the one place they are read from it)."""
        problem = self.config.problem
        first = None
        if problem == "cvrptw":
            scalars = torch.stack([state.load, state.time / time_scale.unsqueeze(1)], dim=-1)
        elif problem == "cvrp":
            scalars = state.load.unsqueeze(-1)
        else:
            scalars = state.length.new_zeros(*state.current.shape, 0)
            first = state.first
        table = env.consequences(state) if self.config.uses_candidate_features else None
        return StepInputs(state.current, scalars.to(dtype), state.mask, first, table)

    def scores(
        self, inputs: StepInputs, cache: DecoderCache, z: Tensor | None, has_depot: bool
    ) -> Tensor:
        """Raw scores u ``[B, K, N]`` (before clipping and masking)."""
        context = self.decoder(cache, inputs.current, inputs.scalars, inputs.mask, z, inputs.first)
        return self.scorer(context, cache.embeddings, inputs.table, inputs.mask, has_depot)

    def step_scores(
        self, env: object, state: object, cache: DecoderCache, time_scale: Tensor, z: Tensor | None
    ) -> Tensor:
        """Raw scores u ``[B, K, N]`` at ``state`` (before clipping and masking)."""
        inputs = self.step_inputs(env, state, time_scale, cache.embeddings.dtype)
        return self.scores(inputs, cache, z, env.instance.has_depot)

    def log_probs(self, scores: Tensor, mask: Tensor) -> Tensor:
        """``C * tanh(u / sqrt(d))``, masked, log-softmax over nodes: ``[B, K, N]``.

        Computed as ``2C sigmoid(2u / sqrt(d))``: ``C tanh(x) = 2C sigmoid(2x) - C`` and the
        softmax ignores the constant, so the log-probabilities are the same function, and
        sigmoid is several times faster than tanh on CPU.
        """
        clip = self.config.logit_clip
        logits = torch.sigmoid(scores * (2.0 * self.score_scale)) * (2.0 * clip)
        return logits.masked_fill(~mask, float("-inf")).log_softmax(-1)

    # ------------------------------------------------------------------ rollouts
    def rollout(
        self,
        instance: Instance,
        num_rollouts: int,
        *,
        z: Tensor | None = None,
        starts: Tensor | None = None,
        decoding: Decoding = "sample",
        generator: torch.Generator | None = None,
        env_kwargs: dict | None = None,
        morph: tuple[LincPolicy, float] | None = None,
        rows: BatchRows | None = None,
        encoded: tuple[DecoderCache, Tensor] | None = None,
        keep_trajectory: bool = False,
    ) -> RolloutResult:
        """Decode B instances x K rollouts to completion.

        Args:
            instance: batch of B instances (``instance.problem == config.problem``).
            num_rollouts: K.
            z: ``[B, K, z_dim]`` z-vectors (required when ``config.z_dim > 0``).
            starts: ``[B, K]`` forced first customer (POMO multi-start) or first city (TSP;
                default city 0).
            decoding: ``sample`` or ``greedy``.
            generator: random stream for sampling.
            morph: ``(reference policy, lambda)``: score morphing
                ``u = u_ref + lambda (u - u_ref)`` toward a frozen reference policy (paper
                section 3.4; the reference sees the same states and z).
            rows: ``instance`` is these rows of a larger batch (data-parallel training): the
                sampling noise is drawn for the whole batch and sliced, so each instance's
                rollouts are those it would get in the whole batch.
            encoded: ``encode(instance)`` when the caller already has it.
            keep_trajectory: return the decision steps (``RolloutResult.trajectory``) for
                ``weighted_log_likelihood``.
        """
        if instance.problem != self.config.problem:
            raise ValueError(f"model is for {self.config.problem}, got a {instance.problem} batch")
        if rows is not None and rows.size != instance.batch_size:
            raise ValueError(f"rows {rows} do not match a batch of {instance.batch_size}")
        env = make_env(instance, num_rollouts, **(env_kwargs or {}))
        cache, time_scale = self.encode(instance) if encoded is None else encoded
        if morph is not None:
            reference, morph_lambda = morph
            with torch.no_grad():
                reference_cache, reference_scale = reference.encode(instance)
        state = env.reset()
        b, k = state.current.shape
        if instance.problem == "tsp" and starts is None:
            starts = torch.zeros(b, k, dtype=torch.long, device=instance.device)
        trajectory = None
        if keep_trajectory:
            trajectory = Trajectory(
                inputs=[],
                actions=[],
                reference_scores=[] if morph is not None else None,
                z=z,
                has_depot=instance.has_depot,
                morph_lambda=morph_lambda if morph is not None else None,
            )
        actions: list[Tensor] = []
        dtype = cache.embeddings.dtype
        log_likelihood = torch.zeros(b, k, dtype=dtype, device=instance.device)
        if starts is not None:
            # A forced move has probability 1 and adds nothing to the log-likelihood.
            actions.append(starts)
            state = env.step(state, starts)
        for _ in range(env.max_steps):
            if bool(state.finished.all()):
                break
            inputs = self.step_inputs(env, state, time_scale, dtype)
            scores = self.scores(inputs, cache, z, instance.has_depot)
            if morph is not None:
                with torch.no_grad():
                    base = reference.step_scores(env, state, reference_cache, reference_scale, z)
                scores = base + morph_lambda * (scores - base)
            log_probs = self.log_probs(scores, state.mask)
            if decoding == "greedy":
                action = log_probs.argmax(-1)
            else:
                action = sample_from_log_probs(log_probs.detach(), generator, rows)
            # Finished rollouts have one feasible action (log-prob 0): no masking needed.
            log_likelihood = log_likelihood + log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
            actions.append(action)
            if trajectory is not None:
                trajectory.inputs.append(inputs)
                trajectory.actions.append(action)
                if trajectory.reference_scores is not None:
                    trajectory.reference_scores.append(base)
            state = env.step(state, action)
        if not bool(state.finished.all()):
            raise RuntimeError("rollout did not finish within the environment's step bound")
        return RolloutResult(
            actions=torch.stack(actions, dim=-1),
            log_likelihood=log_likelihood,
            cost=state.cost,
            steps=len(actions),
            trajectory=trajectory,
        )

    def weighted_log_likelihood(
        self, trajectory: Trajectory, cache: DecoderCache, weight: Tensor
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
            trajectory: from ``rollout(..., keep_trajectory=True)`` with this policy's weights.
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
            rollout_rows = (
                rollout_index + torch.arange(b, device=device).unsqueeze(1) * k
            ).flatten()

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
        scores = self.scores(decisions, cache, z, trajectory.has_depot)
        if trajectory.reference_scores is not None:
            base = packed(trajectory.reference_scores)
            scores = base + trajectory.morph_lambda * (scores - base)
        log_probs = self.log_probs(scores, decisions.mask)
        action = packed(trajectory.actions)
        chosen = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)  # [B, M]
        return (packed(decision_weight) * chosen).sum()
