"""The Solomon-format reader (Solomon 100, Gehring-Homberger 200+): one file or a folder.

A line-by-line preflight runs before vrplib's parser so that a malformed or truncated file
fails naming the missing part or the bad value (vrplib would turn a bad token into -1).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from linc_core.instances.batch import Instance, InstanceError
from linc_core.instances.reading import (
    DEFAULT_READER_DTYPE,
    MAX_READER_NODES,
    grid_size,
    parse_with_vrplib,
    parses_as,
    read_text,
    shown,
    shown_line,
)
from linc_core.instances.validation import validate_instance

# Side of the square a Solomon-format file lives in: the smallest of these that holds every
# coordinate (Solomon 100 -> 100; Gehring-Homberger 200 -> 140, 400 -> 200, 600 -> 300,
# 800 -> 400, 1000 -> 500), else the ceiling of the largest coordinate.
SOLOMON_GRID_SIZES: tuple[float, ...] = (100.0, 140.0, 200.0, 300.0, 400.0, 500.0)

_SOLOMON_COLUMNS = (
    "CUST NO.",
    "XCOORD.",
    "YCOORD.",
    "DEMAND",
    "READY TIME",
    "DUE DATE",
    "SERVICE TIME",
)
_SOLOMON_HEADER_WORDS = (
    "CUST",
    "NO.",
    "XCOORD.",
    "YCOORD.",
    "DEMAND",
    "READY",
    "DUE",
    "DATE",
    "SERVICE",
    "TIME",
)


def _preflight_solomon(text: str, source: str) -> None:
    """Check the Solomon layout line by line so errors name the missing part or bad value.

    vrplib's Solomon parser expects fixed line positions (name, VEHICLE, NUMBER CAPACITY,
    values, CUSTOMER, column header, rows) and reads rows with ``np.genfromtxt(dtype=int)``,
    which silently turns a non-integer token into -1; this check runs first so such files
    fail loudly instead.
    """
    lines = [s for line in text.splitlines() if (s := line.strip()) and not s.startswith("#")]
    if not lines:
        raise InstanceError(source, "file", "", "empty file")
    expectations = (
        (1, ("VEHICLE",), "VEHICLE section"),
        (2, ("NUMBER", "CAPACITY"), "VEHICLE NUMBER/CAPACITY header"),
        (4, ("CUSTOMER",), "CUSTOMER section"),
        (5, _SOLOMON_HEADER_WORDS, "CUSTOMER column header"),
    )
    for position, words, what in expectations:
        line = lines[position] if position < len(lines) else None
        if line is None or not all(word in line for word in words):
            raise InstanceError(
                source,
                what,
                None if line is None else shown_line(line),
                f"missing (expected on line {position + 1} of the non-blank lines)",
            )
    vehicle_tokens = lines[3].split()
    if len(vehicle_tokens) != 2 or not all(parses_as(t, int) for t in vehicle_tokens):
        raise InstanceError(
            source, "VEHICLE NUMBER/CAPACITY", shown_line(lines[3]), "expected two integers"
        )
    rows = lines[6:]
    if len(rows) < 2:
        raise InstanceError(
            source,
            "CUSTOMER section",
            len(rows),
            "needs a depot row and at least one customer row (truncated file?)",
        )
    if len(rows) > MAX_READER_NODES:  # before a row is split (vrplib's parse is linear too)
        raise InstanceError(
            source,
            "CUSTOMER section",
            f"{len(rows)} rows",
            f"more than the {MAX_READER_NODES} nodes a reader takes",
        )
    for row_number, row in enumerate(rows):
        tokens = row.split()
        if len(tokens) != len(_SOLOMON_COLUMNS):
            raise InstanceError(
                source,
                f"CUSTOMER row {row_number}",
                shown_line(row),
                f"expected {len(_SOLOMON_COLUMNS)} values, got {len(tokens)} "
                "(truncated or malformed line)",
            )
        for column, token in zip(_SOLOMON_COLUMNS, tokens, strict=True):
            if not parses_as(token, int):
                raise InstanceError(
                    source, f"CUSTOMER row {row_number} {column}", shown(token), "not an integer"
                )
        if int(tokens[0]) != row_number:
            raise InstanceError(
                source,
                f"CUSTOMER row {row_number} CUST NO.",
                shown(tokens[0]),
                f"expected customer number {row_number}",
            )


def read_solomon(
    path: str | os.PathLike[str], *, dtype: torch.dtype = DEFAULT_READER_DTYPE
) -> Instance:
    """Read a Solomon-format VRPTW text file (Solomon 100, Gehring-Homberger 200+).

    Node 0 is the depot. ``time_windows`` are the file's ``[ready, due]`` with the depot's set
    to ``[0, depot due]``; ``service_time`` comes from the file (depot 0); travel time equals
    distance (``travel_time_scale = 1``). ``grid_size`` is the smallest of
    ``SOLOMON_GRID_SIZES`` that holds every coordinate (100 for Solomon, 140 for
    Homberger-200), else the ceiling of the largest coordinate.

    Args:
        path: the ``.txt`` file.
        dtype: floating dtype of the tensors (float64 keeps file values exact).

    Returns:
        A B = 1 ``cvrptw`` instance with ``locs [1, N, 2]``, ``demand [1, N]``,
        ``time_windows [1, N, 2]``, ``service_time [1, N]``; ``names = (stem,)``.

    Raises:
        InstanceError: malformed / truncated file, missing section or invalid data.
    """
    source = str(path)
    text = read_text(path, source)
    _preflight_solomon(text, source)
    data = parse_with_vrplib(path, source, "solomon")
    coords = np.asarray(data["node_coord"], dtype=np.float64)
    windows = np.asarray(data["time_window"], dtype=np.float64).copy()
    windows[0, 0] = 0.0  # the route horizon starts at 0 whatever the depot row says
    service = np.asarray(data["service_time"], dtype=np.float64).copy()
    service[0] = 0.0  # no service at the depot, as every consumer assumes
    instance = Instance.from_arrays(
        "cvrptw",
        coords,
        demand=np.asarray(data["demand"], dtype=np.float64),
        capacity=float(data["capacity"]),
        time_windows=windows,
        service_time=service,
        travel_time_scale=1.0,
        grid_size=grid_size(coords, SOLOMON_GRID_SIZES),
        names=[Path(path).stem],
        dtype=dtype,
    )
    validate_instance(instance, source)
    return instance


def read_solomon_folder(
    folder: str | os.PathLike[str],
    *,
    suffixes: Sequence[str] = (".txt",),
    dtype: torch.dtype = DEFAULT_READER_DTYPE,
) -> tuple[list[Instance], list[tuple[Path, Exception]]]:
    """Read every Solomon-format file of a folder, keeping going past bad files.

    Files of different sizes cannot share one batch, so each file gives its own B = 1
    instance; stack same-size ones with :meth:`Instance.concat` if needed.

    Args:
        folder: directory to scan (not recursive).
        suffixes: file suffixes to read, case-insensitive (Homberger files are often ``.TXT``).
        dtype: floating dtype of the tensors.

    Returns:
        ``(instances, errors)``: instances sorted by file name, and one ``(path, error)`` per
        file that failed (``InstanceError`` for bad content, ``OSError`` for unreadable files).

    Raises:
        NotADirectoryError: ``folder`` is not a directory.
    """
    root = Path(folder)
    if not root.is_dir():
        raise NotADirectoryError(f"Solomon folder {root} does not exist or is not a directory.")
    wanted = {s.lower() for s in suffixes}
    instances: list[Instance] = []
    errors: list[tuple[Path, Exception]] = []
    for path in sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in wanted):
        try:
            instances.append(read_solomon(path, dtype=dtype))
        except (InstanceError, OSError) as err:
            errors.append((path, err))
    return instances, errors
