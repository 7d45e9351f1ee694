"""What every benchmark file reader shares: the default dtype, text reading, the vrplib parse,
grid sizes and token checks.

Readers turn one benchmark file into a B = 1 `Instance` (name = file stem), on top of
`vrplib` 2.2.0 for the parsing. Every reader funnels its result through
:func:`~linc_core.instances.validation.validate_instance`, so the same data checks apply
whatever the source format.

Readers default to float64: TSPLIB files such as ch130 or rd100 carry coordinates that
float32 cannot hold, and a rounded coordinate can flip a `nint` edge length. Cast with
`instance.to(dtype=torch.float32)` before feeding a float32 model.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import vrplib

from linc_core.instances.batch import InstanceError

DEFAULT_READER_DTYPE: torch.dtype = torch.float64
# What readers say of inf, nan, or a number too large for a float64 (1e400 reads as inf).
NOT_FINITE = "not a finite number (inf, nan, or beyond the range of a float64)"


def read_text(path: str | os.PathLike[str], source: str) -> str:
    """The file's text; a binary file fails with a named error, not a decode trace."""
    try:
        return Path(path).read_text()
    except UnicodeDecodeError as err:
        raise InstanceError(source, "file", "binary content", "not a text file") from err


def parse_with_vrplib(path: str | os.PathLike[str], source: str, file_format: str) -> dict:
    """vrplib's parse of the file (``file_format`` ``"solomon"`` or ``"vrplib"``), edge weights
    left out; a file vrplib cannot parse fails naming the source."""
    try:
        return vrplib.read_instance(path, instance_format=file_format, compute_edge_weights=False)
    except (ValueError, RuntimeError, IndexError, KeyError, TypeError) as err:
        label = "Solomon" if file_format == "solomon" else "VRPLIB"
        raise InstanceError(
            source, "format", str(err), f"vrplib could not parse this {label} file"
        ) from err


def grid_size(coords: np.ndarray, ladder: Sequence[float]) -> float:
    """Smallest ladder value holding every coordinate, else ceil(max coordinate) (>= 1).

    Readers refuse non-finite coordinates first, naming the file and node (``NOT_FINITE``);
    a caller that did not gets a ``ValueError`` here, not an ``OverflowError`` from ``ceil``.
    """
    top = float(np.max(coords)) if coords.size else 1.0
    if not math.isfinite(top):
        raise ValueError(f"grid_size: the coordinates hold {top} ({NOT_FINITE})")
    for side in ladder:
        if top <= side:
            return float(side)
    return float(max(1, math.ceil(top)))


def parses_as(token: str, kind: Callable[[str], object]) -> bool:
    """Whether ``kind(token)`` succeeds (``kind`` is ``int`` or ``float``)."""
    try:
        kind(token)
    except ValueError:
        return False
    return True
