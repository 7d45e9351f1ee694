"""orchestration.experiment.sweep: the sweep's lifecycle in one object. An ablation whose trials
fail ends in one line and a non-zero exit (no traceback), its runs settled FAILED; a sweep whose
lease another driver holds is refused before anything of it is created."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from mlflow.tracking import MlflowClient

from orchestration.experiment.folder import SweepFolder
from orchestration.experiment.sweep import Sweep, run_training, tune_space
from orchestration.experiment.tune_state import check_state
from orchestration.failures import SweepRefused
from sweeps.compose import load_platform_config
from tests.conftest import sweep_env

ROOT = Path(__file__).resolve().parents[3]


def test_an_ablation_with_a_failing_trial_ends_in_one_line(tmp_path) -> None:
    env = sweep_env()
    command = [sys.executable, "-m", "sweeps.ablation", "preset=smoke"]
    command += [f"cluster.storage={tmp_path / 'runs'}", "cluster.max_failures=0"]
    command += ["fault.fail_at_epoch=1", "cluster.reuse_actors=false"]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert "Traceback" not in output and "Trials did not complete" not in output
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("linc-ablation: ablation-smoke: 2 of 2 trials failed after 0 retries")
    assert "InjectedFault: fault.fail_at_epoch=1: failing on purpose" in line
    assert "ablation-smoke: 2 trials: 0 finished, 2 failed, 0 retried" in done.stdout
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("linc-smoke")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 3 and {r.info.status for r in runs} == {"FAILED"}
    parent = next(r for r in runs if r.data.tags.get("kind") == "sweep")
    assert {"ablation_table.md", "ablation_rows.json"} <= {
        a.path for a in client.list_artifacts(parent.info.run_id)
    }


def test_a_sweep_another_driver_holds_is_refused_before_anything_of_it(tmp_path) -> None:
    config = load_platform_config(["preset=smoke", f"cluster.storage={tmp_path / 'runs'}"])
    folder = SweepFolder(pafs.LocalFileSystem(), str(tmp_path / "runs" / "s"))
    held = folder.take_lease("s")
    try:
        refused = pytest.raises(SweepRefused, match="s: another driver is running this sweep")
        with refused, Sweep(config, {"name": "s", "kind": "train"}) as sweep:
            sweep.run_trials(config.raw)
    finally:
        held.release()
    assert folder.record() is None  # no parent run opened, nothing recorded
    assert sorted(p.name for p in (tmp_path / "runs" / "s").iterdir()) == []


def test_tune_keeps_the_sweeps_settings_masked_and_not_one_runs_trust() -> None:
    """What Tune keeps: a password masked, and no ``cluster.trust_unsealed_state`` (one run's
    setting: a sweep restores with the keys it began with); the caller's space is untouched."""
    space = {
        "cluster": {"max_failures": 2, "trust_unsealed_state": True},
        "tracking": {"uri": "postgresql://linc:hunter2-secret@db/mlflow"},
        "train": {"lr": 1},
    }
    kept = tune_space(space)
    assert kept["cluster"] == {"max_failures": 2} and kept["train"] == {"lr": 1}
    assert "hunter2-secret" not in repr(kept)
    assert space["cluster"]["trust_unsealed_state"] is True  # a copy
    assert tune_space({"train": {}}) == {"train": {}}


def test_a_saved_sweep_resumes_with_its_own_settings_only(ray_session, tmp_path) -> None:
    """Re-run under its name with other settings, a finished sweep returned its old results as
    this run's; ``ablation.resume=false`` started a new experiment whose trials met their old
    checkpoints on every retry, and so did every later run of the sweep."""

    def smoke(*overrides: str):
        storage = f"cluster.storage={tmp_path / 'runs'}"
        return load_platform_config(["preset=smoke", storage, *overrides])

    first = run_training(smoke(), name="again")
    assert first.rows[0]["epochs"] == 2
    same = run_training(smoke("train.device=cpu"), name="again")  # how, not what
    assert same.rows[0]["eval_cost"] == first.rows[0]["eval_cost"]
    for changed, named in (
        ("train.learning_rate=0.001", "train.learning_rate=0.001 (saved: 0.0001)"),
        ("train.epochs=3", "train.epochs=3 (saved: 2)"),  # a finished trial does not run again
    ):
        with pytest.raises(SweepRefused) as refused:
            run_training(smoke(changed), name="again")
        told = str(refused.value)
        assert told.startswith(f"again: this run has {named}, unlike the sweep saved in ")
        assert told.endswith("re-run with its settings to resume it, or give this run another name")
    folder = SweepFolder(pafs.LocalFileSystem(), str(tmp_path / "runs" / "again"))
    assert check_state(folder, True, setting="ablation.resume").restoring
    with pytest.raises(SweepRefused) as refused:
        check_state(folder, False, setting="ablation.resume")
    assert str(refused.value) == (
        f"{folder.uri()} holds a saved sweep, and ablation.resume=false starts a new one over "
        "it: choose another name for it, delete that folder, or re-run with "
        "ablation.resume=true to resume it"
    )
    again = run_training(smoke(), name="again")  # the refused runs changed nothing
    assert again.rows[0]["eval_cost"] == first.rows[0]["eval_cost"]


def test_sigterm_while_ray_starts_stops_the_sweep_in_one_line(tmp_path) -> None:
    """SIGTERM before Tune runs (Ray starting: ray.init's own handler exits 15) used to end the
    driver with exit 15, no line, and its new parent run RUNNING for good (a re-run made
    another)."""
    import signal
    import time

    storage = tmp_path / "runs"
    command = [
        sys.executable,
        "-m",
        "sweeps.ablation",
        "preset=smoke",
        f"cluster.storage={storage}",
    ]
    command += ["ablation.variants=[baseline]", "ablation.compare_to=baseline"]
    driver = subprocess.Popen(
        command, cwd=ROOT, env=sweep_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    record = storage / "ablation-smoke" / "linc_sweep.json"  # written just before Ray starts
    deadline = time.monotonic() + 120
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    driver.send_signal(signal.SIGTERM)
    out, err = driver.communicate(timeout=300)
    assert driver.returncode == 143, (out + err)[-3000:]
    assert "Traceback" not in out + err
    assert err.strip().splitlines()[-1].startswith("linc-ablation: ablation-smoke: stopped ")
    client = MlflowClient(tracking_uri=f"sqlite:///{storage / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("linc-smoke")

    def parents():
        runs = client.search_runs([experiment.experiment_id])
        return [r for r in runs if r.data.tags.get("kind") == "sweep"]

    (parent,) = parents()
    assert parent.info.status == "KILLED"
    done = subprocess.run(command, cwd=ROOT, env=sweep_env(), capture_output=True, text=True)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    (again,) = parents()  # the same parent run, resumed: none left RUNNING
    assert (again.info.run_id, again.info.status) == (parent.info.run_id, "FINISHED")
