"""The console: one line per trial event, a summary, no box drawing or colour codes in a log.

The end-to-end test runs ``linc-ablation preset=smoke`` as a user would, its output going to a
file (not a terminal), with a fault injected so that each trial fails once and is retried.
"""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from linc_core.utils.progress import Progress
from orchestration.config.sections import ConsoleSpec
from orchestration.experiment.console import TrialEvents
from sweeps.compose import load_platform_config


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


ROOT = Path(__file__).resolve().parents[3]
EVENT = re.compile(r"^\[\d+:\d\d\] (baseline|full_linc) seed=1: ")


def test_smoke_ablation_prints_one_line_per_trial_event(tmp_path) -> None:
    env = os.environ | {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    command = [
        sys.executable,
        "-m",
        "sweeps.ablation",
        "preset=smoke",
        f"cluster.storage={tmp_path / 'runs'}",
        "fault.fail_at_epoch=1",
    ]
    done = subprocess.run(
        command, cwd=tmp_path, env=env | {"PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=400,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    lines = output.splitlines()
    assert "\x1b[" not in output  # no colour codes off a terminal
    assert not set("│╭╰─┤├") & set(output)  # no box drawing
    assert "Trial status" not in output and "Trial train_linc" not in output  # Tune's tables
    events = [line for line in lines if EVENT.match(line)]
    for variant in ("baseline", "full_linc"):
        mine = [line.split(": ", 1)[1] for line in events if f"] {variant} " in line]
        assert mine[0].startswith("started (trial ")
        assert mine[1].startswith("epoch 1/2 train_best_cost=")
        assert mine[2].startswith("FAILED (attempt 1, will retry): ")
        assert "InjectedFault: fault.fail_at_epoch=1: failing on purpose" in mine[2]
        assert mine[3] == "restarted from its last checkpoint (attempt 2)"
        # the last epoch is reported with its evaluation: the finished line follows
        assert re.match(r"epoch 2/2 train_best_cost=\d+\.\d\d validation_cost=[\d.]+$", mine[4])
        assert re.match(r"finished: eval_cost=\d+\.\d\d \(0 infeasible\), 2 epochs, \d+ s", mine[5])
        assert len(mine) == 6
    summary = [line for line in lines if line.startswith("ablation-smoke: 2 trials: ")]
    assert summary and "2 finished, 0 failed, 2 retried, in " in summary[0]
    assert "| Full LINC |" in output and "mlflow ui --app-name linc --backend-store-uri" in output
    # the whole output: 12 event lines, the summary, the table, the MLflow pointer and Ray's
    # token notice (was about 300 lines for the same sweep without a fault)
    assert len(lines) <= 24, output


@dataclass
class StandIn:
    """The few attributes of ``ray.tune.experiment.Trial`` the callback reads."""

    trial_id: str
    config: dict
    status: str = "RUNNING"
    num_failures: int = 0
    last_result: dict = field(default_factory=dict)
    error_file: str | None = None

    def get_error(self) -> str | None:
        return None


def _events(capsys, verbosity="events", report_every=0, epochs=20) -> tuple[TrialEvents, list]:
    events = TrialEvents("sweep", ConsoleSpec(verbosity, report_every), epochs)
    events.setup()
    trial = StandIn("t0", {"model": {"variant": "no_local"}, "train": {"seed": 7}})
    events.on_trial_start(0, [trial], trial)
    for epoch in range(1, epochs):
        result = {"epoch": epoch, "train_best_cost": 100.0 - epoch, "validation_cost": 90.0}
        events.on_trial_result(0, [trial], trial, result)
    # the last epoch and the evaluation come in one report
    final = {"epoch": epochs, "train_best_cost": 100.0 - epochs, "validation_cost": 90.0}
    final |= {"eval_cost": 80.5, "eval_infeasible": 0.0, "time_total_s": 12.4, "completed": 1}
    events.on_trial_result(0, [trial], trial, final)
    trial.last_result, trial.status = final, "TERMINATED"
    events.on_trial_complete(0, [trial], trial)
    return events, capsys.readouterr().out.splitlines()


def test_progress_lines_every_tenth_of_the_epochs_and_a_finished_line(capsys) -> None:
    events, lines = _events(capsys)
    texts = [line.split("] ", 1)[1] for line in lines]
    assert texts[0] == "no_local seed=7: started (trial t0)"
    epochs = [t for t in texts if "epoch " in t and "finished" not in t]
    assert [int(t.split("epoch ")[1].split("/")[0]) for t in epochs] == [
        2,
        4,
        6,
        8,
        10,
        12,
        14,
        16,
        18,
        20,
    ]
    assert epochs[0] == "no_local seed=7: epoch 2/20 train_best_cost=98.00 validation_cost=90.00"
    assert epochs[-1] == "no_local seed=7: epoch 20/20 train_best_cost=80.00 validation_cost=90.00"
    assert texts[-1] == "no_local seed=7: finished: eval_cost=80.50 (0 infeasible), 20 epochs, 12 s"
    trial = StandIn("t0", {"model": {"variant": "no_local"}, "train": {"seed": 7}}, "TERMINATED")
    assert events.summary([trial]).startswith("sweep: 1 trials: 1 finished, 0 failed, 0 retried")
    assert events.summary([trial]).endswith("; best eval_cost=80.50 (no_local seed=7)")


def test_report_every_and_quiet(capsys) -> None:
    _, lines = _events(capsys, report_every=5)
    assert sum("epoch " in line and "finished" not in line for line in lines) == 4
    _, quiet = _events(capsys, verbosity="quiet")
    assert quiet == []


def test_a_trial_that_fails_for_good_names_the_reason_and_the_traceback(tmp_path, capsys):
    error = tmp_path / "error.txt"
    error.write_text("Traceback (most recent call last):\n  ...\nValueError: data.uri: gone\n")
    events = TrialEvents("s", ConsoleSpec("quiet"), 2, label_keys=("train.learning_rate",))
    trial = StandIn("t1", {"train": {"learning_rate": 0.000123456}}, "ERROR", 3, {}, str(error))
    events.on_trial_error(0, [trial], trial)
    line = capsys.readouterr().out.strip()
    assert line.endswith(
        f"learning_rate=0.000123: FAILED (after 3 attempts): ValueError: data.uri: gone; "
        f"traceback: {error}"
    )
    assert "0 finished, 1 failed" in events.summary([trial])


def test_console_section_is_validated() -> None:
    assert load_platform_config(["console.verbosity=tune"]).console.verbosity == "tune"
    from linc_core.utils.typed import ConfigError

    with pytest.raises(ConfigError, match="console.verbosity: expected one of"):
        load_platform_config(["console.verbosity=loud"])
    with pytest.raises(ConfigError, match="console.report_every: expected >= 0"):
        load_platform_config(["console.report_every=-1"])


def test_progress_writes_plain_lines_off_a_terminal() -> None:
    stream = io.StringIO()
    with Progress(7200, "solomon50 sampling z=16 x8", "rollout", stream=stream, interval=0) as bar:
        bar.update(3600)
        bar.update(3600)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("solomon50 sampling z=16 x8: 3.6k/7.2k rollouts (50%), ")
    assert lines[-1].startswith("solomon50 sampling z=16 x8: 7.2k/7.2k rollouts (100%), ")
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()
    quiet = io.StringIO()
    with Progress(10, "short", "instance", stream=quiet, interval=60) as bar:
        bar.update(10)
    assert quiet.getvalue() == ""  # a loop shorter than the interval shows nothing


def test_a_trial_the_scheduler_stops_says_so(capsys) -> None:
    events = TrialEvents("hpo", ConsoleSpec(), 4, label_keys=("train.learning_rate",))
    trial = StandIn("t2", {"train": {"learning_rate": 7.5e-05}}, "TERMINATED")
    trial.last_result = {"epoch": 1, "train_best_cost": 5.0, "time_total_s": 1.2}
    events.on_trial_complete(0, [trial], trial)
    trial.last_result = {"epoch": 4, "train_best_cost": 5.0, "time_total_s": 3.0}
    events.on_trial_complete(0, [trial], trial)
    first, second = (line.split("] ", 1)[1] for line in capsys.readouterr().out.splitlines())
    assert first == (
        "learning_rate=7.5e-05: finished: stopped early by the scheduler at epoch 1, 1 epochs, 1 s"
    )
    assert second.endswith("finished: 4 epochs, 3 s")  # all epochs, no evaluation set


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
