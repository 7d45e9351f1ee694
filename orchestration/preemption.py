"""Preemption: a SIGTERM ends a trial with a checkpoint, and ends a sweep the way Ctrl+C does.

A cluster announces the end of a node with SIGTERM (a spot-instance notice turned into a drain,
Kubernetes deleting a Pod) and kills what is left after a grace period (see infra/README.md).

**Trial processes.** Ray's worker turns SIGTERM into ``SystemExit`` in its main thread; the
trial's training runs in another thread. While a trial trains, :class:`TrialGuard` holds the
process's exit (an ``atexit`` hook, which runs before the training thread is abandoned) for up
to ``cluster.preemption_grace_s``: it asks ``fit`` to stop (``fit``'s ``stop``), which writes a
checkpoint of the current step, and the trainable copies it to the trial's storage before the
process goes. Tune sees a failed trial and retries it (``cluster.max_failures``) from that
checkpoint (:mod:`orchestration.trial_checkpoints`).

**The sweep driver.** :func:`stop_sweep_on_signals` turns SIGTERM and SIGINT into Tune's own
graceful stop (the handler Tune installs for SIGUSR1: trials are stopped, the experiment state is
saved), and records which signal came, so that the driver marks its runs KILLED and a re-run of
the same command resumes. A second signal stops at once.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType

logger = logging.getLogger(__name__)


class TrialGuard:
    """Hold the trial process's exit until training has checkpointed (or ``grace_s`` passed).

    Use as a context manager around ``fit``; pass :meth:`requested` as ``fit``'s ``stop`` and
    call :meth:`checkpointed` once the stop's checkpoint is on storage.
    """

    _current: TrialGuard | None = None
    _hook_installed = False

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self._stop = threading.Event()
        self._done = threading.Event()

    def requested(self) -> bool:
        """True once the process was told to end (``fit``'s ``stop``)."""
        return self._stop.is_set()

    def checkpointed(self) -> None:
        """The stop's checkpoint is persisted: the process may end."""
        self._done.set()

    def __enter__(self) -> TrialGuard:
        if not TrialGuard._hook_installed:
            atexit.register(_hold_exit)
            TrialGuard._hook_installed = True
        TrialGuard._current = self
        return self

    def __exit__(self, *exc: object) -> None:
        TrialGuard._current = None
        self._done.set()

    def hold(self) -> None:
        """Ask training to stop and wait for its checkpoint, at most ``grace_s`` seconds."""
        self._stop.set()  # first: nothing below may keep the checkpoint from being written
        _say(
            f"process {os.getpid()} is ending (SIGTERM): checkpointing the current step "
            f"(grace {self.grace_s:.0f} s)"
        )
        if not self._done.wait(self.grace_s):
            _say(f"no checkpoint within {self.grace_s:.0f} s: the last epoch's is kept")


def _say(message: str) -> None:
    """A warning from an exiting process: to stderr directly, since logging may already be
    shut down by then (Ray's worker logging configuration ends its handlers at exit)."""
    with suppress(OSError, ValueError):
        print(f"WARNING {__name__}: {message}", file=sys.stderr, flush=True)


def _hold_exit() -> None:
    guard = TrialGuard._current
    if guard is not None:
        guard.hold()


class SweepStopped(RuntimeError):
    """A sweep that ended before its trials did, its state saved for a re-run; the entry points
    print the message on one line and exit with ``exit_code``."""

    exit_code = 1


class SweepInterrupted(SweepStopped):
    """The sweep was stopped by a signal; its state is saved and its runs are marked KILLED."""

    exit_code = 128 + 15  # as a process ended by SIGTERM


class SweepStop:
    """Which signal stopped the sweep (None: it was not stopped)."""

    def __init__(self) -> None:
        self.signal: str | None = None


@contextmanager
def stop_sweep_on_signals() -> Iterator[SweepStop]:
    """SIGTERM and SIGINT stop a running ``Tuner.fit`` gracefully (see the module docstring).

    Tune's own SIGINT handler is switched off (``TUNE_DISABLE_SIGINT_HANDLER``) so that both
    signals take this one path. Outside the main thread nothing is installed.
    """
    stop = SweepStop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        if stop.signal is not None:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}: stopping at once")
        stop.signal = signal.Signals(signum).name
        logger.warning("%s: stopping the sweep (trials checkpoint; re-run to resume)", stop.signal)
        tune_stop = signal.getsignal(signal.SIGUSR1)
        if callable(tune_stop):
            tune_stop(signum, frame)  # Tune's graceful stop, installed while Tuner.fit runs
        else:
            raise KeyboardInterrupt(stop.signal)

    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    switch = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    for signum in previous:
        signal.signal(signum, handle)
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if switch is None:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
        else:
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = switch


__all__ = ["SweepInterrupted", "SweepStop", "SweepStopped", "TrialGuard", "stop_sweep_on_signals"]
