"""A training run held under a resident-memory ceiling (``linc-train`` in a container, a Tune
trial within the memory it reserved: ``orchestration.trial.resources.trial_heap_ceiling``).

Between steps a run's heap grows past what its tensors hold (:func:`linc_core.utils.runtime.\
trim_heap_above`), so a run that fits its container at the start could be killed by the
kernel minutes later. :class:`HeapCeiling` gives the free pages back after any step that ends
above the ceiling; a step then touches fresh pages again (page faults), which a run below the
ceiling never pays.
"""

from __future__ import annotations

from linc_core.train.loop import BaseCallback
from linc_core.train.step import StepMetrics
from linc_core.utils.runtime import trim_heap_above


class HeapCeiling(BaseCallback):
    """After each step, the heap trimmed when the process holds more than ``ceiling_bytes``.

    Attributes:
        trims: how many steps ended above the ceiling (and were trimmed).
    """

    all_ranks = True  # every data-parallel worker's heap grows alike

    def __init__(self, ceiling_bytes: int):
        self.ceiling_bytes = ceiling_bytes
        self.trims = 0

    def on_step(self, global_step: int, metrics: StepMetrics) -> None:
        if trim_heap_above(self.ceiling_bytes):
            self.trims += 1


def heap_ceiling(limit_bytes: int, needed_bytes: int, resident_bytes: int) -> int:
    """The resident memory a run may hold between steps: the limit less the headroom a step
    needs (``needed_bytes`` less ``resident_bytes``: for ``linc-train`` the run's estimate less
    the process's memory before it), at least what the process holds now."""
    return max(limit_bytes - (needed_bytes - resident_bytes), resident_bytes)


__all__ = ["HeapCeiling", "heap_ceiling"]
