"""Every workaround of the pinned Ray (:data:`PINNED_RAY`), in one package (the log lines in
:mod:`.logs`): what a reader may skip, and what to revisit on a Ray upgrade (each says what it
mends and where Ray does it).

* :func:`bind_loopback_even_if_imported_before`: a local Ray listens on 127.0.0.1 even in a
  process that imported ``ray`` before linc set Ray's switch (a notebook);
* :func:`quiet_token_auth_notice`: a new local Ray enables token authentication and says so on
  the console at every start: the notice is dropped, authentication stays on;
* :func:`drop_ray_root_handler`: Ray's logging config prints every record of the driver's own
  loggers a second time, in Ray's format;
* :func:`quiet_ignored_worker_exits`: a worker whose SIGTERM lands in a weakref callback prints
  an ignored ``SystemExit`` traceback, which the driver forwarded to the console;
* :func:`patient_actor_reuse`: a reused trial process waits long enough for the last trial;
* :func:`keep_aws_keys_out_of_trials`: Tune copies the driver's ``AWS_*`` keys into each trial's
  ``runtime_env``, which Ray's agent writes into a log every user of the node can read;
* :func:`quiet_tune`: Tune's console output engine, per-trial tracebacks, checkpoint-frequency
  warnings and result-file warnings off; :class:`SyncFailureFilter` and
  :class:`GoneCheckpointFilter` turn two tracebacks Tune logs for conditions linc mends into
  one warning line each, :class:`SaidByLincFilter` drops lines linc's console says itself;
* :func:`handle_memory_kills`: a trial the memory monitor kills is a failed trial, not the end of
  the sweep;
* :func:`refused_input_fails_at_once`: a trial whose input is refused is not retried (Tune retries
  every error alike);
* :class:`SweepFIFOScheduler`, :class:`SweepASHAScheduler`: trials created after a moved sweep is
  restored go to its current folder, not the one it started in;
* :func:`tolerate_gone_checkpoints`: a trial restores past a checkpoint Tune's record names but
  storage no longer holds;
* :func:`errors_as_text`: a failed trial's error is read as text, never unpickled from storage;
* :func:`with_callbacks`: a restored tuner runs with the callbacks this driver built, not the
  ones pickled with it; :func:`restore_tuner`, the one restore of a sweep, applies them and turns
  Ray's error for a sweep of another linc version (its wording parsed) into one line.
"""

from __future__ import annotations

import ast
import copy
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs
from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

from orchestration.experiment.ray_compat.logs import (
    GoneCheckpointFilter,
    SaidByLincFilter,
    SyncFailureFilter,
    drop_ray_root_handler,
    quiet_ignored_worker_exits,
    quiet_token_auth_notice,
    quiet_tune,
)
from orchestration.failures import SweepRefused, refused_input

if TYPE_CHECKING:
    from orchestration.experiment.folder import SweepFolder

logger = logging.getLogger(__name__)

PINNED_RAY = "2.60.0"  # pyproject.toml pins ray[default,tune] to this version
_MARK = "_linc_handles_memory_kills"


def bind_loopback_even_if_imported_before(switch: str) -> None:
    """Ray reads the loopback ``switch`` (:data:`orchestration.ray_session.LOOPBACK_SWITCH`)
    into a module constant at its first import, so a process that imported ``ray`` earlier
    would start a local Ray on every interface. Ray reads the constant at call time
    (``ray._private.services.get_node_ip_address``): set it for this start, and the switch in
    the environment for the processes Ray starts (raylet, GCS, dashboard agent, workers), which
    import ``ray`` afresh."""
    from ray._private import ray_constants

    os.environ[switch] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def local_ray_in_its_own_session() -> None:
    """Start a local Ray's processes (GCS, raylet, agents) in a session of their own. Ray
    starts them in the driver's process group (``ray._private.services.ConsolePopen``), so a
    signal to that group (``timeout``, ``kill -TERM -- -PGID``, a process manager's stop)
    ended the GCS with the driver: the driver then waited 60 s for it, exited 1, and left its
    runs RUNNING and its lease behind. In a session of their own only the driver gets it, stops
    the sweep, then Ray. Ray's fate-sharing is kept (the kernel ends them when the driver
    dies), and so is its blocking of SIGINT in them (idempotent)."""
    from ray._private import services

    original = services.ConsolePopen
    if getattr(original, _MARK, False):
        return

    class OwnSession(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("start_new_session", True)
            super().__init__(*args, **kwargs)

    setattr(OwnSession, _MARK, True)
    services.ConsolePopen = OwnSession


ACTOR_REUSE_WAIT_S = "30"  # Tune's default, 2 s, failed a trial on a loaded node


def patient_actor_reuse() -> None:
    """A reused trial process waits ``TUNE_FUNCTION_THREAD_TIMEOUT_S`` for the last trial's
    thread, then fails the next trial ("Could not re-use actor"); wait longer, in every trial
    (the variable travels in each trial actor's ``runtime_env``)."""
    from ray.tune.execution import class_cache

    os.environ.setdefault("TUNE_FUNCTION_THREAD_TIMEOUT_S", ACTOR_REUSE_WAIT_S)
    propagated = class_cache.ENV_VARS_TO_PROPAGATE | {"TUNE_FUNCTION_THREAD_TIMEOUT_S"}
    class_cache.ENV_VARS_TO_PROPAGATE = propagated


def keep_aws_keys_out_of_trials() -> None:
    """Tune copies the driver's ``AWS_*`` keys into each trial actor's ``runtime_env``
    (``ray.tune.execution.class_cache.ENV_VARS_TO_PROPAGATE``), which Ray's agent writes into
    ``runtime_env_agent.log``. Once this process has started or joined Ray no copy is needed:
    a local Ray's workers inherit this process's environment, a cluster's nodes use their own
    AWS chain (role, ``~/.aws``, their environment)."""
    from ray.tune.execution import class_cache

    names = class_cache.ENV_VARS_TO_PROPAGATE
    class_cache.ENV_VARS_TO_PROPAGATE = {name for name in names if not name.startswith("AWS_")}


def handle_memory_kills() -> None:
    """When the memory monitor kills a trial's process, its pending task fails with
    ``OutOfMemoryError``, which Ray's actor manager
    (``ray.air.execution._internal.actor_manager.RayActorManager._actor_task_failed``) does not
    expect: it raises "Caught unexpected exception" from the driver's loop and the whole sweep
    ends. Here the manager treats it as the death of the trial's process (a ``RayActorError``
    carrying the monitor's message): Tune records the trial as failed and retries it per
    ``cluster.max_failures``. Every other exception goes to Ray's own code (idempotent)."""
    from ray.air.execution._internal.actor_manager import RayActorManager
    from ray.exceptions import OutOfMemoryError, RayActorError

    original = RayActorManager._actor_task_failed
    if getattr(original, _MARK, False):
        return

    def _actor_task_failed(self: Any, tracked_actor_task: Any, exception: Exception) -> None:
        if isinstance(exception, OutOfMemoryError):
            actor_id = tracked_actor_task._tracked_actor.actor_id
            message = f"the memory monitor killed the trial's process: {exception}"
            exception = RayActorError(actor_id=actor_id, error_msg=message)
        original(self, tracked_actor_task, exception)  # Ray's own RayActorError path

    setattr(_actor_task_failed, _MARK, True)
    RayActorManager._actor_task_failed = _actor_task_failed


def refused_input_fails_at_once() -> None:
    """A trial that fails on its input (:data:`~orchestration.failures.REFUSED_INPUT`: a shard
    whose bytes differ from its manifest, an instance or setting that fails its check) fails
    the same way on every retry, each first training again from the last checkpoint to where it
    met it. Tune retries every error alike while ``FailureConfig(max_failures)`` allows
    (``TuneController._process_trial_failure`` asks ``Trial.should_recover``, which compares
    the failures counted so far with ``trial.max_failures``). Here such a failure is the trial's
    last: its limit is its failures so far while Tune decides, then what it was (idempotent)."""
    from ray.tune.execution.tune_controller import TuneController

    original = TuneController._process_trial_failure
    if getattr(original, _MARK, False):
        return

    def _process_trial_failure(self: Any, trial: Trial, exception: Exception) -> None:
        if not refused_input(exception):
            return original(self, trial, exception)
        limit = trial.max_failures
        trial.max_failures = trial.run_metadata.num_failures  # this failure goes past it
        try:
            original(self, trial, exception)
        finally:
            trial.max_failures = limit

    setattr(_process_trial_failure, _MARK, True)
    TuneController._process_trial_failure = _process_trial_failure


def follow_current_storage(controller: Any, trial: Trial) -> None:
    """Ray Tune restores a moved experiment's existing trials into its new folder, but a trial
    its search algorithm creates after the restore gets the storage the experiment was first
    started with (from the search algorithm's saved state): it would write into the old folder.
    Give ``trial`` the storage of the experiment's first trial when they differ."""
    for other in controller.get_trials():
        if other is trial:
            continue
        current, mine = other.storage, trial.storage
        if (mine.storage_fs_path, mine.experiment_dir_name) != (
            current.storage_fs_path,
            current.experiment_dir_name,
        ):
            moved = copy.copy(mine)
            moved.storage_filesystem = current.storage_filesystem
            moved.storage_fs_path = current.storage_fs_path
            moved.experiment_dir_name = current.experiment_dir_name
            trial.set_storage(moved)
        return


class SweepFIFOScheduler(FIFOScheduler):
    """Tune's first-in-first-out scheduler, keeping a moved sweep's new trials in its folder
    (:func:`follow_current_storage`; Tune saves the scheduler with the experiment)."""

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        follow_current_storage(tune_controller, trial)
        super().on_trial_add(tune_controller, trial)


class SweepASHAScheduler(ASHAScheduler):
    """Tune's ASHA scheduler, keeping a moved sweep's new trials in its folder."""

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        follow_current_storage(tune_controller, trial)
        super().on_trial_add(tune_controller, trial)


def tolerate_gone_checkpoints(function: Callable[..., None]) -> type:
    """Tune's trainable class of ``function`` (a function trainable), restoring past a checkpoint
    that Tune's record names but storage no longer holds.

    Tune snapshots its experiment state at most every 10 s, while a trial can checkpoint every
    fraction of a second and Tune deletes all but the last two. A driver killed in between
    leaves a record whose newest checkpoint is gone, and Tune's own restore then fails every
    retry ("Could not recover from checkpoint as it does not exist on storage anymore"). A linc
    trial never reads Tune's checkpoint (it restores the newest intact one of its folder:
    :func:`orchestration.trial.checkpoints.restore_newest_intact`), so Tune's restore is given
    the trial's folder instead, with one warning line naming the gone one.
    """
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult
    from ray.tune.trainable.function_trainable import wrap_function

    trainable = wrap_function(function)

    class ImplicitFunc(trainable):  # Ray titles the trial's process with this class name
        def restore(self, checkpoint_path: Any) -> Any:
            checkpoint = getattr(checkpoint_path, "checkpoint", None)
            if checkpoint is not None:
                info = checkpoint.filesystem.get_file_info(checkpoint.path)
                if info.type == pafs.FileType.NotFound:
                    folder = checkpoint.path.rstrip("/").rsplit("/", 1)[0]
                    logger.warning(
                        "Tune's record names checkpoint %s, which is gone from storage (its "
                        "driver stopped before recording newer ones); restoring from the newest "
                        "intact checkpoint in %s",
                        checkpoint.path,
                        folder,
                    )
                    replacement = Checkpoint(folder, filesystem=checkpoint.filesystem)
                    checkpoint_path = _TrainingResult(replacement, checkpoint_path.metrics)
            return super().restore(checkpoint_path)

    ImplicitFunc.__name__ = trainable.__name__  # Tune names trials after it
    return ImplicitFunc


def errors_as_text() -> None:
    """A failed trial's error in Tune's results is the text of its ``error.txt``. Tune's result
    grid (``ray.tune.result_grid.ResultGrid._populate_exception``) unpickles ``error.pkl`` from
    storage first: code anyone who can write the storage put there runs in the driver, and a
    file the full storage cut short ends the sweep in "pickle data was truncated"."""
    from ray.tune.result_grid import ResultGrid

    ResultGrid._populate_exception = staticmethod(_error_as_text)


def _error_as_text(trial: Trial) -> Exception | None:
    if trial.status == Trial.TERMINATED or trial.run_metadata.error_filename is None:
        return None
    from ray.tune.error import TuneError

    return TuneError(trial_error_text(trial))


ERROR_TEXT_BYTES = 1 << 20  # an error.txt's tail read (its last line is what is shown)


def trial_error_text(trial: Trial) -> str:
    """The text of the trial's ``error.txt`` (Ray writes it at once on the driver, and copies it
    to storage at the next sync), its last :data:`ERROR_TEXT_BYTES` at most, or a line saying
    why it could not be read."""
    try:
        local = trial.error_file
        if local and os.path.exists(local):
            handle = open(local, "rb")  # noqa: SIM115 - closed below, as the stream is
        else:
            name = trial.run_metadata.error_filename or "error.txt"
            path = f"{trial.storage.trial_fs_path.rstrip('/')}/{name}"
            handle = trial.storage.storage_filesystem.open_input_file(path)
        with handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - ERROR_TEXT_BYTES))
            data = handle.read()
    except OSError as err:
        return f"the trial failed; its error.txt could not be read ({err})"
    return data.decode("utf-8", errors="replace")


def with_callbacks(tuner: Any, callbacks: list[Any]) -> Any:
    """``tuner`` (restored) running ``callbacks`` instead of those pickled in its ``tuner.pkl``:
    ``Tuner.restore`` takes no run config, so they are set on its private local tuner (absent
    for a Ray Client driver, which keeps the pickled ones)."""
    local = getattr(tuner, "_local_tuner", None)
    if local is not None:
        local.get_run_config().callbacks = list(callbacks)
    return tuner


def restore_tuner(
    folder: SweepFolder, trainable: Any, param_space: dict[str, Any], callbacks: list[Any]
) -> tune.Tuner:
    """Tune's restore of the sweep in ``folder`` running ``callbacks``; a sweep of another
    linc version (other settings keys, classes gone) is one line naming what differs."""
    try:
        tuner = tune.Tuner.restore(
            folder.path,
            trainable,
            resume_errored=True,
            param_space=param_space,
            storage_filesystem=folder.tune_filesystem,
        )
    except (ValueError, ImportError, AttributeError) as err:
        if isinstance(err, ValueError) and "param_space" not in str(err):
            raise
        raise SweepRefused(_other_version(folder, err)) from None
    return with_callbacks(tuner, callbacks)


def _other_version(folder: SweepFolder, err: Exception) -> str:
    """The refusal of a sweep that another linc version began."""
    differ = f" (this linc has no {err.name})" if isinstance(err, ImportError) and err.name else ""
    saved, ours = _listed_keys(str(err), "Expected"), _listed_keys(str(err), "Got")
    if saved is not None and ours is not None:
        new, gone = sorted(ours - saved), sorted(saved - ours)
        differ = f" (only in this version: {new or 'none'}; only in the sweep's: {gone or 'none'})"
    what = "settings" if isinstance(err, ValueError) else "code"
    return (
        f"the sweep in {folder.uri()} was started by a linc version with other {what}{differ}; "
        "finish it with that version (its trial runs' git_commit tag names it) or start the "
        "sweep afresh under another name"
    )


def _listed_keys(message: str, label: str) -> set[str] | None:
    """The key list Ray prints after ``label:`` in its param_space error, or None."""
    for line in message.splitlines():
        if line.startswith(f"{label}: ["):
            try:
                return {key.replace("/", ".") for key in ast.literal_eval(line[len(label) + 2 :])}
            except (ValueError, SyntaxError):
                return None
    return None


def install_driver_workarounds(started: bool) -> None:
    """The workarounds a sweep's driver installs once its Ray is up (``started``: this driver
    started a local Ray, whose workers inherit its environment)."""
    if started:
        keep_aws_keys_out_of_trials()
    patient_actor_reuse()  # started or joined: every trial actor this driver creates
    handle_memory_kills()
    refused_input_fails_at_once()
    errors_as_text()


__all__ = [
    "ERROR_TEXT_BYTES",
    "GoneCheckpointFilter",
    "PINNED_RAY",
    "SweepASHAScheduler",
    "SweepFIFOScheduler",
    "SyncFailureFilter",
    "SaidByLincFilter",
    "bind_loopback_even_if_imported_before",
    "follow_current_storage",
    "handle_memory_kills",
    "install_driver_workarounds",
    "keep_aws_keys_out_of_trials",
    "local_ray_in_its_own_session",
    "quiet_ignored_worker_exits",
    "quiet_token_auth_notice",
    "patient_actor_reuse",
    "quiet_tune",
    "refused_input_fails_at_once",
    "restore_tuner",
    "drop_ray_root_handler",
    "errors_as_text",
    "tolerate_gone_checkpoints",
    "trial_error_text",
    "with_callbacks",
]
