"""The one atomic write: content, writer callbacks, checks, file modes and failure clean-up,
on local paths and on a pyarrow file system that is not local (pyarrow's in-memory mock)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from linc_core.utils.atomic import TEMP_MARKER, is_temporary, write_atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_bytes_land_whole_with_mode_0644_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "out.bin"
    old_umask = os.umask(0o077)  # a strict umask must not leave a private file
    try:
        written = write_atomic(target, b"\x00\x01payload")
    finally:
        os.umask(old_umask)
    assert written == target
    assert target.read_bytes() == b"\x00\x01payload"
    assert _mode(target) == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["out.bin"]


def test_writer_callback_and_fsync_replace_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "ckpt.pt"
    target.write_bytes(b"old")
    write_atomic(target, writer=lambda out: out.write(b"new" * 1000), fsync=True)
    assert target.read_bytes() == b"new" * 1000
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_a_failing_writer_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "rows.csv"
    target.write_bytes(b"old rows")

    def broken(out) -> None:
        out.write(b"half a fi")
        raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError, match="disk gone"):
        write_atomic(target, writer=broken)
    assert target.read_bytes() == b"old rows"
    assert [p.name for p in tmp_path.iterdir()] == ["rows.csv"]


def test_a_failing_check_keeps_the_old_file_and_sees_the_whole_temporary(
    tmp_path: Path,
) -> None:
    target = tmp_path / "X-n101-k25.vrp"
    target.write_bytes(b"earlier copy")
    seen: list[tuple[str, bytes]] = []

    def reject(path: Path) -> None:
        seen.append((path.name, path.read_bytes()))
        raise ValueError("truncated section")

    with pytest.raises(ValueError, match="truncated section"):
        write_atomic(target, b"downloaded", check=reject)
    assert target.read_bytes() == b"earlier copy"
    assert [p.name for p in tmp_path.iterdir()] == ["X-n101-k25.vrp"]
    ((name, content),) = seen
    assert content == b"downloaded" and is_temporary(name) and name.startswith(".X-n101")


def test_a_passing_check_lets_the_file_in(tmp_path: Path) -> None:
    target = tmp_path / "ok.txt"
    write_atomic(target, b"fine", check=lambda path: path.read_bytes() == b"fine" or 1 / 0)
    assert target.read_bytes() == b"fine"


def test_exactly_one_of_data_and_writer(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        write_atomic(tmp_path / "x", b"a", writer=lambda out: out.write(b"b"))
    with pytest.raises(ValueError, match="exactly one"):
        write_atomic(tmp_path / "x")
    assert list(tmp_path.iterdir()) == []


def test_a_local_pyarrow_file_system_takes_the_local_path(tmp_path: Path) -> None:
    target = tmp_path / "shard-00000.parquet"
    write_atomic(str(target), memoryview(b"shard"), filesystem=pafs.LocalFileSystem())
    assert target.read_bytes() == b"shard" and _mode(target) == 0o644


def _listing(filesystem: pafs.FileSystem, folder: str) -> list[str]:
    infos = filesystem.get_file_info(pafs.FileSelector(folder))
    return sorted(info.base_name for info in infos)


def test_object_store_writes_the_key_directly_or_after_the_check() -> None:
    store = pafs._MockFileSystem()
    store.create_dir("bucket/set")
    write_atomic("bucket/set/manifest.json", b"{}", filesystem=store)
    write_atomic(
        "bucket/set/shard-00000.parquet",
        writer=lambda out: out.write(b"rows"),
        filesystem=store,
        check=lambda path: is_temporary(path) or 1 / 0,
    )
    assert _listing(store, "bucket/set") == ["manifest.json", "shard-00000.parquet"]
    with store.open_input_stream("bucket/set/shard-00000.parquet") as stream:
        assert stream.read() == b"rows"


def test_object_store_failures_upload_nothing_and_leave_no_temporary() -> None:
    store = pafs._MockFileSystem()
    store.create_dir("bucket")
    write_atomic("bucket/x.bin", b"old", filesystem=store)

    def broken(out) -> None:
        out.write(b"part")
        raise OSError("connection reset")

    with pytest.raises(OSError, match="connection reset"):
        write_atomic("bucket/x.bin", writer=broken, filesystem=store)

    def reject(path: str) -> None:
        raise ValueError(f"{path}: bad")

    with pytest.raises(ValueError, match=TEMP_MARKER):
        write_atomic("bucket/x.bin", b"new", filesystem=store, check=reject)
    assert _listing(store, "bucket") == ["x.bin"]
    with store.open_input_stream("bucket/x.bin") as stream:
        assert stream.read() == b"old"
