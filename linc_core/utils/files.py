"""Opening a local file whose path someone else chose: a regular file only, read up to a cap.

A path given on a command line, found in a shared folder or named by a file can lead to a named
pipe (FIFO), whose open and every read block until a writer comes, i.e. forever, or to a
device such as ``/dev/zero``, which a whole-file read turns into a ``MemoryError``. Every reader
of such a path opens it here (:func:`open_regular_file`, :func:`read_regular_file`): the open
never blocks, the descriptor is checked with ``fstat`` (what was opened, not what the path
named a moment earlier), anything but a regular file is refused in one line saying what it is,
and a file over the reader's cap is refused before it is read, naming its size and the cap.

:data:`PLAIN_NAME_PATTERN` is the rule for a name that becomes one path component (a file or
folder name built from input: a downloaded instance's, say): no separator, no ``..``.
:func:`open_url` opens a download's URL: ``file://`` through :func:`open_regular_file`, ``http``
and ``https`` through urllib, any other scheme refused.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
import urllib.parse
import urllib.request
from typing import BinaryIO

# A name that may become one path component: it starts with a letter, digit or "_" (so "." and
# ".." are out) and holds no separator. The same rule as orchestration's NAME_PATTERN.
PLAIN_NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
PLAIN_NAME_RULE = (
    "expected a plain name (1 to 128 letters, digits, '_', '.' or '-', not starting with '.' "
    "or '-'), never a path"
)
NOT_A_FILE = "expected a regular file"
_CHUNK = 64 * 1024
_FILE_KINDS = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFDIR: "a folder",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
}


class FileRefusedError(ValueError):
    """A path that leads to no regular file, or to one over the reader's cap.

    Attributes:
        path: the path as the caller named it.
        value: what was found there, in words (``"a named pipe (FIFO)"``, ``"70.0 MiB"``).
        problem: what was expected instead.
    """

    def __init__(self, path: str, value: str, problem: str) -> None:
        self.path = path
        self.value = value
        self.problem = problem
        super().__init__(f"{path}: {value}: {problem}")

    def __reduce__(self) -> tuple:
        return type(self), (self.path, self.value, self.problem)  # pickled whole, as Ray does


def is_plain_name(name: object) -> bool:
    """Whether ``name`` may become one path component (:data:`PLAIN_NAME_PATTERN`)."""
    return isinstance(name, str) and PLAIN_NAME_PATTERN.fullmatch(name) is not None


def size_in_words(size: int) -> str:
    """A byte count as a reader is told it: ``"512 bytes"``, ``"64 MiB"``, ``"2.3 GiB"``."""
    if size < 1024:
        return f"{size} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            return f"{size:.1f}".removesuffix(".0") + f" {unit}"
    raise AssertionError("unreachable")


def open_regular_file(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    follow_links: bool = True,
    source: str | None = None,
) -> BinaryIO:
    """``path`` opened for binary reading, when it is a regular file of at most ``max_bytes``.

    Args:
        path: the file.
        max_bytes: the largest size accepted (None: any size; a reader that streams).
        follow_links: False refuses a link at ``path`` itself (one swapped in after the caller
            resolved and checked the path).
        source: how errors name the file (default ``path``).

    Raises:
        FileRefusedError: ``path`` is a named pipe, a folder, a device or a socket, a link
            (``follow_links`` False), or a file larger than ``max_bytes``.
        OSError: the file is missing or unreadable (``FileNotFoundError``, ...).
    """
    name = str(path) if source is None else source
    # O_NONBLOCK: opening a FIFO would otherwise wait for a writer; O_NOCTTY: a terminal
    # device opened here must not become the process's controlling terminal.
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow_links else os.O_NOFOLLOW)
    try:
        descriptor = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP and not follow_links:
            problem = f"{NOT_A_FILE}, not a link swapped in after the path was checked"
            raise FileRefusedError(name, "a link", problem) from None
        if err.errno == errno.ENXIO:  # a socket: it cannot be opened at all
            raise FileRefusedError(name, "a socket", NOT_A_FILE) from None
        raise
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            kind = _FILE_KINDS.get(stat.S_IFMT(found.st_mode), "not a file")
            raise FileRefusedError(name, kind, NOT_A_FILE)
        if max_bytes is not None and found.st_size > max_bytes:
            raise FileRefusedError(name, size_in_words(found.st_size), over_cap(max_bytes))
        os.set_blocking(descriptor, True)  # a regular file: reads behave as usual
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular_file(
    path: str | os.PathLike[str],
    max_bytes: int,
    *,
    follow_links: bool = True,
    source: str | None = None,
) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them
    (:func:`open_regular_file`; a file that grew past the cap while read is refused too)."""
    name = str(path) if source is None else source
    with open_regular_file(path, max_bytes=max_bytes, follow_links=follow_links, source=name) as f:
        # A read of n bytes reserves n at once: ask for the size found (at most the cap, which
        # open_regular_file checked) and one byte more, so a 2 GiB cap costs no 2 GiB to read a
        # small file; a file that grew since is read on, up to one byte past the cap.
        size = os.fstat(f.fileno()).st_size
        data = f.read(size + 1)
        if len(data) > size:
            data += f.read(max_bytes + 1 - len(data))
    if len(data) > max_bytes:
        raise FileRefusedError(name, f"over {size_in_words(max_bytes)}", over_cap(max_bytes))
    return data


def copy_capped(
    stream: BinaryIO, out: BinaryIO, source: str, *, max_bytes: int, max_seconds: float
) -> int:
    """Copy ``stream`` (a download, say) to ``out`` up to ``max_bytes`` and ``max_seconds``;
    the bytes copied. Time is checked after each read, so a read that blocks overruns it by
    that read's own timeout at most.

    Raises:
        FileRefusedError: naming ``source``, once the stream gives more than ``max_bytes`` or is
            still giving after ``max_seconds`` (what was copied stays in ``out``).
    """
    deadline = time.monotonic() + max_seconds
    read = getattr(stream, "read1", stream.read)  # what has arrived; read(n) waits for all n
    copied = 0
    while chunk := read(_CHUNK):
        copied += len(chunk)
        if copied > max_bytes:
            raise FileRefusedError(source, f"over {size_in_words(max_bytes)}", over_cap(max_bytes))
        if time.monotonic() > deadline:
            problem = f"not done after {max_seconds:g} s, the most this reader waits"
            raise FileRefusedError(source, f"{size_in_words(copied)} so far", problem)
        out.write(chunk)
    return copied


def open_url(url: str, timeout: float) -> BinaryIO:
    """``url`` opened for reading: ``http(s)://`` through urllib (``timeout``: seconds one read
    may wait), ``file:///path`` as a local regular file (:func:`open_regular_file`: a FIFO or a
    device behind a mirror's URL is refused, not waited on).

    Raises:
        FileRefusedError: another scheme (``ftp``, ``data``), a ``file://`` URL naming a remote
            host, or a local path that is no regular file.
        OSError: the fetch fails (urllib's ``URLError``, a missing file).
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            problem = "a file:// URL names a local file (file:///path)"
            raise FileRefusedError(url, f"host {parts.netloc!r}", problem)
        return open_regular_file(urllib.request.url2pathname(parts.path), source=url)
    if parts.scheme not in ("http", "https"):
        problem = "expected an http://, https:// or file:// URL"
        raise FileRefusedError(url, f"scheme {parts.scheme!r}", problem)
    return urllib.request.urlopen(url, timeout=timeout)


def over_cap(max_bytes: int) -> str:
    """What a file over a reader's cap of ``max_bytes`` should have been, in words."""
    return f"larger than the {size_in_words(max_bytes)} this reader accepts"


__all__ = [
    "NOT_A_FILE",
    "PLAIN_NAME_PATTERN",
    "PLAIN_NAME_RULE",
    "FileRefusedError",
    "copy_capped",
    "is_plain_name",
    "open_regular_file",
    "open_url",
    "over_cap",
    "read_regular_file",
    "size_in_words",
]
