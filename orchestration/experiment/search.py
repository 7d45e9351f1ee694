"""The hyper-parameter search: Optuna (TPE, seeded) through Tune's ``OptunaSearch`` in a
persistent study, with ASHA early stopping (single objective) and a concurrency limit.

A search runs in stages, each one Tune experiment on the same study and under the same MLflow
parent run: ``NAME``, then ``NAME-more1``, ``NAME-more2``... Re-running the same command
restores every stage (an interrupted trial continues from its checkpoint, finished ones are
kept), then, if the study holds fewer finished trials than ``search.num_samples``, starts one
more stage for the missing trials only; TPE conditions them on every trial before.

At the end the parent run gets the study's trials table and Optuna's figures
(:mod:`orchestration.report.study`) and

* one objective: the best trial's values (tags ``best.KEY``, ``best_config.json``), its
  objective (``best_METRIC``) and run (``best_run``; ``best_eval_cost`` is its evaluation): every
  ``best_*`` from the one trial the study calls best;
* several objectives, no single best: the Pareto front (tags ``pareto_front.trials``,
  ``pareto_front.run_ids`` and one ``pareto_front.trial_N`` per front trial with its values and
  run; ``pareto_front.md``, ``pareto_front.json``) and each objective's optimum named as such
  (metric ``lowest_METRIC`` or ``highest_METRIC``, tags ``lowest_METRIC.trial`` and
  ``.run_id``), which may come from different trials.

Whoever can write the study's storage can add trials to it: a study trial is believed only where
a run of this sweep (under its parent run, tagged with the study and the trial's number) records
it, with the trial's objective values as its metrics and its parameters in the search space.
Any other trial is left out of the tables, figures and best, with one warning naming the study
and the trials, and is not counted among ``search.num_samples``; every name or value shown is
plain text (:func:`orchestration.report.study.plain_text`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from typing import Any

from ray import tune

from linc_core.metrics import EVAL_COST
from linc_core.utils.secrets import redact
from orchestration.config.platform import PlatformConfig, dotted_params
from orchestration.config.sweep_sections import SearchSpec
from orchestration.experiment.preflight import check_database
from orchestration.experiment.ray_compat import SweepASHAScheduler, SweepFIFOScheduler
from orchestration.experiment.study import (
    MLFLOW_RUN_ATTR,
    RUN_FINDERS,
    TUNE_TRIAL_ATTR,
    finished_trials,
    open_study,
    searcher,
    study_storage_url,
)
from orchestration.experiment.sweep import Sweep, SweepResult
from orchestration.failures import SweepRefused
from orchestration.report.study import (
    checked_study,
    pareto_table,
    plain_text,
    study_figures,
    study_table,
)
from orchestration.report.tables import result_row
from orchestration.tracking.runs import BestChoice, SweepRuns
from orchestration.tracking.store import TRIAL_TAG

logger = logging.getLogger(__name__)


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
    try:  # Tune refuses, mid-sweep, a report without the metric: eval_* come with the last only
        spec.require_reported(config.run, every_report=True)
    except ValueError as err:
        raise SweepRefused(f"search.{err}") from None
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
        tracking, parent_id = sweep.runs.tracking, str(sweep.runs.parent.run_id)
        RUN_FINDERS[spec.name] = lambda trial_id: _quietly(
            tracking.trial_run_id, parent_id, trial_id
        )
        try:
            for index, stage in enumerate(stage_names(spec)):
                missing = spec.num_samples - _finished(sweep.runs, study, spec)
                if not sweep.has_experiment(stage) and missing <= 0:
                    break
                tuned = _tune_config(config, spec, url, max(missing, 1), index)
                rows += [result_row(r, keys) for r in sweep.run_trials(param_space, tuned, stage)]
        finally:
            RUN_FINDERS.pop(spec.name, None)
        shown = _checked(sweep.runs, study, spec, url)
        best = _log_study(sweep.runs, shown, spec, url)
        described = f"Search {spec.name}: Optuna study {spec.name!r}.\n\n{study_table(shown, spec)}"
        sweep.finish_with(description=described)
    study_at = (spec.name, redact(url))
    return sweep.result(rows, study_table(shown, spec), study=study_at, best=best)


def _log_study(runs: SweepRuns, study: Any, spec: SearchSpec, url: str) -> Any:
    """The study's results on the parent run (see the module docstring); the best trial's
    values and objective, or the Pareto front's (a list), None when no trial completed.
    ``study``: the search's :func:`checked_study` (its believed trials only)."""
    parent = runs.parent
    parent.set_tags({"optuna.study": spec.name, "optuna.storage": redact(url)})
    parent.log_text(study_table(study, spec), "study_trials.md")
    for name, png in study_figures(study, spec).items():
        parent.log_bytes(png, f"study/{name}")
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if not complete:
        return None
    run_ids = _trial_run_ids(study)
    if spec.multi_objective:
        return _log_front(runs, study, spec, complete, run_ids)
    values = dotted_params(study.best_trial.params)
    parent.log_text(json.dumps(values, indent=2), "best_config.json")
    parent.set_tags({f"best.{key}": plain_text(value) for key, value in values.items()})
    best = _values(study.best_trial, spec)
    parent.log_metrics({f"best_{metric}": best[metric] for metric in spec.metrics})
    chosen = run_ids.get(study.best_trial.number)
    if chosen is not None:
        why = f"the study's best {spec.metrics[0]} ({spec.modes[0]}), trial {best['trial']}"
        runs.best = BestChoice(chosen, why)
    return best


def _log_front(
    runs: SweepRuns, study: Any, spec: SearchSpec, complete: list[Any], run_ids: dict[int, str]
) -> list[dict[str, Any]]:
    """A multi-objective study's Pareto front and per-objective optima on the parent run (see
    the module docstring); the front, each trial's values with its ``trial`` and ``run_id``."""
    parent = runs.parent
    front = [
        _values(t, spec) | {"run_id": run_ids.get(t.number)}
        for t in sorted(study.best_trials, key=lambda t: (t.values[0], t.number))
    ]
    parent.log_text(pareto_table(study, spec), "pareto_front.md")
    parent.log_text(json.dumps(front, indent=2), "pareto_front.json")
    tags = {
        "pareto_front.trials": ", ".join(str(f["trial"]) for f in front),
        "pareto_front.run_ids": ", ".join(str(f["run_id"]) for f in front),
    }
    for trial in front:
        shown = " ".join(f"{m}={trial[m]:.6g}" for m in spec.metrics)
        tags[f"pareto_front.trial_{trial['trial']}"] = f"{shown} run={trial['run_id']}"
    metrics: dict[str, float] = {"pareto_front_size": float(len(front))}
    for index, (metric, mode) in enumerate(zip(spec.metrics, spec.modes, strict=True)):
        pick = min if mode == "min" else max
        optimum = pick(complete, key=lambda t: (t.values[index], t.number))
        named = f"{'lowest' if mode == 'min' else 'highest'}_{metric}"
        metrics[named] = optimum.values[index]
        tags[f"{named}.trial"] = str(optimum.number)
        tags[f"{named}.run_id"] = str(run_ids.get(optimum.number))
    parent.log_metrics(metrics)
    parent.set_tags(tags)
    # the policy registered: the front's lowest eval_cost (an evaluation, not a best)
    costs = {r.info.run_id: r.data.metrics.get(EVAL_COST) for r in _child_runs(runs)}
    on_front = [f["run_id"] for f in front if costs.get(f["run_id"]) is not None]
    chosen = min(on_front, key=lambda run_id: costs[run_id]) if on_front else None
    why = "lowest eval_cost " + (
        "on the Pareto front" if on_front else "(none on the front has one)"
    )
    runs.best = BestChoice(chosen, why, single=False)
    return front


def _child_runs(runs: SweepRuns) -> list[Any]:
    return _quietly(runs.tracking.child_runs, str(runs.parent.run_id)) or []


def _trial_run_ids(study: Any) -> dict[int, str]:
    """Study trial number -> its MLflow run id, for the trials of ``study`` (a checked study:
    each trial's ``mlflow_run_id`` is the run of this sweep that records it)."""
    found: dict[int, str] = {}
    for trial in study.get_trials(deepcopy=False):
        recorded = trial.user_attrs.get(MLFLOW_RUN_ATTR)
        if isinstance(recorded, str):
            found[trial.number] = recorded
    return found


def _finished(runs: SweepRuns, study: Any, spec: SearchSpec) -> int:
    """The study's believed trials that ended: complete, pruned or failed (the study's own
    count when the tracking store cannot be read)."""
    from optuna.trial import TrialState

    believed = _believed(runs, study, spec, values=False)  # a run's last records may be late
    if believed is None:
        return finished_trials(study)
    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    trials = study.get_trials(deepcopy=False)
    return sum(t.state in done and t.number in believed for t in trials)


def _checked(runs: SweepRuns, study: Any, spec: SearchSpec, url: str) -> Any:
    """The study's believed trials (:func:`checked_study`, each with its run's id as its
    ``mlflow_run_id``); the others named in one warning."""
    believed = _believed(runs, study, spec)
    trials = study.get_trials(deepcopy=False)
    left_out = [t.number for t in trials if t.number not in (believed or {})]
    if believed is None and trials:
        logger.warning(
            "search %s: the tracking store could not be read: no trial of the study %s is shown",
            spec.name,
            redact(url),
        )
    elif left_out:
        named = ", ".join(map(str, left_out[:20])) + (", ..." if len(left_out) > 20 else "")
        logger.warning(
            "search %s: study %s: trial(s) %s left out (%d): no run of this sweep records them "
            "with their values and parameters",
            spec.name,
            redact(url),
            named,
            len(left_out),
        )
    attrs = {number: {MLFLOW_RUN_ATTR: run_id} for number, run_id in (believed or {}).items()}
    return checked_study(study, attrs)


def _believed(
    runs: SweepRuns, study: Any, spec: SearchSpec, values: bool = True
) -> dict[int, str] | None:
    """Study trial number -> its run's id, for the trials a run of this sweep records (see the
    module docstring; a run of an older search: by its ``tune_trial_id``); ``values``: a
    complete trial's objective values checked too. None when the tracking store cannot be
    read."""
    children = _quietly(runs.tracking.child_runs, str(runs.parent.run_id))
    if children is None:
        return None
    trials = study.get_trials(deepcopy=False)
    claims: dict[Any, list[int]] = {}
    for trial in trials:
        claims.setdefault(trial.user_attrs.get(TUNE_TRIAL_ATTR), []).append(trial.number)
    candidates: dict[int, list[Any]] = {}
    for run in children:
        tags = run.data.tags
        if tags.get("optuna.study", spec.name) != spec.name:
            continue
        number = tags.get("optuna.trial_number")
        claimed = claims.get(tags.get(TRIAL_TAG)) or []
        if number and number.isdigit():
            candidates.setdefault(int(number), []).append(run)
        elif len(claimed) == 1 and tags.get(TRIAL_TAG):
            candidates.setdefault(claimed[0], []).append(run)
    found: dict[int, str] = {}
    for trial in trials:
        found_runs = candidates.get(trial.number, [])
        matching = [r for r in found_runs if _records(r, trial, spec, values)]
        if matching:
            found[trial.number] = matching[0].info.run_id
    return found


def _records(run: Any, trial: Any, spec: SearchSpec, values: bool) -> bool:
    """Whether ``run`` records study trial ``trial``: the run the trial names (if it names
    one), its parameters in the space and, ``values``: a complete trial's objective values as
    the run's metrics (a pruned trial's last ones may reach the run only as the sweep ends;
    such a trial is never a best)."""
    recorded = trial.user_attrs.get(MLFLOW_RUN_ATTR)
    if recorded is not None and recorded != run.info.run_id:
        return False
    params = dotted_params(trial.params)
    if not all(key in spec.space and _allowed(spec.space[key], v) for key, v in params.items()):
        return False
    if trial.state.name != "COMPLETE" or not values:
        return True
    if trial.values is None or len(trial.values) != len(spec.metrics):
        return False
    logged = [run.data.metrics.get(metric) for metric in spec.metrics]
    return all(
        isinstance(m, float | int) and math.isclose(m, v, rel_tol=1e-9, abs_tol=1e-12)
        for m, v in zip(logged, trial.values, strict=True)
    )


def _allowed(dist: dict[str, Any], value: Any) -> bool:
    """Whether ``value`` is one the search space's distribution ``dist`` can draw."""
    if dist["distribution"] == "choice":
        return any(
            value == v and isinstance(value, bool) == isinstance(v, bool) for v in dist["values"]
        )
    number = isinstance(value, float | int) and not isinstance(value, bool)
    return number and dist["low"] <= value <= dist["high"]


def _quietly(call: Any, *args: Any) -> Any:
    """``call(*args)``, None when the tracking store fails (it costs the links, not the sweep)."""
    try:
        return call(*args)
    except Exception:  # noqa: BLE001 - the store's trouble is the settlement's to report
        return None


def _values(trial: Any, spec: SearchSpec) -> dict[str, Any]:
    """A study trial's number, searched values (as config keys) and objective values."""
    values = dict(zip(spec.metrics, trial.values, strict=True))
    return {"trial": trial.number} | dotted_params(trial.params) | values


__all__ = ["run_search", "search_space", "stage_names"]
