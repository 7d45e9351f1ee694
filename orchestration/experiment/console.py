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

The sweep prints the summary once, at its end (:class:`~orchestration.experiment.sweep.Sweep`).
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
from typing import Any

from ray import tune

from linc_core.config import TrainConfig
from linc_core.metrics import EPOCH, EVAL_COST, EVAL_INFEASIBLE, PROGRESS_METRICS, TRAIN_SECONDS
from linc_core.utils.secrets import redact, redact_logging
from orchestration.config.platform import trial_label
from orchestration.config.sections import ConsoleSpec
from orchestration.experiment.ray_compat import quiet_tune, trial_error_text

# The metrics a progress line shows: the training score and, when measured, validation.
# Tune's verbose level per console verbosity (0: silent, 2: every result).
TUNE_VERBOSE = {"quiet": 0, "events": 0, "tune": 2}


def prepare_console(spec: ConsoleSpec) -> None:
    """Process settings for the console, before the sweep touches its tracking store or Ray: no
    colour codes off a terminal, and (unless ``tune``) no INFO chatter from Ray, Tune, MLflow
    and Optuna nor a traceback per failed trial attempt (:class:`TrialEvents` names the reason;
    the trial's ``error.txt`` keeps the traceback): :func:`~.ray_compat.quiet_tune`."""
    redact_logging()
    if not sys.stdout.isatty():
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    if spec.verbosity == "tune":
        return
    quiet_tune()
    # MLflow sets its loggers' level when first imported (from this variable, default INFO)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    for name in ("mlflow", "optuna", "alembic", "ray.tune", "ray.train", "ray.air"):
        logging.getLogger(name).setLevel(logging.WARNING)


class TrialEvents(tune.Callback):
    """Print one line per trial event of a Tune experiment (see the module docstring).

    Args:
        name: the sweep's name (the summary line's subject).
        spec: the console settings (verbosity, epochs between progress lines).
        epochs: epochs each trial trains (for ``epoch i/N`` and the automatic interval).
        label_keys: dotted config keys that tell the trials apart (``model.variant``,
            ``train.seed``; a search's parameters).
        objective: what the sweep optimises, ``(metric, "min" | "max")`` pairs: the summary
            names the best trial by it (its Pareto front for several), among the trials that
            completed (a search's trials its scheduler stopped early are pruned, not ranked).
        train: the trials' training settings: under ``budget_minutes`` a progress line comes
            per tenth of the budget spent and shows the seconds spent, not ``i/N``.
    """

    def __init__(
        self,
        name: str,
        spec: ConsoleSpec,
        epochs: int,
        label_keys: Sequence[str] = ("model.variant", "train.seed"),
        objective: Sequence[tuple[str, str]] = ((EVAL_COST, "min"),),
        train: TrainConfig | None = None,
    ) -> None:
        self.name = name
        self.verbosity = spec.verbosity
        # A time budget ends the trials, not the epochs: a line per tenth of it spent.
        self.budget = None if train is None else train.budget_minutes
        self.every = spec.report_every or max(1, round(epochs / 10))
        self.tenths: dict[str, int] = {}  # under a budget: per trial, the tenths shown so far
        self.epochs = epochs
        self.label_keys = tuple(label_keys)
        self.objective = tuple(objective)

        self.started = time.monotonic()
        self.begun = False
        self.retries = 0
        self.trials: dict[str, Any] = {}  # every trial of the sweep's experiments, by id

    # Tune's hooks --------------------------------------------------------------------------
    def setup(self, **info: Any) -> None:
        if not self.begun:  # the sweep's first experiment: its clock starts now
            self.started, self.begun = time.monotonic(), True

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
        if self.budget is None:
            if epoch % self.every and epoch != self.epochs:
                return
            where = f"{epoch}/{self.epochs}"
        else:
            spent, budget = float(result.get(TRAIN_SECONDS, 0.0)), 60.0 * self.budget
            tenth = min(10, int(10 * spent / budget))
            if tenth <= self.tenths.get(trial.trial_id, 0):
                return
            self.tenths[trial.trial_id] = tenth
            where = f"{epoch} ({spent:.0f} of {budget:.0f} s)"
        shown = " ".join(
            f"{key}={result[key]:.2f}" for key in PROGRESS_METRICS if _number(result.get(key))
        )
        self._event(trial, f"epoch {where} {shown}".rstrip())

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        result = trial.last_result or {}
        epochs = int(result.get(EPOCH, 0))
        parts = []
        if _number(result.get(EVAL_COST)):
            cost = float(result[EVAL_COST])
            infeasible = result.get(EVAL_INFEASIBLE, 0)
            parts.append(f"eval_cost={cost:.2f} ({infeasible:.0f} infeasible)")
        elif epochs < self.epochs and self.budget is None:
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
        where = f"; traceback: {trial.error_file}" if trial.error_file else ""
        attempts = f"after {trial.num_failures} attempts" if trial.num_failures > 1 else "no retry"
        self._event(trial, f"FAILED ({attempts}): {_reason(trial)}{where}", always=True)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self.on_experiment_end(trials)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.trials.update((trial.trial_id, trial) for trial in trials)  # live: their status

    def retries_of(self, path: str, unseen: int) -> int:
        """How often the trial kept at ``path`` was retried in this driver's run of the sweep
        (``unseen`` when this driver saw no trial there)."""
        for trial in self.trials.values():
            if trial.path == path:
                return max(trial.num_failures - 1, 0)
        return unseen

    # Lines ---------------------------------------------------------------------------------
    def summary(self) -> str:
        """``NAME: N trials: F finished, E failed, R retried, in 6 min 50 s; best eval_cost=V
        (LABEL)`` over every experiment of the sweep (a search's stages), or the Pareto front's
        trials, one per line, when the sweep has several objectives."""
        trials = list(self.trials.values())
        finished = sum(1 for t in trials if t.status == "TERMINATED")
        failed = sum(1 for t in trials if t.status == "ERROR")
        others = len(trials) - finished - failed
        counts = [f"{finished} finished", f"{failed} failed", f"{self.retries} retried"]
        if others:
            counts.append(f"{others} not run")
        elapsed = _duration(time.monotonic() - self.started)
        line = f"{self.name}: {len(trials)} trials: {', '.join(counts)}, in {elapsed}"
        front = pareto_front(
            [(t.last_result or {}, self._label(t)) for t in trials if t.status == "TERMINATED"],
            self.objective,
        )
        if not front:
            return line
        if len(self.objective) == 1:
            (metric, _), (result, label) = self.objective[0], front[0]
            return f"{line}; best {metric}={result[metric]:.2f} ({label})"
        said = ", ".join(f"{metric} ({mode})" for metric, mode in self.objective)
        rows = [
            f"  {label}: " + " ".join(f"{m}={_shown(result[m])}" for m, _ in self.objective)
            for result, label in front
        ]
        return "\n".join([f"{line}; Pareto front of {said}, {len(front)} trial(s):", *rows])

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


def pareto_front(
    candidates: Sequence[tuple[dict[str, Any], Any]], objective: Sequence[tuple[str, str]]
) -> list[tuple[dict[str, Any], Any]]:
    """The ``(result, label)`` pairs no other dominates under ``objective`` (``(metric, mode)``
    pairs), best first by the first metric: those of completed trials (a result with
    ``completed``) holding every metric as a number. One metric: the single best."""
    signs = [1.0 if mode == "min" else -1.0 for _, mode in objective]

    def key(result: dict[str, Any]) -> tuple[float, ...]:
        return tuple(s * float(result[m]) for s, (m, _) in zip(signs, objective, strict=True))

    ranked = sorted(
        (
            (result, label)
            for result, label in candidates
            if result.get("completed") and all(_number(result.get(m)) for m, _ in objective)
        ),
        key=lambda pair: key(pair[0]),
    )
    front: list[tuple[dict[str, Any], Any]] = []
    for result, label in ranked:  # one that dominates another sorts before it
        mine = key(result)
        if not any(_dominates(key(other), mine) for other, _ in front):
            front.append((result, label))
    return front[:1] if len(objective) == 1 else front


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a != b and all(x <= y for x, y in zip(a, b, strict=True))


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _reason(trial: Any) -> str:
    """The last line of the trial's traceback (``ValueError: ...``), at most 200 characters."""
    text = trial_error_text(trial) if trial.error_file else ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    reason = lines[-1] if lines else "unknown error (see the trial's error.txt)"
    return reason if len(reason) <= 200 else reason[:197] + "..."


def _duration(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


__all__ = ["TUNE_VERBOSE", "TrialEvents", "pareto_front", "prepare_console"]
