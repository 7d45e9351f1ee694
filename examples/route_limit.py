"""An extra problem, defined outside linc_core and joined through its spec alone: CVRP with a
route-length limit (``cvrp_route_limit``). The tutorial "Add a problem" and
tests/linc_core/problems/test_extra_problem.py register it, train, decode, verify and solve it
with PyVRP.

Every route, depot to depot, is at most ``max_route_length`` long: a per-instance field the
problem adds to the ``Instance`` (the spec's ``extra_fields``, stored in ``Instance.extras`` and in
Parquet). What it adds to CVRP:

- state: ``route_length``, the distance driven since the route left the depot;
- mask: a customer ``k`` is feasible only if ``route_length + d(current, k) + d(k, depot)``
  is within the limit (``+ 1e-6``), so every route can still go home;
- consequence feature: ``route_slack``, the limit left after visiting ``k`` and going home, over
  the limit (relative: it may be centred); the decoder reads the route length as its elapsed
  scalar;
- generator: uniform CVRP (Kool et al.) with a limit 1.2 x the longest round trip to one
  customer, at least 1 (it binds: a CVRP route of the same instances is often longer);
- data check: the loads', and every customer reachable alone within the limit;
- verifier rule: CVRP's, and every route's length within the limit (violation ``route_length``);
- PyVRP: CVRP's fleet with the vehicles' ``max_distance``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from linc_core.instances import Instance, InstanceError
from linc_core.instances.validation import check_loads, row_values
from linc_core.problems.base import gather_nodes, gather_pairs, gather_rows
from linc_core.problems.cvrp import CVRP, CVRPEnv, CVRPState, generate_cvrp
from linc_core.problems.protocol import DecoderContext
from linc_core.problems.pyvrp_fleets import floor_scaled, vehicle_fleet
from linc_core.problems.spec import ProblemSpec
from linc_core.verify import Violation, edge_lengths
from linc_core.verify.checks import instance_row, verify_capacitated
from linc_core.verify.conventions import exceeds

NAME = "cvrp_route_limit"
LIMIT = "max_route_length"
LIMIT_EPS = 1e-6


@dataclass(slots=True)
class RouteLimitState(CVRPState):
    """CVRP's state and ``route_length`` ``[B, K]``: the distance since the depot."""

    route_length: Tensor


class RouteLimitEnv(CVRPEnv):
    """CVRP whose routes stay within ``instance.extras["max_route_length"]`` ``[B]``."""

    feature_names = (*CVRPEnv.feature_names, "route_slack")
    relative_features = (*CVRPEnv.relative_features, "route_slack")

    def __init__(self, instance: Instance, num_rollouts: int):
        super().__init__(instance, num_rollouts)
        self.limit = instance.extras[LIMIT].to(self.distance.dtype)  # [B]
        self.home = self.distance[:, :, 0]  # [B, N] d(k, depot)
        alone = self.distance[:, 0] + self.home <= (self.limit + LIMIT_EPS).unsqueeze(-1)
        self.servable_from_depot &= alone

    def step(self, state: RouteLimitState, action: Tensor) -> RouteLimitState:  # type: ignore[override]
        """CVRP's step, with the route length driven (0 again at the depot)."""
        to_depot = action == 0
        leg = gather_pairs(self.distance, state.current, action)
        load = (state.load - gather_nodes(self.demand_fraction, action)).masked_fill(to_depot, 1.0)
        visited = state.visited.scatter(-1, action.unsqueeze(-1), ~to_depot.unsqueeze(-1))
        return self._decision_state(
            current=action,
            load=load,
            visited=visited,
            num_visited=state.num_visited + (~to_depot).long(),
            servable_left=state.servable_left
            - gather_nodes(self.servable_from_depot, action).long(),
            length=state.length + leg,
            route_length=(state.route_length + leg).masked_fill(to_depot, 0.0),
        )

    def _reach(self, current: Tensor, route_length: Tensor) -> Tensor:
        """``[B, K, N]`` the route's length once it has visited each node and gone home."""
        return route_length.unsqueeze(-1) + gather_rows(self.distance, current) + self.home[:, None]

    def _decision_state(  # type: ignore[override]
        self, *, route_length: Tensor | None = None, **fields: Tensor
    ) -> RouteLimitState:
        base = super()._decision_state(**fields)
        if route_length is None:  # the reset: at the depot, nothing driven
            route_length = torch.zeros_like(base.length)
        within = self._reach(base.current, route_length) <= (self.limit + LIMIT_EPS).view(-1, 1, 1)
        mask = base.mask.clone()
        mask[..., 1:] &= within[..., 1:]  # the depot's rule is CVRP's: it is always in reach
        state = {name: getattr(base, name) for name in CVRPState.__dataclass_fields__}
        return RouteLimitState(**(state | {"mask": mask}), route_length=route_length)

    def consequences(self, state: RouteLimitState) -> Tensor:  # type: ignore[override]
        """CVRP's table and ``route_slack`` ``(limit - reach) / limit``: ``[B, K, N, 6]``."""
        limit = self.limit.view(-1, 1, 1)
        slack = (limit - self._reach(state.current, state.route_length)) / limit
        return torch.cat([super().consequences(state), slack.unsqueeze(-1)], dim=-1)

    def decoder_context(self, state: RouteLimitState) -> DecoderContext:  # type: ignore[override]
        """The current node, the remaining load and the route length (as its elapsed time)."""
        return DecoderContext(current=state.current, load=state.load, elapsed=state.route_length)


def generate(batch: int, num_customers: int, seed: int, options: Any = None) -> Instance:
    """Uniform CVRP instances with a limit 1.2 x the longest round trip, at least 1."""
    instance = generate_cvrp(batch, num_customers, seed)
    round_trip = 2.0 * (instance.locs - instance.locs[:, :1]).norm(dim=-1).amax(1)
    limit = (1.2 * round_trip).clamp_min(1.0)
    return replace(instance, problem=NAME, extras={LIMIT: limit})


def check_data(instance: Instance, row: int, source: str) -> None:
    """CVRP's load checks, and every customer reachable alone within a finite positive limit."""
    check_loads(instance, row, source)
    limit = float(instance.extras[LIMIT][row])
    if not (math.isfinite(limit) and limit > 0):
        raise InstanceError(source, LIMIT, limit, "must be positive and finite")
    locs = row_values(instance, row, "locs")
    round_trip = 2.0 * np.hypot(*(locs[1:] - locs[0]).T)
    far = int(np.argmax(round_trip))
    if round_trip[far] > limit + LIMIT_EPS:
        raise InstanceError(
            source, LIMIT, limit, f"customer {far + 1} is {round_trip[far]:.4f} there and back"
        )


def verify(instance: Instance, index: int, routes: Any, convention: str = "exact") -> Any:
    """CVRP's rule, and every route's length, depot to depot, within the limit."""
    result = verify_capacitated(instance, index, routes, convention)
    lengths = edge_lengths(instance_row(instance, index, "locs"), convention)
    limit = float(instance.extras[LIMIT][index])
    found = []
    for number, route in enumerate(routes):
        stops = [0, *(n for n in route if isinstance(n, int) and 0 < n < len(lengths)), 0]
        driven = float(lengths[stops[:-1], stops[1:]].sum())
        if exceeds(driven, limit):
            found.append(
                Violation("route_length", number, None, f"length {driven:.6f} > limit {limit:g}")
            )
    return replace(result, violations=(*result.violations, *found))


def pyvrp_fleet(
    model: Any, locations: list[Any], instance: Instance, index: int, scale: int
) -> None:
    """CVRP's fleet, each vehicle driving at most the limit. PyVRP's edge distances are rounded
    to the nearest unit; a route has at most N edges, so N units off keeps it within."""
    limit = floor_scaled(float(instance.extras[LIMIT][index]), scale) - instance.num_nodes
    vehicle_fleet(model, locations, instance, index, scale, max_distance=limit)


ROUTE_LIMIT = ProblemSpec(
    name=NAME,
    has_depot=True,
    instance_fields=CVRP.instance_fields,
    extra_fields={LIMIT: 0},
    env=RouteLimitEnv,
    consequence_features=RouteLimitEnv.feature_names,
    relative_features=RouteLimitEnv.relative_features,
    summary=(("mean", "travel"), ("mean", "demand_ratio"), ("min", "route_slack")),
    context_scalars=2,  # the remaining load, the route length
    node_features=CVRP.node_features,
    node_feature_width=CVRP.node_feature_width,
    generate=generate,
    check_data=check_data,
    verify=verify,
    pyvrp_fleet=pyvrp_fleet,
    model_defaults=dict(CVRP.model_defaults)
    | {
        "candidate_features": ("travel", "demand_ratio", "dist_to_depot", "route_slack", "angle"),
        "centred_features": RouteLimitEnv.relative_features,
    },
)
