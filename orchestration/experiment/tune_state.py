"""Tune's saved experiment state: sealed by the driver that wrote it, kept intact through a
storage that fills up, read back only when its seal holds.

Tune saves its state (``experiment_state-*.json``, the searcher's ``basic-variant-state-*.json``,
``search_gen_state-*.json`` or ``searcher-state-*.pkl``) in the driver's staging folder and
copies it to the sweep's folder every 10 s or more (a copy a full storage can cut short);
``tuner.pkl`` it writes there once, as the sweep begins. ``Tuner.restore`` unpickles them all
with cloudpickle: whoever can write the storage could put code there. So each is sealed
(:mod:`orchestration.data.seal`: HMAC-SHA256 under this user's key) from the bytes the driver
itself wrote, and kept in ``.linc-intact/`` of the sweep's folder (:class:`StateKeeper`; the
callback :class:`KeepIntactState` keeps the staged files as Tune saves them, before it uploads
them, and ``tuner.pkl`` as the sweep starts). Every read and write goes through the sweep's
:class:`~orchestration.experiment.folder.SweepFolder`, with its retries.

Before a re-run restores, :func:`check_state` verifies each file Tune may read (every
``.json``/``.pkl`` at the top of the folder): one its seal accepts is read; one cut short or
matching no seal is put back from its copy when the seal accepts that (one warning); any other
stops the re-run in one line, nothing of it read (a ``SweepRefused``): changed outside
this driver, sealed with another key (a moved sweep: set ``LINC_STATE_KEY``), or with no seal
(written before linc sealed its state: ``cluster.trust_unsealed_state=true`` once accepts and
seals it). An older state is safe to resume from: each trial restores its own newest intact
checkpoint, and a state naming checkpoints since deleted is tolerated
(:mod:`orchestration.experiment.ray_compat`, whose ``restore_tuner`` is the one restore of a
sweep).

A file is intact when it parses: JSON to its end, a pickle to its STOP opcode (read with
:mod:`pickletools`, which executes nothing).
"""

from __future__ import annotations

import io
import json
import logging
import pickletools
import time
from pathlib import Path
from typing import Any

from ray import tune

from orchestration.data.seal import (
    KEEP_FOLDER,
    KEY_VARIABLE,
    SEAL_FILE,
    Seal,
    key_id,
    parse_seal,
    seal_digest,
    state_key,
)
from orchestration.experiment.folder import SweepFolder
from orchestration.failures import SweepRefused

logger = logging.getLogger(__name__)

TUNER_FILE = "tuner.pkl"
TRUST_SETTING = ("cluster", "trust_unsealed_state")
# linc's own files in the sweep's folder (JSON, written atomically) and hidden files (Ray's
# empty storage marker, the kept copies) are not Tune's state; Tune reads no other suffix.
NOT_STATE_PREFIXES = ("linc_", ".")
STATE_SUFFIXES = (".json", ".pkl")


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


def _state_files(folder: SweepFolder) -> list[str]:
    import pyarrow.fs as pafs

    return [
        info.base_name
        for info in folder.listing()
        if info.type == pafs.FileType.File and is_state_file(info.base_name)
    ]


class StateKeeper:
    """The seal and the intact copies of one sweep's folder (``.linc-intact/`` in it)."""

    def __init__(self, folder: SweepFolder):
        self.folder = folder
        self.kept = folder.child(KEEP_FOLDER)
        self.label = folder.name  # a moved sweep keeps its folder's name
        self._seal: Seal | None = None
        self._copied: dict[str, str] = {}  # name -> the digest of the copy this keeper wrote

    def read_seal(self) -> Seal | None:
        return parse_seal(self.kept.read(SEAL_FILE))

    def keep(self, files: dict[str, bytes]) -> list[str]:
        """Seal each of ``files`` (name -> the bytes the driver wrote) and keep its copy; the
        names newly sealed. The seal first: a copy is then always one the seal accepts (and a
        copy that failed is written the next time).

        Raises:
            OSError: storage refused a write (the seal on storage is then as it was).
        """
        key = state_key()
        if self._seal is None or self._seal.key_id != key_id(key):
            found = self.read_seal()  # digests made with another key are of no use here
            self._seal = found if found and found.key_id == key_id(key) else Seal(key_id(key))
        seal = self._seal
        added = [n for n, content in files.items() if seal.add(key, self.label, n, content)]
        if added:
            try:
                self.kept.write(SEAL_FILE, seal.to_json(), retry=False)
            except OSError:
                self._seal = None  # read again next time: storage has the previous seal
                raise
        for name, content in files.items():
            digest = seal_digest(key, self.label, content)
            if self._copied.get(name) != digest:
                self.kept.write(name, content, retry=False)
                self._copied[name] = digest
        return added


def keep_intact(
    keeper: StateKeeper,
    seen: dict[str, Any],
    source: str | None = None,
    skip: frozenset[str] = frozenset(),
) -> list[str]:
    """Seal and keep each intact state file in ``source`` (a local folder: the driver's own
    staging copy; None: the sweep's folder itself) that changed since ``seen`` (name -> size
    and mtime, updated), but those named in ``skip``; the names newly sealed."""
    import pyarrow.fs as pafs

    folder = keeper.folder if source is None else SweepFolder(pafs.LocalFileSystem(), source)
    files, stamps = {}, {}
    for info in folder.listing():
        name, stamp = info.base_name, (info.size, info.mtime_ns)
        if info.type != pafs.FileType.File or not is_state_file(name):
            continue
        if seen.get(name) == stamp or name in skip:
            continue
        content = folder.read(name)
        if content is None or not is_intact(content):  # being written, or cut short
            continue
        files[name], stamps[name] = content, stamp
    added = keeper.keep(files)
    seen.update(stamps)
    return added


def check_state(
    folder: SweepFolder, restore: bool = True, trust_unsealed: bool = False
) -> list[str]:
    """Verify Tune's state files in ``folder`` against their seal before anything reads them
    (``restore`` False, a new sweep: only this user's key); put back from its sealed copy each
    one that is cut short or matches no seal (one warning each). With ``trust_unsealed``, a file
    that has no seal at all is accepted and sealed (its intact copy if it is cut short). Returns
    the names put back.

    Raises:
        SweepRefused: a file neither it nor its copy passes (one line; nothing read), or this
            user's key cannot be had safely.
    """
    key = state_key()
    if not restore:
        return []
    keeper = StateKeeper(folder)
    found = keeper.read_seal()
    seal = found or Seal(key_id(key))
    ours = seal.key_id == key_id(key)
    put_back, trusted = [], {}
    for name in _state_files(folder):
        content = folder.read(name) or b""
        if ours and seal.accepts(key, keeper.label, name, content):
            continue
        copy = keeper.kept.read(name)
        if copy is not None and ours and seal.accepts(key, keeper.label, name, copy):
            _put_back(keeper, name, content, copy)
            put_back.append(name)
        elif trust_unsealed and ours and name not in seal.files:
            if not is_intact(content) and copy is not None and is_intact(copy):
                _put_back(keeper, name, content, copy)
                content = copy
            if is_intact(content):
                trusted[name] = content
        else:
            refusal = _refusal(folder.uri(name), content, found, name in seal.files, key)
            raise SweepRefused(refusal)
    if trusted:
        keeper.keep(trusted)
        logger.warning(
            "Tune's saved state %s had no seal (cluster.trust_unsealed_state): accepted as it "
            "is and sealed now: %s",
            folder.uri(),
            ", ".join(sorted(trusted)),
        )
    return put_back


def _put_back(keeper: StateKeeper, name: str, content: bytes, copy: bytes) -> None:
    keeper.folder.write(name, copy)
    if is_intact(content):
        what = f"matches none of its seals ({len(content)} bytes; changed outside this driver, "
        what += "or its seal could not be written)"
    else:
        what = f"was damaged (cut short, {len(content)} bytes; the storage filled up while it "
        what += "was written)"
    told = f"Tune's saved state {keeper.folder.uri(name)} {what}: put back its last intact copy"
    logger.warning("%s (%d bytes) from %s", told, len(copy), keeper.kept.uri(name))


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
    driver's loop. A failure to write (the storage full, S3 away) is left for the next time.

    ``restored``: a restored sweep, made after :func:`check_state`: the state files Tune
    restores from are checked, not written, by this driver, so one changed since is not
    vouched for (never sealed), and ``tuner.pkl`` is not sealed again.
    """

    def __init__(self, folder: SweepFolder, restored: bool = False, period_s: float = 10.0):
        state_key()  # a key that cannot be had safely stops the sweep before it starts
        self.keeper = StateKeeper(folder)
        self.downloaded = frozenset(_state_files(folder)) if restored else None
        self.period_s = period_s
        self._seen: dict[str, Any] = {}
        self._next = 0.0
        self._staging: str | None = None

    def setup(self, **info: Any) -> None:
        if self.downloaded is not None:  # tuner.pkl was checked before the restore
            return
        try:  # written by Tune moments ago, before any trial ran
            content = self.keeper.folder.read(TUNER_FILE)
            if content is not None and is_intact(content):
                self.keeper.keep({TUNER_FILE: content})
        except OSError as err:
            logger.warning("could not seal %s: %s", self.keeper.folder.uri(TUNER_FILE), err)

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

    def _keep(self) -> None:
        staging = self._staging or _newest_staging(self.keeper.folder.name)
        if staging is None:
            return
        try:
            keep_intact(self.keeper, self._seen, staging, skip=self.downloaded or frozenset())
        except OSError as err:
            where = self.keeper.folder.uri()
            logger.debug("could not keep Tune's state of %s intact this time: %s", where, err)


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


__all__ = [
    "KEEP_FOLDER",
    "SEAL_FILE",
    "KeepIntactState",
    "StateKeeper",
    "check_state",
    "is_intact",
    "is_state_file",
    "keep_intact",
    "without_driver_settings",
]
