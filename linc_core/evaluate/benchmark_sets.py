"""Benchmark sets ready to evaluate: named sets, synthetic sets and folders of Solomon files.

``load_benchmark(name)`` takes

- ``solomon100`` (56, DIMACS convention, BKS: distance-only), ``solomon50`` (the same files cut
  to their first 50 customers: the ablation set, built by :func:`solomon50`; no BKS),
  ``tsplib`` (29, nint), ``cvrplib_x`` and ``xml100`` (nint; ``limit`` takes the first files
  by name);
- ``synthetic-PROBLEM-SIZE`` (e.g. ``synthetic-cvrptw-100``): ``count`` instances from the
  training generator, seeded by ``data_seed`` (exact convention, no BKS);
- any other value is a folder of Solomon-format files (Homberger-200 has that format); a
  ``bks.csv`` in it with an ``instance`` column and a cost column is used when present. A file
  that cannot be read becomes an error entry naming the file; the rest are loaded.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from linc_core.benchmarks import data_dir, get_benchmark, list_instances, load_bks, read_bks_csv
from linc_core.instances import Instance, InstanceError, read_solomon_folder, truncate_customers
from linc_core.verify import convention_for

SYNTHETIC = re.compile(r"^synthetic-(tsp|cvrp|cvrptw)-(\d+)$")
# Cost columns recognised in a folder's bks.csv, in order of preference.
FOLDER_BKS_COLUMNS = ("bks_distance_only_dimacs", "bks", "optimal", "optimal_cost", "cost")
# Customers kept per Solomon instance in the ablation set.
SOLOMON50_CUSTOMERS = 50


@dataclass(frozen=True)
class BenchmarkSet:
    """Instances of one benchmark, ready to evaluate.

    Attributes:
        name: set name (or folder path).
        convention: distance convention of its costs (``verify.CONVENTIONS``).
        instances: B = 1 instances in float64 (file order).
        bks: best-known cost per instance name (missing names have none).
        errors: ``(file name, message)`` of every file that could not be read.
    """

    name: str
    convention: str
    instances: list[Instance]
    bks: dict[str, float] = field(default_factory=dict)
    errors: list[tuple[str, str]] = field(default_factory=list)


def load_benchmark(
    name: str,
    *,
    limit: int | None = None,
    count: int = 128,
    data_seed: int = 0,
    root: str | os.PathLike[str] | None = None,
) -> BenchmarkSet:
    """A named set (module docstring) or a folder of Solomon-format files.

    Args:
        limit: keep the first ``limit`` instances (file order).
        count, data_seed: size and seed of a ``synthetic-*`` set.
        root: data folder (default ``benchmarks.data_dir()``).
    """
    synthetic = SYNTHETIC.match(name)
    if synthetic:
        from linc_core.train.data import generate

        problem, size = synthetic.group(1), int(synthetic.group(2))
        batch = generate(problem, count, size, data_seed).to(dtype=torch.float64)
        names = tuple(f"{name}-s{data_seed}-{i:05d}" for i in range(batch.batch_size))
        batch = replace(batch, names=names)
        instances = [batch.select([i]) for i in range(batch.batch_size)]
        return BenchmarkSet(name, "exact", instances[:limit])
    if name == "solomon50":
        return _solomon50_set(root, limit)
    if name == "solomon100":
        loaded = _solomon_folder(_solomon100_folder(root), name, limit)
        return replace(loaded, bks=load_bks("solomon100", root))
    if name in ("tsplib", "cvrplib_x", "xml100"):
        spec = get_benchmark(name)
        instances, errors = [], []
        for path in list_instances(name, root)[:limit]:
            try:
                instances.append(spec.read(path))
            except (InstanceError, OSError) as err:
                errors.append((path.name, str(err)))
        return BenchmarkSet(name, spec.convention, instances, load_bks(name, root), errors)
    folder = Path(name).expanduser()
    if not folder.is_dir():
        raise ValueError(
            f"--benchmark {name!r}: not a known set (solomon100, solomon50, tsplib, cvrplib_x, "
            "xml100, synthetic-PROBLEM-SIZE) and not a folder of Solomon-format files"
        )
    return _solomon_folder(folder, str(folder), limit)


def solomon50(
    dtype: torch.dtype = torch.float32, root: str | os.PathLike[str] | None = None
) -> list[Instance]:
    """The ablation set: the 56 Solomon-100 instances cut to their first 50 customers.

    Callers that train on the set as one batch concatenate (``Instance.concat``).

    Args:
        dtype: floating dtype of the tensors (the files are read in float64, then cast).
        root: data folder (default ``benchmarks.data_dir()``).

    Returns:
        56 B = 1 ``cvrptw`` instances with 51 nodes each, in file-name order.

    Raises:
        RuntimeError: a Solomon file could not be read (the set would be incomplete).
    """
    loaded = _solomon50_set(root, None)
    if loaded.errors:
        raise RuntimeError(f"unreadable Solomon files: {loaded.errors}")
    return [instance.to(dtype=dtype) for instance in loaded.instances]


def _solomon100_folder(root: str | os.PathLike[str] | None) -> Path:
    return (Path(root) if root is not None else data_dir()) / "solomon100"


def _solomon50_set(root: str | os.PathLike[str] | None, limit: int | None) -> BenchmarkSet:
    """The one place the Solomon-50 set is cut (no BKS: the tables are for 100 customers)."""
    loaded = _solomon_folder(_solomon100_folder(root), "solomon50", limit)
    cut = [truncate_customers(i, SOLOMON50_CUSTOMERS) for i in loaded.instances]
    return BenchmarkSet("solomon50", loaded.convention, cut, {}, loaded.errors)


def _solomon_folder(folder: Path, name: str, limit: int | None) -> BenchmarkSet:
    instances, failures = read_solomon_folder(folder)
    errors = [(path.name, str(err)) for path, err in failures]
    bks_file = folder / "bks.csv"
    bks = read_bks_csv(bks_file, FOLDER_BKS_COLUMNS) if bks_file.is_file() else {}
    return BenchmarkSet(name, convention_for("solomon"), instances[:limit], bks, errors)
