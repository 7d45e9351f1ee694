"""One atomic file write: a reader sees the old file or the whole new one, never a prefix.

Local files (a path, or a path on a ``pyarrow.fs.LocalFileSystem``): the content goes to a
hidden temporary sibling ``.NAME.tmp-<hex>`` in the target's folder (same file system, so the
rename is atomic), is optionally flushed to disk (``fsync``), made ``0644`` (outputs are meant
to be shared; ``mkstemp`` would leave ``0600``), optionally checked, and renamed into place.

Other pyarrow file systems (S3 and alike): an object becomes visible only once its upload
completes, so the content is rendered in memory first (a failing writer uploads nothing) and
written to the target key directly; with a ``check`` it goes to a temporary key first, which
is checked and then moved into place.

On any failure (writer, check, rename) the temporary file is removed and the target is left as
it was. A killed process can still leave a temporary behind; :func:`is_temporary` recognises
its name so that a later run can clean up.
"""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.fs as pafs

__all__ = ["TEMP_MARKER", "is_temporary", "write_atomic"]

TEMP_MARKER = ".tmp-"
_FILE_MODE = 0o644

Content = bytes | bytearray | memoryview | pa.Buffer
Writer = Callable[[IO[bytes]], object]


def is_temporary(name: str) -> bool:
    """Whether a file name is one of :func:`write_atomic`'s temporaries."""
    return TEMP_MARKER in name


def write_atomic(
    target: str | os.PathLike[str],
    data: Content | None = None,
    *,
    writer: Writer | None = None,
    check: Callable[[Any], object] | None = None,
    filesystem: pafs.FileSystem | None = None,
    fsync: bool = False,
) -> Path | str:
    """Write ``data`` (or what ``writer`` writes) to ``target`` atomically.

    Args:
        target: the final path: a local path, or a path inside ``filesystem``.
        data: the whole content. Give exactly one of ``data`` and ``writer``.
        writer: called with a binary file open for writing (e.g. ``torch.save(obj, f)``).
        check: called with the temporary path (a ``Path`` locally, a ``str`` on other file
            systems) once the content is complete; raise to reject it. Its exception
            propagates; the target is left as it was.
        filesystem: a pyarrow file system; ``None`` means the local one.
        fsync: flush a local file to disk before the rename (checkpoints: a crash right after
            the rename must not leave an empty file).

    Returns:
        ``target``: a ``Path`` for local files, else the ``str`` path inside ``filesystem``.
    """
    if (data is None) == (writer is None):
        raise ValueError("write_atomic: give exactly one of data and writer.")
    write = writer if writer is not None else _content_writer(data)  # type: ignore[arg-type]
    if filesystem is None or isinstance(filesystem, pafs.LocalFileSystem):
        return _write_local(Path(target), write, check, fsync)
    return _write_object(filesystem, str(target), write, check)


def _content_writer(data: Content) -> Writer:
    def write(out: IO[bytes]) -> None:
        out.write(data)  # type: ignore[arg-type]

    return write


def _temporary_name(name: str) -> str:
    return f".{name}{TEMP_MARKER}{uuid.uuid4().hex}"


def _write_local(
    target: Path, write: Writer, check: Callable[[Any], object] | None, fsync: bool
) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.parent / _temporary_name(target.name)
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
    try:
        with os.fdopen(handle, "wb") as out:
            write(out)
            if fsync:
                out.flush()
                os.fsync(out.fileno())
        os.chmod(temporary, _FILE_MODE)  # os.open's mode is narrowed by the umask
        if check is not None:
            check(temporary)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return target


def _write_object(
    filesystem: pafs.FileSystem,
    target: str,
    write: Writer,
    check: Callable[[Any], object] | None,
) -> str:
    buffer = io.BytesIO()
    write(buffer)
    content = buffer.getbuffer()
    if check is None:
        with filesystem.open_output_stream(target) as stream:
            stream.write(content)
        return target
    folder, _, name = target.rpartition("/")
    temporary = f"{folder}/{_temporary_name(name)}" if folder else _temporary_name(name)
    try:
        with filesystem.open_output_stream(temporary) as stream:
            stream.write(content)
        check(temporary)
        filesystem.move(temporary, target)
    finally:
        if filesystem.get_file_info(temporary).type != pafs.FileType.NotFound:
            filesystem.delete_file(temporary)
    return target
