"""A trial's checkpoints on its Tune storage: restore the newest intact one, persist one Tune did
not see (a preemption's), count attempts.

Tune hands a restarted trial the checkpoint its experiment state last recorded, which can be
older than the newest one on storage (the state is snapshotted now and then; a driver stopped or
killed between a report and the snapshot), and it hands it unverified. Here a trial instead lists
its own folder on the storage (local or S3) and takes the newest checkpoint by training position
(``global_step`` in the checkpoint's manifest) that passes verification and reads as tensors and
plain data (:func:`~linc_core.train.checkpoint.load_checkpoint`: a file replaced on storage by
one that would run code is refused unrun, whatever its manifest says), warning about each one
that does not (truncated, corrupt, foreign) with its storage path. Tune keeps the last two
(``CheckpointConfig(num_to_keep=2)``), so one bad checkpoint costs at most an epoch; with none
intact the trial starts again from scratch, with a warning, instead of failing every retry the
same way.

Every read and write goes through the trial's
:class:`~orchestration.experiment.folder.SweepFolder` (:meth:`~.SweepFolder.of_trial`), with
its retries. A checkpoint folder holds ``latest.pt`` with its manifest and the tracking journal
(:mod:`orchestration.tracking.writer`). Folders written by Tune are ``checkpoint_NNNNNN``; one
written when a stop was requested (:mod:`orchestration.trial.preemption`), outside Tune's
reports, is ``preempted_<global step>`` and is removed once a newer Tune checkpoint exists.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from linc_core.train.checkpoint import CHECKPOINT_NAME as CHECKPOINT_FILE
from linc_core.train.checkpoint import MANIFEST_SUFFIX, load_checkpoint
from orchestration.experiment.folder import SweepFolder

logger = logging.getLogger(__name__)

TUNE_PREFIX = "checkpoint_"
PREEMPTED_PREFIX = "preempted_"
ATTEMPTS_FILE = "linc_attempts.json"


@dataclass(frozen=True)
class Restored:
    """The restored checkpoint: a verified local copy of its folder, or nothing.

    Attributes:
        folder: the local copy (``latest.pt``, manifest, tracking journal), or None.
        source: the folder's storage URI.
        global_step: the checkpoint's position in training.
    """

    folder: Path | None = None
    source: str | None = None
    global_step: int = 0

    @property
    def checkpoint(self) -> Path | None:
        return None if self.folder is None else self.folder / CHECKPOINT_FILE


def restore_newest_intact(storage: SweepFolder, work_dir: Path) -> Restored:
    """Copy the newest intact checkpoint folder of ``storage`` into ``work_dir`` (see the
    module docstring); ``Restored()`` when there is none."""
    candidates = _candidates(storage, warn=True)
    for step, name in candidates:
        local = work_dir / f"restore-{name}"
        shutil.rmtree(local, ignore_errors=True)
        local.mkdir(parents=True)
        try:
            pafs.copy_files(
                f"{storage.path}/{name}",
                str(local),
                source_filesystem=storage.filesystem,
                destination_filesystem=pafs.LocalFileSystem(),
            )
            # verified and read (tensors and plain data only): a file replaced on storage by a
            # foreign one is skipped like a corrupt one instead of failing every retry
            load_checkpoint(local / CHECKPOINT_FILE, name=storage.uri(name, CHECKPOINT_FILE))
        except (ValueError, OSError) as err:  # CheckpointError, or configs it cannot hold
            logger.warning("skipping a checkpoint that cannot be used: %s", err)
            shutil.rmtree(local, ignore_errors=True)
            continue
        return Restored(local, storage.uri(name), step)
    if candidates:
        logger.warning(
            "no intact checkpoint in %s (%d tried): the trial starts again from scratch",
            storage.uri(),
            len(candidates),
        )
    return Restored()


def persist(storage: SweepFolder, folder: Path, name: str) -> str:
    """Copy a local checkpoint folder to ``storage/name`` (the manifest last); its URI."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    manifest = folder / (CHECKPOINT_FILE + MANIFEST_SUFFIX)
    for path in [p for p in files if p != manifest] + [manifest]:
        if path.exists():
            relative = path.relative_to(folder).as_posix()
            storage.write(f"{name}/{relative}", path.read_bytes(), fsync=True)
    return storage.uri(name)


def remove_preempted(storage: SweepFolder, before_step: int) -> None:
    """Delete ``preempted_*`` folders older than ``before_step`` (a newer checkpoint exists)."""
    for step, name in _candidates(storage):
        if name.startswith(PREEMPTED_PREFIX) and step < before_step:
            storage.delete(name)


def next_attempt(storage: SweepFolder) -> int:
    """Count this start of the trial (1 for the first) in the trial's folder on storage."""
    record = storage.read_json(ATTEMPTS_FILE) or {}
    attempt = int(record["attempts"]) + 1 if isinstance(record.get("attempts"), int) else 1
    try:
        storage.write_json(ATTEMPTS_FILE, {"attempts": attempt}, retry=False)
    except OSError as err:  # the count is a label; a storage hiccup must not fail the trial
        logger.warning("could not record attempt %d in %s: %s", attempt, storage.uri(), err)
    return attempt


def _candidates(storage: SweepFolder, warn: bool = False) -> list[tuple[int, str]]:
    """(global step, folder name) of every checkpoint folder with a readable manifest, newest
    first (a preemption folder before a Tune folder of the same step: it is the same state);
    ``warn``: name each folder without one."""
    found: list[tuple[int, int, str]] = []
    for info in storage.listing():
        name = info.base_name
        if info.type != pafs.FileType.Directory or not name.startswith(
            (TUNE_PREFIX, PREEMPTED_PREFIX)
        ):
            continue
        manifest = storage.child(name).read_json(f"{CHECKPOINT_FILE}{MANIFEST_SUFFIX}")
        if manifest is None or "global_step" not in manifest:
            if warn:  # the manifest is written last: without it the write was interrupted
                logger.warning(
                    "skipping a checkpoint that cannot be used: %s: no readable manifest "
                    "(an interrupted write)",
                    storage.uri(name),
                )
            continue
        found.append((int(manifest["global_step"]), name.startswith(PREEMPTED_PREFIX), name))
    return [(step, name) for step, _, name in sorted(found, reverse=True)]


__all__ = [
    "CHECKPOINT_FILE",
    "PREEMPTED_PREFIX",
    "Restored",
    "next_attempt",
    "persist",
    "remove_preempted",
    "restore_newest_intact",
]
