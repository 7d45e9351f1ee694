"""The run plan: variants, protocols and explicit settings resolved once into effective configs,
and the functions that realise a plan's data (no Ray, no platform)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from linc_core.commands.train import build_parser, plan_from_args
from linc_core.config import TrainConfig
from linc_core.presets import ABLATION_VARIANTS, PRESETS
from linc_core.runs.plan import (
    DataSource,
    EvaluationSource,
    data_id,
    evaluation_set,
    resolve_run,
    training_data,
    validation_set,
)
from linc_core.runs.protocols import PROTOCOLS, protocol_named, variant_list
from linc_core.train.data import GeneratedData, generate
from linc_core.utils.seeding import derive_seed
from linc_core.utils.typed import ConfigError
from orchestration.tracking.params import flatten_params

SOLOMON = DataSource("solomon50", "cvrptw", 50, seed=7)
GENERATED = DataSource("generated", "cvrptw", 6, seed=5)


def flat_settings(plan) -> dict[str, str]:
    return flatten_params(plan.settings())


@pytest.mark.parametrize("variant", ABLATION_VARIANTS[2:])
def test_two_variants_differ_exactly_in_the_variants_switches(variant: str) -> None:
    """Under the ablation protocol, a variant's effective settings differ from full_linc's in
    the variant's name and its own switches, nothing else (the protocol applies to both)."""
    full = resolve_run("full_linc", SOLOMON, protocol="ablation", train={"epochs": 3})
    other = resolve_run(variant, SOLOMON, protocol="ablation", train={"epochs": 3})
    a, b = flat_settings(full), flat_settings(other)
    differing = {key for key in a.keys() | b.keys() if a.get(key) != b.get(key)}
    preset = PRESETS[variant]
    switches = {f"model.{k}" for k in preset.model} | {f"train.{k}" for k in preset.train}
    assert differing == {"variant"} | switches
    assert other.train.epochs == 3 and other.train.num_rollouts == 128


def test_ablation_protocol_is_one_definition() -> None:
    """The numbers of reference section 5, read by linc-train and the sweeps alike."""
    protocol = protocol_named("ablation")
    plan = resolve_run("full_linc", SOLOMON, protocol="ablation")
    train = plan.train
    assert protocol.data == "solomon50" and protocol.train["epochs"] == 2000
    assert (train.num_rollouts, train.batch_size, train.instances_per_epoch) == (128, 56, 56)
    assert (train.tau_start, train.tau_end, train.tau_anneal_ratio) == (100.0, 0.01, 0.15)
    assert (train.best_only_start_ratio, train.init, train.epochs) == (0.15, "reference", 2000)
    # a variant's own switch wins over the protocol: no_soft_top1 is best-only from step 0
    assert (
        resolve_run("no_soft_top1", SOLOMON, protocol="ablation").train.best_only_start_ratio == 0
    )
    # an explicit setting wins over the protocol
    explicit = resolve_run("full_linc", SOLOMON, protocol="ablation", train={"tau_start": 50})
    assert explicit.train.tau_start == 50.0
    assert variant_list("paper") == ABLATION_VARIANTS
    assert set(PROTOCOLS) == {"generated", "ablation"}


def test_linc_train_flags_resolve_to_the_protocols_plan() -> None:
    args = build_parser().parse_args(["--protocol", "ablation", "--epochs", "2", "--seed", "9"])
    plan = plan_from_args(args)
    expected = resolve_run(
        "full_linc",
        DataSource("solomon50", "cvrptw", 20, derive_seed(9, "data")),
        protocol="ablation",
        train={"epochs": 2, "seed": 9, "device": "cpu", "validation_every": 1},
        validation="training_set",
    )
    assert plan == expected
    assert plan.validation.source == "training_set" and plan.train.validation_size == 0
    generated = plan_from_args(build_parser().parse_args(["--size", "10", "--lr", "3e-4"]))
    assert (generated.train.num_rollouts, generated.train.epochs) == (64, 100)
    assert generated.train.learning_rate == 3e-4 and generated.data.num_customers == 10
    assert (generated.validation.size, generated.validation.seed) == (
        64,
        derive_seed(1234, "validation-set"),
    )


def test_protocol_reference_start_only_where_the_reference_builds_the_model() -> None:
    pomo = resolve_run("pomo", SOLOMON, protocol="ablation")
    assert pomo.train.init == "linc"  # the reference has no z-less CVRPTW model
    assert pomo.train.num_rollouts == 50  # POMO starts: at most one per customer
    with pytest.raises(ConfigError, match="train.init: 'reference' is not for this model"):
        resolve_run("pomo", SOLOMON, protocol="ablation", train={"init": "reference"})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"protocol": "ablation"}, "train.protocol: 'ablation' trains on data source 'solomon50'"),
        ({"protocol": "paper"}, "train.protocol: expected one of ['ablation', 'generated']"),
        ({"train": {"bogus": 1}}, "train: unknown key(s) ['bogus']"),
        ({"model": {"problem": "tsp"}}, "model.overrides: unknown key(s) ['problem']"),
        ({"model": {"scorer": "attention"}}, "model.overrides.scorer: expected one of"),
        ({"train": {"learning_rate": -1}}, "train.learning_rate: expected > 0, got -1.0"),
        (
            {"evaluation": EvaluationSource("validation"), "train": {"validation_size": 0}},
            "train.validation_size: expected > 0",
        ),
    ],
)
def test_bad_settings_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_run("full_linc", GENERATED, **kwargs)
    assert message in str(err.value)


def test_variant_list_names_or_lists() -> None:
    assert variant_list(["baseline", "full_linc"]) == ("baseline", "full_linc")
    with pytest.raises(ConfigError, match="ablation.variants: expected a list of variants"):
        variant_list("all")
    with pytest.raises(ConfigError, match="got 'fancy'"):
        variant_list(["fancy"])
    with pytest.raises(ConfigError, match=r"got 'fullinc' \(did you mean 'full_linc'\?\)$"):
        variant_list(["baseline", "fullinc"])
    with pytest.raises(ConfigError, match="distinct"):
        variant_list(["baseline", "baseline"])


def test_generated_plan_realises_seeded_batches_and_validation() -> None:
    plan = resolve_run(
        "full_linc",
        GENERATED,
        train={"batch_size": 4, "instances_per_epoch": 8, "validation_size": 3},
        validation_seed=11,
        evaluation=EvaluationSource("validation"),
    )
    data = training_data(plan)
    expected = GeneratedData("cvrptw", 6, 4, 8, seed=5)
    assert data == expected and data.batches_per_epoch == 2
    assert data_id(plan) == "generated:cvrptw6:seed5"
    validation = validation_set(plan, data)
    assert validation is not None and validation.batch_size == 3
    torch.testing.assert_close(validation.locs, generate("cvrptw", 3, 6, 11).locs)
    evaluated = evaluation_set(plan, validation)
    assert evaluated is not None and evaluated.name == "validation:cvrptw6"
    assert [i.names for i in evaluated.instances] == [("row0",), ("row1",), ("row2",)]
    torch.testing.assert_close(evaluated.instances[2].locs, validation.locs[2:3])
    assert evaluated.convention == "exact" and evaluated.bks == {}
    none = resolve_run("full_linc", GENERATED, train={"validation_size": 0})
    assert validation_set(none, training_data(none)) is None and evaluation_set(none, None) is None


def test_solomon50_plan_trains_and_validates_on_the_56_instances(data_dir) -> None:
    plan = resolve_run("full_linc", SOLOMON, protocol="ablation", validation="training_set")
    data = training_data(plan)
    validation = validation_set(plan, data)
    assert data_id(plan) == "solomon100-first50" and data.batches_per_epoch == 1
    assert validation is not None and (validation.batch_size, validation.num_customers) == (56, 50)
    assert data.batch(0, 0).batch_size == 56 and validation.locs.dtype == torch.float32


def test_benchmark_evaluation_reads_the_set_with_its_convention_and_best_known_values(
    data_dir,
) -> None:
    source = EvaluationSource("benchmark", "solomon100", decoding="sampling", also=("sgbs",))
    plan = resolve_run("full_linc", GENERATED, train={"validation_size": 0}, evaluation=source)
    evaluated = evaluation_set(plan, None)
    assert evaluated is not None and len(evaluated.instances) == 56
    assert evaluated.convention == "dimacs" and evaluated.bks["C101"] == pytest.approx(827.3)
    assert source.decodings == ("sampling", "sgbs")
    few = dataclasses.replace(source, limit=3)
    evaluated = evaluation_set(dataclasses.replace(plan, evaluation=few), None)
    assert [i.names[0] for i in evaluated.instances] == ["C101", "C102", "C103"]
    with pytest.raises(ValueError, match=r"also: .*decodings other than 'sampling'"):
        EvaluationSource("benchmark", "solomon100", decoding="sampling", also=("sampling",))
    with pytest.raises(ValueError, match="uri: .*benchmark source"):
        EvaluationSource("benchmark")


def test_settings_hold_every_effective_field() -> None:
    plan = resolve_run("no_gateattn", GENERATED, train={"epochs": 4})
    flat = flat_settings(plan)
    assert flat["model.gated_attention"] == "False" and flat["train.epochs"] == "4"
    assert {f"train.{name}" for name in TrainConfig.__dataclass_fields__} <= set(flat)


def test_unused_fields_are_the_settings_a_runs_switches_never_read() -> None:
    from linc_core.config import ModelConfig, TrainConfig, unused_fields

    assert unused_fields(ModelConfig()) == {"depot_row"}  # full LINC reads all but that
    mlp = ModelConfig(scorer="mlp", centring="none", summary="none")
    assert unused_fields(mlp) == {"summary", "phi_bias", "centred_features"}
    plain = ModelConfig(summary="none", gated_attention=False, z_dim=0, node_static_features=())
    assert unused_fields(plain) == {
        "depot_row", "scorer_hidden_dim", "gate_mode", "gate_init_bias", "poly_hidden_dim",
        "knn_k", "static_feature_mode",
    }  # fmt: skip
    dense = TrainConfig(advantage="group_mean", rollout_mask="dense")
    assert unused_fields(dense) == {
        "tau_start", "tau_end", "tau_anneal_ratio", "best_only_start_ratio"
    }  # fmt: skip
    assert unused_fields(TrainConfig()) == frozenset()


def test_a_generated_cvrp_size_without_a_standard_capacity_is_refused_when_planned() -> None:
    """A sweep of such a size once failed every trial three times in the generator: the
    problem's spec says which sizes its generator makes (``ProblemSpec.generated_sizes``)."""
    with pytest.raises(ValueError, match=r"num_customers: expected a size cvrp's generator "
                       r"makes, one of \[10, 15, 20, .*\], got 6"):  # fmt: skip
        DataSource("generated", "cvrp", 6)
    assert DataSource("generated", "cvrp", 10).num_customers == 10
    assert DataSource("generated", "tsp", 6).num_customers == 6


@pytest.mark.parametrize("customers", [1, 100_001, 99_999_999_999_999_999_999])
def test_a_training_size_outside_2_to_100000_customers_is_refused(customers: int) -> None:
    expected = f"num_customers: expected 2 to 100000, got {customers}"
    with pytest.raises(ValueError, match=rf"^{expected}$"):
        DataSource("dataset", "cvrptw", customers, uri="data/x")
    assert DataSource("dataset", "cvrptw", 100_000, uri="data/x").num_customers == 100_000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limit": -3}, "limit: expected >= 1 or null, got -3"),
        ({"max_customers": 0}, "max_customers: expected >= 1 or null, got 0"),
        ({"also": ("greedy",)}, "also: expected decodings other than 'greedy', each once"),
    ],
)
def test_an_evaluation_refuses_its_bad_settings(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}"):
        EvaluationSource("validation", **kwargs)
