"""The sweep's folder on its storage, local or S3: the one way the driver and its trials read and
write it.

``<cluster.storage>/<sweep>/`` holds Tune's experiment (its state files, a folder per trial with
that trial's checkpoints and their manifests) and linc's own files: the lease (one driver per
sweep, ``linc_lease.json``), the sweep record (``linc_sweep.json``: the parent run the sweep's
MLflow runs hang under, :mod:`orchestration.tracking.runs`), and the seal and intact copies of
Tune's state (``.linc-intact/``, :mod:`orchestration.experiment.tune_state`).

One policy for every read and write, driver and trials alike: a file that is not there reads as
None; a storage error is retried :data:`ATTEMPTS` times with backoff (S3 answers SlowDown under
load), then raises :class:`~orchestration.data.storage.StorageUnavailableError` naming the file;
JSON that does not parse (cut short) or is no mapping reads as None from :meth:`read_json`;
writes are atomic (a reader sees the old content or the new). A best-effort write that is
repeated anyway (the seal and copies of Tune's state, a trial's attempt count) is tried once.

The lease needs no lock service, so it works on S3 as on a folder: a driver writes its record
with a random token, waits :data:`SETTLE_S` and reads it back; of two drivers that wrote in that
window only the last reads its own token, and the other refuses. The holder renews the record
every ``ttl / 4`` from a daemon thread and deletes it when the sweep ends. A holder that died
(SIGKILL, a lost node) stops renewing: its lease can be taken once older than ``ttl``, or at once
when it ran on this host and its process is gone. Older means both its renewal time and the
file's own time: a record written within ``ttl`` by anyone who can write the folder, with a
stale or unreadable time, is refused as a live one (it let a second driver run a live sweep),
and the holder, renewing, finds it no driver's and writes its own again.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from linc_core.utils.atomic import write_atomic
from linc_core.utils.secrets import redact
from orchestration.config.sections import NAME_PATTERN, NAME_RULE
from orchestration.data.storage import open_filesystem, with_retries
from orchestration.failures import SweepRefused

logger = logging.getLogger(__name__)

ATTEMPTS = 6  # tries of each read and write
TUNE_SDK_ATTEMPTS = 8  # per S3 request of the driver's Tune storage: Tune's syncs do not retry
LEASE_FILE = "linc_lease.json"
RECORD_FILE = "linc_sweep.json"
TTL_S = 120.0  # a lease holder that stopped renewing for this long is gone
SETTLE_S = 1.0  # how long two drivers' lease writes may be apart and still be seen as a race


def _require_folder_name(name: str) -> None:
    # the config refuses such names already (sections.require_name); this join checks again
    if not (isinstance(name, str) and NAME_PATTERN.fullmatch(name)):
        raise SweepRefused(f"sweep name: expected {NAME_RULE}, got {redact(repr(name))}")


@dataclass(frozen=True)
class SweepFolder:
    """A folder (``path``) of a sweep's storage on a pyarrow file system."""

    filesystem: pafs.FileSystem
    path: str
    within: str | None = None  # a child's: the folder it lies in (its links checked from there)

    @classmethod
    def on_storage(cls, storage: str, name: str) -> SweepFolder:
        """The folder of sweep (or Tune experiment) ``name`` in ``cluster.storage``.

        Raises:
            SweepRefused: ``name`` is not one folder name (the config refuses such names; this
                join must not reach outside the storage whoever calls it).
        """
        _require_folder_name(name)
        if "://" in storage:
            filesystem, root = open_filesystem(storage, sdk_attempts=TUNE_SDK_ATTEMPTS)
        else:
            Path(storage).mkdir(parents=True, exist_ok=True)
            filesystem, root = pafs.LocalFileSystem(), storage
        return cls(filesystem, f"{root.rstrip('/')}/{name}")

    @classmethod
    def of_trial(cls) -> SweepFolder:
        """The running Tune trial's own folder (Tune's storage context)."""
        from ray import tune

        storage = tune.get_context().get_storage()
        return cls(storage.storage_filesystem, storage.trial_fs_path)

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent_path(self) -> str:
        """Where the folder lies: Tune's ``storage_path`` of an experiment folder."""
        return self.path.rstrip("/").rsplit("/", 1)[0]

    @property
    def tune_filesystem(self) -> pafs.FileSystem | None:
        """The file system as Tune takes it: None for a local folder."""
        return None if self.filesystem.type_name == "local" else self.filesystem

    def child(self, name: str) -> SweepFolder:
        path = f"{self.path.rstrip('/')}/{name}"
        return SweepFolder(self.filesystem, path, self.within or self.path.rstrip("/"))

    def sibling(self, name: str) -> SweepFolder:
        """The folder ``name`` beside this one (a search's later stage beside its first)."""
        _require_folder_name(name)
        return SweepFolder(self.filesystem, f"{self.parent_path}/{name}")

    def uri(self, *parts: str) -> str:
        """A local path, or ``s3://bucket/...``: how messages and tags name the place."""
        path = "/".join((self.path.rstrip("/"), *parts))
        scheme = self.filesystem.type_name
        return path if scheme == "local" else f"{scheme}://{path}"

    def can_restore(self) -> bool:
        """Whether a Tune experiment is saved here."""
        from ray import tune

        return tune.Tuner.can_restore(self.path, storage_filesystem=self.tune_filesystem)

    # -- the one policy --------------------------------------------------------------------
    def read(self, name: str) -> bytes | None:
        """The file ``name``'s bytes; None when it is not there.

        Raises:
            StorageUnavailableError: the storage failed every try.
        """
        path = f"{self.path}/{name}"

        def read() -> bytes:
            with self.filesystem.open_input_stream(path) as stream:
                return stream.read()

        try:
            return with_retries(read, f"read {self.uri(name)}", attempts=ATTEMPTS)
        except FileNotFoundError:
            return None

    def read_json(self, name: str) -> dict[str, Any] | None:
        """The JSON mapping in ``name``; None when it is not there or is no (whole) mapping."""
        content = self.read(name)
        try:
            value = json.loads(content) if content is not None else None
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def read_all(self, wanted: Callable[[str], bool], also: str | None = None) -> dict[str, bytes]:
        """Every file directly in this folder whose name passes ``wanted``, and every file
        directly in its subfolder ``also`` (keyed ``also/NAME``): listed and read as one
        operation under the one policy (a file gone between its listing and its read is left
        out).

        Raises:
            StorageUnavailableError: the storage failed every try.
        """

        def read_files() -> dict[str, bytes]:
            found = {}
            for prefix, chosen in (("", wanted), (also, None)):
                if prefix is None:
                    continue
                where = "/".join(p for p in (self.path.rstrip("/"), prefix) if p)
                selector = pafs.FileSelector(where, allow_not_found=True, recursive=False)
                for info in self.filesystem.get_file_info(selector):
                    if info.type != pafs.FileType.File or not (chosen or bool)(info.base_name):
                        continue
                    name = "/".join(p for p in (prefix, info.base_name) if p)
                    try:
                        with self.filesystem.open_input_stream(info.path) as stream:
                            found[name] = stream.read()
                    except FileNotFoundError:
                        continue
            return found

        return with_retries(read_files, f"read {self.uri()}", attempts=ATTEMPTS)

    def write(self, name: str, content: bytes, fsync: bool = False, retry: bool = True) -> None:
        """Write ``name`` atomically (its folders created); retried like a read, unless
        ``retry`` is False (a best-effort write that its next time repeats: one try, its
        ``OSError`` raised as is)."""

        def write() -> None:
            self._write_one(name, content, fsync)

        with_retries(write, f"write {self.uri(name)}", attempts=ATTEMPTS) if retry else write()

    def write_all(self, files: dict[str, bytes]) -> None:
        """Write each of ``files`` (name -> bytes, in their order) atomically, their folders
        created, as one operation under the one policy (a retry writes the same bytes again)."""

        def write_files() -> None:
            for name, content in files.items():
                self._write_one(name, content)

        if files:
            with_retries(write_files, f"write {self.uri()}", attempts=ATTEMPTS)

    def _write_one(self, name: str, content: bytes, fsync: bool = False) -> None:
        path = f"{self.path}/{name}"
        self._refuse_linked_folders(name)
        self.filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
        write_atomic(path, content, filesystem=self.filesystem, fsync=fsync)

    def _refuse_linked_folders(self, name: str) -> None:
        """On a local disk, refuse (``ELOOP``) a write under a folder of this one that is a
        link: whoever writes the sweep's folder could point ``.linc-intact`` at another
        sweep's and have this driver overwrite its seal. (A linked file is replaced whole by
        the atomic rename, never written through.)"""
        if not isinstance(self.filesystem, pafs.LocalFileSystem):
            return
        root = self.within or self.path.rstrip("/")
        folder, below = root, f"{self.path.rstrip('/')}/{name}"[len(root) + 1 :]
        for part in below.split("/")[:-1]:
            folder = f"{folder}/{part}"
            if os.path.islink(folder):
                raise OSError(errno.ELOOP, "a link in the sweep's folder; not followed", folder)

    def write_json(self, name: str, values: dict[str, Any], retry: bool = True) -> None:
        self.write(name, json.dumps(values).encode(), retry=retry)

    def age_s(self, name: str) -> float | None:
        """Seconds since ``name`` was last written, by the storage's clock (None: unknown)."""
        info = self.filesystem.get_file_info(f"{self.path}/{name}")
        return time.time() - info.mtime.timestamp() if info.mtime is not None else None

    def delete(self, name: str) -> None:
        """Delete the file or folder ``name`` (gone already: nothing to do)."""
        path = f"{self.path}/{name}"
        info = self.filesystem.get_file_info(path)
        if info.type == pafs.FileType.Directory:
            self.filesystem.delete_dir(path)
        elif info.type == pafs.FileType.File:
            self.filesystem.delete_file(path)

    def listing(self) -> list[pafs.FileInfo]:
        """The files and folders directly in this folder (none when it is not there)."""
        selector = pafs.FileSelector(self.path, allow_not_found=True, recursive=False)
        return with_retries(
            lambda: self.filesystem.get_file_info(selector),
            f"list {self.uri()}",
            attempts=ATTEMPTS,
        )

    # -- the sweep's own files -------------------------------------------------------------
    def record(self) -> dict[str, Any] | None:
        """The sweep record (``linc_sweep.json``) :mod:`orchestration.tracking.runs` wrote."""
        return self.read_json(RECORD_FILE)

    def write_record(self, values: dict[str, Any]) -> None:
        self.write_json(RECORD_FILE, values)

    def take_lease(self, sweep: str, ttl_s: float = TTL_S) -> SweepLease:
        """Take the lease of ``sweep`` (see the module docstring); ``release`` it at the end.

        Raises:
            SweepRefused: a live driver holds it, won the race to it, or the storage failed.
        """
        lease = SweepLease(self, sweep, uuid.uuid4().hex, ttl_s)
        try:
            held = self.read_json(LEASE_FILE)
            if held is not None and _alive(held, ttl_s, self.age_s(LEASE_FILE)):
                raise SweepRefused(lease.refusal(held))
            lease.write()
            time.sleep(SETTLE_S)
            now = self.read_json(LEASE_FILE)
        except OSError as err:
            raise SweepRefused(f"cluster.storage: the sweep's lease: {redact(str(err))}") from None
        if now is None or now.get("token") != lease.token:
            raise SweepRefused(lease.refusal(now or {}))
        lease.start_renewing()
        return lease


@dataclass
class SweepLease:
    """The held lease of one sweep (see the module docstring)."""

    folder: SweepFolder
    sweep: str
    token: str
    ttl_s: float = TTL_S
    since: float = field(default_factory=time.time)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def write(self) -> None:
        record = {"sweep": self.sweep, "host": socket.gethostname(), "pid": os.getpid()}
        record |= {"since": self.since, "renewed": time.time(), "token": self.token}
        self.folder.write_json(LEASE_FILE, record)

    def start_renewing(self) -> None:
        self._thread = threading.Thread(target=self._renew, name="sweep-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and delete the record (when it is still this driver's)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            held = self.folder.read_json(LEASE_FILE)
            if held is not None and held.get("token") == self.token:
                self.folder.delete(LEASE_FILE)
        except OSError as err:  # it expires by itself
            logger.warning("could not release the lease %s: %s", self.folder.uri(LEASE_FILE), err)

    def refusal(self, held: dict[str, Any]) -> str:
        started, renewed = held.get("since"), held.get("renewed")
        started = started if _lease_time(started) else 0.0
        renewed = renewed if _lease_time(renewed) else time.time()
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
        left = min(self.ttl_s - (time.time() - renewed), self.ttl_s)
        return (
            f"{self.sweep}: another driver is running this sweep ({_holder(held)}, since "
            f"{since}; lease {self.folder.uri(LEASE_FILE)}); wait for it or stop it (a driver "
            f"that died stops renewing: its lease expires within {max(left, 0):.0f} s)"
        )

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            try:
                held = self.folder.read_json(LEASE_FILE)
                if (
                    held is not None
                    and held.get("token") != self.token
                    and _alive(held, self.ttl_s)
                ):
                    where = self.folder.uri(LEASE_FILE)
                    logger.error("the lease %s was taken by %s", where, _holder(held))
                    return
                self.write()  # also over a record no live driver wrote (a forged one)
            except OSError as err:  # storage unavailable: the next renewal tries again
                logger.warning("could not renew the lease %s: %s", self.folder.uri(LEASE_FILE), err)


def _alive(held: dict[str, Any], ttl_s: float, age_s: float | None = None) -> bool:
    """Whether the holder of ``held`` may still be running its sweep. A record no driver
    writes (its times no numbers, not finite, or renewed further ahead than a lease lasts: the
    folder's writers write it too) holds nothing by its times, nor does one renewed more than
    ``ttl_s`` ago; either is still a live one while the file itself (``age_s`` seconds old) is
    younger than ``ttl_s``. A holder on this host whose process is gone holds nothing."""
    renewed = held.get("renewed")
    readable = _lease_time(held.get("since")) and _lease_time(renewed)
    if held.get("host") == socket.gethostname():
        try:
            os.kill(int(held.get("pid", 0)), 0)
        except ProcessLookupError:
            return False  # killed on this host: no need to wait for the lease to expire
        except (PermissionError, ValueError, TypeError, OverflowError):
            pass
    if readable and time.time() + ttl_s >= renewed >= time.time() - ttl_s:
        return True
    if age_s is not None and age_s < ttl_s:
        return True  # written within a lease's time, whatever it says
    if not readable or renewed > time.time() + ttl_s:
        logger.warning("the lease record %s is no driver's: taken over", _values(held))
    return False


def _lease_time(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _values(held: dict[str, Any]) -> str:
    return repr({k: held.get(k) for k in ("host", "pid", "since", "renewed")})[:200]


def _holder(held: dict[str, Any]) -> str:
    return f"{held.get('host', '?')} pid {held.get('pid', '?')}"


__all__ = ["LEASE_FILE", "RECORD_FILE", "SweepFolder", "SweepLease", "TTL_S"]
