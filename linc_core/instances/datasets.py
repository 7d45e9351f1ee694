"""A data set on a file system (a local folder or ``s3://...``): its manifest, its Parquet
shards (:mod:`linc_core.instances.parquet`), and the whole set read back as one batch.

A folder others can write is read as untrusted: a member is a plain file name, a link in it
must end inside it, and on a local disk only a regular file is read (a named pipe would block
the reader forever), opened without following a link swapped in after those checks. A file is
read whole into memory, so one over its cap (:data:`MAX_MANIFEST_BYTES`,
:data:`MAX_SHARD_BYTES`) is refused by its size before a byte of it is read, locally and on an
object store alike."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from linc_core.instances import Instance
from linc_core.instances.parquet import (
    SCHEMA_VERSION,
    DatasetSchemaError,
    read_shard_bytes,
    sha256_hex,
)
from linc_core.utils.files import (
    FileRefusedError,
    open_regular_file,
    over_cap,
    read_regular_file,
    size_in_words,
)

MANIFEST_NAME = "manifest.json"
# The one form of a shard's file name, from a listing or a manifest: a plain name inside the
# data set folder (no separator, no "..": a manifest cannot point at another folder's files).
SHARD_PATTERN = re.compile(r"shard-([0-9]{5,})\.parquet")
# Most rows a manifest may give one shard: readers size a row order by it before the shard is
# read, and a shard is read whole (1e7 rows of 20 nodes are already gigabytes).
MAX_SHARD_ROWS = 10_000_000
# Largest manifest read: the generator's entry for a shard takes about 230 bytes, so 64 MiB
# would list some 290,000 shards; the default config writes 10 (10,000 instances, 1,000 a shard).
MAX_MANIFEST_BYTES = 64 * 1024**2
# Largest shard read, whole, into memory. A node takes 14 bytes on disk in a CVRPTW shard (7 in
# a TSP one), so the default shard (1,000 instances of 100 customers) is 1.4 MB, and 1,000
# instances of the most customers a run accepts (linc_core.runs.plan.MAX_CUSTOMERS, 100,000)
# are 1.4 GB. 2 GiB leaves headroom above that (1,400 times the default shard); a set of bigger
# shards, which must each fit in memory whole, is better written with a smaller shard_size.
MAX_SHARD_BYTES = 2 * 1024**3
_SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")


def shard_name(index: int) -> str:
    """File name of shard ``index`` inside a data set folder."""
    return f"shard-{index:05d}.parquet"


def resolve_filesystem(
    uri: str, filesystem: pafs.FileSystem | None = None
) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path)`` for a data set location.

    With ``filesystem`` given, ``uri`` is a path inside it (``bucket/prefix`` for S3). Otherwise
    ``uri`` is a local path or any URI pyarrow understands (``s3://bucket/prefix?...``).
    """
    if filesystem is not None:
        return filesystem, uri.rstrip("/")
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path.rstrip("/")


def _shown(root: str) -> str:
    """``root`` as named in errors: a URI without its query, which may hold credentials."""
    return root.split("?", 1)[0] if "://" in root else root


def _local_path(fs: pafs.FileSystem, path: str) -> str | None:
    """``path`` as the operating system names it when ``fs`` is a local disk, else None."""
    if isinstance(fs, pafs.SubTreeFileSystem) and isinstance(fs.base_fs, pafs.LocalFileSystem):
        return os.path.join(fs.base_path, path.lstrip("/"))
    return path if isinstance(fs, pafs.LocalFileSystem) else None


def _member(root: str, fs: pafs.FileSystem, path: str, file: str) -> tuple[str, str | None]:
    """``(source, local)`` of ``file`` of the data set folder ``path``: how errors name it, and
    on a local disk the file it resolves to (None on an object store, where a key is a name,
    never a link). Refuses a name that is not a plain file name and, on a local disk, a link
    that leads out of the folder. Links inside it stay allowed: the file they resolve to is
    read, and must then be that very file (``follow_links=False``), so a link swapped in after
    this check is refused too."""
    source = f"{_shown(root)}/{file}"
    if file != MANIFEST_NAME and not SHARD_PATTERN.fullmatch(file):
        raise DatasetSchemaError(_shown(root), "file", _short(file), _SHARD_NAME_RULE)
    folder = _local_path(fs, path)
    if folder is None:
        return source, None
    target = os.path.realpath(os.path.join(folder, file))
    if os.path.dirname(target) != os.path.realpath(folder):  # where every link in it ends
        raise DatasetSchemaError(source, "<file>", target, "a link leading out of the data set")
    return source, target


def _max_bytes(file: str) -> int:
    """The most bytes read of a data set's ``file``: the manifest's cap or a shard's."""
    return MAX_MANIFEST_BYTES if file == MANIFEST_NAME else MAX_SHARD_BYTES


def read_member(root: str, fs: pafs.FileSystem, path: str, file: str) -> bytes | pa.Buffer:
    """The bytes of ``file`` (the manifest or a shard) of the data set folder ``path``, checked
    by :func:`_member` and read up to its cap (:func:`_read_capped`)."""
    source, local = _member(root, fs, path, file)
    return _read_capped(source, fs, f"{path}/{file}", local, _max_bytes(file), follow_links=False)


def _open_member(root: str, fs: pafs.FileSystem, path: str, file: str) -> pa.NativeFile:
    """``file`` of the data set folder ``path`` opened for random access (a shard's footer),
    checked by :func:`_member` and refused when over its cap, as :func:`read_member` would."""
    source, local = _member(root, fs, path, file)
    if local is None:
        member = f"{path}/{file}"
        _check_remote_size(source, fs, member, _max_bytes(file))
        return fs.open_input_file(member)
    return _open_local(source, local, follow_links=False, max_bytes=_max_bytes(file))


def _open_local(
    source: str, path: str, *, follow_links: bool, max_bytes: int | None = None
) -> pa.NativeFile:
    """Open a local file that must be a regular one of at most ``max_bytes``, without ever
    blocking (:func:`linc_core.utils.files.open_regular_file`); with ``follow_links`` False, a
    link at ``path`` (one swapped in since ``path`` was resolved) is refused."""
    try:
        handle = open_regular_file(
            path, max_bytes=max_bytes, follow_links=follow_links, source=source
        )
    except FileRefusedError as err:
        raise DatasetSchemaError(source, "<file>", err.value, err.problem) from None
    return pa.PythonFile(handle, mode="r")


def _read_capped(
    source: str,
    fs: pafs.FileSystem,
    path: str,
    local: str | None,
    max_bytes: int,
    *,
    follow_links: bool,
) -> bytes | pa.Buffer:
    """The bytes of ``path`` in ``fs`` (``local``: the same file on a local disk), at most
    ``max_bytes`` of them: a bigger file is refused by its size before it is read, and one that
    grows past the cap while it is read, as soon as the read passes the cap.

    Raises:
        DatasetSchemaError: naming ``source``, what was found (its size, "a named pipe
            (FIFO)"...) and the cap or what was expected.
    """
    if local is not None:  # a regular file only, opened without blocking
        try:
            return read_regular_file(local, max_bytes, follow_links=follow_links, source=source)
        except FileRefusedError as err:
            raise DatasetSchemaError(source, "<file>", err.value, err.problem) from None
    size = _check_remote_size(source, fs, path, max_bytes)
    # Some file systems allocate what a read asks for: ask for the size listed, and one byte
    # more to see a file that grew since. One grown past the cap is refused; one that changed
    # under it is read only in part, which its sha256 or its Parquet footer then refuses.
    want = max_bytes if size is None else min(size, max_bytes)
    with fs.open_input_stream(path) as stream:
        data = stream.read_buffer(want + 1)
    if data.size > max_bytes:
        refused = f"over {size_in_words(max_bytes)}"
        raise DatasetSchemaError(source, "<file>", refused, over_cap(max_bytes))
    return data


def _check_remote_size(source: str, fs: pafs.FileSystem, path: str, max_bytes: int) -> int | None:
    """The size ``fs`` (an object store) lists for ``path`` (its HEAD request: no byte of the
    file is read), refused when over ``max_bytes``; None when it lists none."""
    size = fs.get_file_info(path).size
    if size is not None and size > max_bytes:
        raise DatasetSchemaError(source, "<file>", size_in_words(size), over_cap(max_bytes))
    return size


def read_shard(path: str, filesystem: pafs.FileSystem | None = None) -> Instance:
    """Read one shard file (local path, URI, or path inside ``filesystem``)."""
    fs, resolved = resolve_filesystem(path, filesystem)
    local = _local_path(fs, resolved)
    data = _read_capped(_shown(path), fs, resolved, local, MAX_SHARD_BYTES, follow_links=True)
    return read_shard_bytes(data, _shown(path))[0]


@dataclass(frozen=True)
class ShardEntry:
    """One shard of a data set: file name, row count and (from a manifest) its sha256."""

    file: str
    rows: int
    sha256: str | None


def read_manifest(root: str, filesystem: pafs.FileSystem | None = None) -> dict | None:
    """The data set's ``manifest.json`` as a dict (checked: :func:`manifest_entries`), or
    None if there is none (yet)."""
    found = _read_manifest(root, *resolve_filesystem(root, filesystem))
    return None if found is None else found[0]


def _read_manifest(
    root: str, fs: pafs.FileSystem, path: str
) -> tuple[dict, list[ShardEntry]] | None:
    # Anything there but a file (a FIFO, a folder) is refused as it is opened, not skipped.
    if fs.get_file_info(f"{path}/{MANIFEST_NAME}").type == pafs.FileType.NotFound:
        return None
    source = f"{_shown(root)}/{MANIFEST_NAME}"
    data = read_member(root, fs, path, MANIFEST_NAME)
    try:
        # JSON is UTF-8 (RFC 8259); json.loads(bytes) would guess UTF-16/32 from the bytes.
        manifest = json.loads(bytes(data).decode("utf-8"))
    except (ValueError, RecursionError) as err:
        raise DatasetSchemaError(source, "<file>", None, f"not JSON: {err}") from None
    if not isinstance(manifest, dict):
        raise DatasetSchemaError(source, "<top level>", _short(manifest), "expected an object")
    return manifest, manifest_entries(manifest, source)


def manifest_entries(manifest: dict, source: str) -> list[ShardEntry]:
    """The shards a manifest lists, each checked: a shard file name (:data:`SHARD_PATTERN`),
    ``rows`` an integer in ``[0, MAX_SHARD_ROWS]``, ``sha256`` 64 lowercase hex digits.

    Raises:
        DatasetSchemaError: naming ``source``, the field (e.g. ``shards[3].file``) and value.
    """
    version = manifest.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise DatasetSchemaError(
            source, "schema_version", _short(version), f"expected {SCHEMA_VERSION}"
        )
    shards = manifest.get("shards")
    if not isinstance(shards, list):
        raise DatasetSchemaError(source, "shards", _short(shards), "expected a list of shards")
    if not shards:  # no instances to read: Instance.concat's error, naming nothing
        raise DatasetSchemaError(source, "shards", "[]", "expected 1 or more shards")
    entries = []
    for index, shard in enumerate(shards):
        where = f"shards[{index}]"
        if not isinstance(shard, dict):
            raise DatasetSchemaError(source, where, _short(shard), "expected an object")
        file, rows, sha256 = shard.get("file"), shard.get("rows"), shard.get("sha256")
        if not (isinstance(file, str) and SHARD_PATTERN.fullmatch(file)):
            raise DatasetSchemaError(source, f"{where}.file", _short(file), _SHARD_NAME_RULE)
        if type(rows) is not int or not 1 <= rows <= MAX_SHARD_ROWS:
            raise DatasetSchemaError(
                source, f"{where}.rows", _short(rows), f"expected an integer 1 to {MAX_SHARD_ROWS}"
            )
        if not (isinstance(sha256, str) and _SHA256_PATTERN.fullmatch(sha256)):
            raise DatasetSchemaError(
                source, f"{where}.sha256", _short(sha256), "expected 64 lowercase hex digits"
            )
        entries.append(ShardEntry(file, rows, sha256))
    return entries


_SHARD_NAME_RULE = "expected a file name shard-NNNNN.parquet inside the data set folder"


def _short(value: object) -> object:
    """A manifest value as shown in an error: long text cut, containers by their JSON kind."""
    if isinstance(value, str):
        return value if len(value) <= 100 else f"{value[:100]}..."
    if isinstance(value, dict | list):
        return f"<a JSON {'object' if isinstance(value, dict) else 'array'}>"
    return value


def list_shards(root: str, filesystem: pafs.FileSystem | None = None) -> list[str]:
    """Shard file names in ``root``, in index order (the manifest's list when there is one)."""
    fs, resolved = resolve_filesystem(root, filesystem)
    found = _read_manifest(root, fs, resolved)
    if found is not None:
        return [entry.file for entry in found[1]]
    infos = fs.get_file_info(pafs.FileSelector(resolved, allow_not_found=True))
    return sorted(i.base_name for i in infos if SHARD_PATTERN.fullmatch(i.base_name))


def shard_entries(root: str, fs: pafs.FileSystem, path: str) -> list[ShardEntry]:
    """Shards with row counts: from the manifest, else from each file's Parquet footer.

    Args:
        root: the data set as the caller named it (for error messages).
        fs, path: its file system and the path inside it (:func:`resolve_filesystem`).
    """
    found = _read_manifest(root, fs, path)
    if found is not None:
        return found[1]
    entries = []
    for file in list_shards(path, fs):
        with _open_member(root, fs, path, file) as handle:
            entries.append(ShardEntry(file, pq.ParquetFile(handle).metadata.num_rows, None))
    if not entries:
        raise FileNotFoundError(f"{_shown(root)}: no manifest.json and no shard-*.parquet files")
    return entries


def load_shard(root: str, fs: pafs.FileSystem, path: str, entry: ShardEntry) -> Instance:
    """Read one shard, checking its sha256 (when known) and row count."""
    source = f"{_shown(root)}/{entry.file}"
    data = read_member(root, fs, path, entry.file)
    if entry.sha256 is not None and sha256_hex(data) != entry.sha256:
        raise DatasetSchemaError(source, "sha256", sha256_hex(data), "differs from the manifest")
    instance = read_shard_bytes(data, source)[0]
    if instance.batch_size != entry.rows:
        raise DatasetSchemaError(source, "rows", instance.batch_size, f"expected {entry.rows}")
    return instance


def load_dataset(root: str, filesystem: pafs.FileSystem | None = None) -> Instance:
    """Load a whole data set (an evaluation set) as one batch, shards in index order.

    Checksums are verified against the manifest when there is one.
    """
    fs, path = resolve_filesystem(root, filesystem)
    entries = shard_entries(root, fs, path)
    return Instance.concat([load_shard(root, fs, path, e) for e in entries])


__all__ = [
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "MAX_SHARD_BYTES",
    "MAX_SHARD_ROWS",
    "SHARD_PATTERN",
    "ShardEntry",
    "list_shards",
    "load_dataset",
    "load_shard",
    "manifest_entries",
    "read_member",
    "read_manifest",
    "read_shard",
    "resolve_filesystem",
    "shard_entries",
    "shard_name",
]
