"""Compose ``sweeps/conf`` with command-line overrides: the one Hydra composition of linc.

Hydra's compose API is used (no working-directory change, no output folder): relative paths in a
config stay relative to where the command was started, and are made absolute before anything is
handed to Ray workers. Every entry point runs through :func:`run_cli`: config errors (Hydra's
and linc's) exit 2 with one line, and ``--cfg job`` prints the composed config instead of
running (``--cfg plan``: the effective settings the overrides resolve to).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from linc_core.typed import ConfigError
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
Config = TypeVar("Config")


def _merge_free_form(override: str) -> str:
    for key in FREE_FORM_KEYS:
        if override.startswith((f"{key}=", f"{key}.")):
            return f"++{override}"
    return override


def compose_mapping(overrides: Sequence[str] = (), config_name: str = "config") -> dict[str, Any]:
    """The composed, resolved config ``config_name`` (of ``CONFIG_TREES``) as plain dicts.

    Raises:
        ConfigError: a malformed override, an unknown group or key, a missing value.
    """
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(CONFIG_TREES[config_name]), version_base="1.3"):
            composed = compose(
                config_name=config_name, overrides=[_merge_free_form(o) for o in overrides]
            )
        values = OmegaConf.to_container(composed, resolve=True, throw_on_missing=True)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(" ".join(str(err).split())) from None
    assert isinstance(values, dict)
    return values


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
    if parent_run_id:
        print(f"MLflow parent run {parent_run_id}; browse the runs with:")
    else:
        print("Browse the runs with:")
    print(f"  .venv/bin/mlflow ui --backend-store-uri {tracking_uri} --host 127.0.0.1")


def _show(what: str, overrides: Sequence[str], config_name: str) -> None:
    """``--cfg job``: the composed config; ``--cfg plan``: the platform run's effective plan."""
    from omegaconf import OmegaConf

    if what == "job":
        print(OmegaConf.to_yaml(compose_mapping(overrides, config_name)), end="")
    elif what == "plan" and config_name == "config":
        print(OmegaConf.to_yaml(load_platform_config(overrides).run.settings()), end="")
    else:
        raise ConfigError(f"--cfg: expected job{' or plan' * (config_name == 'config')}")


def run_cli(
    entry: str,
    argv: Sequence[str] | None,
    action: Callable[[Config], int],
    load: Callable[[Sequence[str]], Config] = load_platform_config,  # type: ignore[assignment]
    config_name: str = "config",
) -> int:
    """Shared ``main`` of the entry points: Hydra overrides in, ``action(load(overrides))`` out.

    Config errors, and storage or servers the pre-flight finds unusable, exit 2 with a one-line
    message naming the setting and the value; a sweep stopped before its end (a signal: 143, trials
    no node could place: 1) says so on one line.
    """
    overrides = list(sys.argv[1:] if argv is None else argv)
    prefer_loopback()  # before anything imports ray
    show = None
    if "--cfg" in overrides:
        at = overrides.index("--cfg")
        show = overrides[at + 1] if at + 1 < len(overrides) else ""
        overrides = overrides[:at] + overrides[at + 2 :]
    try:
        if show is not None:
            _show(show, overrides, config_name)
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
    "compose_mapping",
    "load_platform_config",
    "print_mlflow_ui",
    "run_cli",
]
