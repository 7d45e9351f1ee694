"""sweeps.cli: the commands' shell; here, the MLflow UI command it prints after a run."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from sweeps.cli import mlflow_command, print_mlflow_ui

ROOT = Path(__file__).resolve().parents[2]
BESIDE = Path(sys.executable).parent / "mlflow"


def _printed_command(capsys, store: Path) -> list[str]:
    print_mlflow_ui(f"sqlite:///{store}")
    lines = [line for line in capsys.readouterr().out.splitlines() if " ui --app-name " in line]
    assert len(lines) == 1
    return shlex.split(lines[0])


def test_the_printed_mlflow_is_this_environments_relative_from_the_checkout(
    tmp_path, monkeypatch, capsys
):
    # the test environment installs MLflow beside its Python, as `make setup` does
    assert BESIDE.is_file() and os.access(BESIDE, os.X_OK)
    monkeypatch.chdir(ROOT)
    words = _printed_command(capsys, tmp_path / "mlflow.db")
    assert words[0] == os.path.relpath(BESIDE)  # .venv/bin/mlflow from a checkout
    assert words[1:] == [
        "ui", "--app-name", "linc", "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
        "--host", "127.0.0.1",
    ]  # fmt: skip
    assert Path(words[0]).resolve() == BESIDE.resolve()


def test_from_another_folder_the_printed_mlflow_is_absolute_and_runs(tmp_path, monkeypatch, capsys):
    # a user who installed linc elsewhere runs the command from their own folder: a relative
    # ".venv/bin/mlflow" would name nothing there
    monkeypatch.chdir(tmp_path)
    words = _printed_command(capsys, tmp_path / "mlflow.db")
    assert os.path.isabs(words[0]) and Path(words[0]) == BESIDE
    assert os.access(words[0], os.X_OK)


def test_a_path_with_spaces_is_quoted_for_the_shell(tmp_path, monkeypatch):
    folder = tmp_path / "my env" / "bin"
    folder.mkdir(parents=True)
    (folder / "mlflow").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "executable", str(folder / "python"))
    monkeypatch.chdir(tmp_path)
    assert shlex.split(mlflow_command()) == ["my env/bin/mlflow"]
    monkeypatch.setattr(sys, "executable", str(tmp_path / "none" / "python"))
    assert mlflow_command() == "mlflow"  # none beside the interpreter: the one on PATH


def test_cfg_job_checks_the_config_as_the_run_does(capsys) -> None:
    from sweeps.ablation import main as ablation_main
    from sweeps.generate import main as generate_main

    assert ablation_main(["preset=smoke", "train.epochs=three", "--cfg", "job"]) == 2
    assert capsys.readouterr().err == (
        "linc-ablation: invalid config: train.epochs: expected int, got 'three'\n"
    )
    assert generate_main(["size=abc", "--cfg", "job"]) == 2
    assert "size: expected int, got 'abc'" in capsys.readouterr().err
    assert ablation_main(["preset=smoke", "--cfg", "job", "-p", "train"]) == 0
    assert "num_rollouts: 4" in capsys.readouterr().out


def test_a_plan_printed_into_a_closed_pipe_ends_quietly() -> None:
    """`linc-tune --cfg plan | head -3`: head closes the pipe while the plan is printed."""
    import subprocess

    read, write = os.pipe()
    os.close(read)  # a reader that has gone: every write fails with EPIPE
    done = subprocess.run(
        [sys.executable, "-m", "sweeps.train", "--cfg", "plan"],
        stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
    )  # fmt: skip
    os.close(write)
    assert done.stderr == "" and done.returncode == 0, done.stderr[-2000:]
