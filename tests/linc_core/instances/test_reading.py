"""What every benchmark reader shares: the text read from a regular file of at most 64 MiB,
and vrplib handed that text, never the path (real FIFOs, /dev/zero, sparse files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from linc_core.instances import InstanceError, read_cvrplib, read_solomon
from linc_core.instances.any_file import read_instance
from linc_core.instances.reading import MAX_BENCHMARK_FILE_BYTES, parse_with_vrplib, read_text
from tests.conftest import refusals_in_fresh_process

# Each reader, the suffix of the file it is handed. A FIFO blocks whoever opens it until a
# writer comes, /dev/zero grows a whole-file read until a MemoryError: each read runs in a
# process of its own, with a deadline and an address-space limit, so a regression fails here
# instead of hanging the suite or eating the machine's memory.
READERS = [
    ("linc_core.instances", "read_solomon", ".txt"),
    ("linc_core.instances", "read_cvrplib", ".vrp"),
    ("linc_core.instances", "read_tsplib", ".tsp"),
    ("linc_core.instances", "read_solution", ".sol"),
    ("linc_core.instances", "read_tsp_tour", ".tour"),
    ("linc_core.instances.any_file", "read_instance", ".vrp"),
    ("linc_core.instances.reading", "parse_with_vrplib", ".txt"),
]


def test_no_reader_waits_on_a_fifo_or_reads_a_device_whole(tmp_path: Path) -> None:
    cases = []
    for module, reader, suffix in READERS:
        fifo = tmp_path / f"fifo-{reader}{suffix}"
        os.mkfifo(fifo)
        zero = tmp_path / f"zero-{reader}{suffix}"
        zero.symlink_to("/dev/zero")
        cases += [(module, reader, fifo), (module, reader, zero)]
    calls = []
    for module, reader, path in cases:
        args = (
            f"{str(path)!r}, {str(path)!r}, 'solomon'"
            if reader == "parse_with_vrplib"
            else f"Path({str(path)!r})"
        )
        calls.append(f"getattr(importlib.import_module({module!r}), {reader!r})({args})")
    imports = (  # torch and vrplib loaded before the address-space limit
        "import importlib\nfrom pathlib import Path\nimport linc_core.instances.any_file\n"
        "from linc_core.instances import InstanceError"
    )
    refusals = refusals_in_fresh_process(imports, calls, "InstanceError")
    assert len(refusals) == len(cases), refusals
    for (_, _, path), (seconds, message) in zip(cases, refusals, strict=True):
        assert seconds < 1.0, (path, seconds)
        kind = "a named pipe (FIFO)" if path.name.startswith("fifo") else "a device"
        assert message == f"{path}: field 'file' = {kind!r}: expected a regular file"


def test_a_file_over_64_mib_is_refused_by_its_size(tmp_path: Path) -> None:
    big = tmp_path / "big.vrp"
    with open(big, "wb") as out:
        out.truncate(MAX_BENCHMARK_FILE_BYTES + 1)  # sparse: nothing is written or read
    for read in (read_cvrplib, lambda p: read_instance(p)[1]):
        with pytest.raises(InstanceError) as err:
            read(big)
        assert str(err.value) == (
            f"{big}: field 'file' = '64 MiB': larger than the 64 MiB this reader accepts"
        )


def test_a_link_to_a_real_file_reads_as_that_file(data_dir: Path, tmp_path: Path) -> None:
    link = tmp_path / "C101.txt"
    link.symlink_to(data_dir / "solomon100" / "C101.txt")
    assert read_solomon(link).names == ("C101",)
    assert read_text(link, "C101") == (data_dir / "solomon100" / "C101.txt").read_text()


def test_vrplib_parses_the_text_that_was_checked(data_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "X-n101-k25.vrp"
    copy.write_bytes(
        (data_dir / "cvrplib_x" / "X-n101-k25.vrp").read_bytes().replace(b"\n", b"\r\n")
    )
    parsed = parse_with_vrplib(copy, "copy", "vrplib")  # CRLF read as the text it is
    assert parsed["dimension"] == 101 and parsed["node_coord"].shape == (101, 2)
    with pytest.raises(InstanceError, match="binary content"):
        (tmp_path / "bin.vrp").write_bytes(b"\xff\xfe\x00")
        parse_with_vrplib(tmp_path / "bin.vrp", "bin", "vrplib")
