"""Compose ``sweeps/conf`` with command-line overrides: the one Hydra composition of linc.

Hydra's compose API is used (no working-directory change, no output folder): relative paths in a
config stay relative to where the command was started, and are made absolute before anything is
handed to Ray workers. Every entry point runs through :func:`run_cli`: config errors (Hydra's
and linc's) exit 2 with one line, and ``--cfg job`` prints the composed config instead of
running (``--cfg plan``: the effective settings the overrides resolve to).

A command line is checked before Hydra reads a file (:func:`refuse_unsafe`): a group takes one
of its own files, ``hydra.*`` is not linc's, and a value is taken as written (no ``${...}``
resolved into it): nothing outside ``sweeps/conf`` is loaded, no environment variable is read
into a config that is logged and printed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from linc_core.utils.typed import ConfigError, did_you_mean
from orchestration.config.platform import PlatformConfig, override_keys

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
HYDRA_REFUSAL = (
    "Hydra's own settings (hydra.searchpath, hydra.run, hydra.sweep, hydra.job, hydra.launcher, "
    "hydra.sweeper, hydra.callbacks, hydra.job_logging, hydra.hydra_logging, hydra.output_subdir, "
    "hydra.verbose, ...) are not accepted: linc composes only sweeps/conf and starts no Hydra "
    "job, so each would change nothing or read configs from elsewhere; --help lists linc's "
    "groups and keys"
)
INTERPOLATION_REFUSAL = (
    "a value on the command line is taken as written: no ${...} interpolation (it would copy "
    "an environment variable or another key into a config that is logged and printed); write "
    "the value itself"
)


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
    """Hydra's composed ``DictConfig`` (unresolved); ``with_choices`` adds ``hydra.runtime``.

    Raises:
        ConfigError: an override :func:`refuse_unsafe` refuses; a config file YAML cannot read.
    """
    import yaml
    from hydra import compose, initialize_config_dir

    refuse_unsafe(overrides, config_name)
    try:
        with initialize_config_dir(config_dir=str(CONFIG_TREES[config_name]), version_base="1.3"):
            return compose(
                config_name=config_name,
                overrides=[_merge_free_form(o) for o in overrides],
                return_hydra_config=with_choices,
            )
    except yaml.YAMLError as err:  # a shipped file edited into one YAML refuses (its name in it)
        raise ConfigError(f"cannot read a config file: {' '.join(str(err).split())}") from None


def refuse_unsafe(overrides: Sequence[str], config_name: str) -> None:
    """Refuse, before Hydra reads a file, an override that would load or resolve anything
    from outside the config tree: a config group's value that is not one of its files (Hydra
    joins it to the group's folder: ``task=../../../tmp/x`` reads ``/tmp/x.yaml``), a folder of
    the tree that is not a group, any ``hydra.*`` (``hydra.searchpath`` adds folders to read
    groups from) and an interpolation in a value (``${oc.env:NAME}`` copies an environment
    variable, a secret too, into a config that is logged and printed).

    Raises:
        ConfigError: one line naming the override (and the options, the closest first).
    """
    groups = config_groups(config_name)
    tree = CONFIG_TREES[config_name]
    for text, override in zip(overrides, _parsed(overrides, config_name), strict=True):
        key, value = override.key_or_group, override.value()
        if "hydra" in (key.split("/")[0].split(".")[0], (override.package or "").split(".")[0]):
            raise ConfigError(f"{text}: {HYDRA_REFUSAL}")
        if "${" in text.partition("=")[2] or _holds_interpolation(value):
            raise ConfigError(f"{text}: {INTERPOLATION_REFUSAL}")
        if key not in groups and ("/" in key or (tree / key).is_dir()):
            hint = did_you_mean(key, groups)
            raise ConfigError(f"{text}: no config group {key!r}{hint}; groups: {', '.join(groups)}")
        if key in groups and value is not None and value not in groups[key]:
            hint = did_you_mean(value, groups[key]) if isinstance(value, str) else ""
            raise ConfigError(
                f"{text}: group {key!r} has no option {value!r}{hint}; "
                f"options: {', '.join(groups[key])}"
            )


def _holds_interpolation(value: Any) -> bool:
    """Whether a parsed override value (nested lists and mappings too) holds ``${``."""
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, dict):
        return any(map(_holds_interpolation, [*value, *value.values()]))
    if isinstance(value, list):
        return any(map(_holds_interpolation, value))
    return False


def _parsed(overrides: Sequence[str], config_name: str) -> list[Any]:
    """Hydra's reading of each override; a ``ConfigError`` for one it cannot read or a sweep."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        try:
            [override] = parser.parse_overrides([text])
        except HydraException:
            raise ConfigError(
                f"cannot read {text!r}: expected key=value or group=option ({GRAMMAR_URL})"
            ) from None
        if override.is_sweep_override():
            raise ConfigError(f"{text!r} is a sweep; {sweep_pointer(config_name)}")
        parsed.append(override)
    return parsed


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
    """One line naming the first override Hydra refused (after :func:`refuse_unsafe`'s checks)
    and what was probably meant.

        Hydra's own messages suggest ``+key`` for a typo'd key (which then fails later, or adds a
        key nothing reads) and ``--multirun`` for a comma value; linc answers with the closest known
        group, option or key instead. None when no override is at fault (e.g. a missing value).
    """
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    groups = config_groups(config_name)
    try:
        parsed = _parsed(overrides, config_name)
    except ConfigError as err:
        return str(err)
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
        # a benchmark's eval_uri may name a set (solomon100), not a path
        named_set = key == "eval_uri" and data.get("eval_source") == "benchmark"
        if uri and "://" not in str(uri) and not (named_set and not Path(uri).exists()):
            data[key] = str(Path(uri).expanduser().resolve())
    return PlatformConfig.from_mapping(values, chosen=override_keys(overrides))


__all__ = [
    "CONFIG_DIR",
    "CONFIG_TREES",
    "FREE_FORM_KEYS",
    "GRAMMAR_URL",
    "HYDRA_REFUSAL",
    "INTERPOLATION_REFUSAL",
    "SWEEP_POINTERS",
    "compose_mapping",
    "compose_tree",
    "config_groups",
    "diagnose",
    "load_platform_config",
    "refuse_unsafe",
    "sweep_pointer",
]
