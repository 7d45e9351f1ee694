"""linc's Tune callbacks, built in one place (:func:`tune_callbacks`), and the signals that stop a
sweep before its end.

:func:`stop_sweep_on_signals` turns SIGTERM and SIGINT into Tune's own graceful stop (the
handler Tune installs for SIGUSR1: trials are stopped, the experiment state is saved) and
records which signal came, so that the driver marks its runs KILLED and a re-run of the same
command resumes (:class:`~orchestration.failures.SweepInterrupted`). A second signal stops at
once. :class:`PendingTimeout` stops a sweep whose
trials no node could place for ``cluster.pending_timeout_s`` while none runs, naming what
they waited for, instead of waiting for ever; :class:`StallWatch` ends a trial that stopped
reporting for ``cluster.stall_timeout_s`` (hung, not dead), so that Tune retries it. Both are
Tune callbacks, as are the console's lines
(:class:`~orchestration.experiment.console.TrialEvents`) and :class:`KeepIntactState`, which
seals and keeps Tune's state as Tune saves it (:mod:`orchestration.experiment.tune_state`).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import ray
from ray import tune
from ray.tune.experiment import Trial

from orchestration.experiment.tune_state import TUNER_FILE, CheckedState, is_intact, keep_intact
from orchestration.failures import SweepStopped
from orchestration.trial.resources import GIB

if TYPE_CHECKING:
    from orchestration.config.sections import ClusterSpec
    from orchestration.experiment.console import TrialEvents

logger = logging.getLogger(__name__)


class SweepStop:
    """Which signal stopped the sweep (None: it was not stopped)."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.handle: Callable[[int, FrameType | None], None] | None = None

    def check(self) -> None:
        """Stop here (``KeyboardInterrupt`` naming the signal) if a signal came."""
        if self.signal is not None:
            raise KeyboardInterrupt(self.signal)

    def install(self) -> None:
        """Take SIGTERM and SIGINT (a sweep starts its Ray keeping them:
        ``init_ray(keep_sigterm_handler=True)``)."""
        if self.handle is not None:
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, self.handle)


@contextmanager
def stop_sweep_on_signals() -> Iterator[SweepStop]:
    """SIGTERM and SIGINT stop a sweep gracefully (see the module docstring): a running
    ``Tuner.fit`` through Tune's own stop; before it (Ray starting), at the sweep's next step
    (:meth:`SweepStop.check`); a second signal at once.

    Tune's own SIGINT handler is switched off (``TUNE_DISABLE_SIGINT_HANDLER``) so that both
    signals take this one path. Outside the main thread nothing is installed.
    """
    stop = SweepStop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        if stop.signal is not None:
            raise KeyboardInterrupt(f"a second {signal.Signals(signum).name}")
        stop.signal = signal.Signals(signum).name
        logger.warning("%s: stopping the sweep (trials checkpoint; re-run to resume)", stop.signal)
        tune_stop = signal.getsignal(signal.SIGUSR1)
        if callable(tune_stop):
            tune_stop(signum, frame)  # Tune's graceful stop, installed while Tuner.fit runs
        # else the sweep stops at its next step (SweepStop.check): raised here, an exception can
        # land in code that ignores it holding a lock (logging's, as Ray forks), and is lost

    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    switch = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    stop.handle = handle
    stop.install()
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if switch is None:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
        else:
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = switch


class PendingTimeout(tune.Callback):
    """Stop the sweep when trials have waited ``timeout_s`` to be placed and none runs.

    Pending while others run is a queue (``max_concurrent_trials``, a full cluster); pending
    with nothing running means no node offers what the trial asks for (a lost node, or a
    reservation larger than any node), which would otherwise wait for ever. The error names each
    waiting trial and its resources; the experiment state is saved, so the same command resumes
    once nodes are there.
    """

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self._stuck_since: float | None = None

    def on_step_begin(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        pending = [t for t in trials if t.status == Trial.PENDING]
        if not pending or any(t.status == Trial.RUNNING for t in trials):
            self._stuck_since = None
            return
        now = time.monotonic()
        self._stuck_since = self._stuck_since or now
        if now - self._stuck_since < self.timeout_s:
            return
        waiting = "; ".join(
            f"{t.trial_id} needs {_readable(t.placement_group_factory.required_resources)}"
            for t in pending
        )
        raise SweepStopped(
            f"no trial could be placed for {now - self._stuck_since:.0f} s "
            f"(cluster.pending_timeout_s={self.timeout_s:g}) and none is running: {waiting}"
        )


class StallWatch(tune.Callback):
    """End a running trial that has reported nothing for ``timeout_s`` and for three times its
    longest earlier gap between reports (an epoch that is simply slow is not a stall).

    A trial hung in a stuck collective or on a dead mount neither reports nor dies, and Tune
    waits for ever. Its process is killed (``ray.kill``), which Tune treats as any failure: the
    trial is retried from its newest intact checkpoint while ``cluster.max_failures`` allows.
    ``say`` prints the one line naming the trial and the last epoch seen.
    """

    def __init__(self, timeout_s: float, say: Callable[[Any, str], None]):
        self.timeout_s = timeout_s
        self.say = say
        self._seen: dict[str, tuple[float, float, int]] = {}  # id -> last, longest gap, epoch

    def on_trial_start(self, iteration: int, trials: list, trial: Trial, **info: Any) -> None:
        last_epoch = int((trial.last_result or {}).get("epoch", 0))
        self._seen[trial.trial_id] = (time.monotonic(), 0.0, last_epoch)

    def on_trial_result(
        self, iteration: int, trials: list, trial: Trial, result: dict, **info: Any
    ) -> None:
        now = time.monotonic()
        last, longest, epoch = self._seen.get(trial.trial_id, (now, 0.0, 0))
        epoch = int(result.get("epoch", epoch))
        self._seen[trial.trial_id] = (now, max(longest, now - last), epoch)

    def on_trial_complete(self, iteration: int, trials: list, trial: Trial, **info: Any) -> None:
        self._seen.pop(trial.trial_id, None)

    on_trial_error = on_trial_complete

    def on_step_begin(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        now = time.monotonic()
        for trial in trials:
            seen = self._seen.get(trial.trial_id)
            actor = trial.temporary_state.ray_actor
            if seen is None or trial.status != Trial.RUNNING or actor is None:
                continue
            last, longest, epoch = seen
            if now - last < max(self.timeout_s, 3 * longest):
                continue
            del self._seen[trial.trial_id]  # watched again once restarted
            self.say(
                trial,
                f"stalled: no report for {now - last:.0f} s after epoch {epoch} "
                f"(cluster.stall_timeout_s={self.timeout_s:g}); ending trial {trial.trial_id} "
                "to retry it from its checkpoint",
            )
            ray.kill(actor, no_restart=True)


def _readable(resources: Mapping[str, float]) -> str:
    shown = {k: (f"{v / GIB:.1f} GiB" if k == "memory" else f"{v:g}") for k, v in resources.items()}
    return "{" + ", ".join(f"{k}: {v}" for k, v in shown.items() if v not in ("0",)) + "}"


class KeepIntactState(tune.Callback):
    """Seals and keeps Tune's state as Tune saves it: ``tuner.pkl`` when a new sweep starts,
    the staged state files in :meth:`get_state` (which Tune calls right after saving them in
    its staging folder and before uploading them) and every ``period_s`` seconds of the
    driver's loop. A failure to write (the storage full, S3 away) is left for the next time.

    ``state``: the experiment's state as :func:`~.tune_state.check_state` found it. Of a
    restored experiment, the state files Tune restores from were checked, not written, by this
    driver, so one changed since is not vouched for (never sealed), and ``tuner.pkl`` is not
    sealed again.
    """

    def __init__(self, state: CheckedState, period_s: float = 10.0):
        self.keeper = state.keeper
        self.downloaded = state.files if state.restoring else None
        self.period_s = period_s
        self._seen: dict[str, Any] = {}
        self._next = 0.0
        self._staging: str | None = None

    def setup(self, **info: Any) -> None:
        if self.downloaded is not None:  # tuner.pkl was checked before the restore
            return
        try:  # written by Tune moments ago, before any trial ran
            content = self.keeper.folder.read(TUNER_FILE)
            if content is not None and is_intact(content):
                self.keeper.keep({TUNER_FILE: content})
        except OSError as err:
            logger.warning("could not seal %s: %s", self.keeper.folder.uri(TUNER_FILE), err)

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        if self._staging is None and trials:
            self._staging = trials[0].storage.experiment_driver_staging_path

    def get_state(self) -> None:  # None: nothing for Tune to save (no callback-states file)
        self._keep()

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self.on_step_begin(iteration, trials)
        now = time.monotonic()
        if now >= self._next:
            self._keep()
            self._next = now + self.period_s

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.on_step_begin(0, trials)  # a restored sweep that had nothing left to run
        self._keep()

    def _keep(self) -> None:
        staging = self._staging or _newest_staging(self.keeper.folder.name)
        if staging is None:
            return
        try:
            keep_intact(self.keeper, self._seen, staging, skip=self.downloaded or frozenset())
        except OSError as err:
            where = self.keeper.folder.uri()
            logger.debug("could not keep Tune's state of %s intact this time: %s", where, err)


def _newest_staging(name: str) -> str | None:
    """The driver's staging folder of experiment ``name`` this Ray session (the newest, when a
    process ran it twice), before any trial could name it: Tune's first save."""
    from ray.train.constants import _get_ray_train_session_dir

    try:
        states = Path(_get_ray_train_session_dir()).glob(f"*/{name}/driver_artifacts/*.json")
        newest = max(states, key=lambda p: p.stat().st_mtime_ns, default=None)
    except (OSError, AssertionError):
        return None
    return None if newest is None else str(newest.parent)


def tune_callbacks(
    events: TrialEvents, cluster: ClusterSpec, state: CheckedState
) -> list[tune.Callback]:
    """Every linc Tune callback of one experiment: the console's lines (``events``: one for all
    the experiments of a sweep, so one summary), the stops for trials no node can place and for
    hung trials, the sealing of Tune's state (``state``: as checked before the experiment)."""
    callbacks: list[tune.Callback] = [events]
    if cluster.pending_timeout_s is not None:
        callbacks.append(PendingTimeout(cluster.pending_timeout_s))
    if cluster.stall_timeout_s is not None:
        callbacks.append(StallWatch(cluster.stall_timeout_s, events.notice))
    return [*callbacks, KeepIntactState(state)]


__all__ = [
    "KeepIntactState",
    "PendingTimeout",
    "StallWatch",
    "SweepStop",
    "stop_sweep_on_signals",
    "tune_callbacks",
]
