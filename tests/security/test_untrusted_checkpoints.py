"""A booby-trapped checkpoint through every way linc loads one: nothing in it ever runs.

The trap is a pickle whose ``__reduce__`` asks the unpickler to call ``os.system("touch
MARKER")`` (saved with ``torch.save``) or ``pathlib.Path(MARKER).touch`` (saved with plain
``pickle``), inside what looks like a linc checkpoint, with and without a forged manifest whose
SHA-256 matches (whoever writes a checkpoint writes its manifest). Each load path must refuse it
in one line naming the file, and the marker must never appear. ``test_the_trap_is_real`` shows
that an unsafe load does run it, so these tests can fail.

Paths: ``linc-eval --checkpoint`` (a subprocess), ``linc-train --resume/--warm-start/
--morph-from``, ``policy_from_checkpoint``, ``load_reference_checkpoint``, a trial restoring
from its Tune storage (``restore_newest_intact``, what the trainable calls), and
``mlflow.pyfunc.load_model`` of a registered model whose checkpoint artifact was replaced after
registration. Registration itself (``register_run``, ``linc-report register``,
``SweepRuns.register_best``) refuses a checkpoint outside the sweep's storage, one without a
manifest and a trapped one, and registers nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
import pickle
import subprocess
import sys
from pathlib import Path

import mlflow
import pyarrow.fs as pafs
import pytest

from linc_core.commands.train import main as train_main
from linc_core.model.reference_format import load_reference_checkpoint
from linc_core.train.checkpoint import CheckpointError, load_checkpoint, manifest_path
from linc_core.train.loop import policy_from_checkpoint
from orchestration.experiment.folder import SweepFolder
from orchestration.tracking.registry import register_run
from orchestration.tracking.runs import SweepRuns
from orchestration.tracking.store import PARENT_RUN_TAG
from orchestration.tracking.target import TrackingTarget
from orchestration.trial.checkpoints import restore_newest_intact
from sweeps.report import main as report_main
from tests.conftest import tiny_checkpoint

REFUSED = r"holds objects other than tensors and plain data \(it names (posix\.system|getattr)\)"


class _System:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class _Touch:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


def trap(path: Path, marker: Path, *, kind: str = "torch", manifest: bool = True) -> Path:
    """A linc-looking checkpoint at ``path`` whose unpickling touches ``marker``; ``manifest``:
    with a forged manifest that matches it."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "torch":
        payload = {"format_version": 1, "model_state": _System(f"touch {marker}")}
        torch.save(payload, path)
    else:
        with path.open("wb") as handle:
            pickle.dump({"format_version": 1, "model_state": _Touch(marker)}, handle)
    if manifest:
        content = path.read_bytes()
        forged = {
            "bytes": len(content),
            "sha256": hashlib.sha256(content).hexdigest(),
            "epoch": 9,
            "global_step": 999,  # newer than anything real: a restore tries it first
            "batch_in_epoch": 0,
        }
        manifest_path(path).write_text(json.dumps(forged))
    return path


TRAPS = [
    pytest.param("torch", True, id="torch.save-os.system-forged-manifest"),
    pytest.param("torch", False, id="torch.save-os.system-no-manifest"),
    pytest.param("pickle", True, id="pickle-Path.touch-forged-manifest"),
    pytest.param("pickle", False, id="pickle-Path.touch-no-manifest"),
]


def test_the_trap_is_real(tmp_path) -> None:
    """Loaded the way linc did before (``weights_only=False``), each trap runs its payload."""
    for kind in ("torch", "pickle"):
        marker = tmp_path / f"MARKER-{kind}"
        path = trap(tmp_path / f"{kind}.pt", marker, kind=kind)
        script = f"import torch; torch.load({str(path)!r}, weights_only=False)"
        subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
        assert marker.exists(), kind


@pytest.mark.parametrize(("kind", "manifest"), TRAPS)
def test_in_process_loads_refuse_the_trap_unrun(kind, manifest, tmp_path) -> None:
    marker = tmp_path / "MARKER"
    path = trap(tmp_path / "latest.pt", marker, kind=kind, manifest=manifest)
    refused = rf"^checkpoint {path}: {REFUSED}; refused without running it$"
    if kind == "pickle":  # plain pickle's protocol 4 frames are refused before its global
        refused = rf"^checkpoint {path}: (is no file of tensors|{REFUSED})"
    for load in (load_checkpoint, policy_from_checkpoint, load_reference_checkpoint):
        with pytest.raises(CheckpointError, match=refused) as told:
            load(str(path))
        assert "\n" not in str(told.value)
    assert not marker.exists()


@pytest.mark.parametrize(("kind", "manifest"), TRAPS[::3])
def test_linc_eval_refuses_the_trap_in_one_line(kind, manifest, tmp_path) -> None:
    marker = tmp_path / "MARKER"
    path = trap(tmp_path / "latest.pt", marker, kind=kind, manifest=manifest)
    command = [
        str(Path(sys.executable).parent / "linc-eval"),
        *("--checkpoint", str(path), "--benchmark", "synthetic-cvrptw-5", "--count", "1"),
        *("--out", str(tmp_path / "out"), "--no-progress"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    prefix = f"linc-eval: --checkpoint {path}: not a readable linc checkpoint ("
    assert done.stderr.startswith(prefix), done.stderr
    assert "refused without running it" in done.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag", ["--resume", "--warm-start", "--morph-from"])
def test_linc_train_refuses_the_trap_in_one_line(flag, tmp_path, capsys) -> None:
    marker = tmp_path / "MARKER"
    path = trap(tmp_path / "latest.pt", marker)
    tiny = ["--size", "5", "--epochs", "1", "--rollouts", "2", "--batch-size", "1"]
    tiny += ["--instances-per-epoch", "1", "--validation-size", "1"]
    assert train_main([*tiny, "--out", str(tmp_path / "out"), flag, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"linc-train: checkpoint {path}: holds")
    assert not marker.exists()


def test_a_trial_restoring_from_storage_skips_a_replaced_checkpoint(tmp_path, caplog) -> None:
    """The newest checkpoint of a trial's folder replaced (manifest forged to match, and
    claiming a later step): the restore names it in a warning, runs nothing and takes the older
    real one; with only the trapped one the trial starts from scratch."""
    marker = tmp_path / "MARKER"
    trial = tmp_path / "storage" / "sweep" / "trial_000"
    (trial / "checkpoint_000001").mkdir(parents=True)
    tiny_checkpoint(trial / "checkpoint_000001" / "latest.pt")
    trap(trial / "checkpoint_000002" / "latest.pt", marker)
    storage = SweepFolder(pafs.LocalFileSystem(), str(trial))
    with caplog.at_level(logging.WARNING, logger="orchestration.trial.checkpoints"):
        restored = restore_newest_intact(storage, tmp_path / "work")
    assert restored.source == f"{trial}/checkpoint_000001"
    assert load_checkpoint(restored.checkpoint)["epoch"] == 0  # the real one, loadable
    told = [r.getMessage() for r in caplog.records]
    assert any(
        f"{trial}/checkpoint_000002/latest.pt: holds objects other than tensors" in m for m in told
    ), told
    for path in (trial / "checkpoint_000001").iterdir():
        path.unlink()
    (trial / "checkpoint_000001").rmdir()
    assert restore_newest_intact(storage, tmp_path / "work").checkpoint is None
    assert not marker.exists()


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> TrackingTarget:
    """One SQLite store for the module (creating one costs seconds)."""
    folder = tmp_path_factory.mktemp("store")
    return TrackingTarget(f"sqlite:///{folder / 'mlflow.db'}", "security")


@pytest.fixture
def sweep_store(store, tmp_path):
    """A sweep's parent run (its storage logged as the driver logs it) and a FINISHED trial run
    whose ``checkpoint`` tag names a real checkpoint in that storage."""
    storage = tmp_path / "storage"
    checkpoint = storage / "sweep" / "trial_000" / "checkpoint_000001" / "latest.pt"
    checkpoint.parent.mkdir(parents=True)
    tiny_checkpoint(checkpoint)
    client = store.client()
    experiment = store.experiment_id()
    parent = client.create_run(experiment, tags={"sweep": "sweep", "kind": "sweep"})
    client.log_param(parent.info.run_id, "resources.storage", str(storage))
    tags = {PARENT_RUN_TAG: parent.info.run_id, "sweep": "sweep", "variant": "full_linc"}
    trial = client.create_run(experiment, tags=tags | {"checkpoint": str(checkpoint)})
    client.log_metric(trial.info.run_id, "eval_cost", 1.0)
    client.set_terminated(trial.info.run_id)
    return store, parent.info.run_id, trial.info.run_id, storage, checkpoint


def test_a_registered_models_replaced_checkpoint_is_refused_on_load(sweep_store) -> None:
    tracking, _, trial, _, _ = sweep_store
    assert register_run(tracking, trial, "trapped") == "1"
    client = tracking.client()
    version = client.get_model_version("trapped", "1")
    model_id = version.model_id or version.source.removeprefix("models:/")
    location = client.get_logged_model(model_id).artifact_location
    (artifact,) = Path(location.removeprefix("file://")).rglob("latest.pt")
    marker = artifact.parent / "MARKER"
    trap(artifact, marker, manifest=False)
    mlflow.set_tracking_uri(tracking.uri)
    with pytest.raises(Exception, match=rf"checkpoint \S*latest.pt: {REFUSED}") as told:
        mlflow.pyfunc.load_model("models:/trapped/1")
    assert type(told.value).__name__ == "CheckpointError"  # the model's own copy of linc_core
    assert not marker.exists()


@pytest.mark.parametrize("case", ["outside", "dot-dot", "no manifest", "trapped", "no storage"])
def test_registration_refuses_what_it_cannot_trust(
    case, sweep_store, tmp_path, capsys, caplog
) -> None:
    tracking, parent, trial, storage, checkpoint = sweep_store
    client = tracking.client()
    marker = tmp_path / "MARKER"
    if case == "outside":  # a real, verified checkpoint, but not the sweep's
        (tmp_path / "elsewhere").mkdir()
        target = str(tiny_checkpoint(tmp_path / "elsewhere" / "latest.pt"))
        told = f"checkpoint {target}: outside its sweep's storage {storage}; refused"
    elif case == "dot-dot":
        (tmp_path / "elsewhere").mkdir()
        tiny_checkpoint(tmp_path / "elsewhere" / "latest.pt")
        target = f"{storage}/sweep/../../elsewhere/latest.pt"
        told = f"checkpoint {target}: outside its sweep's storage"
    elif case == "no manifest":
        manifest_path(checkpoint).unlink()
        target = str(checkpoint)
        told = f"checkpoint {target}: no manifest (latest.pt.json) beside it; refused"
    elif case == "trapped":
        target = str(trap(checkpoint, marker))
        told = f"checkpoint {target}: holds objects other than tensors and plain data"
    else:  # a run that is no trial of a linc sweep
        client.delete_tag(trial, PARENT_RUN_TAG)
        target = str(checkpoint)
        told = f"run {trial}: its parent run records no sweep storage ('resources.storage')"
    client.set_tag(trial, "checkpoint", target)
    name = f"refused-{case.replace(' ', '-')}"
    with pytest.raises(CheckpointError) as refused:
        register_run(tracking, trial, name)
    assert str(refused.value).startswith(told) and "\n" not in str(refused.value)
    args = ["register", "--tracking-uri", tracking.uri, "--run", trial, "--name", name]
    assert report_main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"linc-report: register: {told}") and err.count("\n") == 1
    if case != "no storage":  # the sweep's own end: a warning, nothing registered
        runs = SweepRuns(tracking, "sweep", tracking.writer().attach(parent), str(storage))
        with caplog.at_level(logging.WARNING, logger="orchestration.tracking.runs"):
            assert runs.register_best(name) is None
        assert runs.parent.close(30)
        assert f"its best policy was not registered as {name} ({told}" in caplog.text
    assert not client.search_registered_models(f"name = '{name}'") and not marker.exists()
    logged = client.search_logged_models([tracking.experiment_id()])
    assert not [m for m in logged if m.source_run_id == trial]  # nothing logged on the run
