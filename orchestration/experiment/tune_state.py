"""Tune's saved experiment state, kept intact through a storage that fills up.

Tune's driver saves its state (``experiment_state-*.json``, the searcher's
``basic-variant-state-*.json`` or ``search_gen_state-*.json``, ``tuner.pkl``) in a local staging
folder and copies it to the sweep's folder on storage every 10 s or more. The copy overwrites the
file in place: when the storage fills up during a copy, the file on storage is cut short, and the
re-run cannot resume. Tune then logs "Failed to restore the run state" with a traceback and
starts the experiment afresh, in new trial folders, from scratch.

So the driver keeps the last intact copy of each of those files in ``.linc-intact/`` of the
sweep's folder (:class:`KeepIntactState`, a Tune callback checking every ``period_s``), written
atomically: a full storage leaves the last good copy as it was. Before a re-run restores, each
damaged state file is put back from its copy (:func:`repair`), with one warning naming both.
An older state is safe to resume from: each trial restores its own newest intact checkpoint, and
a state naming checkpoints since deleted is tolerated (:mod:`orchestration.trial.checkpoints`).

:func:`restore_tuner` is the one restore of a sweep from that state: repaired first, and a sweep
begun by a linc version with other settings keys refused in one line.

A file is intact when it parses: JSON to its end, a pickle to its STOP opcode (read with
:mod:`pickletools`, which executes nothing).
"""

from __future__ import annotations

import ast
import io
import json
import logging
import pickletools
import time
from typing import Any

import pyarrow.fs as pafs
from ray import tune

from linc_core.utils.atomic import write_atomic
from linc_core.utils.typed import ConfigError

logger = logging.getLogger(__name__)

KEEP_FOLDER = ".linc-intact"
# linc's own files in the sweep's folder (written atomically already) and hidden files (Ray's
# empty storage marker, the kept copies) are not Tune's state.
NOT_STATE_PREFIXES = ("linc_", ".")


def is_intact(content: bytes) -> bool:
    """Whether a state file's ``content`` is whole: a pickle up to its STOP, or JSON."""
    if content[:1] == b"\x80":  # a pickle of protocol 2 or later
        try:
            for _ in pickletools.genops(io.BytesIO(content)):
                pass
        except (ValueError, EOFError):
            return False
        return True
    try:
        json.loads(content)
    except ValueError:
        return False
    return True


def _state_files(filesystem: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
    selector = pafs.FileSelector(folder, allow_not_found=True, recursive=False)
    return [
        info
        for info in filesystem.get_file_info(selector)
        if info.type == pafs.FileType.File and not info.base_name.startswith(NOT_STATE_PREFIXES)
    ]


def _read(filesystem: pafs.FileSystem, path: str) -> bytes:
    with filesystem.open_input_stream(path) as stream:
        return stream.read()


def keep_intact(filesystem: pafs.FileSystem, folder: str, seen: dict[str, Any]) -> int:
    """Copy each of Tune's state files in ``folder`` that changed since ``seen`` (name -> size
    and mtime, updated) and is intact into ``folder/.linc-intact``; the number copied."""
    copied = 0
    for info in _state_files(filesystem, folder):
        stamp = (info.size, info.mtime_ns)
        if seen.get(info.base_name) == stamp:
            continue
        content = _read(filesystem, info.path)
        if not is_intact(content):  # being copied right now, or cut short: keep the old copy
            continue
        write_atomic(f"{folder}/{KEEP_FOLDER}/{info.base_name}", content, filesystem=filesystem)
        seen[info.base_name] = stamp
        copied += 1
    return copied


def repair(filesystem: pafs.FileSystem, folder: str) -> list[str]:
    """Put back each damaged state file of Tune in ``folder`` from its intact copy; one warning
    per file (also when no copy exists: Tune will then start the experiment afresh). Returns
    the names of the files put back."""
    repaired = []
    for info in _state_files(filesystem, folder):
        if is_intact(_read(filesystem, info.path)):
            continue
        kept = f"{folder}/{KEEP_FOLDER}/{info.base_name}"
        copy = None
        if filesystem.get_file_info(kept).type == pafs.FileType.File:
            copy = _read(filesystem, kept)
        if copy is None or not is_intact(copy):
            logger.warning(
                "Tune's saved state %s is damaged (cut short, %d bytes) and has no intact "
                "copy: Tune cannot resume this sweep and starts it afresh",
                info.path,
                info.size,
            )
            continue
        write_atomic(info.path, copy, filesystem=filesystem)
        repaired.append(info.base_name)
        logger.warning(
            "Tune's saved state %s was damaged (cut short, %d bytes; the storage filled up while "
            "it was written): put back its last intact copy (%d bytes) from %s",
            info.path,
            info.size,
            len(copy),
            kept,
        )
    return repaired


class KeepIntactState(tune.Callback):
    """Every ``period_s`` seconds of the driver's loop (Tune saves its state every 10 s or
    more), :func:`keep_intact` on the sweep's folder; every second until a first experiment
    state is kept, so that a sweep has its copy from its first seconds on. A failure to copy
    (the storage full, S3 away) is left for the next period."""

    def __init__(self, filesystem: pafs.FileSystem | None, folder: str, period_s: float = 10.0):
        self.filesystem = filesystem
        self.folder = folder
        self.period_s = period_s
        self._seen: dict[str, Any] = {}
        self._next = 0.0

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._keep()
        kept_state = any(name.startswith("experiment_state") for name in self._seen)
        self._next = now + (self.period_s if kept_state else 1.0)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self._keep()

    def _keep(self) -> None:
        filesystem = self.filesystem or pafs.LocalFileSystem()
        try:
            keep_intact(filesystem, self.folder, self._seen)
        except OSError as err:
            logger.debug("could not keep Tune's state of %s intact this time: %s", self.folder, err)

    def __getstate__(self) -> dict[str, Any]:  # pickled into tuner.pkl: no stale bookkeeping
        return self.__dict__ | {"_seen": {}, "_next": 0.0}


class SweepSettingsChanged(ConfigError):
    """The sweep on storage was started with other settings keys than this linc's."""


def restore_tuner(
    filesystem: pafs.FileSystem | None,
    experiment_path: str,
    trainable: Any,
    param_space: dict[str, Any],
) -> tune.Tuner:
    """Tune's restore of the sweep at ``experiment_path`` (on ``filesystem``, None: local),
    after :func:`repair`; a sweep whose settings have other keys (begun by another linc
    version) is a one-line error naming them, not Ray's traceback."""
    repair(filesystem or pafs.LocalFileSystem(), experiment_path)
    try:
        return tune.Tuner.restore(
            experiment_path,
            trainable,
            resume_errored=True,
            param_space=param_space,
            storage_filesystem=filesystem,
        )
    except ValueError as err:
        if "param_space" not in str(err):
            raise
        saved, ours = _listed_keys(str(err), "Expected"), _listed_keys(str(err), "Got")
        differ = ""
        if saved is not None and ours is not None:
            new, gone = sorted(ours - saved), sorted(saved - ours)
            differ = (
                f" (only in this version: {new or 'none'}; only in the sweep's: {gone or 'none'})"
            )
        raise SweepSettingsChanged(
            f"the sweep in {experiment_path} was started by a linc version with other "
            f"settings{differ}; finish it with that version (its trial runs' git_commit tag "
            "names it) or start the sweep afresh under another name"
        ) from None


def _listed_keys(message: str, label: str) -> set[str] | None:
    """The key list Ray prints after ``label:`` in its param_space error, or None."""
    for line in message.splitlines():
        if line.startswith(f"{label}: ["):
            try:
                return {key.replace("/", ".") for key in ast.literal_eval(line[len(label) + 2 :])}
            except (ValueError, SyntaxError):
                return None
    return None


__all__ = [
    "KEEP_FOLDER",
    "KeepIntactState",
    "SweepSettingsChanged",
    "is_intact",
    "keep_intact",
    "repair",
    "restore_tuner",
]
