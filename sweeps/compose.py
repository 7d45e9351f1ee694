"""Compose ``sweeps/conf/config.yaml`` with command-line overrides into a ``PlatformConfig``.

Hydra's compose API is used (no working-directory change, no output folder): relative paths in a
config stay relative to where the command was started, and are made absolute before anything is
handed to Ray workers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestration.config import ConfigError, PlatformConfig

CONFIG_DIR = Path(__file__).resolve().parent / "conf"
# Free-form mappings (their keys are not known in advance): `key=...` and `key.name=...` merge
# into them (Hydra's `++`), so `cluster.custom_resources={linc_worker: 1}` works as written.
FREE_FORM_KEYS = ("cluster.custom_resources", "search.space")


def _merge_free_form(override: str) -> str:
    for key in FREE_FORM_KEYS:
        if override.startswith((f"{key}=", f"{key}.")):
            return f"++{override}"
    return override


def compose_mapping(overrides: Sequence[str] = (), config_name: str = "config") -> dict[str, Any]:
    """The composed, resolved config as plain nested dicts."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
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


def print_mlflow_ui(config: PlatformConfig, parent_run_id: str | None = None) -> None:
    """How to browse the runs (the UI binds to loopback, like every server linc starts)."""
    if parent_run_id:
        print(f"MLflow parent run {parent_run_id}; browse the runs with:")
    else:
        print("Browse the runs with:")
    print(f"  .venv/bin/mlflow ui --backend-store-uri {config.tracking_uri()} --host 127.0.0.1")


def run_cli(entry: str, argv: Sequence[str] | None, action) -> int:
    """Shared ``main`` of the entry points: config errors exit 2 with a one-line message."""
    import sys

    overrides = list(sys.argv[1:] if argv is None else argv)
    if not os.environ.get("RAY_ADDRESS"):
        # Local Ray binds to 127.0.0.1 only when it expects no other nodes; read at import.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        config = load_platform_config(overrides)
    except ConfigError as err:
        print(f"{entry}: invalid config: {err}", file=sys.stderr)
        return 2
    return action(config)


__all__ = ["CONFIG_DIR", "compose_mapping", "load_platform_config", "print_mlflow_ui", "run_cli"]
