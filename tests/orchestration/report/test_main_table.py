"""The main table (``orchestration.report.main_table``) on the real MLflow store a main-smoke
sweep writes: every number of ``linc-report main`` recomputed by hand from the runs' logged
per-instance rows; the time-to-quality figure on the parent run; each model's best policy
registered, loaded with ``mlflow.pyfunc.load_model`` and solving C101 feasibly."""

from __future__ import annotations

import csv
import json
import math
import os
import re
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from linc_core.instances import read_solomon
from linc_core.verify import verify_instance
from orchestration.experiment.ablation import run_ablation
from orchestration.report.ablation import finished_trial_runs
from orchestration.report.statistics import paired_bootstrap
from sweeps.compose import load_platform_config
from sweeps.report import main as report_main
from tests.conftest import PNG_MAGIC

# PyVRP's costs (2 s, DIMACS convention) of the three files cut to their first 10 customers:
# the folder's best-known values
CUT_BKS = {"C101": 58.1, "R101": 269.2, "RC101": 185.5}
CUSTOMERS = 10


def cut_solomon(text: str, customers: int) -> str:
    """A Solomon file with its depot and first ``customers`` customers (a Solomon file too)."""
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if "CUST NO." in line)
    kept, rows = lines[: header + 1], 0
    for line in lines[header + 1 :]:
        rows += bool(line.split())
        if rows > customers + 1:
            break
        kept.append(line)
    return "\n".join(kept) + "\n"


@pytest.fixture(scope="module")
def main_sweep(ray_session, tmp_path_factory, data_dir):
    """preset=main-smoke (Full LINC, PolyNet, POMO x 2 seeds, 2 s each) evaluated with
    sampling and SGBS on three Solomon files cut to 10 customers (SGBS on 100 customers
    would take minutes of the test's time)."""
    folder = tmp_path_factory.mktemp("main")
    bench = folder / "solomon-cut"
    bench.mkdir()
    for name in CUT_BKS:
        text = (data_dir / "solomon100" / f"{name}.txt").read_text()
        (bench / f"{name}.txt").write_text(cut_solomon(text, CUSTOMERS))
    (bench / "bks.csv").write_text(
        "instance,bks\n" + "".join(f"{n},{b}\n" for n, b in CUT_BKS.items())
    )
    config = load_platform_config(
        [
            "preset=main-smoke",
            f"cluster.storage={folder / 'runs'}",
            f"data.eval_uri={bench}",
            "data.eval_limit=null",
        ]
    )
    result = run_ablation(config)
    uri = f"sqlite:///{folder / 'runs' / 'mlflow.db'}"
    return result, uri, folder


def rows_of(client: MlflowClient, run_id: str, name: str) -> list[dict[str, str]]:
    with open(client.download_artifacts(run_id, name), encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def table_line(table: str, start: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith(start))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_main_table_is_what_the_runs_logged(main_sweep, capsys) -> None:
    result, uri, folder = main_sweep
    client = MlflowClient(tracking_uri=uri)
    runs = finished_trial_runs(client, "linc-main-smoke", sweep="main-smoke")
    assert len(runs) == 6 and all(r.data.metrics["eval_infeasible"] == 0 for r in runs)
    # sampling (POMO: every start) and SGBS, each with its metrics and rows
    by = {(r.data.tags["variant"], int(r.data.tags["seed"])): r for r in runs}
    rows = {}
    for (variant, seed), run in by.items():
        assert {"eval_cost_sgbs", "eval_gap_bks_pct", "eval_gap_bks_pct_sgbs"} <= set(
            run.data.metrics
        )
        for decoding, name in (
            ("sampling", "evaluation_rows.csv"),
            ("sgbs", "evaluation_rows_sgbs.csv"),
        ):
            logged = rows_of(client, run.info.run_id, name)
            assert sorted(r["instance"] for r in logged) == sorted(CUT_BKS)
            assert all(r["feasible"] == "True" for r in logged)  # verified, every one
            rows[(variant, seed, decoding)] = {r["instance"]: r for r in logged}
    assert rows[("pomo", 1, "sampling")]["C101"]["method"] == "POMO multistart starts=all x1"
    assert rows[("polynet", 2, "sgbs")]["R101"]["method"].startswith("PolyNet sgbs b=4 e=4")

    assert report_main(
        ["main", "--tracking-uri", uri, "--experiment", "linc-main-smoke",
         "--sweep", "main-smoke", "--out", str(folder / "report")]
    ) == 0  # fmt: skip
    table = (folder / "report" / "main_table.md").read_text()
    assert table.rstrip() in capsys.readouterr().out
    # by hand: Obj. and Gap are means over seeds x instances, Time the mean of the seeds' sums
    for variant, label in (("full_linc", "Full LINC sampling"), ("polynet", "PolyNet sgbs")):
        decoding = label.split()[-1]
        mine = [rows[(variant, s, decoding)][n] for s in (1, 2) for n in CUT_BKS]
        cells = table_line(table, f"| {label}")
        assert float(cells[1]) == pytest.approx(
            np.mean([float(r["cost"]) for r in mine]), abs=0.006
        )
        gaps = [
            100 * (float(r["cost"]) - CUT_BKS[r["instance"]]) / CUT_BKS[r["instance"]] for r in mine
        ]
        assert float(cells[2]) == pytest.approx(np.mean(gaps), abs=0.006)
        seconds = [
            sum(float(rows[(variant, s, decoding)][n]["seconds"]) for n in CUT_BKS) for s in (1, 2)
        ]
        assert float(cells[3]) == pytest.approx(np.mean(seconds), abs=0.06)
        assert cells[4:] == ["0", "2"]
    assert table_line(table, "| BKS")[1] == f"{np.mean(list(CUT_BKS.values())):.2f}"
    # the paired comparison: PolyNet's gaps minus Full LINC's, by seed and instance
    names = sorted(CUT_BKS)
    grid = {
        v: np.asarray(
            [[float(rows[(v, s, "sampling")][n]["gap_bks_pct"]) for n in names] for s in (1, 2)]
        )
        for v in ("full_linc", "polynet")
    }
    differences = grid["polynet"] - grid["full_linc"]
    interval, _ = paired_bootstrap(differences, grid["full_linc"])
    cells = table_line(table, "| PolyNet | sampling")
    assert float(cells[2]) == pytest.approx(differences.mean(), abs=0.006)
    assert cells[3] == f"[{interval.low:+.2f}, {interval.high:+.2f}]"
    resolved = interval.low > 0 or interval.high < 0
    ordering = (
        ("Full LINC better" if interval.low > 0 else "Full LINC worse")
        if resolved
        else "not resolved"
    )
    assert cells[4].startswith(ordering) and cells[5] == "2 x 3"
    # the budget in the caption: device, minutes, epochs per model
    epochs = [by[("pomo", s)].data.metrics["epoch"] for s in (1, 2)]
    assert "Budget: cpu (1 thread(s)), 0.033 CPU-min of training per trial" in table
    assert re.search(rf"POMO {np.mean(epochs):.0f} epochs", table)
    # the sweep logged the same table and the time-to-quality figure on its parent run
    parent = result.parent_run_id
    logged = Path(client.download_artifacts(parent, "report/main_table.md")).read_text()
    assert logged == table
    png = Path(client.download_artifacts(parent, "report/time_to_quality.png"))
    assert png.read_bytes().startswith(PNG_MAGIC)
    reached = json.loads(
        Path(client.download_artifacts(parent, "report/time_to_quality.json")).read_text()
    )
    assert set(reached) == {"Full LINC", "PolyNet", "POMO"}
    assert all(
        0 < point["minutes"] < 0.2 and math.isfinite(point["gap_pct"]) for point in reached.values()
    )
    # an external peer's curve (bench.bench_quality's JSON) drawn beside them, logged on it too
    peer = folder / "peer.json"
    peer.write_text(json.dumps({"label": "rl4co PolyNet", "curve": [[0, 90.0], [2.4, 61.5]]}))
    arguments = ["main", "--tracking-uri", uri, "--experiment", "linc-main-smoke"]
    assert report_main([*arguments, "--peer-curve", str(peer), "--log"]) == 0
    logged = Path(client.download_artifacts(parent, "report/time_to_quality.json")).read_text()
    assert json.loads(logged)["rl4co PolyNet"] == {"minutes": pytest.approx(0.04), "gap_pct": 61.5}
    peer.write_text("[1, 2]")
    with pytest.raises(SystemExit, match=r"--peer-curve .*peer.json: expected the JSON"):
        report_main([*arguments, "--peer-curve", str(peer)])


def test_each_models_best_policy_is_registered_and_solves_c101(main_sweep, data_dir, capfd):
    _, uri, _ = main_sweep
    assert report_main(
        ["main", "--tracking-uri", uri, "--experiment", "linc-main-smoke",
         "--sweep", "main-smoke", "--register", "cvrptw-smoke"]
    ) == 0  # fmt: skip
    said = "".join(capfd.readouterr())
    assert "Successfully registered" not in said and "Validating input example" not in said
    client = MlflowClient(tracking_uri=uri)
    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    text = (data_dir / "solomon100" / "C101.txt").read_text()
    try:
        for name, variant in (("linc", "full_linc"), ("polynet", "polynet"), ("pomo", "pomo")):
            version = client.get_model_version(f"{name}-cvrptw-smoke", "1")
            assert version.tags["variant"] == variant
            trials = [
                r
                for r in finished_trial_runs(client, "linc-main-smoke", sweep="main-smoke")
                if r.data.tags["variant"] == variant
            ]
            best = min(trials, key=lambda r: r.data.metrics["eval_cost"])
            assert version.run_id == best.info.run_id
            model = mlflow.pyfunc.load_model(f"models:/{name}-cvrptw-smoke/1")
            budget = {"method": "sampling", "num_z": 4, "augment": 1, "seed": 1}
            row = model.predict(
                pd.DataFrame({"instance": [text], "name": ["C101"]}), params=budget
            ).iloc[0]
            routes = json.loads(row["routes"])
            checked = verify_instance(read_solomon(data_dir / "solomon100" / "C101.txt"), 0, routes)
            assert bool(row["feasible"]) and checked.feasible
    finally:
        if before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        mlflow.set_tracking_uri(before or "")
