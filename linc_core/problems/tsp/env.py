"""TSP: closed tours, batched over ``[B, K]``.

Observations:
    current city, first city, visited cities, feasibility mask over the N cities.
Constraints:
    every city once; the first move is free (or forced by a multi-start decoder).
Termination:
    all cities visited; the tour closes back to its first city (that leg is added on the last
    visit). Finished rollouts may pad with any action: it changes nothing.
Reward:
    ``-(closed tour length)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from linc_core.instances import Instance
from linc_core.problems.base import (
    angle_difference_norm,
    bind_instance,
    euclidean_distances,
    gather_nodes,
    gather_pairs,
    gather_rows,
)
from linc_core.problems.protocol import DecoderContext, RolloutState


@dataclass(slots=True)
class TSPState(RolloutState):
    """Decision state before the next action (``current``, ``mask``, ``finished`` and
    ``length`` as in ``RolloutState``; ``current`` is meaningless before the first move).

    Attributes:
        first: ``[B, K]`` long, the start city (meaningless before the first move).
        visited: ``[B, K, N]`` bool. num_visited: ``[B, K]`` long.
    """

    first: Tensor
    visited: Tensor
    num_visited: Tensor


class TSPEnv:
    """Batched TSP environment (see module docstring).

    Args:
        instance: a ``tsp`` ``Instance`` batch.
        num_rollouts: K.
    """

    # The consequence table's columns, in order; the angle is an absolute direction, the
    # others differences of one-step outcomes (centring them is meaningful).
    feature_names: tuple[str, ...] = ("travel", "dist_to_start", "dist_to_centroid", "angle")
    relative_features: tuple[str, ...] = ("travel", "dist_to_start", "dist_to_centroid")

    def __init__(self, instance: Instance, num_rollouts: int):
        bind_instance(self, instance, num_rollouts, needs_depot=False)
        self.max_steps = self.num_nodes
        self.distance = euclidean_distances(instance.locs)
        self.feature_distance_scale = self.distance.flatten(1).amax(1).clamp_min(1e-12)
        centroid = instance.locs.mean(1, keepdim=True)  # [B, 1, 2]
        rel = instance.locs - centroid
        self.centroid_distance = rel.square().sum(-1).sqrt()  # [B, N]
        self.centroid_angle = torch.atan2(rel[..., 1], rel[..., 0])  # [B, N]

    def reset(self) -> TSPState:
        b, k, n = self.batch_size, self.num_rollouts, self.num_nodes
        dev, dtype = self.distance.device, self.distance.dtype
        zeros = torch.zeros(b, k, dtype=torch.long, device=dev)
        return TSPState(
            current=zeros,
            first=zeros,
            visited=torch.zeros(b, k, n, dtype=torch.bool, device=dev),
            num_visited=zeros,
            mask=torch.ones(b, k, n, dtype=torch.bool, device=dev),
            finished=torch.zeros(b, k, dtype=torch.bool, device=dev),
            length=torch.zeros(b, k, dtype=dtype, device=dev),
        )

    def step(self, state: TSPState, action: Tensor) -> TSPState:
        """Move every unfinished rollout to ``action`` (``[B, K]`` long)."""
        active = ~state.finished
        started = state.num_visited > 0
        first = torch.where(started, state.first, action)
        leg = gather_pairs(self.distance, state.current, action) * (started & active)
        num_visited = state.num_visited + active.long()
        finished = num_visited == self.num_nodes
        closing = gather_pairs(self.distance, action, first) * (finished & active)
        current = torch.where(active, action, state.current)
        visited = state.visited.scatter(-1, current.unsqueeze(-1), True)
        # The first city is visited, so its mask entry is free to carry the one harmless
        # action a finished tour keeps (samplers never see an all-false row).
        mask = (~visited).scatter_(-1, first.unsqueeze(-1), finished.unsqueeze(-1))
        return TSPState(
            current=current,
            first=first,
            visited=visited,
            num_visited=num_visited,
            mask=mask,
            finished=finished,
            length=state.length + leg + closing,
        )

    def consequences(self, state: TSPState) -> Tensor:
        """Candidate consequence table over all cities.

        Features (``feature_names`` order), distances over the instance's max distance:
        travel from the current city, distance back to the start city, distance to the
        centroid, and ``|wrap(theta_k - theta_current)| / pi`` about the centroid. Before the
        first move every feature is 0.

        Returns:
            ``[B, K, N, 4]``.
        """
        scale = self.feature_distance_scale.view(-1, 1, 1)
        started = (state.num_visited > 0).unsqueeze(-1)
        travel = gather_rows(self.distance, state.current) / scale
        to_start = gather_rows(self.distance, state.first) / scale
        to_centroid = (self.centroid_distance.unsqueeze(1) / scale).expand_as(travel)
        current_angle = gather_nodes(self.centroid_angle, state.current).unsqueeze(-1)
        angle = angle_difference_norm(self.centroid_angle.unsqueeze(1), current_angle)
        table = torch.stack([travel, to_start, to_centroid, angle], dim=-1)
        return table * started.unsqueeze(-1)

    def decisions_left(self, state: TSPState) -> Tensor:
        """``[B, K]`` long lower bound on the decisions to finish: one per unvisited city (the
        closing leg is no decision)."""
        return self.num_nodes - state.num_visited

    def decoder_context(self, state: TSPState) -> DecoderContext:
        """The current and the first city (the decoder's query reads both)."""
        return DecoderContext(current=state.current, first=state.first)
