"""The verifier's checks: route format, each customer once, capacity, time windows and
the depot's due time, recomputed in numpy float64 (see :mod:`linc_core.verify`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from linc_core.problems.spec import problem_spec
from linc_core.verify.conventions import edge_lengths, exceeds
from linc_core.verify.results import VerifyResult, Violation

if TYPE_CHECKING:
    from linc_core.instances import Instance


def _as_int_node(raw: object) -> int | None:
    """The node id as a Python int, or None when it is not an integer value."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | np.integer):
        return int(raw)
    if isinstance(raw, float | np.floating) and float(raw).is_integer():
        return int(raw)
    return None


def _normalise_routes(routes: object, problem: str) -> list[list[object]]:
    """Lists of raw node ids; a TSP tour given flat is wrapped into one route."""
    if isinstance(routes, np.ndarray):
        routes = routes.tolist()
    if not isinstance(routes, Sequence):
        raise ValueError(f"routes must be a list of routes, got {type(routes).__name__}.")
    as_lists = list(routes)
    if problem == "tsp" and not as_lists:
        return [[]]  # an empty tour: every city is reported missing
    if problem == "tsp" and all(_as_int_node(x) is not None for x in as_lists):
        return [as_lists]
    out: list[list[object]] = []
    for route in as_lists:
        if isinstance(route, np.ndarray):
            route = route.tolist()
        if not isinstance(route, Sequence):
            raise ValueError(f"each route must be a list of node ids, got {route!r}.")
        out.append(list(route))
    return out


def verify_routes(
    routes: Sequence[Sequence[int]] | Sequence[int],
    locs: np.ndarray,
    *,
    problem: str = "cvrptw",
    demand: np.ndarray | None = None,
    capacity: float | None = None,
    time_windows: np.ndarray | None = None,
    service_time: np.ndarray | None = None,
    travel_time_scale: float = 1.0,
    convention: str = "exact",
) -> VerifyResult:
    """Check a solution and compute its cost, collecting every violation.

    Args:
        routes: CVRP/CVRPTW: list of routes of customer ids ``1..N-1`` (depot implicit).
            TSP: ``[tour]`` with all city ids ``0..N-1`` (a flat tour is accepted too).
        locs: ``[N, 2]`` coordinates; node 0 is the depot for CVRP/CVRPTW.
        problem: ``"cvrptw"``, ``"cvrp"`` or ``"tsp"``.
        demand: ``[N]`` raw demands (required for CVRP/CVRPTW; the depot's is ignored).
        capacity: vehicle capacity (required for CVRP/CVRPTW).
        time_windows: ``[N, 2]`` ``[ready, due]`` (CVRPTW only; row 0's due is the horizon;
            ``None`` skips every time check).
        service_time: ``[N]`` service durations (CVRPTW; zeros when omitted).
        travel_time_scale: travel time = edge length x this factor.
        convention: one of ``CONVENTIONS``; applies to both cost and travel time.

    Returns:
        The cost, the violations found and the number of non-empty routes.
    """
    if problem not in ("tsp", "cvrp", "cvrptw"):
        raise ValueError(f"Unknown problem {problem!r}; expected 'tsp', 'cvrp' or 'cvrptw'.")
    lengths = edge_lengths(locs, convention)
    num_nodes = lengths.shape[0]
    route_lists = _normalise_routes(routes, problem)
    if problem == "tsp":
        return _verify_tsp(route_lists, lengths, num_nodes)

    if demand is None or capacity is None:
        raise ValueError(f"verify_routes(problem={problem!r}) needs demand and capacity.")
    demand_arr = np.asarray(demand, dtype=np.float64).reshape(-1)
    if demand_arr.shape[0] != num_nodes:
        raise ValueError(f"demand has {demand_arr.shape[0]} entries for {num_nodes} nodes.")
    timed = problem == "cvrptw" and time_windows is not None
    windows = np.asarray(time_windows, dtype=np.float64) if timed else None
    if windows is not None and windows.shape != (num_nodes, 2):
        raise ValueError(f"time_windows must have shape {(num_nodes, 2)}, got {windows.shape}.")
    service = (
        np.zeros(num_nodes)
        if service_time is None
        else np.asarray(service_time, dtype=np.float64).reshape(-1)
    )
    return _verify_vehicle_routes(
        route_lists,
        lengths,
        demand_arr,
        float(capacity),
        windows,
        service,
        float(travel_time_scale),
    )


def _verify_tsp(
    route_lists: list[list[object]], lengths: np.ndarray, num_nodes: int
) -> VerifyResult:
    if len(route_lists) != 1:
        raise ValueError(f"A TSP solution is one tour, got {len(route_lists)} routes.")
    violations: list[Violation] = []
    tour: list[int] = []
    seen: set[int] = set()
    for raw in route_lists[0]:
        node = _as_int_node(raw)
        if node is None or not 0 <= node < num_nodes:
            violations.append(
                Violation("unknown_node", 0, node, f"city id {raw!r} is not in 0..{num_nodes - 1}")
            )
            continue
        if node in seen:
            violations.append(Violation("duplicate", 0, node, f"city {node} visited again"))
            continue
        seen.add(node)
        tour.append(node)
    for node in range(num_nodes):
        if node not in seen:
            violations.append(Violation("missing", None, node, f"city {node} is never visited"))
    cost = 0.0
    if len(tour) > 1:
        order = np.asarray(tour)
        cost = float(lengths[order, np.roll(order, -1)].sum())
    return VerifyResult(cost=cost, violations=tuple(violations), num_routes=1)


def _verify_vehicle_routes(
    route_lists: list[list[object]],
    lengths: np.ndarray,
    demand: np.ndarray,
    capacity: float,
    windows: np.ndarray | None,
    service: np.ndarray,
    travel_time_scale: float,
) -> VerifyResult:
    num_nodes = lengths.shape[0]
    violations: list[Violation] = []
    visited: set[int] = set()
    total_cost = 0.0
    used_routes = 0
    for route_index, route in enumerate(route_lists):
        customers: list[int] = []
        for raw in route:
            node = _as_int_node(raw)
            if node is None or not 1 <= node < num_nodes:
                why = "the depot is implicit" if node == 0 else f"not in 1..{num_nodes - 1}"
                violations.append(
                    Violation("unknown_node", route_index, node, f"node id {raw!r}: {why}")
                )
                continue
            if node in visited:
                violations.append(
                    Violation("duplicate", route_index, node, f"customer {node} served again")
                )
            visited.add(node)
            customers.append(node)
        if not customers:
            violations.append(
                Violation("empty_route", route_index, None, "route visits no customer")
            )
            continue
        used_routes += 1
        stops = np.asarray([0, *customers, 0])
        total_cost += float(lengths[stops[:-1], stops[1:]].sum())

        load = float(demand[customers].sum())
        if exceeds(load, capacity):
            violations.append(
                Violation("capacity", route_index, None, f"load {load:g} > capacity {capacity:g}")
            )
        if windows is not None:
            violations.extend(
                _schedule_violations(
                    route_index, customers, lengths, windows, service, travel_time_scale
                )
            )
    for node in range(1, num_nodes):
        if node not in visited:
            violations.append(Violation("missing", None, node, f"customer {node} is never served"))
    return VerifyResult(cost=total_cost, violations=tuple(violations), num_routes=used_routes)


def _schedule_violations(
    route_index: int,
    customers: list[int],
    lengths: np.ndarray,
    windows: np.ndarray,
    service: np.ndarray,
    travel_time_scale: float,
) -> list[Violation]:
    """Walk one route in time from the depot at t = 0 and report late arrivals."""
    found: list[Violation] = []
    clock = 0.0
    previous = 0
    for node in customers:
        arrival = clock + lengths[previous, node] * travel_time_scale
        ready, due = windows[node]
        if exceeds(arrival, due):
            found.append(
                Violation(
                    "time_window",
                    route_index,
                    node,
                    f"arrival {arrival:.6f} at customer {node} after due {due:g}",
                )
            )
        clock = max(arrival, ready) + service[node]
        previous = node
    back = clock + lengths[previous, 0] * travel_time_scale
    depot_due = windows[0, 1]
    if exceeds(back, depot_due):
        found.append(
            Violation(
                "depot_due",
                route_index,
                0,
                f"return to depot at {back:.6f} after depot due {depot_due:g}",
            )
        )
    return found


def verify_instance(
    instance: Instance,
    index: int,
    routes: Sequence[Sequence[int]] | Sequence[int],
    convention: str = "exact",
) -> VerifyResult:
    """Check ``routes`` against row ``index`` of an :class:`Instance` batch, by the rule of
    the instance's problem (its spec's ``verify``: :func:`verify_tour`,
    :func:`verify_capacitated` or :func:`verify_timed` for the built-in problems).

    The instance's tensors are copied to numpy float64; for exact results read benchmark
    files in float64 (the readers' default), since float32 cannot hold every TSPLIB
    coordinate exactly.

    Args:
        instance: the batch (``problem`` decides which constraints apply).
        index: the batch row.
        routes: as in :func:`verify_routes`.
        convention: one of ``CONVENTIONS`` (see :func:`convention_for`).
    """
    return problem_spec(instance.problem).verify(instance, index, routes, convention)


def instance_row(instance: Instance, index: int, name: str) -> np.ndarray:
    """Field ``name`` of row ``index`` as numpy float64 (what a rule reads)."""
    return getattr(instance, name)[index].detach().cpu().double().numpy()


def verify_tour(
    instance: Instance, index: int, routes: object, convention: str = "exact"
) -> VerifyResult:
    """One closed tour over every city (TSP's rule)."""
    locs = instance_row(instance, index, "locs")
    return verify_routes(routes, locs, problem="tsp", convention=convention)  # type: ignore[arg-type]


def verify_capacitated(
    instance: Instance, index: int, routes: object, convention: str = "exact"
) -> VerifyResult:
    """Depot routes serving each customer once within the capacity (CVRP's rule)."""
    return _vehicle_routes(instance, index, routes, convention, timed=False)


def verify_timed(
    instance: Instance, index: int, routes: object, convention: str = "exact"
) -> VerifyResult:
    """Depot routes within the capacity, the time windows and the depot's due (CVRPTW's)."""
    return _vehicle_routes(instance, index, routes, convention, timed=True)


def _vehicle_routes(
    instance: Instance, index: int, routes: object, convention: str, *, timed: bool
) -> VerifyResult:
    def row(name: str) -> np.ndarray:
        return instance_row(instance, index, name)

    return verify_routes(
        routes,  # type: ignore[arg-type]
        row("locs"),
        problem="cvrptw" if timed else "cvrp",
        demand=row("demand"),
        capacity=float(row("capacity")),
        time_windows=row("time_windows") if timed else None,
        service_time=row("service_time") if timed else None,
        travel_time_scale=float(row("travel_time_scale")),
        convention=convention,
    )


__all__ = [
    "instance_row",
    "verify_capacitated",
    "verify_instance",
    "verify_routes",
    "verify_timed",
    "verify_tour",
]
