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

A checkpoint folder holds ``latest.pt`` with its manifest and the tracking journal
(:mod:`orchestration.tracking.writer`). Folders written by Tune are ``checkpoint_NNNNNN``; one
written when a stop was requested (:mod:`orchestration.trial.preemption`), outside Tune's
reports, is ``preempted_<global step>`` and is removed once a newer Tune checkpoint exists.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from linc_core.train.checkpoint import CHECKPOINT_NAME as CHECKPOINT_FILE
from linc_core.train.checkpoint import MANIFEST_SUFFIX, load_checkpoint
from linc_core.utils.atomic import write_atomic

logger = logging.getLogger(__name__)

TUNE_PREFIX = "checkpoint_"
PREEMPTED_PREFIX = "preempted_"
ATTEMPTS_FILE = "linc_attempts.json"


@dataclass(frozen=True)
class TrialStorage:
    """A trial's folder (``path``) on a pyarrow file system; ``uri`` names it in messages."""

    filesystem: pafs.FileSystem
    path: str

    @classmethod
    def current(cls) -> TrialStorage:
        """The running Tune trial's folder (Tune's storage context)."""
        from ray import tune

        storage = tune.get_context().get_storage()
        return cls(storage.storage_filesystem, storage.trial_fs_path)

    def uri(self, *parts: str) -> str:
        path = "/".join((self.path, *parts))
        scheme = self.filesystem.type_name
        return path if scheme == "local" else f"{scheme}://{path}"


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


def restore_newest_intact(storage: TrialStorage, work_dir: Path) -> Restored:
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


def tolerate_gone_checkpoints(function: Callable[..., None]) -> type:
    """Tune's trainable class of ``function`` (a function trainable), restoring past a
    checkpoint that Tune's record names but storage no longer holds.

    Tune snapshots its experiment state at most every 10 s, while a trial can checkpoint every
    fraction of a second and Tune deletes all but the last two. A driver killed in between
    leaves a record whose newest checkpoint is gone, and Tune's own restore then fails every
    retry ("Could not recover from checkpoint as it does not exist on storage anymore"). A
    trial here never reads Tune's checkpoint (it restores the newest intact one of its folder:
    :func:`restore_newest_intact`), so Tune's restore is given the trial's folder instead, with
    one warning line naming the gone one.
    """
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult
    from ray.tune.trainable.function_trainable import wrap_function

    trainable = wrap_function(function)

    class ImplicitFunc(trainable):  # Ray titles the trial's process with this class name
        def restore(self, checkpoint_path: Any) -> Any:
            checkpoint = getattr(checkpoint_path, "checkpoint", None)
            if checkpoint is not None:
                info = checkpoint.filesystem.get_file_info(checkpoint.path)
                if info.type == pafs.FileType.NotFound:
                    folder = checkpoint.path.rstrip("/").rsplit("/", 1)[0]
                    logger.warning(
                        "Tune's record names checkpoint %s, which is gone from storage (its "
                        "driver stopped before recording newer ones); restoring from the newest "
                        "intact checkpoint in %s",
                        checkpoint.path,
                        folder,
                    )
                    replacement = Checkpoint(folder, filesystem=checkpoint.filesystem)
                    checkpoint_path = _TrainingResult(replacement, checkpoint_path.metrics)
            return super().restore(checkpoint_path)

    ImplicitFunc.__name__ = trainable.__name__  # Tune names trials after it
    return ImplicitFunc


def persist(storage: TrialStorage, folder: Path, name: str) -> str:
    """Copy a local checkpoint folder to ``storage/name`` (the manifest last); its URI."""
    target = f"{storage.path}/{name}"
    storage.filesystem.create_dir(target, recursive=True)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    manifest = folder / (CHECKPOINT_FILE + MANIFEST_SUFFIX)
    for path in [p for p in files if p != manifest] + [manifest]:
        if path.exists():
            relative = path.relative_to(folder).as_posix()
            content = path.read_bytes()
            write_atomic(f"{target}/{relative}", content, filesystem=storage.filesystem, fsync=True)
    return storage.uri(name)


def remove_preempted(storage: TrialStorage, before_step: int) -> None:
    """Delete ``preempted_*`` folders older than ``before_step`` (a newer checkpoint exists)."""
    for step, name in _candidates(storage):
        if name.startswith(PREEMPTED_PREFIX) and step < before_step:
            storage.filesystem.delete_dir(f"{storage.path}/{name}")


def next_attempt(storage: TrialStorage) -> int:
    """Count this start of the trial (1 for the first) in the trial's folder on storage."""
    path = f"{storage.path}/{ATTEMPTS_FILE}"
    try:
        with storage.filesystem.open_input_stream(path) as stream:
            attempt = int(json.loads(stream.read())["attempts"]) + 1
    except (OSError, ValueError, KeyError):
        attempt = 1
    try:
        record = json.dumps({"attempts": attempt}).encode()
        write_atomic(path, record, filesystem=storage.filesystem)
    except OSError as err:  # the count is a label; a storage hiccup must not fail the trial
        logger.warning("could not record attempt %d in %s: %s", attempt, storage.uri(), err)
    return attempt


def _candidates(storage: TrialStorage, warn: bool = False) -> list[tuple[int, str]]:
    """(global step, folder name) of every checkpoint folder with a readable manifest, newest
    first (a preemption folder before a Tune folder of the same step: it is the same state);
    ``warn``: name each folder without one."""
    selector = pafs.FileSelector(storage.path, allow_not_found=True)
    found: list[tuple[int, int, str]] = []
    for info in storage.filesystem.get_file_info(selector):
        if info.type != pafs.FileType.Directory:
            continue
        name = info.base_name
        if not name.startswith((TUNE_PREFIX, PREEMPTED_PREFIX)):
            continue
        manifest = _read_json(storage, f"{info.path}/{CHECKPOINT_FILE}{MANIFEST_SUFFIX}")
        if manifest is None or "global_step" not in manifest:
            if not warn:
                continue
            # the manifest is written last: without it the folder's write was interrupted
            logger.warning(
                "skipping a checkpoint that cannot be used: %s: no readable manifest "
                "(an interrupted write)",
                storage.uri(name),
            )
            continue
        found.append((int(manifest["global_step"]), name.startswith(PREEMPTED_PREFIX), name))
    return [(step, name) for step, _, name in sorted(found, reverse=True)]


def _read_json(storage: TrialStorage, path: str) -> dict[str, Any] | None:
    try:
        with storage.filesystem.open_input_stream(path) as stream:
            value = json.loads(stream.read())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


__all__ = [
    "CHECKPOINT_FILE",
    "PREEMPTED_PREFIX",
    "Restored",
    "TrialStorage",
    "next_attempt",
    "persist",
    "remove_preempted",
    "restore_newest_intact",
    "tolerate_gone_checkpoints",
]
