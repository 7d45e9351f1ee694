"""Faults of storage: a damaged checkpoint, a folder that cannot be written, a moved sweep,
the same sweep submitted twice, an S3 driver killed mid-sweep."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pyarrow.fs as pafs

from faults.harness import (
    SWEEP,
    Driver,
    Row,
    audit,
    first_traceback,
    intact_by_step,
    one_line_error,
    reported,
    tune_recorded,
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
from faults.sick_proxy import SickProxy
from orchestration.tracking.store import ensure_experiment


def checkpoint_truncated(folder: Path, epochs: int = 30) -> Row:
    """The newest checkpoint is cut in half while the sweep is down; the re-run falls back.

    A driver killed between Tune's deletion of an old checkpoint and its next snapshot of the
    experiment state leaves Tune a record naming a folder that is gone (with epochs of a tenth
    of a second, often). Whenever Tune's last snapshot names a checkpoint other than the newest
    two on storage, the row deletes it, as that moment would have: the re-run then meets Tune's
    record of a gone checkpoint (the note says whether it did). The re-run must name the
    truncated file in one warning, fall back to the intact one, finish, and print no traceback.
    """
    row = Row("newest checkpoint truncated")
    storage = folder / "runs"
    first = Driver(folder, "sweeps.train", train_args(storage, epochs))
    wait_for(lambda: reported(storage, TRAIN) >= 3, 600, "training to start", first)
    first.kill()
    by_step = intact_by_step(storage, TRAIN)
    newest, fallback = by_step[-1], by_step[-2]
    stale = [p for p in tune_recorded(storage, TRAIN) if p.exists() and p not in by_step[-2:]]
    for path in stale:
        shutil.rmtree(path)
    target = newest / "latest.pt"
    with target.open("r+b") as handle:
        handle.truncate(target.stat().st_size // 2)
    second = Driver(folder, "sweeps.train", train_args(storage, epochs))
    rc = second.wait(1800)
    log = second.output(10**7)
    named = f"{target}: truncated" in log
    resumed = run_tag(sqlite_uri(storage), "resumed_from") or ""
    fell_back = resumed.startswith(f"{fallback} ")
    traceback = "Traceback" in log
    row.notes.append(
        f"warning names {newest.name} and says truncated: {named}; resumed from "
        f"{Path(resumed.split(' ')[0]).name or 'nothing'}; Tune's record had "
        f"{', '.join(p.name for p in stale) or 'no other'} deleted; traceback: {traceback}"
        f"{first_traceback(log)}"
    )
    result = audit(sqlite_uri(storage), EXPERIMENT, TRAIN, epochs)
    checks = named and fell_back and not traceback
    return finish_row(row, result, rc, "fell back to the intact one, finished", checks)


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


def sweep_submitted_twice(folder: Path, epochs: int = 40) -> Row:
    """The same ablation command started again while its first driver runs: the second
    refuses in one line naming the sweep and the holder, and touches nothing of the first."""
    row = Row("sweep submitted twice")
    storage = folder / "runs"
    args = train_args(storage, epochs, "cluster.max_concurrent_trials=1")
    first = Driver(folder, "sweeps.ablation", args)
    wait_for(lambda: reported(storage, ABLATION) >= 2, 600, "training to start", first)
    parents = parent_runs(sqlite_uri(storage))
    before = sorted(p.name for p in (storage / ABLATION).iterdir())
    second = Driver(folder, "sweeps.ablation", args)
    second_rc = second.wait(300)
    line = one_line_error(second.output()) or ""
    expected = f"linc-ablation: {ABLATION}: another driver is running this sweep ("
    named = line.startswith(expected) and f"pid {first.pid}," in line
    after = sorted(p.name for p in (storage / ABLATION).iterdir())
    untouched = parent_runs(sqlite_uri(storage)) == parents and set(before) <= set(after)
    rc = first.wait(1800)
    released = not (storage / ABLATION / "linc_lease.json").exists()
    row.notes.append(
        f"second driver: exit {second_rc}: {line or second.output(300)!r}; first sweep's runs "
        f"untouched: {untouched}; lease released at the end: {released}"
    )
    result = audit(sqlite_uri(storage), EXPERIMENT, ABLATION, epochs)
    checks = second_rc == 2 and named and untouched and released
    return finish_row(row, result, rc, "second driver refused in one line; first finished", checks)


SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code><Message>Please '
    b"reduce your request rate.</Message><RequestId>linc-faults</RequestId></Error>"
)


def s3_throttling(folder: Path, epochs: int = 60) -> Row:
    """S3 answers 503 SlowDown to 20% of requests while a data set is generated, and to 5%
    while a sweep checkpoints to it: retried with backoff, the data set byte-identical to one
    generated locally, every remaining checkpoint intact, every epoch logged once."""
    from linc_core.train.checkpoint import verify_checkpoint
    from orchestration.data.storage import open_filesystem

    row = Row("S3 throttling (503 SlowDown)")
    server = S3Server().start()
    proxy = SickProxy(
        server.port,
        fail_share=0.2,
        body=SLOW_DOWN,
        content_type="application/xml",
        share_after=0.0,
        seed=2,
    ).start()
    try:
        through = f"endpoint_override={proxy.address}&scheme=http"
        data = [
            "task=cvrptw",
            "size=10",
            "count=240",
            "shard_size=30",
            "split=train",
            "workers=2",
            "progress=false",
        ]
        local = folder / "data-local"
        reference = Driver(folder, "sweeps.generate", [*data, f"uri={local}"])
        reference_rc = reference.wait(600)
        proxy.sick = True
        generated = Driver(folder, "sweeps.generate", [*data, f"uri='s3://linc/data?{through}'"])
        generated_rc = generated.wait(900)
        thrown_in_data = proxy.counts["failed_before"]
        filesystem, root = open_filesystem(server.uri("data"))
        same = reference_rc == 0 and generated_rc == 0
        for path in sorted(local.iterdir()) if local.exists() else []:
            with filesystem.open_input_stream(f"{root}/{path.name}") as stream:
                same = same and stream.read() == path.read_bytes()
        proxy.fail_share = 0.05
        store = sqlite_uri(folder / "tracking")
        (folder / "tracking").mkdir()
        storage = f"'s3://linc/tune?{through}'"
        args = [
            *SWEEP,
            f"train.epochs={epochs}",
            f"cluster.storage={storage}",
            f"tracking.uri={store}",
        ]
        ensure_experiment(store, EXPERIMENT)
        rc = Driver(folder, "sweeps.train", args).wait(1800)
        proxy.sick = False
        thrown_in_training = proxy.counts["failed_before"] - thrown_in_data
        tune, tune_root = open_filesystem(server.uri("tune"))
        intact = 0
        selector = pafs.FileSelector(f"{tune_root}/{TRAIN}", recursive=True)
        for info in tune.get_file_info(selector):
            if info.base_name == "latest.pt":
                copy = folder / "check.pt"
                copy.write_bytes(tune.open_input_stream(info.path).read())
                manifest = tune.open_input_stream(f"{info.path}.json").read()
                Path(f"{copy}.json").write_bytes(manifest)
                verify_checkpoint(copy, name=info.path)
                intact += 1
        row.notes.append(
            f"SlowDown answers: {thrown_in_data} while generating (exit {generated_rc}; "
            f"byte-identical to the local set: {same}), {thrown_in_training} while training; "
            f"checkpoints on S3 verified intact: {intact}"
        )
        result = audit(store, EXPERIMENT, TRAIN, epochs)
        checks = same and thrown_in_data > 0 and thrown_in_training > 0 and intact >= 1
        return finish_row(row, result, rc, "retried, nothing lost or corrupt", checks)
    finally:
        proxy.stop()
        server.stop()


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


__all__ = [
    "checkpoint_truncated",
    "s3_driver_killed",
    "s3_throttling",
    "storage_not_writable",
    "sweep_moved",
    "sweep_submitted_twice",
]
