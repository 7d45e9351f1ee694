"""Where the benchmark files live, their best-known values, and a CVRPLIB download command.

Data folder (``data_dir``): the ``LINC_DATA_DIR`` environment variable when set, else
``../shared/data`` next to the repository (the parent of the ``linc_core`` package dir), else
``../shared/data`` from the current directory. Files are read in place, never copied.

Named benchmarks (``BENCHMARKS``), each a sub-folder of the data folder with a ``bks.csv``:

==============  ============  ========  ======================================  ==========
name            files         problem   best-known column in ``bks.csv``        convention
==============  ============  ========  ======================================  ==========
``solomon100``  ``*.txt``     cvrptw    ``bks_distance_only_dimacs``            dimacs
``tsplib``      ``*.tsp``     tsp       ``optimal``                             tsplib
``cvrplib_x``   ``*.vrp``     cvrp      ``bks``                                 cvrplib
``xml100``      ``*.vrp``     cvrp      ``optimal_cost``                        cvrplib
==============  ============  ========  ======================================  ==========

Download (``linc-data download SET --dest DIR``): :mod:`linc_core.instances.download`.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from linc_core.instances import Instance, InstanceError
from linc_core.instances.reading import read_text
from linc_core.problems.spec import problem_spec

DATA_DIR_ENV = "LINC_DATA_DIR"

# The repository root is the parent of the `linc_core` package directory.
_REPO_ROOT = Path(__file__).resolve().parents[2]  # linc_core/instances/ -> the checkout
_DEFAULT_RELATIVE = Path("..") / "shared" / "data"


@dataclass(frozen=True)
class Benchmark:
    """A benchmark shipped in the data folder.

    Attributes:
        name: key in ``BENCHMARKS``.
        folder: sub-folder of the data folder.
        pattern: glob of its instance files.
        problem: the problem its files hold (``"cvrptw"``, ``"cvrp"`` or ``"tsp"``).
        bks_column: ``bks.csv`` column holding the best-known (or optimal) cost.
        convention: distance convention the best-known costs are stated in.
        largest_customers: customers (cities) of its largest instance as shipped, for what a
            decoding of the whole set holds in memory (``linc_core.runs.memory``).
    """

    name: str
    folder: str
    pattern: str
    problem: str
    bks_column: str
    convention: str
    largest_customers: int

    def read(self, path: str | os.PathLike[str]) -> Instance:
        """Read one of this benchmark's instance files with the reader of its problem's file
        format of that suffix (the spec's ``file_formats``)."""
        formats = problem_spec(self.problem).file_formats.values()
        return next(f for f in formats if self.pattern.endswith(f.suffix)).read(path)


BENCHMARKS: dict[str, Benchmark] = {
    "solomon100": Benchmark(
        "solomon100", "solomon100", "*.txt", "cvrptw", "bks_distance_only_dimacs", "dimacs", 100
    ),
    "tsplib": Benchmark("tsplib", "tsplib", "*.tsp", "tsp", "optimal", "tsplib", 200),
    "cvrplib_x": Benchmark("cvrplib_x", "cvrplib_x", "*.vrp", "cvrp", "bks", "cvrplib", 1000),
    "xml100": Benchmark("xml100", "xml100", "*.vrp", "cvrp", "optimal_cost", "cvrplib", 100),
}


# ---------------------------------------------------------------------- locations
def data_dir() -> Path:
    """The benchmark data folder.

    Returns:
        ``$LINC_DATA_DIR`` when set; else the first existing of ``<repo>/../shared/data`` and
        ``<cwd>/../shared/data``.

    Raises:
        FileNotFoundError: naming ``LINC_DATA_DIR`` and the places looked at.
    """
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        path = Path(configured).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(
                f"{DATA_DIR_ENV}={configured!r} is not a directory; point it at the benchmark "
                "data folder (the one holding solomon100/, tsplib/, cvrplib_x/, xml100/)."
            )
        return path.resolve()
    candidates = [_REPO_ROOT / _DEFAULT_RELATIVE, Path.cwd() / _DEFAULT_RELATIVE]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    looked = ", ".join(str(c.resolve()) for c in candidates)
    raise FileNotFoundError(
        f"Benchmark data folder not found (looked in {looked}); set {DATA_DIR_ENV} to it."
    )


def get_benchmark(benchmark: str) -> Benchmark:
    """The :class:`Benchmark` called ``benchmark`` (raises ``KeyError`` listing the names)."""
    try:
        return BENCHMARKS[benchmark]
    except KeyError:
        raise KeyError(
            f"Unknown benchmark {benchmark!r}; expected one of {sorted(BENCHMARKS)}."
        ) from None


def benchmark_dir(benchmark: str, root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of a named benchmark under ``root`` (default :func:`data_dir`)."""
    spec = get_benchmark(benchmark)
    folder = Path(root) if root is not None else data_dir()
    path = folder / spec.folder
    if not path.is_dir():
        raise FileNotFoundError(f"Benchmark folder {path} is missing.")
    return path


def list_instances(benchmark: str, root: str | os.PathLike[str] | None = None) -> list[Path]:
    """The instance files of a named benchmark, sorted by file name."""
    spec = get_benchmark(benchmark)
    return sorted(benchmark_dir(benchmark, root).glob(spec.pattern))


def load_bks(benchmark: str, root: str | os.PathLike[str] | None = None) -> dict[str, float]:
    """Best-known (or optimal) costs of a named benchmark, by instance name.

    The column is looked up by name in ``bks.csv``'s header (see ``BENCHMARKS``); for
    ``solomon100`` it is the distance-only DIMACS value, not the hierarchical one.

    Raises:
        InstanceError: the csv lacks the ``instance`` or the cost column, or a cost is not a
            number.
    """
    spec = get_benchmark(benchmark)
    return read_bks_csv(benchmark_dir(benchmark, root) / "bks.csv", (spec.bks_column,))


def read_bks_csv(path: Path, columns: Sequence[str]) -> dict[str, float]:
    """Costs by instance name from a ``bks.csv``: its ``instance`` column and the first of
    ``columns`` (in order of preference) that its header holds.

    Raises:
        InstanceError: naming the file: no ``instance`` column, none of ``columns``, or a cost
            that is not a number.
    """
    reader = csv.DictReader(io.StringIO(read_text(path, str(path))))  # a file, capped
    header = reader.fieldnames or []
    column = next((c for c in columns if c in header), None)
    if "instance" not in header or column is None:
        missing = "instance" if "instance" not in header else columns[0]
        others = f" (nor any of {tuple(columns[1:])})" if column is None and columns[1:] else ""
        raise InstanceError(str(path), missing, header, f"column missing from the header{others}")
    table: dict[str, float] = {}
    for row in reader:
        value = row[column]
        try:
            table[row["instance"]] = float(value)
        except (TypeError, ValueError):
            raise InstanceError(
                str(path), f"{column}[{row['instance']}]", value, "not a number"
            ) from None
    return table


# ---------------------------------------------------------------------- families
# Solomon's and Gehring-Homberger's families: customer layout (C, R, RC), horizon class (1, 2).
SOLOMON_FAMILIES: tuple[str, ...] = ("C1", "C2", "R1", "R2", "RC1", "RC2")
# C101, RC208 (Solomon) and C1_2_1, RC2_10_5 (Gehring-Homberger)
_FAMILY_NAME = re.compile(r"^(RC|C|R)([12])(?:\d\d|_)", re.IGNORECASE)


def instance_family(name: str) -> str | None:
    """``"C1"`` ... ``"RC2"`` for a Solomon or Gehring-Homberger instance name, else None."""
    match = _FAMILY_NAME.match(name)
    return None if match is None else match.group(1).upper() + match.group(2)


__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "DATA_DIR_ENV",
    "SOLOMON_FAMILIES",
    "benchmark_dir",
    "data_dir",
    "get_benchmark",
    "instance_family",
    "list_instances",
    "load_bks",
    "read_bks_csv",
]
