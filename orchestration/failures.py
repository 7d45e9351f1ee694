"""How a sweep ends when it does not finish: one family of errors, each one line for the user
and an exit code for the entry point.

Every failure a sweep can meet leaves :class:`~orchestration.experiment.sweep.Sweep` as one of
these (the entry points print the message and exit with ``exit_code``; a bug in linc is the
only traceback):

* :class:`SweepRefused` (exit 2): nothing ran. A setting whose storage or server does not
  answer (the pre-flight), another driver holding the sweep's lease, Tune's saved state whose
  seal does not hold, a sweep on storage begun by a linc with other settings, a sealing key
  that cannot be had safely. It is a :class:`~linc_core.utils.typed.ConfigError`: fix the
  setting and run the command again.
* :class:`SweepStopped` (exit 1): the sweep ended before its trials did and its state is
  saved: re-running the same command resumes it. :class:`SweepInterrupted` (exit 143) when a
  signal stopped it, :class:`TrialFailed` when trials failed after their retries; otherwise
  trials no node could place, or storage that filled up or went away.

Messages are masked (:func:`~linc_core.utils.secrets.redact`) where they are made.
"""

from __future__ import annotations

import signal

from linc_core.instances.batch import InstanceError
from linc_core.utils.files import FileRefusedError
from linc_core.utils.secrets import redact
from linc_core.utils.typed import ConfigError
from orchestration.data.storage import out_of_space


class SweepError(Exception):
    """A sweep that did not finish: ``str(err)`` is one line, ``exit_code`` the process's."""

    exit_code = 1


class SweepRefused(SweepError, ConfigError):
    """Nothing of the sweep ran, or was written: the message names the setting and the place."""

    exit_code = 2


class SweepStopped(SweepError):
    """The sweep ended before its trials did; its state is saved for a re-run."""


class SweepInterrupted(SweepStopped):
    """A signal stopped the sweep; its runs are marked KILLED."""

    exit_code = 128 + 15  # as a process ended by SIGTERM


class TrialFailed(SweepStopped):
    """Trials failed after their retries; each keeps its newest intact checkpoint."""


# Errors of a trial's input, not of its moment: a shard whose bytes differ from its manifest or
# fail their schema, an instance or a setting that fails its check, a file refused as it is
# opened. A retry reads the same bytes and settings and fails the same way, after training again
# from its last checkpoint up to where it met them, so such a trial is not retried.
REFUSED_INPUT = (InstanceError, FileRefusedError, ConfigError)


def refused_input(err: BaseException | None) -> bool:
    """Whether ``err`` (a trial's error as Tune holds it: Ray's ``RayTaskError``, whose
    ``cause`` is what the trial raised, or what wraps it) is a :data:`REFUSED_INPUT`."""
    seen, hops = err, 0
    while seen is not None and hops < 16:  # a chain, not a cycle
        if isinstance(seen, REFUSED_INPUT):
            return True
        cause = getattr(seen, "cause", None)
        seen = cause if isinstance(cause, BaseException) else seen.__cause__ or seen.__context__
        hops += 1
    return False


def one_line(err: BaseException, limit: int = 200) -> str:
    """An error's last non-empty line (a traceback's ``ValueError: ...``), masked and cut."""
    lines = [line.strip() for line in redact(str(err)).splitlines() if line.strip()]
    text = lines[-1] if lines else type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def sweep_failure(err: BaseException | None, name: str, storage: str | None) -> SweepError | None:
    """The failure of the family that ``err``, which ended sweep ``name`` on ``storage`` (its
    folder's parent), is; None for none, or for a bug (its traceback is the message)."""
    seen = err
    while seen is not None:  # Tune wraps what its callbacks raise
        if isinstance(seen, SweepError):
            return seen
        seen = seen.__cause__ or seen.__context__
    if err is None:
        return None
    if isinstance(err, SystemExit) and err.code == signal.SIGTERM:  # Ray's handler, in ray.init
        return SweepInterrupted(f"{name}: stopped at once by SIGTERM; re-run to resume")
    if isinstance(err, KeyboardInterrupt):  # a signal outside Tune's run (Ray starting), or
        why = str(err) or "SIGINT"  # a second one in it
        return SweepInterrupted(f"{name}: stopped at once by {why}; re-run to resume")
    if isinstance(err, ConfigError):
        return SweepRefused(str(err))
    if isinstance(err, OSError | EOFError) and out_of_space(storage or "", err):
        # Tune reading back a result file the full storage left empty, and alike
        return SweepStopped(
            f"{name}: the storage {storage} is out of space (No space left on device: "
            f"{type(err).__name__} {one_line(err)}); free space there and run the same "
            "command again: it resumes from each trial's newest intact checkpoint"
        )
    if isinstance(err, OSError):  # the storage's own errors, after their retries
        return SweepStopped(f"{name}: {one_line(err, 400)}; re-run the same command once mended")
    return None


__all__ = [
    "REFUSED_INPUT",
    "SweepError",
    "SweepInterrupted",
    "SweepRefused",
    "SweepStopped",
    "TrialFailed",
    "one_line",
    "refused_input",
    "sweep_failure",
]
