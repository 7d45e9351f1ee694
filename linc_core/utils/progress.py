"""Progress of a long loop: a tqdm bar on a terminal, plain lines everywhere else.

A bar redrawn with carriage returns is unreadable in a log file or a CI page (one endless line
of control characters), so when the stream is not a terminal :class:`Progress` writes one plain
line every ``interval`` seconds and, when it wrote any, one at the end:

    solomon50 sampling z=16 x8: 3.6k/7.2k rollouts (50%), 12 s
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Count work done towards ``total`` (None: unknown) and show it.

    Args:
        total: units of work expected, or None.
        desc: what is being done (the line's prefix).
        unit: name of one unit of work (``rollout``, ``inst``).
        enabled: False shows nothing (``--no-progress``).
        stream: where to write (default stderr, like tqdm).
        interval: seconds between plain lines when ``stream`` is not a terminal.
    """

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        interval: float = 10.0,
    ) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.stream = stream or sys.stderr
        self.interval = interval
        self.done = 0
        self._started = self._shown = time.perf_counter()
        self._bar = None
        self._enabled = enabled
        self._lines = 0
        if enabled and _is_terminal(self.stream):
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, desc=desc, unit=unit, unit_scale=True, file=self.stream, smoothing=0.1
            )

    def update(self, count: int = 1) -> None:
        self.done += count
        if self._bar is not None:
            self._bar.update(count)
        elif self._enabled and time.perf_counter() - self._shown >= self.interval:
            self._line()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._enabled and self._lines:
            self._line()  # the end of a loop that showed progress (a short one showed none)
        self._enabled = False

    def line(self) -> str:
        """The plain progress line (what a log file shows)."""
        elapsed = time.perf_counter() - self._started
        done = _scaled(self.done)
        if self.total:
            percent = 100 * self.done / self.total
            share = f"{done}/{_scaled(self.total)} {self.unit}s ({percent:.0f}%)"
        else:
            share = f"{done} {self.unit}s"
        return f"{self.desc}: {share}, {elapsed:.0f} s"

    def _line(self) -> None:
        print(self.line(), file=self.stream, flush=True)
        self._shown = time.perf_counter()
        self._lines += 1

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _scaled(count: int) -> str:
    """``950``, ``3.6k``, ``7.2M``: tqdm's unit scale, for plain lines."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= factor:
            return f"{count / factor:.1f}{suffix}"
    return str(count)


__all__ = ["Progress"]
