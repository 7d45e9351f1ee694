"""Compose ``sweeps/conf`` with command-line overrides: the one Hydra composition of linc.

Hydra's compose API is used (no working-directory change, no output folder): relative paths in a
config stay relative to where the command was started, and are made absolute before anything is
handed to Ray workers. Every entry point runs through :func:`run_cli`: config errors (Hydra's
and linc's) exit 2 with one line, and ``--cfg job`` prints the composed config instead of
running (``--cfg plan``: the effective settings the overrides resolve to).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from linc_core.typed import ConfigError, did_you_mean
from orchestration.config import PlatformConfig
from orchestration.preemption import SweepStopped
from orchestration.ray_session import prefer_loopback

CONFIG_DIR = Path(__file__).resolve().parent / "conf"
# The config trees by primary config name. linc-generate's sits in its own folder: beside the
# platform's groups its `task` key would be read as the `task` group (`task=cvrp` refused).
CONFIG_TREES = {"config": CONFIG_DIR, "generate": CONFIG_DIR / "generate"}
# Free-form mappings (their keys are not known in advance): `key=...` and `key.name=...` merge
# into them (Hydra's `++`), so `cluster.custom_resources={linc_worker: 1}` works as written.
FREE_FORM_KEYS = ("cluster.custom_resources", "search.space")
GRAMMAR_URL = "https://hydra.cc/docs/advanced/override_grammar/basic/"
# linc sweeps are Ray Tune experiments, not Hydra multiruns: where each tree's sweeps live.
SWEEP_POINTERS = {
    "config": (
        "linc sweeps run as one Ray Tune experiment, not as a Hydra multirun: "
        "linc-ablation ablation.variants=[a,b] ablation.seeds=[1,2] (variants x seeds) or "
        "linc-hpo search.space=... (a search); a list value is written key=[a,b]"
    ),
    "generate": "linc-generate writes one data set per command: run it once per value",
}
Config = TypeVar("Config")


def _merge_free_form(override: str) -> str:
    for key in FREE_FORM_KEYS:
        if override.startswith((f"{key}=", f"{key}.")):
            return f"++{override}"
    return override


def compose_mapping(overrides: Sequence[str] = (), config_name: str = "config") -> dict[str, Any]:
    """The composed, resolved config ``config_name`` (of ``CONFIG_TREES``) as plain dicts.

    Raises:
        ConfigError: a malformed override, an unknown group, option or key (with the closest
            known ones), a sweep value, a missing value.
    """
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        composed = compose_tree(overrides, config_name)
        values = OmegaConf.to_container(composed, resolve=True, throw_on_missing=True)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(diagnose(overrides, config_name) or _hydra_message(err)) from None
    assert isinstance(values, dict)
    return values


def compose_tree(overrides: Sequence[str], config_name: str, *, with_choices: bool = False):
    """Hydra's composed ``DictConfig`` (unresolved); ``with_choices`` adds ``hydra.runtime``."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_TREES[config_name]), version_base="1.3"):
        return compose(
            config_name=config_name,
            overrides=[_merge_free_form(o) for o in overrides],
            return_hydra_config=with_choices,
        )


def config_groups(config_name: str = "config") -> dict[str, list[str]]:
    """The tree's config groups (folders beside the primary config) and their options."""
    # the platform tree holds linc-generate's own tree too; that folder is not a group
    return {
        folder.name: sorted(path.stem for path in folder.glob("*.yaml"))
        for folder in sorted(CONFIG_TREES[config_name].iterdir())
        if folder.is_dir() and folder.name not in CONFIG_TREES
    }


def sweep_pointer(config_name: str) -> str:
    """Where to go for a multirun: Hydra's ``-m`` is not how linc sweeps."""
    return SWEEP_POINTERS[config_name]


def diagnose(overrides: Sequence[str], config_name: str) -> str | None:
    """One line naming the first override Hydra refused and what was probably meant.

    Hydra's own messages suggest ``+key`` for a typo'd key (which then fails later, or adds a
    key nothing reads) and ``--multirun`` for a comma value; linc answers with the closest known
    group, option or key instead. None when no override is at fault (e.g. a missing value).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    groups = config_groups(config_name)
    parsed = []
    for text in overrides:
        try:
            [override] = parser.parse_overrides([text])
        except HydraException:
            return f"cannot read {text!r}: expected key=value or group=option ({GRAMMAR_URL})"
        if override.is_sweep_override():
            return f"{text!r} is a sweep; {sweep_pointer(config_name)}"
        parsed.append(override)
    for override in parsed:
        key, value = override.key_or_group, override.value()
        if key in groups and isinstance(value, str) and value not in groups[key]:
            return (
                f"{key}={value}: group {key!r} has no option {value!r}"
                f"{did_you_mean(value, groups[key])}; options: {', '.join(groups[key])}"
            )
    chosen = [o.input_line for o in parsed if o.key_or_group in groups]
    try:
        known = set(_dotted_keys(compose_tree(chosen, config_name)))
    except HydraException:
        return None
    known |= set(groups)
    for override in parsed:
        key = override.key_or_group
        free_form = any(key == k or key.startswith(f"{k}.") for k in FREE_FORM_KEYS)
        if override.type == OverrideType.CHANGE and key not in known and not free_form:
            hint = did_you_mean(key, _neighbours(key, known))
            return f"unknown key {key!r}{hint}; --help lists the groups and keys"
    return None


def _neighbours(key: str, known: set[str]) -> set[str]:
    """The keys a typo'd ``key`` is compared with: its siblings when its section exists."""
    section = key.rpartition(".")[0]
    siblings = {k for k in known if k.rpartition(".")[0] == section}
    return siblings if section in known else known


def _dotted_keys(node: Any, prefix: str = "") -> list[str]:
    """Every key of a composed config, nested ones dotted (``train``, ``train.epochs``)."""
    from omegaconf import DictConfig

    keys = []
    if isinstance(node, DictConfig):
        for key in node:
            dotted = f"{prefix}{key}"
            keys.append(dotted)
            keys += _dotted_keys(node._get_node(key), f"{dotted}.")
    return keys


def _hydra_message(err: Exception) -> str:
    """Hydra's message on one line, without its search path and its ``+key`` advice."""
    text = str(err).split("Config search path:")[0]
    text = re.sub(r"\s*To append to your config use \S+", "", text)
    return " ".join(text.split())


def load_platform_config(overrides: Sequence[str] = ()) -> PlatformConfig:
    """Compose and validate; local storage and data paths become absolute (for the workers)."""
    values = compose_mapping(overrides)
    cluster = values.setdefault("cluster", {})
    storage = str(cluster.get("storage") or "runs")
    if "://" not in storage:
        cluster["storage"] = str(Path(storage).expanduser().resolve())
    data = values.setdefault("data", {})
    for key in ("uri", "eval_uri"):
        uri = data.get(key)
        if uri and "://" not in str(uri):
            data[key] = str(Path(uri).expanduser().resolve())
    return PlatformConfig.from_mapping(values)


def print_mlflow_ui(tracking_uri: str, parent_run_id: str | None = None) -> None:
    """How to browse the runs (the UI binds to loopback, like every server linc starts)."""
    from orchestration.tracking import runs_view_url

    server = tracking_uri if tracking_uri.startswith(("http://", "https://")) else None
    experiment_id = None
    if parent_run_id:
        print(f"MLflow parent run {parent_run_id}; browse the runs with:")
        try:
            from mlflow.tracking import MlflowClient

            run = MlflowClient(tracking_uri=tracking_uri).get_run(parent_run_id)
            experiment_id = run.info.experiment_id
        except Exception:  # noqa: BLE001 - only the link's precision is lost
            experiment_id = None
    else:
        print("Browse the runs with:")
    if server is None:
        print(f"  .venv/bin/mlflow ui --backend-store-uri {tracking_uri} --host 127.0.0.1")
    if experiment_id is not None:
        print(f"  then open {runs_view_url(server or 'http://127.0.0.1:5000', experiment_id)}")


def _show(what: str, package: str | None, overrides: Sequence[str], config_name: str) -> None:
    """``--cfg job``: the composed config; ``--cfg plan``: the platform run's effective plan;
    ``--package KEY``: only that part of it."""
    from omegaconf import OmegaConf

    if what == "job":
        values: Any = compose_mapping(overrides, config_name)
    elif what == "plan" and config_name == "config":
        values = load_platform_config(overrides).run.settings()
    else:
        plan = " or plan" if config_name == "config" else ""
        raise ConfigError(f"--cfg {what}: expected job{plan} (linc composes no hydra config)")
    for part in package.split(".") if package else ():
        known = list(values) if isinstance(values, dict) else []
        if part not in known:
            raise ConfigError(f"--package {package}: no {part!r}{did_you_mean(part, known)}")
        values = values[part]
    print(OmegaConf.to_yaml(values).rstrip("\n") if isinstance(values, dict) else values)


@dataclass
class Flags:
    """Hydra's command-line flags that linc's entry points answer (the rest are overrides)."""

    help: bool = False
    cfg: str | None = None
    package: str | None = None
    multirun: bool = False


def split_flags(argv: Sequence[str]) -> tuple[Flags, list[str]]:
    """(the flags, the overrides) of a command line; an unknown flag is a ``ConfigError``."""
    flags, overrides = Flags(), []
    args = iter(argv)
    for arg in args:
        name, _, attached = arg.partition("=")
        if arg in ("-h", "--help"):
            flags.help = True
        elif name in ("-c", "--cfg"):
            flags.cfg = attached or next(args, "")
        elif name in ("-p", "--package"):
            flags.package = attached or next(args, "")
        elif arg in ("-m", "--multirun"):
            flags.multirun = True
        elif arg == "--resolve":
            pass  # Hydra's flag to resolve interpolations: linc's printed configs always are
        elif arg.startswith("-"):
            known = "-h/--help, -c/--cfg job|plan, -p/--package KEY, --resolve, -m/--multirun"
            raise ConfigError(f"unknown flag {arg!r}; flags: {known}; the rest are key=value")
        else:
            overrides.append(arg)
    return flags, overrides


def run_cli(
    entry: str,
    argv: Sequence[str] | None,
    action: Callable[[Config], int],
    load: Callable[[Sequence[str]], Config] = load_platform_config,  # type: ignore[assignment]
    config_name: str = "config",
    doc: str = "",
) -> int:
    """Shared ``main`` of the entry points: Hydra overrides in, ``action(load(overrides))`` out.

    ``-h/--help`` prints ``doc`` (what the command runs, examples) with the config groups, keys
    and flags; ``--cfg job|plan`` prints the config instead of running. Config errors, and storage
    or servers the pre-flight finds unusable, exit 2 with a one-line message naming the key and
    the value (and the closest known ones); a sweep stopped before its end (a signal: 143, trials
    no node could place: 1) says so on one line.
    """
    prefer_loopback()  # before anything imports ray
    try:
        flags, overrides = split_flags(list(sys.argv[1:] if argv is None else argv))
        if flags.help:
            from sweeps.cli_help import render_help

            print(render_help(entry, doc, overrides, config_name), end="")
            return 0
        if flags.multirun:
            raise ConfigError(f"-m/--multirun: {sweep_pointer(config_name)}")
        if flags.cfg is not None:
            _show(flags.cfg, flags.package, overrides, config_name)
            return 0
        config = load(overrides)
    except ConfigError as err:
        print(f"{entry}: invalid config: {err}", file=sys.stderr)
        return 2
    try:
        return action(config)
    except ConfigError as err:  # pre-flight: storage, data or tracking store unusable
        print(f"{entry}: {err}", file=sys.stderr)
        return 2
    except SweepStopped as err:  # a signal, or trials no node could place: re-run to resume
        print(f"{entry}: {err}", file=sys.stderr)
        return err.exit_code


__all__ = [
    "CONFIG_DIR",
    "CONFIG_TREES",
    "Flags",
    "compose_mapping",
    "compose_tree",
    "config_groups",
    "diagnose",
    "load_platform_config",
    "print_mlflow_ui",
    "run_cli",
    "split_flags",
    "sweep_pointer",
]
