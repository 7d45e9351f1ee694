"""What every benchmark file reader shares: the default dtype, text reading, the vrplib parse,
grid sizes and token checks.

Readers turn one benchmark file into a B = 1 `Instance` (name = file stem), on top of
`vrplib` 2.2.0 for the parsing. Every reader funnels its result through
:func:`~linc_core.instances.validation.validate_instance`, so the same data checks apply
whatever the source format.

Readers default to float64: TSPLIB files such as ch130 or rd100 carry coordinates that
float32 cannot hold, and a rounded coordinate can flip a `nint` edge length. Cast with
`instance.to(dtype=torch.float32)` before feeding a float32 model.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable, Sequence

import numpy as np
import torch
from vrplib.parse import parse_solomon, parse_vrplib
from vrplib.parse.parse_utils import infer_type

from linc_core.instances.batch import InstanceError
from linc_core.utils.files import FileRefusedError, read_regular_file
from linc_core.utils.secrets import redact

DEFAULT_READER_DTYPE: torch.dtype = torch.float64
# Largest benchmark file (instance, solution, tour, bks.csv) a reader takes: the largest shipped
# are under 1 MiB (X-n1001: 20 KB, xml100's bks.csv: 0.3 MB), so no valid file comes near it.
MAX_BENCHMARK_FILE_BYTES = 64 * 1024 * 1024
# What readers say of inf, nan, or a number too large for a float64 (1e400 reads as inf).
NOT_FINITE = "not a finite number (inf, nan, or beyond the range of a float64)"
# Data sections (``..._SECTION`` lines) a VRPLIB file may hold. The shipped formats use at most
# three (NODE_COORD, DEMAND, DEPOT) and TSPLIB/CVRPLIB define under ten; vrplib 2.2.0 copies
# the rest of the file once per section, so 60,000 of them (600 KB) took it 19 s.
MAX_VRPLIB_SECTIONS = 16
# Most nodes a reader takes (a VRPLIB file's DIMENSION, a Solomon file's rows): a run's most
# customers (linc_core.runs.plan.MAX_CUSTOMERS, 100,000) and a depot. The largest shipped file
# has 1001.
MAX_READER_NODES = 100_001
# Most characters of a file's own text an error quotes: enough to recognise a token or a
# header, never a whole line of a file that is no benchmark at all (a link to ~/.netrc).
SHOWN_CHARS = 24


def read_text(path: str | os.PathLike[str], source: str) -> str:
    """The file's text. A path to anything but a regular file (a named pipe, ``/dev/zero``), a
    file over :data:`MAX_BENCHMARK_FILE_BYTES` or a binary file fails with a named error, never
    a hang, a ``MemoryError`` or a decode trace."""
    try:
        data = read_regular_file(path, MAX_BENCHMARK_FILE_BYTES, source=source)
    except FileRefusedError as err:
        raise InstanceError(source, "file", err.value, err.problem) from None
    try:
        # newline=None's universal newlines, as Path.read_text (and vrplib's open) read it
        return io.TextIOWrapper(io.BytesIO(data)).read()
    except UnicodeDecodeError as err:
        raise InstanceError(source, "file", "binary content", "not a text file") from err


def parse_with_vrplib(path: str | os.PathLike[str], source: str, file_format: str) -> dict:
    """vrplib's parse of the file (``file_format`` ``"solomon"`` or ``"vrplib"``), edge weights
    left out; a file vrplib cannot parse fails naming the source.

    The text is read here (:func:`read_text`: a regular file, capped) and handed to vrplib's
    parser: vrplib's own ``read_instance`` would open the path again, whatever it then is."""
    text = read_text(path, source)
    if file_format != "solomon":
        check_vrplib_layout(text, source)
    parse = parse_solomon if file_format == "solomon" else parse_vrplib
    try:
        return parse(text, compute_edge_weights=False)
    # ArithmeticError: numpy's OverflowError on a number past int64 (a coordinate of 1e21)
    except (ValueError, RuntimeError, IndexError, KeyError, TypeError, ArithmeticError) as err:
        label = "Solomon" if file_format == "solomon" else "VRPLIB"
        raise InstanceError(
            source, "format", str(err), f"vrplib could not parse this {label} file"
        ) from err


def check_vrplib_layout(text: str, source: str) -> None:
    """Refuse, in one linear pass and before vrplib sees the text, what vrplib 2.2.0 would
    spend quadratic time or memory on: more than :data:`MAX_VRPLIB_SECTIONS` sections (its
    grouping copies the rest of the lines per section), a DIMENSION that is missing, not an
    integer from 2 to :data:`MAX_READER_NODES`, and a section longer than DIMENSION allows
    (an ``EDGE_WEIGHT_SECTION`` after N coordinates made it compute an N x N matrix, whatever
    DIMENSION said: 154 KB took 2.4 GB and 18 s).

    Lines are read as vrplib reads them: stripped, blank and ``#`` lines skipped, everything
    from the first line holding ``EOF`` ignored, a line holding ``_SECTION`` a section header,
    a ``KEY : value`` line before the first section a specification."""
    specs: dict[str, str] = {}
    header: str | None = None
    dimension = sections = rows = values = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "EOF" in line:
            break
        if "_SECTION" in line:
            if header is None:
                dimension = _vrplib_dimension(specs, source)
            else:
                _check_section(header, rows, values, dimension, specs, source)
            sections += 1
            if sections > MAX_VRPLIB_SECTIONS:
                raise InstanceError(
                    source,
                    "sections",
                    shown(line),
                    f"section {sections}: a VRPLIB file holds at most {MAX_VRPLIB_SECTIONS}",
                )
            header, rows, values = line, 0, 0
        elif header is not None:
            rows += 1
            values += len(line.split())
        elif ":" in line:
            key, _, value = line.partition(":")
            specs[key.strip().lower()] = value.strip()
    if header is None:
        _vrplib_dimension(specs, source)
    else:
        _check_section(header, rows, values, dimension, specs, source)


def _vrplib_dimension(specs: dict[str, str], source: str) -> int:
    """The DIMENSION specification, an integer from 2 to :data:`MAX_READER_NODES`."""
    if "dimension" not in specs:
        raise InstanceError(source, "DIMENSION", None, "missing field")
    dimension = infer_type(specs["dimension"])  # the value as vrplib would read it
    if not isinstance(dimension, int) or dimension < 2:
        value = shown(dimension) if isinstance(dimension, str) else dimension
        raise InstanceError(source, "DIMENSION", value, "expected an integer >= 2")
    if dimension > MAX_READER_NODES:
        raise InstanceError(
            source,
            "DIMENSION",
            dimension,
            f"more than the {MAX_READER_NODES} nodes a reader takes",
        )
    return dimension


def _check_section(
    header: str, rows: int, values: int, dimension: int, specs: dict[str, str], source: str
) -> None:
    """A section of ``rows`` data lines holding ``values`` values in all: one line per node (and
    a ``-1`` that ends DEPOT_SECTION); an EDGE_WEIGHT_SECTION only with explicit weights, at
    most DIMENSION x DIMENSION of them."""
    name = header.strip(" :")
    if name.removesuffix("_SECTION").lower() != "edge_weight":
        if rows > dimension + 1:
            raise InstanceError(
                source, shown(name), f"{rows} lines", f"more than DIMENSION {dimension} allows"
            )
        return
    weight_type = specs.get("edge_weight_type")
    if weight_type != "EXPLICIT":
        value = shown(weight_type) if weight_type is not None else None
        problem = "an EDGE_WEIGHT_SECTION is read only with EDGE_WEIGHT_TYPE EXPLICIT"
        raise InstanceError(source, "EDGE_WEIGHT_TYPE", value, problem)
    if values > dimension * dimension:
        raise InstanceError(
            source,
            "EDGE_WEIGHT_SECTION",
            f"{values} values",
            f"more than DIMENSION {dimension} x {dimension}",
        )


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``value`` as an error quotes text read from a file: secrets masked, whitespace runs
    made one space, at most ``limit`` characters (then ``...`` and the full length)."""
    whole = " ".join(str(value).split())
    text = redact(whole[: 8 * limit])  # not a regex pass over a 64 MiB token
    return text if len(whole) <= limit else f"{text[:limit]}... ({len(whole)} characters)"


def shown_line(line: str) -> str:
    """A line of a file as an error quotes it: its first word (:func:`shown`), ``...`` for the
    rest; the rest of a line of ~/.netrc (``login me password ...``) is never printed."""
    first, *rest = line.split() or [""]
    return shown(first) + (" ..." if rest else "")


def grid_size(coords: np.ndarray, ladder: Sequence[float]) -> float:
    """Smallest ladder value holding every coordinate, else ceil(max coordinate) (>= 1).

    Readers refuse non-finite coordinates first, naming the file and node (``NOT_FINITE``);
    a caller that did not gets a ``ValueError`` here, not an ``OverflowError`` from ``ceil``.
    """
    top = float(np.max(coords)) if coords.size else 1.0
    if not math.isfinite(top):
        raise ValueError(f"grid_size: the coordinates hold {top} ({NOT_FINITE})")
    for side in ladder:
        if top <= side:
            return float(side)
    return float(max(1, math.ceil(top)))


def parses_as(token: str, kind: Callable[[str], object]) -> bool:
    """Whether ``kind(token)`` succeeds (``kind`` is ``int`` or ``float``)."""
    try:
        kind(token)
    except ValueError:
        return False
    return True
