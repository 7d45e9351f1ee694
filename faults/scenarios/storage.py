"""Faults of storage: a damaged checkpoint, a folder that cannot be written, a moved sweep,
an S3 driver killed mid-sweep."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

from faults.harness import (
    SWEEP,
    Driver,
    Row,
    audit,
    checkpoints,
    reported,
    wait_for,
)
from faults.scenarios.common import (
    ABLATION,
    EXPERIMENT,
    TRAIN,
    epochs_logged,
    finish_row,
    parent_runs,
    refusal_row,
    run_tag,
    sqlite_uri,
    train_args,
)
from faults.servers import (
    S3Server,
    listening_addresses,
    non_loopback,
)
from orchestration.tracking.store import ensure_experiment


def checkpoint_truncated(folder: Path, epochs: int = 30) -> Row:
    """The newest checkpoint is cut in half while the sweep is down; the re-run falls back."""
    row = Row("newest checkpoint truncated")
    storage = folder / "runs"
    first = Driver(folder, "sweeps.train", train_args(storage, epochs))
    wait_for(lambda: reported(storage, TRAIN) >= 3, 600, "training to start", first)
    first.kill()
    newest = checkpoints(storage, TRAIN)[-1] / "latest.pt"
    with newest.open("r+b") as handle:
        handle.truncate(newest.stat().st_size // 2)
    second = Driver(folder, "sweeps.train", train_args(storage, epochs))
    rc = second.wait(1800)
    log = second.output(10**7)
    named = f"{newest}: truncated" in log
    row.notes.append(f"warning names {newest.parent.name} and says truncated: {named}")
    result = audit(sqlite_uri(storage), EXPERIMENT, TRAIN, epochs)
    return finish_row(row, result, rc, "fell back to the intact one, finished", named)


def storage_not_writable(folder: Path) -> Row:
    """``cluster.storage`` inside a read-only folder (root's override of permissions dropped)."""
    row = Row("storage not writable")
    locked = folder / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        driver = Driver(
            folder, "sweeps.train", train_args(locked / "runs", 2), drop_file_override=True
        )
        expected = f"cluster.storage: cannot write to {locked / 'runs'}"
        return refusal_row(row, driver, expected, locked / "runs")
    finally:
        locked.chmod(0o755)


def sweep_moved(folder: Path, epochs: int = 20) -> Row:
    """An ablation stopped, its folder (with its SQLite store) moved, the command re-run there;
    then a copy of the finished sweep re-run against the same store."""
    row = Row("sweep folder moved")
    storage, moved = folder / "runs", folder / "moved"
    args = ["cluster.max_concurrent_trials=1"]
    first = Driver(folder, "sweeps.ablation", train_args(storage, epochs, *args))
    wait_for(lambda: reported(storage, ABLATION) >= 3, 600, "training to start", first)
    first.signal(signal.SIGTERM)
    first.wait(300)
    shutil.move(storage, moved)
    second = Driver(folder, "sweeps.ablation", train_args(moved, epochs, *args))
    rc = second.wait(1800)
    result = audit(sqlite_uri(moved), EXPERIMENT, ABLATION, epochs)
    row.notes.append(f"old folder recreated: {storage.exists()}")
    # A copy of the finished sweep, pointed at the moved store: a parent run of its own.
    copy = folder / "copy"
    shutil.copytree(moved / ABLATION, copy / ABLATION)
    parents = parent_runs(sqlite_uri(moved))
    third = Driver(
        folder,
        "sweeps.ablation",
        train_args(copy, epochs, *args, f"tracking.uri={sqlite_uri(moved)}"),
    )
    copy_rc = third.wait(900)
    after = parent_runs(sqlite_uri(moved))
    untouched = all(after.get(run) == status for run, status in parents.items())
    row.notes.append(
        f"copy re-run exit {copy_rc}, new parent run: {len(after) == len(parents) + 1}, "
        f"original runs untouched: {untouched}"
    )
    checks = not storage.exists() and copy_rc == 0 and untouched
    outcome = "resumed in the moved folder; a copy got its own runs"
    return finish_row(row, result, rc, outcome, checks)


def s3_driver_killed(folder: Path, epochs: int = 30) -> Row:
    """Tune storage on the S3 server; the driver (and its Ray) SIGKILLed; resumed from S3."""
    row = Row("S3 storage, driver killed")
    server = S3Server().start()
    try:
        # quoted: Hydra's override grammar reads `=` and `&` of the URI's query otherwise
        storage, store = f"'{server.uri('tune')}'", sqlite_uri(folder / "tracking")
        (folder / "tracking").mkdir()
        args = [
            *SWEEP,
            f"train.epochs={epochs}",
            f"cluster.storage={storage}",
            f"tracking.uri={store}",
        ]
        # the store's tables exist before this process reads it while the driver writes to it
        ensure_experiment(store, EXPERIMENT)
        first = Driver(folder, "sweeps.train", args)
        wait_for(lambda: epochs_logged(store) >= 3, 600, "training to start", first)
        exposed = non_loopback(listening_addresses(server.pids()))
        first.kill()
        second = Driver(folder, "sweeps.train", args)
        rc = second.wait(1800)
        resumed = run_tag(store, "resumed_from")
        row.notes.append(f"resumed from {resumed}; S3 sockets off loopback: {exposed or 'none'}")
        from_s3 = bool(resumed and resumed.startswith("s3://")) and not exposed
        result = audit(store, EXPERIMENT, TRAIN, epochs)
        return finish_row(row, result, rc, "resumed from S3, finished", from_s3)
    finally:
        server.stop()


__all__ = ["checkpoint_truncated", "s3_driver_killed", "storage_not_writable", "sweep_moved"]
