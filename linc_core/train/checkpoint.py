"""Self-describing, verified checkpoints, written atomically.

A checkpoint holds the model and training configs (so it can be rebuilt with no other input),
model and optimiser state, the position in training (epoch, global step), the metric history,
the code version (git commit when available) and the id of the training data. Files are written
to a temporary name in the same folder and renamed, so a crash never leaves a torn checkpoint.

Beside each checkpoint ``NAME`` a small manifest ``NAME.json`` (written last) records the file's
size, its SHA-256 and its position in training. A copy that lost bytes on the way (a full disk,
an interrupted upload or download) is caught before it is read:
:func:`verify_checkpoint` and :func:`load_checkpoint` raise :class:`CheckpointError` naming the
file and saying whether it is truncated or corrupt. A checkpoint without a manifest (written by
an older linc) loads unverified.

A manifest proves a copy whole, not harmless: whoever writes a checkpoint writes its manifest.
What keeps a checkpoint from running code is how it is read: tensors and plain data only
(:func:`linc_core.utils.tensor_file.load_tensor_file`, torch's weights-only unpickler); a file
holding anything else is refused unrun. :func:`save_checkpoint` writes nothing it could not
read back (:func:`~linc_core.utils.tensor_file.check_plain`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, BinaryIO

import torch

from linc_core import __version__
from linc_core.config import ModelConfig, TrainConfig, config_differences, to_dict
from linc_core.metrics import TRAIN_SECONDS
from linc_core.train.checkpoint_fields import bad_field, check_fields, check_required
from linc_core.utils.atomic import write_atomic
from linc_core.utils.files import FileRefusedError, open_regular_file, read_regular_file
from linc_core.utils.tensor_file import (
    MAX_TENSOR_FILE_BYTES,
    CheckpointError,
    check_plain,
    load_tensor_file,
)
from linc_core.utils.typed import build

FORMAT_VERSION = 1
CHECKPOINT_NAME = "latest.pt"  # what fit writes into its checkpoint folder
MANIFEST_SUFFIX = ".json"
_CHUNK = 1 << 20
_MANIFEST_MAX_BYTES = 1 << 20  # a manifest is four numbers and a hash: about 150 bytes


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


def manifest_path(path: str | os.PathLike[str]) -> Path:
    """The manifest beside checkpoint ``path`` (``latest.pt`` -> ``latest.pt.json``)."""
    path = Path(path)
    return path.with_name(path.name + MANIFEST_SUFFIX)


def save_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Atomically write ``payload`` (temp file in the same folder, fsync, then rename), then its
    manifest (size, SHA-256, position in training) beside it, also atomically.

    Raises:
        TypeError: ``payload`` holds something other than tensors and plain data (named), which
            :func:`load_checkpoint` would refuse to read back.
    """
    check_plain(payload, "checkpoint")
    path = Path(write_atomic(path, writer=lambda out: torch.save(payload, out), fsync=True))
    manifest = {
        "bytes": path.stat().st_size,
        "sha256": _sha256(path),
        "epoch": payload.get("epoch"),
        "global_step": payload.get("global_step"),
        "batch_in_epoch": payload.get("batch_in_epoch", 0),
    }
    write_atomic(manifest_path(path), json.dumps(manifest).encode(), fsync=True)
    return path


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The manifest of checkpoint ``path``, or None when it has none (or it is unreadable)."""
    try:  # a named pipe or a device there is no manifest (FileRefusedError is a ValueError)
        manifest = json.loads(read_regular_file(manifest_path(path), _MANIFEST_MAX_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not {"bytes", "sha256"} <= set(manifest):
        return None
    return manifest


def verify_checkpoint(path: str | os.PathLike[str], *, name: str | None = None) -> None:
    """Check ``path`` against its manifest; a checkpoint without one passes.

    Args:
        path: the checkpoint file.
        name: how errors name it (e.g. its storage path when ``path`` is a local copy).

    Raises:
        CheckpointError: the file is missing, shorter or longer than recorded (truncated), or
            its SHA-256 differs (corrupt).
    """
    name = name or str(path)
    manifest = read_manifest(path)
    if manifest is None:
        return
    try:  # the size and hash of what is opened: a regular file (a FIFO would block the hash)
        with open_regular_file(path, max_bytes=MAX_TENSOR_FILE_BYTES, source=name) as handle:
            size = os.fstat(handle.fileno()).st_size
            digest = _sha256(handle) if size == manifest["bytes"] else None
    except FileRefusedError as err:
        raise CheckpointError(f"checkpoint {name}: {err.value}: {err.problem}") from None
    except OSError as err:
        raise CheckpointError(f"checkpoint {name}: missing ({err.strerror})") from None
    if size != manifest["bytes"]:
        raise CheckpointError(f"checkpoint {name}: truncated ({size} of {manifest['bytes']} bytes)")
    if digest != manifest["sha256"]:
        raise CheckpointError(f"checkpoint {name}: corrupt (SHA-256 differs from its manifest)")


def copy_checkpoint(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Copy a checkpoint and its manifest (the manifest last, so a torn copy is caught)."""
    target = Path(target)
    shutil.copyfile(source, target)
    if manifest_path(source).exists():
        shutil.copyfile(manifest_path(source), manifest_path(target))
    return target


def _sha256(source: str | os.PathLike[str] | BinaryIO) -> str:
    """Hex SHA-256 of a file: a path (one this process just wrote) or an open file."""
    if isinstance(source, str | os.PathLike):
        with open(source, "rb") as handle:
            return _sha256(handle)
    digest = hashlib.sha256()
    while chunk := source.read(_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


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
    partial_epoch: dict[str, Any] | None = None,
    train_seconds: float = 0.0,
) -> dict[str, Any]:
    """The checkpoint of a run after ``epoch`` whole epochs (``global_step`` steps) and
    ``train_seconds`` of training steps (the clock of a time budget, ``linc_core.train.budget``).

    ``partial_epoch`` (a run stopped inside an epoch): ``{"batches": n, "steps": [...],
    "seconds": s}``, the first n batches of epoch ``epoch + 1`` and their step metrics, so a
    resumed run continues with batch n and reports the whole epoch.
    """
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
        "batch_in_epoch": partial_epoch["batches"] if partial_epoch else 0,
        "partial_epoch": partial_epoch,
        TRAIN_SECONDS: float(train_seconds),
    }


def load_checkpoint(
    path: str | os.PathLike[str],
    map_location: str | torch.device = "cpu",
    *,
    name: str | None = None,
) -> dict[str, Any]:
    """Verify and read a checkpoint (tensors and plain data only: nothing in it runs) and
    rebuild its configs (``model_config``/``train_config``).

    Raises:
        CheckpointError: the file fails :func:`verify_checkpoint`, holds anything but tensors
            and plain data, is no torch file, is no linc checkpoint of this format version, or
            a field is missing or malformed (:mod:`linc_core.train.checkpoint_fields`: types,
            ranges, the model state's names and shapes, finite weights), named as ``name``
            (default ``path``) with the field and its value.
    """
    name = name or str(path)
    verify_checkpoint(path, name=name)
    payload = load_tensor_file(path, map_location, name=name)
    if not isinstance(payload, dict) or "format_version" not in payload:
        raise CheckpointError(
            f"checkpoint {name}: not a linc checkpoint (no 'format_version'; a reference "
            "checkpoint loads with linc_core.model.reference_format.load_reference_checkpoint)"
        )
    version = payload["format_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version != FORMAT_VERSION:
        problem = f"this linc reads version {FORMAT_VERSION}"
        raise bad_field(name, "format_version", version, problem)
    check_required(payload, name)
    train = dict(payload["train_config"])
    # Checkpoints written before the field took the project's British spelling.
    if "normalize_advantage" in train:
        train["normalise_advantage"] = train.pop("normalize_advantage")
    # Checkpoints written before ``precision``: ``amp`` meant fp16 on CUDA, fp32 elsewhere.
    if "amp" in train:
        on_cuda = str(train.get("device", "cpu")).startswith("cuda")
        train["precision"] = "fp16" if train.pop("amp") and on_cuda else "fp32"
    try:
        payload["model_config"] = build(ModelConfig, payload["model_config"], "model_config")
        payload["train_config"] = build(TrainConfig, train, "train_config")
    except (TypeError, ValueError) as err:  # a ConfigError naming the setting and its value
        raise CheckpointError(f"checkpoint {name}: {err}") from None
    check_fields(payload, name)
    for field in ("optimizer_state", "rng_state", "partial_epoch", "data_id"):
        payload.setdefault(field, None)  # absent in a copy written before the field existed
    return payload


# What only resuming a run needs: the optimiser's moments (twice the model's size), the random
# state and a stopped epoch's position. A weights copy leaves them out.
RESUME_STATE = ("optimizer_state", "rng_state", "partial_epoch")


def save_weights_copy(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Write a copy of checkpoint ``source`` at ``target`` without ``RESUME_STATE``: the model,
    its configs, its position and metric history, about a third of the size (1.4M parameters:
    5.7 MB against 17.2 MB). It evaluates, serves and warm-starts as ``source`` does; resuming
    from it is refused (the run could not go on as it would have). Verified like ``source``;
    written atomically with its manifest.
    """
    payload = load_checkpoint(source)
    payload["model_config"] = to_dict(payload["model_config"])
    payload["train_config"] = to_dict(payload["train_config"])
    payload.update(dict.fromkeys(RESUME_STATE))
    payload["batch_in_epoch"] = 0
    return save_checkpoint(target, payload)


# The training settings a resumed run may change: where and how it computes, what it
# validates and how long it goes on. Every other one shapes the run's trajectory.
RESUMABLE_CHANGES = frozenset(
    {"epochs", "budget_minutes", "replay_chunk", "precision", "compile", "device", "init"}
    | {"validation_size", "validation_every"}
)


def check_resumable(
    payload: dict[str, Any],
    model_config: ModelConfig,
    train_config: TrainConfig,
    data_id: str | None,
    *,
    name: str,
) -> None:
    """Refuse to resume ``payload`` (a loaded checkpoint) under other settings than it was
    trained with (its model, its data, or a training setting outside ``RESUMABLE_CHANGES``), or
    when it holds the weights alone (:func:`save_weights_copy`).

    Raises:
        CheckpointError: naming every setting that differs, with both values; or ``payload``
            is a weights copy of a run that had taken steps (no optimiser state to go on with).
    """
    if payload.get("optimizer_state") is None and payload.get("global_step", 0) > 0:
        raise CheckpointError(
            f"checkpoint {name}: weights only (no optimiser state after "
            f"{payload['global_step']} steps), so the run cannot go on as it would have; "
            "start a new run from its weights (a warm start)"
        )
    changed = {
        f"model.{key}": values
        for key, values in config_differences(payload["model_config"], model_config).items()
    }
    changed |= {
        f"train.{key}": values
        for key, values in config_differences(payload["train_config"], train_config).items()
        if key not in RESUMABLE_CHANGES
    }
    kept_data = payload.get("data_id")
    if kept_data is not None and data_id is not None and kept_data != data_id:
        changed["data"] = (kept_data, data_id)
    if changed:
        raise CheckpointError(
            f"checkpoint {name}: trained with "
            + ", ".join(f"{key}={then!r}" for key, (then, _) in changed.items())
            + "; this run has "
            + ", ".join(f"{key}={now!r}" for key, (_, now) in changed.items())
            + ". Resume it with its own settings, or start a new run from its weights "
            "(a warm start)"
        )


__all__ = [
    "RESUMABLE_CHANGES",
    "RESUME_STATE",
    "check_resumable",
    "CHECKPOINT_NAME",
    "FORMAT_VERSION",
    "MANIFEST_SUFFIX",
    "CheckpointError",
    "build_payload",
    "copy_checkpoint",
    "git_commit",
    "load_checkpoint",
    "manifest_path",
    "read_manifest",
    "save_checkpoint",
    "save_weights_copy",
    "verify_checkpoint",
]
