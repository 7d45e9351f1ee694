"""The environment protocol every routing problem implements, and its typed state.

A routing environment decodes B instances x K rollouts in lock-step. ``reset`` gives the decision
state after the forced depot start (TSP: before the first city); ``step`` is pure and returns the
next state with its feasibility mask; ``consequences`` is the LINC candidate table of a state;
``decoder_context`` is what the decoder's query reads from it; ``decisions_left`` bounds how
soon a rollout can finish. The rollout engine
(``linc_core.problems.rollout``) drives any such environment with any choice rule.

Each problem's consequence feature names are its environment's ``feature_names`` (the table's
columns, in order), read through its spec (:mod:`linc_core.problems.spec`): the model configs
select from them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Protocol, Self, TypeVar

import torch
from torch import Tensor

from linc_core.problems.spec import CONSEQUENCE_FEATURES, RELATIVE_FEATURES


@dataclass(slots=True)
class RolloutState:
    """What every problem's decision state holds; each problem adds its own fields.

    Every tensor field is ``[B, K, ...]`` (instances x rollouts), which is what lets the
    engine select, repeat and merge rollouts without knowing the problem.

    Attributes:
        current: ``[B, K]`` long, the node the rollout stands on.
        mask: ``[B, K, N]`` bool, True = feasible next action.
        finished: ``[B, K]`` bool.
        length: ``[B, K]`` distance driven so far (the cost once finished).
    """

    current: Tensor
    mask: Tensor
    finished: Tensor
    length: Tensor

    @property
    def cost(self) -> Tensor:
        """``[B, K]`` total distance (complete once ``finished``)."""
        return self.length

    def select(self, index: Tensor) -> Self:
        """The state of rollouts ``index`` (``[B, K']`` long) of every instance."""
        rows = torch.arange(index.shape[0], device=index.device).unsqueeze(1)
        return replace(self, **{f.name: getattr(self, f.name)[rows, index] for f in fields(self)})

    def rollout_range(self, start: int, stop: int) -> Self:
        """Rollouts ``start .. stop - 1`` of every instance (views, no copy)."""
        return replace(self, **{f.name: getattr(self, f.name)[:, start:stop] for f in fields(self)})

    def repeat(self, times: int) -> Self:
        """Each rollout repeated ``times`` times in place: ``[B, K] -> [B, K * times]``."""
        b, k = self.current.shape
        index = torch.arange(k, device=self.current.device).repeat_interleave(times)
        return self.select(index.expand(b, -1))

    def where(self, take: Tensor, other: Self) -> Self:
        """Rollout-wise ``self if take else other`` (equal shapes; ``take`` ``[B, K]`` bool)."""
        merged = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            condition = take.view(*take.shape, *([1] * (mine.dim() - 2)))
            merged[f.name] = torch.where(condition, mine, theirs)
        return replace(self, **merged)


StateT = TypeVar("StateT", bound=RolloutState)


@dataclass(frozen=True, slots=True)
class DecoderContext:
    """The state variables the decoder's query reads (reference section 1.2).

    Attributes:
        current: ``[B, K]`` long, the node the rollout stands on.
        first: ``[B, K]`` long, the tour's first city (TSP), else None.
        load: ``[B, K]`` remaining load as a fraction of capacity (CVRP, CVRPTW), else None.
        elapsed: ``[B, K]`` route time in travel-time units (CVRPTW), else None; the model
            scales it as it scales the instance's times.
    """

    current: Tensor
    first: Tensor | None = None
    load: Tensor | None = None
    elapsed: Tensor | None = None


class RoutingEnv(Protocol[StateT]):
    """A batched environment for B instances x K rollouts (see the module docstring).

    Attributes:
        instance: the ``Instance`` batch (B instances, N nodes).
        num_rollouts: K.
        max_steps: a bound on the decisions after ``reset`` that any rollout needs to finish.
        feature_names: the columns of ``consequences`` (the spec's ``consequence_features``).
        relative_features: those that are differences of one-step outcomes.
    """

    instance: Any
    batch_size: int
    num_rollouts: int
    num_nodes: int
    max_steps: int
    feature_names: tuple[str, ...]
    relative_features: tuple[str, ...]

    def reset(self) -> StateT: ...

    def step(self, state: StateT, action: Tensor) -> StateT: ...

    def consequences(self, state: StateT) -> Tensor: ...

    def decoder_context(self, state: StateT) -> DecoderContext: ...

    def decisions_left(self, state: StateT) -> Tensor:
        """``[B, K]`` long: a lower bound on the decisions each rollout still needs to finish,
        0 exactly when it has finished (the rollout engine reads it to know when to look)."""
        ...


__all__ = [
    "CONSEQUENCE_FEATURES",
    "RELATIVE_FEATURES",
    "DecoderContext",
    "RolloutState",
    "RoutingEnv",
    "StateT",
]
