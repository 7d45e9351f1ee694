"""One runner of Tune experiments: a sweep's trials, its MLflow parent run, resume and stop.

Each sweep is one Tune experiment under ``cluster.storage/<name>`` and one MLflow parent run in
``tracking.experiment``; its trials are nested MLflow runs (:mod:`orchestration.trial`). Before
Ray starts, :func:`~orchestration.experiment.preflight.preflight` checks the storage, the data
and the tracking store; the tracking target is resolved once here and handed to every trial.
Re-running the same command resumes an interrupted experiment: finished trials keep their
results, unfinished and errored ones continue from their newest intact checkpoint, and the
parent run is re-opened where it belongs (:mod:`orchestration.tracking.sweep_runs`). SIGTERM or
SIGINT stops a sweep gracefully (:mod:`orchestration.experiment.stopping`): its runs end KILLED
and :class:`SweepInterrupted` says how to resume. The ablation (:mod:`.ablation`) and the
search (:mod:`.search`) are sweeps run through :func:`run_experiment`; :func:`run_training` is
a sweep of one trial.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
from ray import tune

from linc_core.metrics import (
    EPOCH,
    EVAL_COST,
    EVAL_INFEASIBLE,
    PEAK_RSS_GB,
    TRAIN_BEST_COST,
    VALIDATION_COST,
)
from linc_core.utils.secrets import redact
from orchestration.config.platform import PlatformConfig, dotted_get, trial_label
from orchestration.data.storage import StorageUnavailableError, open_filesystem, out_of_space
from orchestration.experiment.console import TUNE_VERBOSE, init_sweep_ray, trial_events
from orchestration.experiment.lease import SweepLease
from orchestration.experiment.memory_kills import handle_memory_kills
from orchestration.experiment.preflight import PreflightError, preflight
from orchestration.experiment.schedulers import SweepFIFOScheduler
from orchestration.experiment.stopping import (
    PendingTimeout,
    PendingTimeoutError,
    StallWatch,
    SweepInterrupted,
    TrialFailed,
    stop_sweep_on_signals,
)
from orchestration.experiment.tune_state import (
    KeepIntactState,
    SweepNotRestored,
    SweepSettingsChanged,
    check_state,
    restore_tuner,
    without_driver_settings,
)
from orchestration.report.tables import ablation_table
from orchestration.tracking.sweep_runs import finish_sweep, open_parent_run
from orchestration.tracking.target import TrackingTarget
from orchestration.tracking.writer import RunWriter
from orchestration.trial.checkpoints import tolerate_gone_checkpoints
from orchestration.trial.plan import TrialPlan
from orchestration.trial.resources import placement
from orchestration.trial.trainable import train_linc

TUNE_SDK_ATTEMPTS = 8  # per S3 request of the driver's Tune storage (SlowDown under load)


@dataclass
class SweepResult:
    name: str
    parent_run_id: str
    rows: list[dict[str, Any]]
    table: str
    experiment_path: str
    tracking_uri: str
    study: tuple[str, str] | None = None  # a search's Optuna study: (name, storage URL)
    registered: str | None = None  # the best policy in the model registry: NAME/VERSION


@dataclass
class Experiment:
    """A finished (or resumed) Tune experiment and the MLflow parent run of its sweep.

    ``parent`` is the one place the sweep's own params, metrics and artifacts are written
    through (a :class:`~orchestration.tracking.writer.RunWriter`: it never raises).
    """

    results: tune.ResultGrid
    parent: RunWriter
    path: str
    tracking: TrackingTarget
    flush_timeout_s: float
    register_as: str | None = None  # the model-registry name of the sweep's best policy

    @property
    def parent_run_id(self) -> str:
        assert self.parent.run_id is not None
        return self.parent.run_id

    def finish(
        self,
        *,
        failed: bool,
        stopped: bool = False,
        report: Callable[[], None] | None = None,
        register: bool = True,
        description: str | None = None,
    ) -> str | None:
        """Settle the sweep's runs, then ``report``, then register the best trial's policy as
        ``tracking.register`` (unless ``register`` is False: a search's earlier stage) (see
        :func:`~orchestration.tracking.sweep_runs.finish_sweep`); returns the registered model
        (``NAME/VERSION``) or None."""
        return finish_sweep(
            self.tracking,
            self.parent,
            self.results,
            stopped=stopped,
            failed=failed,
            flush_timeout_s=self.flush_timeout_s,
            report=report,
            register=self.register_as if register else None,
            description=description,
        )


@dataclass(frozen=True)
class _Place:
    """Where the Tune experiment lives: ``storage_filesystem`` (None: local) and paths in it."""

    filesystem: Any
    storage_path: str
    experiment_path: str

    @classmethod
    def of(cls, config: PlatformConfig, name: str) -> _Place:
        storage = config.cluster.storage_path()
        filesystem = None
        if "://" in storage:  # Tune's syncs have no retries of their own: S3 throttles
            filesystem, storage = open_filesystem(storage, sdk_attempts=TUNE_SDK_ATTEMPTS)
        else:
            Path(storage).mkdir(parents=True, exist_ok=True)
        return cls(filesystem, storage, f"{storage.rstrip('/')}/{name}")


def experiment_exists(config: PlatformConfig, name: str) -> bool:
    """Whether a Tune experiment ``name`` is on ``config``'s storage (it can be restored)."""
    place = _Place.of(config, name)
    return tune.Tuner.can_restore(place.experiment_path, storage_filesystem=place.filesystem)


def run_experiment(
    config: PlatformConfig,
    sweep: dict[str, Any],
    param_space: dict[str, Any],
    *,
    resume: bool = True,
    tune_config: tune.TuneConfig | None = None,
    label_keys: tuple[str, ...] = ("model.variant", "train.seed"),
    tracking: TrackingTarget | None = None,
    experiment_name: str | None = None,
) -> Experiment:
    """Run (or resume) the Tune experiment ``sweep["name"]`` over ``param_space``.

    ``sweep`` describes the sweep for its parent run: ``name``, ``kind`` and what it varies;
    ``label_keys`` the config keys that name a trial in the console lines. ``tracking``: the
    target the caller resolved (with the pre-flight); None: the pre-flight runs here.
    ``experiment_name``: the Tune experiment's folder when it is not the sweep's name (a later
    stage of a search); its parent run is then the sweep's, recorded in the sweep's folder.

    Raises:
        PreflightError: storage, data or tracking store unusable (before Ray starts).
        SweepInterrupted: SIGTERM or SIGINT stopped the sweep (its runs are marked KILLED).
        PendingTimeoutError: trials waited ``cluster.pending_timeout_s`` for a node.
    """
    name = sweep["name"]
    # the one resolution of the tracking store: handed to the parent run and every trial
    plan = TrialPlan.from_config(config, tracking=tracking or preflight(config))
    # What Tune keeps and writes (params.json, result.json, its experiment state) is masked:
    # a trial takes the real store and storage from the driver (with_parameters), not from it.
    param_space = without_driver_settings(redact(param_space))
    place = _Place.of(config, experiment_name or name)
    fs = place.filesystem
    restore = resume and experiment_exists(config, experiment_name or name)
    record_path = _Place.of(config, name).experiment_path  # the sweep's record: its first stage
    # one driver per sweep, before anything is written (a second submission refuses)
    with SweepLease.take(fs or pafs.LocalFileSystem(), record_path, name):
        # before anything is written or Ray starts: nothing is read of a state whose seal fails
        trust = config.cluster.trust_unsealed_state
        check_state(fs or pafs.LocalFileSystem(), place.experiment_path, restore, trust)
        try:
            parent = open_parent_run(
                plan.tracking,
                sweep,
                plan.params(varied=tuple(label_keys), sweep=sweep),
                fs or pafs.LocalFileSystem(),
                record_path,
                restore or experiment_name is not None,
            )
        except Exception as err:  # the store answered the pre-flight, then stopped answering
            reason = redact(" ".join(str(err).split()))[:200]
            message = (
                f"tracking.uri: the store {plan.tracking.shown_uri} did not take the sweep's run"
            )
            raise PreflightError(f"{message} ({reason})") from None
        init_sweep_ray(config)
        handle_memory_kills()  # a trial the memory monitor kills is a failed trial, retried
        # every trial logs to the driver's store, under this run's parent, wherever it began
        named_by = tuple(k for k in label_keys if k not in ("model.variant", "train.seed"))
        tracking = plan.tracking.in_sweep(parent.run_id, name, run_name_keys=named_by)
        trainable = tune.with_resources(
            tolerate_gone_checkpoints(
                tune.with_parameters(train_linc, tracking=tracking, storage=config.cluster.storage)
            ),
            placement,  # per trial, from its own config: the memory its variant needs
        )
        experiment = Experiment(
            None,
            parent,
            place.experiment_path,
            tracking,
            tracking.flush_timeout_s,
            config.tracking.register,
        )
        with stop_sweep_on_signals() as stop:
            try:
                if restore:
                    tuner = restore_tuner(
                        place.filesystem, place.experiment_path, trainable, param_space
                    )
                    parent.set_status("RUNNING")
                else:
                    tuner = _new_tuner(
                        config,
                        experiment_name or name,
                        trainable,
                        param_space,
                        tune_config,
                        place,
                        label_keys,
                    )
                experiment.results = tuner.fit()
            except KeyboardInterrupt:
                stop.signal = stop.signal or "SIGINT"
            except SweepNotRestored:
                parent.close(timeout=plan.tracking.flush_timeout_s)  # nothing ran: status unchanged
                raise
            except BaseException as err:
                experiment.finish(failed=True)
                cause = _cause(err, PendingTimeoutError)
                if cause is not None:
                    raise cause from None
                if isinstance(err, OSError | EOFError) and out_of_space(place.storage_path, err):
                    # Tune reading back a result file the full storage left empty, and alike
                    raise StorageUnavailableError(
                        f"{name}: the storage {place.storage_path} is out of space (No space "
                        f"left on device: {type(err).__name__} {redact(str(err))}); free space "
                        "there and run the same command again: it resumes from each trial's "
                        "newest intact checkpoint"
                    ) from None
                raise
        if stop.signal is not None:
            # a preempted driver has its grace period, not the store's flush time
            experiment.flush_timeout_s = min(
                experiment.flush_timeout_s, config.cluster.preemption_grace_s
            )
            experiment.finish(failed=False, stopped=True)
            raise SweepInterrupted(
                f"{name}: stopped by {stop.signal}; the runs are marked KILLED. Re-run the same "
                f"command to resume from each trial's newest checkpoint ({place.experiment_path})"
            )
        return experiment


def _cause(err: BaseException, kind: type[BaseException]) -> BaseException | None:
    while err is not None and not isinstance(err, kind):
        err = err.__cause__ or err.__context__
    return err


@dataclass(frozen=True)
class TrialFolderName:
    """Tune's ``trial_dirname_creator``: ``trial_003_learning_rate=0.000846_tau_start=5.85``,
    the trial's number and the values that tell it apart (Tune's own name holds every section
    of the config)."""

    label_keys: tuple[str, ...]

    def __call__(self, trial: Any) -> str:
        number = str(trial.experiment_tag).split("_", 1)[0].zfill(3)
        label = trial_label(trial.config or {}, self.label_keys)
        safe = re.sub(r"[^A-Za-z0-9.=+-]+", "_", label).strip("_")[:100]
        return f"trial_{number}_{safe}" if safe else f"trial_{number}"


def _new_tuner(
    config: PlatformConfig,
    name: str,
    trainable: Any,
    param_space: dict[str, Any],
    tune_config: tune.TuneConfig | None,
    place: _Place,
    label_keys: tuple[str, ...],
) -> tune.Tuner:
    cluster = config.cluster
    events = trial_events(config, name, label_keys)
    callbacks: list[tune.Callback] = [events]
    if cluster.pending_timeout_s is not None:
        callbacks.append(PendingTimeout(cluster.pending_timeout_s))
    if cluster.stall_timeout_s is not None:
        callbacks.append(StallWatch(cluster.stall_timeout_s, events.notice))
    callbacks.append(KeepIntactState(place.filesystem, place.experiment_path))
    tune_config = tune_config or tune.TuneConfig(
        max_concurrent_trials=cluster.max_concurrent_trials or None,
        reuse_actors=cluster.reuse_actors,
        scheduler=SweepFIFOScheduler(),  # keeps a moved sweep's new trials in its folder
    )
    tune_config = dataclasses.replace(
        tune_config, trial_dirname_creator=TrialFolderName(tuple(label_keys))
    )
    return tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune_config,
        run_config=tune.RunConfig(
            name=name,
            storage_path=place.storage_path,
            storage_filesystem=place.filesystem,
            failure_config=tune.FailureConfig(max_failures=cluster.max_failures),
            # the last two: a trial whose newest checkpoint is damaged falls back to the other
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            callbacks=callbacks,
            verbose=TUNE_VERBOSE[config.console.verbosity],
        ),
    )


def run_training(config: PlatformConfig, name: str | None = None) -> SweepResult:
    """One trial (the config's variant and seed) as a Tune experiment."""
    run = config.run
    name = name or f"train-{run.variant}-{run.data.problem}-seed{run.train.seed}"
    experiment = run_experiment(config, {"name": name, "kind": "train"}, config.raw)
    results = experiment.results
    rows = [result_row(r) for r in results]
    failed = bool(results.errors)
    experiment.finish(failed=failed)
    if failed:
        text = redact(str(results.errors[0]))
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        raise TrialFailed(
            f"{name}: the trial failed after {config.cluster.max_failures} retries "
            f"({lines[-1] if lines else 'no detail'}); its error.txt has the traceback; re-run "
            "the same command to resume it from its newest intact checkpoint"
        )
    return sweep_result(name, experiment, rows, ablation_table(rows, compare_to=None))


def sweep_result(
    name: str, experiment: Experiment, rows: list[dict[str, Any]], table: str
) -> SweepResult:
    return SweepResult(
        name, experiment.parent_run_id, rows, table, experiment.path, experiment.tracking.uri
    )


def result_row(result: Any, keys: tuple[str, ...] = ()) -> dict[str, Any]:
    config = result.config or {}
    metrics = result.metrics or {}
    return {
        "variant": config.get("model", {}).get("variant"),
        "seed": config.get("train", {}).get("seed"),
        EVAL_COST: metrics.get(EVAL_COST),
        EVAL_INFEASIBLE: metrics.get(EVAL_INFEASIBLE),
        VALIDATION_COST: metrics.get(VALIDATION_COST),
        TRAIN_BEST_COST: metrics.get(TRAIN_BEST_COST),
        "epochs": metrics.get(EPOCH),
        "seconds": metrics.get("time_total_s"),
        PEAK_RSS_GB: metrics.get(PEAK_RSS_GB),
        "error": None if result.error is None else redact(str(result.error)).splitlines()[0][:200],
        "config": {key: dotted_get(config, key) for key in keys},
    }


__all__ = [
    "experiment_exists",
    "Experiment",
    "SweepResult",
    "SweepSettingsChanged",
    "result_row",
    "run_experiment",
    "run_training",
    "sweep_result",
]
