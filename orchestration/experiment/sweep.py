"""A sweep's lifecycle in one object: :class:`Sweep`, a context manager around Tune experiments.

    with Sweep(config, {"name": "ablation-smoke", "kind": "ablation"}) as sweep:
        results = sweep.run_trials(param_space)    # new, or restored where it stopped
        sweep.finish_with(report=..., description=...)
    sweep.registered                                # the best policy: NAME/VERSION, or None

Entering (each step in the one place that does it):

1. the console is prepared (:func:`~orchestration.experiment.console.prepare_console`), before
   anything can print;
2. pre-flight (:func:`~orchestration.experiment.preflight.preflight`): storage, data and the
   tracking store answer, the tracking target is resolved once;
3. the lease of the sweep's folder is taken (:class:`~.folder.SweepFolder`: one driver per sweep);
4. Tune's saved state is checked against its seal and mended (:func:`~.tune_state.check_state`):
   nothing of it is read before, and what it found decides between restoring and a new tuner;
5. the parent run is opened or re-opened (:class:`~orchestration.tracking.runs.SweepRuns`) and
   the sweep's folder records it;
6. Ray starts (:func:`~orchestration.ray_session.init_ray`) with the workarounds of the pinned
   Ray (:mod:`~.ray_compat`).

:meth:`Sweep.run_trials` runs one Tune experiment (the sweep's own, or a later stage of a
search): a new tuner, or the saved one restored (:func:`~.ray_compat.restore_tuner`), with every
linc Tune callback (:func:`~.callbacks.tune_callbacks`); SIGTERM and SIGINT, from entering to
leaving, stop the sweep gracefully (:func:`~.callbacks.stop_sweep_on_signals`). Leaving settles
the runs, tags the checkpoints, runs the caller's report and registers the best policy
(:meth:`SweepRuns.settle`), marks a stopped sweep KILLED, releases the lease, and turns every
failure into one of :mod:`orchestration.failures` (one line, an exit code): a bug is the only
traceback.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from ray import tune

from linc_core.metrics import EVAL_COST
from linc_core.utils.secrets import redact, redact_logging
from orchestration.config.platform import PlatformConfig, dotted_get, trial_label
from orchestration.experiment.callbacks import stop_sweep_on_signals, tune_callbacks
from orchestration.experiment.console import TUNE_VERBOSE, TrialEvents, prepare_console
from orchestration.experiment.folder import SweepFolder, SweepLease
from orchestration.experiment.preflight import preflight
from orchestration.experiment.ray_compat import (
    SweepFIFOScheduler,
    install_driver_workarounds,
    restore_tuner,
    tolerate_gone_checkpoints,
)
from orchestration.experiment.tune_state import CheckedState, check_state, earlier_names
from orchestration.failures import SweepInterrupted, TrialFailed, one_line, sweep_failure
from orchestration.ray_session import init_ray
from orchestration.tracking.runs import SweepRuns
from orchestration.tracking.target import TrackingTarget
from orchestration.trial.plan import TrialPlan
from orchestration.trial.resources import placement
from orchestration.trial.trainable import train_linc

VARIANT_AND_SEED = ("model.variant", "train.seed")


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
    best: Any = None  # a search's best values, or its Pareto front (a list of them)


class Sweep:
    """The driver of one sweep (see the module docstring).

    Args:
        config: the sweep's validated config (its base trial and the platform around it).
        sweep: what the parent run records of the sweep: ``name``, ``kind`` and what it varies.
        label_keys: the config keys that tell its trials apart (console lines, run names).
        objective: what the sweep optimises, ``(metric, "min" | "max")`` pairs (its summary).
        resume: restore the sweep's saved experiments (False: a new one, refused if saved).
        checks: more pre-flight, given the resolved tracking target (a search's study store).
        trials_must_finish: a trial that failed for good ends the sweep in :class:`TrialFailed`
            (a search goes on: its study records the failure).
    """

    def __init__(
        self,
        config: PlatformConfig,
        sweep: dict[str, Any],
        *,
        label_keys: tuple[str, ...] = VARIANT_AND_SEED,
        objective: tuple[tuple[str, str], ...] = ((EVAL_COST, "min"),),
        resume: bool = True,
        checks: Callable[[TrackingTarget], None] | None = None,
        trials_must_finish: bool = True,
    ) -> None:
        self.config, self.sweep, self.name = config, sweep, sweep["name"]
        self.label_keys, self.objective, self.resume = tuple(label_keys), objective, resume
        self.checks, self.trials_must_finish = checks, trials_must_finish
        self.folder: SweepFolder | None = None  # the sweep's, once entered (after pre-flight)
        self.experiment: SweepFolder | None = None  # the Tune experiment's run last
        self._state: CheckedState | None = None  # Tune's state in the sweep's folder, checked
        self.results: list[Any] = []
        self.registered: str | None = None
        self._lease: SweepLease | None = None
        self._runs: SweepRuns | None = None
        self._fitting, self._new_parent = False, False
        self._ending: dict[str, Any] = {}
        self._signals = ExitStack()
        run = config.run
        self.events = TrialEvents(
            self.name, config.console, run.train.epochs, self.label_keys, objective, run.train
        )

    # -- entering ------------------------------------------------------------------------------
    def __enter__(self) -> Sweep:
        self._stop = self._signals.enter_context(stop_sweep_on_signals())
        try:
            prepare_console(self.config.console)
            tracking = preflight(self.config)
            if self.checks is not None:
                self.checks(tracking)
            folder = SweepFolder.on_storage(self.config.cluster.storage_path(), self.name)
            self.folder = self.experiment = folder
            self._lease = folder.take_lease(self.name)
            self._stop.check()
            trust, setting = (
                self.config.cluster.trust_unsealed_state,
                f"{self.sweep['kind']}.resume",
            )
            self._state = check_state(folder, self.resume, trust, setting)
            plan = TrialPlan.from_config(self.config, tracking)
            params = plan.params(varied=self.label_keys, sweep=self.sweep)
            recorded = folder.record()  # also of a sweep stopped before Tune saved its state
            self._runs = SweepRuns.open(tracking, self.sweep, params, folder.path, recorded)
            self._new_parent = self._runs.parent.run_id != (recorded or {}).get("parent_run_id")
            folder.write_record(self._runs.record)
            start_ray(self.config)
            self._stop.check()  # a signal while Ray started
        except BaseException as err:
            self._leave(err)  # raises the failure it maps err to
            raise  # a bug: its traceback
        return self

    @property
    def runs(self) -> SweepRuns:
        assert self._runs is not None, "use the Sweep as a context manager"
        return self._runs

    def has_experiment(self, name: str) -> bool:
        """Whether a Tune experiment ``name`` (a search's stage) is saved beside the sweep's."""
        return self._experiment_folder(name).can_restore()

    # -- running -------------------------------------------------------------------------------
    def run_trials(
        self,
        param_space: dict[str, Any],
        tune_config: tune.TuneConfig | None = None,
        experiment: str | None = None,
    ) -> tune.ResultGrid:
        """Run (or resume) the Tune experiment ``experiment`` (None: the sweep's own) over
        ``param_space``; its results (also kept in :attr:`results` for the end)."""
        space = tune_space(param_space)
        state = self._checked_state(experiment or self.name)
        callbacks = tune_callbacks(self.events, self.config.cluster, state)
        folder = state.folder
        try:
            if state.restoring:
                with earlier_names():  # what a sweep begun by an earlier linc pickled
                    tuner = restore_tuner(folder, self._trainable(), space, callbacks)
            else:
                tuner = self._new_tuner(folder, space, tune_config, callbacks)
            self.runs.parent.set_status("RUNNING")  # a re-opened parent too
            self._fitting, self.experiment = True, folder
            self._stop.check()
            results = tuner.fit()
        except KeyboardInterrupt:
            self._stop.signal = self._stop.signal or "SIGINT"
        if (signal_name := self._stop.signal) is not None:
            raise SweepInterrupted(
                f"{self.name}: stopped by {signal_name}; the runs are marked KILLED. Re-run the "
                f"same command to resume from each trial's newest checkpoint ({folder.uri()})"
            )
        self.results += list(results)
        return results

    def _checked_state(self, name: str) -> CheckedState:
        """Tune's state of experiment ``name``: the sweep's own was checked on entering; a
        search's later stage, beside it, is checked now."""
        assert self._state is not None, "use the Sweep as a context manager"
        if name == self.name:
            return self._state
        trust = self.config.cluster.trust_unsealed_state
        return check_state(self._experiment_folder(name), self.resume, trust)

    def _experiment_folder(self, name: str) -> SweepFolder:
        assert self.folder is not None, "use the Sweep as a context manager"
        return self.folder if name == self.name else self.folder.sibling(name)

    def _trainable(self) -> Any:
        # every trial logs to the driver's store, under this sweep's parent, wherever it began
        named_by = tuple(k for k in self.label_keys if k not in VARIANT_AND_SEED)
        trial = tune.with_parameters(
            train_linc,
            tracking=self.runs.for_trials(named_by),
            storage=self.config.cluster.storage,
        )
        # per trial, from its own config: the memory its variant needs
        return tune.with_resources(tolerate_gone_checkpoints(trial), placement)

    def _new_tuner(
        self,
        folder: SweepFolder,
        param_space: dict[str, Any],
        tune_config: tune.TuneConfig | None,
        callbacks: list[tune.Callback],
    ) -> tune.Tuner:
        cluster = self.config.cluster
        tune_config = tune_config or tune.TuneConfig(
            max_concurrent_trials=cluster.max_concurrent_trials or None,
            reuse_actors=cluster.reuse_actors,
            scheduler=SweepFIFOScheduler(),  # keeps a moved sweep's new trials in its folder
        )
        names = TrialFolderName(self.label_keys)
        return tune.Tuner(
            self._trainable(),
            param_space=param_space,
            tune_config=dataclasses.replace(tune_config, trial_dirname_creator=names),
            run_config=tune.RunConfig(
                name=folder.name,
                storage_path=folder.parent_path,
                storage_filesystem=folder.tune_filesystem,
                failure_config=tune.FailureConfig(max_failures=cluster.max_failures),
                # the last two: a trial whose newest checkpoint is damaged falls back to the other
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                callbacks=callbacks,
                verbose=TUNE_VERBOSE[self.config.console.verbosity],
            ),
        )

    # -- leaving -------------------------------------------------------------------------------
    def finish_with(
        self,
        texts: dict[str, str] | None = None,
        metrics: dict[str, float] | None = None,
        report: Callable[[SweepRuns], None] | None = None,
        description: str | None = None,
    ) -> None:
        """What the end adds on the parent run, also when trials failed: ``texts`` (artifact
        name -> text) and ``metrics``, ``report`` (called with the runs once the trial runs are
        settled) and
        ``description`` (Markdown: the run's description in the MLflow UI)."""
        self._ending = {"texts": texts, "metrics": metrics, "report": report}
        self._ending["description"] = description

    def __exit__(self, kind: Any, err: BaseException | None, traceback: Any) -> bool:
        self._leave(err)
        return False

    def _leave(self, err: BaseException | None) -> None:
        """Settle, release, and raise the sweep's one failure (see the module docstring)."""
        where = self.experiment.parent_path if self.experiment is not None else None
        failure = sweep_failure(err, self.name, where)
        stopped = isinstance(failure, SweepInterrupted)
        failed = [r for r in self.results if r.error is not None]
        if self._fitting and not stopped and self.events.trials:
            print(redact(self.events.summary()), flush=True)
        try:
            if self._runs is not None:
                timeout = self._runs.tracking.flush_timeout_s
                if stopped:  # a preempted driver has its grace period, not the store's
                    timeout = min(timeout, self.config.cluster.preemption_grace_s)
                if not self._fitting:  # nothing ran: the parent's status is as it was
                    if stopped and self._new_parent:  # a new one: stopped before it ran
                        self._runs.parent.end_run("KILLED")
                    self._runs.close(timeout)
                else:
                    status = "KILLED" if stopped else "FAILED" if failure or failed else "FINISHED"
                    self.registered = self._runs.settle(
                        self.results,
                        status=status,
                        timeout_s=timeout,
                        register=self.config.tracking.register,
                        **(self._ending if status != "KILLED" else {}),
                    )
        finally:
            if self._lease is not None:
                self._lease.release()
            self._signals.close()
        if failure is not None:
            raise failure from None
        if err is not None:
            return  # a bug: its traceback, as Python raises it
        if failed and self.trials_must_finish:
            raise TrialFailed(self._failed_trials(failed))

    def _failed_trials(self, failed: list[Any]) -> str:
        label = trial_label(failed[0].config or {}, self.label_keys)
        reason = one_line(failed[0].error, 400)  # a data set's path, then the field
        retries = self.events.retries_of(failed[0].path, self.config.cluster.max_failures)
        refused = retries == 0 and self.config.cluster.max_failures > 0  # its input was refused
        again = (
            "mend what it names, then " if refused else ""
        ) + "re-run the same command to resume"
        if len(self.results) == 1:
            return (
                f"{self.name}: the trial failed after {retries} retries ({reason}); its "
                f"error.txt has the traceback; {again} it from its newest intact checkpoint"
            )
        return (
            f"{self.name}: {len(failed)} of {len(self.results)} trials failed after {retries} "
            f"retries (first: {label}: {reason}); their error.txt files have the tracebacks; "
            f"{again} them from their newest intact checkpoints"
        )

    def result(self, rows: list[dict[str, Any]], table: str, **more: Any) -> SweepResult:
        """The sweep's result, once it has ended: its rows and table, where it lies."""
        runs = self.runs
        assert runs.parent.run_id is not None and self.experiment is not None
        return SweepResult(
            self.name,
            runs.parent.run_id,
            rows,
            table,
            self.experiment.path,
            runs.tracking.uri,
            registered=self.registered,
            **more,
        )


def tune_space(param_space: dict[str, Any]) -> dict[str, Any]:
    """What Tune keeps of ``param_space`` (params.json, result.json, its state): masked (a trial
    takes the real store and storage from the driver, ``with_parameters``), and without the
    setting of one re-run of the driver, ``cluster.trust_unsealed_state``: not the sweep's (a
    sweep begun before such a setting existed restores with the same keys)."""
    space = redact(param_space)
    cluster = space.get("cluster") or {}
    if "trust_unsealed_state" not in cluster:
        return space
    return space | {"cluster": {k: v for k, v in cluster.items() if k != "trust_unsealed_state"}}


def start_ray(config: PlatformConfig) -> None:
    """Start or join the Ray of ``config``'s cluster with linc's console (prepared first; Ray's
    loggers, driver and workers, at its level) and the workarounds of the pinned Ray."""
    prepare_console(config.console)
    cluster = config.cluster
    level = "INFO" if config.console.verbosity == "tune" else "WARNING"
    started = init_ray(
        cluster.address, cluster.num_cpus, cluster.num_gpus, logging_level=level,
        keep_sigterm_handler=True,  # linc's: the sweep's own stop
    )  # fmt: skip
    redact_logging()  # on the handlers Ray added too
    install_driver_workarounds(started)


@dataclass(frozen=True)
class TrialFolderName:
    """Tune's ``trial_dirname_creator``: ``trial_003_learning_rate=0.000846_tau_start=5.85``,
    the trial's number (a search's: the study's) and the values that tell it apart."""

    label_keys: tuple[str, ...]

    def __call__(self, trial: Any) -> str:
        number = dotted_get(trial.config or {}, "tracking.trial_number")
        number = str(trial.experiment_tag).split("_", 1)[0] if number is None else number
        label = trial_label(trial.config or {}, self.label_keys)
        safe = re.sub(r"[^A-Za-z0-9.=+-]+", "_", label).strip("_")[:100]
        return f"trial_{number:0>3}_{safe}" if safe else f"trial_{number:0>3}"


def run_training(config: PlatformConfig, name: str | None = None) -> SweepResult:
    """One trial (the config's variant and seed) as a sweep of its own (``linc-tune``)."""
    from orchestration.report.tables import ablation_table, result_row

    run = config.run
    name = name or f"train-{run.variant}-{run.data.problem}-seed{run.train.seed}"
    with Sweep(config, {"name": name, "kind": "train"}) as sweep:
        rows = [result_row(r) for r in sweep.run_trials(config.raw)]
    return sweep.result(rows, ablation_table(rows, compare_to=None))


__all__ = [
    "Sweep",
    "SweepResult",
    "TrialFolderName",
    "run_training",
    "start_ray",
    "tune_space",
]
