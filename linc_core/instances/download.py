"""``linc-data download``: fetching a benchmark set from CVRPLIB, file by file, checked.

vrplib 2.2.0 no longer ships a downloader, so files are fetched
(:func:`linc_core.utils.files.open_url`: http(s), or ``file://`` for a local mirror) from
CVRPLIB's per-file layout::

    {base}/{remote_set}/{name}.{ext}      instance (ext "vrp" for CVRP, "txt" for VRPTW)
    {base}/{remote_set}/{name}.sol        best-known solution

with ``base`` = ``LINC_CVRPLIB_URL`` or ``CVRPLIB_URL`` (the long-standing CVRPLIB address;
CVRPLIB has moved hosts before, so pass ``--base-url`` if it moves again) and ``remote_set``
``X`` (Set X), ``Solomon`` or ``HG`` (Gehring-Homberger). XML100 and TSPLIB are not served per
file by CVRPLIB and are not offered.

Each file is written to a temporary name in the destination folder, read with the linc reader
of its format, and only then renamed into place, so an interrupted or corrupt download never
leaves a file that looks complete. CVRPLIB serves plain http, so what arrives may have been
changed on the way: an instance of a set whose content linc records (``RECORDED_SETS``:
Solomon-100's 56 and Set X's 100, ``Instance.fingerprint`` of the file as read, in
``KNOWN_CONTENT_FILE``) must match that record, or it is refused and nothing is written; a copy
already in the folder is checked the same way, and a name the record lacks is refused before
any fetch. The record covers the values linc reads, not a file's other lines (a Solomon file's
vehicle count, a ``.vrp``'s comment). Gehring-Homberger's files and the ``.sol`` files (CVRPLIB
updates best-known solutions) have no record: they are checked by their reader only, and
:class:`Downloaded` counts them apart.

The record is made from the standard files (``$LINC_DATA_DIR``) by
:func:`write_known_content`; a test holds it equal to what those files give.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import IO

from linc_core.instances import Instance, InstanceError, read_cvrplib, read_solomon, read_solution
from linc_core.instances.benchmarks import (
    BENCHMARKS,
    SOLOMON_FAMILIES,
    benchmark_dir,
    list_instances,
    read_bks_csv,
)
from linc_core.instances.reading import read_text
from linc_core.utils import files
from linc_core.utils.atomic import write_atomic
from linc_core.utils.files import PLAIN_NAME_RULE, FileRefusedError, copy_capped, is_plain_name

CVRPLIB_URL_ENV = "LINC_CVRPLIB_URL"
CVRPLIB_URL = "http://vrp.atd-lab.inf.puc-rio.br/media/com_vrp/instances/"
# Instance fingerprints of the sets linc knows the content of, by set and instance name.
KNOWN_CONTENT_FILE = Path(__file__).with_name("known_content.json")


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
# What a file's check raises when it refuses the file (a reader's InstanceError, the record's
# ValueError, a read's OSError): the download and the check of a present copy catch the same.
CHECK_ERRORS = (InstanceError, ValueError, OSError)
# What became of a fetched instance its check refused.
NOT_KEPT = "it was not kept"
# The sets whose content linc records: those the standard data folder holds.
RECORDED_SETS = ("cvrplib_x", "solomon100")


class DownloadError(RuntimeError):
    """A file could not be fetched, or what was fetched failed the reader's checks.

    Attributes:
        done: what :func:`download_set` had left in its folder before this file (None from
            :func:`download_file` alone).
    """

    done: Downloaded | None = None


def remote_names(set_name: str, root: str | os.PathLike[str] | None = None) -> list[str]:
    """Instance names of a downloadable set.

    Solomon (56) and Homberger-200 (60) names follow fixed patterns. Set X names carry a
    vehicle count that cannot be derived, so they come from ``cvrplib_x/bks.csv`` under
    ``root`` (default :func:`linc_core.instances.benchmarks.data_dir`).

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
        except CHECK_ERRORS as err:
            raise DownloadError(f"{url}: downloaded file failed the check: {err}") from err

    return Path(write_atomic(target, writer=fetch, check=verify))


def _reader(remote: RemoteSet) -> Callable[[Path], Instance]:
    return read_solomon if remote.format == "solomon" else read_cvrplib


@cache
def known_content() -> Mapping[str, Mapping[str, str]]:
    """linc's record of the sets whose content it knows: ``{set: {instance name:
    Instance.fingerprint()}}`` (``KNOWN_CONTENT_FILE``, shipped with the package)."""
    record = json.loads(read_text(KNOWN_CONTENT_FILE, str(KNOWN_CONTENT_FILE)))
    return record["sets"]


def content_of(set_name: str, root: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """``{instance name: fingerprint}`` of a named benchmark's files under ``root`` (default
    :func:`linc_core.instances.benchmarks.data_dir`), each read as a download is."""
    reader = _reader(DOWNLOAD_SETS[set_name])
    return {path.stem: reader(path).fingerprint() for path in list_instances(set_name, root)}


def write_known_content(root: str | os.PathLike[str] | None = None) -> Path:
    """Record the content of every set the data folder holds (``KNOWN_CONTENT_FILE``): for a
    maintainer, after the standard files or the readers change."""
    sets = {name: content_of(name, root) for name in RECORDED_SETS}
    about = "Instance.fingerprint() of each file as linc reads it (linc_core.instances.download)"
    text = json.dumps({"about": about, "sets": sets}, indent=1, sort_keys=True) + "\n"
    return Path(write_atomic(KNOWN_CONTENT_FILE, text.encode()))


def _content_check(set_name: str, name: str, outcome: str) -> Callable[[Path], object]:
    """The check of an instance file of ``set_name``: its reader, then, for a set linc records,
    the record of instance ``name``'s content (a mismatch is a ``ValueError`` that ends with
    ``outcome``: what became of the file)."""
    reader = _reader(DOWNLOAD_SETS[set_name])
    expected = known_content().get(set_name, {}).get(name)

    def check(path: Path) -> None:
        found = reader(path).fingerprint()
        if expected is not None and found != expected:
            raise ValueError(
                f"its content (fingerprint {found}) differs from linc's record of "
                f"{set_name} {name} ({expected}): changed on the way or at the source; {outcome}"
            )

    return check


def is_recorded(set_name: str, name: str) -> bool:
    """Whether linc records the content of instance ``name`` of ``set_name``."""
    return name in known_content().get(set_name, {})


def _check_names(set_name: str, names: Sequence[str]) -> None:
    """Refuse, before any fetch, a name that is no plain file name, or, in a set linc records,
    a name the record does not hold (``c101`` is not C101: it would be kept unchecked)."""
    record = known_content().get(set_name)
    for name in names:  # each becomes a file name in dest: never a path out of it
        if not is_plain_name(name):
            raise DownloadError(f"download {set_name}: instance name {name!r}: {PLAIN_NAME_RULE}")
        if record is not None and name not in record:
            close = [known for known in record if known.casefold() == name.casefold()]
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise DownloadError(
                f"download {set_name}: instance name {name!r}: not one of the set's "
                f"{len(record)} instances{hint}"
            )


@dataclass
class Downloaded:
    """What :func:`download_set` left in its folder, in download order.

    Attributes:
        matched: instance files fetched, or already there, whose content matched linc's record.
        unrecorded: files fetched with no record to match (Gehring-Homberger's instances,
            ``.sol`` files): checked by their reader only.
        present: files already there and not fetched again (``overwrite`` fetches them), whose
            content the record does not cover (a ``.sol`` file, a Gehring-Homberger instance).
    """

    matched: list[Path] = field(default_factory=list)
    unrecorded: list[Path] = field(default_factory=list)
    present: list[Path] = field(default_factory=list)

    @property
    def files(self) -> int:
        """Every file accounted for."""
        return len(self.matched) + len(self.unrecorded) + len(self.present)


def download_set(
    set_name: str,
    dest: str | os.PathLike[str],
    names: Sequence[str] | None = None,
    *,
    solutions: bool = False,
    base_url: str | None = None,
    overwrite: bool = False,
    opener: Opener = files.open_url,
) -> Downloaded:
    """Download a set's instances (and optionally solutions) into ``dest``.

    Files keep CVRPLIB's names. Files already present are kept unless ``overwrite``; an
    instance of a set linc records (``RECORDED_SETS``) is kept, fetched or present, only if it
    matches the record (module docstring).

    Returns:
        What is in ``dest`` now, by how it was checked (:class:`Downloaded`).

    Raises:
        DownloadError: a name is no plain file name or, in a recorded set, not one of its
            instances (before any fetch); a download fails (:func:`download_file`: a fetch, a
            reader's check or the record's); an instance already present differs from the
            record. Its ``done`` holds what was done before.
    """
    remote = DOWNLOAD_SETS[set_name]
    wanted = list(names) if names else remote_names(set_name)
    _check_names(set_name, wanted)
    folder = Path(dest)
    done = Downloaded()
    try:
        for name in wanted:
            for solution in (False, True) if solutions else (False,):
                extension = "sol" if solution else remote.extension
                target = folder / f"{name}.{extension}"
                recorded = not solution and is_recorded(set_name, name)
                if target.exists() and not overwrite:
                    if recorded:
                        _check_present(target, set_name, name)
                        done.matched.append(target)
                    else:
                        done.present.append(target)
                    continue
                url = instance_url(set_name, name, solution=solution, base_url=base_url)
                check = read_solution if solution else _content_check(set_name, name, NOT_KEPT)
                download_file(url, target, check, opener=opener)
                (done.matched if recorded else done.unrecorded).append(target)
    except DownloadError as err:
        err.done = done
        raise
    return done


def _check_present(path: Path, set_name: str, name: str) -> None:
    """An instance already in the folder, checked as a fetched one is: a copy made before the
    record, or changed since, is named rather than counted as the set's."""
    try:
        _content_check(set_name, name, "--overwrite fetches it again")(path)
    except CHECK_ERRORS as err:
        raise DownloadError(f"{path}: already there, and {err}") from None


__all__ = [
    "CVRPLIB_URL",
    "CVRPLIB_URL_ENV",
    "DOWNLOAD_SETS",
    "KNOWN_CONTENT_FILE",
    "MAX_DOWNLOAD_BYTES",
    "MAX_DOWNLOAD_SECONDS",
    "RECORDED_SETS",
    "DownloadError",
    "Downloaded",
    "Opener",
    "RemoteSet",
    "content_of",
    "download_file",
    "download_set",
    "instance_url",
    "is_recorded",
    "known_content",
    "remote_names",
    "write_known_content",
]
