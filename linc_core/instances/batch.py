"""The `Instance` batch type shared by environments, generators, readers and the verifier.

One type covers every problem so that every consumer reads the same fields (a problem's spec,
:mod:`linc_core.problems.spec`, says which it uses and may add its own, ``extras``):

- ``tsp``: ``locs`` are the cities, no depot; demand 0, capacity infinite, windows ``[0, inf]``.
- ``cvrp``: node 0 is the depot (demand 0). Windows ``[0, inf]``, no service time.
- ``cvrptw``: node 0 is the depot with window ``[0, horizon]``; customers carry
  ``[ready, due]`` windows and service times. Travel time = distance x ``travel_time_scale``.

All quantities are in the instance's own units (raw coordinates, raw demands): the model's
feature code normalises them. Whole-instance operations (``truncate_customers``) live here too,
the data checks in :mod:`linc_core.instances.validation`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from linc_core.problems.spec import ProblemName, problem_spec


class InstanceError(ValueError):
    """Bad instance data. The message names the source (file), the field and the value."""

    def __init__(self, source: str, field: str, value: object, problem: str) -> None:
        self.source = source
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{source}: field '{field}' = {value!r}: {problem}")

    def __reduce__(self) -> tuple:  # pickled with its fields, as Ray sends a trial's error
        return type(self), (self.source, self.field, self.value, self.problem)


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
        problem: a registered problem (``"tsp"``, ``"cvrp"``, ``"cvrptw"``, ...).
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
        extras: the tensors a problem adds (its spec's ``extra_fields``: ``[B]`` per instance,
            ``[B, N]`` or ``[B, N, w]`` per node); empty for the built-in problems.
    """

    problem: ProblemName
    locs: Tensor
    demand: Tensor
    capacity: Tensor
    time_windows: Tensor
    service_time: Tensor
    travel_time_scale: Tensor
    grid_size: Tensor
    names: tuple[str, ...] | None = None
    extras: Mapping[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        widths = problem_spec(self.problem).extra_fields
        if set(self.extras) != set(widths):
            raise ValueError(
                f"Instance.extras: a {self.problem} instance holds {sorted(widths)}, "
                f"got {sorted(self.extras)}."
            )
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
        expected |= {name: extra_field_shape(w, b, n) for name, w in widths.items()}
        for name, shape in expected.items():
            got = tuple(self._tensor(name).shape)
            if got != shape:
                raise ValueError(f"Instance.{name}: expected shape {shape}, got {got}.")
        if self.names is not None and len(self.names) != b:
            raise ValueError(f"Instance.names: expected {b} names, got {len(self.names)}.")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(
        cls,
        problem: ProblemName,
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
        source: str | None = None,
        extras: Mapping[str, object] | None = None,
    ) -> Instance:
        """Build a batch from array-likes, filling the fields a problem does not use.

        ``locs`` is ``[B, N, 2]`` (or ``[N, 2]`` for a single instance, which adds B = 1);
        the other fields follow the same leading dims. Scalars per instance (capacity,
        travel_time_scale, grid_size) may be given as Python numbers. ``service_time`` may be
        ``[B]`` (one duration per instance, applied to customers; the depot gets 0). ``extras``
        are the problem's own fields (its spec's ``extra_fields``), same leading dims.

        With ``source`` (data from outside, e.g. a served request's row), every given field
        must be numbers of its expected shape, else :class:`InstanceError` names ``source``,
        the field and what it got; the data checks are
        :func:`linc_core.instances.validation.instance_from_arrays`'s.
        """
        if source is not None:
            given = {
                "demand": demand,
                "capacity": capacity,
                "time_windows": time_windows,
                "service_time": service_time,
                "travel_time_scale": travel_time_scale,
                "grid_size": grid_size,
            }
            locs, checked = _checked_arrays(source, locs, given)
            demand, capacity = checked["demand"], checked["capacity"]
            time_windows, service_time = checked["time_windows"], checked["service_time"]
            travel_time_scale, grid_size = checked["travel_time_scale"], checked["grid_size"]
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
                if problem_spec(problem).has_depot:
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
            extras={key: per_node(value, 0.0) for key, value in (extras or {}).items()},
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
        """Node 0 is a depot (the problem's spec says)."""
        return problem_spec(self.problem).has_depot

    @property
    def num_customers(self) -> int:
        """Customers (CVRP/CVRPTW) or cities (TSP) per instance."""
        return self.num_nodes - 1 if self.has_depot else self.num_nodes

    @property
    def device(self) -> torch.device:
        return self.locs.device

    def __len__(self) -> int:
        return self.batch_size

    def fingerprint(self, row: int = 0) -> str:
        """sha256 (16 hex digits) of one row's data: equal data, equal fingerprint.

        Hashes the problem name, then row ``row`` of ``locs``, ``demand``, ``capacity``,
        ``time_windows``, ``service_time`` and ``travel_time_scale``, then of the ``extras`` in
        name order, each as float64 bytes (names and ``grid_size`` are left out). The PyVRP
        cost cache keys on it and ``linc-data download`` matches files against a record of it
        (``linc_core.instances.download``), so the definition must not change.
        """
        digest = hashlib.sha256(self.problem.encode())
        for name in ("locs", "demand", "capacity", "time_windows", "service_time"):
            digest.update(getattr(self, name)[row].detach().cpu().double().numpy().tobytes())
        digest.update(self.travel_time_scale[row].detach().cpu().double().numpy().tobytes())
        for name in sorted(self.extras):
            digest.update(self.extras[name][row].detach().cpu().double().numpy().tobytes())
        return digest.hexdigest()[:16]

    # ------------------------------------------------------------------ transforms
    def _tensor(self, name: str) -> Tensor:
        return self.extras[name] if name in self.extras else getattr(self, name)

    def _map(self, change: Callable[[Tensor], Tensor], **fields: object) -> Instance:
        """This batch with ``change`` applied to every tensor, its own and its extras."""
        tensors = {f: change(getattr(self, f)) for f in TENSOR_FIELDS}
        extras = {k: change(v) for k, v in self.extras.items()}
        return replace(self, extras=extras, **tensors, **fields)  # type: ignore[arg-type]

    def to(
        self, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> Instance:
        """Move every tensor to ``device`` and/or cast the floating fields to ``dtype``. Copies
        from the host to a GPU are queued (``non_blocking``: pageable memory is staged at once),
        not one synchronisation per field; copies back to the host wait, as their readers need."""
        to_gpu = device is not None and torch.device(device).type == "cuda"
        return self._map(
            lambda t: t.to(device=device, dtype=dtype, non_blocking=to_gpu and not t.is_cuda)
        )

    def select(self, index: slice | Sequence[int] | Tensor) -> Instance:
        """A sub-batch (rows ``index``), keeping names aligned."""
        idx = index if isinstance(index, slice) else torch.as_tensor(index, dtype=torch.long)
        names = None
        if self.names is not None:
            rows = range(self.batch_size)[idx] if isinstance(idx, slice) else idx.tolist()
            names = tuple(self.names[i] for i in rows)
        return self._map(lambda t: t[idx], names=names)

    def repeat(self, times: int) -> Instance:
        """Tile the batch ``times`` times along B (block-major: row = copy * B + b)."""
        names = self.names * times if self.names is not None else None
        return self._map(lambda t: t.repeat(times, *([1] * (t.dim() - 1))), names=names)

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
            extras={k: torch.cat([b.extras[k] for b in batches]) for k in batches[0].extras},
            **{f: torch.cat([getattr(b, f) for b in batches]) for f in TENSOR_FIELDS},
        )


def extra_field_shape(width: int, batch: int, num_nodes: int) -> tuple[int, ...]:
    """The shape of an extra field of per-node ``width`` (0: one value per instance)."""
    return (
        (batch,) if width == 0 else (batch, num_nodes) if width == 1 else (batch, num_nodes, width)
    )


_PER_INSTANCE = ("capacity", "travel_time_scale", "grid_size")


def _numbers(value: object, source: str, field: str) -> np.ndarray:
    """``value`` as a float64 array; anything else (text, ragged lists) names the field."""
    try:
        nested = value.tolist() if isinstance(value, np.ndarray) else value
        array = np.array(nested, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as err:
        shown = value if isinstance(value, int | float | str) else type(value).__name__
        raise InstanceError(
            source, field, str(shown)[:40], "not numbers of one regular shape"
        ) from err
    return array


def _checked_arrays(
    source: str, locs: object, given: dict[str, object | None]
) -> tuple[np.ndarray, dict[str, np.ndarray | None]]:
    """``locs`` and the ``given`` fields as float64 arrays whose shapes fit one another
    (see :meth:`Instance.from_arrays`); a shape that does not is an :class:`InstanceError`."""
    locs_a = _numbers(locs, source, "locs")
    if locs_a.ndim not in (2, 3) or locs_a.shape[-1] != 2 or locs_a.shape[-2] < 1:
        raise InstanceError(
            source, "locs", f"shape {list(locs_a.shape)}", "expected [N, 2] coordinates"
        )
    single = locs_a.ndim == 2
    b, n = (1, locs_a.shape[0]) if single else locs_a.shape[:2]
    lead = () if single else (b,)
    allowed = {
        "demand": [(*lead, n)],
        "service_time": [(*lead, n), (), *([] if single else [(b,)])],
        "time_windows": [(*lead, n, 2)],
        **{name: [(), (b,)] for name in _PER_INSTANCE},
    }
    checked: dict[str, np.ndarray | None] = {}
    for name, value in given.items():
        if value is None:
            checked[name] = None
            continue
        array = _numbers(value, source, name)
        if array.shape not in allowed[name]:
            shapes = " or ".join(
                str(list(shape)) if shape else "a number" for shape in allowed[name]
            )
            raise InstanceError(
                source, name, f"shape {list(array.shape)}", f"expected {shapes} for {n} nodes"
            )
        checked[name] = array
    return locs_a, checked


def truncate_customers(instance: Instance, num_customers: int) -> Instance:
    """Keep the depot and the first ``num_customers`` customers of every instance.

    This builds the Solomon-50 ablation set (the 56 Solomon instances cut to 50 customers).
    The depot window, capacity, service times, alpha and grid size stay unchanged. Names stay
    unchanged too (no ``"_50"`` suffix), so results join on the source instance's name. The
    customer count is visible from the tensors. For TSP (no depot) the first
    ``num_customers`` cities are kept.

    Args:
        instance: batch with at least ``num_customers`` customers.
        num_customers: customers to keep, ``1 <= num_customers <= instance.num_customers``.

    Returns:
        A new ``Instance`` with ``num_customers (+1 depot)`` nodes; tensors are copies.
    """
    if not 1 <= num_customers <= instance.num_customers:
        raise ValueError(
            f"truncate_customers: num_customers must be in 1..{instance.num_customers}, "
            f"got {num_customers}."
        )
    keep = num_customers + 1 if instance.has_depot else num_customers
    return Instance(
        problem=instance.problem,
        locs=instance.locs[:, :keep].clone(),
        demand=instance.demand[:, :keep].clone(),
        capacity=instance.capacity.clone(),
        time_windows=instance.time_windows[:, :keep].clone(),
        service_time=instance.service_time[:, :keep].clone(),
        travel_time_scale=instance.travel_time_scale.clone(),
        grid_size=instance.grid_size.clone(),
        names=instance.names,
        # per-node extras ([B, N, ...]) keep their first nodes, per-instance ones ([B]) all
        extras={k: (v[:, :keep] if v.dim() > 1 else v).clone() for k, v in instance.extras.items()},
    )
