"""Data checks every instance source runs: finite data, loads within capacity, windows that
let each customer be served on a route of its own.

Errors are :class:`~linc_core.instances.batch.InstanceError`: one line naming the source (file),
the field (e.g. ``demand[7]``) and its value.
"""

from __future__ import annotations

import numpy as np
import torch

from linc_core.instances.batch import Instance, InstanceError
from linc_core.instances.reading import DEFAULT_READER_DTYPE
from linc_core.problems.spec import ProblemName, problem_spec

# Largest magnitude of a coordinate, capacity, time or service time: the models decode in
# float32 and normalise by the largest coordinate and the horizon; a finite float64 such as
# 1e300 becomes inf there, and the features NaN. Benchmark data stays below 1e7.
MAX_MAGNITUDE = 1e9

# Relative slack used by the "servable alone" check, for float noise only (same rule as the
# verifier documents; kept separate so the two modules share no code).
_FEASIBILITY_TOLERANCE = 1e-9


def _plain(value: float) -> float | int:
    """Show integral floats as ints in error messages (``-10`` rather than ``-10.0``)."""
    as_float = float(value)
    return int(as_float) if as_float.is_integer() and abs(as_float) < 1e15 else as_float


def _exceeds(value: float, limit: float) -> bool:
    return value > limit + _FEASIBILITY_TOLERANCE * max(1.0, abs(limit))


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

    Checks, per batch row: at least one customer (city); finite coordinates within
    ``MAX_MAGNITUDE``; then the problem's own (its spec's ``check_data``): for CVRP
    :func:`check_loads`, for CVRPTW also :func:`check_time_windows`.

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


def row_values(instance: Instance, row: int, name: str) -> np.ndarray:
    """Field ``name`` of batch row ``row`` as float64 numpy (what the checks read)."""
    return getattr(instance, name)[row].detach().cpu().to(torch.float64).numpy()


def _validate_row(instance: Instance, row: int, source: str) -> None:
    locs = row_values(instance, row, "locs")
    if instance.num_customers < 1:
        raise InstanceError(source, "locs", f"{instance.num_nodes} nodes", "no customer")
    bad = _first_index(~np.isfinite(locs).all(axis=1))
    if bad is not None:
        raise InstanceError(source, f"locs[{bad}]", locs[bad].tolist(), "non-finite coordinate")
    bad = _first_index((np.abs(locs) > MAX_MAGNITUDE).any(axis=1))
    if bad is not None:
        raise InstanceError(
            source, f"locs[{bad}]", locs[bad].tolist(), f"a coordinate beyond +-{MAX_MAGNITUDE:g}"
        )
    check_data = problem_spec(instance.problem).check_data
    if check_data is not None:
        check_data(instance, row, source)


def check_loads(instance: Instance, row: int, source: str) -> None:
    """A finite positive capacity, no negative demand, a zero depot demand and no demand above
    capacity (the data checks of every problem with loads)."""
    capacity = float(row_values(instance, row, "capacity"))
    if not (np.isfinite(capacity) and 0 < capacity <= MAX_MAGNITUDE):
        raise InstanceError(
            source, "capacity", _plain(capacity), f"must be positive and at most {MAX_MAGNITUDE:g}"
        )
    demand = row_values(instance, row, "demand")
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


def check_time_windows(instance: Instance, row: int, source: str) -> None:
    """Finite non-negative service times, ``ready <= due`` for every node, and that each
    customer ``k`` can be served on a route of its own using exact float distances:
    ``arrival = d(0, k) x alpha <= due_k`` and
    ``max(arrival, ready_k) + service_k + d(k, 0) x alpha <= due_0``.

    Exact distances are never shorter than the DIMACS truncated ones, so a customer that
    passes here is servable under every convention the verifier knows.
    """
    locs = row_values(instance, row, "locs")
    windows = row_values(instance, row, "time_windows")
    service = row_values(instance, row, "service_time")
    alpha = float(instance.travel_time_scale[row])
    if not (np.isfinite(alpha) and 0 < alpha <= MAX_MAGNITUDE):
        raise InstanceError(
            source, "travel_time_scale", alpha, f"must be positive and at most {MAX_MAGNITUDE:g}"
        )
    bad = _first_index(~np.isfinite(service) | (service < 0) | (service > MAX_MAGNITUDE))
    if bad is not None:
        raise InstanceError(
            source,
            f"service_time[{bad}]",
            _plain(service[bad]),
            f"negative, non-finite or beyond {MAX_MAGNITUDE:g} service time",
        )
    ready, due = windows[:, 0], windows[:, 1]
    bad = _first_index(~(np.abs(windows) <= MAX_MAGNITUDE).all(axis=1))
    if bad is not None:
        raise InstanceError(
            source,
            f"time_windows[{bad}]",
            [_plain(ready[bad]), _plain(due[bad])],
            f"a time that is not finite or beyond +-{MAX_MAGNITUDE:g}",
        )
    bad = _first_index(ready > due)
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
