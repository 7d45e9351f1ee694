"""Resuming a checkpoint: refused under other settings than it was trained with, one line."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import pytest
import torch

from linc_core.commands.train import main as linc_train
from linc_core.model import LincPolicy
from linc_core.train import GeneratedData, fit
from linc_core.train.checkpoint import (
    RESUMABLE_CHANGES,
    RESUME_STATE,
    load_checkpoint,
    save_checkpoint,
    save_weights_copy,
)
from linc_core.utils.tensor_file import CheckpointError
from tests.conftest import refusals_in_fresh_process, tiny_configs


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory) -> tuple[Path, object, object]:
    """A checkpoint after one epoch of a tiny run, with its model and training configs."""
    model, config = tiny_configs(
        "full_linc", num_rollouts=4, batch_size=4, instances_per_epoch=8, epochs=1
    )
    folder = tmp_path_factory.mktemp("run")
    torch.manual_seed(0)
    result = fit(LincPolicy(model), config, GeneratedData("cvrptw", 6, 4, 8, seed=3),
                 checkpoint_dir=folder, data_id="data-a")  # fmt: skip
    return result.last_checkpoint, model, config


def _resume(checkpoint: Path, model, config, data_id: str = "data-a"):
    torch.manual_seed(0)
    data = GeneratedData("cvrptw", 6, config.batch_size, 8, seed=3)
    return fit(LincPolicy(model), config, data, resume_from=checkpoint, data_id=data_id)


def test_a_resume_under_other_training_settings_names_each_with_both_values(one_epoch) -> None:
    checkpoint, model, config = one_epoch
    changed = dataclasses.replace(config, learning_rate=3e-4, seed=7, epochs=2)
    with pytest.raises(CheckpointError) as refused:
        _resume(checkpoint, model, changed)
    message = str(refused.value)
    assert message.startswith(f"checkpoint {checkpoint}: trained with ")
    assert "train.learning_rate=0.0001" in message and "train.learning_rate=0.0003" in message
    assert "train.seed=1234" in message and "train.seed=7" in message
    assert "epochs" not in message  # a resumed run may go on longer


def test_a_resume_of_another_model_or_other_data_is_refused(one_epoch) -> None:
    checkpoint, model, config = one_epoch
    with pytest.raises(CheckpointError, match="model.gated_attention=True; this run has model"):
        _resume(checkpoint, dataclasses.replace(model, gated_attention=False), config)
    with pytest.raises(CheckpointError, match="data='data-a'; this run has data='data-b'"):
        _resume(checkpoint, model, config, data_id="data-b")


def test_a_resume_may_go_on_longer_elsewhere_and_validate_otherwise(one_epoch) -> None:
    checkpoint, model, config = one_epoch
    assert {"epochs", "budget_minutes", "device", "validation_every"} <= RESUMABLE_CHANGES
    longer = dataclasses.replace(config, epochs=2, validation_every=2, replay_chunk=1)
    resumed = _resume(checkpoint, model, longer)
    assert resumed.epochs_done == 2 and resumed.global_step == 4


def _flags(rollouts: int = 4, epochs: int = 1) -> list[str]:
    settings = {"size": 6, "batch-size": 4, "rollouts": rollouts, "instances-per-epoch": 8,
                "validation-size": 4, "epochs": epochs, "device": "cpu"}  # fmt: skip
    return [part for flag, value in settings.items() for part in (f"--{flag}", str(value))]


def test_linc_train_refuses_a_resume_with_other_flags_in_one_line(tmp_path, capsys) -> None:
    out = ["--out", str(tmp_path / "a")]
    assert linc_train([*_flags(), *out]) == 0
    capsys.readouterr()
    resume = ["--resume", str(tmp_path / "a" / "latest.pt")]
    assert linc_train([*_flags(rollouts=8, epochs=2), *resume]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("linc-train: checkpoint ") and "train.num_rollouts=4" in err
    assert "train.num_rollouts=8" in err
    # The same flags resume, and the run may go on longer.
    assert linc_train([*_flags(epochs=2), *resume, *out]) == 0
    assert "done: 2 epochs" in capsys.readouterr().out


def test_a_resume_keeps_the_clock_its_budget_counts_on(one_epoch, tmp_path, capsys) -> None:
    """A budget counted in CPU seconds is not resumed on the wall clock (or back): refused,
    naming both. linc-train --resume keeps the checkpoint's clock, also with new --minutes."""
    checkpoint, model, config = one_epoch
    with pytest.raises(CheckpointError, match="train.budget_clock='wall'.*budget_clock='cpu'"):
        _resume(checkpoint, model, dataclasses.replace(config, budget_clock="cpu"))
    out = ["--out", str(tmp_path / "cpu")]
    assert linc_train([*_flags(), "--minutes", "5", "--budget-clock", "cpu", *out]) == 0
    resume = ["--resume", str(tmp_path / "cpu" / "latest.pt")]
    assert linc_train([*_flags(epochs=2), "--minutes", "6", *resume]) == 0
    assert '"budget_clock": "cpu"' in capsys.readouterr().out  # the effective settings printed


def test_a_weights_copy_evaluates_as_its_run_and_refuses_to_resume(one_epoch, tmp_path) -> None:
    checkpoint, model, config = one_epoch
    copy = save_weights_copy(checkpoint, tmp_path / "weights.pt")
    full, weights = load_checkpoint(checkpoint), load_checkpoint(copy)  # both verified
    assert copy.stat().st_size < 0.6 * checkpoint.stat().st_size  # Adam's two moments gone
    assert weights["model_config"] == model and weights["train_config"] == config
    assert weights["model_state"].keys() == full["model_state"].keys()
    assert all(torch.equal(v, full["model_state"][k]) for k, v in weights["model_state"].items())
    assert (
        (weights["epoch"], weights["global_step"]) == (full["epoch"], full["global_step"]) == (1, 2)
    )
    assert weights["history"] == full["history"]
    assert all(weights[key] is None for key in RESUME_STATE)
    assert full["optimizer_state"] is not None
    with pytest.raises(CheckpointError, match=r"weights\.pt: weights only .* after 2 steps.*warm"):
        _resume(copy, model, config)


def test_a_fifo_checkpoint_or_manifest_is_refused_at_once(tmp_path) -> None:
    # A manifest claiming 0 bytes beside a FIFO made the hash read the FIFO, and a FIFO as the
    # manifest made reading it block: each call runs in a process of its own with a deadline.
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    empty = hashlib.sha256(b"").hexdigest()
    (tmp_path / "fifo.pt.json").write_text(json.dumps({"bytes": 0, "sha256": empty}))
    good = tmp_path / "good.pt"
    save_checkpoint(good, {"format_version": 1})
    os.remove(tmp_path / "good.pt.json")
    os.mkfifo(tmp_path / "good.pt.json")
    imports = (
        "from linc_core.train.checkpoint import load_checkpoint, read_manifest, verify_checkpoint\n"
        "from linc_core.utils.tensor_file import CheckpointError"
    )
    calls = [
        f"assert read_manifest({str(good)!r}) is None",  # returns: the manifest is not read
        f"verify_checkpoint({str(fifo)!r})",
        f"load_checkpoint({str(fifo)!r})",
    ]
    refusals = refusals_in_fresh_process(imports, calls, "CheckpointError")
    told = f"checkpoint {fifo}: a named pipe (FIFO): expected a regular file"
    assert [message for _, message in refusals] == ["returned", told, told], refusals
    assert all(seconds < 1.0 for seconds, _ in refusals), refusals
