"""A data set on a file system (a local folder or ``s3://...``): its manifest, its Parquet
shards (:mod:`linc_core.instances.parquet`), and the whole set read back as one batch."""

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

MANIFEST_NAME = "manifest.json"
SHARD_PATTERN = re.compile(r"^shard-(\d{5,})\.parquet$")


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


def _read_file(fs: pafs.FileSystem, path: str) -> pa.Buffer:
    with fs.open_input_stream(path) as stream:
        return stream.read_buffer()


def read_shard(path: str, filesystem: pafs.FileSystem | None = None) -> Instance:
    """Read one shard file (local path, URI, or path inside ``filesystem``)."""
    fs, resolved = resolve_filesystem(path, filesystem)
    return read_shard_bytes(_read_file(fs, resolved), path)[0]


def read_manifest(root: str, filesystem: pafs.FileSystem | None = None) -> dict | None:
    """The data set's ``manifest.json`` as a dict, or None if there is none (yet)."""
    fs, resolved = resolve_filesystem(root, filesystem)
    path = f"{resolved}/{MANIFEST_NAME}"
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    manifest = json.loads(_read_file(fs, path).to_pybytes())
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise DatasetSchemaError(
            f"{root}/{MANIFEST_NAME}", "schema_version", version, f"expected {SCHEMA_VERSION}"
        )
    return manifest


def list_shards(root: str, filesystem: pafs.FileSystem | None = None) -> list[str]:
    """Shard file names in ``root``, in index order (the manifest's list when there is one)."""
    manifest = read_manifest(root, filesystem)
    if manifest is not None:
        return [shard["file"] for shard in manifest["shards"]]
    fs, resolved = resolve_filesystem(root, filesystem)
    infos = fs.get_file_info(pafs.FileSelector(resolved, allow_not_found=True))
    return sorted(i.base_name for i in infos if SHARD_PATTERN.match(i.base_name))


@dataclass(frozen=True)
class ShardEntry:
    """One shard of a data set: file name, row count and (from a manifest) its sha256."""

    file: str
    rows: int
    sha256: str | None


def shard_entries(root: str, fs: pafs.FileSystem, path: str) -> list[ShardEntry]:
    """Shards with row counts: from the manifest, else from each file's Parquet footer.

    Args:
        root: the data set as the caller named it (for error messages).
        fs, path: its file system and the path inside it (:func:`resolve_filesystem`).
    """
    manifest = read_manifest(path, fs)
    if manifest is not None:
        return [ShardEntry(s["file"], int(s["rows"]), s["sha256"]) for s in manifest["shards"]]
    entries = []
    for file in list_shards(path, fs):
        with fs.open_input_file(f"{path}/{file}") as handle:
            entries.append(ShardEntry(file, pq.ParquetFile(handle).metadata.num_rows, None))
    if not entries:
        raise FileNotFoundError(f"{root}: no manifest.json and no shard-*.parquet files")
    return entries


def load_shard(root: str, fs: pafs.FileSystem, path: str, entry: ShardEntry) -> Instance:
    """Read one shard, checking its sha256 (when known) and row count."""
    source = f"{root}/{entry.file}"
    data = _read_file(fs, f"{path}/{entry.file}")
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
    "SHARD_PATTERN",
    "ShardEntry",
    "list_shards",
    "load_dataset",
    "load_shard",
    "read_manifest",
    "read_shard",
    "resolve_filesystem",
    "shard_entries",
    "shard_name",
]
