"""``linc-diagnose``: inputs it cannot use are refused in one line, exit 2, before any work."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from linc_core.commands.diagnose import main
from tests.conftest import tiny_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny.pt")


def _diagnose(checkpoint: Path, benchmark: Path | str, out: Path, *extra: str) -> int:
    args = ["--checkpoint", str(checkpoint), "--benchmark", str(benchmark), "--out", str(out)]
    return main([*args, "--z", "2", *extra])


def _one_line(err: str, start: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"linc-diagnose: {start}"), err


@pytest.mark.parametrize("case", ["below a file", "a file", "a link to a file"])
def test_an_out_it_cannot_write_is_refused_before_the_diagnostics(
    checkpoint, tmp_path, case, capsys
):
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    out = {"below a file": afile / "d", "a file": afile, "a link to a file": tmp_path / "link"}[
        case
    ]
    if case == "a link to a file":
        out.symlink_to(afile)
    assert _diagnose(checkpoint, "synthetic-cvrptw-5", out, "--limit", "1") == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing probed, nothing written
    _one_line(captured.err, f"--out: cannot write to {out} (")
    assert afile.read_text() == "not a folder\n"


def test_offsets_that_are_not_numbers_are_one_line(checkpoint, tmp_path, capsys):
    assert _diagnose(checkpoint, "synthetic-cvrptw-5", tmp_path / "d", "--offsets", "1,x") == 2
    _one_line(capsys.readouterr().err, "--offsets 1,x: expected finite numbers separated by commas")
    assert not (tmp_path / "d").exists()


def test_a_set_with_no_readable_instance_is_one_line(checkpoint, data_dir, tmp_path, capsys):
    folder = tmp_path / "broken"
    folder.mkdir()
    cut = (data_dir / "solomon100" / "R101.txt").read_text()[:1500]  # cut mid-row
    (folder / "R101.txt").write_text(cut)
    assert _diagnose(checkpoint, folder, tmp_path / "d") == 2
    _one_line(
        capsys.readouterr().err,
        f"--benchmark {folder}: every instance file is unreadable (R101.txt)",
    )


def test_a_writable_out_gets_the_diagnostics(checkpoint, data_dir, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "set"
    folder.mkdir()
    shutil.copy(data_dir / "solomon100" / "C101.txt", folder / "C101.txt")
    out = tmp_path / "new" / "deeper"
    assert _diagnose(checkpoint, folder, out) == 0
    assert (out / "diagnostics.json").is_file() and (out / "modulation.png").is_file()
    assert f"wrote {out / 'diagnostics.json'}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--z", "-1"], "--z -1: expected an integer >= 1"),
        (["--z", "0"], "--z 0: expected an integer >= 1"),
        (
            ["--z", "65537"],
            "--z 65537: expected at most 2^16 = 65536, the checkpoint's distinct z-vectors",
        ),
        (["--limit", "0"], "--limit 0: expected an integer >= 1"),
        (["--threads", "0"], "--threads 0: expected an integer from 1 to 1024"),
        (["--offsets", "nan"], "--offsets nan: expected finite numbers separated by commas"),
        (["--offsets", "1,-inf"], "--offsets 1,-inf: expected finite numbers separated by commas"),
        (
            ["--offsets", "1,1e999"],
            "--offsets 1,1e999: expected finite numbers separated by commas",
        ),
    ],
)
def test_numbers_out_of_range_are_one_line_before_the_diagnostics(
    flags, message, checkpoint, tmp_path, capsys
):
    assert _diagnose(checkpoint, "synthetic-cvrptw-5", tmp_path / "d", *flags) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"linc-diagnose: {message}\n"
    assert not (tmp_path / "d").exists()
