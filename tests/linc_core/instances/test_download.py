"""``linc-data download``: URLs and names, the atomic checked fetch, the caps, and the record
of the sets' content (exercised offline: ``file://`` mirrors, a stand-in opener, a real HTTP
server on 127.0.0.1)."""

from __future__ import annotations

import http.server
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

import pytest

from linc_core.commands.data import main
from linc_core.instances import download, read_cvrplib, read_solomon
from linc_core.instances.benchmarks import DATA_DIR_ENV, load_bks
from linc_core.instances.download import (
    CVRPLIB_URL,
    RECORDED_SETS,
    DownloadError,
    content_of,
    download_file,
    download_set,
    instance_url,
    known_content,
    remote_names,
)
from linc_core.utils.files import PLAIN_NAME_RULE
from tests.conftest import fresh_python


def test_instance_url_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(download.CVRPLIB_URL_ENV, raising=False)
    assert instance_url("cvrplib_x", "X-n101-k25") == f"{CVRPLIB_URL}X/X-n101-k25.vrp"
    assert (
        instance_url("cvrplib_x", "X-n101-k25", solution=True) == f"{CVRPLIB_URL}X/X-n101-k25.sol"
    )
    assert instance_url("solomon100", "C101") == f"{CVRPLIB_URL}Solomon/C101.txt"
    assert instance_url("homberger200", "C1_2_1") == f"{CVRPLIB_URL}HG/C1_2_1.txt"
    assert instance_url("solomon100", "R101", base_url="https://m.example/i/") == (
        "https://m.example/i/Solomon/R101.txt"
    )
    monkeypatch.setenv(download.CVRPLIB_URL_ENV, "https://mirror.example")
    assert instance_url("solomon100", "R101") == "https://mirror.example/Solomon/R101.txt"


def test_remote_names(data_dir: Path) -> None:
    solomon = remote_names("solomon100")
    assert len(solomon) == 56 and set(solomon) == set(load_bks("solomon100"))
    homberger = remote_names("homberger200")
    assert len(homberger) == 60 and homberger[0] == "C1_2_1" and homberger[-1] == "RC2_2_10"
    assert remote_names("cvrplib_x") == sorted(load_bks("cvrplib_x"))


def test_download_file_from_file_url(data_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "mirror" / "X-n101-k25.vrp"
    source.parent.mkdir()
    shutil.copy(data_dir / "cvrplib_x" / "X-n101-k25.vrp", source)
    target = tmp_path / "dest" / "X-n101-k25.vrp"
    written = download_file(source.as_uri(), target, read_cvrplib)
    assert written == target
    assert target.read_bytes() == source.read_bytes()
    assert sorted(p.name for p in target.parent.iterdir()) == ["X-n101-k25.vrp"]  # no temp left
    assert read_cvrplib(target).names == ("X-n101-k25",)


def test_download_rejects_a_corrupt_file_and_keeps_the_old_one(
    data_dir: Path, tmp_path: Path
) -> None:
    good = (data_dir / "cvrplib_x" / "X-n101-k25.vrp").read_text()
    corrupt = tmp_path / "mirror.vrp"
    corrupt.write_text(good[: len(good) // 2])  # cut mid-section
    dest = tmp_path / "dest"
    with pytest.raises(DownloadError, match="mirror.vrp"):
        download_file(corrupt.as_uri(), dest / "X-n101-k25.vrp", read_cvrplib)
    assert list(dest.iterdir()) == []  # neither the file nor a temporary is left behind
    previous = dest / "X-n101-k25.vrp"
    previous.write_text("earlier copy")
    with pytest.raises(DownloadError):
        download_file(corrupt.as_uri(), previous, read_cvrplib)
    assert previous.read_text() == "earlier copy"
    assert [p.name for p in dest.iterdir()] == ["X-n101-k25.vrp"]


def test_download_unreachable_url(tmp_path: Path) -> None:
    missing = (tmp_path / "nowhere.vrp").as_uri()
    with pytest.raises(DownloadError, match="nowhere.vrp"):
        download_file(missing, tmp_path / "dest" / "x.vrp", read_cvrplib)
    assert list((tmp_path / "dest").iterdir()) == []


def test_download_set_with_stand_in_opener(data_dir: Path, tmp_path: Path) -> None:
    requested: list[str] = []

    def opener(url: str, timeout: float):
        requested.append(url)
        name = url.rsplit("/", 1)[1]  # e.g. C101.txt or C101.sol
        return (data_dir / "solomon100" / name).open("rb")

    dest = tmp_path / "solomon"
    done = download_set(
        "solomon100",
        dest,
        ["C101", "R101"],
        solutions=True,
        base_url="https://x.example/",
        opener=opener,
    )
    assert [p.name for p in done.matched] == ["C101.txt", "R101.txt"]
    assert [p.name for p in done.unrecorded] == ["C101.sol", "R101.sol"] and done.files == 4
    assert requested == [
        "https://x.example/Solomon/C101.txt",
        "https://x.example/Solomon/C101.sol",
        "https://x.example/Solomon/R101.txt",
        "https://x.example/Solomon/R101.sol",
    ]
    assert read_solomon(dest / "R101.txt").names == ("R101",)
    # A second run finds the files in place and fetches nothing.
    requested.clear()
    again = download_set("solomon100", dest, ["C101"], opener=opener)
    assert requested == [] and again.matched == [dest / "C101.txt"] and again.files == 1


def c101_mirror(data_dir: Path, tmp_path: Path) -> Path:
    """A ``file://`` mirror in CVRPLIB's layout holding the standard C101 alone."""
    mirror = tmp_path / "mirror"
    (mirror / "Solomon").mkdir(parents=True)
    shutil.copy(data_dir / "solomon100" / "C101.txt", mirror / "Solomon" / "C101.txt")
    return mirror


def test_main_download_from_file_mirror(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mirror = c101_mirror(data_dir, tmp_path)
    dest = tmp_path / "dest"
    flags = ["--dest", str(dest), "--base-url", mirror.as_uri(), "--names"]
    code = main(["download", "solomon100", *flags, "C101"])
    assert code == 0
    assert (dest / "C101.txt").read_bytes() == (mirror / "Solomon" / "C101.txt").read_bytes()
    assert capsys.readouterr().out == (
        f"1 file in {dest}: 1 matching linc's record of their content\n"
    )
    # C102 is not on the mirror: the error, then what the files before it came to
    code = main(["download", "solomon100", *flags, "C101", "C102", "--solutions"])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith(f"linc-data: {mirror.as_uri()}/Solomon/C101.sol: download failed: ")
    assert err.endswith(
        f"\nbefore it: 1 file in {dest}: 1 matching linc's record of their content\n"
    )
    assert sorted(p.name for p in dest.iterdir()) == ["C101.txt"]


@contextmanager
def local_server(body: Callable[[BinaryIO], None]) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 answering every GET with ``body(wfile)``; its base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.end_headers()
            with suppress(OSError):  # the client hung up: what the caps are for
                body(self.wfile)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def endless(out: BinaryIO) -> None:
    """Endless as far as a 16 MiB cap can tell: 64 MiB, so that a regression ends too."""
    for _ in range(1024):
        out.write(b"x" * 65536)


def test_an_endless_download_stops_at_the_byte_cap_and_leaves_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with local_server(endless) as base:
        start = time.monotonic()
        with pytest.raises(DownloadError) as err:
            download_file(f"{base}/X/x.vrp", dest / "x.vrp", read_cvrplib)
    assert time.monotonic() - start < 30
    assert str(err.value) == (
        f"{base}/X/x.vrp: download stopped: over 16 MiB: larger than the 16 MiB this reader accepts"
    )
    assert list(dest.iterdir()) == []  # the partial temporary is removed


def test_a_slow_drip_download_stops_at_the_time_cap(tmp_path: Path) -> None:
    def drip(out: BinaryIO) -> None:
        for _ in range(100):  # a byte at a time, each well inside the per-read timeout: 10 s
            out.write(b"x")
            out.flush()
            time.sleep(0.1)

    dest = tmp_path / "dest"
    with local_server(drip) as base:
        start = time.monotonic()
        with pytest.raises(DownloadError) as err:
            download_file(f"{base}/x.vrp", dest / "x.vrp", read_cvrplib, max_seconds=1.0)
        seconds = time.monotonic() - start
    assert seconds < 5, seconds  # not the 60 s per read, nor forever
    assert "download stopped:" in str(err.value) and "not done after 1 s" in str(err.value)
    assert list(dest.iterdir()) == []


@pytest.mark.parametrize(
    "name", ["../escaped", "..", ".", "/tmp/abs", "a/../../b", "..\\x", "%2e%2e%2fx", "C101/"]
)
def test_a_name_that_is_no_plain_file_name_fetches_and_writes_nothing(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    served = (data_dir / "solomon100" / "C101.txt").read_bytes()  # a valid file: it would pass
    requests: list[int] = []

    def file(out: BinaryIO) -> None:
        requests.append(1)
        out.write(served)

    dest = tmp_path / "out" / "dest"
    with local_server(file) as base:
        code = main(
            ["download", "solomon100", "--dest", str(dest), "--names", "C101", name]
            + ["--base-url", base]
        )
    assert code == 1 and requests == []  # refused before the first fetch
    err = capsys.readouterr().err
    assert err == f"linc-data: download solomon100: instance name {name!r}: {PLAIN_NAME_RULE}\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == []  # not even dest was made


def test_a_bks_csv_row_that_is_no_plain_name_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    (data / "cvrplib_x").mkdir(parents=True)
    table = data / "cvrplib_x" / "bks.csv"
    table.write_text("instance,bks\nX-n101-k25,27591\n../pwn,1\n")
    monkeypatch.setenv(DATA_DIR_ENV, str(data))
    dest = tmp_path / "dest"
    with local_server(endless) as base:  # never reached
        code = main(["download", "cvrplib_x", "--dest", str(dest), "--base-url", base])
    assert code == 1
    assert capsys.readouterr().err == (
        f"linc-data: {table}: field 'instance' = '../pwn': {PLAIN_NAME_RULE}\n"
    )
    assert not dest.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_the_default_cvrplib_url_is_plain_http() -> None:
    # CVRPLIB's host served plain http when this was written: files are checked by the readers
    # after download, and an instance of a recorded set against linc's record of its content,
    # so a tampered one fails a check (or, outside the record, is wrong data), never runs code.
    assert CVRPLIB_URL.startswith("http://vrp.atd-lab.inf.puc-rio.br/")


def test_a_mirror_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "Solomon").mkdir(parents=True)
    os.mkfifo(mirror / "Solomon" / "C101.txt")
    dest = tmp_path / "dest"
    out = fresh_python(
        "import sys\n"
        "from linc_core.commands.data import main\n"
        "sys.stderr = sys.stdout\n"
        f"print(main(['download', 'solomon100', '--dest', {str(dest)!r}, '--names', 'C101',"
        f" '--base-url', {mirror.as_uri()!r}]))\n",
        timeout=30,
    )
    url = f"{mirror.as_uri()}/Solomon/C101.txt"
    assert f"{url}: download stopped: a named pipe (FIFO): expected a regular file" in out
    assert out.endswith("\n1\n")  # the command's exit status
    assert not (dest / "C101.txt").exists()


# ---------------------------------------------------------------------- the record of content
def test_the_record_is_what_the_standard_files_give(data_dir: Path) -> None:
    # The shipped record, made by write_known_content, equals the fingerprints of the files as
    # they are read now: a reader that changed what it makes of a file would fail here first.
    assert RECORDED_SETS == ("cvrplib_x", "solomon100")
    for name in RECORDED_SETS:
        assert known_content()[name] == content_of(name, data_dir)
    assert len(known_content()["solomon100"]) == 56 and len(known_content()["cvrplib_x"]) == 100
    assert sorted(known_content()["cvrplib_x"]) == sorted(load_bks("cvrplib_x", data_dir))
    assert sorted(known_content()["solomon100"]) == remote_names("solomon100")
    assert len(set(known_content()["solomon100"].values())) == 56  # no two files alike


def _changed_c101(data_dir: Path) -> bytes:
    """C101 with customer 1 moved from (45, 68) to (45, 69): a valid file, another instance."""
    text = (data_dir / "solomon100" / "C101.txt").read_text()
    line = "    1      45         68         10        912        967         90   "
    assert line in text
    return text.replace(line, line.replace("68", "69", 1)).encode()


def c101_mismatch(path: Path, outcome: str) -> str:
    """The refusal of the C101 file at ``path`` by linc's record, ending with ``outcome``."""
    found, expected = read_solomon(path).fingerprint(), known_content()["solomon100"]["C101"]
    return (
        f"its content (fingerprint {found}) differs from linc's record of solomon100 C101 "
        f"({expected}): changed on the way or at the source; {outcome}"
    )


def test_an_instance_changed_on_the_way_is_refused_and_nothing_is_kept(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An intruder on CVRPLIB's plain-http path serves a valid C101 with one customer moved: the
    # reader accepts it, the record does not, and neither it nor a temporary lands in --dest.
    changed = _changed_c101(data_dir)
    (tmp_path / "C101.txt").write_bytes(changed)
    assert read_solomon(tmp_path / "C101.txt").locs[0, 1].tolist() == [45.0, 69.0]
    dest = tmp_path / "dest"
    with local_server(lambda out: out.write(changed)) as base:
        flags = ["--dest", str(dest), "--names", "C101", "--base-url", base]
        assert main(["download", "solomon100", *flags]) == 1
        url = f"{base}/Solomon/C101.txt"
        mismatch = c101_mismatch(tmp_path / "C101.txt", "it was not kept")
        assert capsys.readouterr().err == (
            f"linc-data: {url}: downloaded file failed the check: {mismatch}\n"
        )
        assert list(dest.iterdir()) == []
        # Over an earlier good copy, with --overwrite: the good copy stays as it was.
        good = (data_dir / "solomon100" / "C101.txt").read_bytes()
        (dest / "C101.txt").write_bytes(good)
        assert main(["download", "solomon100", *flags, "--overwrite"]) == 1
    assert (dest / "C101.txt").read_bytes() == good
    assert [p.name for p in dest.iterdir()] == ["C101.txt"]


def test_a_set_without_a_record_is_read_checked_and_said_so(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Gehring-Homberger's files are not in the data folder, so linc has no record of them: a
    # file the reader accepts is kept, and the summary counts it apart. A Solomon-format file
    # stands in for C1_2_1 (its content is what a mirror serves).
    mirror = tmp_path / "mirror"
    (mirror / "HG").mkdir(parents=True)
    (mirror / "HG" / "C1_2_1.txt").write_bytes(_changed_c101(data_dir))
    dest = tmp_path / "dest"
    flags = ["--dest", str(dest), "--names", "C1_2_1", "--base-url", mirror.as_uri()]
    assert main(["download", "homberger200", *flags]) == 0
    assert capsys.readouterr().out == (
        f"1 file in {dest}: 1 fetched with no record, checked by their reader only\n"
    )
    assert main(["download", "homberger200", *flags]) == 0
    assert capsys.readouterr().out == (
        f"1 file in {dest}: 1 already there with no record (--overwrite fetches them again)\n"
    )


def test_a_name_the_record_lacks_is_refused_before_any_fetch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # ``c101`` (the best-known values match names ignoring case) would otherwise be a file of no
    # record, kept unchecked whatever it holds.
    requests: list[int] = []
    with local_server(lambda out: requests.append(1)) as base:
        flags = ["--dest", str(tmp_path / "dest"), "--base-url", base, "--names"]
        assert main(["download", "solomon100", *flags, "C101", "c101"]) == 1
        assert capsys.readouterr().err == (
            "linc-data: download solomon100: instance name 'c101': not one of the set's 56 "
            "instances (did you mean 'C101'?)\n"
        )
        assert main(["download", "solomon100", *flags, "R999"]) == 1
        assert capsys.readouterr().err == (
            "linc-data: download solomon100: instance name 'R999': not one of the set's 56 "
            "instances\n"
        )
    assert requests == [] and not (tmp_path / "dest").exists()


def test_an_instance_already_there_is_checked_against_the_record_too(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A copy fetched before the record existed, or changed since, is named, not counted as the
    # set's; --overwrite fetches the standard file over it.
    mirror = c101_mirror(data_dir, tmp_path)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "C101.txt").write_bytes(_changed_c101(data_dir))
    flags = ["--dest", str(dest), "--base-url", mirror.as_uri(), "--names", "C101"]
    assert main(["download", "solomon100", *flags]) == 1
    mismatch = c101_mismatch(dest / "C101.txt", "--overwrite fetches it again")
    assert capsys.readouterr().err == (
        f"linc-data: {dest / 'C101.txt'}: already there, and {mismatch}\n"
    )
    assert main(["download", "solomon100", *flags, "--overwrite"]) == 0
    assert read_solomon(dest / "C101.txt").fingerprint() == known_content()["solomon100"]["C101"]
    assert capsys.readouterr().out == (
        f"1 file in {dest}: 1 matching linc's record of their content\n"
    )
