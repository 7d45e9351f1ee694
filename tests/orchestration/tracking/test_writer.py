"""The run writer against real stores: a real ``mlflow server`` stopped and started again (an
outage), and SQLite files (a retried trial, a refused record, a moved store)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from faults.servers import MlflowServer, free_port, listening_addresses, non_loopback
from orchestration.tracking.writer import JOURNAL_FILE, RunWriter

KEY = {"linc.trial_id": "trial-1"}


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> MlflowServer:
    with MlflowServer(tmp_path_factory.mktemp("mlflow")) as running:
        yield running


def sqlite(folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}"


def steps(uri: str, run_id: str, key: str = "loss") -> list[tuple[int, float]]:
    history = MlflowClient(tracking_uri=uri).get_metric_history(run_id, key)
    return sorted((m.step, m.value) for m in history)


def test_an_outage_never_blocks_logging_and_is_replayed_in_order(server, tmp_path, caplog):
    assert non_loopback(listening_addresses(server.pids())) == set()
    writer = RunWriter(server.uri, spool=tmp_path / "spool")
    writer.start("writer", "outage", {"variant": "full_linc"}, KEY)
    writer.log_params({"train.epochs": 6})
    for step in (1, 2, 3):
        writer.log_metrics({"loss": float(step)}, step=step)
    assert writer.flush(60)
    server.stop()
    caplog.set_level(logging.WARNING, logger="orchestration.tracking.writer")
    slowest = 0.0
    for step in (4, 5, 6):
        began = time.perf_counter()
        writer.log_metrics({"loss": float(step)}, step=step)
        slowest = max(slowest, time.perf_counter() - began)
    (tmp_path / "report.txt").write_text("rows")
    writer.log_artifact(tmp_path / "report.txt")
    writer.end_run("FINISHED")
    assert slowest < 0.05, "a log call waited on the store"
    assert not writer.flush(3), "nothing can be delivered while the store is down"
    writer.save(tmp_path / "checkpoint")  # the journal a checkpoint would carry
    server.start()
    assert writer.flush(60)
    outages = [r.message for r in caplog.records if "unreachable" in r.message]
    assert len(outages) == 1 and server.uri in outages[0], "one warning, naming the store"
    client = MlflowClient(tracking_uri=server.uri)
    run = client.get_run(writer.run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"train.epochs": "6"}
    assert steps(server.uri, writer.run_id) == [(s, float(s)) for s in range(1, 7)]
    assert [a.path for a in client.list_artifacts(writer.run_id)] == ["report.txt"]

    # The next attempt takes the journal back and finds the run by its key: replaying the
    # journal and logging epochs 5..7 again leaves every step exactly once.
    again = RunWriter(server.uri, spool=tmp_path / "spool-2")
    again.start("writer", "outage", {}, KEY, journal=tmp_path / "checkpoint")
    for step in (5, 6, 7):
        again.log_metrics({"loss": float(step)}, step=step)
    assert again.close(60)
    assert again.run_id == writer.run_id
    assert steps(server.uri, writer.run_id) == [(s, float(s)) for s in range(1, 8)]
    assert [a.path for a in client.list_artifacts(writer.run_id)] == ["report.txt"]


def test_a_refused_record_is_dropped_and_the_rest_delivered(tmp_path, caplog):
    uri = sqlite(tmp_path)
    caplog.set_level(logging.WARNING, logger="orchestration.tracking.writer")
    writer = RunWriter(uri).start("writer", "refused", {}, KEY)
    writer.log_params({"lr": 0.1})
    writer.log_params({"lr": 0.2})  # MLflow refuses to change a param
    writer.log_metrics({"loss": 1.5}, step=1)
    assert writer.close(60)
    assert MlflowClient(tracking_uri=uri).get_run(writer.run_id).data.params == {"lr": "0.1"}
    assert steps(uri, writer.run_id) == [(1, 1.5)]
    assert any("refused params ['lr'] for good" in r.message for r in caplog.records)


def test_a_journal_from_another_store_goes_to_a_new_run_in_this_one(tmp_path):
    """``tracking.uri`` changed between two attempts: what the old store never took is written
    to a run of the new store (the old store is not written to)."""
    gone = f"http://127.0.0.1:{free_port()}"
    writer = RunWriter(gone).start("writer", "moved", {}, KEY)
    writer.log_params({"lr": 0.1})
    writer.log_metrics({"loss": 1.0}, step=1)
    writer.log_metrics({"loss": 2.0}, step=2)
    writer.save(tmp_path / "checkpoint")
    assert not writer.close(0)
    assert gone in (tmp_path / "checkpoint" / JOURNAL_FILE).read_text()

    uri = sqlite(tmp_path)
    moved = RunWriter(uri).start("writer", "moved", {}, KEY, journal=tmp_path / "checkpoint")
    assert moved.close(60)
    assert steps(uri, moved.run_id) == [(1, 1.0), (2, 2.0)]
    assert MlflowClient(tracking_uri=uri).get_run(moved.run_id).data.params == {"lr": "0.1"}


def test_a_store_error_is_one_line_without_sql():
    from orchestration.tracking.records import reason

    text = (
        "(sqlite3.OperationalError) database or disk is full\n[SQL: INSERT INTO metrics "
        '("key", value) VALUES (?, ?)]\n[parameters: [("a", 1.0)]]'
    )
    assert reason(RuntimeError(text)) == "(sqlite3.OperationalError) database or disk is full"


def test_a_password_in_the_store_uri_reaches_no_record_journal_or_warning(server, tmp_path, caplog):
    """The store's URI holds a password: params, tags and artifacts get it masked, the journal
    in a checkpoint names the store masked and still resumes the same run, an outage's warning
    names the store masked."""
    password = f"pw-{uuid.uuid4().hex}"
    uri = server.uri.replace("http://", f"http://linc:{password}@")
    dsn = f"postgresql://u:{password}@db/x"
    writer = RunWriter(uri).start("writer", "secret", {"dsn": dsn}, KEY | {"t": "secret"})
    writer.log_params({"storage": dsn})
    writer.log_dict({"tracking": {"uri": uri}}, "config.json")
    assert writer.flush(60)
    writer.log_metrics({"loss": 1.0}, step=1)
    writer.save(tmp_path / "checkpoint")
    journal = (tmp_path / "checkpoint" / JOURNAL_FILE).read_text()
    assert password not in journal and "linc:***@" in journal
    again = RunWriter(uri).start(
        "writer", "secret", {}, KEY | {"t": "secret"}, journal=tmp_path / "checkpoint"
    )
    assert writer.close(60) and again.close(60)
    assert again.run_id == writer.run_id  # found by its key in the same store, compared masked
    run = MlflowClient(tracking_uri=uri).get_run(writer.run_id)
    assert run.data.params["storage"] == "postgresql://u:***@db/x"
    assert run.data.tags["dsn"] == "postgresql://u:***@db/x"
    folder = MlflowClient(tracking_uri=uri).download_artifacts(writer.run_id, "", str(tmp_path))
    assert password not in (Path(folder) / "config.json").read_text()

    caplog.set_level(logging.WARNING)
    gone = RunWriter(f"http://linc:{password}@127.0.0.1:{free_port()}").start("w", "r", {}, KEY)
    gone.log_metrics({"loss": 1.0}, step=1)
    assert not gone.close(3)
    lines = [r.getMessage() for r in caplog.records]
    assert any("http://linc:***@127.0.0.1" in line for line in lines), lines
    assert not any(password in line for line in lines)


def test_an_artifact_delivered_while_a_journal_is_saved_stays_out_of_it(tmp_path) -> None:
    """The delivery thread removes an artifact's spool file once the store has it, then drops
    the record; a save between the two found the record and not its file, and the trial failed
    (FileNotFoundError, seen under load). Here the store is unreachable, so the record stays
    pending, and the file is removed as a delivery would: the journal leaves it out."""
    writer = RunWriter(f"http://127.0.0.1:{free_port()}", spool=tmp_path / "spool")
    writer.start("writer", "race", {}, KEY)
    (tmp_path / "delivered.txt").write_text("rows")
    (tmp_path / "kept.txt").write_text("rows")
    writer.log_artifact(tmp_path / "delivered.txt")
    writer.log_artifact(tmp_path / "kept.txt")
    delivered = next((tmp_path / "spool").glob("*delivered.txt"))
    delivered.unlink()  # the store has it; the record is not yet dropped
    writer.save(tmp_path / "checkpoint")
    journal = json.loads((tmp_path / "checkpoint" / JOURNAL_FILE).read_text())
    names = [r.get("name") for r in journal["pending"] if r["op"] == "artifact"]
    assert names == ["kept.txt"]
    writer.close(timeout=0, warn=False)


def test_a_writer_s_own_spool_is_removed_once_everything_is_delivered(tmp_path) -> None:
    # every sweep left a few empty /tmp/linc-tracking-* folders behind: 457 on one machine
    (tmp_path / "report.txt").write_text("rows")
    writer = RunWriter(sqlite(tmp_path)).start("writer", "spool", {}, KEY)
    writer.log_artifact(tmp_path / "report.txt")
    spool = writer._spool
    assert spool.is_dir() and spool.name.startswith("linc-tracking-")
    assert writer.close(60)
    assert not spool.exists()
    given = tmp_path / "given-spool"
    kept = RunWriter(sqlite(tmp_path), spool=given).start("writer", "spool", {}, KEY)
    assert kept.close(60) and given.is_dir()  # a caller's own folder is the caller's
    gone = RunWriter(f"http://127.0.0.1:{free_port()}").start("writer", "spool", {}, KEY)
    gone.log_artifact(tmp_path / "report.txt")
    assert not gone.close(0) and any(gone._spool.iterdir())  # undelivered: kept
