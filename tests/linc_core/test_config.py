"""Configuration validation: ModelConfig, TrainConfig and their builder name the offending
section, field and value."""

from __future__ import annotations

import dataclasses
import math

import pytest

from linc_core.config import ModelConfig, TrainConfig
from linc_core.presets import preset_configs
from linc_core.problems.spec import BUILTIN_PROBLEMS
from linc_core.utils.typed import ConfigError, build, literal_values


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"candidate_features": ("travel", "speed")}, "candidate_features"),
        ({"centred_features": ("travel", "load_after")}, "centred_features"),
        ({"node_static_features": ("knn_max",)}, "node_static_features"),
        ({"scorer": "mlp", "summary": "partial"}, "summary"),
        ({"scorer": "mlp", "summary": "full_mean"}, "summary"),
        ({"scorer": "attention"}, "scorer"),
        ({"centring": "median"}, "centring"),
        ({"depot_row": "mean"}, "depot_row"),
        ({"summary": "full"}, "summary"),
        ({"input_scale": "unit"}, "input_scale"),
        ({"gate_mode": "tanh"}, "gate_mode"),
        ({"static_feature_mode": "add"}, "static_feature_mode"),
        ({"problem": "vrptw"}, "problem"),
        ({"embedding_dim": 0}, "embedding_dim"),
        ({"knn_k": 0}, "knn_k"),
        ({"z_dim": -1}, "z_dim"),
        ({"scorer": "linc", "candidate_features": ()}, "candidate_features"),
    ],
)
def test_model_config_rejects_bad_values_naming_the_field(overrides: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ModelConfig(**overrides)


def test_feature_names_are_checked_against_the_problem() -> None:
    with pytest.raises(ValueError, match=r"candidate_features: expected a cvrp feature .*'wait'"):
        ModelConfig.for_problem("cvrp", candidate_features=("travel", "wait"))
    with pytest.raises(ValueError, match=r"centred_features: expected a tsp feature .*'slack'"):
        ModelConfig.for_problem("tsp", centred_features=("travel", "slack"))
    # The problems' defaults are valid and the mlp scorer without a summary is accepted.
    for problem in BUILTIN_PROBLEMS:
        ModelConfig.for_problem(problem)
        ModelConfig.for_problem(problem, scorer="mlp", summary="none")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"advantage": "top1"}, "advantage"),
        ({"rollout_mask": "sparse"}, "rollout_mask"),
        ({"num_rollouts": 0}, "num_rollouts"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"tau_start": 0.1, "tau_end": 0.2}, "tau"),
        ({"num_rollouts": 1}, "num_rollouts"),
        ({"device": "tpu"}, "device"),
        ({"init": "xavier"}, "init"),
    ],
)
def test_train_config_rejects_bad_values_naming_the_field(overrides: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TrainConfig(**overrides)


def test_unknown_preset_and_unknown_keys_are_named() -> None:
    with pytest.raises(ConfigError, match=r"model.variant: expected one of \[.*\], got 'full_lnc'"):
        preset_configs("full_lnc")
    with pytest.raises(ConfigError, match=r"model: unknown key\(s\) \['embeding_dim'\]"):
        build(ModelConfig, {"embeding_dim": 64}, "model")
    rebuilt = build(ModelConfig, dataclasses.asdict(preset_configs("centered_mlp")[0]), "model")
    assert rebuilt == preset_configs("centered_mlp")[0]


@pytest.mark.parametrize(
    ("cls", "values", "message"),
    [
        # the allowed values come from the Literal annotation
        (
            ModelConfig,
            {"scorer": "attention"},
            "model.scorer: expected one of ('baseline', 'linc', 'mlp'), got 'attention'",
        ),
        (
            TrainConfig,
            {"init": "xavier"},
            "train.init: expected one of ('linc', 'reference'), got 'xavier'",
        ),
        (TrainConfig, {"epochs": "ten"}, "train.epochs: expected int, got 'ten'"),
        (
            TrainConfig,
            {"precision": "half"},
            "train.precision: expected one of ('auto', 'fp32', 'bf16', 'fp16'), got 'half'",
        ),
        (
            TrainConfig,
            {"precision": "fp16"},
            "train.precision: expected fp32, bf16 or auto on device cpu (fp16 needs CUDA), "
            "got 'fp16'",
        ),
        (TrainConfig, {"epochs": 2.5}, "train.epochs: expected int, got 2.5"),
        (
            ModelConfig,
            {"candidate_features": "travel"},
            "model.candidate_features: expected a list of str, got 'travel'",
        ),
        (TrainConfig, {"learning_rate": -0.5}, "train.learning_rate: expected > 0, got -0.5"),
    ],
)
def test_builder_names_section_key_and_value(cls: type, values: dict, message: str) -> None:
    section = "model" if cls is ModelConfig else "train"
    with pytest.raises(ConfigError) as err:
        build(cls, values, section)
    assert str(err.value) == message


def test_builder_converts_yaml_lists_and_integers() -> None:
    model = build(ModelConfig, {"candidate_features": ["travel", "angle"]}, "model")
    assert model.candidate_features == ("travel", "angle")
    train = build(TrainConfig, {"tau_start": 100, "tau_end": 1}, "train")
    assert (train.tau_start, type(train.tau_start)) == (100.0, float)
    assert literal_values(TrainConfig, "advantage") == ("group_mean", "soft_top1")


@pytest.mark.parametrize(
    ("cls", "field", "value", "expected"),
    [
        (TrainConfig, "learning_rate", math.inf, "a finite number"),
        (TrainConfig, "learning_rate", math.nan, "a finite number"),
        (TrainConfig, "weight_decay", math.inf, "a finite number"),
        (TrainConfig, "max_grad_norm", math.inf, "a finite number"),
        (TrainConfig, "budget_minutes", math.inf, "a finite number > 0 (or null: no budget)"),
        (ModelConfig, "logit_clip", math.inf, "a finite number > 0"),
        (ModelConfig, "gate_init_bias", -math.inf, "a finite number"),
        (ModelConfig, "gate_init_bias", math.nan, "a finite number"),
    ],
)
def test_numbers_that_must_be_finite_refuse_inf_and_nan(cls, field, value, expected) -> None:
    """Before: inf passed every bound (``> 0``, ``>= 0``) and failed a training epoch in."""
    with pytest.raises(ValueError) as err:
        cls(**{field: value})
    assert str(err.value) == f"{field}: expected {expected}, got {value!r}"


def test_model_sizes_are_bounded_and_the_largest_allowed_is_1_8_billion_weights() -> None:
    from linc_core.config import MAX_MODEL_SIZES
    from linc_core.model import LincPolicy

    for name, most in MAX_MODEL_SIZES.items():
        with pytest.raises(ValueError) as refused:
            ModelConfig(**{name: most + 1})
        assert str(refused.value) == (
            f"{name}: expected at most {most} (MAX_MODEL_SIZES: 1.8B weights), got {most + 1}"
        )
    import torch

    with torch.device("meta"):  # what the bounds allow, counted without memory
        largest = LincPolicy(ModelConfig(**MAX_MODEL_SIZES))
    weights = sum(p.numel() for p in largest.parameters())
    assert 1.7e9 < weights < 1.8e9, weights
    assert sum(p.numel() for p in LincPolicy(ModelConfig()).parameters()) < 2e6  # the paper's
