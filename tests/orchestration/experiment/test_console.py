"""The console: one line per trial event, a summary, no box drawing or colour codes in a log.

The end-to-end test runs ``linc-ablation preset=smoke`` as a user would, its output going to a
file (not a terminal), with a fault injected so that each trial fails once and is retried.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from linc_core.config import TrainConfig
from linc_core.utils.progress import Progress
from orchestration.config.sections import ConsoleSpec
from orchestration.experiment.console import TrialEvents
from sweeps.compose import load_platform_config
from tests.conftest import sweep_env

EVENT = re.compile(r"^\[\d+:\d\d\] (baseline|full_linc) seed=1: ")


def test_smoke_ablation_prints_one_line_per_trial_event(tmp_path) -> None:
    env = sweep_env()
    command = [
        sys.executable,
        "-m",
        "sweeps.ablation",
        "preset=smoke",
        f"cluster.storage={tmp_path / 'runs'}",
        "fault.fail_at_epoch=1",
    ]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True,
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


def _events(capsys, verbosity="events", report_every=0, epochs=20) -> tuple[TrialEvents, list]:
    events = TrialEvents("sweep", ConsoleSpec(verbosity, report_every), epochs)
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
    events.on_experiment_end([trial])
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
    assert events.summary().startswith("sweep: 1 trials: 1 finished, 0 failed, 0 retried")
    assert events.summary().endswith("; best eval_cost=80.50 (no_local seed=7)")


def test_under_a_time_budget_a_line_per_tenth_of_it_spent(capsys) -> None:
    """A budget ends the trial, not the epochs: 33 epochs of 4 s on a 2-minute budget give a
    line when a new tenth (12 s) is passed, with the seconds spent, and no 'stopped early'."""
    train = TrainConfig(epochs=1_000_000, budget_minutes=2.0)
    events = TrialEvents("sweep", ConsoleSpec(), train.epochs, train=train)
    trial = StandIn("t0", {"model": {"variant": "pomo"}, "train": {"seed": 1}})
    for epoch in range(1, 31):
        result = {"epoch": epoch, "train_seconds": 4.0 * epoch, "validation_cost": 90.0}
        events.on_trial_result(0, [trial], trial, result)
    trial.last_result, trial.status = {"epoch": 30, "time_total_s": 130.0}, "TERMINATED"
    events.on_trial_complete(0, [trial], trial)
    texts = [line.split(": ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    progress = [t for t in texts if t.startswith("epoch ")]
    assert [t.split(" (")[0] for t in progress] == [
        f"epoch {e}" for e in (3, 6, 9, 12, 15, 18, 21, 24, 27, 30)
    ]
    assert progress[0] == "epoch 3 (12 of 120 s) validation_cost=90.00"
    assert texts[-1] == "finished: 30 epochs, 130 s"


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
    events.on_experiment_end([trial])
    line = capsys.readouterr().out.strip()
    assert line.endswith(
        f"learning_rate=0.000123: FAILED (after 3 attempts): ValueError: data.uri: gone; "
        f"traceback: {error}"
    )
    assert "0 finished, 1 failed" in events.summary()


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


def test_the_summary_ranks_by_the_objective_and_prints_a_pareto_front() -> None:
    """A search optimising validation_cost names its best by it (not by eval_cost); one with two
    objectives prints its Pareto front; a trial its scheduler stopped early is not ranked (the
    study prunes it)."""
    keys = ("train.learning_rate",)
    results = {
        "a": {"validation_cost": 10.0, "peak_rss_gb": 3.0, "eval_cost": 99.0, "completed": 1},
        "b": {"validation_cost": 12.0, "peak_rss_gb": 1.0, "eval_cost": 50.0, "completed": 1},
        "c": {"validation_cost": 13.0, "peak_rss_gb": 2.0, "eval_cost": 40.0, "completed": 1},
        "d": {"validation_cost": 1.0, "peak_rss_gb": 0.5},  # stopped early
    }
    rates = {"a": 1e-4, "b": 2e-4, "c": 3e-4, "d": 4e-4}
    trials = [
        StandIn(name, {"train": {"learning_rate": rates[name]}}, "TERMINATED", 0, result)
        for name, result in results.items()
    ]
    single = TrialEvents("s", ConsoleSpec(), 4, keys, (("validation_cost", "min"),))
    single.on_experiment_end(trials)
    assert single.summary().endswith("; best validation_cost=10.00 (learning_rate=0.0001)")
    both = (("validation_cost", "min"), ("peak_rss_gb", "min"))
    pareto = TrialEvents("s", ConsoleSpec(), 4, keys, both)
    pareto.on_experiment_end(trials)
    first, *front = pareto.summary().splitlines()
    assert first.endswith("; Pareto front of validation_cost (min), peak_rss_gb (min), 2 trial(s):")
    assert front == [
        "  learning_rate=0.0001: validation_cost=10 peak_rss_gb=3",
        "  learning_rate=0.0002: validation_cost=12 peak_rss_gb=1",
    ]
