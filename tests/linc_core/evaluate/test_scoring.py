"""Scoring: the report rows reproduce known costs and gaps, never drop a bad solution, and
``evaluate_policy`` scores what it decodes."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from linc_core.decoding import DecodeConfig, exact_length
from linc_core.evaluate import (
    EvalRow,
    evaluate_policy,
    evaluate_set,
    family_gaps,
    load_benchmark,
    score_solutions,
    summarize,
)
from linc_core.evaluate.pyvrp_solver import solve_with_pyvrp
from linc_core.instances import read_solomon
from tests.conftest import tiny_policy


def test_a_pyvrp_solution_reproduces_its_cost_through_the_report(data_dir):
    folder = data_dir / "solomon100"
    instances = [read_solomon(folder / f"{name}.txt") for name in ("C101", "C201")]
    solutions = [solve_with_pyvrp(i, seconds=0.5, seed=1, convention="dimacs") for i in instances]
    bks = {"C101": 827.3, "C201": 589.1}
    rows = score_solutions(
        instances,
        [s.routes for s in solutions],
        convention="dimacs",
        method="PyVRP",
        bks=bks,
        pyvrp={"C101": 800.0},
    )
    for row, solution, instance in zip(rows, solutions, instances, strict=True):
        assert row.feasible and row.error == ""
        assert row.cost == solution.cost
        # cost_exact: the same routes' float length; DIMACS truncates every edge, so it is less
        assert row.cost_exact == pytest.approx(exact_length(instance, 0, solution.routes))
        assert row.cost < row.cost_exact
        assert row.gap_bks_pct == pytest.approx(
            100 * (solution.cost - bks[row.instance]) / bks[row.instance]
        )
        assert row.num_routes == solution.num_routes
    assert rows[0].pyvrp_gap_pct == pytest.approx((solutions[0].cost - 800.0) / 8.0)
    assert math.isnan(rows[1].pyvrp_gap_pct)
    summary = summarize(rows, seconds=2.0, rollouts=10)
    costs = [s.cost for s in solutions]
    assert summary["mean_cost"] == pytest.approx(sum(costs) / 2)
    assert summary["aggregate_gap_bks_pct"] == pytest.approx(100 * (sum(costs) - 1416.4) / 1416.4)
    assert summary["mean_gap_bks_pct"] == pytest.approx(
        (rows[0].gap_bks_pct + rows[1].gap_bks_pct) / 2
    )
    assert summary["rollouts_per_second"] == 5.0
    assert summary["instances_with_pyvrp"] == 1 and summary["mean_pyvrp_cost"] == 800.0
    assert summary["mean_pyvrp_gap_pct"] == summary["aggregate_pyvrp_gap_pct"]
    assert summary["mean_pyvrp_gap_pct"] == pytest.approx(rows[0].pyvrp_gap_pct)


def test_families_and_the_median_gap_follow_the_rows_by_hand():
    nan = math.nan

    def row(name, gap, feasible=True, bks=100.0):
        cost = 100.0 + gap if feasible else nan
        return EvalRow(name, "m", 100, feasible, cost, cost, 3, bks, gap, nan, nan, 0.1, "")

    rows = [
        row("C101", 10.0),
        row("C102", 20.0),
        row("C201", 400.0),  # one collapsed instance moves the mean, not the median
        row("R101", 5.0),
        row("R102", 99.0, feasible=False),  # an error row counts in no gap
        row("RC201", 7.0, bks=nan),  # no BKS: no gap
        row("X-n101-k25", 1.0),
    ]
    assert family_gaps(rows) == {
        "C1": {"mean_gap_bks_pct": 15.0, "instances": 2},
        "C2": {"mean_gap_bks_pct": 400.0, "instances": 1},
        "R1": {"mean_gap_bks_pct": 5.0, "instances": 1},
    }
    summary = summarize(rows, seconds=1.0)
    # gaps with a BKS, feasible: 10, 20, 400, 5, 1 -> mean 87.2, median 10
    assert summary["mean_gap_bks_pct"] == pytest.approx(87.2)
    assert summary["median_gap_bks_pct"] == 10.0
    assert summary["family_gaps_bks"] == family_gaps(rows)
    assert math.isnan(summarize([row("C101", 1.0, bks=nan)], 1.0)["median_gap_bks_pct"])


def test_an_infeasible_solution_is_an_error_row_not_dropped(data_dir):
    instance = read_solomon(data_dir / "solomon100" / "C101.txt")
    every_customer_alone = [[c] for c in range(1, 101)]
    missing_one = [[c] for c in range(1, 100)]
    rows = score_solutions(
        [instance, instance],
        [every_customer_alone, missing_one],
        convention="dimacs",
        method="hand",
        bks={"C101": 827.3},
    )
    assert rows[0].feasible and rows[0].num_routes == 100
    assert not rows[1].feasible and "missing" in rows[1].error and math.isnan(rows[1].cost)
    summary = summarize(rows, seconds=1.0)
    assert (summary["instances"], summary["feasible"], summary["errors"]) == (2, 1, 1)
    assert summary["mean_cost"] == rows[0].cost


def test_evaluate_policy_on_a_synthetic_set_with_bks_in_order():
    bench = load_benchmark("synthetic-cvrptw-10", count=3, data_seed=7)
    again = load_benchmark("synthetic-cvrptw-10", count=3, data_seed=7)
    assert bench.convention == "exact" and len(bench.instances) == 3
    assert torch.equal(bench.instances[2].locs, again.instances[2].locs)
    evaluation = evaluate_policy(
        tiny_policy(),
        bench.instances,
        DecodeConfig(method="greedy", num_z=2, augment=8),
        convention="exact",
        bks=[1.0, 2.0, 4.0],
    )
    assert [r.bks for r in evaluation.rows] == [1.0, 2.0, 4.0]
    for row, instance in zip(evaluation.rows, bench.instances, strict=True):
        assert row.feasible
        # the length of the routes it decoded, leg by leg (not the verifier's own sum)
        routes = evaluation.solutions[row.instance]
        assert row.cost == pytest.approx(exact_length(instance, 0, routes), rel=1e-12)
        assert row.gap_bks_pct == pytest.approx(100 * (row.cost - row.bks) / row.bks)
    assert evaluation.summary["rollouts"] == 3 * 8 * 2


def test_evaluate_set_adds_the_unreadable_files_as_error_rows_of_the_summary():
    """linc-eval and a trial's evaluation share it: the set's instances decoded in its
    convention against its BKS, then one error row per unreadable file, counted not averaged."""
    bench = load_benchmark("synthetic-cvrptw-10", count=2, data_seed=7)
    bench = dataclasses.replace(
        bench, bks={bench.instances[0].names[0]: 1.0}, errors=[("bad.txt", "not a number")]
    )
    config = DecodeConfig(method="greedy", num_z=2, augment=1)
    evaluation = evaluate_set(tiny_policy(), bench, config, method="LINC greedy")
    alone = evaluate_policy(tiny_policy(), bench.instances, config, bks=bench.bks)
    assert [r.instance for r in evaluation.rows] == [*(r.instance for r in alone.rows), "bad.txt"]
    assert evaluation.rows[-1].error == "unreadable: not a number"
    assert set(evaluation.solutions) == set(alone.solutions)
    summary = evaluation.summary
    assert (summary["instances"], summary["feasible"], summary["errors"]) == (3, 2, 1)
    assert summary["mean_cost"] == alone.summary["mean_cost"]
    assert summary["mean_gap_bks_pct"] == pytest.approx(alone.rows[0].gap_bks_pct)
    nothing = dataclasses.replace(bench, instances=[])
    empty = evaluate_set(tiny_policy(), nothing, config, method="LINC greedy")
    assert [r.instance for r in empty.rows] == ["bad.txt"] and empty.summary["errors"] == 1
