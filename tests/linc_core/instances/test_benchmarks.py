"""Data-folder resolution, best-known tables, instance listings and the download command
(exercised offline through ``file://`` URLs and a stand-in opener)."""

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
from linc_core.instances import InstanceError, benchmarks, read_cvrplib, read_solomon
from linc_core.instances.benchmarks import (
    BENCHMARKS,
    CVRPLIB_URL,
    DATA_DIR_ENV,
    DownloadError,
    data_dir,
    download_file,
    download_set,
    instance_family,
    instance_url,
    list_instances,
    load_bks,
    remote_names,
)
from linc_core.utils.files import PLAIN_NAME_RULE
from tests.conftest import fresh_python, refusals_in_fresh_process


# ---------------------------------------------------------------------- data folder
def test_data_dir_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert data_dir() == tmp_path.resolve()


def test_data_dir_env_pointing_nowhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match=DATA_DIR_ENV):
        data_dir()


@pytest.mark.parametrize(
    ("checkout", "cwd"),
    [
        ("checkout", "elsewhere/work"),  # beside the checkout, whatever the current folder
        ("elsewhere/checkout", "work"),  # else beside the current folder
    ],
)
def test_data_dir_default_is_shared_data_beside_the_checkout_or_the_current_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, checkout: str, cwd: str
) -> None:
    """Without ``LINC_DATA_DIR``: ``<checkout>/../shared/data``, else ``<cwd>/../shared/data``;
    tmp/shared/data is reached from one of the two only."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    for folder in (checkout, cwd, "shared/data"):
        (tmp_path / folder).mkdir(parents=True)
    monkeypatch.setattr(benchmarks, "_REPO_ROOT", tmp_path / checkout)
    monkeypatch.chdir(tmp_path / cwd)
    assert data_dir() == (tmp_path / "shared" / "data").resolve()


def test_data_dir_absent_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setattr(benchmarks, "_REPO_ROOT", tmp_path / "a" / "repo")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=DATA_DIR_ENV):
        data_dir()


# ---------------------------------------------------------------------- BKS and listings
def test_load_bks_values(data_dir: Path) -> None:
    solomon = load_bks("solomon100")
    assert len(solomon) == 56
    assert solomon["R101"] == 1637.7  # distance-only DIMACS, not the hierarchical 1650.80
    assert solomon["C101"] == 827.3
    tsplib = load_bks("tsplib")
    assert len(tsplib) == 29
    assert tsplib["berlin52"] == 7542 and tsplib["kroA100"] == 21282
    x = load_bks("cvrplib_x")
    assert len(x) == 100 and x["X-n101-k25"] == 27591
    xml = load_bks("xml100")
    assert len(xml) == 10_000 and xml["XML100_1111_01"] == 29888
    assert sum(xml.values()) / len(xml) == pytest.approx(16975.92, abs=0.005)


def test_list_instances_matches_bks(data_dir: Path) -> None:
    for name, count in (("solomon100", 56), ("tsplib", 29), ("cvrplib_x", 100)):
        paths = list_instances(name)
        assert len(paths) == count
        assert {p.stem for p in paths} == set(load_bks(name))
    xml = list_instances("xml100")
    assert len(xml) == 10_000 and xml[0].name == "XML100_1111_01.vrp"


def test_benchmark_read_dispatches_to_the_right_reader(data_dir: Path) -> None:
    for name, benchmark in BENCHMARKS.items():
        instance = benchmark.read(list_instances(name)[0])
        assert instance.problem == benchmark.problem


def test_load_bks_reports_missing_column(tmp_path: Path) -> None:
    (tmp_path / "solomon100").mkdir()
    (tmp_path / "solomon100" / "bks.csv").write_text("instance,bks\nC101,827.3\n")
    with pytest.raises(InstanceError) as err:
        load_bks("solomon100", root=tmp_path)
    assert "bks.csv" in str(err.value) and err.value.field == "bks_distance_only_dimacs"


def test_unknown_benchmark() -> None:
    with pytest.raises(KeyError, match="solomon100"):
        load_bks("golden")


# ---------------------------------------------------------------------- download
def test_instance_url_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(benchmarks.CVRPLIB_URL_ENV, raising=False)
    assert instance_url("cvrplib_x", "X-n101-k25") == f"{CVRPLIB_URL}X/X-n101-k25.vrp"
    assert (
        instance_url("cvrplib_x", "X-n101-k25", solution=True) == f"{CVRPLIB_URL}X/X-n101-k25.sol"
    )
    assert instance_url("solomon100", "C101") == f"{CVRPLIB_URL}Solomon/C101.txt"
    assert instance_url("homberger200", "C1_2_1") == f"{CVRPLIB_URL}HG/C1_2_1.txt"
    assert instance_url("solomon100", "R101", base_url="https://m.example/i/") == (
        "https://m.example/i/Solomon/R101.txt"
    )
    monkeypatch.setenv(benchmarks.CVRPLIB_URL_ENV, "https://mirror.example")
    assert instance_url("solomon100", "R101") == "https://mirror.example/Solomon/R101.txt"


def test_remote_names(data_dir: Path) -> None:
    solomon = remote_names("solomon100")
    assert len(solomon) == 56 and set(solomon) == set(load_bks("solomon100"))
    homberger = remote_names("homberger200")
    assert len(homberger) == 60 and homberger[0] == "C1_2_1" and homberger[-1] == "RC2_2_10"
    assert remote_names("cvrplib_x") == sorted(load_bks("cvrplib_x"))


def test_every_solomon_and_homberger_name_reads_back_its_family() -> None:
    solomon = [instance_family(n) for n in remote_names("solomon100")]
    assert [solomon.count(f) for f in ("C1", "C2", "R1", "R2", "RC1", "RC2")] == [
        9,
        8,
        12,
        11,
        8,
        8,
    ]
    homberger = [instance_family(n) for n in remote_names("homberger200")]
    assert homberger == [f for f in ("C1", "C2", "R1", "R2", "RC1", "RC2") for _ in range(10)]
    assert [instance_family(n) for n in ("c208", "rc2_10_5")] == ["C2", "RC2"]
    assert [instance_family(n) for n in ("X-n101-k25", "berlin52", "R3", "CX101", "R1")] == [
        None
    ] * 5


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
    paths = download_set(
        "solomon100",
        dest,
        ["C101", "R101"],
        solutions=True,
        base_url="https://x.example/",
        opener=opener,
    )
    assert [p.name for p in paths] == ["C101.txt", "C101.sol", "R101.txt", "R101.sol"]
    assert requested == [
        "https://x.example/Solomon/C101.txt",
        "https://x.example/Solomon/C101.sol",
        "https://x.example/Solomon/R101.txt",
        "https://x.example/Solomon/R101.sol",
    ]
    assert read_solomon(dest / "R101.txt").names == ("R101",)
    # A second run finds the files in place and fetches nothing.
    requested.clear()
    download_set("solomon100", dest, ["C101"], opener=opener)
    assert requested == []


def test_main_where(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    assert main(["where"]) == 0
    assert Path(capsys.readouterr().out.strip()) == data_dir


def test_main_where_without_data(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "missing"))
    assert main(["where"]) == 1
    assert DATA_DIR_ENV in capsys.readouterr().err


def test_main_download_from_file_mirror(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "Solomon").mkdir(parents=True)
    shutil.copy(data_dir / "solomon100" / "C101.txt", mirror / "Solomon" / "C101.txt")
    dest = tmp_path / "dest"
    code = main(
        [
            "download",
            "solomon100",
            "--dest",
            str(dest),
            "--names",
            "C101",
            "--base-url",
            mirror.as_uri(),
        ]
    )
    assert code == 0
    assert (dest / "C101.txt").read_bytes() == (mirror / "Solomon" / "C101.txt").read_bytes()
    assert "1 files" in capsys.readouterr().out
    code = main(
        [
            "download",
            "solomon100",
            "--dest",
            str(dest),
            "--names",
            "R999",
            "--base-url",
            mirror.as_uri(),
        ]
    )
    assert code == 1
    assert "R999.txt" in capsys.readouterr().err


# ---------------------------------------------------------------------- download caps, names
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


def test_a_bks_csv_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "cvrplib_x").mkdir(parents=True)
    os.mkfifo(data / "cvrplib_x" / "bks.csv")
    [(seconds, message)] = refusals_in_fresh_process(
        "from linc_core.instances import InstanceError\n"
        "from linc_core.instances.benchmarks import load_bks",
        [f"load_bks('cvrplib_x', {str(data)!r})"],
        "InstanceError",
    )
    path = data / "cvrplib_x" / "bks.csv"
    assert message == f"{path}: field 'file' = 'a named pipe (FIFO)': expected a regular file"
    assert seconds < 1.0


def test_the_default_cvrplib_url_is_plain_http() -> None:
    # CVRPLIB's host served plain http when this was written: files are checked by the readers
    # after download, so a tampered one can only fail the checks or be wrong data, never code.
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
