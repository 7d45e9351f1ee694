"""The sweep's folder (orchestration.experiment.folder): one policy for every read and write, and
one driver per sweep, the lease, on a folder and on a real S3 server (moto, 127.0.0.1)."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from faults.servers import S3Server
from orchestration.data.storage import StorageUnavailableError, open_filesystem
from orchestration.experiment import folder as folder_module
from orchestration.experiment.folder import LEASE_FILE, SweepFolder
from orchestration.failures import SweepRefused


@pytest.fixture(autouse=True)
def quick_settle(monkeypatch) -> None:
    monkeypatch.setattr(folder_module, "SETTLE_S", 0.05)


def take(tmp_path: Path, sweep: str, **ttl):
    return SweepFolder(pafs.LocalFileSystem(), str(tmp_path)).take_lease(sweep, **ttl)


def record(folder: Path) -> dict:
    return json.loads((folder / LEASE_FILE).read_text())


def test_a_held_lease_refuses_a_second_driver_naming_sweep_and_holder(tmp_path: Path) -> None:
    held = take(tmp_path, "ablation-paper")
    assert record(tmp_path)["pid"] == os.getpid()
    with pytest.raises(SweepRefused) as refused:
        take(tmp_path, "ablation-paper")
    message = str(refused.value)
    assert message.startswith("ablation-paper: another driver is running this sweep (")
    assert f"pid {os.getpid()}," in message and str(tmp_path / LEASE_FILE) in message
    held.release()
    assert not (tmp_path / LEASE_FILE).exists()
    take(tmp_path, "ablation-paper").release()  # free again


def test_a_dead_holder_on_this_host_and_an_expired_one_are_taken_over(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    held = take(tmp_path, "s")
    held._stop.set()  # the holder stops renewing, as a killed one does
    stale = record(tmp_path) | {"pid": int(dead.stdout)}
    (tmp_path / LEASE_FILE).write_text(json.dumps(stale))
    taken = take(tmp_path, "s")  # its process is gone: no wait
    assert record(tmp_path)["token"] == taken.token
    taken._stop.set()
    other_host = record(tmp_path) | {"host": "elsewhere", "renewed": time.time() - 10}
    (tmp_path / LEASE_FILE).write_text(json.dumps(other_host))
    with pytest.raises(SweepRefused, match="elsewhere pid"):
        take(tmp_path, "s", ttl_s=60)
    with pytest.raises(SweepRefused, match="elsewhere pid"):  # the file is younger than 5 s
        take(tmp_path, "s", ttl_s=5)
    written_before(tmp_path, 10)  # as its holder last renewed it
    take(tmp_path, "s", ttl_s=5).release()  # older than its ttl


def written_before(folder: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(folder / LEASE_FILE, (then, then))


@pytest.mark.parametrize(
    "forged",
    [{"renewed": 1e300}, {"renewed": float("nan")}, {"renewed": "soon"}, {"since": "1e999"}],
    ids=["far-future", "nan", "text", "since-text"],
)
def test_a_lease_record_no_driver_writes_is_taken_over_once_older_than_a_lease(
    tmp_path: Path, caplog, forged
) -> None:
    # the folder's writers write its lease too: "renewed": 1e300 refused the sweep for good,
    # "soon" ended the command in a ValueError traceback; taken over at once, such a record
    # written beside a live driver let a second driver run its sweep
    held = take(tmp_path, "s")
    held._stop.set()
    (tmp_path / LEASE_FILE).write_text(json.dumps(record(tmp_path) | {"host": "node-9"} | forged))
    with pytest.raises(SweepRefused, match="another driver is running this sweep"):
        take(tmp_path, "s", ttl_s=60)  # written just now: whoever wrote it may be running
    written_before(tmp_path, 61)
    caplog.set_level(logging.WARNING, logger="orchestration.experiment.folder")
    taken = take(tmp_path, "s", ttl_s=60)
    assert record(tmp_path)["token"] == taken.token
    taken.release()
    assert any("is no driver's: taken over" in r.getMessage() for r in caplog.records)


def test_the_holder_renewing_writes_its_record_over_a_forged_one(tmp_path: Path) -> None:
    held = take(tmp_path, "s", ttl_s=0.4)  # renews every 0.1 s
    try:
        for forged in ({"renewed": "soon"}, {"renewed": time.time() - 3600}):
            stale = record(tmp_path) | {"host": "node-9", "token": "forged"} | forged
            (tmp_path / LEASE_FILE).write_text(json.dumps(stale))
            deadline = time.monotonic() + 10
            while record(tmp_path)["token"] != held.token and time.monotonic() < deadline:
                time.sleep(0.05)
            assert record(tmp_path)["token"] == held.token
        live = record(tmp_path) | {"host": "node-9", "token": "rival", "renewed": time.time()}
        (tmp_path / LEASE_FILE).write_text(json.dumps(live))  # a live rival's: left to it
        time.sleep(0.5)
        assert record(tmp_path)["token"] == "rival"
    finally:
        held.release()


def test_of_two_drivers_writing_at_once_only_the_last_one_holds(tmp_path: Path, monkeypatch):
    """Both found no lease; the rival's record lands while this driver waits to read its own
    back: this one refuses, naming the rival."""

    def a_rival_writes_meanwhile(seconds: float) -> None:
        rival = record(tmp_path) | {"host": "node-2", "pid": 4242, "token": "rival"}
        (tmp_path / LEASE_FILE).write_text(json.dumps(rival))

    monkeypatch.setattr(folder_module.time, "sleep", a_rival_writes_meanwhile)
    with pytest.raises(SweepRefused, match="node-2 pid 4242"):
        take(tmp_path, "s")
    assert record(tmp_path)["token"] == "rival"


def test_the_lease_works_on_s3(s3_server: S3Server) -> None:
    filesystem, root = open_filesystem(s3_server.uri("lease"))
    folder = SweepFolder(filesystem, f"{root}/sweep")
    held = folder.take_lease("sweep")
    with pytest.raises(SweepRefused, match=f"pid {os.getpid()},"):
        folder.take_lease("sweep")
    held.release()
    folder.write_json("linc_sweep.json", {"parent_run_id": "r"})
    assert folder.record() == {"parent_run_id": "r"}
    assert folder.read("absent.json") is None
    missing = filesystem.get_file_info(f"{root}/sweep/{LEASE_FILE}").type
    assert missing == pafs.FileType.NotFound


def test_one_policy_for_every_read_and_write(tmp_path: Path, monkeypatch) -> None:
    """Absent reads as None; JSON cut short or no mapping reads as None from read_json; a
    storage error is retried, then raises one StorageUnavailableError naming the file; a
    write is atomic and creates its folders."""
    monkeypatch.setattr(folder_module, "ATTEMPTS", 3)
    folder = SweepFolder(pafs.LocalFileSystem(), str(tmp_path / "sweep"))
    assert folder.read("linc_sweep.json") is None and folder.record() is None
    assert folder.listing() == []
    folder.write("trial_000/checkpoint_000001/latest.pt.json", b'{"global_step": 3}')
    child = folder.child("trial_000").child("checkpoint_000001")
    assert child.read_json("latest.pt.json") == {"global_step": 3}
    folder.write("cut.json", b'{"global_st')
    folder.write("list.json", b"[1, 2]")
    assert folder.read_json("cut.json") is None and folder.read_json("list.json") is None
    assert folder.read("cut.json") == b'{"global_st'
    folder.delete("trial_000")
    folder.delete("trial_000")  # gone already: nothing to do
    assert sorted(i.base_name for i in folder.listing()) == ["cut.json", "list.json"]
    assert folder.sibling("sweep-more1").path == str(tmp_path / "sweep-more1")
    # a storage that keeps failing (here: a folder where a file should be), each try counted
    folder.write("state.json/x", b"")
    tries = []
    monkeypatch.setattr("orchestration.data.storage.time.sleep", tries.append)
    with pytest.raises(StorageUnavailableError) as failed:
        folder.read("state.json")
    assert len(tries) == 2  # three tries, two waits between them
    told = str(failed.value)
    assert told.startswith(f"could not read {tmp_path / 'sweep' / 'state.json'} after 3 attempts")


def _read_all_and_write_all(folder: SweepFolder) -> None:
    """A folder's chosen files and its kept subfolder's, in one read; several files, in one
    write, their folders created."""
    assert folder.read_all(lambda name: True, also="kept") == {}  # not there: nothing
    folder.write_all({"kept/seal.json": b"{}", "a.json": b"1", "b.pkl": b"\x80", "c.txt": b""})
    folder.write_all({})  # nothing to write: nothing done
    folder.write("trial_000/result.json", b"{}")  # a folder's files are not the folder's
    chosen = folder.read_all(lambda name: name.endswith((".json", ".pkl")), also="kept")
    assert chosen == {"a.json": b"1", "b.pkl": b"\x80", "kept/seal.json": b"{}"}
    assert folder.read_all(lambda name: name == "c.txt") == {"c.txt": b""}
    folder.write_all({"a.json": b"2"})  # atomic, over the old
    assert folder.read("a.json") == b"2"


def test_read_all_and_write_all_locally_and_on_s3(
    tmp_path: Path, monkeypatch, s3_server: S3Server
) -> None:
    _read_all_and_write_all(SweepFolder(pafs.LocalFileSystem(), str(tmp_path / "sweep")))
    filesystem, root = open_filesystem(s3_server.uri("read-all"))
    _read_all_and_write_all(SweepFolder(filesystem, f"{root}/sweep"))
    # a storage that keeps failing: one error naming the folder, after the one policy's tries
    monkeypatch.setattr(folder_module, "ATTEMPTS", 2)
    monkeypatch.setattr("orchestration.data.storage.time.sleep", lambda s: None)
    blocked = SweepFolder(pafs.LocalFileSystem(), str(tmp_path / "file"))
    (tmp_path / "file").write_text("a file where the folder should be")
    with pytest.raises(StorageUnavailableError, match="could not write .*file after 2"):
        blocked.write_all({"a.json": b"1"})


@pytest.mark.parametrize("name", ["../escaped", "..", "a/../../b", "/etc", "", ".x", "a\\..\\b"])
def test_a_sweep_folder_never_lies_outside_its_storage(tmp_path: Path, name: str) -> None:
    """The config refuses such names; the join refuses them too, whoever calls it."""
    storage = tmp_path / "inner"
    with pytest.raises(SweepRefused, match="sweep name: expected a name of letters"):
        SweepFolder.on_storage(str(storage), name)
    assert list(tmp_path.iterdir()) == []
    folder = SweepFolder.on_storage(str(storage), "s")  # a search's later stages: beside it
    with pytest.raises(SweepRefused):
        folder.sibling(name)
    assert folder.sibling("s-more1").path == str(storage / "s-more1")


def test_a_linked_folder_inside_the_sweep_s_is_not_written_through(tmp_path: Path) -> None:
    # whoever writes the sweep's folder could link its .linc-intact to another sweep's: this
    # driver would overwrite that sweep's seal
    other = tmp_path / "other" / ".linc-intact"
    other.mkdir(parents=True)
    (other / "seal.json").write_text("the other sweep's seal")
    sweep = SweepFolder(pafs.LocalFileSystem(), str(tmp_path / "sweep"))
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / ".linc-intact").symlink_to(other)
    with pytest.raises(OSError, match="a link in the sweep's folder; not followed") as refused:
        sweep.child(".linc-intact").write("seal.json", b"mine", retry=False)
    assert refused.value.errno == errno.ELOOP
    began = time.monotonic()
    with pytest.raises(StorageUnavailableError, match="after 1 attempt: .*not followed"):
        sweep.write(".linc-intact/seal.json", b"mine")
    assert time.monotonic() - began < 1.0  # refused at once: no retry can change a link
    assert (other / "seal.json").read_text() == "the other sweep's seal"
    sweep.write("linc_sweep.json", b"{}")  # a plain file beside it is written as before
    assert (tmp_path / "sweep" / "linc_sweep.json").read_text() == "{}"
