"""A decode's deadline: an instant of ``time.monotonic()`` after which decoding stops.

It is checked before every decision of every rollout (a clock read, next to a model step), so
a decode that runs past it stops within one decision step and raises
:class:`DeadlineExceeded`; nothing it computed is returned. ``None`` means no deadline.
"""

from __future__ import annotations

import time

from linc_core.problems.rollout import Chooser


class DeadlineExceeded(TimeoutError):
    """A decode ran past its deadline and stopped (``seconds_over``: how late it noticed)."""

    def __init__(self, seconds_over: float) -> None:
        self.seconds_over = seconds_over
        super().__init__(f"decoding stopped at its deadline ({seconds_over:.2f} s over)")

    def __reduce__(self) -> tuple:
        return type(self), (self.seconds_over,)  # pickled whole (a worker's error to a driver)


def check_deadline(deadline: float | None) -> None:
    """Raise :class:`DeadlineExceeded` when ``time.monotonic()`` is past ``deadline``."""
    if deadline is not None and (late := time.monotonic() - deadline) > 0:
        raise DeadlineExceeded(late)


def with_deadline(choose: Chooser, deadline: float | None) -> Chooser:
    """``choose`` that first checks ``deadline`` (``choose`` itself when there is none)."""
    if deadline is None:
        return choose

    def choose_in_time(state, step):  # noqa: ANN001, ANN202 - a Chooser
        check_deadline(deadline)
        return choose(state, step)

    return choose_in_time


__all__ = ["DeadlineExceeded", "check_deadline", "with_deadline"]
