"""Real servers for fault injection, each bound to 127.0.0.1: MLflow, moto S3, loopback Ray nodes.

Every server here is started by the caller and stopped by it (``stop`` kills the server's own
process group, never anything found by name). :func:`listening_addresses` reads which addresses
a set of processes listens on (from ``/proc``), so a test can check that nothing it started is
reachable from another interface.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


class MlflowServer:
    """``mlflow server`` on 127.0.0.1 with a SQLite store (or ``backend``, a database URL) and
    proxied artifacts under ``folder``; ``app_name``: one of MLflow's ``--app-name`` apps (linc's
    ``linc``: the UI opening on the runs table).

    ``stop`` then ``start`` makes a real outage: connections are refused in between and the same
    port and store answer afterwards.
    """

    def __init__(
        self,
        folder: Path,
        port: int | None = None,
        backend: str | None = None,
        app_name: str | None = None,
    ):
        self.folder = Path(folder)
        self.app_name = app_name
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.backend = backend or f"sqlite:///{self.folder / 'mlflow.db'}"
        self.process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self, timeout: float = 240.0) -> MlflowServer:
        command = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            LOOPBACK,
            "--port",
            str(self.port),
            "--backend-store-uri",
            self.backend,
            "--artifacts-destination",
            str(self.folder / "artifacts"),
            "--workers",
            "1",
        ]
        if self.app_name:
            command += ["--app-name", self.app_name]
        # No job runner: it forks consumer processes that outlive a stopped server.
        env = os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        log = (self.folder / "server.log").open("a")
        self.process = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited: see {self.folder / 'server.log'}")
            if self.healthy():
                return self
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"mlflow server on port {self.port} not up after {timeout:.0f} s")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        stop_group(self.process)
        self.process = None

    def pids(self) -> set[int]:
        return process_tree(self.process.pid) if self.process else set()

    def __enter__(self) -> MlflowServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


S3_TEST_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class S3Server:
    """moto's S3 server (``python -m moto.server``) on 127.0.0.1 with one bucket, in a process of
    its own (a server thread inside a busy test process misses the client's connect timeout);
    ``uri(prefix)`` gives the ``s3://`` URI linc reads (endpoint in the query)."""

    def __init__(self, bucket: str = "linc"):
        self.bucket = bucket
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self, timeout: float = 120.0) -> S3Server:
        # Keys a caller set stay (a test that follows its own through a sweep); else test keys.
        for name, value in S3_TEST_ENVIRONMENT.items():
            os.environ.setdefault(name, value)
        command = [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2):
                    break
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError("moto server exited") from None
                time.sleep(0.5)
        else:
            self.stop()
            raise TimeoutError(f"moto server on port {self.port} not up after {timeout:.0f} s")
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint).create_bucket(Bucket=self.bucket)
        return self

    def uri(self, prefix: str) -> str:
        query = f"endpoint_override={LOOPBACK}:{self.port}&scheme=http"
        return f"s3://{self.bucket}/{prefix}?{query}"

    def pids(self) -> set[int]:
        return process_tree(self.process.pid) if self.process else set()

    def stop(self) -> None:
        if self.process is not None:
            stop_group(self.process)
            self.process = None


def stop_group(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group ``process`` leads (started with ``start_new_session``), then
    SIGKILL what is left after ``grace`` seconds."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def process_tree(pid: int) -> set[int]:
    """``pid`` and all its descendants (from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        if current not in found:
            found.add(current)
            todo.extend(children.get(current, []))
    return found


def listening_addresses(pids: Iterable[int]) -> set[tuple[str, int]]:
    """The (address, port) pairs on which any of ``pids`` listens (TCP, IPv4 and IPv6)."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                address, port = local.split(":")
                found.add((_address(address, width), int(port, 16)))
    return found


def _address(hex_address: str, width: int) -> str:
    raw = bytes.fromhex(hex_address)
    if width == 8:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def non_loopback(addresses: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
    """The pairs that do not listen on loopback only (0.0.0.0, ::, or a host address)."""
    return {(a, p) for a, p in addresses if a not in (LOOPBACK, "::1", "::ffff:127.0.0.1")}


__all__ = [
    "LOOPBACK",
    "MlflowServer",
    "S3Server",
    "S3_TEST_ENVIRONMENT",
    "free_port",
    "listening_addresses",
    "non_loopback",
    "process_tree",
    "stop_group",
]
