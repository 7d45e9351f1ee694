"""Training to a time budget (``train.budget_minutes``): the schedules follow the fraction of the
budget spent, the run ends when it is spent, and a resumed run keeps what it had left.

Time is a fake clock that every step advances by a fixed amount (``StepClock``), so the
fractions are exact and nothing sleeps.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from linc_core.config import TrainConfig
from linc_core.metrics import TRAIN_SECONDS
from linc_core.runs.plan import DataSource, resolve_run
from linc_core.train import BaseCallback, GeneratedData, fit
from linc_core.train.advantage import tau_at
from linc_core.train.budget import UNBOUNDED_EPOCHS, BudgetClock, ends_after
from linc_core.train.checkpoint import load_checkpoint
from tests.conftest import tiny_configs, tiny_policy

STEP_SECONDS = 3.0  # what one training step costs on the fake clock
BUDGET_MINUTES = 1.0  # 60 s: 20 steps


class StepClock:
    """A clock that moves only when told: ``on_step`` (a callback) advances it by one step's
    seconds, between the two readings fit takes around the next step."""

    def __init__(self) -> None:
        self.now = 0.0
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        if self.readings % 2 == 0:  # the reading after a step: that step took STEP_SECONDS
            self.now += STEP_SECONDS
        return self.now


class StepLog(BaseCallback):
    def __init__(self) -> None:
        self.steps: list = []

    def on_step(self, global_step, metrics) -> None:
        self.steps.append(metrics)


def _config(**more) -> TrainConfig:
    settings = {
        "num_rollouts": 4,
        "batch_size": 2,
        "instances_per_epoch": 8,  # 4 steps per epoch
        "epochs": 1000,  # an upper bound the budget ends long before
        "budget_minutes": BUDGET_MINUTES,
        "tau_start": 4.0,
        "tau_end": 0.25,
        "tau_anneal_ratio": 0.5,
        "best_only_start_ratio": 0.25,
        "validation_size": 0,
    }
    _, train = tiny_configs("full_linc", "cvrptw", **(settings | more))
    return train


def _fit(config: TrainConfig, **kwargs):
    log = StepLog()
    data = GeneratedData.for_training("cvrptw", 5, config, seed=1)
    result = fit(tiny_policy(), config, data, callbacks=[log], clock=StepClock(), **kwargs)
    return result, log.steps


def test_the_schedules_reach_their_fractions_at_those_fractions_of_the_budget() -> None:
    config = _config()
    result, steps = _fit(config)
    budget = 60.0 * BUDGET_MINUTES
    assert len(steps) == budget / STEP_SECONDS == 20  # ends after the step that spends it
    assert result.train_seconds == pytest.approx(budget) and not result.stopped_early
    for index, step in enumerate(steps):
        spent = index * STEP_SECONDS / budget  # the fraction spent before the step
        assert step.best_only == (spent >= config.best_only_start_ratio), index
        assert step.tau == pytest.approx(tau_at(spent, 4.0, 0.25, 0.5)), index
    # best-only from step 5 (15 s = 25% of 60 s); tau at its end value from 30 s (step 10) on
    assert [s.best_only for s in steps].index(True) == 5
    assert steps[10].tau == pytest.approx(0.25) and steps[9].tau > 0.25
    # the last epoch is recorded with the steps it did: 20 steps = 5 epochs of 4
    assert [r[TRAIN_SECONDS] for r in result.history] == [12.0, 24.0, 36.0, 48.0, 60.0]


def test_a_budget_scales_the_curve_not_its_shape() -> None:
    """Twice the budget: each fraction is reached at twice the seconds (the same shape)."""
    long_config = _config(budget_minutes=2 * BUDGET_MINUTES)
    _, steps = _fit(long_config)
    assert len(steps) == 40
    assert [s.best_only for s in steps].index(True) == 10
    assert steps[20].tau == pytest.approx(0.25) and steps[19].tau > 0.25


def test_a_resumed_run_keeps_its_budget(tmp_path: Path) -> None:
    config = _config()
    first, first_steps = _fit(config, checkpoint_dir=tmp_path, max_steps=8)
    assert len(first_steps) == 8 and first.train_seconds == pytest.approx(24.0)
    saved = load_checkpoint(tmp_path / "latest.pt")
    assert saved["train_seconds"] == pytest.approx(24.0)
    assert saved["train_config"].budget_minutes == BUDGET_MINUTES
    resumed, steps = _fit(config, resume_from=tmp_path / "latest.pt", checkpoint_dir=tmp_path)
    assert len(steps) == 12  # the 36 s the budget had left, not a new minute
    assert resumed.train_seconds == pytest.approx(60.0)
    assert steps[0].tau == pytest.approx(tau_at(24.0 / 60.0, 4.0, 0.25, 0.5))
    # resumed again once spent: nothing left to train, the history stays whole
    again, more = _fit(config, resume_from=tmp_path / "latest.pt")
    assert more == [] and len(again.history) == len(resumed.history)


def test_a_run_without_a_budget_follows_its_epochs() -> None:
    clock = BudgetClock.start(_config(budget_minutes=None), clock=lambda: 0.0)
    assert clock.progress(3, 7) == pytest.approx(0.5) and not clock.spent_out()
    with clock.step():
        pass
    assert clock.spent == 0.0


def test_the_run_ends_after_its_last_epoch_or_its_budget() -> None:
    config = _config()
    assert not ends_after(config, 3, 59.9) and ends_after(config, 3, 60.0)
    assert ends_after(config, config.epochs - 1, 0.0)
    assert not ends_after(_config(budget_minutes=None), 3, math.inf)


def test_a_budget_without_epochs_is_what_ends_the_run() -> None:
    """Every command resolves a run the same way: a budget alone lifts the protocol's epochs;
    epochs given with it stay an upper bound."""
    data = DataSource("generated", "cvrptw", 10)
    alone = resolve_run("full_linc", data, protocol="generated", train={"budget_minutes": 5.0})
    assert alone.train.epochs == UNBOUNDED_EPOCHS and alone.train.budget_minutes == 5.0
    both = resolve_run("full_linc", data, train={"budget_minutes": 5.0, "epochs": 7})
    assert both.train.epochs == 7
    neither = resolve_run("full_linc", data, protocol="generated")
    assert neither.train.epochs != UNBOUNDED_EPOCHS and neither.train.budget_minutes is None


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="budget_minutes"):
        _config(budget_minutes=0)


def test_a_cpu_budget_counts_the_process_cpu_seconds_not_the_wall() -> None:
    """``budget_clock=cpu``: a step that waits (its core taken by other work, here a sleep)
    spends wall seconds but next to no CPU seconds; a step that computes spends both."""
    import time

    wall = BudgetClock.start(_config())
    cpu = BudgetClock.start(_config(budget_clock="cpu"))
    with wall.step(), cpu.step():
        time.sleep(0.3)
    assert wall.spent >= 0.3 and cpu.spent < 0.05
    with cpu.step():
        began = time.process_time()
        while time.process_time() - began < 0.2:
            sum(range(1000))
    assert cpu.spent >= 0.2


def test_a_cpu_budget_is_for_cpu_runs() -> None:
    with pytest.raises(ValueError, match=r"budget_clock: expected wall for a CUDA run"):
        _config(budget_clock="cpu", device="cuda")
    assert _config(budget_clock="cpu").budget_clock == "cpu"
