"""The hyper-parameter search: Optuna (TPE, seeded) through Tune's ``OptunaSearch`` in a
persistent study, with ASHA early stopping (single objective) and a concurrency limit.

A search runs in stages, each one Tune experiment on the same study and under the same MLflow
parent run: ``NAME``, then ``NAME-more1``, ``NAME-more2``... Re-running the same command
restores every stage (an interrupted trial continues from its checkpoint, finished ones are
kept), then, if the study holds fewer finished trials than ``search.num_samples``, starts one
more stage for the missing trials only; TPE conditions them on every trial before.

At the end the parent run gets the best values (tags ``best.KEY``, ``best_METRIC``) or, for a
multi-objective search, the Pareto front (``pareto_front.md``), the study's trials table and
Optuna's figures (:mod:`orchestration.report.study`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ray import tune

from linc_core.utils.secrets import redact
from orchestration.config.platform import PlatformConfig, dotted_params
from orchestration.config.sections import SearchSpec
from orchestration.experiment.preflight import check_database, preflight
from orchestration.experiment.runner import (
    Experiment,
    SweepResult,
    experiment_exists,
    result_row,
    run_experiment,
    sweep_result,
)
from orchestration.experiment.schedulers import SweepASHAScheduler, SweepFIFOScheduler
from orchestration.experiment.study import (
    finished_trials,
    open_study,
    searcher,
    study_storage_url,
)
from orchestration.report.study import pareto_table, study_figures, study_table


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


def stage_names(spec: SearchSpec) -> list[str]:
    """``NAME``, ``NAME-more1``, ...: the Tune experiments of a search, in order."""
    return [spec.name] + [f"{spec.name}-more{k}" for k in range(1, 1000)]


def _tune_config(
    config: PlatformConfig, spec: SearchSpec, url: str, samples: int, stage: int
) -> Any:
    from ray.tune.search import ConcurrencyLimiter

    if spec.multi_objective:  # ASHA ranks trials by one metric
        scheduler: Any = SweepFIFOScheduler()
    else:
        scheduler = SweepASHAScheduler(
            time_attr="training_iteration",
            metric=spec.metrics[0],
            mode=spec.modes[0],
            max_t=max(config.run.train.epochs, spec.grace_period),
            grace_period=spec.grace_period,
            reduction_factor=spec.reduction_factor,
        )
    return tune.TuneConfig(
        search_alg=ConcurrencyLimiter(
            searcher(spec, url, stage), max_concurrent=spec.max_concurrent
        ),
        scheduler=scheduler,
        num_samples=samples,
        reuse_actors=config.cluster.reuse_actors,
    )


def run_search(config: PlatformConfig) -> tuple[SweepResult, dict[str, Any]]:
    """Run (or continue) the search: its stages, then the study's best values (single
    objective) or Pareto front, logged to the parent run. Returns the result and the best
    trial's values with its objective (the first trial of the front when multi-objective)."""
    spec = config.search
    if spec is None:
        raise ValueError("search: no search section in the config (use search=default)")
    tracking = preflight(config)  # resolved once, for every stage
    url = study_storage_url(spec, tracking.uri, config.cluster.storage_path())
    check_database("search.storage", url)
    study = open_study(spec, url, quiet=config.console.verbosity != "tune")
    param_space = config.with_values(**search_space(spec))
    sweep = {"kind": "search"} | dataclasses.asdict(spec)
    rows: list[dict[str, Any]] = []
    experiment: Experiment | None = None
    for index, stage in enumerate(stage_names(spec)):
        exists = experiment_exists(config, stage)
        missing = spec.num_samples - finished_trials(study)
        if not exists and missing <= 0:
            break
        if experiment is not None:
            experiment.finish(failed=False, register=False)  # the stage before: settled first
        experiment = run_experiment(
            config,
            sweep,
            param_space,
            tune_config=_tune_config(config, spec, url, max(missing, 1), index),
            label_keys=tuple(spec.space),
            tracking=tracking,
            experiment_name=stage,
        )
        rows += [result_row(r, tuple(spec.space)) for r in experiment.results]
    assert experiment is not None  # the first stage always runs
    best = _log_study(experiment, study, spec, url)
    described = f"Search {spec.name}: Optuna study {spec.name!r}.\n\n{study_table(study, spec)}"
    registered = experiment.finish(failed=False, description=described)
    result = sweep_result(spec.name, experiment, rows, study_table(study, spec))
    study_at = (spec.name, redact(url))
    return dataclasses.replace(result, study=study_at, registered=registered), best


def _log_study(experiment: Experiment, study: Any, spec: SearchSpec, url: str) -> dict[str, Any]:
    """The study's results on the parent run; the best (or first Pareto) trial's values."""
    parent = experiment.parent
    parent.set_tags({"optuna.study": spec.name, "optuna.storage": redact(url)})
    parent.log_text(study_table(study, spec), "study_trials.md")
    for name, png in study_figures(study, spec).items():
        parent.log_bytes(png, f"study/{name}")
    complete = [t for t in study.get_trials(deepcopy=False) if t.values is not None]
    if not complete:
        return {}
    if spec.multi_objective:
        parent.log_text(pareto_table(study, spec), "pareto_front.md")
        best = sorted(study.best_trials, key=lambda t: t.values[0])[0]
    else:
        best = study.best_trial
    values = dotted_params(best.params)
    parent.log_text(json.dumps(values, indent=2), "best_config.json")
    for key, value in values.items():
        parent.set_tag(f"best.{key}", str(value))
    objectives = dict(zip(spec.metrics, best.values, strict=True))
    for metric, value in objectives.items():
        parent.log_metric(f"best_{metric}", value)
    return values | objectives


__all__ = ["run_search", "search_space", "stage_names"]
