"""The platform end to end on a local Ray (smoke preset): sweeps, MLflow runs, retries, resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from linc_core.seeding import derive_seed
from orchestration.experiments import run_ablation, run_search, run_training
from orchestration.plan import TrialPlan
from orchestration.tracking import ensure_experiment
from sweeps.compose import load_platform_config
from sweeps.report import main as report_main

ROOT = Path(__file__).resolve().parents[1]


def smoke(tmp_path: Path, *overrides: str):
    return load_platform_config(
        ["preset=smoke", f"cluster.storage={tmp_path / 'runs'}", *overrides]
    )


def tracking_uri(config) -> str:
    return TrialPlan.from_config(config).tracking.uri


def runs_of(config, sweep: str):
    client = MlflowClient(tracking_uri=tracking_uri(config))
    experiment = client.get_experiment_by_name(config.tracking.experiment)
    return client, client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.sweep = '{sweep}'"
    )


def test_smoke_ablation_writes_nested_mlflow_runs_and_a_table(
    ray_session, tmp_path, capsys
) -> None:
    # one trial at a time, so the second runs in the first one's process (cluster.reuse_actors)
    config = smoke(tmp_path, "cluster.max_concurrent_trials=1")
    result = run_ablation(config)
    assert {row["variant"] for row in result.rows} == {"baseline", "full_linc"}
    assert all(row["error"] is None and row["eval_cost"] > 0 for row in result.rows)
    assert "| Full LINC |" in result.table and "| Baseline |" in result.table
    assert "Gap vs Full LINC (%)" in result.table

    client, runs = runs_of(config, "ablation-smoke")
    trials = [r for r in runs if r.data.tags.get("kind") != "sweep"]
    parents = [r for r in runs if r.data.tags.get("kind") == "sweep"]
    assert len(trials) == 2 and len(parents) == 1
    assert len({r.data.tags["worker_pid"] for r in trials}) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    # the sweep (what it varies) and its base trial's effective settings; no null slots
    sweep = {"kind": "ablation", "name": "ablation-smoke", "compare_to": "full_linc"}
    sweep |= {"variants": ("baseline", "full_linc"), "seeds": (1,), "resume": True}
    assert parent.data.params == TrialPlan.from_config(config).params(sweep=sweep)
    assert parent.data.params["sweep.variants"] == "('baseline', 'full_linc')"
    for run in trials:
        tags, params = run.data.tags, run.data.params
        assert run.info.status == "FINISHED"
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["variant"] in ("baseline", "full_linc") and tags["seed"] == "1"
        # the batches follow the training seed (data.seed null): the same for both variants
        assert tags["data_id"] == f"generated:cvrptw6:seed{derive_seed(1, 'data')}"
        assert len(tags["git_commit"]) in (40, len("unknown"))
        # the trial's own effective settings: its variant's switches, the real schedule
        assert params["train.epochs"] == "2" and params["variant"] == tags["variant"]
        assert params["data.id"] == tags["data_id"] and params["train.seed"] == "1"
        assert "None" not in params.values()
        scorer = "baseline" if tags["variant"] == "baseline" else "linc"
        assert params["model.scorer"] == scorer
        history = client.get_metric_history(run.info.run_id, "train_best_cost")
        assert [m.step for m in history] == [1, 2]
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"config.json", "plan.json", "evaluation_rows.csv", "routes.png"} <= artifacts
        assert run.data.metrics["eval_infeasible"] == 0
    parent_artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"ablation_table.md", "ablation_rows.json"} <= parent_artifacts
    # the table's numbers are the trials' logged evaluation costs
    costs = {r.data.tags["variant"]: r.data.metrics["eval_cost"] for r in trials}
    assert f"| {costs['full_linc']:.2f} | +0.00 |" in result.table

    # linc-report rebuilds the same table (but its wall-time column) from MLflow alone
    uri = result.tracking_uri
    args = ["--tracking-uri", uri, "--experiment", "linc-smoke", "--sweep", "ablation-smoke"]
    assert report_main(["ablation", *args]) == 0
    printed = capsys.readouterr().out.splitlines()

    def without_time(lines):
        return [line.rsplit("|", 2)[0] for line in lines if line.startswith("| ")]

    assert without_time(printed) == without_time(result.table.splitlines())
    assert report_main(["budget", *args]) == 0
    budget = capsys.readouterr().out
    assert "| baseline | 1 | 2 |" in budget and "| full_linc | 1 | 2 |" in budget


def test_trial_that_fails_once_resumes_from_its_checkpoint(ray_session, tmp_path) -> None:
    config = smoke(tmp_path, "fault.fail_at_epoch=1", "train.epochs=3")
    result = run_training(config, name="retry")
    assert result.rows[0]["epochs"] == 3 and result.rows[0]["error"] is None
    client, runs = runs_of(config, "retry")
    trials = [r for r in runs if r.data.tags.get("kind") != "sweep"]
    assert len(trials) == 1, "the retry re-opens the trial's MLflow run"
    steps = [m.step for m in client.get_metric_history(trials[0].info.run_id, "train_best_cost")]
    assert steps == [1, 2, 3], "epoch 1 is not trained twice: the retry starts at epoch 2"
    state = (tmp_path / "runs" / "retry").glob("train_linc_*/error.txt")
    assert any("fail_at_epoch=1" in p.read_text() for p in state)


def test_data_parallel_trial_trains_through_the_same_callbacks(ray_session, tmp_path) -> None:
    config = smoke(tmp_path, "cluster.num_workers=2", "cluster.cpus_per_worker=1")
    result = run_training(config, name="ddp")
    row = result.rows[0]
    assert row["error"] is None and row["epochs"] == 2 and row["eval_cost"] > 0
    client, runs = runs_of(config, "ddp")
    (trial,) = [r for r in runs if r.data.tags.get("kind") != "sweep"]
    steps = [m.step for m in client.get_metric_history(trial.info.run_id, "train_best_cost")]
    assert steps == [1, 2] and trial.data.metrics["eval_infeasible"] == 0


def test_optuna_search_with_asha_reports_a_best_config(ray_session, tmp_path) -> None:
    config = smoke(tmp_path, "train.epochs=3")
    result, best = run_search(config)
    assert len(result.rows) == 4
    assert 1e-5 <= best["train.learning_rate"] <= 1e-3
    client, runs = runs_of(config, "hpo-smoke")
    parent = next(r for r in runs if r.data.tags.get("kind") == "sweep")
    assert float(parent.data.tags["best.train.learning_rate"]) == best["train.learning_rate"]
    # The best is the lowest validation cost any trial logged at any epoch (ASHA stops some
    # trials early, so a trial's last value is not its best), and that trial's learning rate.
    trials = [r for r in runs if r.data.tags.get("kind") != "sweep"]
    lowest = {
        r.info.run_id: min(
            m.value for m in client.get_metric_history(r.info.run_id, "validation_cost")
        )
        for r in trials
    }
    winner = min(trials, key=lambda r: lowest[r.info.run_id])
    assert best["validation_cost"] == pytest.approx(lowest[winner.info.run_id], rel=1e-12)
    assert best["train.learning_rate"] == float(winner.data.params["train.learning_rate"])
    last = [r["validation_cost"] for r in result.rows if r["validation_cost"] is not None]
    assert best["validation_cost"] <= min(last)


def _ablation_command(tmp_path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sweeps.ablation",
        "preset=smoke",
        f"cluster.storage={tmp_path / 'runs'}",
        "cluster.max_concurrent_trials=1",
        # A fresh process per trial: its start (seconds of imports) is the window in which the
        # test sees exactly one finished trial and kills the driver. A reused process would run
        # the second smoke trial in under a second.
        "cluster.reuse_actors=false",
        "train.epochs=4",
        *extra,
    ]


def test_killed_sweep_resumes_without_retraining_finished_trials(tmp_path) -> None:
    env = os.environ | {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    config = smoke(tmp_path)
    # the store's schema exists before this process polls it while the driver writes to it
    ensure_experiment(tracking_uri(config), config.tracking.experiment)
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(
        _ablation_command(tmp_path),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    finished: list = []
    try:
        while time.monotonic() < deadline and first.poll() is None:
            if (tmp_path / "runs" / "mlflow.db").exists():
                _, runs = runs_of(config, "ablation-smoke")
                finished = [
                    r for r in runs if r.info.status == "FINISHED" and "variant" in r.data.tags
                ]
                if finished:
                    break
            time.sleep(1.0)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)  # the driver and the Ray it started
        first.wait(timeout=60)
    assert len(finished) == 1, (tmp_path / "first.log").read_text()[-3000:]
    done_variant = finished[0].data.tags["variant"]

    second = subprocess.run(
        _ablation_command(tmp_path),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "| Full LINC |" in second.stdout and "| Baseline |" in second.stdout
    client, runs = runs_of(config, "ablation-smoke")
    trials = [r for r in runs if "variant" in r.data.tags]
    same = [r for r in trials if r.data.tags["variant"] == done_variant]
    assert len(same) == 1, "the finished trial was not trained again"
    steps = [m.step for m in client.get_metric_history(same[0].info.run_id, "train_best_cost")]
    assert steps == [1, 2, 3, 4]
    assert {r.data.tags["variant"] for r in trials if r.info.status == "FINISHED"} == {
        "baseline",
        "full_linc",
    }
