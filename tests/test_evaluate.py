"""Evaluation: the report pipeline reproduces known costs, never drops a bad solution, names a
malformed file and evaluates the rest, caches PyVRP costs."""

from __future__ import annotations

import csv
import json
import math
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from linc_core.config import TrainConfig
from linc_core.decode import DecodeConfig
from linc_core.evaluate import (
    evaluate_policy,
    format_seconds,
    load_benchmark,
    main,
    pyvrp_costs,
    score_solutions,
    summarize,
)
from linc_core.instances import read_solomon
from linc_core.pyvrp_solver import solve_with_pyvrp
from linc_core.train.checkpoint import build_payload, save_checkpoint
from tests.test_decode import tiny_policy

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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
    for row, solution in zip(rows, solutions, strict=True):
        assert row.feasible and row.error == ""
        assert row.cost == solution.cost
        assert row.gap_pct == pytest.approx(
            100 * (solution.cost - bks[row.instance]) / bks[row.instance]
        )
        assert row.num_routes == solution.num_routes
    assert rows[0].pyvrp_gap_pct == pytest.approx((solutions[0].cost - 800.0) / 8.0)
    assert math.isnan(rows[1].pyvrp_gap_pct)
    summary = summarize(rows, seconds=2.0, rollouts=10)
    costs = [s.cost for s in solutions]
    assert summary["mean_cost"] == pytest.approx(sum(costs) / 2)
    assert summary["aggregate_gap_pct"] == pytest.approx(100 * (sum(costs) - 1416.4) / 1416.4)
    assert summary["mean_gap_pct"] == pytest.approx((rows[0].gap_pct + rows[1].gap_pct) / 2)
    assert summary["rollouts_per_second"] == 5.0


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


def _tiny_checkpoint(path):
    policy = tiny_policy()
    payload = build_payload(
        model_config=policy.config,
        train_config=TrainConfig(),
        model_state=policy.state_dict(),
        optimizer_state=None,
        epoch=0,
        global_step=0,
        history=[],
        data_id="test",
    )
    return save_checkpoint(path, payload)


def test_a_malformed_file_is_reported_by_name_and_the_rest_evaluated(data_dir, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for name in ("C101", "R101", "RC101"):
        shutil.copy(data_dir / "solomon100" / f"{name}.txt", folder / f"{name}.txt")
    broken = (folder / "R101.txt").read_text().splitlines()
    broken[15] = broken[15].replace(broken[15].split()[1], "x1y", 1)  # a coordinate
    (folder / "R101.txt").write_text("\n".join(broken) + "\n")

    loaded = load_benchmark(str(folder))
    assert [i.names[0] for i in loaded.instances] == ["C101", "RC101"]
    assert [name for name, _ in loaded.errors] == ["R101.txt"]

    checkpoint = _tiny_checkpoint(tmp_path / "tiny.pt")
    out = tmp_path / "out"
    status = main(
        [
            "--checkpoint", str(checkpoint), "--benchmark", str(folder), "--decode", "greedy",
            "--z", "2", "--aug", "1", "--out", str(out), "--plot", "1", "--no-progress",
        ]
    )  # fmt: skip
    assert status == 1  # an error row exists
    with (out / "rows.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["instance"] for r in rows] == ["C101", "RC101", "R101.txt"]
    assert rows[2]["feasible"] == "False" and "R101.txt" in rows[2]["error"]
    assert "x1y" in rows[2]["error"]
    for row in rows[:2]:
        assert row["feasible"] == "True" and row["error"] == ""
        assert float(row["cost"]) > 0
    table = pq.read_table(out / "rows.parquet").to_pylist()
    assert [r["instance"] for r in table] == ["C101", "RC101", "R101.txt"]
    assert table[0]["cost"] == pytest.approx(float(rows[0]["cost"]), rel=1e-12)
    markdown = (out / "table.md").read_text()
    assert "| Method | Obj. | Gap |" in markdown and "1/3" in markdown
    assert (out / "plots" / "C101.png").read_bytes().startswith(PNG_MAGIC)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == 1 and summary["feasible"] == 2


def test_pyvrp_costs_are_cached_and_reused(data_dir, tmp_path):
    instance = read_solomon(data_dir / "solomon100" / "C101.txt")
    first = pyvrp_costs([instance], "dimacs", 0.3, cache=tmp_path)
    cache_file = tmp_path / "pyvrp" / "dimacs-0.3s-seed0.parquet"
    assert cache_file.is_file() and first["C101"] >= 827.3 - 1e-9
    # Edit the cached cost: a second call must read it instead of solving again.
    table = pq.read_table(cache_file)
    edited = table.set_column(
        table.schema.get_field_index("cost"), "cost", pa.array([12345.0], pa.float64())
    )
    pq.write_table(edited, cache_file)
    assert pyvrp_costs([instance], "dimacs", 0.3, cache=tmp_path) == {"C101": 12345.0}


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
    for row in evaluation.rows:
        assert row.feasible
        assert row.gap_pct == pytest.approx(100 * (row.cost - row.bks) / row.bks)
        assert row.cost == pytest.approx(row.cost_exact, rel=1e-12)
    assert evaluation.summary["rollouts"] == 3 * 8 * 2


def test_times_print_like_the_paper():
    assert [format_seconds(s) for s in (0.9, 6.2, 24.4, 150, 5400)] == [
        "0.9s",
        "6.2s",
        "24s",
        "2m",
        "1.5h",
    ]


def test_unknown_benchmark_is_named():
    with pytest.raises(ValueError, match="no-such-set"):
        load_benchmark("no-such-set")
