"""Every local Ray a ``linc-*`` command starts listens on 127.0.0.1 only.

Attacked as a neighbour on the network would see it: the listening TCP sockets of a running
``linc-ablation preset=smoke`` and of every process it started (GCS, raylets, dashboard agent,
runtime-env agent, workers), read from the kernel while the sweep runs. Before the fix the GCS,
raylets and workers listened on ``*`` and the runtime-env agent on the host's address: the CLI
imported ``ray`` before it set Ray's loopback switch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.conftest import fresh_python

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def _listening(root: psutil.Process) -> set[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket of ``root``'s tree."""
    found: set[tuple[str, str, int]] = set()
    try:
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return found
    for process in tree:
        try:
            name = process.name()
            for socket in process.net_connections(kind="tcp"):
                if socket.status == psutil.CONN_LISTEN:
                    found.add((name, socket.laddr.ip, socket.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_a_sweeps_ray_listens_on_loopback_only(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    command = [
        str(Path(sys.executable).with_name("linc-ablation")),
        "preset=smoke",
        f"cluster.storage={tmp_path / 'storage'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
    ]
    sweep = subprocess.Popen(
        command,
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen: set[tuple[str, str, int]] = set()
    root = psutil.Process(sweep.pid)
    deadline = time.monotonic() + 300
    while sweep.poll() is None and time.monotonic() < deadline:
        seen |= _listening(root)
        time.sleep(0.5)
    output, _ = sweep.communicate(timeout=60)
    assert sweep.returncode == 0, output[-3000:]
    names = {name for name, _, _ in seen}
    # the check saw Ray itself, not only the driver
    assert {"gcs_server", "raylet"} <= names, sorted(seen)
    exposed = sorted(entry for entry in seen if entry[1] not in LOOPBACK)
    assert exposed == [], f"listening outside loopback: {exposed}"


def test_a_local_ray_binds_loopback_even_after_an_earlier_import_of_ray() -> None:
    # a notebook imports ray (switch unset: Ray's default, every interface) before linc
    script = """
import os
os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
import ray
import psutil
from orchestration.ray_session import init_ray
init_ray("local", num_cpus=1, log_to_driver=False)
tree = [psutil.Process(), *psutil.Process().children(recursive=True)]
seen = set()
for process in tree:
    try:
        for socket in process.net_connections(kind="tcp"):
            if socket.status == psutil.CONN_LISTEN:
                seen.add((process.name(), socket.laddr.ip))
    except psutil.Error:
        pass
ray.shutdown()
print(sorted(seen))
"""
    seen = eval(fresh_python(script).strip().splitlines()[-1])  # noqa: S307 - our own print
    names = {name for name, _ in seen}
    assert {"gcs_server", "raylet"} <= names, seen
    assert [entry for entry in seen if entry[1] not in LOOPBACK] == []
