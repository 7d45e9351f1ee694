"""orchestration.tracking.runs: a sweep's MLflow runs behind one object. A new parent run is
recorded as the sweep's folder keeps it; settling gives every trial run left RUNNING the status
its Tune result says, tags each with its final checkpoint, and ends the parent with the sweep's
summary. (Re-opening rules and a stopped sweep: tests/faults/test_faults.py.)"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.fs as pafs
from mlflow.tracking import MlflowClient

from orchestration.tracking.runs import SweepRuns
from orchestration.tracking.store import PARENT_RUN_TAG, TRIAL_TAG
from orchestration.tracking.target import TrackingTarget
from orchestration.tracking.writer import JOURNAL_FILE, RunWriter


@dataclass
class Checkpoint:
    path: str
    filesystem: pafs.FileSystem = field(default_factory=pafs.LocalFileSystem)

    def as_directory(self) -> contextlib.AbstractContextManager[str]:
        return contextlib.nullcontext(self.path)  # a local checkpoint is its own folder


@dataclass
class Result:
    """The attributes of a Tune result the settlement reads."""

    metrics: dict
    error: Exception | None = None
    checkpoint: Checkpoint | None = None


def test_settling_gives_each_trial_run_its_results_status(tmp_path: Path) -> None:
    target = TrackingTarget(f"sqlite:///{tmp_path / 'mlflow.db'}", "runs-test")
    sweep = {"name": "s", "kind": "ablation"}
    runs = SweepRuns.open(target, sweep, {"train.epochs": "2"}, str(tmp_path / "s"), None)
    parent_id = runs.parent.run_id
    assert runs.record == {
        "parent_run_id": parent_id,
        "name": "s",
        "tracking_uri": target.uri,
        "experiment_path": str(tmp_path / "s"),
    }
    trials = runs.for_trials(("train.learning_rate",))
    assert (trials.parent_run_id, trials.sweep) == (parent_id, "s")
    client = MlflowClient(tracking_uri=target.uri)
    experiment = target.experiment_id()
    ids = {}
    for name in ("done", "pruned", "failed"):
        tags = {PARENT_RUN_TAG: parent_id, TRIAL_TAG: name, "variant": "full_linc"}
        ids[name] = client.create_run(experiment, tags=tags).info.run_id
    (tmp_path / "s" / "done" / "checkpoint_000002").mkdir(parents=True)
    results = [
        Result(
            {"trial_id": "done", "completed": 1, "eval_cost": 5.0, "epoch": 2},
            checkpoint=Checkpoint(str(tmp_path / "s" / "done" / "checkpoint_000002")),
        ),
        Result({"trial_id": "pruned", "epoch": 1}),
        Result({"trial_id": "failed", "epoch": 1}, error=RuntimeError("boom")),
    ]
    model = runs.settle(
        results, status="FAILED", timeout_s=30, texts={"table.md": "| a |"}, metrics={"x": 1.0}
    )
    assert model is None
    done, pruned, failed = (client.get_run(ids[n]) for n in ("done", "pruned", "failed"))
    assert (done.info.status, pruned.info.status, failed.info.status) == (
        "FINISHED",
        "FINISHED",
        "FAILED",
    )
    assert done.data.tags["checkpoint"].endswith("done/checkpoint_000002/latest.pt")
    assert "stopped_early" not in done.data.tags
    assert pruned.data.tags["stopped_early"] == "true"
    assert pruned.data.tags["stopped_at_epoch"] == "1"
    parent = client.get_run(parent_id)
    assert parent.info.status == "FAILED" and parent.data.params == {"train.epochs": "2"}
    assert parent.data.metrics["trials"] == 3 and parent.data.metrics["trials_failed"] == 1
    assert parent.data.metrics["best_eval_cost"] == 5.0 and parent.data.metrics["x"] == 1.0
    assert {a.path for a in client.list_artifacts(parent_id)} == {"table.md"}


def test_a_recorded_parent_run_is_reopened_only_when_it_is_this_sweep_s(tmp_path: Path) -> None:
    # linc_sweep.json is the folder's, and whoever writes the folder writes it: a record naming
    # a colleague's run (another experiment) or another sweep's parent gets a new parent run
    target = TrackingTarget(f"sqlite:///{tmp_path / 'mlflow.db'}", "runs-test")
    folder = str(tmp_path / "s")
    sweep = {"name": "s", "kind": "ablation"}
    first = SweepRuns.open(target, sweep, {}, folder, None)
    assert SweepRuns.open(target, sweep, {}, folder, first.record).parent.run_id == (
        first.parent.run_id
    )  # its own: re-opened
    client = MlflowClient(tracking_uri=target.uri)
    colleague = client.create_run(client.create_experiment("colleague")).info.run_id
    other = SweepRuns.open(target, {"name": "t", "kind": "ablation"}, {}, folder, None)
    for forged in (colleague, other.parent.run_id):
        record = first.record | {"parent_run_id": forged}
        reopened = SweepRuns.open(target, sweep, {}, folder, record)
        assert reopened.parent.run_id not in (forged, first.parent.run_id)
        reopened.settle([], status="FINISHED", timeout_s=30)
    assert client.get_run(colleague).info.status == "RUNNING"  # untouched
    assert client.get_run(colleague).data.metrics == {}


def test_a_journal_of_a_trial_whose_run_was_never_made_makes_it_at_settling(tmp_path) -> None:
    # the store was down for the whole trial: its final checkpoint's journal holds the run's
    # description and every record; the driver makes the run (the journal's name and tags, the
    # trial's own key) and delivers them there
    target = TrackingTarget(f"sqlite:///{tmp_path / 'mlflow.db'}", "runs-test")
    runs = SweepRuns.open(target, {"name": "s", "kind": "ablation"}, {}, str(tmp_path / "s"), None)
    key = {TRIAL_TAG: "t1", PARENT_RUN_TAG: runs.parent.run_id}
    down = RunWriter("http://127.0.0.1:9").start(
        "runs-test", "full_linc-seed1", {"variant": "full_linc", "seed": "1"}, key
    )
    down.log_metrics({"loss": 2.0}, step=1)
    checkpoint = tmp_path / "s" / "t1" / "checkpoint_000001"
    down.save(checkpoint)
    assert not down.close(0)
    journal = json.loads((checkpoint / JOURNAL_FILE).read_text())
    (checkpoint / JOURNAL_FILE).write_text(json.dumps(journal | {"tracking_uri": target.uri}))
    runs.settle(
        [Result({"trial_id": "t1", "epoch": 1}, checkpoint=Checkpoint(str(checkpoint)))],
        status="FINISHED",
        timeout_s=30,
    )
    client = MlflowClient(tracking_uri=target.uri)
    (run,) = client.search_runs([target.experiment_id()], f"tags.`{TRIAL_TAG}` = 't1'")
    assert run.info.run_name == "full_linc-seed1" and run.data.tags["variant"] == "full_linc"
    assert run.data.tags[PARENT_RUN_TAG] == runs.parent.run_id
    assert run.data.metrics["loss"] == 2.0
