"""Presets as data: a checkpoint's configs name their variant (``variant_of``), and a variant
registered from outside is checked before it is usable; the presets differ from full_linc in
exactly the fields of reference section 5, and every preset's rollouts are right: their costs
are the verified route lengths, their log-likelihoods the replayed sum of step log-probabilities."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from linc_core.config import config_differences
from linc_core.decoding import actions_to_solution
from linc_core.model import row_seeds, sample_z
from linc_core.presets import (
    ABLATION_VARIANTS,
    PRESETS,
    Preset,
    preset_configs,
    register_preset,
    variant_of,
)
from linc_core.problems import CONSEQUENCE_FEATURES
from linc_core.problems.spec import BUILTIN_PROBLEMS
from linc_core.utils.typed import ConfigError
from linc_core.verify import verify_instance
from tests.conftest import drive, make_instances, rollout_inputs, tiny_policy


@pytest.mark.parametrize("problem", ["cvrptw", "cvrp", "tsp"])
@pytest.mark.parametrize("name", list(PRESETS))
def test_a_variants_configs_name_it_whatever_their_sizes(name: str, problem: str) -> None:
    model, train = preset_configs(name, problem)
    # sizes and budgets are not switches: a small CPU run of a variant is still that variant
    model = dataclasses.replace(model, embedding_dim=32, encoder_layers=1, ff_hidden_dim=64)
    train = dataclasses.replace(train, epochs=3, batch_size=8, learning_rate=3e-4)
    found = variant_of(model, train)
    assert found is not None
    if problem != "cvrptw" and name in ("no_gateattn", "no_depth_mixer"):
        # CVRP's and TSP's LINC has neither: these coincide with full_linc, which names them
        assert found.name == "full_linc"
    else:
        assert found.name == name


def test_configs_of_no_variant_name_none() -> None:
    model, train = preset_configs("full_linc", "cvrptw")
    assert (
        variant_of(dataclasses.replace(model, summary="full_mean", centring="none"), train) is None
    )
    assert variant_of(model, dataclasses.replace(train, advantage="group_mean")) is None


def test_a_registered_variant_is_checked_and_then_named(monkeypatch) -> None:
    monkeypatch.setattr("linc_core.presets.PRESETS", dict(PRESETS))
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['scorr'\]"):
        register_preset(Preset("typo", "typo", model={"scorr": "linc"}))
    with pytest.raises(ConfigError, match="model.candidate_features"):
        register_preset(Preset("bad", "bad", model={"candidate_features": ("nope",)}))
    with pytest.raises(ConfigError, match="name is taken"):
        register_preset(Preset("full_linc", "another", model={"summary": "none"}))
    no_angle = {"candidate_features": ("travel", "wait", "slack", "arrival", "departure")}
    register_preset(Preset("no_angle", "w/o angle", model=no_angle))
    model, train = preset_configs("no_angle", "cvrptw")
    assert model.candidate_features == no_angle["candidate_features"]
    assert variant_of(model, train).label == "w/o angle"


# ---------------------------------------------------------------------------------------------
# exactly the fields of reference section 5, and each one runs
# ---------------------------------------------------------------------------------------------
# Fields in which each preset's (ModelConfig, TrainConfig) differ from full_linc's (CVRPTW).
EXPECTED_DIFFERENCES: dict[str, tuple[dict, dict]] = {
    "baseline": (
        {"scorer": "baseline", "gated_attention": False, "depth_mixer": False},
        {"advantage": "group_mean", "rollout_mask": "dense", "best_only_start_ratio": 0.0},
    ),
    "full_linc": ({}, {}),
    "no_local": ({"scorer": "baseline"}, {}),
    "naive_mlp": ({"scorer": "mlp", "centring": "none", "summary": "none"}, {}),
    "no_gateattn": ({"gated_attention": False}, {}),
    "no_depth_mixer": ({"depth_mixer": False}, {}),
    "no_soft_top1": ({}, {"advantage": "group_mean", "best_only_start_ratio": 0.0}),
    "group_mean": (
        {},
        {"advantage": "group_mean", "rollout_mask": "dense", "best_only_start_ratio": 0.0},
    ),
    "centered_mlp": (
        {
            "scorer": "mlp",
            "centred_features": ("travel", "wait", "slack", "arrival", "departure", "angle"),
            "depot_row": "zero",
            "summary": "none",
        },
        {},
    ),
    "raw_linear": ({"centring": "none"}, {}),
    "no_step_summary": ({"summary": "none"}, {}),
    "full_mu_summary": ({"summary": "full_mean"}, {}),
    "polynet": (
        {
            "scorer": "baseline",
            "gated_attention": False,
            "depth_mixer": False,
            "node_static_features": (),
            "input_scale": "horizon",
        },
        {"advantage": "group_mean", "normalise_advantage": False, "best_only_start_ratio": 0.0},
    ),
    "pomo": (
        {
            "scorer": "baseline",
            "gated_attention": False,
            "depth_mixer": False,
            "node_static_features": (),
            "input_scale": "horizon",
            "z_dim": 0,
        },
        {
            "advantage": "group_mean",
            "normalise_advantage": False,
            "rollout_mask": "dense",
            "best_only_start_ratio": 0.0,
            "multi_start": True,
        },
    ),
}


def test_preset_names_and_order() -> None:
    """The ablation list is the paper's table: the first twelve presets, in their order."""
    assert len(ABLATION_VARIANTS) == 12 and tuple(PRESETS)[:12] == ABLATION_VARIANTS
    assert ABLATION_VARIANTS[:2] == ("baseline", "full_linc")
    assert ABLATION_VARIANTS[-1] == "full_mu_summary"
    assert set(PRESETS) == set(EXPECTED_DIFFERENCES) == {*ABLATION_VARIANTS, "polynet", "pomo"}


def test_full_linc_is_the_reference_cvrptw_model() -> None:
    """Reference sections 3 and 4: the common settings every variant is measured against."""
    model, train = preset_configs("full_linc")
    assert (model.embedding_dim, model.encoder_layers, model.num_heads) == (128, 6, 8)
    assert (model.ff_hidden_dim, model.z_dim, model.poly_hidden_dim) == (512, 16, 256)
    assert model.logit_clip == 10.0 and model.input_scale == "grid"
    assert model.candidate_features == CONSEQUENCE_FEATURES["cvrptw"]
    assert model.effective_centred == ("travel", "wait", "slack", "arrival", "departure")
    assert model.node_static_features == ("knn_nearest", "knn_mean", "knn_min")
    assert model.gated_attention and model.gate_mode == "centered_sigmoid"
    assert model.gate_init_bias == 2.0 and model.depth_mixer
    assert (model.scorer, model.summary, model.depot_row) == ("linc", "partial", "centred")
    assert model.scorer_hidden_dim == 128 and model.phi_bias
    assert model.summary_stats == (("mean", "travel"), ("mean", "wait"), ("min", "slack"))
    assert (train.advantage, train.rollout_mask) == ("soft_top1", "best_only")
    assert train.best_only_start_ratio == 0.25 and train.normalise_advantage
    assert (train.tau_start, train.tau_end) == (4.0, 0.25)
    assert train.tau_anneal_ratio == pytest.approx(1 / 300)
    assert (train.num_rollouts, train.batch_size, train.instances_per_epoch) == (128, 128, 6400)
    assert (train.learning_rate, train.weight_decay, train.max_grad_norm) == (1e-4, 1e-6, 0.0)
    assert not train.multi_start


@pytest.mark.parametrize("preset", list(EXPECTED_DIFFERENCES))
def test_preset_differs_from_full_linc_in_exactly_the_listed_fields(preset: str) -> None:
    base_model, base_train = preset_configs("full_linc")
    model, train = preset_configs(preset)
    want_model, want_train = EXPECTED_DIFFERENCES[preset]
    assert {key: b for key, (_, b) in config_differences(base_model, model).items()} == want_model
    assert {key: b for key, (_, b) in config_differences(base_train, train).items()} == want_train
    # On CVRP and TSP the same overrides apply to that problem's LINC model (which already
    # has no GateAttn or Depth Mixer); feature lists become the problem's own.
    for problem in ("cvrp", "tsp"):
        other_base, other_base_train = preset_configs("full_linc", problem)
        other, other_train = preset_configs(preset, problem)
        overrides = dict(want_model)
        if "centred_features" in overrides:
            overrides["centred_features"] = CONSEQUENCE_FEATURES[problem]
        expected = {k: v for k, v in overrides.items() if getattr(other_base, k) != v}
        got = {key: b for key, (_, b) in config_differences(other_base, other).items()}
        assert got == expected, problem
        assert config_differences(other_base_train, other_train) == config_differences(
            base_train, train
        )


@pytest.mark.parametrize("problem", BUILTIN_PROBLEMS)
@pytest.mark.parametrize("preset", list(PRESETS))
def test_preset_builds_and_rolls_out(preset: str, problem: str) -> None:
    """Tiny instances (n = 6, K = 4): every rollout visits each customer exactly once, its cost
    is the verified length of its routes, and its log-likelihood is the sum of the step
    log-probabilities of its actions, replayed decision by decision."""
    batch, k, size = 2, 4, 6
    policy = tiny_policy(preset, problem, seed=3)
    instance = make_instances(problem, batch, size, seed=21).to(dtype=torch.float32)
    z, starts = rollout_inputs(policy, batch, k, seed=8)
    if problem == "tsp" and policy.config.z_dim > 0:
        starts = None  # the default: every tour starts at city 0
    with torch.no_grad():
        result = policy.rollout(instance, k, z=z, starts=starts, sample_seeds=row_seeds(1, batch))
    assert result.actions.shape[:2] == (batch, k)
    customers = range(1, size + 1) if problem != "tsp" else range(size)
    for row in result.actions.flatten(0, 1).tolist():
        visited = [node for node in row if node != 0] if problem != "tsp" else row[:size]
        assert sorted(visited) == list(customers)
    for b in range(batch):
        for j in range(k):
            solution = actions_to_solution(result.actions[b, j], problem, instance.num_nodes)
            checked = verify_instance(instance, b, solution, convention="exact")
            assert float(result.cost[b, j]) == pytest.approx(checked.cost, rel=1e-5)
    if starts is not None and problem != "tsp":
        assert torch.equal(result.actions[..., 0], starts)

    forced = starts
    if problem == "tsp" and starts is None:
        forced = torch.zeros(batch, k, dtype=torch.long)
    prefix = 0 if forced is None else 1  # a forced first move is not a decision
    decisions = result.actions[..., prefix:]  # [B, K, T]
    with torch.no_grad():
        records = drive(policy, instance, k, z, forced, lambda t, _lp, _mask: decisions[..., t])
    assert len(records) == decisions.shape[-1]
    replayed = sum(
        log_probs.gather(-1, decisions[..., t, None]).squeeze(-1)
        for t, (_, log_probs, _) in enumerate(records)
    )
    torch.testing.assert_close(result.log_likelihood, replayed, rtol=1e-5, atol=1e-5)


def test_z_is_required_when_the_model_has_z() -> None:
    policy = tiny_policy("full_linc", "cvrptw")
    instance = make_instances("cvrptw", 1, 5, seed=0).to(dtype=torch.float32)
    with pytest.raises(ValueError, match="z vectors"):
        policy.rollout(instance, 2, decoding="greedy")
    with pytest.raises(ValueError, match="needs sample_seeds"):
        policy.rollout(instance, 2, z=sample_z(row_seeds(0, 1), 2, 16))
    with pytest.raises(ValueError, match="model is for cvrptw"):
        policy.rollout(make_instances("tsp", 1, 5, seed=0).to(dtype=torch.float32), 2)
