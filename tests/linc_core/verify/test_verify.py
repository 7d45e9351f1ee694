"""The independent verifier: real best-known solutions re-scored, hand-computed tours, and one
hand-built case per violation kind."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from linc_core.instances import (
    Instance,
    read_cvrplib,
    read_solomon,
    read_solution,
    read_tsp_tour,
    read_tsplib,
)
from linc_core.instances.benchmarks import data_dir as resolve_data_dir
from linc_core.verify import (
    CONVENTIONS,
    Violation,
    convention_for,
    edge_lengths,
    verify_instance,
    verify_routes,
)

# The data README names these: their DIMACS-optimal routes break a time window once
# distances are exact floats.
EXACT_INFEASIBLE_SOLOMON = {"R102", "R105", "R107", "R108", "R112", "R211", "RC101", "RC105"}


def _stems(folder: str, pattern: str) -> list[str]:
    """Instance names for parametrisation. Without the data folder, or with no file matching,
    one placeholder name whose test then fails on the ``data_dir`` fixture or on the missing
    file (pytest would pass over an empty parameter set without failing)."""
    try:
        root = resolve_data_dir() / folder
    except FileNotFoundError:
        return ["benchmark-data-missing"]
    return sorted(p.stem for p in root.glob(pattern)) or [f"no-{folder}-files"]


def _bks_rows(data_dir: Path, folder: str) -> dict[str, dict[str, str]]:
    with (data_dir / folder / "bks.csv").open(newline="") as handle:
        return {row["instance"]: row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def solomon_bks(data_dir: Path) -> dict[str, dict[str, str]]:
    return _bks_rows(data_dir, "solomon100")


@pytest.fixture(scope="module")
def x_bks(data_dir: Path) -> dict[str, dict[str, str]]:
    return _bks_rows(data_dir, "cvrplib_x")


# ---------------------------------------------------------------------- real solutions
@pytest.mark.parametrize("name", _stems("solomon100", "*.sol"))
def test_solomon_sol_reproduces_dimacs_bks(data_dir: Path, solomon_bks: dict, name: str) -> None:
    instance = read_solomon(data_dir / "solomon100" / f"{name}.txt")
    routes = read_solution(data_dir / "solomon100" / f"{name}.sol")
    result = verify_instance(instance, 0, routes, convention=convention_for("solomon"))
    row = solomon_bks[name]
    assert result.violations == ()
    assert result.feasible
    assert result.cost == pytest.approx(float(row["bks_distance_only_dimacs"]), abs=1e-6)
    assert result.num_routes == int(row["bks_distance_only_vehicles"])


@pytest.mark.parametrize("name", _stems("solomon100", "*.sol"))
def test_solomon_sol_under_exact_distances(data_dir: Path, solomon_bks: dict, name: str) -> None:
    instance = read_solomon(data_dir / "solomon100" / f"{name}.txt")
    routes = read_solution(data_dir / "solomon100" / f"{name}.sol")
    result = verify_instance(instance, 0, routes, convention="exact")
    row = solomon_bks[name]
    # The csv stores the exact cost to 4 decimals.
    assert result.cost == pytest.approx(float(row["same_routes_exact_euclid_cost"]), abs=6e-5)
    timing = [v for v in result.violations if v.kind in ("time_window", "depot_due")]
    assert len(timing) == len(result.violations)  # nothing but lateness appears
    if name in EXACT_INFEASIBLE_SOLOMON:
        assert len(timing) == int(row["same_routes_exact_tw_violations"]) == 1
        assert row["same_routes_exact_feasible"] == "False"
    else:
        assert timing == []


@pytest.mark.parametrize("name", _stems("cvrplib_x", "*.sol"))
def test_cvrplib_x_sol_reproduces_bks(data_dir: Path, x_bks: dict, name: str) -> None:
    instance = read_cvrplib(data_dir / "cvrplib_x" / f"{name}.vrp")
    routes = read_solution(data_dir / "cvrplib_x" / f"{name}.sol")
    result = verify_instance(instance, 0, routes, convention=convention_for("cvrplib_x"))
    row = x_bks[name]
    assert result.feasible, result.violations[:3]
    assert result.cost == int(row["bks"])  # integer-exact: nint edges sum exactly in float64
    assert result.num_routes == int(row["bks_routes"])


@pytest.mark.parametrize(("name", "expected"), [("berlin52", 7542), ("kroA100", 21282)])
def test_tsplib_optimal_tours_score_their_optimum(data_dir: Path, name: str, expected: int) -> None:
    with (data_dir / "tsplib" / "bks.csv").open(newline="") as handle:
        optimum = {row["instance"]: int(row["optimal"]) for row in csv.DictReader(handle)}
    assert optimum[name] == expected
    instance = read_tsplib(data_dir / "tsplib" / f"{name}.tsp")
    tour = read_tsp_tour(data_dir / "tsplib" / f"{name}.opt.tour")
    result = verify_instance(instance, 0, [tour], convention="tsplib")
    assert result.feasible
    assert result.cost == expected
    # The same tour under exact distances is a different (non-integer) number.
    assert verify_instance(instance, 0, [tour], convention="exact").cost != expected


# ---------------------------------------------------------------------- hand-computed costs
def test_unit_square_tour_costs_four_under_every_convention() -> None:
    square = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    for convention in CONVENTIONS:
        result = verify_routes([[0, 1, 2, 3]], square, problem="tsp", convention=convention)
        assert result.cost == 4.0
        assert result.feasible and result.num_routes == 1


def test_three_four_five_triangle_costs_twelve() -> None:
    triangle = np.array([[0.0, 0.0], [3.0, 0.0], [3.0, 4.0]])
    for convention in ("exact", "tsplib", "cvrplib", "dimacs"):
        assert verify_routes([[2, 0, 1]], triangle, problem="tsp", convention=convention).cost == 12


def test_flat_tour_is_accepted_for_tsp() -> None:
    triangle = np.array([[0.0, 0.0], [3.0, 0.0], [3.0, 4.0]])
    assert verify_routes([0, 1, 2], triangle, problem="tsp").cost == 12


def test_edge_lengths_rounding_rules() -> None:
    # d(0,1) = sqrt(2) = 1.41421..., d(0,2) = 2.5 exactly, d(0,3) = sqrt(0.0961 + 0) = 0.31.
    locs = np.array([[0.0, 0.0], [1.0, 1.0], [1.5, 2.0], [0.31, 0.0]])
    exact = edge_lengths(locs, "exact")
    assert exact[0, 1] == pytest.approx(math.sqrt(2), abs=1e-15)
    assert exact[0, 2] == 2.5
    dimacs = edge_lengths(locs, "dimacs")
    assert dimacs[0, 1] == 1.4 and dimacs[0, 2] == 2.5
    for convention in ("tsplib", "cvrplib"):
        nint = edge_lengths(locs, convention)
        assert nint[0, 1] == 1.0
        assert nint[0, 2] == 3.0  # half rounds up: int(2.5 + 0.5), not Python's banker's round
        assert nint[0, 3] == 0.0
    assert np.all(np.diag(exact) == 0) and np.array_equal(exact, exact.T)
    with pytest.raises(ValueError, match="convention"):
        edge_lengths(locs, "manhattan")


def test_two_city_tour_cost_per_convention() -> None:
    locs = np.array([[0.0, 0.0], [1.0, 1.0]])
    costs = {
        c: verify_routes([[0, 1]], locs, problem="tsp", convention=c).cost for c in CONVENTIONS
    }
    assert costs["exact"] == pytest.approx(2 * math.sqrt(2))
    assert costs["dimacs"] == pytest.approx(2.8)
    assert costs["tsplib"] == costs["cvrplib"] == 2.0


# ---------------------------------------------------------------------- hand-built violations
# Depot at the origin; customers 1 (3, 0), 2 (6, 0), 3 (0, 4). Service 1 everywhere but the
# depot. The baseline [[1, 2], [3]] is feasible: route 0 arrives at 1 at t=3 (due 9), leaves
# at 4, arrives at 2 at t=7 (due 20), leaves at 8 and is home at 14; route 1 reaches 3 at
# t=4, waits until ready 30, leaves at 31, home at 35. Cost 3 + 3 + 6 + 4 + 4 = 20.
LOCS = np.array([[0.0, 0.0], [3.0, 0.0], [6.0, 0.0], [0.0, 4.0]])
DEMAND = np.array([0.0, 4.0, 5.0, 3.0])
WINDOWS = np.array([[0.0, 100.0], [0.0, 9.0], [0.0, 20.0], [30.0, 50.0]])
SERVICE = np.array([0.0, 1.0, 1.0, 1.0])


def _check(routes: object, **overrides: object):
    kwargs: dict[str, object] = {
        "problem": "cvrptw",
        "demand": DEMAND,
        "capacity": 10.0,
        "time_windows": WINDOWS,
        "service_time": SERVICE,
    }
    kwargs.update(overrides)
    return verify_routes(routes, LOCS, **kwargs)  # type: ignore[arg-type]


def test_baseline_is_feasible_with_hand_computed_cost() -> None:
    result = _check([[1, 2], [3]])
    assert result.feasible and result.violations == ()
    assert result.cost == 20.0 and result.num_routes == 2


def test_missing_customer() -> None:
    result = _check([[1, 2]])
    assert [(v.kind, v.route, v.node) for v in result.violations] == [("missing", None, 3)]
    assert result.cost == 12.0


def test_duplicate_customer() -> None:
    result = _check([[1, 2], [3, 1]], problem="cvrp")
    assert [(v.kind, v.route, v.node) for v in result.violations] == [("duplicate", 1, 1)]
    assert result.cost == 12.0 + 4.0 + 5.0 + 3.0  # the repeated visit is still driven


def test_unknown_node_and_depot_inside_a_route() -> None:
    result = _check([[1, 2, 0], [3, 7]])
    assert [(v.kind, v.route, v.node) for v in result.violations] == [
        ("unknown_node", 0, 0),
        ("unknown_node", 1, 7),
    ]
    assert result.cost == 20.0  # unknown ids are left out of the cost
    assert _check([[1, 2], [3, "x"]]).kinds() == ("unknown_node",)


def test_capacity() -> None:
    result = _check([[1, 2, 3]])  # load 4 + 5 + 3 = 12 > 10
    assert [(v.kind, v.route, v.node) for v in result.violations] == [("capacity", 0, None)]
    assert "12" in result.violations[0].detail
    assert _check([[1, 2, 3]], capacity=12.0).feasible  # equal to capacity is fine


def test_time_window() -> None:
    result = _check([[2, 1], [3]])  # 2 at t=6, leave 7, reach 1 at t=10 > due 9
    assert [(v.kind, v.route, v.node) for v in result.violations] == [("time_window", 0, 1)]


def test_depot_due_after_waiting() -> None:
    late_depot = WINDOWS.copy()
    late_depot[0, 1] = 34.0  # route 1 is home at 35 because it waits at customer 3 until 30
    result = _check([[1, 2], [3]], time_windows=late_depot)
    assert [(v.kind, v.route, v.node) for v in result.violations] == [("depot_due", 1, 0)]
    late_depot[0, 1] = 35.0  # arriving exactly at the due time is allowed
    assert _check([[1, 2], [3]], time_windows=late_depot).feasible


def test_empty_route() -> None:
    result = _check([[1, 2], [], [3]])
    assert [(v.kind, v.route, v.node) for v in result.violations] == [("empty_route", 1, None)]
    assert result.cost == 20.0 and result.num_routes == 2


def test_travel_time_scale_changes_time_not_cost() -> None:
    result = _check([[1, 2], [3]], travel_time_scale=4.0)  # reach 1 at t=12 > due 9
    assert result.cost == 20.0
    assert ("time_window", 0, 1) in [(v.kind, v.route, v.node) for v in result.violations]


def test_cvrp_ignores_time_windows() -> None:
    assert _check([[2, 1], [3]], problem="cvrp").feasible


def test_travel_time_follows_the_convention() -> None:
    # One customer at (1, 1): exact travel 1.41421 misses due 1.41, DIMACS travel 1.4 does not.
    locs = np.array([[0.0, 0.0], [1.0, 1.0]])
    windows = np.array([[0.0, 10.0], [0.0, 1.41]])
    args = {"demand": [0, 1], "capacity": 1, "time_windows": windows}
    assert verify_routes([[1]], locs, convention="dimacs", **args).feasible
    exact = verify_routes([[1]], locs, convention="exact", **args)
    assert exact.kinds() == ("time_window",)


def test_tsp_violations() -> None:
    square = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    result = verify_routes([[0, 1, 1, 9]], square, problem="tsp")
    assert [(v.kind, v.route, v.node) for v in result.violations] == [
        ("duplicate", 0, 1),
        ("unknown_node", 0, 9),
        ("missing", None, 2),
        ("missing", None, 3),
    ]
    assert result.cost == 2.0  # the closed tour 0 -> 1 -> 0 over the known, distinct cities


def test_garbage_never_raises() -> None:
    result = _check([[], [0, -3, 2.5, None], [1, 1, 1]])
    assert not result.feasible
    assert set(result.kinds()) >= {"empty_route", "unknown_node", "duplicate", "missing"}


def test_violation_and_result_are_frozen() -> None:
    violation = Violation("missing", None, 3, "x")
    with pytest.raises(AttributeError):
        violation.kind = "duplicate"  # type: ignore[misc]


def test_verify_instance_matches_verify_routes() -> None:
    instance = Instance.from_arrays(
        "cvrptw",
        np.stack([LOCS, LOCS]),
        demand=np.stack([DEMAND, DEMAND]),
        capacity=[10.0, 8.0],
        time_windows=np.stack([WINDOWS, WINDOWS]),
        service_time=np.stack([SERVICE, SERVICE]),
        dtype=torch.float64,
    )
    assert verify_instance(instance, 0, [[1, 2], [3]]).feasible
    second = verify_instance(instance, 1, [[1, 2], [3]])  # capacity 8 < load 9
    assert [(v.kind, v.route) for v in second.violations] == [("capacity", 0)]
    assert second.cost == _check([[1, 2], [3]]).cost


# ---------------------------------------------------------------------- conventions
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("solomon", "dimacs"),
        ("Solomon100", "dimacs"),
        ("homberger", "dimacs"),
        ("homberger_400", "dimacs"),
        ("tsplib", "tsplib"),
        ("cvrplib", "cvrplib"),
        ("X", "cvrplib"),
        ("cvrplib_x", "cvrplib"),
        ("xml100", "cvrplib"),
        ("synthetic", "exact"),
        ("cvrptw", "exact"),
        ("tsp", "exact"),
    ],
)
def test_convention_for(name: str, expected: str) -> None:
    assert convention_for(name) == expected


def test_convention_for_unknown_name_raises() -> None:
    with pytest.raises(ValueError, match="golden"):
        convention_for("golden")
