"""A command line composes ``sweeps/conf`` and nothing else: no config file from elsewhere, no
Hydra setting, no interpolation resolved into a value, one line (exit 2) for each refusal."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from sweeps.ablation import main as ablation
from sweeps.compose import (
    CONFIG_DIR,
    CONFIG_TREES,
    HYDRA_REFUSAL,
    INTERPOLATION_REFUSAL,
    compose_mapping,
)

TASKS = "cvrp, cvrptw, tsp"
GROUPS = "ablation, cluster, console, data, fault, model, preset, search, task, tracking, train"
# A YAML that runs a command when a loader that executes code reads it.
CODE_YAML = '!!python/object/apply:os.system ["touch {marker}"]\n'


def alias_bomb(levels: int = 7) -> str:
    """A YAML whose 9 ** levels strings come from a few lines of aliases."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside sweeps/conf with a task config, a code-running one and an alias bomb,
    each also under ``task/`` (a search path's group)."""
    for folder in (tmp_path, tmp_path / "task"):
        folder.mkdir(exist_ok=True)
        (folder / "evil.yaml").write_text("problem: cvrp\nnum_customers: 20\npwned: true\n")
        (folder / "code.yaml").write_text(CODE_YAML.format(marker=tmp_path / "marker"))
        (folder / "bomb.yaml").write_text(alias_bomb())
    return tmp_path


def refused(argv: list[str], capsys) -> str:
    """The one line a refused command line prints (it exits 2, prints nothing on stdout)."""
    assert ablation([*argv, "--cfg", "job", "-p", "task"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    return captured.err.removeprefix("linc-ablation: invalid config: ").rstrip("\n")


@pytest.mark.parametrize("name", ["evil", "code", "bomb"])
@pytest.mark.parametrize(
    "spelling",
    [
        "{relative}",  # ../../../tmp/...: Hydra joins it to sweeps/conf/task
        "{absolute}",
        "'{relative}'",  # quoted
        "str({relative})",  # Hydra's cast function
        "[{relative}]",  # a list of options
    ],
)
def test_a_group_value_is_one_of_the_groups_files_and_nothing_outside_is_read(
    outside, name, spelling, capsys
) -> None:
    target = outside / name
    relative = os.path.relpath(target, CONFIG_DIR / "task")
    value = spelling.format(relative=relative, absolute=target)
    started = time.monotonic()
    message = refused([f"task={value}"], capsys)
    option = str(target) if spelling == "{absolute}" else relative
    shown = [option] if spelling.startswith("[") else option
    assert message == f"task={value}: group 'task' has no option {shown!r}; options: {TASKS}"
    assert not (outside / "marker").exists()
    assert time.monotonic() - started < 30  # the bomb is never read


@pytest.mark.parametrize(
    ("override", "group"),
    [
        ("+generate=generate", "generate"),  # linc-generate's tree: a folder, not a group
        ("task/evil=x", "task/evil"),
        ("+task/sub=evil", "task/sub"),
    ],
)
def test_a_folder_that_is_not_a_group_is_refused(override, group, capsys) -> None:
    hint = " (did you mean 'task'?)" if group.startswith("task/") else ""
    assert (
        refused([override], capsys)
        == f"{override}: no config group {group!r}{hint}; groups: {GROUPS}"
    )


@pytest.mark.parametrize(
    "override",
    [
        "hydra.searchpath=[file://{sp}]",
        "+hydra.searchpath=[file://{sp}]",
        "++hydra.searchpath=[file://{sp}]",
        "hydra={{searchpath: [file://{sp}]}}",
        "hydra/launcher=basic",
        "hydra.run.dir={sp}",
        "~hydra",
        "task@hydra=cvrp",
        "task@hydra.searchpath=cvrp",
    ],
)
def test_no_hydra_setting_is_accepted(outside, override, capsys) -> None:
    text = override.format(sp=outside)
    assert refused([text, "task=evil"], capsys) == f"{text}: {HYDRA_REFUSAL}"
    assert not (outside / "marker").exists()


def test_the_hydra_refusal_names_hydras_settings() -> None:
    from dataclasses import fields

    from hydra.conf import HydraConf

    named = {f.name for f in fields(HydraConf)} - {"defaults", "mode", "help", "hydra_help"}
    named -= {"env", "overrides", "runtime"}  # Hydra fills them in, no user sets them
    assert all(f"hydra.{name}" in HYDRA_REFUSAL for name in named), named


SECRET = "s3cr3t-state-key-0123456789"


@pytest.mark.parametrize(
    "override",
    [
        "tracking.experiment=${oc.env:LINC_STATE_KEY}",
        "tracking.experiment='${oc.env:LINC_STATE_KEY}'",
        'tracking.experiment="x-${oc.env:LINC_STATE_KEY}"',
        "tracking.experiment=str(${oc.env:LINC_STATE_KEY})",
        "tracking.experiment='\\${oc.env:LINC_STATE_KEY}'",
        "tracking.experiment=${tracking.uri}",
        "ablation.seeds=[1,${oc.env:LINC_STATE_KEY}]",
        "search.space={train.x: {distribution: choice, values: [${oc.env:LINC_STATE_KEY}]}}",
        "cluster.custom_resources={linc_worker: ${oc.env:LINC_STATE_KEY}}",
    ],
)
def test_an_interpolation_in_a_command_line_value_is_refused(override, monkeypatch, capsys):
    monkeypatch.setenv("LINC_STATE_KEY", SECRET)
    message = refused([override], capsys)
    assert message == f"{override}: {INTERPOLATION_REFUSAL}"
    assert SECRET not in message


def test_the_shipped_configs_own_interpolations_still_resolve(monkeypatch) -> None:
    monkeypatch.setenv("LINC_STORAGE", "s3://bucket/tune")
    assert compose_mapping(["cluster=gpu"])["cluster"]["storage"] == "s3://bucket/tune"
    monkeypatch.delenv("LINC_STORAGE")
    assert compose_mapping(["cluster=gpu"])["cluster"]["storage"] == "s3://linc-runs/tune"
    generated = compose_mapping(["task=cvrp", "size=50", "split=train"], "generate")
    assert generated["uri"] == "data/cvrp50-train"


def test_a_config_file_yaml_refuses_is_one_line_naming_it(tmp_path, monkeypatch, capsys) -> None:
    tree = tmp_path / "conf"
    shutil.copytree(CONFIG_DIR, tree)
    broken = tree / "task" / "code.yaml"
    broken.write_text(CODE_YAML.format(marker=tmp_path / "marker"))
    monkeypatch.setitem(CONFIG_TREES, "config", tree)
    assert refused(["task=code"], capsys) == (
        "cannot read a config file: could not determine a constructor for the tag "
        f"'tag:yaml.org,2002:python/object/apply:os.system' in \"{broken}\", line 1, column 1"
    )
    assert ablation(["task=code", "--help"]) == 0  # the help shows the defaults instead
    assert not (tmp_path / "marker").exists()


def test_the_groups_own_options_still_compose() -> None:
    assert compose_mapping(["task=tsp", "preset=smoke"])["task"]["problem"] == "tsp"
    assert compose_mapping(["preset=smoke", "data=solomon50"])["data"]["source"] == "solomon50"
