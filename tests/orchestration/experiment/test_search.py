"""The search (``orchestration.experiment.search``) on a local Ray at the smoke preset: runs that
end truthfully and are evaluated, a persistent Optuna study that resumes and grows, the
multi-objective and the switch searches, a study on PostgreSQL, optuna-dashboard."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from faults.servers import free_port
from orchestration.experiment.search import run_search
from orchestration.failures import SweepRefused
from sweeps.compose import load_platform_config
from tests.conftest import answer_json


def search(tmp_path: Path, *overrides: str):
    config = load_platform_config(
        ["preset=smoke", f"cluster.storage={tmp_path / 'runs'}", "train.epochs=4", *overrides]
    )
    return config, run_search(config)


def trial_runs(tmp_path: Path) -> list:
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("linc-smoke")
    runs = client.search_runs([experiment.experiment_id])
    return client, [r for r in runs if r.data.tags.get("kind") != "sweep"], runs


def study(tmp_path: Path, name: str = "hpo-smoke"):
    storage = f"sqlite:///{tmp_path / 'runs' / 'optuna.db'}"
    return optuna.load_study(study_name=name, storage=storage)


def test_a_search_ends_its_runs_truthfully_evaluates_them_and_names_them(
    ray_session, tmp_path
) -> None:
    """ASHA stops some trials early: none is FAILED; every run that trained all 4 epochs has
    eval_cost; the early-stopped ones are FINISHED, tagged with their epoch, PRUNED in the
    study; runs and trial folders are named by the searched values."""
    _, result = search(tmp_path, "search.num_samples=6", "search.max_concurrent=2")
    best = result.best
    client, trials, runs = trial_runs(tmp_path)
    assert len(trials) == 6 and {r.info.status for r in runs} == {"FINISHED"}
    pruned = {t.number for t in study(tmp_path).trials if t.state.name == "PRUNED"}
    stopped = 0
    for run in trials:
        epochs = len(client.get_metric_history(run.info.run_id, "epoch"))
        assert "learning_rate=" in run.info.run_name and "tau_start=" in run.info.run_name
        if epochs == 4:
            assert "eval_cost" in run.data.metrics and "stopped_early" not in run.data.tags
        else:
            stopped += 1
            assert run.data.tags["stopped_early"] == "true"
            assert run.data.tags["stopped_at_epoch"] == str(epochs)
    assert stopped == len(pruned)  # the scheduler's stops are the study's pruned trials
    # numbered as the study numbers them: folders, run names (number first) and tags
    folders = sorted(p.name for p in (tmp_path / "runs" / "hpo-smoke").glob("trial_*"))
    assert folders[0].startswith("trial_000_learning_rate=") and len(folders) == 6
    names = sorted(run.info.run_name for run in trials)
    assert [name[:5] for name in names] == [f"#{n:03d} " for n in range(6)]
    assert {r.data.tags["optuna.study"] for r in trials} == {"hpo-smoke"}
    for trial in study(tmp_path).trials:
        run = next(r for r in trials if r.data.tags["optuna.trial_number"] == str(trial.number))
        assert trial.user_attrs["mlflow_run_id"] == run.info.run_id
    assert set(best) == {"trial", "train.learning_rate", "train.tau_start", "validation_cost"}
    # one best: every best_* of the parent is the study's best trial's, its run best_run
    parent = client.get_run(next(r for r in runs if r not in trials).info.run_id).data
    chosen = next(r for r in trials if r.data.tags["optuna.trial_number"] == str(best["trial"]))
    assert parent.tags["best_run"] == chosen.info.run_id
    assert parent.metrics["best_validation_cost"] == best["validation_cost"]
    assert parent.metrics["best_eval_cost"] == chosen.data.metrics["eval_cost"]
    assert "| trial | state | validation_cost | params |" in result.table


def test_rerunning_a_search_resumes_its_study_and_adds_only_the_missing_trials(
    ray_session, tmp_path
) -> None:
    search(tmp_path, "search.num_samples=3")
    first = study(tmp_path).trials
    assert len(first) == 3
    search(tmp_path, "search.num_samples=3")  # nothing missing: nothing new
    assert [t.params for t in study(tmp_path).trials] == [t.params for t in first]
    search(tmp_path, "search.num_samples=6")
    trials = study(tmp_path).trials
    assert len(trials) == 6
    assert [t.params for t in trials[:3]] == [t.params for t in first]
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 6  # none repeated
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in trials)
    assert (tmp_path / "runs" / "hpo-smoke-more1").is_dir()
    _, runs, everything = trial_runs(tmp_path)
    parents = [r for r in everything if r.data.tags.get("kind") == "sweep"]
    assert len(parents) == 1 and len(runs) == 6  # one parent run for every stage
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {parents[0].info.run_id}


def test_a_multi_objective_search_logs_its_pareto_front(ray_session, tmp_path, capsys) -> None:
    metrics = ["search.metric=[validation_cost,seconds]", "search.mode=[min,min]"]
    config, result = search(tmp_path, "search.num_samples=3", *metrics)
    # the console's summary ranks by the study's objectives: its front, not a best eval_cost
    printed = capsys.readouterr().out
    assert "; Pareto front of validation_cost (min), seconds (min), " in printed
    assert "best eval_cost" not in printed
    front = study(tmp_path)
    assert [d.name for d in front.directions] == ["MINIMIZE", "MINIMIZE"]
    assert front.metric_names == ["validation_cost", "seconds"]  # named in optuna-dashboard
    # the result is the study's Pareto front, each trial with its values and objectives
    assert len(result.best) == len(front.best_trials) >= 1
    assert all({"validation_cost", "seconds", "train.learning_rate"} <= set(b) for b in result.best)
    client, _, runs = trial_runs(tmp_path)
    parent = next(r for r in runs if r.data.tags.get("kind") == "sweep")
    table = Path(client.download_artifacts(parent.info.run_id, "pareto_front.md", tmp_path))
    lines = table.read_text().splitlines()
    assert lines[0] == "| trial | validation_cost | seconds | params |"
    assert len(lines) - 2 == len(front.best_trials) >= 1
    figures = {a.path for a in client.list_artifacts(parent.info.run_id, "study")}
    assert "study/pareto_front.png" in figures
    assert {
        f"study/optimization_history_{m}.png" for m in ("validation_cost", "seconds")
    } <= figures
    # no single best: the front (trials, values, run ids) and each objective's optimum
    metrics, tags = parent.data.metrics, parent.data.tags
    assert [k for k in metrics if k.startswith("best")] == [] and "best_run" not in tags
    by_number = {
        int(r.data.tags["optuna.trial_number"]): r.info.run_id for r in runs if r != parent
    }
    on_front = sorted(front.best_trials, key=lambda t: (t.values[0], t.number))
    assert tags["pareto_front.trials"] == ", ".join(str(t.number) for t in on_front)
    assert tags["pareto_front.run_ids"] == ", ".join(by_number[t.number] for t in on_front)
    for trial in on_front:
        validation, seconds = trial.values
        shown = (
            f"validation_cost={validation:.6g} seconds={seconds:.6g} run={by_number[trial.number]}"
        )
        assert tags[f"pareto_front.trial_{trial.number}"] == shown
    complete = [t for t in front.trials if t.values is not None]
    for index, metric in enumerate(("validation_cost", "seconds")):
        number = int(tags[f"lowest_{metric}.trial"])
        assert metrics[f"lowest_{metric}"] == min(t.values[index] for t in complete)
        assert metrics[f"lowest_{metric}"] == front.trials[number].values[index]
        assert tags[f"lowest_{metric}.run_id"] == by_number[number]
    assert metrics["pareto_front_size"] == len(on_front)


def test_a_switch_search_searches_the_variant_switches(ray_session, tmp_path) -> None:
    search(tmp_path, "search=switches", "search.num_samples=3")
    _, runs, _ = trial_runs(tmp_path)
    switches = ("scorer", "summary", "centring", "gated_attention", "depth_mixer")
    for run in runs:  # each trial ran the switches it was given (those it reads: its params)
        assert run.data.params["model.scorer"] in run.info.run_name
        for switch in switches:
            assert f"{switch}=" in run.info.run_name
            if f"model.{switch}" in run.data.params:
                assert f"{switch}={run.data.params[f'model.{switch}']}" in run.info.run_name
    assert len(study(tmp_path).trials[0].params) == 6


def test_a_study_on_postgresql_holds_every_trial(ray_session, tmp_path, postgres) -> None:
    search(tmp_path, "search.num_samples=2", "train.epochs=2", f"search.storage={postgres}")
    trials = optuna.load_study(study_name="hpo-smoke", storage=postgres).trials
    assert len(trials) == 2 and all(t.state.name == "COMPLETE" for t in trials)
    assert not (tmp_path / "runs" / "optuna.db").exists()


def test_optuna_dashboard_opens_the_study(ray_session, tmp_path) -> None:
    search(tmp_path, "search.num_samples=2", "train.epochs=2")
    port = free_port()
    storage = f"sqlite:///{tmp_path / 'runs' / 'optuna.db'}"
    program = Path(sys.executable).parent / "optuna-dashboard"  # the optional extra's command
    dashboard = [str(program), storage, "--host", "127.0.0.1"]
    server = subprocess.Popen(
        [*dashboard, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        studies = answer_json(f"http://127.0.0.1:{port}/api/studies")["study_summaries"]
        assert [s["study_name"] for s in studies] == ["hpo-smoke"]
        detail = answer_json(f"http://127.0.0.1:{port}/api/studies/{studies[0]['study_id']}")
        assert [t["state"] for t in detail["trials"]] == ["Complete", "Complete"]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_search_by_a_metric_only_the_last_report_carries_is_refused_before_it_starts(
    tmp_path,
) -> None:
    """``eval_cost`` comes with a trial's last report only, and Tune would refuse the first
    report without it, mid-sweep, with a traceback: one line, exit 2, nothing written."""
    config = load_platform_config(
        ["preset=smoke", f"cluster.storage={tmp_path / 'runs'}", "search.metric=eval_cost"]
    )
    with pytest.raises(SweepRefused) as err:
        run_search(config)
    assert str(err.value).startswith(
        "search.metric: expected a metric every trial report carries ("
    )
    assert "got 'eval_cost' (did you mean 'validation_cost'?)" in str(err.value)
    assert err.value.exit_code == 2
    assert not (tmp_path / "runs").exists()


def test_a_forged_study_trial_is_neither_best_nor_shown_nor_a_done_sample(
    ray_session, tmp_path, caplog, capsys
) -> None:
    """The red team's forged trial (tests/security/test_forged_optuna_study.py), end to end: a
    COMPLETE trial added to the study between two runs of the search, its value the best, a
    parameter holding a table row and escape codes, its run id any run's."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    search(tmp_path, "search.num_samples=2", "train.epochs=2")
    forged = study(tmp_path)
    evil = "x |\n| 999 | COMPLETE | <img src=https://attacker.example> \x1b]0;pwned\x07\x1b[2J"
    dists = forged.trials[0].distributions | {"train/evil": CategoricalDistribution([evil])}
    params = forged.trials[0].params | {"train/evil": evil}
    forged.add_trial(
        create_trial(
            params=params,
            distributions=dists,
            value=0.0001,
            user_attrs={"mlflow_run_id": "0123456789abcdef0123456789abcdef"},
        )
    )
    capsys.readouterr()
    _, result = search(tmp_path, "search.num_samples=3", "train.epochs=2")
    client, trials, runs = trial_runs(tmp_path)
    assert len(trials) == 3  # the forged trial is no done sample: a third one trained
    assert len(study(tmp_path).trials) == 4
    parent = next(r for r in runs if r.data.tags.get("kind") == "sweep").data
    assert parent.tags["best_run"] in {r.info.run_id for r in trials}
    assert result.best["trial"] != 2 and result.best["validation_cost"] != 0.0001
    assert not [k for k in parent.tags if "evil" in k]
    for text in (result.table, parent.tags["mlflow.note.content"], capsys.readouterr().out):
        assert "\x1b" not in text and "| 999 |" not in text and "<img" not in text
    assert len(result.table.splitlines()) == 2 + 3
    warned = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert warned and all("trial(s) 2 left out (1)" in w for w in warned)
