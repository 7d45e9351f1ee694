"""A trial killed by Ray's memory monitor is a failed trial, not the end of the sweep.

When the memory monitor kills the process of a Tune trial, the trial's pending task fails with
``ray.exceptions.OutOfMemoryError``, which is neither a ``RayActorError`` nor a ``RayTaskError``.
Ray 2.60's actor manager (``ray.air.execution._internal.actor_manager``, which Tune runs every
trial through) only knows those two and raises ``RuntimeError: Caught unexpected exception``
from the driver's event loop: the whole sweep ends (seen on the cpu-repro ablation; reproduced
by the fault matrix's memory-monitor row). :func:`handle_memory_kills` makes the manager treat
it as what it is, the death of the trial's process (a :class:`KilledForMemory`, the
``RayActorError`` Tune's handlers expect, carrying the monitor's message): Tune records the trial
as failed with that reason and retries it per ``cluster.max_failures``, from its checkpoint.

The change is confined to that one method of the pinned Ray, applied once per driver, and
delegates every other exception to Ray's own code.
"""

from __future__ import annotations

from typing import Any

from ray.air.execution._internal.actor_manager import RayActorManager
from ray.exceptions import OutOfMemoryError, RayActorError

_MARK = "_linc_handles_memory_kills"


class KilledForMemory(RayActorError):
    """A trial's process killed by Ray's memory monitor (its message is the monitor's)."""


def handle_memory_kills() -> None:
    """Route ``OutOfMemoryError`` of a trial's task to Tune's trial-failure path (idempotent)."""
    original = RayActorManager._actor_task_failed
    if getattr(original, _MARK, False):
        return

    def _actor_task_failed(self: Any, tracked_actor_task: Any, exception: Exception) -> None:
        if isinstance(exception, OutOfMemoryError):
            actor_id = tracked_actor_task._tracked_actor.actor_id
            message = f"the memory monitor killed the trial's process: {exception}"
            exception = KilledForMemory(actor_id=actor_id, error_msg=message)
        original(self, tracked_actor_task, exception)  # Ray's own RayActorError path

    setattr(_actor_task_failed, _MARK, True)
    RayActorManager._actor_task_failed = _actor_task_failed


__all__ = ["KilledForMemory", "handle_memory_kills"]
