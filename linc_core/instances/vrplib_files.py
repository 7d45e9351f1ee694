"""VRPLIB-format readers (on vrplib): TSPLIB ``.tsp`` and CVRPLIB ``.vrp`` instances,
CVRPLIB ``.sol`` solutions and TSPLIB ``.tour`` tours.

Only ``EUC_2D`` instances are read. Sections present but shorter than ``DIMENSION`` are
reported before missing ones: a file cut short loses its later sections too.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import vrplib

from linc_core.instances.batch import Instance, InstanceError
from linc_core.instances.reading import (
    DEFAULT_READER_DTYPE,
    NOT_FINITE,
    grid_size,
    parse_with_vrplib,
    parses_as,
    read_text,
    shown,
)
from linc_core.instances.validation import validate_instance

# CVRPLIB Set X and XML100 place nodes on a [0, 1000] grid.
CVRPLIB_GRID_SIZES: tuple[float, ...] = (1000.0,)

# VRPLIB keys as vrplib returns them -> the name the file uses, for error messages.
_VRPLIB_FIELD_NAMES = {
    "dimension": "DIMENSION",
    "capacity": "CAPACITY",
    "edge_weight_type": "EDGE_WEIGHT_TYPE",
    "node_coord": "NODE_COORD_SECTION",
    "demand": "DEMAND_SECTION",
    "depot": "DEPOT_SECTION",
}


def _read_vrplib(
    path: str | os.PathLike[str],
    source: str,
    required: Sequence[str],
    node_sections: dict[str, tuple[int, ...]],
) -> tuple[dict[str, object], dict[str, np.ndarray]]:
    """Parse a VRPLIB/TSPLIB file with vrplib and check what a reader needs.

    Args:
        path: the file.
        source: its name in error messages.
        required: vrplib keys that must be present (besides DIMENSION / EDGE_WEIGHT_TYPE).
        node_sections: per-node sections to return as float64 arrays, with their trailing
            shape (``()`` for one value per node, ``(2,)`` for coordinates).

    Returns:
        The raw vrplib dict and the checked ``[DIMENSION, ...]`` arrays.
    """
    text = read_text(path, source)  # binary files fail with a named error, not a decode trace
    data = parse_with_vrplib(path, source, "vrplib")
    for key in ("dimension", "edge_weight_type"):
        if key not in data:
            raise InstanceError(source, _VRPLIB_FIELD_NAMES[key], None, "missing field")
    dimension = data["dimension"]
    if not isinstance(dimension, int) or dimension < 2:
        raise InstanceError(source, "DIMENSION", dimension, "expected an integer >= 2")
    weight_type = data["edge_weight_type"]
    if weight_type != "EUC_2D":
        raise InstanceError(source, "EDGE_WEIGHT_TYPE", weight_type, "only EUC_2D is supported")
    # Sections that are present but shorter than DIMENSION come first: a file cut short
    # loses its later sections too, and the short one is the better clue.
    arrays = {
        key: _numeric_array(data, key, (dimension, *trailing), source, text)
        for key, trailing in node_sections.items()
        if key in data
    }
    for key in (*required, *node_sections):
        if key not in data:
            raise InstanceError(
                source, _VRPLIB_FIELD_NAMES.get(key, key.upper()), None, "missing section or field"
            )
    return data, arrays


def _numeric_array(
    data: dict[str, object], key: str, shape: tuple[int, ...], source: str, text: str
) -> np.ndarray:
    """The section as a float64 array of the expected shape (a short one means truncation),
    every value finite (``text``, the file's, names a non-finite one as written)."""
    raw = data[key]
    field = _VRPLIB_FIELD_NAMES.get(key, key.upper())
    if not isinstance(raw, np.ndarray) or raw.shape != shape:
        got = raw.shape if isinstance(raw, np.ndarray) else f"{len(raw)} ragged rows"  # type: ignore[arg-type]
        raise InstanceError(
            source,
            field,
            got,
            f"expected shape {shape} from DIMENSION (truncated or malformed section)",
        )
    if np.issubdtype(raw.dtype, np.number):
        values = raw.astype(np.float64)
    else:  # words (numpy made every entry a str), or an integer past int64 (a Python int)
        entries = raw.reshape(-1).tolist()
        bad = next((v for v in entries if isinstance(v, str) and not parses_as(v, float)), None)
        if bad is not None:
            raise InstanceError(source, field, shown(bad), "not a number")
        values = np.array([_as_float(v) for v in entries]).reshape(shape)
    # inf, nan and numbers beyond float64 (1e400 parses as inf) stop here, before any
    # arithmetic on them (grid sizes, scaling) fails with an unnamed overflow.
    non_finite = np.argwhere(~np.isfinite(values))
    if non_finite.size:
        row, *column = non_finite[0].tolist()
        node, token = _section_entry(text, field, row, column[0] if column else 0)
        where = f"{field} node {node or row + 1}" + (f" {'xy'[column[0]]}" if column else "")
        value = shown(token) if token else float(values[row, *column])
        raise InstanceError(source, where, value, NOT_FINITE)
    return values


def _as_float(value: str | float) -> float:
    """``value`` as a float, ``inf`` past the range of a float64 (an integer of 400 digits)."""
    try:
        return float(value)
    except OverflowError:  # only an int overflows: float("9" * 400) is inf
        return math.inf if value > 0 else -math.inf  # type: ignore[operator]


def _section_entry(text: str, section: str, row: int, column: int) -> tuple[str | None, ...]:
    """The node id and the non-finite token, as the file writes them, of entry ``column`` of
    row ``row`` of ``section`` (``1e400``, which vrplib has read as ``inf``); ``None`` where the
    text does not lay them out as vrplib read them."""
    lines = [line.split() for line in text.splitlines()]
    heads = (i for i, words in enumerate(lines) if words and words[0].upper() == section)
    start = next(heads, None)
    rows = [words for words in lines[start + 1 :] if words] if start is not None else []
    if row >= len(rows) or column + 1 >= len(rows[row]):
        return None, None
    token = rows[row][column + 1]
    if not parses_as(token, float) or math.isfinite(float(token)):
        return None, None  # not the entry vrplib read
    return rows[row][0], token


def _header_value(text: str, key: str) -> str | None:
    """The value of header line ``KEY : value`` as the file writes it."""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip().upper() == key:
            return value.strip()
    return None


def _check_type(data: dict[str, object], expected: str, source: str) -> None:
    declared = data.get("type")
    if declared is not None and str(declared).upper() != expected:
        raise InstanceError(source, "TYPE", declared, f"expected {expected}")


def read_tsplib(
    path: str | os.PathLike[str], *, dtype: torch.dtype = DEFAULT_READER_DTYPE
) -> Instance:
    """Read a TSPLIB ``.tsp`` file (EUC_2D only).

    Cities keep their file order (TSPLIB city ``i`` is node ``i - 1``). ``grid_size`` is the
    ceiling of the largest coordinate (TSPLIB has no common grid).

    Returns:
        A B = 1 ``tsp`` instance with ``locs [1, N, 2]``; ``names = (stem,)``.

    Raises:
        InstanceError: malformed / truncated file, missing section, non-EUC_2D weights.
    """
    source = str(path)
    data, arrays = _read_vrplib(path, source, (), {"node_coord": (2,)})
    _check_type(data, "TSP", source)
    coords = arrays["node_coord"]
    instance = Instance.from_arrays(
        "tsp", coords, grid_size=grid_size(coords, ()), names=[Path(path).stem], dtype=dtype
    )
    validate_instance(instance, source)
    return instance


def read_cvrplib(
    path: str | os.PathLike[str], *, dtype: torch.dtype = DEFAULT_READER_DTYPE
) -> Instance:
    """Read a CVRPLIB ``.vrp`` file (EUC_2D; Set X, XML100 and alike).

    The depot must be node 1 of the file (node 0 here); customer ids match the file's
    numbering minus one, which is what ``.sol`` route ids use. Windows are ``[0, inf]`` and
    service times 0. ``grid_size`` is 1000 when every coordinate fits (Set X, XML100), else
    the ceiling of the largest coordinate.

    Returns:
        A B = 1 ``cvrp`` instance with ``locs [1, N, 2]``, ``demand [1, N]``; ``names = (stem,)``.

    Raises:
        InstanceError: malformed / truncated file, missing section or invalid data.
    """
    source = str(path)
    data, arrays = _read_vrplib(
        path, source, ("capacity", "depot"), {"node_coord": (2,), "demand": ()}
    )
    _check_type(data, "CVRP", source)
    coords, demand = arrays["node_coord"], arrays["demand"]
    depot = np.asarray(data["depot"]).reshape(-1)
    if depot.tolist() != [0]:
        raise InstanceError(
            source, "DEPOT_SECTION", (depot + 1).tolist(), "expected a single depot, node 1"
        )
    capacity = data["capacity"]
    if not isinstance(capacity, int | float):
        raise InstanceError(source, "CAPACITY", capacity, "not a number")
    if not math.isfinite(capacity):
        written = _header_value(read_text(path, source), "CAPACITY")  # 1e400, not inf
        raise InstanceError(source, "CAPACITY", written or capacity, NOT_FINITE)
    instance = Instance.from_arrays(
        "cvrp",
        coords,
        demand=demand,
        capacity=float(capacity),
        grid_size=grid_size(coords, CVRPLIB_GRID_SIZES),
        names=[Path(path).stem],
        dtype=dtype,
    )
    validate_instance(instance, source)
    return instance


# ---------------------------------------------------------------------- solutions and tours
def read_solution(path: str | os.PathLike[str]) -> list[list[int]]:
    """Read a CVRPLIB-format solution (``Route #i: c1 c2 ...`` lines).

    Returns:
        The routes as lists of customer ids (1-based, the depot 0 implicit), in file order.

    Raises:
        InstanceError: unreadable lines or no route at all.
    """
    source = str(path)
    text = read_text(path, source)
    for number, line in enumerate(text.splitlines(), 1):  # a bad route's line and token named
        head, colon, customers = line.partition(":")
        if colon and head.strip().lower().startswith("route"):
            for token in customers.split():
                if not token.isdigit():
                    where = f"line {number} ({head.strip()})"
                    raise InstanceError(source, where, token, "not a customer number")
    try:
        # the text read once and checked, not the path again (vrplib would open it itself)
        solution = vrplib.parse.parse_solution(text)
    except (ValueError, IndexError, TypeError) as err:
        raise InstanceError(source, "Route", str(err), "could not parse the solution file") from err
    routes = solution.get("routes") or []
    if not routes:
        raise InstanceError(source, "Route", None, "no 'Route #' line found")
    return [[int(customer) for customer in route] for route in routes]


def read_tsp_tour(path: str | os.PathLike[str]) -> list[int]:
    """Read a TSPLIB ``.tour`` file into 0-based city indices.

    Parsed here rather than by vrplib, whose section reader drops the first column of each row
    and so loses every single-column ``TOUR_SECTION`` entry.

    Returns:
        The tour as city indices ``0..N-1`` (closing edge implicit).

    Raises:
        InstanceError: missing ``TOUR_SECTION``, non-integer entry, or a length that does not
        match ``DIMENSION``.
    """
    source = str(path)
    lines = [line.strip() for line in read_text(path, source).splitlines() if line.strip()]
    dimension: int | None = None
    start = None
    for position, line in enumerate(lines):
        key, _, value = line.partition(":")
        if key.strip().upper() == "DIMENSION" and parses_as(value.strip(), int):
            dimension = int(value.strip())
        if line.upper().startswith("TOUR_SECTION"):
            start = position + 1
            break
    if start is None:
        raise InstanceError(source, "TOUR_SECTION", None, "missing section")
    tour: list[int] = []
    for line in lines[start:]:
        if line.upper() == "EOF":
            break
        for token in line.split():
            if not parses_as(token, int):
                raise InstanceError(source, "TOUR_SECTION", token, "not an integer city id")
            city = int(token)
            if city == -1:
                break
            if city < 1:
                raise InstanceError(source, "TOUR_SECTION", city, "city ids start at 1")
            tour.append(city - 1)
        else:
            continue
        break  # the -1 terminator ends the section
    if dimension is not None and len(tour) != dimension:
        raise InstanceError(
            source, "TOUR_SECTION", len(tour), f"tour length differs from DIMENSION {dimension}"
        )
    return tour
