"""The sweep sections of a platform config (``orchestration.config.sweep_sections``): a
search's space and metrics, and the names of sweeps and registered models, each refused in one
line naming its key and value."""

from __future__ import annotations

import pytest
from ray import tune

from linc_core.utils.typed import ConfigError
from orchestration.config.platform import PlatformConfig, with_dotted
from orchestration.experiment.search import search_space
from sweeps.compose import compose_mapping, load_platform_config


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


# Names that would put a path outside its folder, or are no single folder name, however written.
UNSAFE_NAMES = [
    "../escaped",
    "..",
    ".",
    ".hidden",
    "",
    "a/b",
    "/abs/path",
    "a\\b",
    "..\\escaped",
    "%2e%2e%2fescaped",
    "line\nbreak",
    "trailing\n",
    "tab\there",
    "nul\x00",
    "-rf",
    "quote'd",
    "sp ace",
    "ＡＢ",  # fullwidth letters: not ASCII
    "x" * 129,
]


@pytest.mark.parametrize("key", ["ablation.name", "search.name", "tracking.register"])
@pytest.mark.parametrize("name", UNSAFE_NAMES)
def test_names_that_become_path_components_are_one_safe_folder_name(key: str, name: str) -> None:
    raw = compose_mapping(["preset=smoke"])
    with pytest.raises(ConfigError) as err:
        PlatformConfig.from_mapping(with_dotted(raw, {key: name}))
    assert str(err.value).startswith(f"{key}: expected a name of letters")
    assert repr(name) in str(err.value) and "\n" not in str(err.value).replace(repr(name), "")


def test_safe_names_are_kept() -> None:
    raw = compose_mapping(["preset=smoke"])
    names = {"ablation.name": "ablation_2.v1-b", "search.name": "_hpo", "tracking.register": "a"}
    config = PlatformConfig.from_mapping(with_dotted(raw, names))
    assert config.ablation.name == "ablation_2.v1-b" and config.search is not None
    assert (config.search.name, config.tracking.register) == ("_hpo", "a")


def test_a_sweep_named_outside_its_storage_is_refused_before_anything_is_written(
    tmp_path, capsys
) -> None:
    from sweeps.ablation import main as ablation_main

    storage = tmp_path / "inner"
    args = ["preset=smoke", "ablation.compare_to=baseline", f"cluster.storage={storage}"]
    assert ablation_main([*args, "ablation.name=../escaped"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("linc-ablation: invalid config: ablation.name: expected a name")
    assert "'../escaped'" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # neither the storage nor the escaped folder


@pytest.mark.parametrize(
    ("metric", "hint"),
    [
        ("valdation_cost", " (did you mean 'validation_cost'?)"),
        ("eval_cost_sgbs", " (did you mean 'eval_cost'?)"),  # no data.eval_also=[sgbs]
        ("", ""),
    ],
)
def test_a_search_metric_no_trial_reports_is_refused_at_config_time(metric, hint, capsys):
    from sweeps.hpo import main as hpo_main

    overrides = ["preset=smoke", "search.num_samples=1", f"search.metric={metric}"]
    assert hpo_main(overrides) == 2
    err = capsys.readouterr().err
    assert err.startswith("linc-hpo: invalid config: search.metric: expected a metric a trial ")
    assert "validation_cost, global_step, peak_rss_gb, eval_cost" in err
    assert err.endswith(f"got {metric!r}{hint}\n") and err.count("\n") == 1


def test_search_metrics_a_trial_reports_are_accepted_and_every_report_is_stricter() -> None:
    both = ["search.metric=[validation_cost,eval_cost_sgbs]", "search.mode=[min,min]"]
    config = load_platform_config(["preset=smoke", "data.eval_also=[sgbs]", *both])
    assert config.search is not None and config.search.metrics[1] == "eval_cost_sgbs"
    # a search ranks every report: the final evaluation's come with the last one only
    with pytest.raises(ValueError, match="metric: expected a metric every trial report carries"):
        config.search.require_reported(config.run, every_report=True)
    rare = load_platform_config(["preset=smoke", "train.validation_every=2"])
    assert rare.search is not None
    with pytest.raises(ValueError, match="got 'validation_cost'"):
        rare.search.require_reported(rare.run, every_report=True)
    smoke = load_platform_config(["preset=smoke"])
    assert smoke.search is not None
    smoke.search.require_reported(smoke.run, every_report=True)


# Every registered variant, as a refusal lists them.
VARIANTS = (
    "'baseline', 'centered_mlp', 'full_linc', 'full_mu_summary', 'group_mean', 'naive_mlp', "
    "'no_depth_mixer', 'no_gateattn', 'no_local', 'no_soft_top1', 'no_step_summary', "
    "'polynet', 'pomo', 'raw_linear'"
)


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (
            "{model.variant: {distribution: choice, values: [full_linc, evil]}}",
            "search.space.model.variant: choice 'evil' is refused: model.variant: expected one "
            f"of [{VARIANTS}], got 'evil'",
        ),
        (
            "{train.learning_rate: {distribution: uniform, low: -5, high: 0.1}}",
            "search.space.train.learning_rate: low -5.0 is refused: train.learning_rate: "
            "expected > 0, got -5.0",
        ),
        (
            "{train.epochs: {distribution: uniform, low: 1, high: 3}}",  # a trial gets floats
            "search.space.train.epochs: low 1.0 is refused: train.epochs: expected int, got 1.0",
        ),
        (
            "{train.batch_size: {distribution: randint, low: 0, high: 4}}",
            "search.space.train.batch_size: low 0 is refused: train.batch_size: expected >= 1, "
            "got 0",
        ),
        (
            "{model.overrides.scorer: {distribution: choice, values: [linc, attention]}}",
            "search.space.model.overrides.scorer: choice 'attention' is refused: "
            "model.overrides.scorer: expected one of ('baseline', 'linc', 'mlp'), got 'attention'",
        ),
        (
            "{train.epochs: {distribution: randint, low: 1.2, high: 1.9}}",  # randint(1, 1)
            "search.space.train.epochs: expected int low < int high, got {'distribution': "
            "'randint', 'low': 1.2, 'high': 1.9}",
        ),
        (
            "{train.nonexistent: {distribution: uniform, low: 0.1, high: 1}}",
            "search.space.train.nonexistent: low 0.1 is refused: train: unknown key(s) "
            "['nonexistent']",
        ),
        (
            "{model.overrides.nope: {distribution: choice, values: [1]}}",
            "search.space.model.overrides.nope: choice 1 is refused: model.overrides: unknown "
            "key(s) ['nope']",
        ),
    ],
)
def test_a_searched_key_or_value_its_setting_refuses_is_one_line(space, message, capsys) -> None:
    from sweeps.hpo import main as hpo

    assert hpo([f"search.space={space}", "--cfg", "plan", "-p", "train.epochs"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"linc-hpo: invalid config: {message}")


@pytest.mark.parametrize(
    "overrides",
    [
        ["search=switches"],
        ["search=learning_rate"],
        ["search.space={model.variant: {distribution: choice, values: [baseline, pomo]}}"],
        ["search.space={train.epochs: {distribution: randint, low: 1, high: 3}}"],
    ],
)
def test_searches_of_real_settings_pass_and_their_trials_configs_too(overrides) -> None:
    config = load_platform_config(["preset=smoke", *overrides])
    assert config.search is not None
    edges = config.search.edges()
    drawn = {key: value for key, _, value in reversed(edges)}  # each key's first edge
    for trial in [drawn, *({key: value} for key, _, value in edges)]:  # a trial's values
        assert PlatformConfig.from_mapping(with_dotted(config.raw, trial)).search == config.search
