"""``python -m bench``: an ``--only`` it cannot run is refused in one line before any benchmark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("only", "named"),
    [("nosuch", "nosuch"), ("env,nosuch", "nosuch"), ("ENV", "ENV"), (" , ", "named")],
)
def test_unknown_names_are_refused_naming_the_known_ones(only, named) -> None:
    latest = ROOT / "bench" / "results" / "latest.json"
    before = latest.stat().st_mtime_ns if latest.exists() else None
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", only],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""  # no benchmark ran, no table printed
    known = ", ".join(BENCHMARKS)
    assert done.stderr == f"python -m bench: --only {only}: no benchmark {named} (known: {known})\n"
    assert (latest.stat().st_mtime_ns if latest.exists() else None) == before
