"""The constructive policy: encoder, decoder context, candidate scorer.

A rollout batch is B instances x K rollouts. The encoder runs once per instance; every decoder
step works on ``[B, K, ...]`` tensors with no Python loop over batch or nodes. Rollout k of an
instance is conditioned on its own z-vector (PolyNet) or starts at its own first customer
(POMO multi-start). Decoding itself is the rollout engine's (``linc_core.problems.rollout``) with
the policy as its choice rule (``linc_core.model.decisions``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from linc_core.config import ModelConfig
from linc_core.instances import Instance
from linc_core.model.decisions import PolicyChooser
from linc_core.model.decoder import Decoder, DecoderCache
from linc_core.model.encoder import Encoder
from linc_core.model.feasible_set import mask_offsets
from linc_core.model.features import node_inputs
from linc_core.model.replay import replay_log_likelihood
from linc_core.model.sampling import greedy, keyed_sampler, rollout_keys
from linc_core.model.scorer import CandidateScorer
from linc_core.model.types import Encoded, StepInputs, Trajectory
from linc_core.problems import make_env
from linc_core.problems.protocol import RolloutState, RoutingEnv
from linc_core.problems.rollout import complete_rollouts, start_rollouts

Decoding = Literal["sample", "greedy"]


@dataclass
class RolloutResult:
    """Outcome of decoding B instances x K rollouts.

    Attributes:
        actions: ``[B, K, T]`` chosen nodes (after the forced depot start; padded).
        log_likelihood: ``[B, K]`` sum of log-probabilities of the chosen actions.
        cost: ``[B, K]`` total Euclidean distance.
        steps: T.
        trajectory: the decisions, when asked for (``LincPolicy.weighted_log_likelihood``).
    """

    actions: Tensor
    log_likelihood: Tensor
    cost: Tensor
    steps: int
    trajectory: Trajectory | None = None


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
    def encode(self, instance: Instance) -> Encoded:
        """The decoder cache and the decoder's time scale of an instance batch."""
        inputs = node_inputs(instance, self.config)
        embeddings = self.encoder(inputs)
        return Encoded(self.decoder.precompute(embeddings), inputs.time_scale)

    def step_inputs(
        self, env: RoutingEnv, state: RolloutState, time_scale: Tensor, dtype: torch.dtype
    ) -> StepInputs:
        """The decoder and scorer inputs at ``state`` (the one place they are read from it)."""
        context = env.decoder_context(state)
        columns = []
        if context.load is not None:
            columns.append(context.load)
        if context.elapsed is not None:
            columns.append(context.elapsed / time_scale.unsqueeze(1))
        if columns:
            scalars = torch.stack(columns, dim=-1).to(dtype)
        else:
            scalars = torch.zeros(*context.current.shape, 0, dtype=dtype, device=state.mask.device)
        table = env.consequences(state) if self.config.uses_candidate_features else None
        return StepInputs(context.current, scalars, state.mask, context.first, table)

    def scores(
        self, inputs: StepInputs, cache: DecoderCache, z: Tensor | None, has_depot: bool
    ) -> Tensor:
        """Raw scores u ``[B, K, N]`` (before clipping and masking)."""
        context = self.decoder(cache, inputs.current, inputs.scalars, inputs.mask, z, inputs.first)
        return self.scorer(context, cache.embeddings, inputs.table, inputs.mask, has_depot)

    def step_scores(
        self,
        env: RoutingEnv,
        state: RolloutState,
        cache: DecoderCache,
        time_scale: Tensor,
        z: Tensor | None,
    ) -> Tensor:
        """Raw scores u ``[B, K, N]`` at ``state`` (before clipping and masking)."""
        inputs = self.step_inputs(env, state, time_scale, cache.embeddings.dtype)
        return self.scores(inputs, cache, z, env.instance.has_depot)

    def log_probs(self, scores: Tensor, mask: Tensor) -> Tensor:
        """``C * tanh(u / sqrt(d))``, masked, log-softmax over nodes: ``[B, K, N]``.

        Computed as ``2C sigmoid(2u / sqrt(d))``: ``C tanh(x) = 2C sigmoid(2x) - C`` and the
        softmax ignores the constant, so the log-probabilities are the same function, and
        sigmoid is several times faster than tanh on CPU. The mask is added as a 0 / -inf row
        (``mask_offsets``): the same values as a masked fill, in half the time on CPU.
        """
        clip = self.config.logit_clip
        logits = torch.sigmoid(scores * (2.0 * self.score_scale)) * (2.0 * clip)
        return (logits + mask_offsets(mask, logits.dtype)).log_softmax(-1)

    # ------------------------------------------------------------------ rollouts
    def rollout(
        self,
        instance: Instance,
        num_rollouts: int,
        *,
        z: Tensor | None = None,
        starts: Tensor | None = None,
        decoding: Decoding = "sample",
        sample_seeds: Tensor | None = None,
        env_kwargs: dict | None = None,
        morph: tuple[LincPolicy, float] | None = None,
        encoded: Encoded | None = None,
        keep_trajectory: bool = False,
        compiled: bool = False,
    ) -> RolloutResult:
        """Decode B instances x K rollouts to completion, accumulating their log-likelihood.

        Args:
            instance: batch of B instances (``instance.problem == config.problem``).
            num_rollouts: K.
            z: ``[B, K, z_dim]`` z-vectors (required when ``config.z_dim > 0``).
            starts: ``[B, K]`` forced first customer (POMO multi-start) or first city (TSP;
                default city 0).
            decoding: ``sample`` or ``greedy``.
            sample_seeds: ``[B]`` int64 row seeds of the sampling draws (``decoding="sample"``;
                ``linc_core.model.sampling.row_seeds``): rollout k of row b draws from
                ``(sample_seeds[b], k, step)`` alone, on any device and any split of the batch.
            morph: ``(frozen policy, lambda)``: score morphing ``u = u_0 + lambda (u - u_0)``
                from a frozen policy's scores u_0 (paper section 3.4; it sees the same states
                and z).
            encoded: ``encode(instance)`` when the caller already has it.
            keep_trajectory: return the decision steps (``RolloutResult.trajectory``) for
                ``weighted_log_likelihood``.
            compiled: the decision step under ``torch.compile`` (``PolicyChooser``).
        """
        if instance.problem != self.config.problem:
            raise ValueError(f"model is for {self.config.problem}, got a {instance.problem} batch")
        env = make_env(instance, num_rollouts, **(env_kwargs or {}))
        pick = greedy
        if decoding == "sample":
            if sample_seeds is None:
                raise ValueError("rollout: decoding='sample' needs sample_seeds")
            pick = keyed_sampler(rollout_keys(sample_seeds, 0, num_rollouts))
        chooser = PolicyChooser(
            self,
            env,
            self.encode(instance) if encoded is None else encoded,
            z,
            pick,
            morph=morph,
            keep_trajectory=keep_trajectory,
            compiled=compiled,
        )
        state, prefix = start_rollouts(env, starts)
        final, actions = complete_rollouts(env, chooser, state, transition=chooser.transition)
        actions = torch.cat([prefix, actions], dim=-1)
        return RolloutResult(
            actions=actions,
            log_likelihood=chooser.log_likelihood,
            cost=final.cost,
            steps=actions.shape[-1],
            trajectory=chooser.trajectory,
        )

    def weighted_log_likelihood(
        self, trajectory: Trajectory, cache: DecoderCache, weight: Tensor
    ) -> Tensor:
        """``sum_{b,k} weight_bk * log p(rollout_bk)`` recomputed with gradients from a
        trajectory sampled without them (``linc_core.model.replay``).

        Args:
            trajectory: from ``rollout(..., keep_trajectory=True)`` with this policy's weights.
            cache: the decoder cache the trajectory was sampled with (built with gradients).
            weight: ``[B, K]``.

        Returns:
            a scalar.
        """
        return replay_log_likelihood(self, trajectory, cache, weight)


__all__ = ["Decoding", "LincPolicy", "RolloutResult"]
