"""Tune's saved experiment state: sealed by the driver that wrote it, kept intact through a
storage that fills up, read back only when its seal holds.

Tune saves its state (``experiment_state-*.json``, the searcher's ``basic-variant-state-*.json``,
``search_gen_state-*.json`` or ``searcher-state-*.pkl``) in the driver's staging folder and
copies it to the sweep's folder every 10 s or more (a copy a full storage can cut short);
``tuner.pkl`` it writes there once, as the sweep begins. ``Tuner.restore`` unpickles them all
with cloudpickle: whoever can write the storage could put code there. So each is sealed
(:mod:`orchestration.data.seal`: HMAC-SHA256 under this user's key) from the bytes the driver
itself wrote, and kept in ``.linc-intact/`` of the sweep's folder (:class:`KeepIntactState`:
the staged files as Tune saves them, before it uploads them; ``tuner.pkl`` as the sweep starts).

Before a re-run restores, :func:`check_state` verifies each file Tune may read (every
``.json``/``.pkl`` at the top of the folder): one its seal accepts is read; one cut short or
matching no seal is put back from its copy when the seal accepts that (one warning); any other
stops the re-run in one line, nothing of it read (:class:`UntrustedState`): changed outside
this driver, sealed with another key (a moved sweep: set ``LINC_STATE_KEY``), or with no seal
(written before linc sealed its state: ``cluster.trust_unsealed_state=true`` once accepts and
seals it). An older state is safe to resume from: each trial restores its own newest intact
checkpoint, and a state naming checkpoints since deleted is tolerated
(:mod:`orchestration.trial.checkpoints`). :func:`restore_tuner` is the one restore of a sweep.

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
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow.fs as pafs
from ray import tune

from linc_core.utils.atomic import write_atomic
from linc_core.utils.typed import ConfigError
from orchestration.data.seal import (
    KEEP_FOLDER,
    KEY_VARIABLE,
    SEAL_FILE,
    Seal,
    StateKeeper,
    key_id,
    state_key,
)

logger = logging.getLogger(__name__)

TUNER_FILE = "tuner.pkl"
TRUST_SETTING = ("cluster", "trust_unsealed_state")
# linc's own files in the sweep's folder (JSON, written atomically) and hidden files (Ray's
# empty storage marker, the kept copies) are not Tune's state; Tune reads no other suffix.
NOT_STATE_PREFIXES = ("linc_", ".")
STATE_SUFFIXES = (".json", ".pkl")


class SweepNotRestored(ConfigError):
    """A sweep on storage that this driver does not restore; nothing of it ran."""


class SweepSettingsChanged(SweepNotRestored):
    """The sweep on storage was started with other settings keys than this linc's."""


class UntrustedState(SweepNotRestored):
    """A file of Tune's saved state whose seal does not hold: nothing of it was read."""


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


def is_state_file(name: str) -> bool:
    """Whether a file at the top of a sweep's folder is one Tune may read back."""
    return name.endswith(STATE_SUFFIXES) and not name.startswith(NOT_STATE_PREFIXES)


def without_driver_settings(param_space: dict[str, Any]) -> dict[str, Any]:
    """``param_space`` without the settings of one re-run of the driver
    (``cluster.trust_unsealed_state``): not the sweep's, so not in what Tune keeps (a sweep
    begun before such a setting existed restores with the same keys)."""
    section, key = TRUST_SETTING
    if key not in (param_space.get(section) or {}):
        return param_space
    return param_space | {section: {k: v for k, v in param_space[section].items() if k != key}}


def _state_files(filesystem: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
    selector = pafs.FileSelector(folder, allow_not_found=True, recursive=False)
    return [
        info
        for info in filesystem.get_file_info(selector)
        if info.type == pafs.FileType.File and is_state_file(info.base_name)
    ]


def _read(filesystem: pafs.FileSystem, path: str) -> bytes | None:
    try:
        with filesystem.open_input_stream(path) as stream:
            return stream.read()
    except FileNotFoundError:
        return None


def keep_intact(
    keeper: StateKeeper,
    seen: dict[str, Any],
    source: str | None = None,
    skip: frozenset[str] = frozenset(),
) -> list[str]:
    """Seal and keep each intact state file in ``source`` (a local folder: the driver's own
    staging copy; None: the sweep's folder itself) that changed since ``seen`` (name -> size
    and mtime, updated), but those named in ``skip``; the names newly sealed."""
    filesystem = keeper.filesystem if source is None else pafs.LocalFileSystem()
    files, stamps = {}, {}
    for info in _state_files(filesystem, source or keeper.folder):
        stamp = (info.size, info.mtime_ns)
        if seen.get(info.base_name) == stamp or info.base_name in skip:
            continue
        content = _read(filesystem, info.path)
        if content is None or not is_intact(content):  # being written, or cut short
            continue
        files[info.base_name], stamps[info.base_name] = content, stamp
    added = keeper.keep(files)
    seen.update(stamps)
    return added


def check_state(
    filesystem: pafs.FileSystem, folder: str, restore: bool = True, trust_unsealed: bool = False
) -> list[str]:
    """Verify Tune's state files in ``folder`` against their seal before anything reads them
    (``restore`` False, a new sweep: only this user's key); put back from its sealed copy each
    one that is cut short or matches no seal (one warning each). With ``trust_unsealed``, a file
    that has no seal at all is accepted and sealed (its intact copy if it is cut short). Returns
    the names put back.

    Raises:
        UntrustedState: a file neither it nor its copy passes (one line; nothing read).
        SealKeyError: this user's key cannot be had safely.
    """
    key = state_key()
    if not restore:
        return []
    keeper = StateKeeper(filesystem, folder)
    found = keeper.read_seal()
    seal = found or Seal(key_id(key))
    ours = seal.key_id == key_id(key)
    put_back, trusted = [], {}
    for info in _state_files(filesystem, folder):
        name, content = info.base_name, _read(filesystem, info.path) or b""
        if ours and seal.accepts(key, keeper.label, name, content):
            continue
        copy = _read(filesystem, keeper.path(name))
        if copy is not None and ours and seal.accepts(key, keeper.label, name, copy):
            _put_back(filesystem, info.path, content, copy, keeper.path(name))
            put_back.append(name)
        elif trust_unsealed and ours and name not in seal.files:
            if not is_intact(content) and copy is not None and is_intact(copy):
                _put_back(filesystem, info.path, content, copy, keeper.path(name))
                content = copy
            if is_intact(content):
                trusted[name] = content
        else:
            raise UntrustedState(_refusal(info.path, content, found, name in seal.files, key))
    if trusted:
        keeper.keep(trusted)
        logger.warning(
            "Tune's saved state %s had no seal (cluster.trust_unsealed_state): accepted as it "
            "is and sealed now: %s",
            folder,
            ", ".join(sorted(trusted)),
        )
    return put_back


def _put_back(filesystem: pafs.FileSystem, path: str, content: bytes, copy: bytes, kept: str):
    write_atomic(path, copy, filesystem=filesystem)
    if is_intact(content):
        what = f"matches none of its seals ({len(content)} bytes; changed outside this driver, "
        what += "or its seal could not be written)"
    else:
        what = f"was damaged (cut short, {len(content)} bytes; the storage filled up while it "
        what += "was written)"
    told = f"Tune's saved state {path} {what}: put back its last intact copy ({len(copy)} bytes)"
    logger.warning("%s from %s", told, kept)


def _refusal(path: str, content: bytes, found: Seal | None, name_sealed: bool, key: bytes) -> str:
    said = f"Tune's saved state {path}"
    fresh = "run with a new sweep name or delete the folder"
    trust = f"if you trust it, run once with cluster.trust_unsealed_state=true; else {fresh}"
    moved = f"if the sweep moved hosts, set {KEY_VARIABLE} to the key of the host that wrote it"
    if found is None:
        why = "has no seal (written before linc sealed Tune's state?); nothing of it was read: "
        why += trust
    elif found.key_id != key_id(key):
        why = f"was sealed with another key ({found.key_id or 'unreadable'}; this host's: "
        why += f"{key_id(key)}); nothing of it was read: {moved} (its ~/.config/linc/state.key)"
    elif not name_sealed:
        why = f"has no seal in {KEEP_FOLDER}/{SEAL_FILE}; nothing of it was read: {trust}"
    elif not is_intact(content):
        why = f"is cut short ({len(content)} bytes) with no sealed copy; nothing of it was read"
        why += f": {fresh}"
    else:
        why = "was changed outside this driver (it matches no seal, nor does a kept copy); "
        why += f"nothing of it was read: if you changed it, {fresh}; {moved}"
    return f"{said} {why}"


class KeepIntactState(tune.Callback):
    """Seals and keeps Tune's state as Tune saves it: ``tuner.pkl`` when a new sweep starts,
    the staged state files in :meth:`get_state` (which Tune calls right after saving them in
    its staging folder and before uploading them) and every ``period_s`` seconds of the
    driver's loop. A failure to write (the storage full, S3 away) is left for the next time."""

    def __init__(self, filesystem: pafs.FileSystem | None, folder: str, period_s: float = 10.0):
        state_key()  # a key that cannot be had safely stops the sweep before it starts
        self.filesystem = filesystem
        self.folder = folder
        self.period_s = period_s
        self.__setstate__({"_restored": False})

    def setup(self, **info: Any) -> None:
        if self._restored:  # tuner.pkl was checked before the restore; Tune does not rewrite it
            return
        keeper = self._keeper()
        try:  # written by Tune moments ago, before any trial ran
            content = _read(keeper.filesystem, f"{keeper.folder}/{TUNER_FILE}")
            if content is not None and is_intact(content):
                keeper.keep({TUNER_FILE: content})
        except (OSError, ConfigError) as err:
            logger.warning("could not seal %s/%s: %s", self.folder, TUNER_FILE, err)

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        if self._staging is None and trials:
            self._staging = trials[0].storage.experiment_driver_staging_path

    def get_state(self) -> None:  # None: nothing for Tune to save (no callback-states file)
        self._keep()

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self.on_step_begin(iteration, trials)
        now = time.monotonic()
        if now >= self._next:
            self._keep()
            self._next = now + self.period_s

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.on_step_begin(0, trials)  # a restored sweep that had nothing left to run
        self._keep()

    def _keeper(self) -> StateKeeper:
        if self._state_keeper is None:
            filesystem = self.filesystem or pafs.LocalFileSystem()
            self._state_keeper = StateKeeper(filesystem, self.folder)
        return self._state_keeper

    def _keep(self) -> None:
        staging = self._staging or _newest_staging(PurePosixPath(self.folder).name)
        if staging is None:
            return
        try:
            keep_intact(self._keeper(), self._seen, staging, skip=self._downloaded)
        except (OSError, ConfigError) as err:
            logger.debug("could not keep Tune's state of %s intact this time: %s", self.folder, err)

    def __getstate__(self) -> dict[str, Any]:  # pickled into tuner.pkl: no bookkeeping
        return {k: self.__dict__[k] for k in ("filesystem", "folder", "period_s")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # unpickled from tuner.pkl (a re-run): a restored sweep, whatever linc version wrote it
        fresh = {"_seen": {}, "_next": 0.0, "_staging": None, "_state_keeper": None}
        fresh["_downloaded"] = frozenset()  # what Tune restored from: storage's, not this driver's
        self.__dict__.update({"_restored": True} | state | fresh)


def _newest_staging(name: str) -> str | None:
    """The driver's staging folder of experiment ``name`` this Ray session (the newest, when a
    process ran it twice), before any trial could name it: Tune's first save."""
    from ray.train.constants import _get_ray_train_session_dir

    try:
        states = Path(_get_ray_train_session_dir()).glob(f"*/{name}/driver_artifacts/*.json")
        newest = max(states, key=lambda p: p.stat().st_mtime_ns, default=None)
    except (OSError, AssertionError):
        return None
    return None if newest is None else str(newest.parent)


def restore_tuner(
    filesystem: pafs.FileSystem | None,
    experiment_path: str,
    trainable: Any,
    param_space: dict[str, Any],
) -> tune.Tuner:
    """Tune's restore of the sweep at ``experiment_path`` (on ``filesystem``, None: local),
    after :func:`check_state`; a sweep whose settings have other keys (begun by another linc
    version) is a one-line error naming them, not Ray's traceback. The restored sweep's
    :class:`KeepIntactState` keeps on sealing where the sweep is now."""
    check_state(filesystem or pafs.LocalFileSystem(), experiment_path)
    try:
        tuner = tune.Tuner.restore(
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
    _keep_sealing(tuner, filesystem, experiment_path)
    return tuner


def _keep_sealing(tuner: tune.Tuner, filesystem: pafs.FileSystem | None, path: str) -> None:
    """The restored run's sealing callback points at the sweep's folder as it is now (a moved
    sweep) and never seals the files Tune downloads from it to restore (checked, not written,
    by this driver: one changed since is not vouched for); a sweep begun before linc kept its
    state gets one."""
    local = getattr(tuner, "_local_tuner", None)  # None: a Ray Client driver
    if local is None:
        return
    run_config = local.get_run_config()
    callbacks = list(run_config.callbacks or [])
    keepers = [c for c in callbacks if isinstance(c, KeepIntactState)]
    if not keepers:
        keepers = [KeepIntactState(filesystem, path)]
        keepers[0]._restored = True
        run_config.callbacks = [*callbacks, *keepers]
    downloaded = frozenset(
        i.base_name for i in _state_files(filesystem or pafs.LocalFileSystem(), path)
    )
    for keeper in keepers:
        keeper.filesystem, keeper.folder, keeper._downloaded = filesystem, path, downloaded


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
    "SEAL_FILE",
    "KeepIntactState",
    "StateKeeper",
    "SweepNotRestored",
    "SweepSettingsChanged",
    "UntrustedState",
    "check_state",
    "is_intact",
    "is_state_file",
    "keep_intact",
    "restore_tuner",
    "without_driver_settings",
]
