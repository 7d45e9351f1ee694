"""The Hydra tree, the typed platform config and the table arithmetic (no Ray needed)."""

from __future__ import annotations

import pytest
from ray import tune

from linc_core.presets import ABLATION_VARIANTS, PRESETS
from orchestration.config import ConfigError, PlatformConfig, with_dotted
from orchestration.experiments import ablation_table, aggregate_rows, search_space
from sweeps.compose import compose_mapping, load_platform_config


@pytest.mark.parametrize("preset", ["smoke", "cpu", "cpu-repro", "paper", "paper-train"])
def test_every_preset_composes_and_validates(preset: str, monkeypatch) -> None:
    monkeypatch.setenv("LINC_STORAGE", "s3://bucket/tune")
    config = load_platform_config([f"preset={preset}"])
    model, train = config.linc_configs()
    assert model.problem == config.task.problem == "cvrptw"
    assert train.epochs >= 1


def test_presets_carry_their_budgets() -> None:
    smoke = load_platform_config(["preset=smoke"])
    _, train = smoke.linc_configs()
    assert (smoke.task.num_customers, train.num_rollouts, train.batch_size, train.epochs) == (
        6,
        4,
        4,
        2,
    )
    assert smoke.ablation.variants == ("baseline", "full_linc")
    repro = load_platform_config(["preset=cpu-repro"])
    model, train = repro.linc_configs()
    # reference section 5: K=128, batch 56, 56 instances, tau 100 -> 0.01 over 15%, 50 epochs
    assert (train.num_rollouts, train.batch_size, train.instances_per_epoch) == (128, 56, 56)
    assert (train.tau_start, train.tau_end, train.tau_anneal_ratio) == (100.0, 0.01, 0.15)
    assert (train.best_only_start_ratio, train.epochs) == (0.15, 50)
    assert repro.data.source == repro.data.eval_source == "solomon50"
    assert (repro.data.eval_rollouts, repro.data.eval_augment) == (128, 8)
    assert model.embedding_dim == 128 and model.encoder_layers == 6
    assert train.init == "reference" and train.seed == 1234  # the reference curves' start
    assert smoke.linc_configs()[1].init == "linc"
    paper = load_platform_config(["preset=paper"])
    _, train = paper.linc_configs()
    assert (train.epochs, train.device, paper.cluster.gpus_per_trial) == (2000, "cuda", 1)


def test_default_ablation_is_the_papers_twelve_variants() -> None:
    config = load_platform_config([])
    assert config.ablation.variants == ABLATION_VARIANTS
    assert len(ABLATION_VARIANTS) == 12 and config.ablation.reference == "full_linc"


def test_variant_switches_win_over_protocol_settings() -> None:
    """cpu-repro sets best_only_start_ratio 0.15 for all; no_soft_top1 keeps its own 0.0."""
    full = load_platform_config(["preset=cpu-repro"])
    hard = load_platform_config(["preset=cpu-repro", "model.variant=no_soft_top1"])
    assert full.linc_configs()[1].best_only_start_ratio == 0.15
    _, train = hard.linc_configs()
    assert (train.best_only_start_ratio, train.advantage) == (0.0, "group_mean")
    # a size override applies to every variant; a switch the variant sets is kept
    no_gate = load_platform_config(
        ["preset=smoke", "model.variant=no_gateattn", "model.overrides.gated_attention=true"]
    )
    model, _ = no_gate.linc_configs()
    assert model.gated_attention is False and model.embedding_dim == 16


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("train.bogus=1", "train.bogus"),
        ("+colour.x=1", "unknown section(s) ['colour']"),
        ("+cluster.gpus=1", "cluster: unknown key(s) ['gpus']"),
        ("cluster.max_failures=-1", "cluster.max_failures: >= 0, got -1"),
        ("train.learning_rate=-0.5", "learning_rate: expected > 0, got -0.5"),
        ("data.eval_augment=3", "data.eval_augment: 1 or 8, got 3"),
        ("model.variant=fancy", "model.variant: one of"),
        ("data=dataset", "data.uri"),
        ("ablation.reference=no_local", "ablation.reference"),
        ("task.num_customers=1", "task.num_customers"),
        ("train.init=pretrained", "init: expected linc or reference, got 'pretrained'"),
        ("task=tsp train.init=reference", "train.init: not for this model"),
    ],
)
def test_bad_config_is_rejected_with_key_and_value(override: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_platform_config(["preset=smoke", *override.split()])
    assert fragment in str(err.value)


def test_search_space_validation_and_conversion() -> None:
    config = load_platform_config(["preset=smoke"])
    assert config.search is not None
    space = search_space(config.search)
    assert isinstance(space["train.learning_rate"], tune.search.sample.Float)
    assert space["train.learning_rate"].lower == 1e-5
    values = with_dotted(config.raw, {"search.space": {"lr": {"distribution": "uniform"}}})
    with pytest.raises(ConfigError, match="search.space.lr"):
        PlatformConfig.from_mapping(values)
    bad_log = {"train.learning_rate": {"distribution": "loguniform", "low": 0, "high": 1}}
    with pytest.raises(ConfigError, match="low > 0"):
        PlatformConfig.from_mapping(with_dotted(config.raw, {"search.space": bad_log}))


def test_free_form_mappings_merge_new_keys() -> None:
    config = load_platform_config(
        [
            "preset=smoke",
            "cluster.custom_resources={linc_worker: 1}",
            "search.space={train.weight_decay: {distribution: loguniform, low: 1e-7, high: 1e-5}}",
        ]
    )
    assert config.cluster.custom_resources == {"linc_worker": 1}
    assert config.search is not None
    assert set(config.search.space) == {
        "train.learning_rate",
        "train.tau_start",
        "train.weight_decay",
    }
    from orchestration.trainable import trial_resources

    assert trial_resources(config) == {"cpu": 1, "gpu": 0, "linc_worker": 1}


def test_relative_storage_becomes_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = load_platform_config(["preset=smoke", "cluster.storage=out"])
    assert config.cluster.storage == str(tmp_path / "out")
    assert config.tracking_uri() == f"sqlite:///{tmp_path / 'out' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert config.tracking_uri() == "http://127.0.0.1:5000"


def test_raw_mapping_round_trips() -> None:
    raw = compose_mapping(["preset=smoke"])
    config = PlatformConfig.from_mapping(raw)
    assert PlatformConfig.from_mapping(config.with_values()).linc_configs() == config.linc_configs()


def test_ablation_table_gaps_are_relative_to_full_linc() -> None:
    rows = [
        {"variant": "full_linc", "eval_cost": 100.0, "eval_infeasible": 0, "seconds": 10},
        {"variant": "full_linc", "eval_cost": 110.0, "eval_infeasible": 0, "seconds": 12},
        {"variant": "baseline", "eval_cost": 115.5, "eval_infeasible": 1, "seconds": 8},
    ]
    table = aggregate_rows(rows, "full_linc")
    assert [r["variant"] for r in table] == ["baseline", "full_linc"]  # preset order
    by_variant = {r["variant"]: r for r in table}
    assert by_variant["full_linc"]["obj"] == pytest.approx(105.0)
    assert by_variant["baseline"]["gap_pct"] == pytest.approx(10.0)
    assert by_variant["full_linc"]["gap_pct"] == pytest.approx(0.0)
    text = ablation_table(rows, "full_linc")
    assert f"| {PRESETS['baseline'].label} | 115.50 | +10.00 | 1 | 1 | 8 |" in text
    assert "Gap vs Full LINC (%)" in text
