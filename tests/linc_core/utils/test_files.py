"""The one open of a path someone else chose: regular files only, never blocking, never read
past a cap; and the plain-name rule for names that become a path component (real FIFOs,
devices, sockets, links and sparse files, no stand-ins)."""

from __future__ import annotations

import io
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from linc_core.utils.files import (
    FileRefusedError,
    copy_capped,
    is_plain_name,
    open_regular_file,
    open_url,
    read_regular_file,
    size_in_words,
)
from tests.conftest import fresh_python


@contextmanager
def writer_after(fifo: Path, seconds: float = 3.0) -> Iterator[None]:
    """After ``seconds``, open ``fifo`` for writing and close it again, so that a reader that
    blocked on it (the defect) gets an empty file and the test fails instead of hanging."""
    stop = threading.Event()

    def unblock() -> None:
        if stop.wait(seconds):
            return
        while not stop.is_set():
            try:  # non-blocking: succeeds only while a reader has the FIFO open
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                time.sleep(0.05)

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def refused(read, path: Path, **options) -> tuple[FileRefusedError, float]:
    start = time.monotonic()
    with pytest.raises(FileRefusedError) as err:
        read(path, **options)
    return err.value, time.monotonic() - start


def test_a_named_pipe_is_refused_at_once_by_both_reads(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    for read in (open_regular_file, lambda p: read_regular_file(p, 1024)):
        with writer_after(fifo):
            err, seconds = refused(read, fifo)
        assert seconds < 1.0
        assert str(err) == f"{fifo}: a named pipe (FIFO): expected a regular file"
        assert (err.path, err.value) == (str(fifo), "a named pipe (FIFO)")


def test_a_link_to_a_device_a_folder_or_a_socket_is_refused_for_what_it_is(
    tmp_path: Path,
) -> None:
    zero = tmp_path / "zero.txt"
    zero.symlink_to("/dev/zero")  # read whole, it fills memory until a MemoryError
    (tmp_path / "folder").mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "socket"))
    try:
        for name, kind in [
            ("zero.txt", "a device"),
            ("folder", "a folder"),
            ("socket", "a socket"),
        ]:
            err, _ = refused(read_regular_file, tmp_path / name, max_bytes=10)
            assert err.value == kind and "\n" not in str(err)
    finally:
        server.close()


def test_a_file_over_the_cap_is_refused_by_its_size_before_it_is_read(tmp_path: Path) -> None:
    sparse = tmp_path / "big.txt"
    with open(sparse, "wb") as out:
        out.truncate(3 * 1024**3)  # 3 GiB on paper, nothing on disk
    err, seconds = refused(read_regular_file, sparse, max_bytes=64 * 1024**2, source="big")
    assert seconds < 1.0
    assert str(err) == "big: 3 GiB: larger than the 64 MiB this reader accepts"
    err, _ = refused(open_regular_file, sparse, max_bytes=2 * 1024**3)
    assert err.value == "3 GiB"
    with open_regular_file(sparse) as handle:  # no cap: a reader that streams
        assert handle.read(4) == b"\0" * 4
    exact = tmp_path / "exact.txt"
    exact.write_bytes(b"x" * 100)
    assert read_regular_file(exact, 100) == b"x" * 100  # the cap itself is accepted


def test_a_link_at_the_path_is_refused_only_when_links_are_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    link = tmp_path / "link.txt"
    link.symlink_to(secret)
    err, _ = refused(read_regular_file, link, max_bytes=100, follow_links=False)
    assert err.value == "a link" and "swapped in" in err.problem and "hunter2" not in str(err)
    assert read_regular_file(link, 100) == b"hunter2"


def test_a_missing_file_stays_a_file_not_found_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "missing.txt", 100)


def test_copy_capped_stops_an_endless_stream_at_the_byte_cap() -> None:
    class Endless(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            buffer[:] = b"x" * len(buffer)
            return len(buffer)

    out = io.BytesIO()
    with pytest.raises(FileRefusedError) as err:
        copy_capped(Endless(), out, "http://x/y", max_bytes=1_000_000, max_seconds=60)
    assert (
        str(err.value)
        == "http://x/y: over 976.6 KiB: larger than the 976.6 KiB this reader accepts"
    )
    assert out.tell() <= 1_000_000
    small = io.BytesIO(b"abc")
    assert copy_capped(small, out := io.BytesIO(), "s", max_bytes=3, max_seconds=1) == 3
    assert out.getvalue() == b"abc"


@pytest.mark.parametrize(
    "name",
    ["C101", "X-n101-k25", "C1_2_1", "_x", "a.b", "9" * 128],
)
def test_plain_names_pass(name: str) -> None:
    assert is_plain_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        "../escaped",
        "../../pwn",
        "a/b",
        "/etc/passwd",
        "..\\x",
        "%2e%2e",
        "%2e%2e%2fx",
        ".hidden",
        "-rf",
        "a b",
        "a\0b",
        "C101\n",
        "\u2025",  # a one-character "two dots"
        "x" * 129,
        None,
        7,
    ],
)
def test_anything_that_could_leave_the_folder_is_no_plain_name(name: object) -> None:
    assert not is_plain_name(name)


def test_sizes_read_as_words() -> None:
    assert [size_in_words(n) for n in (0, 1023, 1024, 64 * 1024**2, int(2.3 * 1024**3))] == [
        "0 bytes",
        "1023 bytes",
        "1 KiB",
        "64 MiB",
        "2.3 GiB",
    ]


def test_open_url_reads_a_local_file_and_refuses_a_fifo_another_host_or_scheme(
    tmp_path: Path,
) -> None:
    good = tmp_path / "C101.txt"
    good.write_bytes(b"C101\n")
    with open_url(good.as_uri(), timeout=5) as stream:
        assert stream.read() == b"C101\n"
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    with writer_after(fifo):
        err, seconds = refused(open_url, fifo.as_uri(), timeout=5)
    assert seconds < 1.0
    assert (err.path, err.value) == (fifo.as_uri(), "a named pipe (FIFO)")
    for url, value in [
        ("file://mirror.example/x/C101.txt", "host 'mirror.example'"),
        ("ftp://mirror.example/C101.txt", "scheme 'ftp'"),
        ("data:text/plain,C101", "scheme 'data'"),
        ("/tmp/C101.txt", "scheme ''"),
    ]:
        err, _ = refused(open_url, url, timeout=5)
        assert (err.path, err.value) == (url, value)


def test_a_small_file_under_a_large_cap_is_read_without_reserving_the_cap(
    tmp_path: Path,
) -> None:
    """Before: ``read(max_bytes + 1)`` reserved the whole cap, so a 2 GiB cap (a checkpoint's,
    a shard's) failed a 12-byte file under a 1 GiB address-space limit."""
    small = tmp_path / "small.bin"
    small.write_bytes(b"twelve bytes")
    out = fresh_python(
        "import resource\n"
        "from linc_core.utils.files import read_regular_file\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1024**3, 1024**3))\n"
        f"print(read_regular_file({str(small)!r}, 2 * 1024**3))\n",
        timeout=60,
    )
    assert out == "b'twelve bytes'\n"
