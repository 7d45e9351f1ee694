"""What the fault scenarios share: the sweeps they run, their arguments, and reading the
outcome back from the tracking store."""

from __future__ import annotations

from pathlib import Path

from faults.harness import (
    SWEEP,
    Audit,
    Driver,
    Row,
    one_line_error,
)

TRAIN = "train-full_linc-cvrptw-seed1234"  # linc-tune's experiment name for the SWEEP config
ABLATION = "ablation-smoke"
EXPERIMENT = "faults"


def sqlite_uri(storage: Path) -> str:
    return f"sqlite:///{storage / 'mlflow.db'}"


def train_args(storage: Path, epochs: int, *extra: str) -> list[str]:
    return [*SWEEP, f"train.epochs={epochs}", f"cluster.storage={storage}", *extra]


def finish_row(row: Row, result: Audit, rc: int, outcome: str, checks: bool = True) -> Row:
    """The row of a sweep that should have finished; ``checks``: the scenario's own checks."""
    row.metrics_lost, row.duplicated_steps = result.metrics_lost, result.duplicated_steps
    row.runs_running = result.runs_running
    finished = rc == 0 and result.trials > 0 and result.finished == result.trials
    row.ok = finished and result.clean and checks
    row.outcome = outcome if finished else f"NOT FINISHED (exit {rc}, {result})"
    if finished and not checks:
        row.outcome += " (but see the notes)"
    return row


def refusal_row(row: Row, driver: Driver, expected: str, storage: Path) -> Row:
    """A command that must refuse at once: exit 2, one line naming the setting and the place,
    no Ray started, nothing created under the storage folder (no store, no run, no state)."""
    rc = driver.wait(300)
    output = driver.output()
    line = one_line_error(output)
    no_ray = "Started a local Ray" not in output and "ray.init" not in output
    created = sorted(p.name for p in storage.rglob("*")) if storage.exists() else []
    row.ok = rc == 2 and line is not None and expected in line and no_ray and not created
    row.outcome = f"exit {rc}: {line}" if line else f"exit {rc}: {output[-300:]!r}"
    row.metrics_lost, row.duplicated_steps, row.runs_running = 0, 0, 0
    row.notes.append(f"Ray started: {not no_ray}; created in the storage: {created or 'none'}")
    return row


def meminfo() -> tuple[int, int]:
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, amount = line.split(":")
        values[name] = int(amount.split()[0]) * 1024
    return values["MemTotal"], values["MemAvailable"]


def run_tag(uri: str, key: str) -> str | None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    values = [r.data.tags.get(key) for r in runs if "variant" in r.data.tags]
    return values[0] if values else None


def parent_runs(uri: str) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    return {r.info.run_id: r.info.status for r in runs if r.data.tags.get("kind") == "sweep"}


def epochs_logged(uri: str) -> int:
    """Epochs the sweep's trial has logged (0 while the driver is still creating the store)."""
    from mlflow.tracking import MlflowClient

    try:
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(EXPERIMENT)
        runs = client.search_runs([experiment.experiment_id]) if experiment else []
        trials = [r for r in runs if "variant" in r.data.tags]
        return len(client.get_metric_history(trials[0].info.run_id, "epoch")) if trials else 0
    except Exception:  # noqa: BLE001 - the store's tables are being created by the driver
        return 0


__all__ = [
    "ABLATION",
    "EXPERIMENT",
    "TRAIN",
    "epochs_logged",
    "finish_row",
    "meminfo",
    "parent_runs",
    "refusal_row",
    "run_tag",
    "sqlite_uri",
    "train_args",
]
