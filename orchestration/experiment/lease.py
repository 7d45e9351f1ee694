"""One driver per sweep: a lease file in the sweep's folder on its storage (local or S3).

The same sweep submitted twice (two ``ray job submit`` of one command, a retry of a job that is
in fact still running) would have two drivers restoring and writing one Tune experiment and one
MLflow parent run. Before anything is written, a driver takes the sweep's lease,
``<storage>/<sweep>/linc_lease.json``: who holds it (host, pid, since) and when it was last
renewed. A second driver refuses in one line naming the sweep and the holder.

A lease needs no lock service, so it works on S3 as on a folder: the driver writes its record
with a random token, waits :data:`SETTLE_S` and reads it back; of two drivers that wrote in
that window only the last one reads its own token, and the other refuses. The holder renews the
record every ``ttl / 4`` from a daemon thread and deletes it when the sweep ends. A holder that
died without releasing it (SIGKILL, a lost node) stops renewing: its lease can be taken once it
is older than ``ttl``, or at once when the holder ran on this host and its process is gone.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from linc_core.utils.atomic import write_atomic
from linc_core.utils.secrets import redact
from orchestration.data.storage import StorageUnavailableError, with_retries
from orchestration.experiment.preflight import PreflightError

logger = logging.getLogger(__name__)

LEASE_FILE = "linc_lease.json"
TTL_S = 120.0  # a holder that stopped renewing for this long is gone
SETTLE_S = 1.0  # how long two drivers' writes may be apart and still be seen as a race
ATTEMPTS = 6  # tries of each read and write (S3 answers SlowDown under load)


class SweepLeased(PreflightError):
    """Another driver holds the sweep's lease: nothing was started or written."""


@dataclass
class SweepLease:
    """The held lease of one sweep (see the module docstring); ``release`` ends it."""

    filesystem: pafs.FileSystem
    path: str
    sweep: str
    token: str
    ttl_s: float = TTL_S

    @classmethod
    def take(
        cls, filesystem: pafs.FileSystem, folder: str, sweep: str, ttl_s: float = TTL_S
    ) -> SweepLease:
        """Take the lease of ``sweep`` whose folder is ``folder`` on ``filesystem``.

        Raises:
            SweepLeased: a live driver holds it, or won the race to it.
        """
        path = f"{folder.rstrip('/')}/{LEASE_FILE}"
        lease = cls(filesystem, path, sweep, uuid.uuid4().hex, ttl_s)
        since = time.time()
        try:
            held = _read(filesystem, path)
            if held is not None and _alive(held, ttl_s):
                raise SweepLeased(_refusal(sweep, held, path, ttl_s))
            lease._write(since)
            time.sleep(SETTLE_S)
            now = _read(filesystem, path)
        except StorageUnavailableError as err:
            message = f"cluster.storage: the sweep's lease: {redact(str(err))}"
            raise PreflightError(message) from None
        if now is None or now.get("token") != lease.token:
            raise SweepLeased(_refusal(sweep, now or {}, path, ttl_s))
        lease._since = since
        lease._stop = threading.Event()
        lease._thread = threading.Thread(target=lease._renew, name="sweep-lease", daemon=True)
        lease._thread.start()
        return lease

    def release(self) -> None:
        """Stop renewing and delete the record (when it is still this driver's)."""
        self._stop.set()
        self._thread.join(timeout=5)
        held = _read(self.filesystem, self.path)
        if held is not None and held.get("token") == self.token:
            try:
                self.filesystem.delete_file(self.path)
            except OSError as err:  # it expires by itself
                logger.warning("could not release the lease %s: %s", self.path, err)

    def __enter__(self) -> SweepLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _write(self, since: float) -> None:
        record = {
            "sweep": self.sweep,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": since,
            "renewed": time.time(),
            "token": self.token,
        }
        content = json.dumps(record).encode()

        def write() -> None:
            self.filesystem.create_dir(self.path.rsplit("/", 1)[0], recursive=True)
            write_atomic(self.path, content, filesystem=self.filesystem)

        with_retries(write, f"write {self.path}", attempts=ATTEMPTS)

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            try:
                held = _read(self.filesystem, self.path)
                if held is not None and held.get("token") != self.token:
                    logger.error("the lease %s was taken by %s", self.path, _holder(held))
                    return
                self._write(self._since)
            except OSError as err:  # storage unavailable: the next renewal tries again
                logger.warning("could not renew the lease %s: %s", self.path, err)


def _read(filesystem: pafs.FileSystem, path: str) -> dict[str, Any] | None:
    """The lease record at ``path``, None when there is none (or it is not one); a storage
    error is retried (S3 throttling), then raises ``StorageUnavailableError``."""

    def read() -> bytes:
        with filesystem.open_input_stream(path) as stream:
            return stream.read()

    try:
        value = json.loads(with_retries(read, f"read {path}", attempts=ATTEMPTS))
    except (FileNotFoundError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _alive(held: dict[str, Any], ttl_s: float) -> bool:
    """Whether the holder of ``held`` may still be running its sweep."""
    if time.time() - float(held.get("renewed", 0)) > ttl_s:
        return False
    if held.get("host") == socket.gethostname():
        try:
            os.kill(int(held.get("pid", 0)), 0)
        except ProcessLookupError:
            return False  # killed on this host: no need to wait for the lease to expire
        except (PermissionError, ValueError):
            return True
    return True


def _holder(held: dict[str, Any]) -> str:
    return f"{held.get('host', '?')} pid {held.get('pid', '?')}"


def _refusal(sweep: str, held: dict[str, Any], path: str, ttl_s: float) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(held.get("since", 0))))
    left = ttl_s - (time.time() - float(held.get("renewed", time.time())))
    return (
        f"{sweep}: another driver is running this sweep ({_holder(held)}, since {since}; "
        f"lease {path}); wait for it or stop it (a driver that died stops renewing: its "
        f"lease expires within {max(left, 0):.0f} s)"
    )


__all__ = ["LEASE_FILE", "SweepLease", "SweepLeased", "TTL_S"]
