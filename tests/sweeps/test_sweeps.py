"""The platform end to end on a local Ray (smoke preset): sweeps, MLflow runs, retries, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from linc_core.commands.evaluate import main as eval_main
from linc_core.presets import PRESETS
from linc_core.runs.memory import MIN_ROLLOUTS_PER_CHUNK
from linc_core.utils.seeding import derive_seed
from orchestration.experiment.ablation import run_ablation
from orchestration.experiment.search import run_search
from orchestration.experiment.sweep import Sweep, run_training
from orchestration.failures import SweepRefused, TrialFailed
from orchestration.report.ablation import EVALUATION_SUMMARY
from orchestration.tracking.store import TRIAL_TAG, ensure_experiment
from orchestration.trial.plan import TrialPlan
from sweeps.compose import load_platform_config
from sweeps.report import main as report_main
from tests.conftest import PNG_MAGIC, sweep_env

ROOT = Path(__file__).resolve().parents[2]


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
    config = smoke(tmp_path, "cluster.max_concurrent_trials=1", "ablation.seeds=[1,2]")
    result = run_ablation(config)
    assert {row["variant"] for row in result.rows} == {"baseline", "full_linc"}
    assert all(row["error"] is None and row["eval_cost"] > 0 for row in result.rows)
    # each trial reports its process's peak resident memory (GB), every epoch and at the end
    assert all(0.1 < row["peak_rss_gb"] < 64 for row in result.rows)
    assert "| Full LINC |" in result.table and "| Baseline |" in result.table
    assert "Gap vs Full LINC (%)" in result.table

    client, runs = runs_of(config, "ablation-smoke")
    trials = [r for r in runs if r.data.tags.get("kind") != "sweep"]
    parents = [r for r in runs if r.data.tags.get("kind") == "sweep"]
    assert len(trials) == 4 and len(parents) == 1
    assert len({r.data.tags["worker_pid"] for r in trials}) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    # the sweep (what it varies) and its base trial's effective settings; no null slots
    sweep = {"kind": "ablation", "name": "ablation-smoke", "compare_to": "full_linc"}
    sweep |= {"variants": ("baseline", "full_linc"), "seeds": (1, 2), "resume": True}
    varied = ("model.variant", "train.seed")  # the parent run is no trial: not its variant
    assert parent.data.params == TrialPlan.from_config(config).params(varied=varied, sweep=sweep)
    assert "variant" not in parent.data.params and "train.seed" not in parent.data.params
    assert parent.data.params["sweep.variants"] == "('baseline', 'full_linc')"
    for run in trials:
        tags, params = run.data.tags, run.data.params
        assert run.info.status == "FINISHED"
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["variant"] in ("baseline", "full_linc") and tags["seed"] in ("1", "2")
        # the batches follow the training seed (data.seed null): the same for both variants
        seed = int(tags["seed"])
        assert tags["data_id"] == f"generated:cvrptw6:seed{derive_seed(seed, 'data')}"
        assert len(tags["git_commit"]) in (40, len("unknown"))
        # the trial's own effective settings: its variant's switches, the real schedule
        assert params["train.epochs"] == "2" and params["variant"] == tags["variant"]
        assert params["data.id"] == tags["data_id"] and params["train.seed"] == tags["seed"]
        assert "None" not in params.values()
        scorer = "baseline" if tags["variant"] == "baseline" else "linc"
        assert params["model.scorer"] == scorer
        history = client.get_metric_history(run.info.run_id, "train_best_cost")
        assert [m.step for m in history] == [1, 2]
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"config.json", "plan.json", "evaluation_rows.csv", "routes.png"} <= artifacts
        assert run.data.metrics["eval_infeasible"] == 0
        # the final checkpoint's durable path: what linc-eval --checkpoint reads
        checkpoint = Path(tags["checkpoint"])
        assert checkpoint.is_file() and checkpoint.is_relative_to(tmp_path / "runs")
    parent_artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"ablation_table.md", "ablation_rows.json"} <= parent_artifacts
    report = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    figures = ("ablation_chart.png", "training_curves.png", "pairwise_curves.png")
    figures += ("validation_curves.png",)  # the smoke preset validates every epoch
    names = ("ablation_statistics.md", "ablation_statistics.csv", *figures)
    assert report == {f"report/{name}" for name in names}
    for figure in figures:
        png = Path(client.download_artifacts(parent.info.run_id, f"report/{figure}"))
        assert png.read_bytes().startswith(PNG_MAGIC)
    statistics = Path(
        client.download_artifacts(parent.info.run_id, "report/ablation_statistics.md")
    )
    header, _, *table = statistics.read_text().split("\n\n")[0].splitlines()
    full_linc = next(line for line in table if line.startswith("| Full LINC |"))
    baseline = next(line for line in table if line.startswith("| Baseline |"))
    assert "95% CI (seeds)" in header and "95% CI (paired bootstrap)" in header
    assert "| Sign |" in header
    assert full_linc.endswith("| reference | 2 |")
    # two seeds: an interval over seeds and a paired bootstrap interval, a sign resolved or not
    assert baseline.endswith("| 2 |")
    cells = [c.strip() for c in baseline.strip("|").split("|")]
    assert cells[2].startswith("[") and cells[4].startswith("[")
    assert cells[5] in ("better", "worse", "not resolved")
    # each trial's gap: to Full LINC of its own seed, over the same instances
    costs = {(r.data.tags["variant"], r.data.tags["seed"]): r for r in trials}
    for seed in ("1", "2"):
        assert costs[("full_linc", seed)].data.metrics["gap_vs_variant_pct"] == 0.0
        baseline_run = costs[("baseline", seed)]
        own, reference = (
            costs[(v, seed)].data.metrics["eval_cost"] for v in ("baseline", "full_linc")
        )
        # every instance is feasible here, so the paired gap is the gap of the mean costs
        expected = 100 * (own - reference) / reference
        assert baseline_run.data.metrics["gap_vs_variant_pct"] == pytest.approx(expected, rel=1e-9)
    assert not any(key.startswith("gap_vs_variant_pct.") for key in parent.data.metrics)
    experiment = client.get_experiment_by_name(config.tracking.experiment)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    # the runs table opens (through the UI's shared view) on the columns that compare runs
    saved = json.loads(experiment.tags["mlflow.sharedViewState.linc-runs"])  # the Views menu's
    view = json.loads(saved["state"])
    assert saved["name"] == "linc: every trial" and isinstance(saved["createdAt"], int)
    sweep_view = json.loads(
        json.loads(experiment.tags["mlflow.sharedViewState.sweep-ablation-smoke"])["state"]
    )
    assert sweep_view["searchFilter"] == "tags.`sweep` = 'ablation-smoke'"
    shown = {"metrics.`eval_cost`", "metrics.`gap_vs_variant_pct`", "tags.`variant`"}
    assert shown | {"tags.`seed`"} <= set(view["selectedColumns"])
    assert all(
        f"metrics.`{key}`" in view["selectedColumns"]
        for key in trials[0].data.metrics
        if key in ("eval_cost", "gap_vs_variant_pct", "train_best_cost", "validation_cost")
    )
    assert Path(experiment.artifact_location) == tmp_path / "runs" / "mlartifacts"
    for run in runs:  # every artifact beside the store, none in the working directory
        assert Path(run.info.artifact_uri).is_relative_to(tmp_path / "runs" / "mlartifacts")
    # two variants' effective params differ exactly in the baseline's switches (and the name)
    first = {r.data.tags["variant"]: r.data.params for r in trials if r.data.tags["seed"] == "1"}
    differing = {
        key
        for key in first["baseline"].keys() & first["full_linc"].keys()
        if first["baseline"].get(key) != first["full_linc"].get(key)
    }
    # ... and the baseline logs none of the settings its switches never read: the feature
    # scorer's (dot-product scorer), the gate's (no GateAttn), the temperature schedule's
    # (group-mean credit) and the best-only start (dense credit)
    omitted = first["full_linc"].keys() - first["baseline"].keys()
    unread = ("candidate_features", "centred_features", "centring", "summary")
    unread += ("scorer_hidden_dim", "phi_bias", "gate_mode", "gate_init_bias")
    schedule = ("tau_start", "tau_end", "tau_anneal_ratio", "best_only_start_ratio")
    assert omitted == {f"model.{k}" for k in unread} | {f"train.{k}" for k in schedule}
    assert first["baseline"].keys() - first["full_linc"].keys() == set()
    assert first["full_linc"]["train.precision"] == "fp32"  # auto, as it ran on CPU
    switches = PRESETS["baseline"]
    allowed = {"variant"} | {f"model.{k}" for k in switches.model}
    allowed |= {f"train.{k}" for k in switches.train}
    assert {"variant", "model.scorer", "model.gated_attention", "model.depth_mixer"} <= differing
    assert differing <= allowed
    # the checkpoint tag is what linc-eval takes as is
    eval_out = tmp_path / "eval"
    checkpoint = costs[("full_linc", "1")].data.tags["checkpoint"]
    eval_args = ["--checkpoint", checkpoint, "--benchmark", "solomon50", "--limit", "1"]
    eval_args += ["--decode", "greedy", "--aug", "1", "--plot", "0", "--out", str(eval_out)]
    assert eval_main(eval_args) == 0
    assert (eval_out / "rows.csv").read_text().count("\n") == 2  # header and the one instance
    # the table's numbers are the trials' logged evaluation costs (mean over the seeds)
    means = {
        variant: sum(costs[(variant, s)].data.metrics["eval_cost"] for s in ("1", "2")) / 2
        for variant in ("baseline", "full_linc")
    }
    assert f"| {means['full_linc']:.2f} | +0.00 |" in result.table

    # linc-report rebuilds the same table (but its wall-time column) from MLflow alone
    uri = result.tracking_uri
    args = ["--tracking-uri", uri, "--experiment", "linc-smoke", "--sweep", "ablation-smoke"]
    capsys.readouterr()  # what the sweep and linc-eval printed
    assert report_main(["ablation", *args]) == 0
    printed = capsys.readouterr().out.splitlines()

    def without_time(lines):
        return [line.rsplit("|", 2)[0] for line in lines if line.startswith("| ")]

    overview = printed[: printed.index("")]  # then the statistics table
    assert without_time(overview) == without_time(result.table.splitlines())
    assert report_main(["budget", *args]) == 0
    budget = capsys.readouterr().out
    assert "| baseline | 2 | 2 |" in budget and "| full_linc | 1 | 2 |" in budget


def test_trial_that_fails_once_resumes_from_its_checkpoint(ray_session, tmp_path) -> None:
    config = smoke(tmp_path, "fault.fail_at_epoch=1", "train.epochs=3")
    result = run_training(config, name="retry")
    assert result.rows[0]["epochs"] == 3 and result.rows[0]["error"] is None
    client, runs = runs_of(config, "retry")
    trials = [r for r in runs if r.data.tags.get("kind") != "sweep"]
    assert len(trials) == 1, "the retry re-opens the trial's MLflow run"
    steps = [m.step for m in client.get_metric_history(trials[0].info.run_id, "train_best_cost")]
    assert steps == [1, 2, 3], "epoch 1 is not trained twice: the retry starts at epoch 2"
    state = (tmp_path / "runs" / "retry").glob("trial_000_full_linc_seed=1234/error.txt")
    assert any("fail_at_epoch=1" in p.read_text() for p in state)


def test_a_trial_failing_for_good_ends_linc_tune_in_one_line(ray_session, tmp_path) -> None:
    config = smoke(tmp_path, "fault.fail_at_epoch=1", "train.epochs=2", "cluster.max_failures=0")
    with pytest.raises(TrialFailed) as failed:
        run_training(config, name="fails")
    told = str(failed.value)
    assert told.startswith("fails: the trial failed after 0 retries (")
    assert "fault.fail_at_epoch=1: failing on purpose" in told and "\n" not in told
    assert failed.value.exit_code == 1  # run_cli prints SweepStopped's message, exits with it


def test_a_reused_process_reports_each_trial_its_own_peak_memory(ray_session, tmp_path) -> None:
    """Two trials, one after another in one process (``cluster.reuse_actors``): the first holds
    0.5 GiB more from its second epoch on; the second trial's ``peak_rss_gb`` is its own, not
    the process's peak over both."""
    from ray import tune

    config = smoke(tmp_path, "train.epochs=2", "cluster.max_concurrent_trials=1")
    space = config.with_values(**{"fault.memory_spike_gb": tune.grid_search([0.5, None])})
    with Sweep(config, {"name": "peaks", "kind": "train"}) as sweep:
        results = sweep.run_trials(space)
    trials = sorted(results, key=lambda r: r.metrics["trial_id"])  # creation order
    spiked, plain = (r.metrics for r in trials)
    assert [r.config["fault"]["memory_spike_gb"] for r in trials] == [0.5, None]
    assert spiked["pid"] == plain["pid"], "the second trial ran in the first one's process"
    assert plain["peak_rss_gb"] < spiked["peak_rss_gb"] - 0.4  # 0.5 GiB = 0.54 GB


def test_a_trial_reserving_less_than_it_holds_gives_its_heap_back_after_its_steps(
    ray_session, tmp_path
) -> None:
    """A trial that reserves 10 MiB (``cluster.memory_per_trial_gb=0.01``) holds more than that
    after every step, so its process trims its free heap after its steps and logs how often
    (``heap_trims``), and decodes its final evaluation (8 instances x 600 rollouts) in the
    least chunks; a trial reserving its estimate never reaches its ceiling and decodes in the
    default chunk, the same rows."""
    from ray import tune

    overrides = ("train.epochs=2", "cluster.max_concurrent_trials=1", "data.eval_rollouts=600")
    config = smoke(tmp_path, *overrides)
    space = config.with_values(**{"cluster.memory_per_trial_gb": tune.grid_search([0.01, None])})
    with Sweep(config, {"name": "trims", "kind": "train"}) as sweep:
        results = sweep.run_trials(space)
    reserved = {r.metrics["trial_id"]: r.config["cluster"]["memory_per_trial_gb"] for r in results}
    steps = {r.config["cluster"]["memory_per_trial_gb"]: r.metrics["global_step"] for r in results}
    client, runs = runs_of(config, "trims")
    trims = {
        reserved[run.data.tags[TRIAL_TAG]]: run.data.metrics["heap_trims"]
        for run in runs
        if run.data.tags.get("kind") != "sweep"
    }
    assert trims[None] == 0
    assert 1 <= trims[0.01] <= steps[0.01], (trims, steps)
    chunks = {
        reserved[run.data.tags[TRIAL_TAG]]: json.loads(
            Path(client.download_artifacts(run.info.run_id, EVALUATION_SUMMARY)).read_text()
        )["decode"]["max_rollouts_per_chunk"]
        for run in runs
        if run.data.tags.get("kind") != "sweep"
    }
    assert chunks == {0.01: MIN_ROLLOUTS_PER_CHUNK, None: None}  # 4,800 rollouts: 19 chunks
    costs = {r.config["cluster"]["memory_per_trial_gb"]: r.metrics["eval_cost"] for r in results}
    assert costs[0.01] == costs[None], costs


def test_a_sweep_begun_with_other_settings_is_named_and_keeps_its_status(
    ray_session, tmp_path
) -> None:
    """Resuming a sweep that another linc version began (its settings have other keys) is a
    one-line config error naming the keys; the finished sweep's parent run stays FINISHED."""
    config = smoke(tmp_path, "train.epochs=1")
    run_training(config, name="versions")
    client, runs = runs_of(config, "versions")
    parent = next(r for r in runs if r.data.tags.get("kind") == "sweep")
    assert parent.info.status == "FINISHED"
    newer = dict(config.raw) | {"added_setting": 1}
    changed = pytest.raises(SweepRefused, match=r"only in this version: \['added_setting'\]")
    with changed, Sweep(config, {"name": "versions", "kind": "train"}) as sweep:
        sweep.run_trials(newer)
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"


def test_data_parallel_trial_trains_through_the_same_callbacks(ray_session, tmp_path) -> None:
    """Two workers train a trial through the single-process trial's callbacks; reserving 10
    MiB between them, each worker trims its heap after its steps, and the trial's run logs
    their trims summed (``heap_trims``)."""
    config = smoke(
        tmp_path,
        "cluster.num_workers=2",
        "cluster.cpus_per_worker=1",
        "cluster.memory_per_trial_gb=0.01",
    )
    result = run_training(config, name="ddp")
    row = result.rows[0]
    assert row["error"] is None and row["epochs"] == 2 and row["eval_cost"] > 0
    client, runs = runs_of(config, "ddp")
    (trial,) = [r for r in runs if r.data.tags.get("kind") != "sweep"]
    steps = [m.step for m in client.get_metric_history(trial.info.run_id, "train_best_cost")]
    assert steps == [1, 2] and trial.data.metrics["eval_infeasible"] == 0
    trained = TrialPlan.from_config(config).run.train
    steps = trained.epochs * trained.instances_per_epoch // trained.batch_size  # 2 x 8 / 4
    # above one worker's steps: both workers trimmed (each holds far more than its 5 MiB)
    assert steps < trial.data.metrics["heap_trims"] <= 2 * steps


def test_optuna_search_with_asha_reports_a_best_config(ray_session, tmp_path) -> None:
    config = smoke(tmp_path, "train.epochs=3")
    result = run_search(config)
    best = result.best
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
    assert best["validation_cost"] == pytest.approx(min(lowest.values()), rel=1e-12)
    # smoke instances are tiny: two learning rates can reach the same cost; either is the best
    winners = [r for r in trials if lowest[r.info.run_id] == pytest.approx(min(lowest.values()))]
    rates = {float(r.data.params["train.learning_rate"]) for r in winners}
    assert best["train.learning_rate"] in rates
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
    env = sweep_env()
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
