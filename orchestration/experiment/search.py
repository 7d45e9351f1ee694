"""The hyper-parameter search: Optuna (TPE, seeded) through Tune's ``OptunaSearch``, with
ASHA early stopping and a concurrency limit."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ray import tune

from orchestration.config.platform import PlatformConfig
from orchestration.config.sections import SearchSpec
from orchestration.experiment.runner import (
    SweepResult,
    dotted_get,
    result_row,
    run_experiment,
    sweep_result,
)
from orchestration.experiment.schedulers import SweepASHAScheduler
from orchestration.report.tables import search_table


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
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    spec = config.search
    if spec is None:
        raise ValueError("search: no search section in the config (use search=default)")
    searcher = ConcurrencyLimiter(
        OptunaSearch(metric=spec.metric, mode=spec.mode, seed=spec.seed),
        max_concurrent=spec.max_concurrent,
    )
    scheduler = SweepASHAScheduler(
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
    results, parent = experiment.results, experiment.parent
    best = results.get_best_result(metric=spec.metric, mode=spec.mode, scope="all")
    best_values = {key: dotted_get(best.config, key) for key in spec.space}
    best_metric = _best_metric(best, spec.metric, spec.mode)
    parent.log_text(json.dumps(best_values, indent=2), "best_config.json")
    for key, value in best_values.items():
        parent.set_tag(f"best.{key}", str(value))
    parent.log_metric(f"best_{spec.metric}", best_metric)
    rows = [result_row(r, tuple(spec.space)) for r in results]
    experiment.finish(failed=False)
    result = sweep_result(spec.name, experiment, rows, search_table(rows, spec))
    return result, best_values | {spec.metric: best_metric}


def _best_metric(result: Any, metric: str, mode: str) -> float:
    history = result.metrics_dataframe
    if history is not None and metric in history:
        values = history[metric].dropna()
        return float(values.min() if mode == "min" else values.max())
    return float(result.metrics[metric])


__all__ = ["run_search", "search_space"]
