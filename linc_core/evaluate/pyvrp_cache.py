"""PyVRP costs per instance, solved once per (instance data, convention, budget, seed) and cached.

The cache lives under ``$LINC_CACHE_DIR`` (default ``~/.cache/linc``; the benchmark data folder
is read-only) as one Parquet file per convention, budget and seed, one row per instance name and
data fingerprint (:meth:`linc_core.instances.Instance.fingerprint`), so edited data is solved
again rather than matched to a stale cost.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from linc_core.instances import Instance
from linc_core.utils.atomic import write_atomic

CACHE_DIR_ENV = "LINC_CACHE_DIR"

PYVRP_CACHE_SCHEMA = pa.schema(
    [
        ("instance", pa.string()),
        ("fingerprint", pa.string()),
        ("cost", pa.float64()),
        ("feasible", pa.bool_()),
        ("runtime", pa.float64()),
        ("routes", pa.list_(pa.list_(pa.int64()))),
    ]
)


def cache_dir() -> Path:
    """``$LINC_CACHE_DIR`` or ``~/.cache/linc``."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "linc").expanduser()


def pyvrp_costs(
    instances: Sequence[Instance],
    convention: str,
    seconds: float,
    *,
    seed: int = 0,
    cache: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, float]:
    """PyVRP cost per instance name, solved once and cached as Parquet.

    The cache file is ``<cache>/pyvrp/<convention>-<seconds>s-seed<seed>.parquet``, one row per
    (name, data fingerprint); missing instances are solved and the file is rewritten
    atomically. Infeasible or failed solves are left out of the result.
    """
    from linc_core.evaluate.pyvrp_solver import PyVRPError, solve_with_pyvrp

    folder = (cache or cache_dir()) / "pyvrp"
    path = folder / f"{convention}-{seconds:g}s-seed{seed}.parquet"
    rows: dict[tuple[str, str], dict] = {}
    if path.is_file():
        for row in pq.read_table(path).to_pylist():
            rows[(row["instance"], row["fingerprint"])] = row
    added = False
    out: dict[str, float] = {}
    for instance in instances:
        name = instance.names[0] if instance.names else "instance"
        key = (name, instance.fingerprint())
        if key not in rows:
            if log is not None:
                log(f"PyVRP {name}: {seconds:g} s")
            try:
                solution = solve_with_pyvrp(
                    instance, seconds=seconds, seed=seed, convention=convention
                )
                rows[key] = {
                    "instance": name,
                    "fingerprint": key[1],
                    "cost": solution.cost,
                    "feasible": solution.feasible,
                    "runtime": solution.runtime,
                    "routes": solution.routes,
                }
            except PyVRPError:
                rows[key] = {
                    "instance": name,
                    "fingerprint": key[1],
                    "cost": math.nan,
                    "feasible": False,
                    "runtime": seconds,
                    "routes": [],
                }
            added = True
        if rows[key]["feasible"]:
            out[name] = float(rows[key]["cost"])
    if added:
        table = pa.Table.from_pylist(list(rows.values()), schema=PYVRP_CACHE_SCHEMA)
        write_atomic(path, writer=lambda out: pq.write_table(table, out))
    return out
