"""Tune's saved experiment state: sealed by the driver that wrote it, kept intact through a
storage that fills up, read back only when its seal holds.

Tune saves its state (``experiment_state-*.json``, the searcher's ``basic-variant-state-*.json``,
``search_gen_state-*.json`` or ``searcher-state-*.pkl``) in the driver's staging folder and
copies it to the sweep's folder every 10 s or more (a copy a full storage can cut short);
``tuner.pkl`` it writes there once, as the sweep begins. ``Tuner.restore`` unpickles them all
with cloudpickle: whoever can write the storage could put code there. So each is sealed from
the bytes the driver itself wrote, with an HMAC-SHA256 under this user's key
(:mod:`orchestration.data.state_key`), and kept in ``.linc-intact/`` of the sweep's folder
(:class:`StateKeeper`; the Tune callback
:class:`~orchestration.experiment.callbacks.KeepIntactState` keeps the staged files as Tune saves
them, before it uploads them, and ``tuner.pkl`` as the sweep starts). A :class:`Seal` (a JSON
file beside the copies it vouches for) maps each file name to its newest :data:`KEPT_DIGESTS`
digests; its ``key_id`` names the key (an HMAC of a constant, which reveals nothing of it), so
that a seal made with another key is named as such.

Before a sweep starts, :func:`check_state` reads the folder once (every ``.json``/``.pkl`` at
its top and the kept copies), decides, and writes once. A file its seal accepts is left to
Tune; one cut short or matching no seal is put back from its copy when the seal accepts that
(one warning); any other stops the re-run in one line, nothing of it read (a
``SweepRefused``): changed outside this driver, sealed with another key (a moved sweep: set
``LINC_STATE_KEY``), or with no seal (written before linc sealed its state:
``cluster.trust_unsealed_state=true`` once accepts and seals it). An older state is safe to
resume from: each trial restores its own newest intact checkpoint, and a state naming
checkpoints since deleted is tolerated (:mod:`orchestration.experiment.ray_compat`, whose
``restore_tuner`` is the one restore of a sweep).

A file is intact when it parses: JSON to its end, a pickle to its STOP opcode (read with
:mod:`pickletools`, which executes nothing).
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import io
import json
import logging
import pickletools
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from orchestration.data.state_key import KEY_VARIABLE, key_id, state_key
from orchestration.experiment.folder import SweepFolder
from orchestration.failures import SweepRefused

logger = logging.getLogger(__name__)

TUNER_FILE = "tuner.pkl"  # Tune restores an experiment whose folder holds it (Tuner.can_restore)
KEEP_FOLDER = ".linc-intact"  # in a sweep's folder: the seal and the copies it vouches for
SEAL_FILE = "seal.json"
# The newest digests kept per file: Tune uploads its state in the background, so storage may
# hold a version or two behind the newest the driver sealed.
KEPT_DIGESTS = 4
# linc's own files in the sweep's folder (JSON, written atomically) and hidden files (Ray's
# empty storage marker, the kept copies) are not Tune's state; Tune reads no other suffix.
NOT_STATE_PREFIXES = ("linc_", ".")
STATE_SUFFIXES = (".json", ".pkl")
# What a sweep begun by an earlier linc names in its tuner.pkl (which pickles its Tune
# callbacks) that has moved since, (module, name or None for the whole module) -> where it is
# now: aliased while Tune restores such a sweep (earlier_names), so an upgrade does not strand a
# sweep in progress. Only files the seal accepted are read under these names.
MOVED = {
    ("orchestration.experiment.stopping", None): "orchestration.experiment.callbacks",
    ("orchestration.data.seal", None): "orchestration.experiment.tune_state",
    (
        "orchestration.experiment.tune_state",
        "KeepIntactState",
    ): "orchestration.experiment.callbacks",
}


def seal_digest(key: bytes, label: str, content: bytes) -> str:
    """The HMAC-SHA256 (hex) of ``content`` under ``key``, bound to ``label`` (the file's place:
    a sweep's folder name and the file's name), so one file's seal does not vouch for another."""
    mac = hmac.new(key, label.encode() + b"\0", hashlib.sha256)
    mac.update(content)
    return mac.hexdigest()


@dataclass
class Seal:
    """Digests of the files a driver wrote: ``files`` maps a name to its newest digests, newest
    first; ``key_id`` names the key that made them."""

    key_id: str
    files: dict[str, list[str]] = field(default_factory=dict)

    def accepts(self, key: bytes, label: str, name: str, content: bytes) -> bool:
        """Whether ``content`` is a version of ``name`` sealed with ``key``."""
        digest = seal_digest(key, label, content)
        return any(hmac.compare_digest(digest, kept) for kept in self.files.get(name, ()))

    def add(self, key: bytes, label: str, name: str, content: bytes) -> bool:
        """Seal ``content`` as the newest version of ``name``; False when it already was."""
        digest = seal_digest(key, label, content)
        kept = self.files.get(name, [])
        if kept[:1] == [digest]:
            return False
        self.files[name] = [digest, *(d for d in kept if d != digest)][:KEPT_DIGESTS]
        return True

    def to_json(self) -> bytes:
        return json.dumps({"version": 1, "key_id": self.key_id, "files": self.files}).encode()


def parse_seal(content: bytes | None) -> Seal | None:
    """The seal in ``content``; None when there is none. One that does not parse as a seal (cut
    short, or not one) is an empty seal of no key: every file then fails to verify."""
    if content is None:
        return None
    try:
        values = json.loads(content)
        files = {
            str(name): [str(d) for d in digests][:KEPT_DIGESTS]
            for name, digests in values["files"].items()
            if isinstance(digests, list)
        }
        return Seal(str(values["key_id"]), files)
    except (ValueError, KeyError, TypeError, AttributeError):
        return Seal("unreadable")


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


@contextmanager
def earlier_names() -> Iterator[None]:
    """The names of :data:`MOVED` resolvable at their earlier places (for unpickling), and gone
    again after."""
    modules: list[str] = []
    attributes: list[tuple[Any, str]] = []
    for (earlier, name), now in MOVED.items():
        target = importlib.import_module(now)
        if name is None and earlier not in sys.modules:
            sys.modules[earlier] = target
            modules.append(earlier)
        elif name is not None and not hasattr(module := importlib.import_module(earlier), name):
            setattr(module, name, getattr(target, name))
            attributes.append((module, name))
    try:
        yield
    finally:
        for earlier in modules:
            sys.modules.pop(earlier, None)
        for module, name in attributes:
            delattr(module, name)


@dataclass(frozen=True)
class CheckedState:
    """Tune's state in one experiment's folder, checked before anything of it is read.

    Attributes:
        folder: the experiment's folder.
        restoring: whether Tune restores the experiment saved there (False: a new one).
        keeper: the folder's seal and intact copies, for the callback that keeps them.
        files: the state files checked, which Tune restores from: this driver did not write
            them, so they are never sealed again.
        put_back: the files put back from their sealed copies.
    """

    folder: SweepFolder
    restoring: bool
    keeper: StateKeeper
    files: frozenset[str] = frozenset()
    put_back: tuple[str, ...] = ()


def check_state(
    folder: SweepFolder, resume: bool = True, trust_unsealed: bool = False, setting: str = ""
) -> CheckedState:
    """Check Tune's state in ``folder`` against its seal before anything reads it (``resume``
    False, a new experiment: only this user's key): one read of the folder and its kept copies,
    the decisions, one write. A file cut short or matching no seal is put back from its sealed
    copy (one warning each). With ``trust_unsealed``, a file that has no seal at all is accepted
    and sealed (its intact copy if it is cut short).

    Raises:
        SweepRefused: a file neither it nor its copy passes (one line; nothing read), or this
            user's key cannot be had safely, or ``resume`` (the value of ``setting``) is False
            where an experiment is saved: its trials would meet their old checkpoints.
        StorageUnavailableError: the storage failed every try.
    """
    key = state_key()  # a key that cannot be had safely stops even a new sweep
    if not resume and setting and folder.can_restore():
        raise SweepRefused(
            f"{folder.uri()} holds a saved sweep, and {setting}=false starts a new one over "
            f"it: choose another name for it, delete that folder, or re-run with {setting}=true "
            "to resume it"
        )
    keeper = StateKeeper(folder)
    where = folder.uri()  # how messages name the folder
    saved = folder.read_all(is_state_file, also=KEEP_FOLDER) if resume else {}
    state = {name: content for name, content in saved.items() if "/" not in name}
    if TUNER_FILE not in state:  # nothing Tune would restore: a new experiment
        return CheckedState(folder, False, keeper)
    writes, told, put_back = _verify(where, keeper.label, key, saved, trust_unsealed)
    folder.write_all(writes)
    for message in told:
        logger.warning("%s", message)
    return CheckedState(folder, True, keeper, frozenset(state), tuple(put_back))


def _verify(
    where: str, label: str, key: bytes, saved: dict[str, bytes], trust_unsealed: bool
) -> tuple[dict[str, bytes], list[str], list[str]]:
    """The decisions of :func:`check_state` on the bytes ``saved`` (state files by name, kept
    files as ``.linc-intact/NAME``) of the folder at ``where`` (its seals' ``label``), reading
    and writing nothing: what to write, the warnings, the names put back."""
    found = parse_seal(saved.get(f"{KEEP_FOLDER}/{SEAL_FILE}"))
    seal = found or Seal(key_id(key))
    ours = seal.key_id == key_id(key)
    writes: dict[str, bytes] = {}
    told, put_back, trusted = [], [], {}
    for name, content in sorted((n, c) for n, c in saved.items() if "/" not in n):
        if ours and seal.accepts(key, label, name, content):
            continue
        copy = saved.get(f"{KEEP_FOLDER}/{name}")
        if copy is not None and ours and seal.accepts(key, label, name, copy):
            writes[name] = copy
            told.append(_put_back(where, name, content, copy))
            put_back.append(name)
        elif trust_unsealed and ours and name not in seal.files:
            if not is_intact(content) and copy is not None and is_intact(copy):
                writes[name] = copy
                told.append(_put_back(where, name, content, copy))
                content = copy
            if is_intact(content):
                trusted[name] = content
        else:
            refusal = _refusal(f"{where}/{name}", content, found, name in seal.files, key)
            raise SweepRefused(refusal)
    if trusted:  # the seal first, then the copies it vouches for
        for name, content in trusted.items():
            seal.add(key, label, name, content)
        kept = {f"{KEEP_FOLDER}/{name}": content for name, content in trusted.items()}
        writes = {f"{KEEP_FOLDER}/{SEAL_FILE}": seal.to_json()} | kept | writes
        told.append(
            f"Tune's saved state {where} had no seal (cluster.trust_unsealed_state): "
            f"accepted as it is and sealed now: {', '.join(sorted(trusted))}"
        )
    return writes, told, put_back


def _put_back(where: str, name: str, content: bytes, copy: bytes) -> str:
    if is_intact(content):
        what = f"matches none of its seals ({len(content)} bytes; changed outside this driver, "
        what += "or its seal could not be written)"
    else:
        what = f"was damaged (cut short, {len(content)} bytes; the storage filled up while it "
        what += "was written)"
    told = f"Tune's saved state {where}/{name} {what}: put back its last intact copy"
    return f"{told} ({len(copy)} bytes) from {where}/{KEEP_FOLDER}/{name}"


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


__all__ = [
    "KEEP_FOLDER",
    "KEPT_DIGESTS",
    "SEAL_FILE",
    "TUNER_FILE",
    "CheckedState",
    "Seal",
    "StateKeeper",
    "check_state",
    "earlier_names",
    "is_intact",
    "is_state_file",
    "keep_intact",
    "parse_seal",
    "seal_digest",
]
