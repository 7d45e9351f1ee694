"""The pinned Ray's log lines linc rewrites or drops (part of :mod:`..ray_compat`, the
workarounds of the pinned Ray): Tune's console quieted, two tracebacks of conditions linc mends
as one warning line each, the lines linc's console says itself dropped, Ray's token notice
dropped, Ray's root handler that printed the driver's own records twice, and the traceback a
worker prints when its SIGTERM lands in a weakref callback."""

from __future__ import annotations

import logging
import os
import re
from typing import Any


def quiet_token_auth_notice() -> None:
    """A new local Ray turns token authentication on when ``RAY_AUTH_MODE`` is unset and warns
    that it did (``authentication_token_setup.enable_token_auth_by_default``), on every start.
    The notice is dropped; authentication stays on, and Ray's other warnings (a cluster without
    authentication) still show."""
    name = "ray._private.authentication.authentication_token_setup"
    found = logging.getLogger(name)
    if not any(isinstance(f, _TokenAuthNotice) for f in found.filters):
        found.addFilter(_TokenAuthNotice())


class _TokenAuthNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Token authentication is enabled for this")


def quiet_tune() -> None:
    """Tune's console at ``console.verbosity`` quiet or events (see
    :mod:`orchestration.experiment.console`): the legacy output engine, silent at verbose 0 (the
    new one prints an experiment box and a TensorBoard hint even then); no traceback per failed
    trial attempt; no warning that every epoch of a short trial snapshots the experiment; no
    "Remote file not found: .../result.json" of a trial retried before its first result reached
    storage (Tune's result loggers start the file afresh). The two filters below."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    logging.getLogger("ray.tune.logger").setLevel(logging.ERROR)
    for name, kind in (
        ("ray.tune.execution.tune_controller", GoneCheckpointFilter),
        ("ray.train._internal.storage", GoneCheckpointFilter),
        ("ray.train._internal.syncer", SyncFailureFilter),
        ("ray.tune.execution.experiment_state", SyncFailureFilter),
        ("ray.tune.tune", SaidByLincFilter),
        ("ray.tune.analysis.experiment_analysis", SaidByLincFilter),
    ):
        found = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in found.filters):
            found.addFilter(kind())


def _as_warning(record: logging.LogRecord, message: str, *args: Any) -> None:
    record.msg, record.args = message, args
    record.exc_info, record.exc_text = None, None
    record.levelno, record.levelname = logging.WARNING, "WARNING"


class SyncFailureFilter(logging.Filter):
    """Tune's failed copy of its experiment state to storage (full or unreachable): the syncer's
    "Last sync command failed" warning with the traceback in its message, and "Saving
    experiment state to storage ... failed" with its traceback, as one warning line: the
    error's last line. The next save tries again; a copy cut short is mended on the re-run
    (:mod:`orchestration.experiment.tune_state`)."""

    PREFIXES = ("Last sync command failed", "Saving experiment state to storage")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(self.PREFIXES):
            error = record.exc_info[1] if record.exc_info else None
            if error is not None:
                message += f"\n{type(error).__name__}: {error}"
            lines = [line for line in message.splitlines() if line.strip()]
            last = lines[-1].strip() if len(lines) > 1 else "no detail"
            text = (
                "could not copy Tune's experiment state to storage (%s); retried at its next save"
            )
            _as_warning(record, text, last)
        return True


class SaidByLincFilter(logging.Filter):
    """Tune's lines that linc's console says in its own words (a failed sweep's trials, a stop
    and how to resume it), and its "Failed to fetch metrics" for trials not yet reported."""

    PREFIXES = (
        "Trials did not complete",
        "Stop signal received",
        "Experiment has been interrupted",
        "Failed to fetch metrics for",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self.PREFIXES):
            return True
        if str(record.msg).startswith("Failed to fetch metrics for"):
            failures = record.getMessage().splitlines()[1:]
            return not failures or not all("not found" in line for line in failures)
        return False


def drop_ray_root_handler() -> None:
    """Ray's ``LoggingConfig`` puts one handler on both the ``ray`` logger and the root logger,
    so every warning of linc's own loggers printed twice: bare (the console's handler) and in
    Ray's format with its job and worker ids. Ray's lines keep the handler on ``ray``."""
    root, ray_handlers = logging.getLogger(), logging.getLogger("ray").handlers
    for handler in [h for h in root.handlers if h in ray_handlers]:
        root.removeHandler(handler)


class GoneCheckpointFilter(logging.Filter):
    """Tune's traceback for deleting a checkpoint that is already gone, as one warning line.

    Tune keeps a trial's last two checkpoints by the list in its experiment state and deletes
    the older one when a new one registers. A driver killed between deleting a checkpoint and
    its next snapshot of that state leaves a list naming a folder that no longer exists; the
    re-run's first new checkpoint deletes it again. Tune's list is updated before the deletion,
    nothing is lost (the trial restored its newest intact checkpoint anyway), yet Tune logs the
    ``FileNotFoundError`` with a traceback: "Error handling checkpoint" when the folder is gone
    before Ray looks (``tune_controller._process_trial_save``), "Caught exception when deleting
    path" when it goes between Ray's look and its deletion (``train._internal.storage``).
    """

    PREFIXES = ("Trial %s: Error handling checkpoint", "Caught exception when deleting path")

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, FileNotFoundError) and str(record.msg).startswith(self.PREFIXES):
            # Ray's texts: "Path not found: (<file system>, PATH)", "... path at (<fs>, PATH):"
            said = str(error) if "Path not found" in str(error) else str(record.msg)
            path = said.rsplit(", ", 1)[-1].rstrip("):")
            is_trial = isinstance(record.args, tuple) and record.args and "%s" in record.msg
            trial = record.args[0] if is_trial else "a trial"
            text = (
                "%s: a checkpoint in Tune's record of this trial is already gone from storage "
                "(%s), deleted before the last driver stopped; nothing to delete"
            )
            _as_warning(record, text, trial, path)
        return True


__all__ = [
    "GoneCheckpointFilter",
    "SaidByLincFilter",
    "SyncFailureFilter",
    "drop_ray_root_handler",
    "quiet_token_auth_notice",
    "quiet_tune",
]


IGNORED_EXIT_OPENING = "Exception ignored in:"
# A traceback's caret line (``^^^^``, ``~~~^^^``), or what is left of it: nothing.
_CARETS = re.compile(r"[\^~]*")


def without_ignored_exits(lines: list[str]) -> list[str]:
    """``lines`` (one batch of a worker's output) without the tracebacks of an exit Python
    ignored: ``Exception ignored in: ...``, ``Traceback ...``, the indented frames (empty lines
    among them), and a last line ``SystemExit: N``. Any other ignored exception keeps its
    traceback."""
    kept: list[str] = []
    at = 0
    while at < len(lines):
        end = at
        opening = lines[at].startswith(IGNORED_EXIT_OPENING) and at + 1 < len(lines)
        if opening and lines[at + 1].startswith("Traceback (most recent call last)"):
            end = at + 2
            # frames are indented; a frame's caret line can arrive as an empty line (its
            # trailing spaces stripped on the way to the driver) or split in two, its second
            # part a line of carets from the first column
            while end < len(lines) and (
                lines[end].startswith((" ", "\t")) or _CARETS.fullmatch(lines[end])
            ):
                end += 1
        if end > at and end < len(lines) and lines[end].startswith("SystemExit"):
            at = end + 1
            continue
        kept.append(lines[at])
        at += 1
    return kept


def quiet_ignored_worker_exits() -> None:
    """Drop from the workers' forwarded output the traceback of a SIGTERM that landed while the
    worker ran a weakref callback.

    A Ray worker's SIGTERM handler raises ``SystemExit(1)`` (``worker.main_loop``); Ray sends
    it when it stops idle or finished workers. When the signal arrives inside a weakref callback
    (a ``WeakSet``'s ``_remove`` during garbage collection), Python cannot raise there: it prints
    ``Exception ignored in: ...`` with a traceback ending ``SystemExit: 1`` and goes on, and the
    driver forwards those lines to the console at the end of a sweep that finished well (seen
    once in a fault-matrix run). Only that block is dropped, within one batch of lines (the
    lines a worker writes at once arrive together); every other line and traceback stays.
    Installed on the dispatcher of every batch of worker output (``ray_logging``), once."""
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    emit = dispatcher.emit
    if getattr(emit, "drops_ignored_exits", False):
        return

    def emit_without_ignored_exits(data: dict[str, Any]) -> None:
        lines = data.get("lines")
        if isinstance(lines, list) and any(IGNORED_EXIT_OPENING in str(x) for x in lines):
            kept = without_ignored_exits([str(x) for x in lines])
            if not kept:
                return
            data = data | {"lines": kept}
        emit(data)

    emit_without_ignored_exits.drops_ignored_exits = True
    dispatcher.emit = emit_without_ignored_exits
