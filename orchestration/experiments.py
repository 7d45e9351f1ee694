"""Sweeps on Ray Tune: single runs, the ablation (variants x seeds) and the Optuna/ASHA search.

Each sweep is one Tune experiment under ``cluster.storage/<name>`` and one MLflow parent run in
``tracking.experiment``; its trials are nested MLflow runs (see :mod:`orchestration.trainable`).
Re-running the same command resumes an interrupted experiment: finished trials keep their
results, unfinished and errored ones continue from their last checkpoint, and the parent run is
re-opened (its id is kept in ``linc_sweep.json`` beside Tune's state).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
from ray import tune

from linc_core.atomic import write_atomic
from orchestration.config import PlatformConfig, SearchSpec
from orchestration.console import TUNE_VERBOSE, init_sweep_ray, trial_events
from orchestration.datasets import open_filesystem
from orchestration.plan import TrialPlan
from orchestration.tables import ablation_table, aggregate_rows, search_table
from orchestration.tracking import ensure_experiment
from orchestration.trainable import train_linc

SWEEP_FILE = "linc_sweep.json"


@dataclass
class SweepResult:
    name: str
    parent_run_id: str
    rows: list[dict[str, Any]]
    table: str
    experiment_path: str
    tracking_uri: str


@dataclass
class Experiment:
    """A finished (or resumed) Tune experiment and the MLflow parent run of its sweep."""

    results: tune.ResultGrid
    parent_run_id: str
    path: str
    tracking_uri: str

    def client(self) -> mlflow.tracking.MlflowClient:
        return mlflow.tracking.MlflowClient(tracking_uri=self.tracking_uri)

    def finish(self, *, failed: bool) -> None:
        self.client().set_terminated(self.parent_run_id, status="FAILED" if failed else "FINISHED")


def _storage(config: PlatformConfig) -> tuple[str, Any]:
    """(Tune ``storage_path``, ``storage_filesystem``) of the config's storage."""
    storage = config.cluster.storage_path()
    if "://" in storage:
        filesystem, path = open_filesystem(storage)
        return path, filesystem
    Path(storage).mkdir(parents=True, exist_ok=True)
    return storage, None


def _parent_run(plan: TrialPlan, sweep: dict[str, Any], sweep_file: Path | None) -> str:
    """The sweep's MLflow parent run id: re-opened from ``sweep_file`` when resuming.

    Its params are the sweep (``sweep.*``: name, kind and what it varies) and the effective
    settings of the base trial, which every trial shares except what the sweep varies.
    """
    name = sweep["name"]
    experiment_id = ensure_experiment(plan.tracking.uri, plan.tracking.experiment)
    client = mlflow.tracking.MlflowClient(tracking_uri=plan.tracking.uri)
    if sweep_file is not None and sweep_file.exists():
        run_id = json.loads(sweep_file.read_text())["parent_run_id"]
        client.update_run(run_id, status="RUNNING")
        return run_id
    run = client.create_run(experiment_id, run_name=name, tags={"sweep": name, "kind": "sweep"})
    params = [mlflow.entities.Param(k, v) for k, v in plan.params(sweep=sweep).items()]
    client.log_batch(run.info.run_id, params=params)  # one write (the client splits >100)
    if sweep_file is not None:
        record = {"parent_run_id": run.info.run_id, "name": name}
        write_atomic(sweep_file, json.dumps(record).encode())
    return run.info.run_id


def run_experiment(
    config: PlatformConfig,
    sweep: dict[str, Any],
    param_space: dict[str, Any],
    *,
    resume: bool = True,
    tune_config: tune.TuneConfig | None = None,
    label_keys: tuple[str, ...] = ("model.variant", "train.seed"),
) -> Experiment:
    """Run (or resume) the Tune experiment ``sweep["name"]`` over ``param_space``.

    ``sweep`` describes the sweep for its parent run: ``name``, ``kind`` and what it varies;
    ``label_keys`` the config keys that name a trial in the console lines.
    """
    name = sweep["name"]
    init_sweep_ray(config)
    plan = TrialPlan.from_config(config)  # the base trial: resolves the tracking store once
    storage_path, filesystem = _storage(config)
    experiment_path = f"{storage_path.rstrip('/')}/{name}"
    local_sweep_file = Path(experiment_path) / SWEEP_FILE if filesystem is None else None
    parent_run_id = _parent_run(plan, sweep, local_sweep_file)
    param_space = _with_tracking(param_space, parent_run_id, name, plan.tracking.uri)
    trainable = tune.with_resources(train_linc, config.cluster.trial_resources())
    restorable = tune.Tuner.can_restore(experiment_path, storage_filesystem=filesystem)
    if resume and restorable:
        tuner = tune.Tuner.restore(
            experiment_path,
            trainable,
            resume_errored=True,
            param_space=param_space,
            storage_filesystem=filesystem,
        )
    else:
        tuner = tune.Tuner(
            trainable,
            param_space=param_space,
            tune_config=tune_config
            or tune.TuneConfig(
                max_concurrent_trials=config.cluster.max_concurrent_trials or None,
                reuse_actors=config.cluster.reuse_actors,
            ),
            run_config=tune.RunConfig(
                name=name,
                storage_path=storage_path,
                storage_filesystem=filesystem,
                failure_config=tune.FailureConfig(max_failures=config.cluster.max_failures),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                verbose=TUNE_VERBOSE[config.console.verbosity],
                callbacks=[trial_events(config, name, label_keys)],
            ),
        )
    results = tuner.fit()
    return Experiment(results, parent_run_id, experiment_path, plan.tracking.uri)


def _with_tracking(
    param_space: dict[str, Any], parent_run_id: str, sweep: str, tracking_uri: str
) -> dict[str, Any]:
    """Every trial logs to the driver's resolved store, nested under the sweep's parent run."""
    space = dict(param_space)
    tracking = dict(space.get("tracking") or {})
    tracking.update(parent_run_id=parent_run_id, sweep=sweep, uri=tracking_uri)
    space["tracking"] = tracking
    return space


def run_training(config: PlatformConfig, name: str | None = None) -> SweepResult:
    """One trial (the config's variant and seed) as a Tune experiment."""
    run = config.run
    name = name or f"train-{run.variant}-{run.data.problem}-seed{run.train.seed}"
    experiment = run_experiment(config, {"name": name, "kind": "train"}, config.raw)
    results = experiment.results
    rows = [_result_row(r) for r in results]
    failed = bool(results.errors)
    experiment.finish(failed=failed)
    if failed:
        raise RuntimeError(f"{name}: trial failed: {results.errors[0]}")
    return _sweep_result(name, experiment, rows, ablation_table(rows, compare_to=None))


def _sweep_result(
    name: str, experiment: Experiment, rows: list[dict[str, Any]], table: str
) -> SweepResult:
    return SweepResult(
        name, experiment.parent_run_id, rows, table, experiment.path, experiment.tracking_uri
    )


def run_ablation(config: PlatformConfig) -> SweepResult:
    """The ablation: every variant x seed as one Tune experiment, then the paper-shaped table."""
    spec = config.ablation
    param_space = config.with_values(
        **{
            "model.variant": tune.grid_search(list(spec.variants)),
            "train.seed": tune.grid_search(list(spec.seeds)),
        }
    )
    started = time.perf_counter()
    sweep = {"kind": "ablation"} | dataclasses.asdict(spec)
    experiment = run_experiment(config, sweep, param_space, resume=spec.resume)
    results, parent, client = experiment.results, experiment.parent_run_id, experiment.client()
    rows = [_result_row(r) for r in results]
    table = ablation_table(rows, compare_to=spec.compare_to)
    client.log_text(parent, table, "ablation_table.md")
    client.log_text(parent, json.dumps(rows, indent=2), "ablation_rows.json")
    client.log_metric(parent, "sweep_seconds", time.perf_counter() - started)
    for row in aggregate_rows(rows, spec.compare_to):
        if row["gap_pct"] is not None:
            client.log_metric(parent, f"gap_pct.{row['variant']}", row["gap_pct"])
    failed = bool(results.errors)
    experiment.finish(failed=failed)
    if failed:
        raise RuntimeError(
            f"{spec.name}: {len(results.errors)} trial(s) failed; "
            f"first: {results.errors[0]}\n{table}"
        )
    return _sweep_result(spec.name, experiment, rows, table)


def search_space(spec: SearchSpec) -> dict[str, Any]:
    """``{"train.learning_rate": tune.loguniform(...)}`` from the validated search spec."""
    space: dict[str, Any] = {}
    for key, dist in spec.space.items():
        kind = dist["distribution"]
        if kind == "choice":
            space[key] = tune.choice(list(dist["values"]))
        elif kind == "uniform":
            space[key] = tune.uniform(dist["low"], dist["high"])
        elif kind == "loguniform":
            space[key] = tune.loguniform(dist["low"], dist["high"])
        else:
            space[key] = tune.randint(int(dist["low"]), int(dist["high"]))
    return space


def run_search(config: PlatformConfig) -> tuple[SweepResult, dict[str, Any]]:
    """Optuna (TPE, seeded) through ``OptunaSearch`` with ASHA; returns the best trial's values."""
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    spec = config.search
    if spec is None:
        raise ValueError("search: no search section in the config (use search=default)")
    searcher = ConcurrencyLimiter(
        OptunaSearch(metric=spec.metric, mode=spec.mode, seed=spec.seed),
        max_concurrent=spec.max_concurrent,
    )
    scheduler = ASHAScheduler(
        time_attr="training_iteration",
        metric=spec.metric,
        mode=spec.mode,
        max_t=max(config.run.train.epochs, spec.grace_period),
        grace_period=spec.grace_period,
        reduction_factor=spec.reduction_factor,
    )
    tune_config = tune.TuneConfig(
        search_alg=searcher,
        scheduler=scheduler,
        num_samples=spec.num_samples,
        reuse_actors=config.cluster.reuse_actors,
    )
    param_space = config.with_values(**search_space(spec))
    sweep = {"kind": "search"} | dataclasses.asdict(spec)
    experiment = run_experiment(
        config, sweep, param_space, tune_config=tune_config, label_keys=tuple(spec.space)
    )
    results, parent, client = experiment.results, experiment.parent_run_id, experiment.client()
    best = results.get_best_result(metric=spec.metric, mode=spec.mode, scope="all")
    best_values = {key: _dotted_get(best.config, key) for key in spec.space}
    best_metric = _best_metric(best, spec.metric, spec.mode)
    client.log_text(parent, json.dumps(best_values, indent=2), "best_config.json")
    for key, value in best_values.items():
        client.set_tag(parent, f"best.{key}", str(value))
    client.log_metric(parent, f"best_{spec.metric}", best_metric)
    rows = [_result_row(r, tuple(spec.space)) for r in results]
    experiment.finish(failed=False)
    result = _sweep_result(spec.name, experiment, rows, search_table(rows, spec))
    return result, best_values | {spec.metric: best_metric}


def _best_metric(result: Any, metric: str, mode: str) -> float:
    history = result.metrics_dataframe
    if history is not None and metric in history:
        values = history[metric].dropna()
        return float(values.min() if mode == "min" else values.max())
    return float(result.metrics[metric])


def _dotted_get(values: dict[str, Any], key: str) -> Any:
    node: Any = values
    for part in key.split("."):
        node = node[part]
    return node


def _result_row(result: Any, keys: tuple[str, ...] = ()) -> dict[str, Any]:
    config = result.config or {}
    metrics = result.metrics or {}
    return {
        "variant": config.get("model", {}).get("variant"),
        "seed": config.get("train", {}).get("seed"),
        "eval_cost": metrics.get("eval_cost"),
        "eval_infeasible": metrics.get("eval_infeasible"),
        "validation_cost": metrics.get("validation_cost"),
        "train_best_cost": metrics.get("train_best_cost"),
        "epochs": metrics.get("epoch"),
        "seconds": metrics.get("time_total_s"),
        "error": None if result.error is None else str(result.error).splitlines()[0][:200],
        "config": {key: _dotted_get(config, key) for key in keys},
    }


__all__ = [
    "Experiment",
    "SweepResult",
    "run_ablation",
    "run_experiment",
    "run_search",
    "run_training",
    "search_space",
]
