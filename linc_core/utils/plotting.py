"""The one way linc draws: a matplotlib figure on the Agg canvas, returned as PNG bytes.

No ``pyplot``: it keeps global state and picks a GUI backend; a ``Figure`` on an Agg canvas
needs neither a display nor a backend switch, and is safe in Ray workers. Route plots, the
mechanism diagnostics and the sweep figures all draw through these two functions.
"""

from __future__ import annotations

import io
from typing import Any


def new_figure(width: float = 9.0, height: float = 4.0, dpi: int = 100) -> Any:
    """A ``matplotlib.figure.Figure`` of ``width`` x ``height`` inches on an Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(figure)
    return figure


def png_bytes(figure: Any, *, tight: bool = True) -> bytes:
    """The figure as PNG bytes (``tight``: lay the axes out to fit their labels first)."""
    buffer = io.BytesIO()
    if tight:
        figure.tight_layout()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


__all__ = ["new_figure", "png_bytes"]
