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

    def step_scores(
        self, env: object, state: object, cache: DecoderCache, time_scale: Tensor, z: Tensor | None
    ) -> Tensor:
        """Raw scores u ``[B, K, N]`` at ``state`` (before clipping and masking)."""
        problem = self.config.problem
        first = None
        if problem == "cvrptw":
            scalars = torch.stack([state.load, state.time / time_scale.unsqueeze(1)], dim=-1)
        elif problem == "cvrp":
            scalars = state.load.unsqueeze(-1)
        else:
            scalars = state.length.new_zeros(*state.current.shape, 0)
            first = state.first
        dtype = cache.embeddings.dtype
        context = self.decoder(cache, state.current, scalars.to(dtype), state.mask, z, first)
        table = env.consequences(state) if self.config.uses_candidate_features else None
        return self.scorer(context, cache.embeddings, table, state.mask, env.instance.has_depot)

    def log_probs(self, scores: Tensor, mask: Tensor) -> Tensor:
        """``C * tanh(u / sqrt(d))``, masked, log-softmax over nodes: ``[B, K, N]``."""
        logits = self.config.logit_clip * torch.tanh(scores * self.score_scale)
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
        """
        if instance.problem != self.config.problem:
            raise ValueError(f"model is for {self.config.problem}, got a {instance.problem} batch")
        if rows is not None and rows.size != instance.batch_size:
            raise ValueError(f"rows {rows} do not match a batch of {instance.batch_size}")
        env = make_env(instance, num_rollouts, **(env_kwargs or {}))
        cache, time_scale = self.encode(instance)
        if morph is not None:
            reference, morph_lambda = morph
            with torch.no_grad():
                reference_cache, reference_scale = reference.encode(instance)
        state = env.reset()
        b, k = state.current.shape
        if instance.problem == "tsp" and starts is None:
            starts = torch.zeros(b, k, dtype=torch.long, device=instance.device)
        actions: list[Tensor] = []
        log_likelihood = torch.zeros(b, k, dtype=cache.embeddings.dtype, device=instance.device)
        if starts is not None:
            # A forced move has probability 1 and adds nothing to the log-likelihood.
            actions.append(starts)
            state = env.step(state, starts)
        for _ in range(env.max_steps):
            if bool(state.finished.all()):
                break
            scores = self.step_scores(env, state, cache, time_scale, z)
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
            state = env.step(state, action)
        if not bool(state.finished.all()):
            raise RuntimeError("rollout did not finish within the environment's step bound")
        return RolloutResult(
            actions=torch.stack(actions, dim=-1),
            log_likelihood=log_likelihood,
            cost=state.cost,
            steps=len(actions),
        )
