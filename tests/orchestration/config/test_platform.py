"""The Hydra tree, the typed platform config, the trial plan and the table arithmetic."""

from __future__ import annotations

import pytest

from linc_core.commands.train import build_parser, plan_from_args
from linc_core.config import unused_fields
from linc_core.presets import ABLATION_VARIANTS, PRESETS
from linc_core.train.budget import UNBOUNDED_EPOCHS
from linc_core.utils.typed import ConfigError
from orchestration.config.platform import PlatformConfig
from orchestration.report.tables import ablation_table, aggregate_rows
from orchestration.tracking.store import resolve_tracking_uri
from orchestration.trial.plan import TrialPlan
from orchestration.trial.resources import memory_bytes, trial_resources
from sweeps.cli import run_cli
from sweeps.compose import compose_mapping, load_platform_config


@pytest.mark.parametrize("preset", ["smoke", "cpu", "cpu-repro", "paper", "paper-train"])
def test_every_preset_composes_and_validates(preset: str, monkeypatch) -> None:
    monkeypatch.setenv("LINC_STORAGE", "s3://bucket/tune")
    config = load_platform_config([f"preset={preset}"])
    model, train = config.run.model, config.run.train
    assert model.problem == config.run.data.problem == "cvrptw"
    assert train.epochs >= 1


def test_presets_carry_their_budgets() -> None:
    smoke = load_platform_config(["preset=smoke"])
    train = smoke.run.train
    assert (smoke.run.data.num_customers, train.num_rollouts, train.batch_size, train.epochs) == (
        6,
        4,
        4,
        2,
    )
    assert smoke.ablation.variants == ("baseline", "full_linc")
    repro = load_platform_config(["preset=cpu-repro"])
    model, train = repro.run.model, repro.run.train
    # reference section 5: K=128, batch 56, 56 instances, tau 100 -> 0.01 over 15%, 50 epochs
    assert (train.num_rollouts, train.batch_size, train.instances_per_epoch) == (128, 56, 56)
    assert (train.tau_start, train.tau_end, train.tau_anneal_ratio) == (100.0, 0.01, 0.15)
    assert (train.best_only_start_ratio, train.epochs) == (0.15, 50)
    assert repro.run.data.source == repro.run.evaluation.source == "solomon50"
    assert (repro.run.evaluation.rollouts, repro.run.evaluation.augment) == (128, 8)
    assert repro.run.validation.source == "none" and repro.run.protocol == "ablation"
    assert model.embedding_dim == 128 and model.encoder_layers == 6
    assert train.init == "reference" and train.seed == 1234  # the reference curves' start
    assert smoke.run.train.init == "linc"
    paper = load_platform_config(["preset=paper"])
    train = paper.run.train
    assert (train.epochs, train.device, paper.cluster.gpus_per_trial) == (2000, "cuda", 1)


@pytest.mark.parametrize(
    ("preset", "problem", "benchmark", "seeds"),
    [
        ("main-cpu", "cvrptw", "solomon100", (1, 2, 3)),
        ("main-cpu-cvrp", "cvrp", "cvrplib_x", (1,)),
        ("main-cpu-tsp", "tsp", "tsplib", (1,)),
    ],
)
def test_main_table_presets_train_the_three_models_an_hour_each(
    preset: str, problem: str, benchmark: str, seeds: tuple[int, ...]
) -> None:
    """The CVRP and TSP main tables are main-cpu's on their problem and benchmark, one seed,
    evaluated on the instances of at most 200 customers (cities)."""
    config = load_platform_config([f"preset={preset}"])
    run = config.run
    assert (run.model.problem, run.data.problem, run.data.num_customers) == (problem, problem, 50)
    assert (run.train.budget_minutes, run.train.epochs) == (60.0, UNBOUNDED_EPOCHS)
    # the step its cost estimate measured (docs/results.md), not the paper's B=128 K=128: a
    # first main-cpu run trained at that by default, 10 steps per epoch
    assert (run.train.batch_size, run.train.num_rollouts) == (32, 64)
    assert run.train.budget_clock == "cpu"  # equal compute on cores shared with other work
    assert (config.ablation.variants, config.ablation.seeds) == (
        ("full_linc", "polynet", "pomo"),
        seeds,
    )
    evaluation = run.evaluation
    assert (evaluation.source, evaluation.uri) == ("benchmark", benchmark)
    assert (evaluation.rollouts, evaluation.augment, evaluation.decoding) == (800, 8, "sampling")
    assert evaluation.also == ("sgbs",)
    assert evaluation.max_customers == (None if problem == "cvrptw" else 200)


def test_cpu_repro_runs_linc_trains_ablation_protocol() -> None:
    """One definition: the sweep's run is linc-train --protocol ablation's (but for the seed
    rule of the batch shuffle, which each entry point documents)."""
    repro = load_platform_config(["preset=cpu-repro", "model.variant=baseline"]).run
    args = ["--protocol", "ablation", "--epochs", "50", "--preset", "baseline"]
    cli = plan_from_args(build_parser().parse_args(args))
    assert (repro.model, repro.train) == (cli.model, cli.train)
    assert (
        (repro.protocol, repro.data.source)
        == (cli.protocol, cli.data.source)
        == (
            "ablation",
            "solomon50",
        )
    )


def test_trial_params_are_the_effective_settings() -> None:
    """A trial logs what it runs: every switch of its variant, the real learning rate, epochs,
    batch, K and data id; never a null override slot of the composed config."""
    config = load_platform_config(["preset=smoke"])
    raw_nulls = [k for k, v in config.raw["model"]["overrides"].items() if v is None]
    assert raw_nulls  # the composed config does have null slots
    params = TrialPlan.from_config(config).params("generated:cvrptw6:seed0")
    assert "None" not in params.values() and not any("overrides" in key for key in params)
    assert params["train.learning_rate"] == "0.0001" and params["train.epochs"] == "2"
    assert (params["train.batch_size"], params["train.num_rollouts"]) == ("4", "4")
    assert params["model.embedding_dim"] == "16" and params["model.scorer"] == "linc"
    assert (params["variant"], params["data.id"]) == ("full_linc", "generated:cvrptw6:seed0")
    assert params["resources.cpus_per_trial"] == "1.0"


def test_two_variants_trial_params_differ_exactly_in_the_variants_switches() -> None:
    """... and in the settings the variant's switches stop reading, which it does not log."""
    base = load_platform_config(["preset=smoke"])
    full_plan = TrialPlan.from_config(base)
    full = full_plan.params()
    for variant in ("baseline", "no_gateattn", "no_soft_top1"):
        plan = TrialPlan.from_mapping(base.with_values(**{"model.variant": variant}))
        other = plan.params()
        shared = full.keys() & other.keys()
        differing = {key for key in shared if full[key] != other[key]}
        preset = PRESETS[variant]
        switches = {f"model.{k}" for k in preset.model} | {f"train.{k}" for k in preset.train}
        assert differing == ({"variant"} | switches) & shared, variant
        unread = {
            f"{section}.{name}"
            for section, mine, theirs in (
                ("model", plan.run.model, full_plan.run.model),
                ("train", plan.run.train, full_plan.run.train),
            )
            for name in unused_fields(mine) - unused_fields(theirs)
        }
        assert full.keys() - other.keys() == unread, variant
        assert other.keys() - full.keys() == set(), variant


def test_cli_prints_config_or_plan_and_refuses_bad_config(capsys) -> None:
    assert run_cli("linc-x", ["preset=cpu-repro", "--cfg", "job"], lambda c: 1) == 0
    job = capsys.readouterr().out
    assert "protocol: ablation" in job and "variants: paper" in job
    assert run_cli("linc-x", ["preset=cpu-repro", "--cfg", "plan"], lambda c: 1) == 0
    plan = capsys.readouterr().out
    assert "tau_start: 100.0" in plan and "num_rollouts: 128" in plan and "epochs: 50" in plan
    assert run_cli("linc-x", ["train.learning_rate=-1"], lambda c: 1) == 2
    err = capsys.readouterr().err
    assert err == "linc-x: invalid config: train.learning_rate: expected > 0, got -1.0\n"
    assert run_cli("linc-x", ["--cfg", "all"], lambda c: 1) == 2


def test_default_ablation_is_the_papers_twelve_variants() -> None:
    config = load_platform_config([])
    assert compose_mapping([])["ablation"]["variants"] == "paper"  # named, not listed again
    assert config.ablation.variants == ABLATION_VARIANTS
    assert len(ABLATION_VARIANTS) == 12 and config.ablation.compare_to == "full_linc"


def test_variant_switches_win_over_protocol_settings() -> None:
    """cpu-repro sets best_only_start_ratio 0.15 for all; no_soft_top1 keeps its own 0.0."""
    full = load_platform_config(["preset=cpu-repro"])
    hard = load_platform_config(["preset=cpu-repro", "model.variant=no_soft_top1"])
    assert full.run.train.best_only_start_ratio == 0.15
    train = hard.run.train
    assert (train.best_only_start_ratio, train.advantage) == (0.0, "group_mean")
    # a size override applies to every variant; a switch the variant sets is kept
    no_gate = load_platform_config(
        ["preset=smoke", "model.variant=no_gateattn", "model.overrides.gated_attention=true"]
    )
    model = no_gate.run.model
    assert model.gated_attention is False and model.embedding_dim == 16


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("train.bogus=1", "train.bogus"),
        ("+train.bogus=1", "train: unknown key(s) ['bogus']"),
        ("+colour.x=1", "unknown section(s) ['colour']"),
        ("+cluster.gpus=1", "cluster: unknown key(s) ['gpus']"),
        ("cluster.max_failures=-1", "cluster.max_failures: expected >= 0, got -1"),
        ("train.learning_rate=-0.5", "train.learning_rate: expected > 0, got -0.5"),
        ("train.epochs=ten", "train.epochs: expected int, got 'ten'"),
        ("data.eval_augment=3", "data.eval_augment: expected one of (1, 8), got 3"),
        (
            "data.eval_decoding=beam",
            "data.eval_decoding: expected one of ('greedy', 'sampling', 'sgbs')",
        ),
        ("model.variant=fancy", "model.variant: expected one of"),
        ("model.overrides.scorer=attention", "model.overrides.scorer: expected one of"),
        ("data=dataset", "data.uri"),
        ("ablation.compare_to=no_local", "ablation.compare_to"),
        ("ablation.variants=all", "ablation.variants: expected a list of variants or one of"),
        ("task.num_customers=1", "task.num_customers: expected 2 to 100000, got 1"),
        ("data=solomon50 task=tsp", "task.problem: expected cvrptw for the solomon50 set"),
        ("train.protocol=ablation", "train.protocol: 'ablation' trains on data source"),
        ("train.protocol=paper", "train.protocol: expected one of ['ablation', 'generated']"),
        (
            "train.init=pretrained",
            "train.init: expected one of ('linc', 'reference'), got 'pretrained'",
        ),
        ("task=tsp train.init=reference", "train.init: 'reference' is not for this model"),
    ],
)
def test_bad_config_is_rejected_with_key_and_value(override: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_platform_config(["preset=smoke", *override.split()])
    assert fragment in str(err.value)


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
    memory = memory_bytes(config.cluster, config.run)
    assert trial_resources(config.cluster, config.run) == {
        "cpu": 1,
        "gpu": 0,
        "memory": memory,
        "linc_worker": 1,
    }


def test_relative_storage_becomes_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = load_platform_config(["preset=smoke", "cluster.storage=out"])
    assert config.cluster.storage == str(tmp_path / "out")
    plan = TrialPlan.from_config(config)
    assert plan.tracking.uri == f"sqlite:///{tmp_path / 'out' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert TrialPlan.from_config(config).tracking.uri == "http://127.0.0.1:5000"
    assert resolve_tracking_uri("file:///x", tmp_path) == "file:///x"
    remote = load_platform_config(["preset=smoke", "cluster.storage=s3://b/p"])
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    with pytest.raises(ConfigError, match="tracking.uri: required when cluster.storage is remote"):
        TrialPlan.from_config(remote)


def test_raw_mapping_round_trips() -> None:
    raw = compose_mapping(["preset=smoke"])
    config = PlatformConfig.from_mapping(raw)
    assert PlatformConfig.from_mapping(config.with_values()).run == config.run


def test_ablation_table_gaps_are_relative_to_full_linc() -> None:
    rows = [
        {"variant": "full_linc", "eval_cost": 100.0, "eval_infeasible": 0, "seconds": 10},
        {"variant": "full_linc", "eval_cost": 110.0, "eval_infeasible": 0, "seconds": 12},
        {"variant": "baseline", "eval_cost": 115.5, "eval_infeasible": 1, "seconds": 8},
    ]
    table = aggregate_rows(rows, compare_to="full_linc")
    assert [r["variant"] for r in table] == ["baseline", "full_linc"]  # preset order
    by_variant = {r["variant"]: r for r in table}
    assert by_variant["full_linc"]["obj"] == pytest.approx(105.0)
    assert by_variant["baseline"]["gap_pct"] == pytest.approx(10.0)
    assert by_variant["full_linc"]["gap_pct"] == pytest.approx(0.0)
    text = ablation_table(rows, "full_linc")
    assert f"| {PRESETS['baseline'].label} | 115.50 | +10.00 | 1 | 1 | 8 |" in text
    assert "Gap vs Full LINC (%)" in text


def test_a_preset_evaluation_set_of_another_problem_follows_the_task() -> None:
    """The default preset (cpu) evaluates on Solomon-50, a CVRPTW set: under task=cvrp, where
    the user did not choose the evaluation, it is the task's validation set, in the raw
    mapping too (the trials resolve it again, without the command line)."""
    from orchestration.config.platform import override_keys

    overrides = ["model.variant=no_gateattn", "train.learning_rate=3e-4", "task=cvrp"]
    raw = compose_mapping(overrides)
    assert raw["data"]["eval_source"] == "solomon50"  # the preset's
    config = PlatformConfig.from_mapping(raw, chosen=override_keys(overrides))
    assert (config.run.data.problem, config.run.evaluation.source) == ("cvrp", "validation")
    assert config.raw["data"]["eval_source"] == "validation"
    assert PlatformConfig.from_mapping(config.raw).run == config.run  # as a trial resolves it
    same = load_platform_config(["task=cvrptw"])  # its own problem: kept
    assert same.run.evaluation.source == "solomon50"
    # the commands' composition tells the two apart: the README's example evaluates on CVRP
    assert load_platform_config(overrides).run.evaluation.source == "validation"
    with pytest.raises(ConfigError, match="data.eval_source: expected a set of the task's cvrp"):
        load_platform_config(["task=cvrp", "data.eval_source=solomon50"])


@pytest.mark.parametrize("chosen", [["task=cvrp", "data.eval_source=solomon50"], None])
def test_a_chosen_evaluation_set_of_another_problem_is_refused(chosen) -> None:
    """Chosen on the command line, or by a caller that cannot tell (None): one line naming the
    key, the value and what would do, not a trial that trains and then fails to evaluate."""
    from orchestration.config.platform import override_keys

    raw = compose_mapping(["task=tsp", "data.eval_source=solomon50"])
    keys = None if chosen is None else override_keys(["++data.eval_source=solomon50"])
    with pytest.raises(ConfigError) as err:
        PlatformConfig.from_mapping(raw, chosen=keys)
    assert str(err.value) == (
        "data.eval_source: expected a set of the task's tsp instances (solomon50 holds cvrptw "
        "ones): validation, dataset, benchmark with data.eval_uri, or none, got 'solomon50'"
    )


def test_override_keys_name_what_the_command_line_set() -> None:
    from orchestration.config.platform import override_keys

    line = ["task=cvrp", "+data.eval_source=x", "~fault.stall_at_epoch", "++a.b=[1,2]", "x"]
    assert override_keys(line) == {"task", "data.eval_source", "a.b"}


def test_the_config_tree_lists_every_training_setting() -> None:
    """``sweeps/conf/train/default.yaml`` is how a TrainConfig field reaches the command line
    (``train.KEY=VALUE``): a field it leaves out is an "unknown key" there (``replay_chunk``
    was)."""
    import dataclasses

    from linc_core.config import TrainConfig

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    listed = set(compose_mapping([])["train"])
    assert listed - {"protocol"} == fields
    chunked = load_platform_config(["preset=smoke", "train.replay_chunk=4"])
    assert chunked.run.train.replay_chunk == 4
