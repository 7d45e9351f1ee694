"""The entry points' shell: flags, ``--help``, ``--cfg``, one-line errors and exit codes
around an action on the composed config (:mod:`sweeps.compose`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from linc_core.utils.typed import ConfigError, did_you_mean
from orchestration.data.storage import StorageUnavailableError
from orchestration.failures import SweepError
from orchestration.ray_session import prefer_loopback
from sweeps.compose import compose_mapping, load_platform_config, sweep_pointer

Config = TypeVar("Config")


def mlflow_command() -> str:
    """This environment's ``mlflow`` as a user types it: relative to the current folder when
    it lies below it (``.venv/bin/mlflow`` from a checkout), else its absolute path (a package
    installed elsewhere), else ``mlflow``. Beside the running Python, not the first on PATH:
    another environment's MLflow may read the store's schema differently."""
    import os
    import shlex
    from pathlib import Path

    beside = Path(sys.executable).parent / "mlflow"
    if not beside.is_file():
        return "mlflow"
    relative = os.path.relpath(beside)
    return shlex.quote(str(beside) if relative.startswith("..") else relative)


def print_mlflow_ui(
    tracking_uri: str, parent_run_id: str | None = None, registered: str | None = None
) -> None:
    """How to browse the runs (the UI binds to loopback, like every server linc starts), and
    how to load the sweep's registered policy (``registered``: ``NAME/VERSION``). A password
    in the store's URI is masked (``***``); a server's link carries no user at all (the
    browser asks)."""
    import re

    from linc_core.utils.secrets import redact
    from orchestration.tracking.store import RUNS_VIEW, runs_view_url, sweep_view_id

    server = tracking_uri if tracking_uri.startswith(("http://", "https://")) else None
    shown = redact(tracking_uri)
    experiment_id, view = None, RUNS_VIEW
    if parent_run_id:
        print(f"MLflow parent run {parent_run_id}; browse the runs with:")
        try:
            from mlflow.tracking import MlflowClient

            run = MlflowClient(tracking_uri=tracking_uri).get_run(parent_run_id)
            experiment_id = run.info.experiment_id
            view = sweep_view_id(run.data.tags["sweep"]) if "sweep" in run.data.tags else view
        except Exception:  # noqa: BLE001 - only the link's precision is lost
            experiment_id = None
    else:
        print("Browse the runs with:")
    if server is None:
        command = f"{mlflow_command()} ui --app-name linc --backend-store-uri {shown}"
        print(f"  {command} --host 127.0.0.1")
        if shown != tracking_uri:
            print("  (*** stands for the store's password, masked here)")
    if experiment_id is not None:
        address = re.sub(r"//[^/@]*@", "//", server, count=1) if server else None
        link = runs_view_url(address or "http://127.0.0.1:5000", experiment_id, view)
        print(f"  then open {link}")  # the sweep's own view: its trials only
    if registered is not None:
        print(f"The best policy is registered: mlflow.pyfunc.load_model('models:/{registered}')")


def _show(
    what: str,
    package: str | None,
    overrides: Sequence[str],
    config_name: str,
    load: Callable[[Sequence[str]], Any],
) -> None:
    """``--cfg job``: the composed config, checked as the run would check it (``load``);
    ``--cfg plan``: the platform run's effective plan; ``--package KEY``: only that part."""
    from omegaconf import OmegaConf

    from linc_core.utils.secrets import redact

    if what == "job":
        load(overrides)  # a bad value or an unknown key stops it, as it stops the run
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
    values = redact(values)  # what is printed has its secrets masked
    try:
        print(OmegaConf.to_yaml(values).rstrip("\n") if isinstance(values, dict) else values)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head` read what it wanted and closed the pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit


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
    and flags; ``--cfg job|plan`` prints the config instead of running. Config errors exit 2
    with a one-line message naming the key and the value (and the closest known ones); a sweep
    that did not finish ends in its one line and exit code (:mod:`orchestration.failures`:
    refused before anything ran, 2; stopped by a signal, 143; trials failed or storage gone,
    1). Every message, log record, warning and any other error's traceback (exit 1: a bug) has
    its secrets masked (:mod:`linc_core.utils.secrets`).
    """
    import traceback

    from linc_core.utils.secrets import learn_secrets, redact, redact_logging

    prefer_loopback()  # before anything imports ray
    redact_logging()
    try:
        flags, overrides = split_flags(list(sys.argv[1:] if argv is None else argv))
        if flags.help:
            from sweeps.cli_help import render_help

            print(render_help(entry, doc, overrides, config_name), end="")
            return 0
        if flags.multirun:
            raise ConfigError(f"-m/--multirun: {sweep_pointer(config_name)}")
        if flags.cfg is not None:
            _show(flags.cfg, flags.package, overrides, config_name, load)
            return 0
        config = load(overrides)
    except ConfigError as err:
        print(redact(f"{entry}: invalid config: {err}"), file=sys.stderr)
        return 2
    # known before anything runs: a library's error text that echoes one is masked too
    learn_secrets(getattr(config, "raw", None) or getattr(config, "__dict__", {}))
    try:
        return action(config)
    except SweepError as err:  # a sweep that did not finish, in one line
        print(redact(f"{entry}: {err}"), file=sys.stderr)
        return err.exit_code
    except ConfigError as err:  # a command's own setting that cannot be used
        print(redact(f"{entry}: {err}"), file=sys.stderr)
        return 2
    except StorageUnavailableError as err:  # linc-generate: finished shards are kept
        message = f"{entry}: {err}; re-run the same command once it is mended"
        print(redact(message), file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001 - a bug's traceback, as Python prints it, masked
        print(redact(traceback.format_exc()), end="", file=sys.stderr)
        return 1


__all__ = ["Config", "Flags", "mlflow_command", "print_mlflow_ui", "run_cli", "split_flags"]
