"""Every field of a checkpoint is checked when it is read: one line naming the file, the field
and the value, before anything uses it (the cases of the audit's malformed checkpoints)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from linc_core.model import LincPolicy
from linc_core.train import GeneratedData, fit
from linc_core.train.checkpoint import load_checkpoint, save_checkpoint
from linc_core.train.loop import policy_from_checkpoint
from linc_core.utils.tensor_file import CheckpointError, load_tensor_file
from tests.conftest import tiny_configs

FIRST = "encoder.embedding_depot.weight"  # the model state's first tensor


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """A real checkpoint of a tiny run stopped after its first step, inside its first epoch
    (every field set: optimiser moments, random state, partial epoch), and its raw payload."""
    model, config = tiny_configs(
        "full_linc", "cvrp", num_rollouts=4, batch_size=4, instances_per_epoch=8, epochs=2
    )
    folder = tmp_path_factory.mktemp("run")
    torch.manual_seed(0)
    data = GeneratedData("cvrp", 10, 4, 8, seed=3)
    result = fit(LincPolicy(model), config, data, checkpoint_dir=folder, stop=lambda: True)
    assert result.stopped_by_request
    return result.last_checkpoint, load_tensor_file(result.last_checkpoint)


def _state(change: Callable[[dict], Any]) -> Callable[[dict], None]:
    def edit(payload: dict) -> None:
        change(payload["model_state"])

    return edit


def _moments(change: Callable[[dict], Any]) -> Callable[[dict], None]:
    def edit(payload: dict) -> None:
        change(payload["optimizer_state"])

    return edit


def _nan_first(state: dict) -> None:
    state[FIRST] = state[FIRST].clone()
    state[FIRST][0, 0] = math.nan  # one NaN among the weights


# name: (edit of the raw payload, the field named, the value as the message shows it)
CASES: dict[str, tuple[Callable[[dict], Any], str, str]] = {
    "epoch_str": (lambda p: p.update(epoch="x"), "epoch", "'x'"),
    "epoch_negative": (lambda p: p.update(epoch=-5), "epoch", "-5"),
    "epoch_bool": (lambda p: p.update(epoch=True), "epoch", "True"),
    "epoch_float": (lambda p: p.update(epoch=1.0), "epoch", "1.0"),
    "global_step_negative": (lambda p: p.update(global_step=-1), "global_step", "-1"),
    "batch_in_epoch_str": (lambda p: p.update(batch_in_epoch="1"), "batch_in_epoch", "'1'"),
    "train_seconds_nan": (lambda p: p.update(train_seconds=math.nan), "train_seconds", "nan"),
    "data_id_int": (lambda p: p.update(data_id=5), "data_id", "5"),
    "history_str": (lambda p: p.update(history="x"), "history", "'x'"),
    "history_row_str": (lambda p: p.update(history=["x"]), "history[0]", "'x'"),
    "history_value_str": (
        lambda p: p.update(history=[{"epoch": 1, "loss": "low"}]),
        "history[0].loss",
        "'low'",
    ),
    "history_seconds_negative": (
        lambda p: p.update(history=[{"epoch": 1, "seconds": -3.0}]),
        "history[0].seconds",
        "-3.0",
    ),
    "rng_state_float": (lambda p: p.update(rng_state=torch.zeros(3)), "rng_state", "shape=[3]"),
    "rng_state_short": (
        lambda p: p.update(rng_state=torch.zeros(3, dtype=torch.uint8)),
        "rng_state",
        "dtype=uint8",
    ),
    "partial_epoch_str": (lambda p: p.update(partial_epoch="x"), "partial_epoch", "'x'"),
    "partial_epoch_steps_short": (
        lambda p: p["partial_epoch"].update(steps=[]),
        "partial_epoch.steps",
        "[]",
    ),
    "partial_epoch_step_keys": (
        lambda p: p["partial_epoch"].update(steps=[{"loss": 1.0}]),
        "partial_epoch.steps[0]",
        "{'loss': 1.0}",
    ),
    "partial_epoch_batches_negative": (
        lambda p: p["partial_epoch"].update(batches=-1),
        "partial_epoch.batches",
        "-1",
    ),
    "optimizer_groups_str": (
        lambda p: p.update(optimizer_state={"state": {}, "param_groups": "x"}),
        "optimizer_state.param_groups",
        "'x'",
    ),
    "optimizer_state_list": (lambda p: p.update(optimizer_state=[1]), "optimizer_state", "[1]"),
    "optimizer_param_ids": (
        _moments(lambda o: o["param_groups"][0]["params"].pop()),
        "optimizer_state.param_groups[0].params",
        "[0, 1, 2",
    ),
    "optimizer_lr_str": (
        _moments(lambda o: o["param_groups"][0].update(lr="fast")),
        "optimizer_state.param_groups[0].lr",
        "'fast'",
    ),
    "optimizer_betas": (
        _moments(lambda o: o["param_groups"][0].update(betas=(0.9, 1.5))),
        "optimizer_state.param_groups[0].betas",
        "(0.9, 1.5)",
    ),
    "optimizer_moment_shape": (
        _moments(lambda o: o["state"][0].update(exp_avg=torch.zeros(3))),
        "optimizer_state.state[0].exp_avg",
        "shape=[3]",
    ),
    "optimizer_moment_nan": (
        _moments(lambda o: o["state"][0]["exp_avg"].fill_(math.nan)),
        "optimizer_state.state[0].exp_avg",
        "tensor(shape=",
    ),
    "optimizer_id_str": (
        _moments(lambda o: o.update(state={"0": o["state"][0]})),
        "optimizer_state.state['0']",
        "{'step'",
    ),
    "model_state_list": (lambda p: p.update(model_state=[1]), "model_state", "[1]"),
    "missing_weight": (_state(lambda s: s.pop(FIRST)), f"model_state.{FIRST}", "None"),
    "extra_weight": (
        _state(lambda s: s.update({"backdoor.weight": torch.zeros(2)})),
        "model_state.backdoor.weight",
        "shape=[2]",
    ),
    "wrong_shape": (
        _state(lambda s: s.update({FIRST: torch.zeros(3)})),
        f"model_state.{FIRST}",
        "shape=[3]",
    ),
    "nan_weight": (_state(_nan_first), f"model_state.{FIRST}", "dtype=float32"),
    "inf_weight": (
        _state(lambda s: s.update({FIRST: torch.full_like(s[FIRST], -math.inf)})),
        f"model_state.{FIRST}",
        "tensor(shape=",
    ),
    "weight_not_a_tensor": (
        _state(lambda s: s.update({FIRST: 1.0})),
        f"model_state.{FIRST}",
        "1.0",
    ),
    "no_model_state": (lambda p: p.pop("model_state"), "model_state", "None"),
    "no_history": (lambda p: p.pop("history"), "history", "None"),
    "no_train_config": (lambda p: p.pop("train_config"), "train_config", "None"),
    "train_config_list": (lambda p: p.update(train_config=[1, 2]), "train_config", "[1, 2]"),
    "train_config_none": (lambda p: p.update(train_config=None), "train_config", "None"),
    "format_version_str": (lambda p: p.update(format_version="1"), "format_version", "'1'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_field_is_refused_naming_file_field_and_value(
    stopped_run, tmp_path: Path, case: str
) -> None:
    """Before: a TypeError/KeyError/RuntimeError trace, or (a negative epoch, a bad random
    state or history, NaN weights) a load that passed and a run that went wrong later."""
    edit, field, shown = CASES[case]
    payload = copy.deepcopy(stopped_run[1])
    edit(payload)
    path = save_checkpoint(tmp_path / f"{case}.pt", payload)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    message = str(err.value)
    assert message.startswith(f"checkpoint {path}: field '{field}' = ")
    assert shown in message and "\n" not in message and len(message) < 400


def test_a_malformed_config_is_named_with_its_file(stopped_run, tmp_path: Path) -> None:
    payload = copy.deepcopy(stopped_run[1])
    payload["model_config"]["embedding_dim"] = "abc"
    path = save_checkpoint(tmp_path / "dim.pt", payload)
    with pytest.raises(CheckpointError, match=r"dim\.pt: model_config.embedding_dim: .*'abc'"):
        load_checkpoint(path)


def test_a_whole_checkpoint_loads_and_draws_nothing_from_the_global_generator(
    stopped_run,
) -> None:
    path, raw = stopped_run
    before = torch.get_rng_state()
    payload = load_checkpoint(path)
    assert torch.equal(torch.get_rng_state(), before)  # a resumed run stays bit-identical
    assert payload["partial_epoch"]["batches"] == 1 and payload["optimizer_state"] is not None
    assert payload["model_state"].keys() == raw["model_state"].keys()


def test_optional_fields_may_be_absent_and_a_diverged_history_loads(
    stopped_run, tmp_path: Path
) -> None:
    """A checkpoint written before the resume fields existed, and the record of a run whose
    loss went NaN (its history, not its weights), are no malformed files."""
    payload = copy.deepcopy(stopped_run[1])
    for field in ("optimizer_state", "rng_state", "partial_epoch", "data_id"):
        del payload[field]
    del payload["batch_in_epoch"], payload["train_seconds"]
    payload["history"] = [{"epoch": 1, "loss": math.nan, "seconds": 0.5}]
    payload["global_step"] = 0
    loaded = load_checkpoint(save_checkpoint(tmp_path / "old.pt", payload))
    assert all(loaded[field] is None for field in ("optimizer_state", "rng_state", "data_id"))
    assert math.isnan(loaded["history"][0]["loss"])


def test_nan_weights_are_refused_before_a_policy_is_built(stopped_run, tmp_path: Path) -> None:
    """Before: the policy loaded, and decoding failed 30 lines deep ("rollouts did not finish
    within 20 decisions")."""
    payload = copy.deepcopy(stopped_run[1])
    _nan_first(payload["model_state"])
    path = save_checkpoint(tmp_path / "nan.pt", payload)
    with pytest.raises(CheckpointError, match=rf"nan\.pt: field 'model_state.{FIRST}'.*NaN"):
        policy_from_checkpoint(path)


def test_a_negative_epoch_is_not_resumed(stopped_run, tmp_path: Path) -> None:
    """Before: resumed at epoch -5 and trained seven extra epochs."""
    path, raw = stopped_run
    payload = copy.deepcopy(raw) | {"epoch": -5}
    bad = save_checkpoint(tmp_path / "negative.pt", payload)
    model, config = tiny_configs(
        "full_linc", "cvrp", num_rollouts=4, batch_size=4, instances_per_epoch=8, epochs=2
    )
    data = GeneratedData("cvrp", 10, 4, 8, seed=3)
    with pytest.raises(CheckpointError, match=r"negative\.pt: field 'epoch' = -5"):
        fit(LincPolicy(model), config, data, resume_from=bad)
