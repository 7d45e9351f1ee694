"""What a sweep prints: one line per trial event, a summary at the end, Tune's own output on demand.

Tune's reporter prints a configuration table per trial and a status table every 30 s (a
twelve-trial sweep: about 2,000 lines, most of them box drawing). With ``console.verbosity``
``events`` (the default) Tune's reporter is silent (``RunConfig(verbose=0)``), Ray's and
MLflow's INFO logging is off and :class:`TrialEvents` prints plain lines instead:

    [0:08] full_linc seed=1: started (trial a6849_00000)
    [0:08] full_linc seed=1: epoch 1/2 train_best_cost=599.02 validation_cost=451.93
    [0:08] full_linc seed=1: FAILED (attempt 1, will retry): orchestration...InjectedFault: ...
    [0:15] full_linc seed=1: restarted from its last checkpoint (attempt 2)
    [0:18] full_linc seed=1: epoch 2/2 train_best_cost=579.93 validation_cost=451.93
    [0:18] full_linc seed=1: finished: eval_cost=400.21 (0 infeasible), 2 epochs, 7 s
    ablation-smoke: 1 trials: 1 finished, 0 failed, 1 retried, in 19 s; best eval_cost=400.21 ...

``quiet`` prints failures and the summary only; ``tune`` brings back Tune's own reporter and
Ray's INFO logging (the lines above still print). Off a terminal, Ray's worker-line prefixes
carry no colour codes whatever the verbosity.

Whatever the verbosity, every line is masked (:mod:`linc_core.utils.secrets`): the console's
handlers filter each log record (:func:`~linc_core.utils.secrets.redact_logging`, again once
Ray has added its own), warnings and the lines above are masked before they print.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ray import tune

from linc_core.metrics import EPOCH, EVAL_COST, EVAL_INFEASIBLE, PROGRESS_METRICS
from linc_core.utils.secrets import redact, redact_logging
from orchestration.config.platform import PlatformConfig, trial_label
from orchestration.config.sections import ConsoleSpec
from orchestration.ray_session import init_ray

# The metrics a progress line shows: the training score and, when measured, validation.
# Tune's verbose level per console verbosity (0: silent, 2: every result).
TUNE_VERBOSE = {"quiet": 0, "events": 0, "tune": 2}


def prepare_console(spec: ConsoleSpec) -> None:
    """Process settings for the console, before Ray starts: no colour codes off a terminal,
    and (unless ``tune``) no INFO chatter from Ray, Tune and MLflow nor a traceback per failed
    trial attempt (:class:`TrialEvents` names the reason; the trial's ``error.txt`` keeps the
    traceback)."""
    redact_logging()
    if not sys.stdout.isatty():
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    if spec.verbosity == "tune":
        return
    # Tune's new output engine prints an experiment box and a TensorBoard hint even when
    # silent; the legacy engine at verbose 0 prints nothing.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
    # Tune warns when it snapshots the experiment often: every epoch of a short trial does.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    for name in ("mlflow", "optuna", "ray.tune", "ray.train", "ray.air"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # A trial retried before its first result reached storage makes Tune's result-file
    # loggers warn "Remote file not found: .../result.json" (they start the file afresh;
    # linc's records are in MLflow and the checkpoints): the console's FAILED/restarted lines
    # already say what happened. Their errors still show.
    logging.getLogger("ray.tune.logger").setLevel(logging.ERROR)
    controller = logging.getLogger("ray.tune.execution.tune_controller")
    if not any(isinstance(f, GoneCheckpointFilter) for f in controller.filters):
        controller.addFilter(GoneCheckpointFilter())
    for name in ("ray.train._internal.syncer", "ray.tune.execution.experiment_state"):
        syncer = logging.getLogger(name)
        if not any(isinstance(f, SyncFailureFilter) for f in syncer.filters):
            syncer.addFilter(SyncFailureFilter())


class SyncFailureFilter(logging.Filter):
    """Tune's failed copy of its experiment state to storage (a full or unreachable storage):
    the syncer's "Last sync command failed" warning, the traceback inside its message, and the
    experiment state's "Saving experiment state to storage ... failed" error, with its
    traceback, each as one warning line: the error's last line. The next save tries again; a
    copy cut short is mended on the re-run (:mod:`orchestration.experiment.tune_state`)."""

    PREFIXES = ("Last sync command failed", "Saving experiment state to storage")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(self.PREFIXES):
            if record.exc_info and record.exc_info[1] is not None:
                error = record.exc_info[1]
                message += f"\n{type(error).__name__}: {error}"
                record.exc_info, record.exc_text = None, None
                record.levelno, record.levelname = logging.WARNING, "WARNING"
            lines = [line for line in message.splitlines() if line.strip()]
            record.msg = (
                "could not copy Tune's experiment state to storage (%s); retried at its next save"
            )
            record.args = (lines[-1].strip() if len(lines) > 1 else "no detail",)
        return True


class GoneCheckpointFilter(logging.Filter):
    """Tune's "Error handling checkpoint" traceback for a checkpoint that is already gone, as one
    warning line.

    Tune keeps a trial's last two checkpoints (``num_to_keep=2``) by the list in its experiment
    state and deletes the older one when a new one registers. A driver killed between deleting
    a checkpoint and its next snapshot of that state leaves a list naming a folder that no longer
    exists; the re-run's first new checkpoint then deletes it again, and Tune logs a
    ``FileNotFoundError`` traceback (its list is updated before the deletion: nothing is lost,
    and the trial restored from its newest intact checkpoint anyway,
    :mod:`orchestration.trial.checkpoints`). Training faster than Tune snapshots its state
    (epochs of a fraction of a second) makes that window common.
    """

    PREFIX = "Trial %s: Error handling checkpoint"

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, FileNotFoundError) and str(record.msg).startswith(self.PREFIX):
            trial = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.msg = (
                "%s: a checkpoint in Tune's record of this trial is already gone from storage "
                "(%s), deleted before the last driver stopped; nothing to delete"
            )
            # Ray's text is "Path not found: (<pyarrow file system object>, PATH)"
            record.args = (trial, str(error).rsplit(", ", 1)[-1].rstrip(")"))
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def init_sweep_ray(config: PlatformConfig) -> bool:
    """:func:`~orchestration.ray_session.init_ray` for ``config``'s cluster, with the console
    prepared first and Ray's loggers (driver and workers) at the console's level."""
    prepare_console(config.console)
    level = "INFO" if config.console.verbosity == "tune" else "WARNING"
    cluster = config.cluster
    started = init_ray(cluster.address, cluster.num_cpus, cluster.num_gpus, logging_level=level)
    redact_logging()  # on the handlers Ray added too
    if started:
        keep_aws_keys_out_of_trials()
    return started


def keep_aws_keys_out_of_trials() -> None:
    """Tune copies the driver's ``AWS_*`` keys into each trial actor's ``runtime_env``, which
    Ray's agent writes into ``runtime_env_agent.log`` (readable by every user of the node).
    Once this process has started or joined Ray, no copy is needed: a local Ray's workers
    inherit this process's environment (their raylet started with it), a cluster's nodes use
    their own AWS chain (role, ``~/.aws``, their environment)."""
    from ray.tune.execution import class_cache

    names = class_cache.ENV_VARS_TO_PROPAGATE
    class_cache.ENV_VARS_TO_PROPAGATE = {name for name in names if not name.startswith("AWS_")}


class TrialEvents(tune.Callback):
    """Print one line per trial event of a Tune experiment (see the module docstring).

    Args:
        name: the sweep's name (the summary line's subject).
        spec: the console settings (verbosity, epochs between progress lines).
        epochs: epochs each trial trains (for ``epoch i/N`` and the automatic interval).
        label_keys: dotted config keys that tell the trials apart (``model.variant``,
            ``train.seed``; a search's parameters).
    """

    def __init__(
        self,
        name: str,
        spec: ConsoleSpec,
        epochs: int,
        label_keys: Sequence[str] = ("model.variant", "train.seed"),
    ) -> None:
        self.name = name
        self.verbosity = spec.verbosity
        self.every = spec.report_every or max(1, round(epochs / 10))
        self.epochs = epochs
        self.label_keys = tuple(label_keys)
        self._reset()

    def _reset(self) -> None:
        self.started = time.monotonic()
        self.outcome: dict[str, str] = {}  # trial id -> finished | failed
        self.retries = 0
        self.best: tuple[float, str] | None = None

    # Tune's hooks --------------------------------------------------------------------------
    def setup(self, **info: Any) -> None:
        self._reset()  # a resumed experiment unpickles this callback: its clock starts now

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if trial.num_failures:
            self._event(
                trial, f"restarted from its last checkpoint (attempt {trial.num_failures + 1})"
            )
        else:
            self._event(trial, f"started (trial {trial.trial_id})")

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        if EPOCH not in result:
            return
        epoch = int(result[EPOCH])
        if epoch % self.every and epoch != self.epochs:
            return
        shown = " ".join(
            f"{key}={result[key]:.2f}" for key in PROGRESS_METRICS if _number(result.get(key))
        )
        self._event(trial, f"epoch {epoch}/{self.epochs} {shown}".rstrip())

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.outcome[trial.trial_id] = "finished"
        result = trial.last_result or {}
        epochs = int(result.get(EPOCH, 0))
        parts = []
        if _number(result.get(EVAL_COST)):
            cost = float(result[EVAL_COST])
            infeasible = result.get(EVAL_INFEASIBLE, 0)
            parts.append(f"eval_cost={cost:.2f} ({infeasible:.0f} infeasible)")
            if self.best is None or cost < self.best[0]:
                self.best = (cost, self._label(trial))
        elif epochs < self.epochs:
            parts.append(f"stopped early by the scheduler at epoch {epochs}")
        parts.append(f"{epochs} epochs")
        if _number(result.get("time_total_s")):
            parts.append(f"{result['time_total_s']:.0f} s")
        self._event(trial, "finished: " + ", ".join(parts))

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.retries += 1
        attempt = f"attempt {trial.num_failures}, will retry"
        self._event(trial, f"FAILED ({attempt}): {_reason(trial)}", always=True)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.outcome[trial.trial_id] = "failed"
        where = f"; traceback: {trial.error_file}" if trial.error_file else ""
        attempts = f"after {trial.num_failures} attempts" if trial.num_failures > 1 else "no retry"
        self._event(trial, f"FAILED ({attempts}): {_reason(trial)}{where}", always=True)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        print(self.summary(trials), flush=True)

    # Lines ---------------------------------------------------------------------------------
    def summary(self, trials: Sequence[Any]) -> str:
        """``NAME: N trials: F finished, E failed, R retried, in 6 min 50 s; best eval_cost``."""
        finished = sum(1 for t in trials if t.status == "TERMINATED")
        failed = sum(1 for t in trials if t.status == "ERROR")
        others = len(trials) - finished - failed
        counts = [f"{finished} finished", f"{failed} failed", f"{self.retries} retried"]
        if others:
            counts.append(f"{others} not run")
        best = f"; best eval_cost={self.best[0]:.2f} ({self.best[1]})" if self.best else ""
        elapsed = _duration(time.monotonic() - self.started)
        return f"{self.name}: {len(trials)} trials: {', '.join(counts)}, in {elapsed}{best}"

    def notice(self, trial: Any, text: str) -> None:
        """A line about ``trial`` from elsewhere in the driver (printed at every verbosity)."""
        self._event(trial, text, always=True)

    def _label(self, trial: Any) -> str:
        return trial_label(trial.config or {}, self.label_keys) or trial.trial_id

    def _event(self, trial: Any, text: str, always: bool = False) -> None:
        if self.verbosity == "quiet" and not always:
            return
        elapsed = time.monotonic() - self.started
        stamp = f"{int(elapsed // 60)}:{int(elapsed % 60):02d}"
        print(redact(f"[{stamp}] {self._label(trial)}: {text}"), flush=True)


def trial_events(config: PlatformConfig, name: str, label_keys: Sequence[str]) -> TrialEvents:
    """The console callback of the sweep ``name`` over ``config``'s base trial."""
    return TrialEvents(name, config.console, config.run.train.epochs, label_keys)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _reason(trial: Any) -> str:
    """The last line of the trial's traceback (``ValueError: ...``), at most 200 characters."""
    text = ""
    try:  # the local error.txt is written at once; the storage copy only at the next sync
        local = trial.error_file
        text = Path(local).read_text() if local and Path(local).exists() else trial.get_error()
    except Exception:  # storage unreachable: the line still says the trial failed
        text = ""
    lines = [line.strip() for line in str(text or "").strip().splitlines() if line.strip()]
    reason = lines[-1] if lines else "unknown error (see the trial's error.txt)"
    return reason if len(reason) <= 200 else reason[:197] + "..."


def _duration(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


__all__ = [
    "GoneCheckpointFilter",
    "TUNE_VERBOSE",
    "TrialEvents",
    "init_sweep_ray",
    "keep_aws_keys_out_of_trials",
    "prepare_console",
    "trial_events",
]
