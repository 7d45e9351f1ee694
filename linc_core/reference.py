"""Reference solutions from PyVRP, re-scored by the project's own verifier.

``solve_reference`` turns one row of an :class:`~linc_core.instances.Instance` batch into a
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
rounded down for the same reason.

A tiny tolerance (``_ROUNDING_SLACK``, in scaled units) is taken off before a ceiling and added
before a floor so that float noise such as ``30.000000000000004`` does not cost a whole unit.

Command line: ``linc-solve INSTANCE --seconds S [--seed N] [--convention ...]`` (also
``python -m linc_core.reference``) solves one benchmark file and prints the verified result.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pyvrp import Model
from pyvrp.stop import MaxRuntime

from linc_core.benchmarks import BENCHMARKS, load_bks
from linc_core.instances import Instance, read_cvrplib, read_solomon, read_tsplib
from linc_core.verify import (
    CONVENTIONS,
    VerifyResult,
    convention_for,
    edge_lengths,
    verify_instance,
)

DEFAULT_SCALE: dict[str, int] = {"exact": 1000, "dimacs": 10, "tsplib": 1, "cvrplib": 1}
"""Integer factor applied to lengths and times when ``scale`` is not given."""

DEMAND_SCALE = 1000
"""Factor applied to demands and capacity when any of them is fractional."""

# Allowed float noise, in scaled integer units, before a ceiling or a floor moves a whole unit.
# Products of up to ~1e8 carry noise below 1e-8; at scale 1000 the slack is 1e-10 of a time
# unit per edge, far inside the verifier's 1e-9 relative tolerance.
_ROUNDING_SLACK = 1e-7

# File formats the command line recognises, and the benchmark family each one belongs to
# (the family decides the ``auto`` convention through ``verify.convention_for``).
_FORMAT_BENCHMARK = {"solomon": "solomon", "tsplib": "tsplib", "cvrplib": "cvrplib"}


# Decimals worth printing per convention: DIMACS edges have one, nint edges none.
_COST_DECIMALS = {"exact": 4, "dimacs": 1, "tsplib": 0, "cvrplib": 0}


class ReferenceSolverError(RuntimeError):
    """PyVRP returned no feasible solution, or the input cannot be modelled."""


@dataclass(frozen=True)
class ReferenceSolution:
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


# ---------------------------------------------------------------------------- rounding
def _round_nearest(values: np.ndarray) -> np.ndarray:
    return np.rint(values).astype(np.int64)


def _round_up(values: np.ndarray) -> np.ndarray:
    return np.ceil(values - _ROUNDING_SLACK).astype(np.int64)


def _ceil_scaled(value: float, factor: int) -> int:
    return math.ceil(value * factor - _ROUNDING_SLACK)


def _floor_scaled(value: float, factor: int) -> int:
    return math.floor(value * factor + _ROUNDING_SLACK)


def _scaled_window(ready: float, due: float, scale: int) -> dict[str, int]:
    """PyVRP ``tw_early``/``tw_late`` keywords for ``[ready, due]``, narrowed inwards.

    An infinite due time is left out so that PyVRP keeps its own "no deadline" default.
    """
    window = {"tw_early": _ceil_scaled(ready, scale)}
    if math.isfinite(due):
        window["tw_late"] = _floor_scaled(due, scale)
    return window


def _load_data(demand: np.ndarray, capacity: float) -> tuple[list[int], int | None]:
    """Integer demands per node and the capacity (``None`` when unbounded)."""
    bounded = math.isfinite(capacity)
    values = np.append(demand, capacity) if bounded else demand
    if np.all(values == np.round(values)):
        return [int(d) for d in np.round(demand)], round(capacity) if bounded else None
    # Fractional loads: demand up, capacity down, so any load PyVRP accepts truly fits.
    scaled_demand = [_ceil_scaled(float(d), DEMAND_SCALE) for d in demand]
    return scaled_demand, _floor_scaled(capacity, DEMAND_SCALE) if bounded else None


# ---------------------------------------------------------------------------- model
def build_model(
    instance: Instance, index: int = 0, *, convention: str = "exact", scale: int | None = None
) -> Model:
    """The PyVRP model of row ``index`` of ``instance`` under ``convention``.

    Node ``k`` of the instance becomes PyVRP location ``k``; node 0 is the depot (for TSP,
    city 0 acts as the depot of a single vehicle). See the module docstring for the scaling.

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
    demand = instance.demand[index].double().cpu().numpy()
    windows = instance.time_windows[index].double().cpu().numpy()
    service = instance.service_time[index].double().cpu().numpy()
    alpha = float(instance.travel_time_scale[index])
    capacity = float(instance.capacity[index])

    # The verifier's own length function, so model and re-scoring cannot disagree on an edge.
    lengths = edge_lengths(locs, convention)
    distances = _round_nearest(lengths * scale)
    durations = _round_up(lengths * alpha * scale)

    model = Model()
    locations = [model.add_location(float(x), float(y)) for x, y in locs]

    if instance.problem == "tsp":
        model.add_depot(locations[0])
        for node in range(1, instance.num_nodes):
            model.add_client(locations[node], name=str(node))
        # One vehicle without a load dimension: the tour leaves city 0 and comes back to it.
        model.add_vehicle_type(num_available=1, unit_distance_cost=1, unit_duration_cost=0)
    else:
        node_demand, node_capacity = _load_data(demand, capacity)
        horizon = _scaled_window(float(windows[0, 0]), float(windows[0, 1]), scale)
        depot = model.add_depot(
            locations[0], service_duration=_ceil_scaled(float(service[0]), scale), **horizon
        )
        for node in range(1, instance.num_nodes):
            model.add_client(
                locations[node],
                delivery=[node_demand[node]] if node_capacity is not None else [],
                service_duration=_ceil_scaled(float(service[node]), scale),
                name=str(node),
                **_scaled_window(float(windows[node, 0]), float(windows[node, 1]), scale),
            )
        # As many vehicles as customers: the fleet never limits the distance-only search.
        model.add_vehicle_type(
            num_available=instance.num_customers,
            capacity=[node_capacity] if node_capacity is not None else [],
            start_depot=depot,
            end_depot=depot,
            unit_distance_cost=1,
            unit_duration_cost=0,
            **horizon,
        )

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
def solve_reference(
    instance: Instance,
    index: int = 0,
    *,
    seconds: float,
    seed: int = 0,
    convention: str = "exact",
    scale: int | None = None,
) -> ReferenceSolution:
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
        ReferenceSolverError: PyVRP found no feasible solution within ``seconds``.
        ValueError: Bad arguments (see :func:`build_model`).
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}.")
    effective_scale = DEFAULT_SCALE.get(convention, 1) if scale is None else int(scale)
    started = time.perf_counter()
    model = build_model(instance, index, convention=convention, scale=effective_scale)
    result = model.solve(stop=MaxRuntime(seconds), seed=seed, display=False)
    runtime = time.perf_counter() - started

    name = instance.names[index] if instance.names is not None else None
    if not result.is_feasible():
        label = f"instance {name!r}" if name else f"row {index}"
        raise ReferenceSolverError(
            f"PyVRP found no feasible solution for {label} in {seconds:g} s "
            f"(convention {convention!r}, scale {effective_scale}); try more seconds."
        )

    routes = [
        [activity.idx + 1 for activity in route if activity.is_client()]
        for route in result.best.routes()
    ]
    routes = [route for route in routes if route]
    if instance.problem == "tsp":
        # PyVRP's client k sits on city k + 1 and the tour starts at city 0 (the depot).
        routes = [[0, *routes[0]]] if routes else [[0]]

    verified = verify_instance(instance, index, routes, convention=convention)
    return ReferenceSolution(
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


# ---------------------------------------------------------------------------- command line
def detect_format(path: Path) -> str:
    """``"solomon"``, ``"tsplib"`` or ``"cvrplib"`` from a file's extension and header.

    Raises:
        ValueError: The file is none of the three formats.
    """
    suffix = path.suffix.lower()
    if suffix == ".tsp":
        return "tsplib"
    if suffix == ".vrp":
        return "cvrplib"
    with path.open(errors="replace") as handle:
        head = handle.read(2000).upper()
    # Without a telling extension, fall back on the header: Solomon files carry a VEHICLE and a
    # CUSTOMER section, VRPLIB files a "TYPE :" line.
    if "CUSTOMER" in head and "VEHICLE" in head:
        return "solomon"
    compact = head.replace(" ", "").replace("\t", "")
    if "TYPE:TSP" in compact:
        return "tsplib"
    if "TYPE:CVRP" in compact:
        return "cvrplib"
    raise ValueError(f"{path}: not a Solomon (.txt), TSPLIB (.tsp) or CVRPLIB (.vrp) file.")


_READERS: dict[str, Callable[[Path], Instance]] = {
    "solomon": read_solomon,
    "tsplib": read_tsplib,
    "cvrplib": read_cvrplib,
}


def _best_known(path: Path, name: str) -> tuple[float, str] | None:
    """The best-known value of ``name`` and its convention, from the file's own folder.

    The folder must be one of the named benchmarks of ``linc_core.benchmarks`` (its name
    decides which ``bks.csv`` column holds the distance-only value); otherwise, or when the
    instance is not listed, there is no best-known value to compare with.
    """
    folder = path.resolve().parent
    if not (folder / "bks.csv").is_file():
        return None
    benchmark = next((b for b in BENCHMARKS.values() if b.folder == folder.name), None)
    if benchmark is None:
        return None
    try:
        table = load_bks(benchmark.name, root=folder.parent)
    except (OSError, ValueError) as error:  # a broken bks.csv must not hide the solution
        print(f"linc-solve: best-known values unavailable: {error}", file=sys.stderr)
        return None
    if name not in table:
        return None
    return table[name], benchmark.convention


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="linc-solve",
        description="Solve one Solomon, TSPLIB or CVRPLIB file with PyVRP and verify the result.",
    )
    parser.add_argument("instance", type=Path, help="path to a .txt (Solomon), .tsp or .vrp file")
    parser.add_argument("--seconds", type=float, required=True, help="PyVRP time limit")
    parser.add_argument("--seed", type=int, default=0, help="PyVRP random seed (default 0)")
    parser.add_argument(
        "--convention",
        choices=("auto", *CONVENTIONS),
        default="auto",
        help="cost convention; auto = the benchmark's own (Solomon: dimacs, TSPLIB: tsplib, "
        "CVRPLIB: cvrplib)",
    )
    parser.add_argument(
        "--scale", type=int, default=None, help="integer scale of lengths and times (advanced)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``linc-solve``.

    Returns:
        0 when the verified solution is feasible, 1 when the verifier rejects it, 2 when no
        solution could be produced (unreadable file, PyVRP found nothing feasible).
    """
    args = _parse_args(argv)
    path: Path = args.instance
    try:
        file_format = detect_format(path)
        instance = _READERS[file_format](path)
        convention = (
            convention_for(_FORMAT_BENCHMARK[file_format])
            if args.convention == "auto"
            else args.convention
        )
        solution = solve_reference(
            instance,
            0,
            seconds=args.seconds,
            seed=args.seed,
            convention=convention,
            scale=args.scale,
        )
    except (OSError, ValueError, ReferenceSolverError) as error:
        print(f"linc-solve: {error}", file=sys.stderr)
        return 2

    name = solution.name or path.stem
    print(
        f"instance: {name} ({file_format}, {instance.problem}, {instance.num_customers} "
        f"{'cities' if instance.problem == 'tsp' else 'customers'})"
    )
    print(f"convention: {convention} (scale {solution.scale}, seed {solution.seed})")
    for number, route in enumerate(solution.routes, start=1):
        # CVRPLIB's solution-file syntax, so the lines can be pasted into a .sol file.
        print(f"Route #{number}: {' '.join(str(node) for node in route)}")
    status = "feasible" if solution.feasible else "INFEASIBLE"
    print(f"cost: {solution.cost:.{_COST_DECIMALS[convention]}f} (verified, {status})")
    print(f"routes: {solution.num_routes}")
    reference = _best_known(path, name)
    if reference is not None:
        best_known, bks_convention = reference
        gap = 100.0 * (solution.cost - best_known) / best_known
        print(f"bks: {best_known:g}")
        print(f"gap: {gap:.2f}%")
        if bks_convention != convention:
            # e.g. exact distances against DIMACS values: the gap mixes two cost rules.
            print(f"note: the bks is stated under {bks_convention}, this cost under {convention}")
    print(f"runtime: {solution.runtime:.2f} s")
    if not solution.feasible:
        for violation in solution.verify.violations:
            print(f"violation: {violation.kind}: {violation.detail}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
