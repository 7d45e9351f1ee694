"""CVRP: capacitated vehicle routing, batched over ``[B, K]``.

Observations:
    current node, remaining load (fraction of capacity), visited customers, feasibility mask
    over ``[depot, customers]``.
Constraints:
    each customer once; feasible only if ``demand/capacity <= load + 1e-5``; the depot is
    masked only while the vehicle stands on it, and unmasked whenever nothing else is feasible.
Transition:
    serving a customer subtracts its demand fraction; the depot refills the load to 1. The
    first move to the depot is forced (``reset`` returns the state at the depot).
Termination:
    all customers served and the vehicle back at the depot; finished rollouts pad with 0.
Reward:
    ``-(total Euclidean distance)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from linc_core.instances import Instance
from linc_core.problems.base import (
    CAPACITY_EPS,
    angle_difference_norm,
    bind_instance,
    depot_angles,
    depot_decisions_left,
    euclidean_distances,
    gather_nodes,
    gather_pairs,
    gather_rows,
)
from linc_core.problems.protocol import DecoderContext, RolloutState


@dataclass(slots=True)
class CVRPState(RolloutState):
    """Decision state before the next action (the common fields as in ``RolloutState``).

    Attributes:
        load: ``[B, K]``. visited: ``[B, K, N]`` bool (depot False). num_visited: ``[B, K]``.
        servable_left: ``[B, K]`` unvisited customers that fit in an empty vehicle (see
        ``CVRPTWState``).
    """

    load: Tensor
    visited: Tensor
    num_visited: Tensor
    servable_left: Tensor


class CVRPEnv:
    """Batched CVRP environment (see module docstring).

    Args:
        instance: a ``cvrp`` ``Instance`` batch, node 0 the depot.
        num_rollouts: K.
    """

    # The consequence table's columns, in order; the angle is an absolute direction, the
    # others differences of one-step outcomes (centring them is meaningful).
    feature_names: tuple[str, ...] = (
        "travel",
        "demand_ratio",
        "load_after",
        "dist_to_depot",
        "angle",
    )
    relative_features: tuple[str, ...] = ("travel", "demand_ratio", "load_after", "dist_to_depot")

    def __init__(self, instance: Instance, num_rollouts: int):
        bind_instance(self, instance, num_rollouts, needs_depot=True)
        self.max_steps = 2 * self.num_customers
        self.distance = euclidean_distances(instance.locs)
        self.demand_fraction = instance.demand / instance.capacity.unsqueeze(-1)
        self.demand_fraction[:, 0] = 0.0
        self.servable_from_depot = self.demand_fraction <= 1.0 + CAPACITY_EPS  # [B, N]
        self.servable_from_depot[:, 0] = False
        # floored as TSP's is: an instance whose nodes all coincide has no distance to scale by
        self.feature_distance_scale = self.distance.flatten(1).amax(1).clamp_min(1e-12)  # [B]
        self.node_angle = depot_angles(instance.locs, instance.locs[:, 0])
        self.node_angle[:, 0] = 0.0

    def reset(self) -> CVRPState:
        b, k, n = self.batch_size, self.num_rollouts, self.num_nodes
        dev, dtype = self.distance.device, self.distance.dtype
        return self._decision_state(
            current=torch.zeros(b, k, dtype=torch.long, device=dev),
            load=torch.ones(b, k, dtype=dtype, device=dev),
            visited=torch.zeros(b, k, n, dtype=torch.bool, device=dev),
            num_visited=torch.zeros(b, k, dtype=torch.long, device=dev),
            servable_left=self.servable_from_depot.sum(-1, keepdim=True).expand(b, k).clone(),
            length=torch.zeros(b, k, dtype=dtype, device=dev),
        )

    def step(self, state: CVRPState, action: Tensor) -> CVRPState:
        """Move every rollout to ``action`` (``[B, K]`` long)."""
        to_depot = action == 0
        load = (state.load - gather_nodes(self.demand_fraction, action)).masked_fill(to_depot, 1.0)
        visited = state.visited.scatter(-1, action.unsqueeze(-1), ~to_depot.unsqueeze(-1))
        return self._decision_state(
            current=action,
            load=load,
            visited=visited,
            num_visited=state.num_visited + (~to_depot).long(),
            servable_left=state.servable_left
            - gather_nodes(self.servable_from_depot, action).long(),
            length=state.length + gather_pairs(self.distance, state.current, action),
        )

    def _decision_state(
        self,
        current: Tensor,
        load: Tensor,
        visited: Tensor,
        num_visited: Tensor,
        servable_left: Tensor,
        length: Tensor,
    ) -> CVRPState:
        at_depot = current == 0
        capacity_margin = (load + CAPACITY_EPS).unsqueeze(-1) - self.demand_fraction.unsqueeze(1)
        feasible = capacity_margin >= 0
        feasible &= ~visited
        feasible[..., 0] = ~at_depot | (servable_left == 0)
        return CVRPState(
            current=current,
            load=load,
            visited=visited,
            num_visited=num_visited,
            servable_left=servable_left,
            mask=feasible,
            finished=at_depot & (num_visited == self.num_customers),
            length=length,
        )

    def consequences(self, state: CVRPState) -> Tensor:
        """Candidate consequence table over all nodes (depot row included).

        Features (``feature_names`` order): distance / max instance distance, demand / capacity,
        load after serving (1 for the depot), depot distance / max distance, and
        ``|wrap(theta_k - theta_current)| / pi`` about the depot.

        Returns:
            ``[B, K, N, 5]``.
        """
        scale = self.feature_distance_scale.view(-1, 1, 1)
        travel = gather_rows(self.distance, state.current) / scale
        demand = self.demand_fraction.unsqueeze(1).expand_as(travel)
        load_after = state.load.unsqueeze(-1) - demand
        load_after[..., 0] = 1.0
        to_depot = (self.distance[:, 0] / scale.squeeze(-1)).unsqueeze(1).expand_as(travel)
        current_angle = gather_nodes(self.node_angle, state.current).unsqueeze(-1)
        angle = angle_difference_norm(self.node_angle.unsqueeze(1), current_angle)
        return torch.stack([travel, demand, load_after, to_depot, angle], dim=-1)

    def decisions_left(self, state: CVRPState) -> Tensor:
        """``[B, K]`` long lower bound on the decisions to finish (``depot_decisions_left``)."""
        return depot_decisions_left(self.num_customers, state.num_visited, state.finished)

    def decoder_context(self, state: CVRPState) -> DecoderContext:
        """The current node and the remaining load."""
        return DecoderContext(current=state.current, load=state.load)
