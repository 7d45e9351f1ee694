"""Self-describing checkpoints, written atomically.

A checkpoint holds the model and training configs (so it can be rebuilt with no other input),
model and optimiser state, the position in training (epoch, global step), the metric history,
the code version (git commit when available) and the id of the training data. Files are written
to a temporary name in the same folder and renamed, so a crash never leaves a torn checkpoint.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import torch

from linc_core import __version__
from linc_core.atomic import write_atomic
from linc_core.config import ModelConfig, TrainConfig, to_dict
from linc_core.typed import build

FORMAT_VERSION = 1


def git_commit(path: Path | None = None) -> str | None:
    """The current commit of the checkout holding this package, if any."""
    where = path or Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def save_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Atomically write ``payload`` (temp file in the same folder, fsync, then rename)."""
    return Path(write_atomic(path, writer=lambda out: torch.save(payload, out), fsync=True))


def build_payload(
    *,
    model_config: ModelConfig,
    train_config: TrainConfig,
    model_state: dict[str, Any],
    optimizer_state: dict[str, Any] | None,
    epoch: int,
    global_step: int,
    history: list[dict[str, Any]],
    data_id: str | None,
) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "linc_version": __version__,
        "git_commit": git_commit(),
        "model_config": to_dict(model_config),
        "train_config": to_dict(train_config),
        "model_state": model_state,
        "optimizer_state": optimizer_state,
        "epoch": epoch,
        "global_step": global_step,
        "history": history,
        "data_id": data_id,
        "rng_state": torch.get_rng_state(),
    }


def load_checkpoint(
    path: str | os.PathLike[str], map_location: str | torch.device = "cpu"
) -> dict[str, Any]:
    """Read a checkpoint and rebuild its configs (``model_config``/``train_config`` objects)."""
    payload = torch.load(Path(path), map_location=map_location, weights_only=False)
    if payload.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path}: field 'format_version' = {payload.get('format_version')!r}: "
            f"this linc reads version {FORMAT_VERSION}"
        )
    train = dict(payload["train_config"])
    # Checkpoints written before the field took the project's British spelling.
    if "normalize_advantage" in train:
        train["normalise_advantage"] = train.pop("normalize_advantage")
    payload["model_config"] = build(ModelConfig, payload["model_config"], f"{path}: model_config")
    payload["train_config"] = build(TrainConfig, train, f"{path}: train_config")
    return payload
