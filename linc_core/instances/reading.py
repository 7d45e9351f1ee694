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

import io
import math
import os
from collections.abc import Callable, Sequence

import numpy as np
import torch
from vrplib.parse import parse_solomon, parse_vrplib

from linc_core.instances.batch import InstanceError
from linc_core.utils.files import FileRefusedError, read_regular_file

DEFAULT_READER_DTYPE: torch.dtype = torch.float64
# Largest benchmark file (instance, solution, tour, bks.csv) a reader takes: the largest shipped
# are under 1 MiB (X-n1001: 20 KB, xml100's bks.csv: 0.3 MB), so no valid file comes near it.
MAX_BENCHMARK_FILE_BYTES = 64 * 1024 * 1024
# What readers say of inf, nan, or a number too large for a float64 (1e400 reads as inf).
NOT_FINITE = "not a finite number (inf, nan, or beyond the range of a float64)"


def read_text(path: str | os.PathLike[str], source: str) -> str:
    """The file's text. A path to anything but a regular file (a named pipe, ``/dev/zero``), a
    file over :data:`MAX_BENCHMARK_FILE_BYTES` or a binary file fails with a named error, never
    a hang, a ``MemoryError`` or a decode trace."""
    try:
        data = read_regular_file(path, MAX_BENCHMARK_FILE_BYTES, source=source)
    except FileRefusedError as err:
        raise InstanceError(source, "file", err.value, err.problem) from None
    try:
        # newline=None's universal newlines, as Path.read_text (and vrplib's open) read it
        return io.TextIOWrapper(io.BytesIO(data)).read()
    except UnicodeDecodeError as err:
        raise InstanceError(source, "file", "binary content", "not a text file") from err


def parse_with_vrplib(path: str | os.PathLike[str], source: str, file_format: str) -> dict:
    """vrplib's parse of the file (``file_format`` ``"solomon"`` or ``"vrplib"``), edge weights
    left out; a file vrplib cannot parse fails naming the source.

    The text is read here (:func:`read_text`: a regular file, capped) and handed to vrplib's
    parser: vrplib's own ``read_instance`` would open the path again, whatever it then is."""
    text = read_text(path, source)
    parse = parse_solomon if file_format == "solomon" else parse_vrplib
    try:
        return parse(text, compute_edge_weights=False)
    # ArithmeticError: numpy's OverflowError on a number past int64 (a coordinate of 1e21)
    except (ValueError, RuntimeError, IndexError, KeyError, TypeError, ArithmeticError) as err:
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
