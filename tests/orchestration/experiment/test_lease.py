"""One driver per sweep: the lease on a folder and on a real S3 server (moto, 127.0.0.1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from faults.servers import S3Server
from orchestration.data.storage import open_filesystem
from orchestration.experiment import lease as lease_module
from orchestration.experiment.lease import LEASE_FILE, SweepLease, SweepLeased


@pytest.fixture(autouse=True)
def quick_settle(monkeypatch) -> None:
    monkeypatch.setattr(lease_module, "SETTLE_S", 0.05)


def record(folder: Path) -> dict:
    return json.loads((folder / LEASE_FILE).read_text())


def test_a_held_lease_refuses_a_second_driver_naming_sweep_and_holder(tmp_path: Path) -> None:
    local = pafs.LocalFileSystem()
    held = SweepLease.take(local, str(tmp_path), "ablation-paper")
    assert record(tmp_path)["pid"] == os.getpid()
    with pytest.raises(SweepLeased) as refused:
        SweepLease.take(local, str(tmp_path), "ablation-paper")
    message = str(refused.value)
    assert message.startswith("ablation-paper: another driver is running this sweep (")
    assert f"pid {os.getpid()}," in message and str(tmp_path / LEASE_FILE) in message
    held.release()
    assert not (tmp_path / LEASE_FILE).exists()
    SweepLease.take(local, str(tmp_path), "ablation-paper").release()  # free again


def test_a_dead_holder_on_this_host_and_an_expired_one_are_taken_over(tmp_path: Path) -> None:
    local = pafs.LocalFileSystem()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    held = SweepLease.take(local, str(tmp_path), "s")
    held._stop.set()  # the holder stops renewing, as a killed one does
    stale = record(tmp_path) | {"pid": int(dead.stdout)}
    (tmp_path / LEASE_FILE).write_text(json.dumps(stale))
    taken = SweepLease.take(local, str(tmp_path), "s")  # its process is gone: no wait
    assert record(tmp_path)["token"] == taken.token
    taken._stop.set()
    other_host = record(tmp_path) | {"host": "elsewhere", "renewed": time.time() - 10}
    (tmp_path / LEASE_FILE).write_text(json.dumps(other_host))
    with pytest.raises(SweepLeased, match="elsewhere pid"):
        SweepLease.take(local, str(tmp_path), "s", ttl_s=60)
    SweepLease.take(local, str(tmp_path), "s", ttl_s=5).release()  # older than its ttl


def test_of_two_drivers_writing_at_once_only_the_last_one_holds(tmp_path: Path, monkeypatch):
    """Both found no lease; the rival's record lands while this driver waits to read its own
    back: this one refuses, naming the rival."""
    local = pafs.LocalFileSystem()

    def a_rival_writes_meanwhile(seconds: float) -> None:
        rival = record(tmp_path) | {"host": "node-2", "pid": 4242, "token": "rival"}
        (tmp_path / LEASE_FILE).write_text(json.dumps(rival))

    monkeypatch.setattr(lease_module.time, "sleep", a_rival_writes_meanwhile)
    with pytest.raises(SweepLeased, match="node-2 pid 4242"):
        SweepLease.take(local, str(tmp_path), "s")
    assert record(tmp_path)["token"] == "rival"


def test_the_lease_works_on_s3() -> None:
    server = S3Server().start()
    try:
        filesystem, root = open_filesystem(server.uri("tune"))
        held = SweepLease.take(filesystem, f"{root}/sweep", "sweep")
        with pytest.raises(SweepLeased, match=f"pid {os.getpid()},"):
            SweepLease.take(filesystem, f"{root}/sweep", "sweep")
        held.release()
        missing = filesystem.get_file_info(f"{root}/sweep/{LEASE_FILE}").type
        assert missing == pafs.FileType.NotFound
    finally:
        server.stop()
