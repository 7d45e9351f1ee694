"""The one way linc draws: a matplotlib figure on the Agg canvas, returned as PNG bytes.

No ``pyplot``: it keeps global state and picks a GUI backend; a ``Figure`` on an Agg canvas
needs neither a display nor a backend switch, and is safe in Ray workers. Route plots, the
mechanism diagnostics and the sweep figures all draw through these two functions; a notebook
shows one as a ``Picture`` (the image with its alternative text).
"""

from __future__ import annotations

import base64
import html
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


class Picture:
    """PNG bytes with their alternative text, for notebooks.

    Jupyter and the documentation's notebook pages show it as an ``<img>`` that carries
    ``alt``: screen readers read it, and a plain image output (``IPython.display.Image``,
    ``pyplot.show``) reaches the rendered page without it.

    Attributes:
        png: the image, PNG bytes (``png_bytes``, ``plot_routes``). alt: what it shows.
    """

    def __init__(self, png: bytes, alt: str):
        if not png.startswith(b"\x89PNG"):
            raise ValueError("Picture: png is not PNG data")
        if not alt.strip():
            raise ValueError("Picture: alt is empty; say what the image shows")
        self.png = png
        self.alt = alt

    def _repr_html_(self) -> str:
        data = base64.b64encode(self.png).decode("ascii")
        return f'<img alt="{html.escape(self.alt)}" src="data:image/png;base64,{data}">'


__all__ = ["Picture", "new_figure", "png_bytes"]
