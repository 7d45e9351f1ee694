"""The storage filling up: a size-limited tmpfs made for the row (``mount -t tmpfs``, which
needs root, as CI has) holds a data set being generated, then a sweep's checkpoints, Tune's
state and its SQLite tracking store."""

from __future__ import annotations

import errno
import re
import subprocess
import time
from pathlib import Path

from faults.harness import (
    Driver,
    Row,
    audit,
    first_traceback,
    intact_by_step,
    reported,
    wait_for,
)
from faults.scenarios.common import EXPERIMENT, TRAIN, finish_row, run_tag, sqlite_uri, train_args
from orchestration.experiment.tune_state import KEEP_FOLDER, is_intact

DISK_MB = 256
DATA = ["task=cvrptw", "size=20", "count=600", "shard_size=50", "split=train", "workers=1"]


def fill(path: Path, leave_bytes: int = 0) -> int:
    """Write ``path`` until its file system has ``leave_bytes`` free (0: until "no space")."""
    written = 0
    block = b"\0" * (1 << 20)
    with path.open("wb") as handle:
        while True:
            free = _free_bytes(path.parent)
            if free <= leave_bytes:
                break
            chunk = block[: max(1, min(len(block), free - leave_bytes))]
            try:
                handle.write(chunk)
                handle.flush()
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
                break
            written += len(chunk)
    return written


def _free_bytes(folder: Path) -> int:
    import os

    stat = os.statvfs(folder)
    return stat.f_bavail * stat.f_frsize


def storage_full(folder: Path, epochs: int = 300) -> Row:
    """The storage fills up (a ``DISK_MB`` tmpfs, filled by a file) while a data set is generated
    and while a sweep writes checkpoints and its SQLite store. Each command fails naming the
    storage and "no space" with no traceback, keeps what it had finished (shards, the newest
    intact checkpoint), and after the file is deleted the same command resumes and finishes with
    nothing lost, Tune's state cut short put back from its intact copy."""
    row = Row("storage full (tmpfs)")
    disk = folder / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "linc-faults", str(disk)]
    mounted = subprocess.run(mount, capture_output=True, text=True)
    if mounted.returncode != 0:
        row.outcome = f"not run: cannot mount a tmpfs at {disk}: {mounted.stderr.strip()}"
        return row
    try:
        data_ok = _data_set(folder, disk, row)
        return _sweep(folder, disk, row, epochs, data_ok)
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _data_set(folder: Path, disk: Path, row: Row) -> bool:
    reference = folder / "data-reference"
    if Driver(folder, "sweeps.generate", [*DATA, f"uri={reference}"]).wait(600) != 0:
        row.notes.append("the reference data set could not be generated")
        return False
    shards = sorted(p for p in reference.iterdir() if p.suffix == ".parquet")
    half = sum(p.stat().st_size for p in shards[: len(shards) // 2])
    filler = disk / "filler"
    fill(filler, leave_bytes=half)
    target = disk / "data"
    failed = Driver(folder, "sweeps.generate", [*DATA, f"uri={target}"])
    failed_rc = failed.wait(600)
    told = failed.output(2000)
    named = "no space" in told.lower() and str(target) in told and "Traceback" not in told
    kept = [p.name for p in shards if (target / p.name).exists()]
    intact_kept = all((target / n).read_bytes() == (reference / n).read_bytes() for n in kept)
    filler.unlink()
    again = Driver(folder, "sweeps.generate", [*DATA, f"uri={target}"])
    again_rc = again.wait(600)
    same = all((target / p.name).read_bytes() == p.read_bytes() for p in reference.iterdir())
    row.notes.append(
        f"data set: first run exit {failed_rc}, error names the storage and 'no space' (no "
        f"traceback): "
        f"{named}; {len(kept)} of {len(shards)} shards finished and intact: {intact_kept}; "
        f"after freeing space exit {again_rc}, byte-identical to the reference: {same}"
    )
    return failed_rc != 0 and named and intact_kept and again_rc == 0 and same


def _sweep(folder: Path, disk: Path, row: Row, epochs: int, data_ok: bool) -> Row:
    storage = disk / "runs"
    args = train_args(storage, epochs)
    first = Driver(folder, "sweeps.train", args)
    wait_for(lambda: reported(storage, TRAIN) >= 3, 600, "training to start", first)
    # a sweep of hours has its Tune state kept long before the storage fills: wait for the copy
    kept = storage / TRAIN / KEEP_FOLDER
    wait_for(lambda: any(kept.glob("experiment_state-*")), 120, "Tune's state kept", first)
    filler = disk / "filler"
    fill(filler)
    filled = time.monotonic()
    first_rc = first.wait(900)
    ended_after = time.monotonic() - filled
    log = first.output(10**7)
    failures = re.findall(r"FAILED \(.*", log)
    named = any("No space left on device" in f and str(storage) in f for f in failures)
    intact = intact_by_step(storage, TRAIN)
    filler.unlink()
    cut = _cut_tune_state(storage / TRAIN)
    second = Driver(folder, "sweeps.train", args)
    rc = second.wait(1800)
    again = second.output(10**7)
    resumed = run_tag(sqlite_uri(storage), "resumed_from") or ""
    mended = again.count("put back its last intact copy")
    row.notes.append(
        f"sweep: exit {first_rc} {ended_after:.0f} s after the storage filled, failure names the "
        f"storage and 'No space left on device': {named}; tracebacks on its console: "
        f"{log.count('Traceback')}{first_traceback(log)}; checkpoints left: "
        f"{', '.join(p.name for p in intact) or 'none'}; Tune's state: {cut}; re-run: files put "
        f"back from their intact copy: {mended}, resumed from "
        f"{resumed.rsplit('/', 1)[-1] or 'nothing'}, tracebacks: {again.count('Traceback')}"
    )
    result = audit(sqlite_uri(storage), EXPERIMENT, TRAIN, epochs)
    checks = data_ok and first_rc != 0 and named and bool(intact) and bool(resumed)
    checks = checks and "Traceback" not in again and "Traceback" not in log and mended > 0
    outcome = "failed naming the full storage, resumed after space was freed"
    return finish_row(row, result, rc, outcome, checks)


def _cut_tune_state(experiment: Path) -> str:
    """Make sure the re-run meets Tune's state cut short, as a storage filling up during Tune's
    copy leaves it: when the full storage cut no state file, the newest experiment state is cut
    in half here. Says which happened."""
    states = [p for p in experiment.iterdir() if p.is_file() and not p.name.startswith(".")]
    tune_states = [p for p in sorted(states) if not p.name.startswith("linc_")]
    damaged = [p.name for p in tune_states if not is_intact(p.read_bytes())]
    if damaged:
        return f"cut by the full storage: {', '.join(damaged)}"
    newest = max(experiment.glob("experiment_state-*.json"))
    with newest.open("r+b") as handle:
        handle.truncate(newest.stat().st_size // 2)
    return f"none cut by the full storage; {newest.name} cut in half by the row"


__all__ = ["storage_full"]
