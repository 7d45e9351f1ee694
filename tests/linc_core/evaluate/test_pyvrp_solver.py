"""The PyVRP solver (``linc_core.evaluate.pyvrp_solver``): benchmark gaps, rounding, errors.

Solver runs are short (1-4 s each, fixed seeds); the whole file stays under a minute.
Benchmark files are read in place from the data folder. The ``linc-solve`` command is tested in
``test_pyvrp_cli.py``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from linc_core.evaluate.pyvrp_solver import (
    DEFAULT_SCALE,
    PyVRPError,
    build_model,
    solve_with_pyvrp,
)
from linc_core.instances import Instance, read_cvrplib, read_solomon, read_tsplib
from linc_core.instances.benchmarks import load_bks
from linc_core.verify import edge_lengths, verify_instance

SEED = 0


def gap_percent(cost: float, best_known: float) -> float:
    return 100.0 * (cost - best_known) / best_known


# ---------------------------------------------------------------------------- benchmarks
def test_c101_dimacs_matches_best_known(data_dir):
    instance = read_solomon(data_dir / "solomon100" / "C101.txt")
    solution = solve_with_pyvrp(instance, seconds=3, seed=SEED, convention="dimacs")

    assert solution.feasible, solution.verify.violations
    assert solution.num_routes == len(solution.routes)
    assert gap_percent(solution.cost, load_bks("solomon100")["C101"]) < 1.0
    # Under dimacs the integer model is exact, so PyVRP's objective is the verified cost.
    assert solution.pyvrp_objective == pytest.approx(solution.cost, abs=1e-6)


def test_r101_exact_is_feasible_under_exact_verification(data_dir):
    instance = read_solomon(data_dir / "solomon100" / "R101.txt")
    solution = solve_with_pyvrp(instance, seconds=4, seed=SEED, convention="exact")

    # Guaranteed by the conservative rounding (durations and ready times up, due times down).
    recheck = verify_instance(instance, 0, solution.routes, convention="exact")
    assert solution.feasible and recheck.feasible, recheck.violations
    assert solution.cost == pytest.approx(recheck.cost)
    # The best-known value is DIMACS (truncated edges); exact lengths are slightly longer.
    assert 0.0 < gap_percent(solution.cost, load_bks("solomon100")["R101"]) < 3.0
    # Nearest-rounded distances at scale 1000 differ from exact by at most 0.0005 per edge.
    edges = sum(len(route) + 1 for route in solution.routes)
    assert abs(solution.pyvrp_objective - solution.cost) <= 0.0005 * edges


def test_r101_exact_stays_feasible_at_coarse_scale(data_dir):
    # At scale 1 every edge is off by up to a whole time unit. Rounding durations to nearest
    # there gives R101 routes that miss windows under exact verification (seen: 4 late
    # arrivals); rounding up must still give a feasible, if longer, solution.
    instance = read_solomon(data_dir / "solomon100" / "R101.txt")
    solution = solve_with_pyvrp(instance, seconds=2, seed=SEED, convention="exact", scale=1)

    assert solution.scale == 1
    assert solution.feasible, solution.verify.violations
    assert gap_percent(solution.cost, load_bks("solomon100")["R101"]) < 5.0


def test_cvrplib_x_n101_k25_close_to_best_known(data_dir):
    instance = read_cvrplib(data_dir / "cvrplib_x" / "X-n101-k25.vrp")
    solution = solve_with_pyvrp(instance, seconds=4, seed=SEED, convention="cvrplib")

    assert solution.feasible, solution.verify.violations
    assert gap_percent(solution.cost, load_bks("cvrplib_x")["X-n101-k25"]) < 3.0
    assert solution.cost == round(solution.cost)  # nint edges sum to an integer


def test_tsplib_eil51_close_to_optimum(data_dir):
    instance = read_tsplib(data_dir / "tsplib" / "eil51.tsp")
    solution = solve_with_pyvrp(instance, seconds=2, seed=SEED, convention="tsplib")

    assert solution.feasible, solution.verify.violations
    assert solution.num_routes == 1
    tour = solution.routes[0]
    assert tour[0] == 0 and sorted(tour) == list(range(instance.num_nodes))
    assert gap_percent(solution.cost, 426) < 2.0


# ---------------------------------------------------------------------------- hand-made
def tiny_cvrptw() -> Instance:
    """Three customers where time windows, not geometry, decide the best routes.

    Customers 1 and 2 are close to each other, but customer 1 opens late and customer 2
    closes early, while serving 3 on the way forces a detour; capacity allows two customers
    per vehicle. The optimum is found by brute force below.
    """
    return Instance.from_arrays(
        "cvrptw",
        [[0.0, 0.0], [10.0, 0.0], [10.0, 3.0], [4.0, 8.0]],
        demand=[0.0, 4.0, 4.0, 3.0],
        capacity=8.0,
        time_windows=[[0.0, 200.0], [40.0, 60.0], [0.0, 15.0], [0.0, 100.0]],
        service_time=[0.0, 5.0, 5.0, 5.0],
        dtype=torch.float64,
    )


def set_partitions(items: list[int]):
    """Every partition of ``items`` into non-empty blocks."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in set_partitions(rest):
        yield [[first], *partition]
        for block_index in range(len(partition)):
            yield [
                *partition[:block_index],
                [first, *partition[block_index]],
                *partition[block_index + 1 :],
            ]


def brute_force_optimum(instance: Instance, convention: str) -> float:
    best = math.inf
    customers = list(range(1, instance.num_nodes))
    for partition in set_partitions(customers):
        for orders in itertools.product(*(itertools.permutations(b) for b in partition)):
            result = verify_instance(instance, 0, [list(o) for o in orders], convention)
            if result.feasible:
                best = min(best, result.cost)
    return best


@pytest.mark.parametrize("convention", ["exact", "dimacs"])
def test_tiny_cvrptw_optimum_is_found(convention):
    instance = tiny_cvrptw()
    optimum = brute_force_optimum(instance, convention)
    assert math.isfinite(optimum)

    solution = solve_with_pyvrp(instance, seconds=0.5, seed=SEED, convention=convention)

    assert solution.feasible, solution.verify.violations
    assert solution.cost == pytest.approx(optimum, abs=1e-9)


@pytest.mark.filterwarnings("ignore::pyvrp.exceptions.PenaltyBoundWarning")
def test_unservable_customer_raises():
    # Customer 1 is 100 away but due at 50: no schedule can reach it in time.
    instance = Instance.from_arrays(
        "cvrptw",
        [[0.0, 0.0], [100.0, 0.0], [1.0, 0.0]],
        demand=[0.0, 1.0, 1.0],
        capacity=10.0,
        time_windows=[[0.0, 1000.0], [0.0, 50.0], [0.0, 1000.0]],
        service_time=[0.0, 0.0, 0.0],
    )
    with pytest.raises(PyVRPError, match="no feasible solution"):
        solve_with_pyvrp(instance, seconds=0.3, seed=SEED)


# ---------------------------------------------------------------------------- rounding
def test_exact_rounding_is_conservative():
    instance = tiny_cvrptw()
    scale = DEFAULT_SCALE["exact"]
    data = build_model(instance, convention="exact").data()
    lengths = edge_lengths(instance.locs[0].double().numpy(), "exact")

    durations = np.asarray(data.duration_matrix(0))
    distances = np.asarray(data.distance_matrix(0))
    assert np.all(durations >= lengths * scale)  # travel never shorter than the truth
    assert np.all(np.abs(distances - lengths * scale) <= 0.5)  # cost rounded to nearest
    windows = instance.time_windows[0].double().numpy()
    for client_index, client in enumerate(data.clients(), start=1):
        assert client.tw_early >= windows[client_index, 0] * scale
        assert client.tw_late <= windows[client_index, 1] * scale
    assert data.depots()[0].tw_late <= windows[0, 1] * scale


def test_dimacs_scaling_is_exact():
    instance = tiny_cvrptw()
    data = build_model(instance, convention="dimacs").data()
    lengths = edge_lengths(instance.locs[0].double().numpy(), "dimacs")
    expected = np.rint(lengths * DEFAULT_SCALE["dimacs"])
    assert np.array_equal(np.asarray(data.distance_matrix(0)), expected)
    assert np.array_equal(np.asarray(data.duration_matrix(0)), expected)


def test_bad_arguments_are_rejected():
    instance = tiny_cvrptw()
    with pytest.raises(ValueError, match="convention"):
        build_model(instance, convention="manhattan")
    with pytest.raises(ValueError, match="index"):
        build_model(instance, 3)
    with pytest.raises(ValueError, match="seconds"):
        solve_with_pyvrp(instance, seconds=0)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"seconds": math.nan}, "seconds: expected a finite number > 0, got nan"),  # was: a hang
        ({"seconds": math.inf}, "seconds: expected a finite number > 0, got inf"),
        ({"seconds": 1.0, "seed": -1}, "seed: expected an integer from 0 to 4294967295, got -1"),
        (
            {"seconds": 1.0, "seed": 2**32},
            "seed: expected an integer from 0 to 4294967295, got 4294967296",
        ),
    ],
)
def test_a_budget_that_never_ends_or_a_seed_pyvrp_cannot_take_is_refused(arguments, message):
    """Every caller is covered (the evaluation's PyVRP cache too), not only linc-solve."""
    with pytest.raises(ValueError) as err:
        solve_with_pyvrp(tiny_cvrptw(), **arguments)
    assert str(err.value) == message
