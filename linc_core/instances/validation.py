"""Data checks every instance source runs: finite data, loads within capacity, windows that
let each customer be served on a route of its own.

Errors are :class:`~linc_core.instances.batch.InstanceError`: one line naming the source (file),
the field (e.g. ``demand[7]``) and its value.

Every check is computed for many batch rows at once (numpy over ``[rows, nodes]``), so a
Parquet shard of thousands of instances is checked at about the cost of reading it. A problem's
``check_data`` hook is still called once per row (a problem defined elsewhere writes it for one
row); while :func:`validate_instance` runs, the built-in :func:`check_loads` and
:func:`check_time_windows` answer a row from one batched pass over the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from linc_core.instances.batch import Instance, InstanceError
from linc_core.instances.reading import DEFAULT_READER_DTYPE
from linc_core.problems.spec import ProblemName, problem_spec

# Largest magnitude of a coordinate, capacity, time or service time: the models decode in
# float32 and normalise by the largest coordinate and the horizon; a finite float64 such as
# 1e300 becomes inf there, and the features NaN. Benchmark data stays below 1e7.
MAX_MAGNITUDE = 1e9
# Smallest capacity or travel-time scale: float32's smallest normal number. The environments
# divide by the capacity in float32, where 1e-300 is 0 and every demand ratio NaN.
MIN_POSITIVE = float(np.finfo(np.float32).tiny)

# Relative slack used by the "servable alone" check, for float noise only (same rule as the
# verifier documents; kept separate so the two modules share no code).
_FEASIBILITY_TOLERANCE = 1e-9


def _plain(value: float) -> float | int:
    """Show integral floats as ints in error messages (``-10`` rather than ``-10.0``)."""
    as_float = float(value)
    return int(as_float) if as_float.is_integer() and abs(as_float) < 1e15 else as_float


def _exceeds(value: np.ndarray, limit: np.ndarray) -> np.ndarray:
    return value > limit + _FEASIBILITY_TOLERANCE * np.maximum(1.0, np.abs(limit))


def instance_from_arrays(
    problem: ProblemName, source: str, locs: object, **fields: object
) -> Instance:
    """An instance given as arrays from outside (a served request's row), read as a file is:
    ``Instance.from_arrays(problem, locs, source=source, dtype=float64, **fields)`` (numbers of
    the expected shapes) and :func:`validate_instance` (the data checks every reader runs).

    Raises:
        InstanceError: naming ``source``, the field and its value or shape.
    """
    instance = Instance.from_arrays(
        problem, locs, source=source, dtype=DEFAULT_READER_DTYPE, **fields
    )  # type: ignore[arg-type]
    validate_instance(instance, source)
    return instance


def validate_instance(instance: Instance, source: str) -> None:
    """Check an instance's data, raising on the first problem found.

    Checks: at least one customer (city); finite coordinates and grid size within
    ``MAX_MAGNITUDE`` (every row at once); then, row by row, the problem's own (its spec's
    ``check_data``): for CVRP :func:`check_loads`, for CVRPTW also :func:`check_time_windows`.

    Args:
        instance: the batch to check (any B).
        source: where it came from (usually the file path), named in every error; for B > 1
            the error also names the row (``source (row 3: name)``).

    Raises:
        InstanceError: naming ``source``, the field (e.g. ``demand[7]``) and its value.
    """
    if instance.num_customers < 1:
        raise InstanceError(source, "locs", f"{instance.num_nodes} nodes", "no customer")

    def label(row: int) -> str:
        if instance.batch_size == 1:
            return source
        name = instance.names[row] if instance.names is not None else str(row)
        # A name comes from the data (a Parquet column): quoted when it could break the line.
        return f"{source} (row {row}: {name if name.isprintable() else repr(name)})"

    _raise_first(_coordinate_checks(instance, slice(None)), label)
    check_data = problem_spec(instance.problem).check_data
    if check_data is None:
        return
    token = _BATCH_PASS.set(_BatchPass(instance))
    try:
        for row in range(instance.batch_size):
            check_data(instance, row, label(row))
    finally:
        _BATCH_PASS.reset(token)


def check_loads(instance: Instance, row: int, source: str) -> None:
    """A finite positive capacity, no negative demand, a zero depot demand and no demand above
    capacity (the data checks of every problem with loads)."""
    _check_row(instance, row, source, _load_checks)


def check_time_windows(instance: Instance, row: int, source: str) -> None:
    """Finite non-negative service times, ``ready <= due`` for every node, and that each
    customer ``k`` can be served on a route of its own using exact float distances:
    ``arrival = d(0, k) x alpha <= due_k`` and
    ``max(arrival, ready_k) + service_k + d(k, 0) x alpha <= due_0``.

    Exact distances are never shorter than the DIMACS truncated ones, so a customer that
    passes here is servable under every convention the verifier knows.
    """
    _check_row(instance, row, source, _window_checks)


def row_values(instance: Instance, row: int, name: str) -> np.ndarray:
    """Field ``name`` of batch row ``row`` as float64 numpy (what the checks read)."""
    return _values(instance, row, name)


# ---------------------------------------------------------------------------- batched checks
class _Check(NamedTuple):
    """One data check over several rows: where it fails and how a failure is named.

    ``bad`` is ``[R]`` for a value per instance (the field is ``name``) or ``[R, N]`` for a
    value per node (the field is ``name[node]``); ``value`` and ``reason`` take the failing
    ``(row, node)`` (node 0 for a value per instance).
    """

    name: str
    bad: np.ndarray
    value: Callable[[int, int], object]
    reason: str | Callable[[int, int], str]


RowSelection = int | slice
ChecksOf = Callable[[Instance, slice], list[_Check]]


def _values(instance: Instance, rows: RowSelection, name: str) -> np.ndarray:
    return getattr(instance, name)[rows].detach().cpu().to(torch.float64).numpy()


def _first_failing_row(checks: list[_Check]) -> int | None:
    if not checks:
        return None
    failing = np.zeros(checks[0].bad.shape[0], dtype=bool)
    for check in checks:
        failing |= check.bad.reshape(failing.size, -1).any(axis=1)
    hits = np.flatnonzero(failing)
    return int(hits[0]) if hits.size else None


def _raise_first(checks: list[_Check], label: Callable[[int], str]) -> None:
    """Raise for the first failing check of the first row failing any (the per-row order)."""
    row = _first_failing_row(checks)
    if row is None:
        return
    for check in checks:
        hits = np.flatnonzero(np.atleast_1d(check.bad[row]))
        if not hits.size:
            continue
        node = int(hits[0])
        name = check.name if check.bad.ndim == 1 else f"{check.name}[{node}]"
        reason = check.reason if isinstance(check.reason, str) else check.reason(row, node)
        raise InstanceError(label(row), name, check.value(row, node), reason)


@dataclass
class _BatchPass:
    """The first failing row of each built-in check over one batch, computed once."""

    instance: Instance
    first_failing: dict[ChecksOf, int | None] = field(default_factory=dict)

    def passes(self, instance: Instance, row: int, checks_of: ChecksOf) -> bool:
        if instance is not self.instance:
            return False
        if checks_of not in self.first_failing:
            self.first_failing[checks_of] = _first_failing_row(checks_of(instance, slice(None)))
        first = self.first_failing[checks_of]
        return first is None or row < first


_BATCH_PASS: ContextVar[_BatchPass | None] = ContextVar("linc_batch_pass", default=None)


def _check_row(instance: Instance, row: int, source: str, checks_of: ChecksOf) -> None:
    batch_pass = _BATCH_PASS.get()
    if batch_pass is not None and batch_pass.passes(instance, row, checks_of):
        return
    _raise_first(checks_of(instance, slice(row, row + 1)), lambda _: source)


def _coordinate_checks(instance: Instance, rows: slice) -> list[_Check]:
    locs = _values(instance, rows, "locs")
    grid = _values(instance, rows, "grid_size")
    with np.errstate(invalid="ignore"):
        return [
            _Check(
                "locs",
                ~np.isfinite(locs).all(axis=2),
                lambda r, n: locs[r, n].tolist(),
                "non-finite coordinate",
            ),
            _Check(
                "locs",
                (np.abs(locs) > MAX_MAGNITUDE).any(axis=2),
                lambda r, n: locs[r, n].tolist(),
                f"a coordinate beyond +-{MAX_MAGNITUDE:g}",
            ),
            # After the coordinates: a reader derives the grid from them.
            _Check(
                "grid_size",
                ~(np.isfinite(grid) & (grid >= 0) & (grid <= MAX_MAGNITUDE)),
                lambda r, _: float(grid[r]),
                f"must be finite, non-negative and at most {MAX_MAGNITUDE:g}",
            ),
        ]


def _positive_scalar(field: str, values: np.ndarray, shown: Callable) -> _Check:
    """The check of a per-row ``[B]`` scalar that must be finite, at least
    :data:`MIN_POSITIVE` and at most :data:`MAX_MAGNITUDE` (capacity, travel-time scale)."""
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(values) & (values >= MIN_POSITIVE) & (values <= MAX_MAGNITUDE))
    return _Check(
        field,
        bad,
        lambda r, _: shown(values[r]),
        f"must be positive (at least {MIN_POSITIVE:.4g}, float32's smallest normal number: the "
        f"models compute in float32) and at most {MAX_MAGNITUDE:g}",
    )


def _load_checks(instance: Instance, rows: slice) -> list[_Check]:
    capacity = _values(instance, rows, "capacity")
    demand = _values(instance, rows, "demand")
    with np.errstate(invalid="ignore"):
        depot = np.zeros_like(demand, dtype=bool)
        depot[:, 0] = demand[:, 0] != 0
        return [
            _positive_scalar("capacity", capacity, _plain),
            _Check(
                "demand",
                ~np.isfinite(demand) | (demand < 0),
                lambda r, n: _plain(demand[r, n]),
                "negative or non-finite demand",
            ),
            _Check(
                "demand", depot, lambda r, n: _plain(demand[r, n]), "the depot's demand must be 0"
            ),
            _Check(
                "demand",
                demand > capacity[:, None],
                lambda r, n: _plain(demand[r, n]),
                lambda r, _: (
                    f"exceeds the vehicle capacity {_plain(capacity[r])}: no route "
                    "can serve this customer"
                ),
            ),
        ]


def _window_checks(instance: Instance, rows: slice) -> list[_Check]:
    locs = _values(instance, rows, "locs")
    windows = _values(instance, rows, "time_windows")
    service = _values(instance, rows, "service_time")
    alpha = _values(instance, rows, "travel_time_scale")
    ready, due = windows[..., 0], windows[..., 1]

    def window(r: int, n: int) -> list[float | int]:
        return [_plain(ready[r, n]), _plain(due[r, n])]

    with np.errstate(invalid="ignore", over="ignore"):
        # Exact Euclidean depot<->node travel times, computed here on purpose (no shared
        # distance code with the environments or the verifier); the depot's own is 0.
        offsets = locs - locs[:, :1]
        travel = np.hypot(offsets[..., 0], offsets[..., 1]) * alpha[:, None]
        horizon = due[:, :1]
        back = np.maximum(travel, ready) + service + travel
        late = _exceeds(travel, due)
        late[:, 0] = False
        unservable = late | _exceeds(back, horizon)
        unservable[:, 0] = False

        def why_unservable(r: int, n: int) -> str:
            if late[r, n]:
                return (
                    f"customer {n} cannot be served even alone: earliest arrival "
                    f"{travel[r, n]:.4f} from the depot is after its due time"
                )
            return (
                f"customer {n} cannot be served even alone: earliest return to the depot "
                f"{back[r, n]:.4f} is after the depot due time {_plain(horizon[r, 0])}"
            )

        return [
            _positive_scalar("travel_time_scale", alpha, float),
            _Check(
                "service_time",
                ~np.isfinite(service) | (service < 0) | (service > MAX_MAGNITUDE),
                lambda r, n: _plain(service[r, n]),
                f"negative, non-finite or beyond {MAX_MAGNITUDE:g} service time",
            ),
            _Check(
                "time_windows",
                ~(np.abs(windows) <= MAX_MAGNITUDE).all(axis=2),
                window,
                f"a time that is not finite or beyond +-{MAX_MAGNITUDE:g}",
            ),
            _Check("time_windows", ready > due, window, "ready time is after the due time"),
            _Check("time_windows", unservable, window, why_unservable),
        ]
