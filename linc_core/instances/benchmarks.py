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

Download (``linc-data download SET --dest DIR``): vrplib 2.2.0 no longer ships a downloader,
so files are fetched (``linc_core.utils.files.open_url``: http(s), or ``file://`` for a local
mirror) from CVRPLIB's per-file layout::

    {base}/{remote_set}/{name}.{ext}      instance (ext "vrp" for CVRP, "txt" for VRPTW)
    {base}/{remote_set}/{name}.sol        best-known solution

with ``base`` = ``LINC_CVRPLIB_URL`` or ``CVRPLIB_URL`` (the long-standing CVRPLIB address;
CVRPLIB has moved hosts before, so pass ``--base-url`` if it moves again) and ``remote_set``
``X`` (Set X), ``Solomon`` or ``HG`` (Gehring-Homberger). Each file is written to a temporary
name in the destination folder, parsed and validated with the linc readers (built on vrplib),
and only then renamed into place, so an interrupted or corrupt download never leaves a file
that looks complete. XML100 and TSPLIB are not served per file by CVRPLIB and are not offered.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from linc_core.instances import Instance, InstanceError, read_cvrplib, read_solomon, read_solution
from linc_core.instances.reading import read_text
from linc_core.problems.spec import problem_spec
from linc_core.utils import files
from linc_core.utils.atomic import write_atomic
from linc_core.utils.files import PLAIN_NAME_RULE, FileRefusedError, copy_capped, is_plain_name

DATA_DIR_ENV = "LINC_DATA_DIR"
CVRPLIB_URL_ENV = "LINC_CVRPLIB_URL"
CVRPLIB_URL = "http://vrp.atd-lab.inf.puc-rio.br/media/com_vrp/instances/"

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


@dataclass(frozen=True)
class RemoteSet:
    """A set CVRPLIB serves file by file.

    Attributes:
        name: the set's name on the command line.
        remote_folder: folder under the CVRPLIB base URL.
        extension: instance file extension there.
        format: ``"solomon"`` or ``"vrplib"``: which reader checks a downloaded file.
    """

    name: str
    remote_folder: str
    extension: str
    format: str


DOWNLOAD_SETS: dict[str, RemoteSet] = {
    "cvrplib_x": RemoteSet("cvrplib_x", "X", "vrp", "vrplib"),
    "solomon100": RemoteSet("solomon100", "Solomon", "txt", "solomon"),
    "homberger200": RemoteSet("homberger200", "HG", "txt", "solomon"),
}


class DownloadError(RuntimeError):
    """A file could not be fetched, or what was fetched failed the reader's checks."""


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


# ---------------------------------------------------------------------- download
def remote_names(set_name: str, root: str | os.PathLike[str] | None = None) -> list[str]:
    """Instance names of a downloadable set.

    Solomon (56) and Homberger-200 (60) names follow fixed patterns. Set X names carry a
    vehicle count that cannot be derived, so they come from ``cvrplib_x/bks.csv`` under
    ``root`` (default :func:`data_dir`).

    Raises:
        InstanceError: a name in that ``bks.csv`` is no plain file name (``../pwn``).
    """
    if set_name == "solomon100":
        counts = dict(zip(SOLOMON_FAMILIES, (9, 8, 12, 11, 8, 8), strict=True))
        return [f"{family}{i:02d}" for family, count in counts.items() for i in range(1, count + 1)]
    if set_name == "homberger200":
        return [f"{family}_2_{i}" for family in SOLOMON_FAMILIES for i in range(1, 11)]
    if set_name == "cvrplib_x":
        table = benchmark_dir("cvrplib_x", root) / "bks.csv"
        names = sorted(read_bks_csv(table, (BENCHMARKS["cvrplib_x"].bks_column,)))
        for name in names:
            if not is_plain_name(name):
                raise InstanceError(str(table), "instance", name, PLAIN_NAME_RULE)
        return names
    raise KeyError(f"Unknown download set {set_name!r}; expected one of {sorted(DOWNLOAD_SETS)}.")


def instance_url(
    set_name: str, name: str, *, solution: bool = False, base_url: str | None = None
) -> str:
    """URL on CVRPLIB of instance ``name`` (``X-n101-k25``, ``C101``) of ``set_name`` (a key of
    ``DOWNLOAD_SETS``), or of its ``.sol`` with ``solution``; ``base_url`` defaults to
    ``$LINC_CVRPLIB_URL`` or ``CVRPLIB_URL``."""
    remote = DOWNLOAD_SETS[set_name]
    base = base_url or os.environ.get(CVRPLIB_URL_ENV) or CVRPLIB_URL
    extension = "sol" if solution else remote.extension
    return f"{base.rstrip('/')}/{remote.remote_folder}/{name}.{extension}"


Opener = Callable[..., IO[bytes]]
# CVRPLIB's largest files are tens of KB: a server streaming without end fills no disk.
MAX_DOWNLOAD_BYTES = 16 * 1024 * 1024
MAX_DOWNLOAD_SECONDS = 300.0


def download_file(
    url: str,
    target: str | os.PathLike[str],
    check: Callable[[Path], object],
    *,
    opener: Opener = files.open_url,
    timeout: float = 60.0,
    max_bytes: int = MAX_DOWNLOAD_BYTES,
    max_seconds: float = MAX_DOWNLOAD_SECONDS,
) -> Path:
    """Fetch ``url`` into ``target`` atomically, keeping it only if ``check`` accepts it.

    The bytes go to a temporary file in ``target``'s folder
    (:func:`linc_core.utils.atomic.write_atomic`); ``check`` (e.g. a reader) runs on that file;
    on any failure the temporary file is removed and ``target`` is left as it was.

    Args:
        url: any URL ``opener`` understands (``http(s)://``, ``file://``).
        target: final path.
        check: called with the temporary path; raise to reject the file.
        opener: :func:`linc_core.utils.files.open_url` or a stand-in with its call shape.
        timeout: seconds one read may wait (passed to ``opener``).
        max_bytes, max_seconds: most bytes and seconds the file may take
            (:func:`linc_core.utils.files.copy_capped`); past either, the download stops.

    Raises:
        DownloadError: naming the URL, when fetching or checking fails or a cap is passed.
    """

    def fetch(out: IO[bytes]) -> None:
        try:
            with opener(url, timeout=min(timeout, max_seconds)) as response:
                copy_capped(response, out, url, max_bytes=max_bytes, max_seconds=max_seconds)
        except FileRefusedError as err:
            raise DownloadError(f"{url}: download stopped: {err.value}: {err.problem}") from None
        except OSError as err:  # URLError and HTTPError are OSErrors; so is a read timeout
            raise DownloadError(f"{url}: download failed: {err}") from err

    def verify(temporary: Path) -> None:
        try:
            check(temporary)
        except (InstanceError, ValueError, OSError) as err:
            raise DownloadError(f"{url}: downloaded file failed the check: {err}") from err

    return Path(write_atomic(target, writer=fetch, check=verify))


def _checker(remote: RemoteSet, solution: bool) -> Callable[[Path], object]:
    if solution:
        return read_solution
    return read_solomon if remote.format == "solomon" else read_cvrplib


def download_set(
    set_name: str,
    dest: str | os.PathLike[str],
    names: Sequence[str] | None = None,
    *,
    solutions: bool = False,
    base_url: str | None = None,
    overwrite: bool = False,
    opener: Opener = files.open_url,
) -> list[Path]:
    """Download a set's instances (and optionally solutions) into ``dest``.

    Files already present are kept unless ``overwrite``. Files keep CVRPLIB's names.

    Returns:
        The paths written or already present, in download order.

    Raises:
        DownloadError: a name is no plain file name (``../x``: before any fetch), or a download
            fails (:func:`download_file`).
    """
    remote = DOWNLOAD_SETS[set_name]
    wanted = list(names) if names else remote_names(set_name)
    for name in wanted:  # each becomes a file name in dest: never a path out of it
        if not is_plain_name(name):
            raise DownloadError(f"download {set_name}: instance name {name!r}: {PLAIN_NAME_RULE}")
    folder = Path(dest)
    written: list[Path] = []
    for name in wanted:
        for solution in (False, True) if solutions else (False,):
            extension = "sol" if solution else remote.extension
            target = folder / f"{name}.{extension}"
            if target.exists() and not overwrite:
                written.append(target)
                continue
            url = instance_url(set_name, name, solution=solution, base_url=base_url)
            written.append(download_file(url, target, _checker(remote, solution), opener=opener))
    return written


__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "CVRPLIB_URL",
    "CVRPLIB_URL_ENV",
    "DATA_DIR_ENV",
    "DOWNLOAD_SETS",
    "DownloadError",
    "MAX_DOWNLOAD_BYTES",
    "MAX_DOWNLOAD_SECONDS",
    "Opener",
    "RemoteSet",
    "SOLOMON_FAMILIES",
    "benchmark_dir",
    "data_dir",
    "download_file",
    "download_set",
    "get_benchmark",
    "instance_family",
    "instance_url",
    "list_instances",
    "load_bks",
    "read_bks_csv",
    "remote_names",
]
