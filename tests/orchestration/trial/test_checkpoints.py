"""Checkpoints under faults: verified loads (truncated, corrupt) and a stop inside an epoch."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from linc_core.model import LincPolicy
from linc_core.presets import preset_configs
from linc_core.train import GeneratedData, fit
from linc_core.train.checkpoint import (
    CheckpointError,
    copy_checkpoint,
    load_checkpoint,
    manifest_path,
    read_manifest,
    verify_checkpoint,
)

TINY = {"embedding_dim": 16, "encoder_layers": 1, "num_heads": 2, "ff_hidden_dim": 32}


def tiny_run(epochs: int = 2, batches: int = 3):
    model, config = preset_configs(
        "full_linc",
        "cvrptw",
        num_rollouts=4,
        batch_size=2,
        instances_per_epoch=2 * batches,
        epochs=epochs,
        validation_size=0,
    )
    model = dataclasses.replace(model, **TINY, scorer_hidden_dim=16, poly_hidden_dim=16)
    return model, config, GeneratedData("cvrptw", 5, 2, 2 * batches, seed=3)


def fresh(model) -> LincPolicy:
    torch.manual_seed(0)
    return LincPolicy(model)


def test_manifest_records_size_checksum_and_position(tmp_path: Path) -> None:
    model, config, data = tiny_run(epochs=1)
    result = fit(fresh(model), config, data, checkpoint_dir=tmp_path)
    manifest = read_manifest(result.last_checkpoint)
    assert manifest is not None
    assert manifest["bytes"] == result.last_checkpoint.stat().st_size
    assert (manifest["epoch"], manifest["global_step"], manifest["batch_in_epoch"]) == (1, 3, 0)
    assert len(manifest["sha256"]) == 64
    verify_checkpoint(result.last_checkpoint)  # intact: no error


def test_truncated_and_corrupt_checkpoints_are_named_and_told_apart(tmp_path: Path) -> None:
    model, config, data = tiny_run(epochs=1)
    path = fit(fresh(model), config, data, checkpoint_dir=tmp_path).last_checkpoint
    size = path.stat().st_size
    truncated = copy_checkpoint(path, tmp_path / "truncated.pt")
    with truncated.open("r+b") as handle:
        handle.truncate(size // 2)
    expected = rf"s3://b/t/truncated.pt: truncated \({size // 2} of {size} bytes\)"
    with pytest.raises(CheckpointError, match=expected):
        load_checkpoint(truncated, name="s3://b/t/truncated.pt")
    corrupt = copy_checkpoint(path, tmp_path / "corrupt.pt")
    content = bytearray(corrupt.read_bytes())
    content[size // 2] ^= 0xFF
    corrupt.write_bytes(bytes(content))
    with pytest.raises(CheckpointError, match=r"corrupt.pt: corrupt \(SHA-256"):
        verify_checkpoint(corrupt)
    # Without a manifest (an older linc's checkpoint) torch's own failure is named and explained.
    manifest_path(truncated).unlink()
    with pytest.raises(CheckpointError, match=r"truncated.pt: unreadable, truncated or corrupt"):
        load_checkpoint(truncated)


def test_stop_inside_an_epoch_checkpoints_and_resumes_bit_identically(tmp_path: Path) -> None:
    model, config, data = tiny_run(epochs=2, batches=3)
    straight = fit(fresh(model), config, data)
    asked = []

    def stop_after_four_steps() -> bool:
        asked.append(1)
        return len(asked) >= 4  # asked after steps 1..4: stops inside epoch 2, batch 1 done

    stopped = fit(fresh(model), config, data, checkpoint_dir=tmp_path, stop=stop_after_four_steps)
    assert stopped.stopped_by_request and stopped.stopped_early
    assert stopped.global_step == 4 and stopped.epochs_done == 1
    manifest = json.loads(manifest_path(stopped.last_checkpoint).read_text())
    assert (manifest["epoch"], manifest["global_step"], manifest["batch_in_epoch"]) == (1, 4, 1)
    resumed = fit(fresh(model), config, data, resume_from=stopped.last_checkpoint)
    assert resumed.global_step == straight.global_step == 6
    for a, b in zip(
        straight.policy.state_dict().values(), resumed.policy.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)
    # The resumed epoch's record averages all three of its steps, as the straight run's does.
    for key in ("train_best_cost", "train_mean_cost", "loss", "tau"):
        assert [h[key] for h in resumed.history] == [h[key] for h in straight.history]
