"""``linc-train`` on bad input: every file it reads or writes is checked before it prints its
settings or trains, and refused in one line with exit status 2, never a traceback."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from linc_core.commands.train import main as linc_train
from linc_core.runs.memory_limit import memory_limit
from linc_core.train.checkpoint import save_checkpoint
from linc_core.utils.files import size_in_words
from linc_core.utils.tensor_file import load_tensor_file
from tests.conftest import CUDA_DEVICES_SEEN, tiny_checkpoint


def _flags() -> list[str]:
    settings = {"size": 6, "batch-size": 4, "rollouts": 4, "instances-per-epoch": 4,
                "validation-size": 4, "epochs": 1, "device": "cpu"}  # fmt: skip
    return [part for flag, value in settings.items() for part in (f"--{flag}", str(value))]


def _refused(argv: list[str], capsys) -> str:
    """Run linc-train, expecting a refusal before anything is printed: its one line."""
    assert linc_train(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no settings printed, no epoch trained
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err and err.startswith("linc-train: ")
    return err


@pytest.fixture(scope="module")
def malformed(tmp_path_factory) -> dict[str, Path]:
    """A tiny checkpoint with one malformed field each (the audit's cases)."""
    folder = tmp_path_factory.mktemp("malformed")
    raw = load_tensor_file(tiny_checkpoint(folder / "tiny.pt"))
    state = raw["model_state"]
    first = next(iter(state))
    edits = {
        "epoch_str": {"epoch": "x"},
        "epoch_negative": {"epoch": -5},
        "missing_weight": {"model_state": {k: v for k, v in state.items() if k != first}},
        "nan_weights": {"model_state": {k: v.clone().fill_(math.nan) for k, v in state.items()}},
        "history_str": {"history": "x"},
    }
    return {
        name: save_checkpoint(folder / f"{name}.pt", raw | edit) for name, edit in edits.items()
    }


@pytest.mark.parametrize("flag", ["--resume", "--warm-start", "--morph-from"])
@pytest.mark.parametrize(
    "case", ["epoch_str", "epoch_negative", "missing_weight", "nan_weights", "history_str"]
)
def test_a_malformed_checkpoint_is_refused_in_one_line(malformed, flag, case, capsys) -> None:
    """Before: TypeError/RuntimeError traces, or a run that went on silently (a negative
    epoch trained extra epochs, a string history)."""
    path = malformed[case]
    err = _refused([*_flags(), flag, str(path)], capsys)
    assert err.startswith(f"linc-train: checkpoint {path}: field '")


@pytest.mark.parametrize("flag", ["--warm-start", "--morph-from", "--resume"])
def test_a_missing_checkpoint_is_refused_before_the_settings_are_printed(
    flag, tmp_path, capsys
) -> None:
    """Before: --warm-start printed the whole config JSON, then its error."""
    err = _refused([*_flags(), flag, str(tmp_path / "nosuch.pt")], capsys)
    assert "nosuch.pt" in err


def _blocked_outs(tmp_path: Path) -> dict[str, Path]:
    """--out values no folder can be made at: under a file, a file, links to a file or to
    nothing."""
    (tmp_path / "file").write_text("a regular file\n")
    os.symlink(tmp_path / "file", tmp_path / "link-to-file")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    return {
        "under_a_file": tmp_path / "file" / "runs",
        "a_file": tmp_path / "file",
        "link_to_a_file": tmp_path / "link-to-file",
        "link_under_a_file": tmp_path / "link-to-file" / "runs",
        "dangling_link": tmp_path / "dangling",
    }


@pytest.mark.parametrize(
    "case", ["under_a_file", "a_file", "link_to_a_file", "link_under_a_file", "dangling_link"]
)
def test_an_out_folder_that_cannot_be_written_is_refused_before_training(
    case, tmp_path, capsys
) -> None:
    """Before: NotADirectoryError trace after the first epoch had trained."""
    out = _blocked_outs(tmp_path)[case]
    err = _refused([*_flags(), "--out", str(out)], capsys)
    assert err.startswith(f"linc-train: --out: cannot write to {out} (")


def test_an_out_folder_the_system_refuses_is_refused_before_training(capsys) -> None:
    """A folder no user may create, root included (folder modes do not stop root; sysfs
    refuses everyone): the refusal carries the system's reason."""
    out = "/sys/linc-runs/run"
    err = _refused([*_flags(), "--out", out], capsys)
    assert err.startswith(f"linc-train: --out: cannot write to {out} (")
    assert "not permitted" in err or "Permission denied" in err


def test_an_out_folder_is_made_and_a_linked_one_written_through(tmp_path, capsys) -> None:
    """A new nested --out is created; a link to a folder is followed; the writability probe
    leaves nothing behind."""
    nested = tmp_path / "a" / "b"
    assert linc_train([*_flags(), "--out", str(nested)]) == 0
    assert sorted(p.name for p in nested.iterdir()) == ["latest.pt", "latest.pt.json"]
    target = tmp_path / "target"
    target.mkdir()
    os.symlink(target, tmp_path / "link")
    assert linc_train([*_flags(), "--out", str(tmp_path / "link")]) == 0
    assert sorted(p.name for p in target.iterdir()) == ["latest.pt", "latest.pt.json"]
    assert "checkpoint: " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--threads", "-1"], "--threads -1: expected an integer from 1 to 1024"),
        (["--threads", "0"], "--threads 0: expected an integer from 1 to 1024"),
        (["--threads", "99999999999"], "--threads 99999999999: expected an integer from 1 to 1024"),
        (
            ["--lr", "inf"],
            "--lr (train.learning_rate): expected a finite number, got inf",
        ),
        (
            ["--lr", "nan"],
            "--lr (train.learning_rate): expected a finite number, got nan",
        ),
        (
            ["--minutes", "inf"],
            "--minutes (train.budget_minutes): expected a finite number > 0 (or null: no "
            "budget), got inf",
        ),
        (
            ["--size", "99999999999"],
            "--size (num_customers): expected 2 to 100000, got 99999999999",
        ),
        (
            ["--rollouts", "65537"],
            "--rollouts (train.num_rollouts): expected at most 2^16 = 65536, the model's "
            "distinct z-vectors, got 65537",
        ),
        (
            ["--validation-every", "0"],
            "--validation-every (train.validation_every): expected >= 1, got 0",
        ),
        (["--device", "mps"], "--device mps: expected cpu or cuda[:N]"),
        (
            ["--device", "cuda:99"],
            f"--device cuda:99: expected a CUDA device ({CUDA_DEVICES_SEEN})",
        ),
    ],
)
def test_numbers_out_of_range_are_refused_in_one_line_before_training(
    flags, message, tmp_path, capsys
) -> None:
    """Before: set_num_threads' RuntimeError, an inf learning rate failing an epoch in, a
    1.46 TiB allocation for --size, sample_z's ValueError for --rollouts, an AssertionError
    from torch for a CUDA device on a CPU-only build (these machines')."""
    out = tmp_path / "out"
    err = _refused([*_flags(), "--out", str(out), *flags], capsys)
    assert err == f"linc-train: {message}"
    assert not out.exists()


def test_a_run_larger_than_the_machine_is_refused_before_any_work(tmp_path, capsys) -> None:
    """Before: numpy's ``MemoryError`` traceback while generating the first batch (or the
    kernel's OOM kill a step later). The estimate is the one a sweep reserves per trial."""
    out = tmp_path / "out"
    err = _refused([*_flags(), "--out", str(out), "--batch-size", "10000000"], capsys)
    assert err.startswith("linc-train: --batch-size 10000000 x --rollouts ")
    limit = memory_limit()
    assert " TiB of memory; " in err and err.endswith(f"{size_in_words(limit.size)}")
    assert err.endswith(f"{limit.describe()} {size_in_words(limit.size)}")
    assert not out.exists()


def test_a_container_limit_refuses_what_does_not_fit_and_runs_what_does(
    memory_cgroup, tmp_path
) -> None:
    """In a real cgroup limited to 1 GiB (a container's ``--memory 1g``) on a machine of many:
    a run estimated at about 5 GiB is refused in one line naming the limit (before, the kernel
    killed it mid-step, exit status 137); a small run (about 0.5 GiB at its peak) trains, not
    refused by the 1 GiB a sweep reserves for a Ray worker's imports."""
    gib = 1 << 30
    command = [*memory_cgroup(gib), sys.executable, "-m", "linc_core.commands.train", *_flags()]
    big = tmp_path / "big"
    sizes = ["--size", "100", "--batch-size", "64", "--rollouts", "128"]
    refused = subprocess.run(
        [*command, *sizes, "--out", str(big)], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stdout == ""
    assert refused.stderr.startswith("linc-train: --batch-size 64 x --rollouts 128 at --size 100")
    assert refused.stderr.endswith(" GiB of memory; this process's cgroup allows 1 GiB\n")
    assert not big.exists()
    small = tmp_path / "small"
    ran = subprocess.run(
        [*command, "--out", str(small)], capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert (small / "latest.pt").is_file()
