"""Benchmark sets ready to evaluate: named sets, synthetic sets and folders of Solomon files.

``load_benchmark(name)`` takes

- ``solomon100`` (56, DIMACS convention, BKS: distance-only), ``solomon50`` (the same files cut
  to their first 50 customers: the ablation set, built by :func:`solomon50`; no BKS),
  ``tsplib`` (29, nint), ``cvrplib_x`` and ``xml100`` (nint; ``limit`` takes the first files
  by name);
- ``synthetic-PROBLEM-SIZE`` (e.g. ``synthetic-cvrptw-100``): ``count`` instances from the
  training generator, seeded by ``data_seed`` (exact convention, no BKS);
- any other value is a folder of benchmark files of one format: Solomon (``.txt``; Homberger-200
  has that format), TSPLIB (``.tsp``), CVRPLIB (``.vrp``), or a registered problem's; a
  ``bks.csv`` in it with an ``instance`` column and a cost column is used when present. A file
  of the format that cannot be read becomes an error entry naming the file; files that are not
  instances at all (other suffixes, a ``.txt`` without the VEHICLE and CUSTOMER sections:
  notes, solutions, the folder's own best-known values) are skipped and listed;
- ``max_customers`` keeps the instances with at most that many customers (cities), e.g. the X
  instances up to 200 customers.

Best-known values are matched to instance names case-insensitively (``C1_2_1`` in a CSV is
``c1_2_1.txt``'s value). ``limit`` keeps the first files in name order, unreadable ones
included, so an error beyond the limit is not reported.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from linc_core.instances import Instance, InstanceError, read_solomon_folder, truncate_customers
from linc_core.instances.benchmarks import (
    BENCHMARKS,
    data_dir,
    get_benchmark,
    list_instances,
    load_bks,
    read_bks_csv,
)
from linc_core.instances.reading import MAX_BENCHMARK_FILE_BYTES
from linc_core.utils.files import FileRefusedError, read_regular_file
from linc_core.verify import convention_for

SYNTHETIC = re.compile(r"^synthetic-(tsp|cvrp|cvrptw)-(\d+)$")
# Nodes (count x (size + 1)) of one synthetic set at most: ten million are a few GiB in float64
# and hours of decoding on a CPU; more is a typo (linc-eval refuses it before generating).
MAX_SYNTHETIC_NODES = 10_000_000
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
        sources: the file each instance was read from, by instance name (sets cut or generated
            in memory have none).
        skipped: ``(file name, why)`` of the folder's files that are not instances.
    """

    name: str
    convention: str
    instances: list[Instance]
    bks: dict[str, float] = field(default_factory=dict)
    errors: list[tuple[str, str]] = field(default_factory=list)
    sources: dict[str, Path] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def without_bks(self) -> list[str]:
        """Names of the instances that have no best-known value."""
        return [i.names[0] for i in self.instances if i.names[0] not in self.bks]


def load_benchmark(
    name: str,
    *,
    limit: int | None = None,
    count: int = 128,
    data_seed: int = 0,
    root: str | os.PathLike[str] | None = None,
    max_customers: int | None = None,
) -> BenchmarkSet:
    """A named set or a folder of benchmark files (module docstring).

    Args:
        limit: keep the first ``limit`` files (name order; unreadable ones count).
        count: size of a ``synthetic-*`` set.
        data_seed: seed of a ``synthetic-*`` set.
        root: data folder (default ``benchmarks.data_dir()``).
        max_customers: keep the instances with at most this many customers (cities); the
            others are listed as skipped.
    """
    loaded = _load(name, limit, count, data_seed, root)
    if max_customers is None:
        return loaded
    kept = [i for i in loaded.instances if i.num_customers <= max_customers]
    larger = [
        (i.names[0], f"{i.num_customers} customers, more than {max_customers}")
        for i in loaded.instances
        if i.num_customers > max_customers
    ]
    return replace(loaded, instances=kept, skipped=sorted([*loaded.skipped, *larger]))


def largest_customers(name: str) -> int | None:
    """Customers of the largest instance of set ``name`` without reading it (a named set's
    shipped files, a synthetic set's size); None for a folder, known only once read."""
    synthetic = SYNTHETIC.match(name)
    if synthetic:
        return int(synthetic.group(2))
    if name == "solomon50":
        return SOLOMON50_CUSTOMERS
    if name in BENCHMARKS:
        return BENCHMARKS[name].largest_customers
    return None


def _load(
    name: str,
    limit: int | None,
    count: int,
    data_seed: int,
    root: str | os.PathLike[str] | None,
) -> BenchmarkSet:
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
        return _with_bks(loaded, load_bks("solomon100", root))
    if name in ("tsplib", "cvrplib_x", "xml100"):
        spec = get_benchmark(name)
        instances, errors, sources = [], [], {}
        for path in list_instances(name, root)[:limit]:
            try:
                instances.append(spec.read(path))
                sources[instances[-1].names[0]] = path
            except (InstanceError, OSError) as err:
                errors.append((path.name, str(err)))
        loaded = BenchmarkSet(name, spec.convention, instances, {}, errors, sources)
        return _with_bks(loaded, load_bks(name, root))
    folder = Path(name).expanduser()
    if not folder.is_dir():
        raise ValueError(
            f"--benchmark {name!r}: not a known set (solomon100, solomon50, tsplib, cvrplib_x, "
            "xml100, synthetic-PROBLEM-SIZE) and not a folder of benchmark files"
        )
    file_format = _folder_format(folder)
    if file_format == "solomon":
        return _solomon_folder(folder, str(folder), limit)
    return _format_folder(folder, file_format, limit)


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
    """A folder's Solomon files: the first ``limit`` in name order, errors included."""
    instances, failures = read_solomon_folder(folder)
    errors, skipped = [], []
    for path, err in failures:
        if _names_solomon_sections(path):
            errors.append((path, str(err)))
        else:
            skipped.append((path.name, "a .txt without the VEHICLE and CUSTOMER sections"))
    files = {p.stem: p for p in folder.iterdir() if p.is_file() and p.suffix.lower() == ".txt"}
    entries = sorted(
        [(files[i.names[0]].name, i) for i in instances] + [(p.name, e) for p, e in errors],
        key=lambda entry: entry[0],
    )[:limit]
    kept = [entry for _, entry in entries if isinstance(entry, Instance)]
    errors = [(file, entry) for file, entry in entries if isinstance(entry, str)]
    skipped += [
        (p.name, "not a .txt file")
        for p in sorted(folder.iterdir())
        if p.is_file() and p.suffix.lower() != ".txt" and not _companion(p, files)
    ]
    bks_file = folder / "bks.csv"
    bks = read_bks_csv(bks_file, FOLDER_BKS_COLUMNS) if bks_file.is_file() else {}
    sources = {i.names[0]: files[i.names[0]] for i in kept}
    skipped.sort()
    loaded = BenchmarkSet(name, convention_for("solomon"), kept, {}, errors, sources, skipped)
    return _with_bks(loaded, bks)


def _folder_format(folder: Path) -> str:
    """The one file format of a folder's instance files (by extension; Solomon's ``.txt`` when
    it has none, so that its own error names the folder).

    Raises:
        ValueError: files of two formats (say ``.vrp`` and ``.tsp``), named with their counts.
    """
    from linc_core.instances.any_file import file_formats

    by_suffix = {f.suffix: name for name, f in file_formats().items()}
    counts: dict[str, int] = {}
    for path in folder.iterdir():
        file_format = by_suffix.get(path.suffix.lower()) if path.is_file() else None
        if file_format is not None:
            counts[file_format] = counts.get(file_format, 0) + 1
    if len(counts) > 1:
        found = ", ".join(f"{n} {f}" for f, n in sorted(counts.items()))
        raise ValueError(f"--benchmark {folder}: files of several formats ({found}); one per set")
    return next(iter(counts), "solomon")


def _format_folder(folder: Path, file_format: str, limit: int | None) -> BenchmarkSet:
    """A folder of TSPLIB or CVRPLIB files (or a registered problem's format): the first
    ``limit`` in name order, each file that cannot be read an error entry naming it, any
    other file skipped and listed, best-known values from its ``bks.csv``."""
    from linc_core.instances.any_file import file_formats

    reader = file_formats()[file_format]
    instances, errors, sources, skipped = [], [], {}, []
    paths = sorted(p for p in folder.iterdir() if p.is_file())
    stems = {p.stem for p in paths if p.suffix.lower() == reader.suffix}
    for path in paths:
        if path.suffix.lower() != reader.suffix:
            if not _companion(path, stems):
                skipped.append((path.name, f"not a {reader.suffix} file"))
            continue
        if limit is not None and len(instances) + len(errors) >= limit:
            break
        try:
            instances.append(reader.read(path))
            sources[instances[-1].names[0]] = path
        except (InstanceError, OSError, ValueError) as err:
            errors.append((path.name, str(err)))
    bks_file = folder / "bks.csv"
    bks = read_bks_csv(bks_file, FOLDER_BKS_COLUMNS) if bks_file.is_file() else {}
    try:
        convention = convention_for(file_format)
    except ValueError:  # a registered problem's own format: its spec's convention
        convention = convention_for(instances[0].problem) if instances else "exact"
    loaded = BenchmarkSet(str(folder), convention, instances, {}, errors, sources, skipped)
    return _with_bks(loaded, bks)


def _companion(path: Path, instance_stems: Collection[str]) -> bool:
    """Whether a file that is not an instance belongs with the set rather than being skipped:
    its best-known table (``bks.csv``) or an instance's known solution (``NAME.sol`` beside
    ``NAME.txt``/``.vrp``/``.tsp``, as the published sets ship them; names matched ignoring
    case, as the best-known values are)."""
    if path.name == "bks.csv":
        return True
    folded = {stem.casefold() for stem in instance_stems}
    return path.suffix.lower() == ".sol" and path.stem.casefold() in folded


def _names_solomon_sections(path: Path) -> bool:
    """Whether a file that failed to read still looks like a Solomon file (an error to report)
    rather than some other text (a note, a best-known table: skipped)."""
    try:
        data = read_regular_file(path, MAX_BENCHMARK_FILE_BYTES)
    except (OSError, FileRefusedError):
        return True  # unreadable, a named pipe, too big: report it, whatever it is
    text = data.decode(errors="replace").upper()
    return "VEHICLE" in text and "CUSTOMER" in text


def _with_bks(loaded: BenchmarkSet, table: dict[str, float]) -> BenchmarkSet:
    """``loaded`` with the best-known values of its instances, names matched ignoring case."""
    by_folded = {name.casefold(): value for name, value in table.items()}
    names = (i.names[0] for i in loaded.instances)
    bks = {n: by_folded[n.casefold()] for n in names if n.casefold() in by_folded}
    return replace(loaded, bks=bks)
