"""The `Instance` batch type shared by environments, generators, readers and the verifier.

One type covers the three problems so that every consumer reads the same fields:

- ``tsp``: ``locs`` are the cities; there is no depot. Demand is zero, capacity infinite,
  windows ``[0, inf]``.
- ``cvrp``: node 0 is the depot (demand 0). Windows ``[0, inf]``, no service time.
- ``cvrptw``: node 0 is the depot with window ``[0, horizon]``; customers carry
  ``[ready, due]`` windows and service times. Travel time = distance x ``travel_time_scale``.

All quantities are in the instance's own units (raw coordinates, raw demands); normalisation
for the model happens in the model's feature code, never here.

Benchmark readers (``read_solomon``, ``read_solomon_folder``, ``read_tsplib``,
``read_cvrplib``, ``read_solution``, ``read_tsp_tour``) and the data checks they all run
(``validate_instance``) follow the class.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import vrplib
from torch import Tensor

ProblemKind = Literal["tsp", "cvrp", "cvrptw"]
PROBLEM_KINDS: tuple[str, ...] = ("tsp", "cvrp", "cvrptw")


class InstanceError(ValueError):
    """Bad instance data. The message names the source (file), the field and the value."""

    def __init__(self, source: str, field: str, value: object, problem: str) -> None:
        self.source = source
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{source}: field '{field}' = {value!r}: {problem}")


TENSOR_FIELDS = (
    "locs",
    "demand",
    "capacity",
    "time_windows",
    "service_time",
    "travel_time_scale",
    "grid_size",
)


@dataclass(frozen=True)
class Instance:
    """A batch of B routing instances with N nodes each (depot included for CVRP/CVRPTW).

    Attributes:
        problem: ``"tsp"``, ``"cvrp"`` or ``"cvrptw"``.
        locs: ``[B, N, 2]`` coordinates; node 0 is the depot for CVRP/CVRPTW.
        demand: ``[B, N]`` raw demands (depot 0; all 0 for TSP).
        capacity: ``[B]`` vehicle capacity (``inf`` for TSP).
        time_windows: ``[B, N, 2]`` ``[ready, due]`` in travel-time units (``[0, inf]`` when
            unconstrained; the depot's due is the route horizon).
        service_time: ``[B, N]`` service duration per node (depot 0).
        travel_time_scale: ``[B]`` alpha: travel time = Euclidean distance x alpha.
        grid_size: ``[B]`` side of the square the coordinates live in (reflection bound of the
            dihedral augmentations and the model's ``grid`` input scale).
        names: optional instance names, one per batch row.
    """

    problem: ProblemKind
    locs: Tensor
    demand: Tensor
    capacity: Tensor
    time_windows: Tensor
    service_time: Tensor
    travel_time_scale: Tensor
    grid_size: Tensor
    names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.problem not in PROBLEM_KINDS:
            raise ValueError(f"Expected problem in {PROBLEM_KINDS}, got {self.problem!r}.")
        b, n = self.locs.shape[:2]
        expected = {
            "locs": (b, n, 2),
            "demand": (b, n),
            "capacity": (b,),
            "time_windows": (b, n, 2),
            "service_time": (b, n),
            "travel_time_scale": (b,),
            "grid_size": (b,),
        }
        for name, shape in expected.items():
            got = tuple(getattr(self, name).shape)
            if got != shape:
                raise ValueError(f"Instance.{name}: expected shape {shape}, got {got}.")
        if self.names is not None and len(self.names) != b:
            raise ValueError(f"Instance.names: expected {b} names, got {len(self.names)}.")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(
        cls,
        problem: ProblemKind,
        locs: object,
        *,
        demand: object | None = None,
        capacity: object | None = None,
        time_windows: object | None = None,
        service_time: object | None = None,
        travel_time_scale: object | None = None,
        grid_size: object | None = None,
        names: Sequence[str] | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> Instance:
        """Build a batch from array-likes, filling the fields a problem does not use.

        ``locs`` is ``[B, N, 2]`` (or ``[N, 2]`` for a single instance, which adds B = 1);
        the other fields follow the same leading dims. Scalars per instance (capacity,
        travel_time_scale, grid_size) may be given as Python numbers. ``service_time`` may be
        ``[B]`` (one duration per instance, applied to customers; the depot gets 0).
        """
        locs_t = torch.as_tensor(locs, dtype=dtype)
        single = locs_t.dim() == 2
        if single:
            locs_t = locs_t.unsqueeze(0)
        b, n = locs_t.shape[:2]

        def per_node(value: object | None, fill: float) -> Tensor:
            if value is None:
                return torch.full((b, n), fill, dtype=dtype)
            t = torch.as_tensor(value, dtype=dtype)
            return t.unsqueeze(0) if single else t

        def per_instance(value: object | None, fill: float) -> Tensor:
            if value is None:
                return torch.full((b,), fill, dtype=dtype)
            t = torch.as_tensor(value, dtype=dtype)
            return t.expand(b).clone() if t.dim() == 0 else t.reshape(b)

        if time_windows is None:
            tw = torch.zeros(b, n, 2, dtype=dtype)
            tw[..., 1] = math.inf
        else:
            tw = torch.as_tensor(time_windows, dtype=dtype)
            tw = tw.unsqueeze(0) if single else tw
        service = per_node(None, 0.0)
        if service_time is not None:
            st = torch.as_tensor(service_time, dtype=dtype)
            if st.dim() == 0 or (st.dim() == 1 and not single and st.shape[0] == b):
                service = st.reshape(-1, 1).expand(b, n).clone()
                if problem != "tsp":
                    service[:, 0] = 0.0
            else:
                service = st.unsqueeze(0) if single else st
        if grid_size is None:
            grid = locs_t.flatten(1).amax(dim=1).clamp_min(1.0)
        else:
            grid = per_instance(grid_size, 1.0)
        return cls(
            problem=problem,
            locs=locs_t,
            demand=per_node(demand, 0.0),
            capacity=per_instance(capacity, math.inf),
            time_windows=tw,
            service_time=service,
            travel_time_scale=per_instance(travel_time_scale, 1.0),
            grid_size=grid,
            names=tuple(names) if names is not None else None,
        )

    # ------------------------------------------------------------------ properties
    @property
    def batch_size(self) -> int:
        return int(self.locs.shape[0])

    @property
    def num_nodes(self) -> int:
        """N: nodes per instance, depot included for CVRP/CVRPTW."""
        return int(self.locs.shape[1])

    @property
    def has_depot(self) -> bool:
        return self.problem != "tsp"

    @property
    def num_customers(self) -> int:
        """Customers (CVRP/CVRPTW) or cities (TSP) per instance."""
        return self.num_nodes - 1 if self.has_depot else self.num_nodes

    @property
    def device(self) -> torch.device:
        return self.locs.device

    def __len__(self) -> int:
        return self.batch_size

    # ------------------------------------------------------------------ transforms
    def to(
        self, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> Instance:
        """Move every tensor to ``device`` and/or cast the floating fields to ``dtype``."""
        return replace(
            self, **{f: getattr(self, f).to(device=device, dtype=dtype) for f in TENSOR_FIELDS}
        )

    def select(self, index: slice | Sequence[int] | Tensor) -> Instance:
        """A sub-batch (rows ``index``), keeping names aligned."""
        idx = index if isinstance(index, slice) else torch.as_tensor(index, dtype=torch.long)
        names = None
        if self.names is not None:
            rows = range(self.batch_size)[idx] if isinstance(idx, slice) else idx.tolist()
            names = tuple(self.names[i] for i in rows)
        return replace(self, names=names, **{f: getattr(self, f)[idx] for f in TENSOR_FIELDS})

    def repeat(self, times: int) -> Instance:
        """Tile the batch ``times`` times along B (block-major: row = copy * B + b)."""
        reps = {
            f: getattr(self, f).repeat(times, *([1] * (getattr(self, f).dim() - 1)))
            for f in TENSOR_FIELDS
        }
        names = self.names * times if self.names is not None else None
        return replace(self, names=names, **reps)

    @staticmethod
    def concat(batches: Sequence[Instance]) -> Instance:
        """Concatenate batches of the same problem and node count along B."""
        if not batches:
            raise ValueError("Instance.concat needs at least one batch.")
        kinds = {b.problem for b in batches}
        sizes = {b.num_nodes for b in batches}
        if len(kinds) != 1 or len(sizes) != 1:
            raise ValueError(
                f"Instance.concat: batches differ in problem {sorted(kinds)} "
                f"or size {sorted(sizes)}."
            )
        names = None
        if all(b.names is not None for b in batches):
            names = tuple(n for b in batches for n in b.names)  # type: ignore[union-attr]
        return Instance(
            problem=batches[0].problem,
            names=names,
            **{f: torch.cat([getattr(b, f) for b in batches]) for f in TENSOR_FIELDS},
        )


# ====================================================================== benchmark file readers
#
# Readers turn one benchmark file into a B = 1 `Instance` (name = file stem), on top of
# `vrplib` 2.2.0 for the parsing. Every reader funnels its result through
# `validate_instance`, so the same data checks apply whatever the source format.
#
# Readers default to float64: TSPLIB files such as ch130 or rd100 carry coordinates that
# float32 cannot hold, and a rounded coordinate can flip a `nint` edge length. Cast with
# `instance.to(dtype=torch.float32)` before feeding a float32 model.

DEFAULT_READER_DTYPE: torch.dtype = torch.float64

# Side of the square a Solomon-format file lives in: the smallest of these that holds every
# coordinate (Solomon 100 -> 100; Gehring-Homberger 200 -> 140, 400 -> 200, 600 -> 300,
# 800 -> 400, 1000 -> 500), else the ceiling of the largest coordinate.
SOLOMON_GRID_SIZES: tuple[float, ...] = (100.0, 140.0, 200.0, 300.0, 400.0, 500.0)
# CVRPLIB Set X and XML100 place nodes on a [0, 1000] grid.
CVRPLIB_GRID_SIZES: tuple[float, ...] = (1000.0,)

# Relative slack used by the "servable alone" check, for float noise only (same rule as the
# verifier documents; kept separate so the two modules share no code).
_FEASIBILITY_TOLERANCE = 1e-9

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

# VRPLIB keys as vrplib returns them -> the name the file uses, for error messages.
_VRPLIB_FIELD_NAMES = {
    "dimension": "DIMENSION",
    "capacity": "CAPACITY",
    "edge_weight_type": "EDGE_WEIGHT_TYPE",
    "node_coord": "NODE_COORD_SECTION",
    "demand": "DEMAND_SECTION",
    "depot": "DEPOT_SECTION",
}


def _plain(value: float) -> float | int:
    """Show integral floats as ints in error messages (``-10`` rather than ``-10.0``)."""
    as_float = float(value)
    return int(as_float) if as_float.is_integer() else as_float


def _grid_size(coords: np.ndarray, ladder: Sequence[float]) -> float:
    """Smallest ladder value holding every coordinate, else ceil(max coordinate) (>= 1)."""
    top = float(np.max(coords)) if coords.size else 1.0
    for side in ladder:
        if top <= side:
            return float(side)
    return float(max(1, math.ceil(top)))


def _exceeds(value: float, limit: float) -> bool:
    return value > limit + _FEASIBILITY_TOLERANCE * max(1.0, abs(limit))


def validate_instance(instance: Instance, source: str) -> None:
    """Check an instance's data, raising on the first problem found.

    Checks, per batch row: finite coordinates; for CVRP/CVRPTW a finite positive capacity, no
    negative demand, a zero depot demand and no demand above capacity; for CVRPTW also finite
    non-negative service times, ``ready <= due`` for every node, and that each customer ``k``
    can be served on a route of its own using exact float distances:
    ``arrival = d(0, k) x alpha <= due_k`` and
    ``max(arrival, ready_k) + service_k + d(k, 0) x alpha <= due_0``.
    Exact distances are never shorter than the DIMACS truncated ones, so a customer that
    passes here is servable under every convention the verifier knows.

    Args:
        instance: the batch to check (any B).
        source: where it came from (usually the file path), named in every error.

    Raises:
        InstanceError: naming ``source``, the field (e.g. ``demand[7]``) and its value.
    """
    for row in range(instance.batch_size):
        label = source
        if instance.batch_size > 1:
            name = instance.names[row] if instance.names is not None else str(row)
            label = f"{source} (row {row}: {name})"
        _validate_row(instance, row, label)


def _first_index(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _validate_row(instance: Instance, row: int, source: str) -> None:
    def arr(name: str) -> np.ndarray:
        return getattr(instance, name)[row].detach().cpu().to(torch.float64).numpy()

    locs = arr("locs")
    bad = _first_index(~np.isfinite(locs).all(axis=1))
    if bad is not None:
        raise InstanceError(source, f"locs[{bad}]", locs[bad].tolist(), "non-finite coordinate")
    if instance.problem == "tsp":
        return

    capacity = float(arr("capacity"))
    if not (np.isfinite(capacity) and capacity > 0):
        raise InstanceError(source, "capacity", _plain(capacity), "must be finite and positive")
    demand = arr("demand")
    bad = _first_index(~np.isfinite(demand) | (demand < 0))
    if bad is not None:
        raise InstanceError(
            source, f"demand[{bad}]", _plain(demand[bad]), "negative or non-finite demand"
        )
    if demand[0] != 0:
        raise InstanceError(source, "demand[0]", _plain(demand[0]), "the depot's demand must be 0")
    bad = _first_index(demand > capacity)
    if bad is not None:
        raise InstanceError(
            source,
            f"demand[{bad}]",
            _plain(demand[bad]),
            f"exceeds the vehicle capacity {_plain(capacity)}: no route can serve this customer",
        )
    if instance.problem == "cvrptw":
        _validate_time_windows(instance, row, source, locs)


def _validate_time_windows(instance: Instance, row: int, source: str, locs: np.ndarray) -> None:
    windows = instance.time_windows[row].detach().cpu().to(torch.float64).numpy()
    service = instance.service_time[row].detach().cpu().to(torch.float64).numpy()
    alpha = float(instance.travel_time_scale[row])
    if not (np.isfinite(alpha) and alpha > 0):
        raise InstanceError(source, "travel_time_scale", alpha, "must be finite and positive")
    bad = _first_index(~np.isfinite(service) | (service < 0))
    if bad is not None:
        raise InstanceError(
            source,
            f"service_time[{bad}]",
            _plain(service[bad]),
            "negative or non-finite service time",
        )
    ready, due = windows[:, 0], windows[:, 1]
    bad = _first_index(np.isnan(windows).any(axis=1) | (ready > due))
    if bad is not None:
        raise InstanceError(
            source,
            f"time_windows[{bad}]",
            [_plain(ready[bad]), _plain(due[bad])],
            "ready time is after the due time",
        )
    # Exact Euclidean depot<->customer travel times, computed here on purpose (no shared
    # distance code with the environments or the verifier).
    to_customer = np.hypot(*(locs[1:] - locs[0]).T) * alpha
    horizon = float(due[0])
    for customer in range(1, locs.shape[0]):
        travel = float(to_customer[customer - 1])
        arrival = travel
        window = [_plain(ready[customer]), _plain(due[customer])]
        if _exceeds(arrival, float(due[customer])):
            raise InstanceError(
                source,
                f"time_windows[{customer}]",
                window,
                f"customer {customer} cannot be served even alone: earliest arrival "
                f"{arrival:.4f} from the depot is after its due time",
            )
        back = max(arrival, float(ready[customer])) + float(service[customer]) + travel
        if _exceeds(back, horizon):
            raise InstanceError(
                source,
                f"time_windows[{customer}]",
                window,
                f"customer {customer} cannot be served even alone: earliest return to the "
                f"depot {back:.4f} is after the depot due time {_plain(horizon)}",
            )


# ---------------------------------------------------------------------- Solomon / Homberger
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
                line,
                f"missing (expected on line {position + 1} of the non-blank lines)",
            )
    vehicle_tokens = lines[3].split()
    if len(vehicle_tokens) != 2 or not all(_is_int_token(t) for t in vehicle_tokens):
        raise InstanceError(source, "VEHICLE NUMBER/CAPACITY", lines[3], "expected two integers")
    rows = lines[6:]
    if len(rows) < 2:
        raise InstanceError(
            source,
            "CUSTOMER section",
            len(rows),
            "needs a depot row and at least one customer row (truncated file?)",
        )
    for row_number, row in enumerate(rows):
        tokens = row.split()
        if len(tokens) != len(_SOLOMON_COLUMNS):
            raise InstanceError(
                source,
                f"CUSTOMER row {row_number}",
                row,
                f"expected {len(_SOLOMON_COLUMNS)} values, got {len(tokens)} "
                "(truncated or malformed line)",
            )
        for column, token in zip(_SOLOMON_COLUMNS, tokens, strict=True):
            if not _is_int_token(token):
                raise InstanceError(
                    source, f"CUSTOMER row {row_number} {column}", token, "not an integer"
                )
        if int(tokens[0]) != row_number:
            raise InstanceError(
                source,
                f"CUSTOMER row {row_number} CUST NO.",
                tokens[0],
                f"expected customer number {row_number}",
            )


def _is_int_token(token: str) -> bool:
    try:
        int(token)
    except ValueError:
        return False
    return True


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
    text = _read_text(path, source)
    _preflight_solomon(text, source)
    try:
        data = vrplib.read_instance(path, instance_format="solomon", compute_edge_weights=False)
    except (ValueError, RuntimeError, IndexError, KeyError, TypeError) as err:
        raise InstanceError(
            source, "format", str(err), "vrplib could not parse this Solomon file"
        ) from err
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
        grid_size=_grid_size(coords, SOLOMON_GRID_SIZES),
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


# ---------------------------------------------------------------------- VRPLIB / TSPLIB
def _read_text(path: str | os.PathLike[str], source: str) -> str:
    try:
        return Path(path).read_text()
    except UnicodeDecodeError as err:
        raise InstanceError(source, "file", "binary content", "not a text file") from err


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
    _read_text(path, source)  # binary files fail with a named error, not a decode trace
    try:
        data = vrplib.read_instance(path, instance_format="vrplib", compute_edge_weights=False)
    except (ValueError, RuntimeError, IndexError, KeyError, TypeError) as err:
        raise InstanceError(
            source, "format", str(err), "vrplib could not parse this VRPLIB file"
        ) from err
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
        key: _numeric_array(data, key, (dimension, *trailing), source)
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
    data: dict[str, object], key: str, shape: tuple[int, ...], source: str
) -> np.ndarray:
    """The section as a float64 array of the expected shape (a short one means truncation)."""
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
    if not np.issubdtype(raw.dtype, np.number):
        bad = next(v for v in raw.reshape(-1) if isinstance(v, str) and not _is_number(v))
        raise InstanceError(source, field, bad, "not a number")
    return raw.astype(np.float64)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


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
        "tsp", coords, grid_size=_grid_size(coords, ()), names=[Path(path).stem], dtype=dtype
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
    instance = Instance.from_arrays(
        "cvrp",
        coords,
        demand=demand,
        capacity=float(capacity),
        grid_size=_grid_size(coords, CVRPLIB_GRID_SIZES),
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
    _read_text(path, source)
    try:
        solution = vrplib.read_solution(path)
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
    lines = [line.strip() for line in _read_text(path, source).splitlines() if line.strip()]
    dimension: int | None = None
    start = None
    for position, line in enumerate(lines):
        key, _, value = line.partition(":")
        if key.strip().upper() == "DIMENSION" and _is_int_token(value.strip()):
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
            if not _is_int_token(token):
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
