"""Any benchmark file, whatever its format: the format from the extension (a path) or from the
content (text, as a served model receives it), read by the matching reader.

The formats are the problems' (their specs' ``file_formats``): ``solomon`` (``.txt``,
Solomon/Homberger VRPTW), ``tsplib`` (``.tsp``, EUC_2D) and ``cvrplib`` (``.vrp``, CVRPLIB), and
any a registered problem adds (read from a path; the text sniffing knows the three).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from linc_core.instances.batch import Instance, InstanceError
from linc_core.problems.spec import FileFormat, problem_names, problem_spec


def file_formats() -> dict[str, FileFormat]:
    """Every file format of every known problem: name -> (suffix, reader)."""
    return {
        name: file_format
        for problem in problem_names()
        for name, file_format in problem_spec(problem).file_formats.items()
    }


def detect_format(path: Path) -> str:
    """The format of a file from its extension (any case): ``"solomon"`` (``.txt``),
    ``"tsplib"`` (``.tsp``), ``"cvrplib"`` (``.vrp``) or a registered problem's.

    Raises:
        ValueError: ``path`` is a folder, or no known format has its extension.
    """
    if path.is_dir():
        raise ValueError(f"{path}: a folder, not an instance file (a folder of instances is a set)")
    known = file_formats()
    file_format = {f.suffix: name for name, f in known.items()}.get(path.suffix.lower())
    if file_format is None:
        *first, last = [f"{f.suffix} ({f.title})" for f in known.values()]
        raise ValueError(
            f"{path}: extension {path.suffix or '(none)'!r} is not one linc reads: "
            f"{', '.join(first)} or {last}"
        )
    return file_format


def read_instance(path: Path) -> tuple[str, Instance]:
    """(format, instance) of a benchmark file; the reader's own error when it cannot read it."""
    file_format = detect_format(path)
    return file_format, file_formats()[file_format].read(path)


# The patterns below read one line each: ``[^\S\n]`` is whitespace other than a line break.
# ``\s*`` after ``^`` would also swallow the blank lines that follow, and the search retries
# from every line start, which made a text of many blank lines quadratic (3.2 MB: 20 s,
# holding the GIL of the model server).
_VEHICLE_LINE = re.compile(r"^[^\S\n]*VEHICLE[^\S\n]*$", re.MULTILINE)
_TYPE_LINE = re.compile(r"^[^\S\n]*TYPE[^\S\n]*:?[^\S\n]*(\w+)", re.MULTILINE)
_NAME_LINE = re.compile(r"^[^\S\n]*NAME[^\S\n]*:?[^\S\n]*(\S+)", re.MULTILINE)
_FIRST_LINE = re.compile(r"\S[^\n]*")


def format_of_text(text: str, source: str = "instance text") -> str:
    """The format of a benchmark file's text: Solomon's ``VEHICLE`` and ``CUSTOMER`` blocks,
    else the ``TYPE`` line of TSPLIB (``TSP``) or CVRPLIB (``CVRP``). Linear in the text.

    Raises:
        InstanceError: none of them (naming ``source`` and the text's start).
    """
    if _VEHICLE_LINE.search(text) and "CUSTOMER" in text:
        return "solomon"
    kind = _TYPE_LINE.search(text)
    if kind and kind.group(1).upper() == "TSP":
        return "tsplib"
    if kind and kind.group(1).upper() == "CVRP":
        return "cvrplib"
    raise InstanceError(
        source,
        "instance",
        text[:40],
        "neither a Solomon file (VEHICLE and CUSTOMER blocks) nor a TSPLIB or CVRPLIB file (a "
        "TYPE : TSP or TYPE : CVRP line)",
    )


def name_in_text(text: str) -> str | None:
    """The instance's own name in a benchmark file's text: TSPLIB/CVRPLIB's ``NAME`` line, else
    a Solomon file's first line; None if the text has neither. Linear in the text."""
    named = _NAME_LINE.search(text)
    if named:
        return named.group(1)
    first = _FIRST_LINE.search(text)
    line = first.group(0).strip() if first else ""
    return line if re.fullmatch(r"[A-Za-z0-9._-]+", line) else None


def read_instance_text(text: str, name: str = "instance") -> tuple[str, Instance]:
    """(format, B = 1 instance named ``name``) of a benchmark file's text."""
    file_format = format_of_text(text, name)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "instance"
    with tempfile.TemporaryDirectory(prefix="linc-instance-") as folder:
        known = file_formats()[file_format]
        path = Path(folder) / f"{safe}{known.suffix}"
        path.write_text(text)
        return file_format, known.read(path)


__all__ = [
    "detect_format",
    "file_formats",
    "format_of_text",
    "name_in_text",
    "read_instance",
    "read_instance_text",
]
