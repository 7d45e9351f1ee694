"""What the policy, its choice rule and the replay share: the encoded batch, a decision's
inputs, the record of a rollout's decisions, and the part of a policy they call.

``LincPolicy`` (``policy``) implements :class:`ScoringPolicy`; ``PolicyChooser``
(``decisions``) and the replay (``replay``) are written against the protocol, so the three
modules import this one and never each other in a circle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

import torch
from torch import Tensor

from linc_core.model.decoder import DecoderCache
from linc_core.problems.protocol import RolloutState, RoutingEnv

if TYPE_CHECKING:
    from linc_core.config import ModelConfig
    from linc_core.instances import Instance


class Encoded(NamedTuple):
    """What ``LincPolicy.encode`` computes once per instance batch.

    Attributes:
        cache: the decoder's per-instance projections.
        time_scale: ``[B]`` what elapsed time is divided by for the decoder context.
    """

    cache: DecoderCache
    time_scale: Tensor


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

    The decision states are kept rather than the step inputs: a state holds a few ``[B, K, N]``
    tensors where the consequence table alone is ``[B, K, N, F]``, and the replay recomputes
    the inputs of the decisions it needs only (``linc_core.model.replay``).

    Attributes:
        env: the environment the rollouts were decoded in (it computes the step inputs).
        time_scale: ``[B]`` the decoder's time scale (``LincPolicy.encode``).
        states: per step t, the decision state the action was chosen in.
        actions: per step t, ``[B, K]`` the chosen action.
        morph_base_scores: per step t, ``[B, K, N]`` the frozen policy's scores u_0 that score
            morphing starts from (None without morphing).
        z: ``[B, K, z_dim]`` or None.
        has_depot: node 0 is a depot.
        morph_lambda: the morphing weight used while sampling (None without morphing).
    """

    env: RoutingEnv
    time_scale: Tensor
    states: list[RolloutState]
    actions: list[Tensor]
    morph_base_scores: list[Tensor] | None
    z: Tensor | None
    has_depot: bool
    morph_lambda: float | None


class ScoringPolicy(Protocol):
    """What a choice rule and the replay call on a policy (``LincPolicy`` is one)."""

    config: ModelConfig

    def encode(self, instance: Instance) -> Encoded: ...

    def step_inputs(
        self, env: RoutingEnv, state: RolloutState, time_scale: Tensor, dtype: torch.dtype
    ) -> StepInputs: ...

    def scores(
        self, inputs: StepInputs, cache: DecoderCache, z: Tensor | None, has_depot: bool
    ) -> Tensor: ...

    def step_scores(
        self,
        env: RoutingEnv,
        state: RolloutState,
        cache: DecoderCache,
        time_scale: Tensor,
        z: Tensor | None,
    ) -> Tensor: ...

    def log_probs(self, scores: Tensor, mask: Tensor) -> Tensor: ...


def morph_scores(base: Tensor, scores: Tensor, morph_lambda: float) -> Tensor:
    """Score morphing (paper eq. 10): ``u_ref + lambda (u - u_ref)``, ``base`` = u_ref, the
    frozen reference policy's scores of the same states; the one form the choice rule
    (``decisions``) and the training replay (``replay``) use."""
    return base + morph_lambda * (scores - base)


__all__ = ["Encoded", "ScoringPolicy", "StepInputs", "Trajectory", "morph_scores"]
