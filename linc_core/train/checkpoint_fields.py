"""What each field of a linc checkpoint must hold, checked when the checkpoint is read.

:func:`~linc_core.train.checkpoint.load_checkpoint` runs these checks on every checkpoint
before anything uses it (``linc-train --resume``/``--warm-start``/``--morph-from``,
``linc-eval``, a trial restoring from storage, a registered model). A field that is missing, of
the wrong type or out of range, a model state whose names or shapes differ from those of the
model its ``model_config`` builds, a weight or optimiser moment that is NaN or infinite: each is
one :class:`CheckpointError` naming the file, the field and the value. Unchecked, they surface
far from their cause: a string epoch as a ``TypeError`` inside ``range``, a negative one as a
run that silently trains extra epochs, NaN weights as rollouts that never finish.

The model is built on torch's ``meta`` device for its names and shapes: no memory, no weights,
no draw from the global random generator.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch

from linc_core.config import ModelConfig
from linc_core.metrics import SECONDS, TRAIN_SECONDS
from linc_core.model.policy import LincPolicy
from linc_core.train.step import StepMetrics
from linc_core.utils.tensor_file import CheckpointError

# Fields every linc checkpoint holds (build_payload writes them all); the others may be absent
# or None (a weights copy, a checkpoint written before they existed).
REQUIRED_FIELDS = ("model_config", "train_config", "model_state", "epoch", "global_step", "history")
# Adam's settings in a parameter group, each a finite number >= 0.
_GROUP_NUMBERS = ("lr", "eps", "weight_decay")
_STEP_FIELDS = frozenset(f.name for f in dataclasses.fields(StepMetrics))
_SHOWN_CHARS = 80


def bad_field(name: str, field: str, value: Any, problem: str) -> CheckpointError:
    """The one-line error for field ``field`` of checkpoint ``name`` holding ``value``."""
    return CheckpointError(f"checkpoint {name}: field '{field}' = {_shown(value)}: {problem}")


def check_required(payload: dict[str, Any], name: str) -> None:
    """Every field of ``REQUIRED_FIELDS`` is present and both configs are dicts (checked before
    the configs are built from them)."""
    for field in REQUIRED_FIELDS:
        if field not in payload:
            raise bad_field(name, field, None, "missing (every linc checkpoint holds it)")
    for field in ("model_config", "train_config"):
        if not isinstance(payload[field], Mapping):
            raise bad_field(name, field, payload[field], "expected a dict of settings")


def check_fields(payload: dict[str, Any], name: str) -> None:
    """Check every field of ``payload`` (its configs already built) but the configs.

    Raises:
        CheckpointError: the first field that is malformed, named with its value.
    """
    for field in ("epoch", "global_step", "batch_in_epoch"):
        if payload.get(field) is not None:
            _count(payload[field], name, field)
    _seconds(payload.get(TRAIN_SECONDS), name, TRAIN_SECONDS)
    data_id = payload.get("data_id")
    if data_id is not None and not isinstance(data_id, str):
        raise bad_field(name, "data_id", data_id, "expected a string or None")
    _check_history(payload["history"], name)
    _check_partial_epoch(payload.get("partial_epoch"), name)
    _check_rng_state(payload.get("rng_state"), name)
    shapes = _check_model_state(payload["model_state"], payload["model_config"], name)
    _check_optimizer_state(payload.get("optimizer_state"), list(shapes.values()), name)


def _count(value: Any, name: str, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise bad_field(name, field, value, "expected an integer >= 0")


def _seconds(value: Any, name: str, field: str) -> None:
    if value is None:
        return
    if not _is_number(value) or not math.isfinite(value) or value < 0:
        raise bad_field(name, field, value, "expected a finite number of seconds >= 0")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_history(history: Any, name: str) -> None:
    """A list of per-epoch records: dicts of numbers or None (a diverged run's NaN loss
    included)."""
    if not isinstance(history, list):
        raise bad_field(name, "history", history, "expected a list of per-epoch records")
    for index, row in enumerate(history):
        field = f"history[{index}]"
        if not isinstance(row, Mapping):
            raise bad_field(name, field, row, "expected a dict of metrics")
        for key, value in row.items():
            if not isinstance(key, str) or not isinstance(value, int | float | None):
                raise bad_field(name, f"{field}.{key}", value, "expected a number")
        for key in (SECONDS, TRAIN_SECONDS):
            _seconds(row.get(key), name, f"{field}.{key}")


def _check_partial_epoch(partial: Any, name: str) -> None:
    """None, or the first ``batches`` batches of an epoch a run stopped inside."""
    if partial is None:
        return
    if not isinstance(partial, Mapping):
        raise bad_field(name, "partial_epoch", partial, "expected a dict or None")
    for key in ("batches", "steps", "seconds"):
        if key not in partial:
            raise bad_field(name, f"partial_epoch.{key}", None, "missing")
    _count(partial["batches"], name, "partial_epoch.batches")
    _seconds(partial["seconds"], name, "partial_epoch.seconds")
    steps = partial["steps"]
    if not isinstance(steps, list) or len(steps) != partial["batches"]:
        problem = f"expected a list of {partial['batches']} step records, one per batch done"
        raise bad_field(name, "partial_epoch.steps", steps, problem)
    for index, step in enumerate(steps):
        field = f"partial_epoch.steps[{index}]"
        if not isinstance(step, Mapping) or set(step) != _STEP_FIELDS:
            raise bad_field(name, field, step, f"expected the fields {sorted(_STEP_FIELDS)}")
        for key, value in step.items():
            if not isinstance(value, int | float):  # bool included (best_only)
                raise bad_field(name, f"{field}.{key}", value, "expected a number")


def _check_rng_state(state: Any, name: str) -> None:
    """None, or the state of torch's CPU generator (``torch.get_rng_state()``)."""
    if state is None:
        return
    size = torch.get_rng_state().numel()
    if not (
        isinstance(state, torch.Tensor)
        and state.dtype == torch.uint8
        and state.dim() == 1
        and state.numel() == size
    ):
        problem = f"expected None or torch's generator state (a uint8 tensor of shape [{size}])"
        raise bad_field(name, "rng_state", state, problem)


def _check_model_state(state: Any, config: ModelConfig, name: str) -> dict[str, torch.Size]:
    """Every tensor of the model ``config`` builds, of its shape, finite, and nothing else.

    Returns:
        The shapes of the model's parameters, in ``parameters()`` order (the optimiser's ids).
    """
    if not isinstance(state, Mapping):
        raise bad_field(name, "model_state", state, "expected a dict of tensors")
    try:
        with torch.device("meta"):
            model = LincPolicy(config)
    except (ValueError, TypeError, RuntimeError) as err:  # settings no model can be built from
        raise bad_field(name, "model_config", config, f"builds no model ({err})") from None
    expected = {key: value.shape for key, value in model.state_dict().items()}
    missing = [key for key in expected if key not in state]
    if missing:
        problem = (
            f"missing ({len(missing)} of the {len(expected)} tensors of the model its "
            "model_config builds are missing)"
        )
        raise bad_field(name, f"model_state.{missing[0]}", None, problem)
    for key, value in state.items():
        field = f"model_state.{key}"
        if key not in expected:
            raise bad_field(name, field, value, "not a tensor of the model its model_config builds")
        if not isinstance(value, torch.Tensor):
            raise bad_field(name, field, value, "expected a tensor")
        if value.shape != expected[key]:
            problem = f"the model its model_config builds has shape {list(expected[key])}"
            raise bad_field(name, field, value, problem)
        _finite(value, name, field, "weights")
    return {key: parameter.shape for key, parameter in model.named_parameters()}


def _check_optimizer_state(state: Any, shapes: list[torch.Size], name: str) -> None:
    """None, or the state of fit's Adam: one group over every parameter, moments of the
    parameters' shapes, finite."""
    if state is None:
        return
    field = "optimizer_state"
    if not isinstance(state, Mapping) or set(state) != {"state", "param_groups"}:
        raise bad_field(name, field, state, "expected a dict of 'state' and 'param_groups'")
    groups = state["param_groups"]
    if not isinstance(groups, list) or len(groups) != 1 or not isinstance(groups[0], Mapping):
        problem = "expected a list of one parameter group (a dict): fit trains with one"
        raise bad_field(name, f"{field}.param_groups", groups, problem)
    group = groups[0]
    params = group.get("params")
    if params != list(range(len(shapes))):
        problem = f"expected the ids 0..{len(shapes) - 1} of the model's {len(shapes)} parameters"
        raise bad_field(name, f"{field}.param_groups[0].params", params, problem)
    for key in _GROUP_NUMBERS:
        value = group.get(key)
        if not _is_number(value) or not math.isfinite(value) or value < 0:
            raise bad_field(name, f"{field}.param_groups[0].{key}", value, "expected a number >= 0")
    betas = group.get("betas")
    if not (
        isinstance(betas, tuple | list)
        and len(betas) == 2
        and all(_is_number(beta) and 0 <= beta < 1 for beta in betas)
    ):
        problem = "expected two numbers in [0, 1)"
        raise bad_field(name, f"{field}.param_groups[0].betas", betas, problem)
    moments = state["state"]
    if not isinstance(moments, Mapping):
        raise bad_field(name, f"{field}.state", moments, "expected a dict per parameter id")
    for pid, entry in moments.items():
        here = f"{field}.state[{pid!r}]"
        if not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid < len(shapes):
            raise bad_field(name, here, entry, f"not a parameter id 0..{len(shapes) - 1}")
        if not isinstance(entry, Mapping):
            raise bad_field(name, here, entry, "expected a dict of tensors")
        for key, value in entry.items():
            if not isinstance(value, torch.Tensor):
                if not _is_number(value):  # a step count written as a number
                    raise bad_field(name, f"{here}.{key}", value, "expected a tensor")
                continue
            if value.dim() > 0 and value.shape != shapes[pid]:  # a moment (the step is 0-d)
                problem = f"its parameter has shape {list(shapes[pid])}"
                raise bad_field(name, f"{here}.{key}", value, problem)
            _finite(value, name, f"{here}.{key}", "values")


def _finite(tensor: torch.Tensor, name: str, field: str, what: str) -> None:
    if tensor.is_floating_point() or tensor.is_complex():
        bad = int((~torch.isfinite(tensor)).sum())
        if bad:
            raise bad_field(name, field, tensor, f"{bad} of its {tensor.numel()} {what} NaN or inf")


def _shown(value: Any) -> str:
    """``value`` for a message: a tensor by shape and dtype, anything else by a short repr."""
    if isinstance(value, torch.Tensor):
        return f"tensor(shape={list(value.shape)}, dtype={str(value.dtype).removeprefix('torch.')})"
    text = " ".join(repr(value).split())  # one line, whatever the value holds
    return text if len(text) <= _SHOWN_CHARS else f"{text[: _SHOWN_CHARS - 3]}..."


__all__ = ["REQUIRED_FIELDS", "bad_field", "check_fields", "check_required"]
