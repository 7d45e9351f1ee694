"""A tracking journal written by an intruder into a trial's checkpoint: replayed, it can reach
neither a file outside the checkpoint nor a run outside the trial's own.

Whoever can write a sweep's storage can write ``tracking_journal.json`` and its
``tracking_artifacts/`` folder, which the trial's next attempt and the sweep's driver deliver.
Before, an artifact record's ``file`` was joined to the paths unchecked: ``../../..`` read a
file planted in the sweep's folder and wrote it over any file the victim can write (a linked
one was read too: the victim's state key went into the run's artifacts), and the journal's run
id sent its records to any run in the store. Each test writes a real journal with
``RunWriter.save``, forges it, and replays it into a real SQLite MLflow store.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from mlflow.tracking import MlflowClient

from orchestration.tracking.journal import JOURNAL_ARTIFACTS, JOURNAL_FILE
from orchestration.tracking.writer import RunWriter

KEY = {"linc.trial_id": "trial-1"}


def saved_journal(tmp_path: Path, uri: str) -> Path:
    """A checkpoint folder with a real journal of one undelivered artifact (the store down)."""
    writer = RunWriter("http://127.0.0.1:9").start("journal", "trial", {}, KEY)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "report.txt").write_text("the trial's report")
    writer.log_artifact(tmp_path / "report.txt", "reports")
    checkpoint = tmp_path / "checkpoint"
    writer.save(checkpoint)
    assert not writer.close(0)
    state = json.loads((checkpoint / JOURNAL_FILE).read_text())
    state["tracking_uri"] = uri  # as if the store had only been down
    (checkpoint / JOURNAL_FILE).write_text(json.dumps(state))
    return checkpoint


def forge(checkpoint: Path, **changes: object) -> None:
    state = json.loads((checkpoint / JOURNAL_FILE).read_text())
    artifact = next(r for r in state["pending"] if r["op"] == "artifact")
    artifact.update(changes.pop("artifact", {}))
    state.update(changes)
    (checkpoint / JOURNAL_FILE).write_text(json.dumps(state))


def artifacts(uri: str, run_id: str) -> list[str]:
    client = MlflowClient(tracking_uri=uri)
    found = []
    for folder in [None, *(f.path for f in client.list_artifacts(run_id) if f.is_dir)]:
        found += [f.path for f in client.list_artifacts(run_id, folder) if not f.is_dir]
    return sorted(found)


def test_an_artifact_path_out_of_the_checkpoint_reaches_no_file(tmp_path, caplog) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    checkpoint = saved_journal(tmp_path / "sweep", uri)  # tmp_path/sweep/checkpoint
    victim = tmp_path / "home" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("the victim's own")
    # read from checkpoint/tracking_artifacts/FILE, written to spool/FILE: from a spool at
    # tmp_path/w/spool, ../../home/victim.txt is the victim's file, and from the checkpoint's
    # artifacts it is sweep/home/victim.txt, which the intruder planted
    planted = tmp_path / "sweep" / "home" / "victim.txt"
    planted.parent.mkdir()
    planted.write_text("written by the intruder")
    forge(checkpoint, artifact={"file": "../../home/victim.txt", "name": "a\0b"})
    caplog.set_level(logging.WARNING, logger="orchestration.tracking.journal")
    spool = tmp_path / "w" / "spool"
    writer = RunWriter(uri, spool=spool).start("journal", "trial", {}, KEY, journal=checkpoint)
    assert writer.close(60)
    assert victim.read_text() == "the victim's own" and planted.exists()
    assert artifacts(uri, writer.run_id) == []
    refused = "artifact file '../../home/victim.txt': not one file name"
    assert any(refused in r.message for r in caplog.records)


def test_a_linked_artifacts_folder_or_file_is_not_read(tmp_path, caplog) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    secret = tmp_path / "home" / "state.key"
    secret.parent.mkdir()
    secret.write_text("the victim's state key")
    caplog.set_level(logging.WARNING, logger="orchestration.tracking.journal")
    for kind in ("folder", "file"):
        checkpoint = saved_journal(tmp_path / kind, uri)
        folder = checkpoint / JOURNAL_ARTIFACTS
        name = json.loads((checkpoint / JOURNAL_FILE).read_text())["pending"][0]["file"]
        if kind == "folder":  # the folder itself a link to the victim's
            for entry in folder.iterdir():
                entry.unlink()
            folder.rmdir()
            folder.symlink_to(secret.parent)
            forge(checkpoint, artifact={"file": "state.key", "name": "key.txt"})
        else:
            (folder / name).unlink()
            (folder / name).symlink_to(secret)
        writer = RunWriter(uri).start("journal", "trial", {}, KEY, journal=checkpoint)
        assert writer.close(60)
        assert artifacts(uri, writer.run_id) == [], kind
    assert len([r for r in caplog.records if "(a link is not followed)" in r.message]) == 2


def test_the_journal_s_run_id_sends_nothing_to_another_run(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    colleague = client.create_run(client.create_experiment("colleague")).info.run_id
    checkpoint = saved_journal(tmp_path, uri)
    forge(checkpoint, run_id=colleague)
    state = json.loads((checkpoint / JOURNAL_FILE).read_text())
    state["pending"].append({"op": "tags", "values": {"injected": "yes"}})
    (checkpoint / JOURNAL_FILE).write_text(json.dumps(state))
    writer = RunWriter(uri).start("journal", "trial", {}, KEY, journal=checkpoint)
    assert writer.close(60)
    assert writer.run_id != colleague
    assert "injected" not in client.get_run(colleague).data.tags
    assert client.get_run(writer.run_id).data.tags["injected"] == "yes"  # the trial's own run
    assert artifacts(uri, writer.run_id) == ["reports/report.txt"]


def test_a_record_of_an_unknown_kind_or_values_is_dropped(tmp_path, caplog) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    checkpoint = saved_journal(tmp_path, uri)
    state = json.loads((checkpoint / JOURNAL_FILE).read_text())
    state["pending"] += [
        {"op": "exec", "values": {}},
        {"op": "tags", "values": {"a": {"nested": 1}}},
        {"op": "metrics", "values": {"loss": "NaN"}, "step": 1, "timestamp": 0},
        {"op": "status", "status": "DELETED"},
        {"op": "artifact", "file": "x", "name": "y", "path": "../up"},
    ]
    (checkpoint / JOURNAL_FILE).write_text(json.dumps(state))
    caplog.set_level(logging.WARNING, logger="orchestration.tracking.journal")
    writer = RunWriter(uri).start("journal", "trial", {}, KEY, journal=checkpoint)
    assert writer.close(60)
    dropped = [r.message.split("dropped: ")[1] for r in caplog.records if "dropped" in r.message]
    assert dropped == [
        "operation 'exec': unknown",
        "tags: values are not names and texts",
        "metrics: values are not names and numbers",
        "status 'DELETED': not one of ['FAILED', 'FINISHED', 'KILLED', 'RUNNING']",
        "artifact path '../up': not a folder of plain names",
    ]
    assert artifacts(uri, writer.run_id) == ["reports/report.txt"]  # the real record kept
