"""Training to a time budget: the schedules follow the fraction of the budget spent.

Without a budget (``TrainConfig.budget_minutes`` None) a run's progress through its schedules
(the tau anneal, the best-only start) is its position in ``epochs x
batches_per_epoch`` steps. With one, progress is ``spent / budget``: the training seconds spent
so far over the budget's seconds, so a 20-minute run and a 2,000-epoch run follow the same curve
shape, and ``epochs`` is only an upper bound (a budget without epochs of its own trains up to
``UNBOUNDED_EPOCHS``). The run ends after the step during which the budget ran out. Score
morphing (``morph_epochs``) stays counted in epochs: it is a warm start, not a schedule.

The clock (``TrainConfig.budget_clock``: the wall clock, or the process's CPU seconds where
runs share cores) counts training steps only (fetching the batch, the rollouts, the update):
validation decoding and checkpoint writes are left out, so two models given the same budget get
the same training compute whatever their validation costs. The seconds spent travel in every
checkpoint (``train_seconds``): a resumed run, or a trial retried by Tune, keeps the budget it
had left.
Progress then follows measured time, so two runs of one seed under a budget are not
bit-identical (without a budget they are, resumed or not); its last epoch is always validated.

    clock = BudgetClock.start(config, spent=payload.get("train_seconds", 0.0))
    with clock.step():
        ...                                   # one training step
    clock.progress(global_step, total_steps)  # what the schedules read
    clock.spent_out()                         # the budget is used up

Data-parallel: each rank measures its own steps; ``agree`` (the ranks' maximum) keeps every
rank on the same progress, so the ranks compute the same tau and mask and stop together.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from linc_core.config import TrainConfig
from linc_core.train.advantage import training_progress
from linc_core.train.distributed import World, all_reduce_

Clock = Callable[[], float]

# TrainConfig.budget_clock -> the clock its seconds are read from. ``cpu``: the process's CPU
# seconds (all its threads), so a run on cores shared with other work gets the same compute.
BUDGET_CLOCKS: dict[str, Clock] = {"wall": time.perf_counter, "cpu": time.process_time}

# The epochs of a run given a budget and no epochs of its own (``resolve_run``): the budget ends
# it, long before.
UNBOUNDED_EPOCHS = 1_000_000


@dataclass
class BudgetClock:
    """The training seconds of one run and its budget (None: the epochs define progress).

    Attributes:
        budget_seconds: ``60 * budget_minutes``, or None.
        spent: training seconds spent so far, those of earlier attempts included.
        clock: what time is read from (``BUDGET_CLOCKS[config.budget_clock]``; tests inject
            their own).
    """

    budget_seconds: float | None
    spent: float = 0.0
    clock: Clock = field(default=time.perf_counter, repr=False)

    @classmethod
    def start(
        cls, config: TrainConfig, spent: float = 0.0, clock: Clock | None = None
    ) -> BudgetClock:
        budget = None if config.budget_minutes is None else 60.0 * config.budget_minutes
        return cls(budget, float(spent), clock or BUDGET_CLOCKS[config.budget_clock])

    @contextmanager
    def step(self) -> Iterator[None]:
        """Count the seconds of the block (one training step) as spent."""
        began = self.clock()
        try:
            yield
        finally:
            self.spent += self.clock() - began

    def progress(self, global_step: int, total_steps: int) -> float:
        """The schedules' progress in [0, 1] before step ``global_step`` (0-based)."""
        if self.budget_seconds is None:
            return training_progress(global_step, total_steps)
        return min(1.0, self.spent / self.budget_seconds)

    def spent_out(self) -> bool:
        """Whether the budget is used up (never without a budget)."""
        return self.budget_seconds is not None and self.spent >= self.budget_seconds

    def agree(self, world: World, device: torch.device) -> None:
        """Take the ranks' maximum of the seconds spent (a no-op in one process)."""
        if self.budget_seconds is not None and world.distributed:
            spent = torch.tensor([self.spent], dtype=torch.float64, device=device)
            self.spent = float(all_reduce_(spent, world, "max"))


def ends_after(config: TrainConfig, epoch: int, train_seconds: float | None) -> bool:
    """Whether a run stops after epoch ``epoch`` (0-based) that ended with ``train_seconds``
    spent: its last epoch, or its budget used up (what a trial's last report waits for)."""
    if epoch + 1 >= config.epochs:
        return True
    budget = config.budget_minutes
    return budget is not None and train_seconds is not None and train_seconds >= 60.0 * budget


__all__ = ["BUDGET_CLOCKS", "UNBOUNDED_EPOCHS", "BudgetClock", "Clock", "ends_after"]
