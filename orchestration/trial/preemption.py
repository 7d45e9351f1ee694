"""Preemption: a SIGTERM ends a trial with a checkpoint, and ends a sweep the way Ctrl+C does.

A cluster announces the end of a node with SIGTERM (a spot-instance notice turned into a drain,
Kubernetes deleting a Pod) and kills what is left after a grace period (see infra/README.md).

**Trial processes.** Ray's worker turns SIGTERM into ``SystemExit`` in its main thread; the
trial's training runs in another thread. While a trial trains, :class:`TrialGuard` holds the
process's exit (an ``atexit`` hook, which runs before the training thread is abandoned) for up
to ``cluster.preemption_grace_s``: it asks ``fit`` to stop (``fit``'s ``stop``), which writes a
checkpoint of the current step, and the trainable copies it to the trial's storage before the
process goes. Tune sees a failed trial and retries it (``cluster.max_failures``) from that
checkpoint (:mod:`orchestration.trial.checkpoints`).

**The sweep driver.** :func:`stop_sweep_on_signals` turns SIGTERM and SIGINT into Tune's own
graceful stop (the handler Tune installs for SIGUSR1: trials are stopped, the experiment state is
saved), and records which signal came, so that the driver marks its runs KILLED and a re-run of
the same command resumes. A second signal stops at once.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from contextlib import suppress

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


__all__ = ["TrialGuard"]
