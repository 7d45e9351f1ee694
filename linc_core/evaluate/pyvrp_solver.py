"""PyVRP solutions, re-scored by the project's own verifier.

``solve_with_pyvrp`` turns one row of an :class:`~linc_core.instances.Instance` batch into a
PyVRP ``Model``, runs PyVRP's iterated local search for a fixed time, and hands the routes to
:func:`linc_core.verify.verify_instance`. The verifier's cost is the one reported; PyVRP's own
objective is kept only as a cross-check.

Objective. Total distance only: every vehicle has unit distance cost 1 and unit duration cost
0, and there are as many vehicles as customers, so the fleet size is free. Edge durations are
still set, so time windows bind. This matches the distance-only best-known values of the
Solomon/Homberger tables (DIMACS convention) and the usual CVRPLIB/TSPLIB objectives.

Integer scaling. PyVRP only takes integers, so every length and time is multiplied by an
integer ``scale`` and rounded. The edge *length* first follows the cost convention, computed by
the verifier's own :func:`linc_core.verify.edge_lengths` so that model and re-scoring agree:

- ``dimacs``: Euclidean length truncated to one decimal. With the default ``scale = 10`` the
  truncated length times 10 is an integer, so the model is exact.
- ``tsplib`` / ``cvrplib``: Euclidean length rounded to the nearest integer (``nint``);
  default ``scale = 1``, again exact.
- ``exact``: float Euclidean length; default ``scale = 1000``. Rounding can no longer be exact,
  and a schedule that is feasible on rounded numbers could then miss a window by a hair under
  float verification. The rounding is therefore made conservative (see below) so that every
  schedule PyVRP accepts stays feasible in exact arithmetic.

Rounding rules, applied under every convention (they are no-ops when values are already exact
multiples of ``1 / scale``):

- edge distance = nearest integer of ``length x scale`` (it only affects the objective, which
  the verifier recomputes anyway);
- edge duration = ceiling of ``length x travel_time_scale x scale``;
- ready time and service time: ceiling; due time (and the depot's horizon): floor.

Why this is safe: with durations and service times rounded up and ready times rounded up,
PyVRP's arrival time at every stop is, by induction along the route, never earlier than the
true arrival time times ``scale``; with due times rounded down, PyVRP accepting the arrival
means the true arrival is within the true window. (The verifier starts every route at time 0
and ignores the depot's ready and service times; the model keeps them, which is only stricter.)
Demands and capacity are integers in every
benchmark; fractional ones are scaled by ``DEMAND_SCALE`` with demand rounded up and capacity
rounded down for the same reason. The depot, clients and vehicles of each problem, and these
roundings, are :mod:`linc_core.problems.pyvrp_fleets`'.

A tiny tolerance (``ROUNDING_SLACK``, in scaled units) is taken off before a ceiling and added
before a floor so that float noise such as ``30.000000000000004`` does not cost a whole unit.

The command line ``linc-solve`` is :mod:`linc_core.commands.solve`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from pyvrp import Model
from pyvrp.stop import MaxRuntime

from linc_core.instances import Instance
from linc_core.problems.pyvrp_fleets import round_nearest, round_up
from linc_core.problems.spec import problem_spec
from linc_core.verify import (
    CONVENTIONS,
    VerifyResult,
    edge_lengths,
    verify_instance,
)

DEFAULT_SCALE: dict[str, int] = {"exact": 1000, "dimacs": 10, "tsplib": 1, "cvrplib": 1}
"""Integer factor applied to lengths and times when ``scale`` is not given."""

MAX_SEED = 2**32 - 1
"""PyVRP's random seed is a 32-bit unsigned integer: ``0`` to this."""


class PyVRPError(RuntimeError):
    """PyVRP returned no feasible solution, or the input cannot be modelled."""


@dataclass(frozen=True)
class PyVRPSolution:
    """A PyVRP solution of one instance, scored by the project's verifier.

    Attributes:
        routes: Customer ids per route, depot (node 0) left out; for TSP a single tour of
            city ids starting at city 0.
        cost: Total cost under ``convention`` as computed by ``linc_core.verify``.
        pyvrp_objective: PyVRP's own objective divided by ``scale`` (same units as ``cost``;
            equal to it up to rounding under ``exact``).
        runtime: Wall-clock seconds, model building and solving included.
        num_routes: Number of non-empty routes.
        verify: The verifier's full result (violations included).
        convention: Cost convention the solution was built and scored under.
        scale: Integer factor used for lengths and times in the PyVRP model.
        seed: PyVRP random seed.
        name: Instance name, when the batch carries names.
    """

    routes: list[list[int]]
    cost: float
    pyvrp_objective: float
    runtime: float
    num_routes: int
    verify: VerifyResult
    convention: str
    scale: int
    seed: int
    name: str | None = None

    @property
    def feasible(self) -> bool:
        """Whether the verifier found no violation."""
        return bool(self.verify.feasible)


# ---------------------------------------------------------------------------- model
def build_model(
    instance: Instance, index: int = 0, *, convention: str = "exact", scale: int | None = None
) -> Model:
    """The PyVRP model of row ``index`` of ``instance`` under ``convention``.

    Node ``k`` of the instance becomes PyVRP location ``k``, with every edge between them; the
    problem's spec adds the depot, clients and vehicles (``pyvrp_fleet``: node 0 is the depot;
    for TSP, city 0 acts as the depot of a single vehicle). See the module docstring for the
    scaling, and :mod:`linc_core.problems.pyvrp_fleets` for the built-in fleets.

    Args:
        instance: Batch of instances.
        index: Row of the batch to model.
        convention: Cost convention that defines edge lengths.
        scale: Integer factor for lengths and times; :data:`DEFAULT_SCALE` when ``None``.

    Returns:
        A ready-to-solve ``pyvrp.Model``.

    Raises:
        ValueError: Unknown convention, bad scale, index out of range or too few nodes.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"Unknown convention {convention!r}; expected one of {CONVENTIONS}.")
    scale = DEFAULT_SCALE[convention] if scale is None else int(scale)
    if scale < 1:
        raise ValueError(f"scale must be a positive integer, got {scale}.")
    if not 0 <= index < instance.batch_size:
        raise ValueError(f"index {index} out of range for a batch of {instance.batch_size}.")
    if instance.num_nodes < 2:
        raise ValueError(f"Need at least two nodes to route, got {instance.num_nodes}.")

    locs = instance.locs[index].double().cpu().numpy()
    alpha = float(instance.travel_time_scale[index])

    # The verifier's own length function, so model and re-scoring cannot disagree on an edge.
    lengths = edge_lengths(locs, convention)
    distances = round_nearest(lengths * scale)
    durations = round_up(lengths * alpha * scale)

    model = Model()
    locations = [model.add_location(float(x), float(y)) for x, y in locs]

    fleet = problem_spec(instance.problem).pyvrp_fleet
    if fleet is None:
        raise ValueError(
            f"problem {instance.problem!r} has no PyVRP model (its spec's pyvrp_fleet)"
        )
    fleet(model, locations, instance, index, scale)

    for frm, frm_location in enumerate(locations):
        for to, to_location in enumerate(locations):
            if frm != to:
                model.add_edge(
                    frm_location,
                    to_location,
                    distance=int(distances[frm, to]),
                    duration=int(durations[frm, to]),
                )
    return model


# ---------------------------------------------------------------------------- solve
def solve_with_pyvrp(
    instance: Instance,
    index: int = 0,
    *,
    seconds: float,
    seed: int = 0,
    convention: str = "exact",
    scale: int | None = None,
) -> PyVRPSolution:
    """Solve row ``index`` of ``instance`` with PyVRP and verify the result.

    Args:
        instance: Batch of TSP, CVRP or CVRPTW instances.
        index: Row of the batch to solve.
        seconds: PyVRP time limit (wall clock of the search itself).
        seed: PyVRP random seed.
        convention: Cost convention for the model's edge lengths and for the verifier:
            ``exact``, ``dimacs``, ``tsplib`` or ``cvrplib``.
        scale: Integer factor for lengths and times; :data:`DEFAULT_SCALE` when ``None``.

    Returns:
        The routes, the verifier's cost and result, PyVRP's objective and the runtime. A
        solution that the verifier rejects is returned (``feasible`` is ``False``), not raised.

    Raises:
        PyVRPError: PyVRP found no feasible solution within ``seconds``.
        ValueError: Bad arguments (see :func:`build_model`).
    """
    # nan passes "seconds <= 0" and an inf (or nan) budget never stops the search
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"seconds: expected a finite number > 0, got {seconds}")
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed: expected an integer from 0 to {MAX_SEED}, got {seed}")
    effective_scale = DEFAULT_SCALE.get(convention, 1) if scale is None else int(scale)
    started = time.perf_counter()
    model = build_model(instance, index, convention=convention, scale=effective_scale)
    result = model.solve(stop=MaxRuntime(seconds), seed=seed, display=False)
    runtime = time.perf_counter() - started

    name = instance.names[index] if instance.names is not None else None
    if not result.is_feasible():
        label = f"instance {name!r}" if name else f"row {index}"
        raise PyVRPError(
            f"PyVRP found no feasible solution for {label} in {seconds:g} s "
            f"(convention {convention!r}, scale {effective_scale}); try more seconds."
        )

    routes = [
        [activity.idx + 1 for activity in route if activity.is_client()]
        for route in result.best.routes()
    ]
    routes = [route for route in routes if route]
    if not instance.has_depot:
        # PyVRP's client k sits on city k + 1 and the tour starts at city 0 (the depot).
        routes = [[0, *routes[0]]] if routes else [[0]]

    verified = verify_instance(instance, index, routes, convention=convention)
    return PyVRPSolution(
        routes=routes,
        cost=float(verified.cost),
        pyvrp_objective=float(result.cost()) / effective_scale,
        runtime=runtime,
        num_routes=len(routes),
        verify=verified,
        convention=convention,
        scale=effective_scale,
        seed=seed,
        name=name,
    )
