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
from orchestration.config.sweep_sections import SearchSpec
from orchestration.experiment.preflight import check_database
from orchestration.experiment.ray_compat import SweepASHAScheduler, SweepFIFOScheduler
from orchestration.experiment.study import (
    finished_trials,
    open_study,
    searcher,
    study_storage_url,
)
from orchestration.experiment.sweep import Sweep, SweepResult, result_row
from orchestration.failures import SweepRefused
from orchestration.report.study import pareto_table, study_figures, study_table
from orchestration.tracking.writer import RunWriter


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


def run_search(config: PlatformConfig) -> SweepResult:
    """Run (or continue) the search: its stages, then the study's best values (single
    objective) or Pareto front, logged to the parent run. The result's ``best``: the best
    trial's values with its objective, or the front (a list of them) when multi-objective."""
    spec = config.search
    if spec is None:
        raise SweepRefused("search: no search section in the config (use search=default)")
    storage = config.cluster.storage_path()
    url = ""

    def check_study_store(tracking) -> None:  # before the lease: nothing of the sweep yet
        nonlocal url
        url = study_storage_url(spec, tracking.uri, storage)
        check_database("search.storage", url)

    sweep_info = {"kind": "search"} | dataclasses.asdict(spec)
    objective = tuple(zip(spec.metrics, spec.modes, strict=True))
    keys = tuple(spec.space)
    with Sweep(
        config, sweep_info, label_keys=keys, objective=objective, checks=check_study_store,
        trials_must_finish=False,
    ) as sweep:  # fmt: skip
        study = open_study(spec, url, quiet=config.console.verbosity != "tune")
        param_space = config.with_values(**search_space(spec))
        rows: list[dict[str, Any]] = []
        for index, stage in enumerate(stage_names(spec)):
            missing = spec.num_samples - finished_trials(study)
            if not sweep.has_experiment(stage) and missing <= 0:
                break
            tuned = _tune_config(config, spec, url, max(missing, 1), index)
            rows += [result_row(r, keys) for r in sweep.fit(param_space, tuned, stage)]
        best = _log_study(sweep.runs.parent, study, spec, url)
        described = f"Search {spec.name}: Optuna study {spec.name!r}.\n\n{study_table(study, spec)}"
        sweep.finish_with(description=described)
    study_at = (spec.name, redact(url))
    return sweep.result(rows, study_table(study, spec), study=study_at, best=best)


def _log_study(parent: RunWriter, study: Any, spec: SearchSpec, url: str) -> Any:
    """The study's results on the parent run; the best trial's values and objective, or the
    Pareto front's (a list), None when no trial completed."""
    parent.set_tags({"optuna.study": spec.name, "optuna.storage": redact(url)})
    parent.log_text(study_table(study, spec), "study_trials.md")
    for name, png in study_figures(study, spec).items():
        parent.log_bytes(png, f"study/{name}")
    complete = [t for t in study.get_trials(deepcopy=False) if t.values is not None]
    if not complete:
        return None
    if spec.multi_objective:
        parent.log_text(pareto_table(study, spec), "pareto_front.md")
        front = sorted(study.best_trials, key=lambda t: t.values[0])
        return [_values(t, spec) for t in front]
    values = dotted_params(study.best_trial.params)
    parent.log_text(json.dumps(values, indent=2), "best_config.json")
    parent.set_tags({f"best.{key}": str(value) for key, value in values.items()})
    best = _values(study.best_trial, spec)
    parent.log_metrics({f"best_{metric}": best[metric] for metric in spec.metrics})
    return best


def _values(trial: Any, spec: SearchSpec) -> dict[str, Any]:
    """A study trial's searched values (as config keys) and its objective values."""
    return dotted_params(trial.params) | dict(zip(spec.metrics, trial.values, strict=True))


__all__ = ["run_search", "search_space", "stage_names"]
