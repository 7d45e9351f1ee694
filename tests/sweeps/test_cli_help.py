"""Every console script answers ``--help`` and refuses a bad flag in one line; the Hydra ones also
``--cfg``, typos and ``-m``."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import pytest

from sweeps.cli import run_cli
from sweeps.compose import compose_mapping, config_groups

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
HYDRA_SCRIPTS = ("linc-generate", "linc-tune", "linc-ablation", "linc-hpo", "linc-demo")
# What each argparse command's help must name: its options (or sub-commands).
ARGPARSE_NAMES = {
    "linc-solve": ("--seconds", "--verify", "--convention"),
    "linc-data": ("where", "download"),
    "linc-train": ("--problem", "--preset", "--epochs"),
    "linc-report": ("ablation", "benchmark", "budget", "--tracking-uri", "--out"),
    "linc-eval": ("--checkpoint", "--benchmark", "--decode", "--limit", "--aug", "--z"),
    "linc-diagnose": ("--checkpoint", "--benchmark"),
}


def _main(script: str):
    module, function = SCRIPTS[script].split(":")
    return getattr(importlib.import_module(module), function)


def test_every_console_script_is_covered() -> None:
    assert set(SCRIPTS) == set(HYDRA_SCRIPTS) | set(ARGPARSE_NAMES)


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("script", HYDRA_SCRIPTS)
def test_hydra_script_help_names_what_it_runs_its_groups_and_keys(script, flag, capsys) -> None:
    assert _main(script)([flag]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"== {script} ==\n")
    assert f"Usage: {script} [FLAG ...]" in out and "--cfg job" in out and "== Flags ==" in out
    assert f"    {script} " in out or script == "linc-demo"  # the docstring's examples
    if script == "linc-generate":
        assert "== Configuration groups ==" not in out
        assert "  count: 10000          # instances in the set" in out
        assert "--cfg plan" not in out
        return
    for group in config_groups():
        assert f"\n  {group}:" in out
    presets = "cpu-repro, main-cpu, main-cpu-cvrp, main-cpu-tsp, main-smoke, paper, paper-train"
    assert f"  preset:   [cpu], {presets}, smoke" in out
    assert "  task:     cvrp, [cvrptw], tsp" in out
    assert "preset=smoke: Tests and quick checks" in out  # each option's own first sentence
    assert "  train:    protocol num_rollouts batch_size" in out  # every section's keys
    assert "Sweeps: linc sweeps run as one Ray Tune experiment" in out  # not a multirun


def test_help_marks_the_options_the_overrides_choose(capsys) -> None:
    assert _main("linc-tune")(["preset=smoke", "task=tsp", "--help"]) == 0
    out = capsys.readouterr().out
    assert (
        "cpu, cpu-repro, main-cpu, main-cpu-cvrp, main-cpu-tsp, main-smoke, paper, paper-train, "
        "[smoke]"
        in out
        and "cvrp, cvrptw, [tsp]" in out
    )


@pytest.mark.parametrize("script", sorted(ARGPARSE_NAMES))
def test_an_argparse_script_refuses_a_bad_flag_in_one_line(script, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        _main(script)(["--no-such-flag", "abc"])
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"{script}: ")  # the first fault argparse met, named
    assert captured.err.endswith(f"(see {script} --help)\n")


@pytest.mark.parametrize("script", sorted(ARGPARSE_NAMES))
def test_argparse_script_help_exits_0_naming_its_options(script, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        _main(script)(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {script}")
    for name in ARGPARSE_NAMES[script]:
        assert name in out, name


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.epoch=3"], "unknown key 'train.epoch' (did you mean 'train.epochs'?)"),
        (["trian.epochs=3"], "unknown key 'trian.epochs' (did you mean 'train.epochs'?)"),
        (
            ["model.overrides.embeding_dim=8"],
            "(did you mean 'model.overrides.embedding_dim'?)",
        ),
        (["presett=smoke"], "unknown key 'presett' (did you mean 'preset'?)"),
        (
            ["preset=smok"],
            "preset=smok: group 'preset' has no option 'smok' (did you mean 'smoke'?); "
            "options: cpu, cpu-repro, main-cpu, main-cpu-cvrp, main-cpu-tsp, main-smoke, paper, "
            "paper-train, smoke",
        ),
        (["train.epochs=1,2"], "'train.epochs=1,2' is a sweep; linc sweeps run as one Ray Tune"),
        (["train.epochs"], "cannot read 'train.epochs': expected key=value or group=option"),
        (["--epochs=3"], "unknown flag '--epochs=3'"),
        (["-m", "model.variant=baseline"], "-m/--multirun: linc sweeps run as one Ray Tune"),
        (["--cfg", "hydra"], "--cfg hydra: expected job or plan"),
        (["--cfg", "job", "-p", "trian"], "--package trian: no 'trian' (did you mean 'train'?)"),
    ],
)
def test_bad_command_lines_get_one_line_naming_what_was_meant(overrides, message, capsys):
    assert run_cli("linc-x", overrides, lambda config: 1) == 2
    err = capsys.readouterr().err
    assert err.startswith("linc-x: invalid config: ") and err.count("\n") == 1
    assert message in err
    assert "+" not in err.split("linc sweeps")[0]  # never Hydra's "use +key" advice


def test_typo_in_a_section_built_by_typed_build_is_named_too() -> None:
    from linc_core.utils.typed import ConfigError
    from sweeps.compose import load_platform_config

    with pytest.raises(ConfigError, match=r"train: unknown key\(s\) \['epoch'\] \(did you mean"):
        load_platform_config(["+train.epoch=3"])


def test_cfg_prints_the_composed_config_a_package_or_the_plan(capsys) -> None:
    assert run_cli("linc-x", ["preset=smoke", "--cfg", "job", "-p", "train"], lambda c: 1) == 0
    job = capsys.readouterr().out
    assert "epochs: 2" in job and "task:" not in job
    assert compose_mapping(["preset=smoke"])["train"]["epochs"] == 2
    # the plan: the effective settings (the variant's switches, the protocol's schedule)
    assert run_cli("linc-x", ["preset=smoke", "-c", "plan", "-p", "train.epochs"], print) == 0
    assert capsys.readouterr().out == "2\n"
    assert run_cli("linc-x", ["preset=smoke", "--cfg=plan", "--resolve", "-p", "model"], print) == 0
    assert "embedding_dim: 16" in capsys.readouterr().out


def test_generate_tree_has_its_own_sweep_pointer_and_no_plan(capsys) -> None:
    from sweeps.generate import main

    assert main(["size=50,100"]) == 2
    assert "linc-generate writes one data set per command" in capsys.readouterr().err
    assert main(["sze=50"]) == 2
    assert "unknown key 'sze' (did you mean 'size'?)" in capsys.readouterr().err
    assert main(["--cfg", "plan"]) == 2
    assert "--cfg plan: expected job (" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.variant=ful_linc", "got 'ful_linc' (did you mean 'full_linc'?)"),
        ("train.protocol=ablaton", "got 'ablaton' (did you mean 'ablation'?)"),
        ("data.eval_decoding=sampl", "got 'sampl' (did you mean 'sampling'?)"),
    ],
)
def test_a_misspelt_value_names_the_value_meant(override, message, capsys) -> None:
    assert run_cli("linc-x", ["preset=smoke", override], lambda config: 1) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("script", HYDRA_SCRIPTS)
def test_the_package_example_in_help_prints_for_every_cfg_the_help_offers(script, capsys) -> None:
    assert _main(script)(["--help"]) == 0
    out = capsys.readouterr().out
    example = re.search(r"print only KEY \(e\.g\. -p (\S+)\)", out)
    assert example, out
    modes = ("job", "plan") if "--cfg plan" in out else ("job",)
    for mode in modes:
        assert _main(script)(["--cfg", mode, "-p", example[1]]) == 0, mode
        captured = capsys.readouterr()
        assert captured.out.strip() and captured.err == "", (mode, captured.err)
