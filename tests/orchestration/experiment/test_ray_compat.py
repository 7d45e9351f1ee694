"""orchestration.experiment.ray_compat: the workarounds of the pinned Ray, each shown against
the Ray code it mends (so that a Ray upgrade that no longer needs one, or breaks one, fails
here)."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import ray

from orchestration.config.sections import ConsoleSpec
from orchestration.experiment.ray_compat import PINNED_RAY
from tests.conftest import trapped_pickle


@contextmanager
def console_of(logger_name: str) -> Iterator[io.StringIO]:
    """What ``logger_name`` shows on the console (``LEVEL message``) once linc's console is
    prepared (its filters installed)."""
    from orchestration.experiment.console import prepare_console

    logger = logging.getLogger(logger_name)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    try:
        prepare_console(ConsoleSpec())
        yield stream
    finally:
        logger.removeHandler(handler)


def test_the_workarounds_are_for_the_installed_ray() -> None:
    assert ray.__version__ == PINNED_RAY  # an upgrade: revisit every workaround of the module


def test_a_new_local_ray_keeps_token_authentication_without_its_notice(monkeypatch) -> None:
    """Ray 2.60 turns token authentication on for a new local Ray when ``RAY_AUTH_MODE`` is
    unset, and warns at every start; the notice is dropped, its other warnings are not."""
    from ray._private.authentication import authentication_token_setup as setup

    from orchestration.experiment.ray_compat import quiet_token_auth_notice

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setattr(setup, "_enable_token_auth", lambda: None)
    quiet_token_auth_notice()
    with console_of(setup.logger.name) as stream:
        assert setup.enable_token_auth_by_default()  # on, as Ray decides
        setup._warn_token_auth_disabled()  # a cluster without authentication: still said
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("WARNING Token authentication is disabled")


def test_tune_deleting_a_checkpoint_already_gone_is_one_warning_line(tmp_path) -> None:
    """A driver killed between Tune's deletion of an old checkpoint and its next snapshot of
    the experiment state leaves a record naming a folder that is gone. Ray's own checkpoint
    manager then raises FileNotFoundError when the re-run registers a new checkpoint (the
    state of Ray 2.60 this guards), and its controller logs that with a traceback: the console
    shows one warning line instead."""

    from ray.train import Checkpoint, CheckpointConfig
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.train._internal.session import _TrainingResult

    folders = [tmp_path / f"checkpoint_00000{i}" for i in range(3)]
    for folder in folders:
        folder.mkdir()
    manager = _CheckpointManager(CheckpointConfig(num_to_keep=2))
    for folder in folders[:2]:
        manager.register_checkpoint(_TrainingResult(Checkpoint(str(folder)), {}))
    folders[0].rmdir()  # deleted by the killed driver after its last snapshot
    controller = logging.getLogger("ray.tune.execution.tune_controller")
    with console_of(controller.name) as stream:
        try:
            manager.register_checkpoint(_TrainingResult(Checkpoint(str(folders[2])), {}))
        except FileNotFoundError:  # as Tune's controller catches it
            controller.exception("Trial %s: Error handling checkpoint %s", "trial_0", "cp")
        else:  # a Ray that tolerates a gone folder: nothing reaches the console at all
            assert not folders[0].exists()
    lines = stream.getvalue().splitlines()
    assert len(lines) <= 1 and "Traceback" not in stream.getvalue()
    if lines:
        assert lines[0].startswith("WARNING trial_0: a checkpoint in Tune's record")
        assert f"storage ({folders[0]}), deleted before" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [folders[1].name, folders[2].name]


def test_a_failed_copy_of_tunes_state_is_one_warning_line() -> None:
    """Ray's background syncer (its copy of the experiment state to storage) logs a failed copy
    with the whole traceback in the message; the console shows the error's last line."""

    from ray.train._internal.syncer import _BackgroundSyncer

    def copy_to_full_storage() -> None:
        raise OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")

    class FullStorageSyncer(_BackgroundSyncer):
        def _sync_up_command(self, local_path, uri, exclude=None):
            return copy_to_full_storage, {}

        def _sync_down_command(self, uri, local_path):
            return copy_to_full_storage, {}

        def _delete_command(self, uri):
            return copy_to_full_storage, {}

    with console_of("ray.train._internal.syncer") as stream:
        syncer = FullStorageSyncer()
        syncer._launch_sync_process(syncer._sync_up_command("a", "b"))
        syncer._launch_sync_process(syncer._sync_up_command("a", "b"))  # waits on the first
    lines = stream.getvalue().splitlines()
    assert lines == [
        "WARNING could not copy Tune's experiment state to storage (OSError: Error writing bytes "
        "to file. Detail: [errno 28] No space left on device); retried at its next save"
    ]


def test_a_failed_save_of_tunes_state_is_one_warning_line() -> None:
    """Tune's experiment state logs a failed save with ``exc_info`` (Ray 2.60's wording)."""
    logger = logging.getLogger("ray.tune.execution.experiment_state")
    with console_of(logger.name) as stream:
        try:
            raise OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space")
        except OSError:
            logger.error(
                "Saving experiment state to storage at '/runs/x' failed with exception: ",
                exc_info=True,
            )
    assert stream.getvalue().splitlines() == [
        "WARNING could not copy Tune's experiment state to storage (OSError: [Errno 28] Error "
        "writing bytes to file. Detail: [errno 28] No space); retried at its next save"
    ]


def test_a_checkpoint_gone_while_ray_deletes_it_is_one_warning_line(tmp_path, monkeypatch):
    """The same folder gone between Ray's look at it and its deletion: Ray's storage helper
    logs that with a traceback of its own; the console shows one warning line."""
    import pyarrow.fs as pafs
    from ray.train._internal import storage

    monkeypatch.setattr(storage, "_is_directory", lambda fs, path: True)  # it was, a moment ago
    gone = tmp_path / "checkpoint_000001"
    with console_of("ray.train._internal.storage") as stream:
        storage._delete_fs_path(pafs.LocalFileSystem(), str(gone))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and "Traceback" not in stream.getvalue()
    assert lines[0].startswith("WARNING a trial: a checkpoint in Tune's record")
    assert f"storage ({gone}), deleted before" in lines[0]


def test_tunes_lines_that_linc_says_itself_are_dropped() -> None:
    """A stopped sweep printed Tune's "Stop signal received", "Experiment has been interrupted
    ... Tuner.restore(...)" (a command a linc user does not run: linc's stop line says to re-run
    the same command) and, stopped or resumed, "Failed to fetch metrics for N trial(s)" with a
    line per pending trial. Each wording is Ray's (checked in its source)."""
    import inspect

    from ray.tune import tune
    from ray.tune.analysis import experiment_analysis

    from orchestration.experiment.ray_compat import SaidByLincFilter

    sources = inspect.getsource(tune) + inspect.getsource(experiment_analysis)
    assert all(prefix in sources for prefix in SaidByLincFilter.PREFIXES)
    pending = (
        "Failed to fetch metrics for 1 trial(s):\n- train_linc_1: FileNotFoundError('Could not "
        "fetch metrics for train_linc_1: both result.json and progress.csv were not found at /r')"
    )
    unreadable = "Failed to fetch metrics for 1 trial(s):\n- train_linc_2: PermissionError('x')"
    for module in (tune, experiment_analysis):
        with console_of(module.logger.name) as stream:
            for prefix in SaidByLincFilter.PREFIXES[:-1]:
                module.logger.warning(f"{prefix} (as Ray words it)")
            module.logger.warning(pending)
            module.logger.warning(unreadable)  # not a pending trial: kept
            module.logger.warning("Something else Tune says")
        assert stream.getvalue().splitlines() == [
            "WARNING Failed to fetch metrics for 1 trial(s):",
            "- train_linc_2: PermissionError('x')",
            "WARNING Something else Tune says",
        ]


def test_a_driver_warning_prints_once_after_rays_logging_config(capsys) -> None:
    """``ray.init(logging_config=...)`` puts Ray's handler on the root logger as well as on
    ``ray``: each warning of linc's own loggers printed twice (bare, and in Ray's format with
    job and worker ids). After :func:`drop_ray_root_handler`, once; Ray's lines keep theirs."""
    from orchestration.experiment.ray_compat import drop_ray_root_handler

    root, ray_logger = logging.getLogger(), logging.getLogger("ray")
    saved = (root.handlers[:], root.level, ray_logger.handlers[:], ray_logger.propagate)
    try:
        ray.LoggingConfig(log_level="WARNING")._configure_logging()
        rays = [h for h in root.handlers if h in ray_logger.handlers]
        assert rays  # the state of Ray 2.60 this mends
        console = io.StringIO()  # linc's own console handler (the bare line)
        root.addHandler(logging.StreamHandler(console))
        driver = logging.getLogger("orchestration.experiment.callbacks")
        driver.warning("SIGTERM: stopping the sweep")
        assert " -- SIGTERM: stopping the sweep" in capsys.readouterr().err  # Ray's copy
        drop_ray_root_handler()
        assert not [h for h in root.handlers if h in ray_logger.handlers]
        driver.warning("SIGTERM: stopping the sweep")
        logging.getLogger("ray.tune.tune").warning("a line of Tune's")
        err = capsys.readouterr().err
        assert " -- SIGTERM" not in err  # no second copy in Ray's format
        assert console.getvalue().count("SIGTERM: stopping the sweep") == 2  # once per warning
        assert " -- a line of Tune's" in err  # Ray's lines: in its format, as before
    finally:
        root.handlers[:], ray_logger.handlers[:] = saved[0], saved[2]
        root.setLevel(saved[1])
        ray_logger.propagate = saved[3]


def test_a_reused_trial_process_waits_longer_for_the_last_trials_thread(
    monkeypatch, ray_session, tmp_path
) -> None:
    """Ray 2.60's FunctionTrainable.reset_config waits TUNE_FUNCTION_THREAD_TIMEOUT_S (2 s) and
    then fails the next trial; linc sets a longer wait and has Tune carry it to every trial,
    whenever a sweep starts or joins Ray (the workaround once existed unwired, and a CI run
    failed a search's trial with "Could not re-use actor")."""
    import inspect

    from ray.air.execution._internal.actor_manager import RayActorManager
    from ray.tune.execution import class_cache
    from ray.tune.result_grid import ResultGrid
    from ray.tune.trainable.function_trainable import FunctionTrainable

    from orchestration.experiment.ray_compat import ACTOR_REUSE_WAIT_S
    from orchestration.experiment.sweep import start_ray
    from sweeps.compose import load_platform_config

    assert "TUNE_FUNCTION_THREAD_TIMEOUT_S" in inspect.getsource(FunctionTrainable.reset_config)
    monkeypatch.delenv("TUNE_FUNCTION_THREAD_TIMEOUT_S", raising=False)
    monkeypatch.setattr(
        class_cache, "ENV_VARS_TO_PROPAGATE", set(class_cache.ENV_VARS_TO_PROPAGATE)
    )
    # Ray's own methods back after the test (start_ray patches them; other tests see Ray's)
    for owner, name in (
        (ResultGrid, "_populate_exception"),
        (RayActorManager, "_actor_task_failed"),
    ):
        monkeypatch.setattr(owner, name, owner.__dict__[name])
    start_ray(load_platform_config(["preset=smoke", f"cluster.storage={tmp_path}"]))
    assert os.environ["TUNE_FUNCTION_THREAD_TIMEOUT_S"] == ACTOR_REUSE_WAIT_S
    assert "TUNE_FUNCTION_THREAD_TIMEOUT_S" in class_cache.ENV_VARS_TO_PROPAGATE


def test_a_failed_trials_error_is_its_text_never_unpickled_from_storage(
    tmp_path, monkeypatch, ray_session
) -> None:
    """Ray 2.60's result grid unpickles a failed trial's ``error.pkl`` from storage: what a
    writer of the storage put there runs in the driver, and a file the full storage cut short
    ends the sweep ("pickle data was truncated", seen in the storage-full fault row). With
    linc's workaround the error is the text of ``error.txt``, even cut mid-character."""
    import pickle

    from ray.train._internal.storage import StorageContext
    from ray.tune.error import TuneError
    from ray.tune.experiment import Trial
    from ray.tune.result_grid import ResultGrid

    from orchestration.experiment.ray_compat import errors_as_text

    storage = StorageContext(str(tmp_path), experiment_dir_name="sweep", trial_dir_name="trial_0")
    trial = Trial("__fake", config={}, storage=storage, stub=True)
    trial.status = Trial.ERROR
    trial.run_metadata.error_filename = "error.txt"
    trial.run_metadata.pickled_error_filename = "error.pkl"
    folder = Path(storage.trial_fs_path)
    folder.mkdir(parents=True)
    marker = tmp_path / "code-ran"
    (folder / "error.pkl").write_bytes(trapped_pickle(marker))
    text = "Failure # 1\nTraceback (most recent call last):\n  ...\nValueError: data.uri: gone\n"
    (folder / "error.txt").write_bytes(text.encode() + "é".encode()[:1])  # cut mid-character

    populate = ResultGrid._populate_exception
    with pytest.raises(UnicodeDecodeError):  # Ray's own: the intruder's code runs, then
        populate(trial)  # (its unpickled value being None) the cut error.txt ends it
    assert marker.exists(), "Ray no longer unpickles error.pkl: the workaround may go"
    marker.unlink()
    (folder / "cut.pkl").write_bytes(pickle.dumps(ValueError("x"))[:10])
    trial.run_metadata.pickled_error_filename = "cut.pkl"
    with pytest.raises(pickle.UnpicklingError):
        populate(trial)

    ray_own = ResultGrid.__dict__["_populate_exception"]
    monkeypatch.setattr(ResultGrid, "_populate_exception", ray_own)  # put back after the test
    errors_as_text()
    for name in ("error.pkl", "cut.pkl"):
        trial.run_metadata.pickled_error_filename = name
        error = ResultGrid._populate_exception(trial)
        assert isinstance(error, TuneError) and not marker.exists()
        assert str(error).startswith("Failure # 1\n")
        assert "ValueError: data.uri: gone\n" in str(error)
    from orchestration.experiment.ray_compat import ERROR_TEXT_BYTES

    (folder / "error.txt").write_bytes(b"x" * (3 * ERROR_TEXT_BYTES) + b"\nOSError: last\n")
    error = str(ResultGrid._populate_exception(trial))  # only the tail is read
    assert len(error) == ERROR_TEXT_BYTES and error.endswith("\nOSError: last\n")
    trial.status = Trial.TERMINATED
    assert ResultGrid._populate_exception(trial) is None
    trial.status, trial.run_metadata.error_filename = Trial.ERROR, "gone.txt"
    assert "its error.txt could not be read" in str(ResultGrid._populate_exception(trial))


def test_a_trial_whose_data_is_refused_fails_at_once_not_per_retry(ray_session, tmp_path) -> None:
    """A shard whose bytes differ from the manifest fails every retry the same way, each first
    training again from the last checkpoint; Tune retries every error alike. The data set's
    manifest is sound, so the pre-flight passes and the trial meets the shard."""
    from linc_core.utils.typed import build
    from orchestration.data.definition import DatagenConfig
    from orchestration.data.generation import generate_dataset
    from orchestration.experiment.sweep import run_training
    from orchestration.failures import TrialFailed
    from sweeps.compose import load_platform_config

    data = tmp_path / "data"
    spec = {"task": "cvrptw", "size": 6, "count": 8, "shard_size": 8, "seed": 3}
    generate_dataset(build(DatagenConfig, spec | {"uri": str(data), "progress": False}, ""))
    (shard,) = data.glob("shard-*.parquet")
    damaged = bytearray(shard.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # the same size, other bytes
    shard.write_bytes(bytes(damaged))
    overrides = ["data.source=dataset", f"data.uri={data}", "cluster.max_failures=2"]
    config = load_platform_config(
        ["preset=smoke", f"cluster.storage={tmp_path / 'runs'}"] + overrides
    )
    with pytest.raises(TrialFailed) as failed:
        run_training(config, name="bad-shard")
    told = str(failed.value)
    assert told.startswith("bad-shard: the trial failed after 0 retries (") and "\n" not in told
    assert f"{shard.name}: field 'sha256'" in told and "differs from the manifest" in told
    assert "mend what it names, then re-run" in told
    (error,) = (tmp_path / "runs" / "bad-shard").glob("*/error.txt")
    assert "Failure # 1 " in error.read_text() and "Failure # 2" not in error.read_text()
