"""How a problem's depot, clients and vehicles enter a PyVRP model: the specs' ``pyvrp_fleet``
(:func:`tour_fleet` for TSP, :func:`vehicle_fleet` for CVRP and CVRPTW), with the integer rounding
of windows, service times and loads they share with the model builder
(:func:`linc_core.evaluate.pyvrp_solver.build_model`, whose docstring states the rounding rules
and why they are safe). A fleet receives the ``pyvrp.Model`` and calls its methods; this module
never imports PyVRP, so reading a spec does not load it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from linc_core.instances import Instance

DEMAND_SCALE = 1000
"""Factor applied to demands and capacity when any of them is fractional."""

# Allowed float noise, in scaled integer units, before a ceiling or a floor moves a whole unit.
# Products of up to ~1e8 carry noise below 1e-8; at scale 1000 the slack is 1e-10 of a time
# unit per edge, far inside the verifier's 1e-9 relative tolerance.
ROUNDING_SLACK = 1e-7


# ---------------------------------------------------------------------------- rounding
def round_nearest(values: np.ndarray) -> np.ndarray:
    return np.rint(values).astype(np.int64)


def round_up(values: np.ndarray) -> np.ndarray:
    return np.ceil(values - ROUNDING_SLACK).astype(np.int64)


def ceil_scaled(value: float, factor: int) -> int:
    return math.ceil(value * factor - ROUNDING_SLACK)


def floor_scaled(value: float, factor: int) -> int:
    return math.floor(value * factor + ROUNDING_SLACK)


def scaled_window(ready: float, due: float, scale: int) -> dict[str, int]:
    """PyVRP ``tw_early``/``tw_late`` keywords for ``[ready, due]``, narrowed inwards.

    An infinite due time is left out so that PyVRP keeps its own "no deadline" default.
    """
    window = {"tw_early": ceil_scaled(ready, scale)}
    if math.isfinite(due):
        window["tw_late"] = floor_scaled(due, scale)
    return window


def load_data(demand: np.ndarray, capacity: float) -> tuple[list[int], int | None]:
    """Integer demands per node and the capacity (``None`` when unbounded)."""
    bounded = math.isfinite(capacity)
    values = np.append(demand, capacity) if bounded else demand
    if np.all(values == np.round(values)):
        return [int(d) for d in np.round(demand)], round(capacity) if bounded else None
    # Fractional loads: demand up, capacity down, so any load PyVRP accepts truly fits.
    scaled_demand = [ceil_scaled(float(d), DEMAND_SCALE) for d in demand]
    return scaled_demand, floor_scaled(capacity, DEMAND_SCALE) if bounded else None


# ---------------------------------------------------------------------------- fleets
def tour_fleet(
    model: Any, locations: list[Any], instance: Instance, index: int, scale: int
) -> None:
    """One vehicle without a load dimension: the tour leaves city 0 (the depot) and comes back
    to it; every other city is a client."""
    model.add_depot(locations[0])
    for node in range(1, instance.num_nodes):
        model.add_client(locations[node], name=str(node))
    model.add_vehicle_type(num_available=1, unit_distance_cost=1, unit_duration_cost=0)


def vehicle_fleet(
    model: Any,
    locations: list[Any],
    instance: Instance,
    index: int,
    scale: int,
    **vehicle_options: Any,
) -> None:
    """The depot (node 0, its window the horizon), every customer with its demand, window and
    service, and as many vehicles as customers, so that the fleet never limits the
    distance-only search; ``vehicle_options`` go to ``add_vehicle_type`` (e.g. a route's
    ``max_distance``)."""
    demand = instance.demand[index].double().cpu().numpy()
    windows = instance.time_windows[index].double().cpu().numpy()
    service = instance.service_time[index].double().cpu().numpy()
    node_demand, node_capacity = load_data(demand, float(instance.capacity[index]))
    horizon = scaled_window(float(windows[0, 0]), float(windows[0, 1]), scale)
    depot = model.add_depot(
        locations[0], service_duration=ceil_scaled(float(service[0]), scale), **horizon
    )
    for node in range(1, instance.num_nodes):
        model.add_client(
            locations[node],
            delivery=[node_demand[node]] if node_capacity is not None else [],
            service_duration=ceil_scaled(float(service[node]), scale),
            name=str(node),
            **scaled_window(float(windows[node, 0]), float(windows[node, 1]), scale),
        )
    model.add_vehicle_type(
        num_available=instance.num_customers,
        capacity=[node_capacity] if node_capacity is not None else [],
        start_depot=depot,
        end_depot=depot,
        unit_distance_cost=1,
        unit_duration_cost=0,
        **horizon,
        **vehicle_options,
    )


__all__ = [
    "DEMAND_SCALE",
    "ROUNDING_SLACK",
    "ceil_scaled",
    "floor_scaled",
    "load_data",
    "round_nearest",
    "round_up",
    "scaled_window",
    "tour_fleet",
    "vehicle_fleet",
]
