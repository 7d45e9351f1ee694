"""The ablation report read back from a real MLflow store: statistics and figures."""

from __future__ import annotations

import csv
import io
import os

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from orchestration.report.ablation import (
    MAX_REFERENCE_CURVES_BYTES,
    collect,
    evaluation_costs,
    finished_trial_runs,
    report_files,
    run_rows,
)
from tests.conftest import PNG_MAGIC, refusals_in_fresh_process

INSTANCES = [f"R{i:03d}" for i in range(30)]


def _rows_csv(costs: np.ndarray) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["instance", "feasible", "cost"])
    for name, cost in zip(INSTANCES, costs, strict=True):
        writer.writerow([name, True, float(cost)])
    writer.writerow(["BROKEN", False, "nan"])  # an infeasible row is left out of the statistics
    return buffer.getvalue()


def test_report_from_mlflow_has_intervals_signs_and_pngs(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("ablation", artifact_location=str(tmp_path / "artifacts"))
    rng = np.random.default_rng(0)
    base = 700 + 200 * rng.random(30)
    shift = {"full_linc": 0.0, "baseline": 40.0, "raw_linear": 0.0}
    rows = []
    for variant, delta in shift.items():
        for seed in (1, 2):
            run = client.create_run(experiment, tags={"variant": variant, "seed": str(seed)})
            run_id = run.info.run_id
            noise = rng.normal(0.0, 5.0, 30) if variant == "raw_linear" else 0.0
            client.log_text(run_id, _rows_csv(base + delta + noise + seed), "evaluation_rows.csv")
            for epoch in range(1, 4):
                client.log_metric(run_id, "train_best_cost", 1000 - 50 * epoch + delta, step=epoch)
            client.set_terminated(run_id)
            rows.append({"run_id": run_id, "variant": variant, "seed": str(seed)} | {
                "eval_cost": float(np.mean(base + delta + seed)), "eval_infeasible": 1.0,
                "seconds": 1.0,
            })  # fmt: skip
    data = collect(client, rows)
    assert set(data.costs["baseline"][1]) == set(INSTANCES)  # the infeasible row is not a cost
    assert data.histories["full_linc"][2] == [(1, 950.0), (2, 900.0), (3, 850.0)]
    files = report_files(data, "full_linc")
    table = files["ablation_statistics.md"].decode()
    lines = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()}
    # a constant +40 on every instance and seed: resolved, zero-width interval at +40
    baseline = next(
        r
        for r in csv.DictReader(io.StringIO(files["ablation_statistics.csv"].decode()))
        if r["variant"] == "baseline"
    )
    assert (
        float(baseline["diff"])
        == float(baseline["diff_low"])
        == float(baseline["diff_high"])
        == 40.0
    )
    assert "| worse |" in lines["Baseline"]
    # noise with mean near zero is not resolved; the reference is marked
    assert "| not resolved |" in lines["Raw linear scoring"]
    assert "| reference |" in lines["Full LINC"]
    assert "2 seed(s) x 30 instances" in table
    for name in ("ablation_chart.png", "training_curves.png", "pairwise_curves.png"):
        assert files[name].startswith(PNG_MAGIC), name


def test_evaluation_costs_keep_feasible_rows_only() -> None:
    text = "instance,feasible,cost\nA,True,1.5\nB,False,nan\nC,True,2\n"
    assert evaluation_costs(text) == {"A": 1.5, "C": 2.0}


def test_reference_curve_check_compares_the_seed_run_epoch_by_epoch(tmp_path) -> None:
    import json

    from sweeps.report import reference_curve_check

    path = tmp_path / "curves.json"
    path.write_text(json.dumps({"runs": {"full_linc": {"score_by_epoch": [100.0, 80.0, 50.0]}}}))
    histories = {"full_linc": {1234: [(1, 104.0), (2, 80.0), (3, 49.0)], 7: [(1, 1.0)]}}
    table = reference_curve_check(histories, path, 1234)
    row = table.splitlines()[2]
    # epoch 3: 49 vs 50 is -2%; the largest deviation over epochs is epoch 1's +4%
    assert row == "| full_linc | 3 | 49.00 | 50.00 | -2.00 | +4.00 |"
    assert "no run of seed 5" in reference_curve_check(histories, path, 5)


def test_linc_report_without_a_store_refuses_and_creates_nothing(tmp_path, monkeypatch, capsys):
    from sweeps.report import main as report_main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert report_main(["ablation"]) == 2
    missing = tmp_path / "elsewhere.db"
    assert report_main(["ablation", "--tracking-uri", f"sqlite:///{missing}"]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors == [
        "linc-report: no tracking store at runs/mlflow.db (the sweeps' default); pass "
        "--tracking-uri or set MLFLOW_TRACKING_URI",
        f"linc-report: --tracking-uri: no database at {missing}",
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_report_the_store_cannot_give_costs_a_warning_not_the_sweep(tmp_path, caplog) -> None:
    """Both sweep reports (ablation, main table) go through log_derived_report: a store without
    the sweep's parent run logs nothing and warns once each, naming the command that rebuilds
    it."""
    from types import SimpleNamespace

    from orchestration.report.sweep_report import log_sweep_report

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    logged: list[str] = []
    parent = SimpleNamespace(run_id="r1", log_bytes=lambda content, path: logged.append(path))
    tracking = SimpleNamespace(
        client=lambda: MlflowClient(tracking_uri=uri), experiment="gone", shown_uri=uri
    )
    with caplog.at_level("WARNING"):
        log_sweep_report(SimpleNamespace(parent=parent, tracking=tracking))
    told = [r.getMessage() for r in caplog.records if "not logged" in r.getMessage()]
    assert [m.split(" (")[0] for m in told] == [
        "ablation report not logged on run r1",
        "main table not logged on run r1",
    ]
    for message, command in zip(told, ("ablation", "main"), strict=True):
        assert "r1" in message.split(";")[0]  # the store's own words: no run r1
        rebuild = f"rebuild it with: linc-report {command} --tracking-uri {uri} --experiment gone"
        assert rebuild in message
    assert logged == []


def test_linc_report_compares_to_the_variant_the_sweep_recorded(tmp_path) -> None:
    """``--compare-to`` defaults to the sweep's own (its parent run's ``sweep.compare_to``, the
    newest parent when it began anew), so the rebuilt report is the one the sweep logged."""
    import time

    from orchestration.report.sweep_report import recorded_compare_to

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("linc-main")
    for compare_to in ("pomo", "polynet"):  # the newer parent run last
        run = client.create_run(experiment, tags={"sweep": "main-cpu", "kind": "sweep"})
        client.log_param(run.info.run_id, "sweep.compare_to", compare_to)
        time.sleep(0.01)
    trial = client.create_run(experiment, tags={"sweep": "main-cpu", "variant": "pomo"})
    client.log_param(trial.info.run_id, "sweep.compare_to", "baseline")  # no parent: ignored
    assert recorded_compare_to(client, "linc-main", "main-cpu") == "polynet"
    assert recorded_compare_to(client, "linc-main", "other-sweep") is None
    assert recorded_compare_to(client, "no-such-experiment", "main-cpu") is None


def _store_with_a_sweep(tmp_path) -> list[str]:
    """A store holding sweep ``ablation-smoke`` (baseline and full_linc, one seed each) in
    experiment ``linc-smoke``; the linc-report arguments that read it."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("linc-smoke", str(tmp_path / "artifacts"))
    client.create_run(experiment, tags={"sweep": "ablation-smoke", "kind": "sweep"})
    for variant, cost in (("baseline", 11.0), ("full_linc", 10.0)):
        tags = {"sweep": "ablation-smoke", "variant": variant, "seed": "1"}
        run_id = client.create_run(experiment, tags=tags).info.run_id
        client.log_metric(run_id, "eval_cost", cost)
        client.set_terminated(run_id)
    return ["--tracking-uri", uri, "--experiment", "linc-smoke"]


def test_linc_report_refuses_an_unknown_variant_or_sweep_naming_the_ones_there(
    tmp_path, capsys
) -> None:
    from sweeps.report import main as report_main

    args = _store_with_a_sweep(tmp_path)
    assert report_main(["ablation", *args, "--compare-to", "full_lnc"]) == 2
    assert report_main(["budget", *args, "--sweep", "ablation-smok"]) == 2
    assert report_main(["budget", *args, "--sweep", "x' or tags.sweep != '"]) == 2
    err = capsys.readouterr().err  # MLflow's own INFO lines as it creates the store aside
    errors = [line for line in err.splitlines() if not line.endswith("database tables...")]
    errors = [line for line in errors if "mlflow.store.db.utils" not in line]
    assert errors[:2] == [
        "linc-report: --compare-to: no variant 'full_lnc' among the runs (did you mean "
        "'full_linc'?); present: baseline, full_linc",
        "linc-report: --sweep: no sweep 'ablation-smok' in experiment 'linc-smoke' (did you "
        "mean 'ablation-smoke'?); its sweeps: ablation-smoke",
    ]
    assert errors[2].startswith("linc-report: --sweep: expected a name of letters")
    assert len(errors) == 3
    assert report_main(["budget", *args, "--sweep", "ablation-smoke"]) == 0
    assert report_main(["ablation", *args, "--compare-to", "baseline"]) == 0
    assert "Gap vs Baseline" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "cannot read it (No such file or directory)"),
        (b'{"runs": {"full_linc": {"score_by_epoch": [1.0, 2', "not JSON (Expecting"),
        (b"\xff\xfe", "not JSON ("),
        (b"[1, 2]", '"runs": expected an object of variants, got nothing'),
        (b'{"runs": [1]}', '"runs": expected an object of variants, got list'),
        (b'{"runs": {"a": 1}}', '"runs"."a"."score_by_epoch": expected a list of scores, got no'),
        (
            b'{"runs": {"a": {"score_by_epoch": [1, 0]}}}',
            '"score_by_epoch"[1]: expected > 0, got 0',
        ),
        (b'{"runs": {"a": {"score_by_epoch": [1, "2"]}}}', "[1]: expected > 0, got '2'"),
        (b'{"runs": {"a": {"score_by_epoch": [1, true]}}}', "[1]: expected > 0, got True"),
        (b'{"runs": {"a": {"score_by_epoch": [NaN]}}}', "[0]: expected > 0, got nan"),
        (b'{"runs": {"a": {"score_by_epoch": "1,2"}}}', "expected a list of scores, got str"),
    ],
)
def test_linc_report_refuses_bad_reference_curves_in_one_line_before_reading_runs(
    tmp_path, capsys, content, said
) -> None:
    from sweeps.report import main as report_main

    path = tmp_path / "curves.json"
    if content is not None:
        path.write_bytes(content)
    args = ["--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}"]  # never opened
    assert report_main(["ablation", *args, "--reference-curves", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"linc-report: --reference-curves {path}: ") and said in err
    assert err.count("\n") == 1


def test_linc_report_refuses_an_output_folder_under_a_file_before_any_work(
    tmp_path, capsys
) -> None:
    from sweeps.report import main as report_main

    args = _store_with_a_sweep(tmp_path)
    regular = tmp_path / "regular"
    regular.write_text("x")
    assert report_main(["budget", *args, "--out", str(regular / "deeper" / "out")]) == 2
    assert report_main(["budget", *args, "--out", str(regular)]) == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("linc-report")] == [
        f"linc-report: --out: {regular}/deeper/out lies under {regular}, which is a file, "
        "not a folder",
        f"linc-report: --out: {regular} is a file, not a folder",
    ]
    out = tmp_path / "new" / "report"
    assert report_main(["budget", *args, "--out", str(out)]) == 0
    assert (out / "budget_table.md").read_text().startswith("| Variant | Seed |")


def test_the_budget_table_shows_the_training_clock_beside_the_runs_wall_time(tmp_path) -> None:
    # A smoke trial trains 1.2 s of a 5 s run (Ray's start-up, validation and evaluation are
    # the rest): the budget counts the first, MLflow's start and end times give the second.
    from sweeps.report import budget_table

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("linc-budget", str(tmp_path / "artifacts"))
    tags = {"sweep": "s", "variant": "full_linc", "seed": "1"}
    run_id = client.create_run(experiment, start_time=1_000_000, tags=tags).info.run_id
    for epoch, seconds in ((1, 0.5), (2, 1.2)):
        client.log_metric(run_id, "train_seconds", seconds, step=epoch)
    client.log_metric(run_id, "epoch", 2)
    client.set_terminated(run_id, end_time=1_005_000)
    rows = run_rows(client.search_runs([experiment]))
    assert rows[0]["train_seconds"] == 1.2 and rows[0]["seconds"] == 5.0
    table = budget_table(rows).splitlines()
    assert table[0] == "| Variant | Seed | Epochs | Parameters | Training (s) | Run wall time (s) |"
    assert table[2] == "| full_linc | 1 | 2 | - | 1.2 | 5 |"


def test_reference_curves_that_are_a_fifo_a_device_or_too_big_are_refused_at_once(
    tmp_path,
) -> None:
    # A FIFO blocked the read forever, /dev/zero filled memory: each read runs in a process of
    # its own with a deadline and a memory limit, so a regression fails instead of hanging.
    fifo, zero, big = tmp_path / "fifo.json", tmp_path / "zero.json", tmp_path / "big.json"
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    with open(big, "wb") as out:
        out.truncate(MAX_REFERENCE_CURVES_BYTES + 1)  # sparse: nothing written or read
    refusals = refusals_in_fresh_process(
        "from pathlib import Path\nfrom orchestration.report.ablation import read_reference_curves",
        [f"read_reference_curves(Path({str(path)!r}))" for path in (fifo, zero, big)],
        "ValueError",
    )
    assert [message for _, message in refusals] == [
        f"--reference-curves {fifo}: a named pipe (FIFO): expected a regular file",
        f"--reference-curves {zero}: a device: expected a regular file",
        f"--reference-curves {big}: 16 MiB: larger than the 16 MiB this reader accepts",
    ], refusals
    assert all(seconds < 1.0 for seconds, _ in refusals), refusals


def test_a_run_whose_tags_are_no_trial_s_stays_out_of_every_report(tmp_path, caplog) -> None:
    # whoever writes the store can tag a run: escape codes (a window title, a cleared screen)
    # and a forged table row reached linc-report's console and its Markdown files
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("reports")
    tags = [
        {"variant": "full_linc", "seed": "1234", "eval_set": "/data/my sets/solomon"},
        {"variant": "\x1b]0;owned\x07\x1b[2J", "seed": "1"},
        {"variant": "full_linc\n| FORGED ROW |", "seed": "1"},
        {"variant": "full_linc", "seed": "<img src=x onerror=alert(1)>"},
        {"variant": "full_linc", "seed": "7", "eval_set": "x | FORGED"},
    ]
    for values in tags:
        run = client.create_run(experiment, tags={"sweep": "s"} | values)
        client.set_terminated(run.info.run_id)
    caplog.set_level("WARNING", logger="orchestration.report.ablation")
    runs = finished_trial_runs(client, "reports", sweep="s")
    assert [r.data.tags["seed"] for r in runs] == ["1234"]  # a folder's name is a set's name
    left_out = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(left_out) == 4 and not any("\x1b" in line for line in left_out)
