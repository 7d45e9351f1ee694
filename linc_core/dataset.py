"""Instance data sets on disk: a versioned Arrow/Parquet schema, shard I/O and streaming readers.

A data set is a folder (local, or any ``pyarrow.fs.FileSystem`` such as S3) holding Parquet
shards ``shard-00000.parquet``, ``shard-00001.parquet``, ... and, once complete, a
``manifest.json`` (written by ``orchestration.datagen``; see :data:`MANIFEST_NAME`). One
Parquet row is one instance. Columns (schema version :data:`SCHEMA_VERSION`):

=====================  ====================  ======  =======================================
column                 Arrow type            tasks   convention
=====================  ====================  ======  =======================================
``name``               string (nullable)     all     instance name; null when unnamed
``locs``               list<float32>, 2N     all     ``x0, y0, x1, y1, ...``; node 0 is the depot
                                                     for cvrp/cvrptw; raw coordinates
``grid_size``          float32               all     side of the square holding ``locs``
``demand``             list<float32>, N      cvrp,   raw demand units, depot first (0)
                                             cvrptw
``capacity``           float32               cvrp,   vehicle capacity, same units as demand
                                             cvrptw
``time_windows``       list<float32>, 2N     cvrptw  ``ready0, due0, ready1, due1, ...`` in
                                                     travel-time units; depot due = horizon
``service_time``       list<float32>, N      cvrptw  service duration per node (depot 0)
``travel_time_scale``  float32               cvrptw  alpha: travel time = distance x alpha
=====================  ====================  ======  =======================================

N counts every node (depot included). Lists are flattened row-major so a ``[B, N, 2]`` tensor
maps to B lists of 2N floats with no reordering. Fields a task does not store take the
:class:`~linc_core.instances.Instance` defaults on reading (demand 0, capacity inf, windows
``[0, inf]``, service 0, alpha 1); writing refuses an instance whose unstored fields differ
from those defaults, so the round trip is always exact (bit-identical float32 tensors).

Parquet key-value metadata (all strings): ``linc.schema_version``, ``linc.problem``,
``linc.num_nodes``, plus any extra keys a writer adds (the generator adds the shard's seed,
split and index). Readers refuse a shard whose version or problem is not what they expect,
naming the file, the field and the value (:class:`DatasetSchemaError`).

Writing is deterministic: fixed compression (zstd level 3), one row group per shard, no
dictionary encoding, no statistics and no timestamps, so the same instances always give
byte-identical files (for a given pyarrow version). Pages carry CRC checksums, verified on
reading, so a corrupted shard fails loudly instead of yielding different numbers.

Readers: :func:`read_shard` / :func:`load_dataset` load a whole shard or set (evaluation);
:func:`shard_entries` / :func:`load_shard` serve the streaming training reader
(:class:`linc_core.train.data.ShardedTrainingData`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import torch

from linc_core.instances import PROBLEM_KINDS, Instance, InstanceError

__all__ = [
    "MANIFEST_NAME",
    "METADATA_PREFIX",
    "SCHEMA_VERSION",
    "DatasetSchemaError",
    "ShardEntry",
    "dataset_schema",
    "instance_to_table",
    "list_shards",
    "load_dataset",
    "load_shard",
    "parquet_bytes",
    "read_manifest",
    "read_shard",
    "read_shard_bytes",
    "resolve_filesystem",
    "shard_name",
    "sha256_hex",
    "shard_entries",
    "table_to_instance",
]

SCHEMA_VERSION = 1
METADATA_PREFIX = "linc."
MANIFEST_NAME = "manifest.json"
SHARD_PATTERN = re.compile(r"^shard-(\d{5,})\.parquet$")

# Parquet writer settings. Changing any of them changes every shard's bytes and checksum, so
# they are part of the on-disk format just like the schema.
_PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 3,
    "use_dictionary": False,  # float lists do not repeat; dictionaries only add bytes
    "write_statistics": False,
    "write_page_checksum": True,
    "store_schema": True,
    "version": "2.6",
    "data_page_version": "1.0",
}

# Per task: the Instance fields stored, each with its Arrow type and per-node width
# (0 = one value per instance, k = k values per node).
_FIELD_LAYOUT: dict[str, tuple[pa.DataType, int]] = {
    "locs": (pa.list_(pa.float32()), 2),
    "grid_size": (pa.float32(), 0),
    "demand": (pa.list_(pa.float32()), 1),
    "capacity": (pa.float32(), 0),
    "time_windows": (pa.list_(pa.float32()), 2),
    "service_time": (pa.list_(pa.float32()), 1),
    "travel_time_scale": (pa.float32(), 0),
}
_TASK_FIELDS: dict[str, tuple[str, ...]] = {
    "tsp": ("locs", "grid_size"),
    "cvrp": ("locs", "grid_size", "demand", "capacity"),
    "cvrptw": tuple(_FIELD_LAYOUT),  # every field
}


class DatasetSchemaError(InstanceError):
    """A shard or manifest that does not follow the schema: names the file, field and value."""


def dataset_schema(problem: str) -> pa.Schema:
    """The Arrow schema of a shard of ``problem`` (without the key-value metadata)."""
    _check_problem(problem)
    columns = [pa.field("name", pa.string(), nullable=True)]
    columns += [
        pa.field(name, _FIELD_LAYOUT[name][0], nullable=False) for name in _TASK_FIELDS[problem]
    ]
    return pa.schema(columns)


def shard_name(index: int) -> str:
    """File name of shard ``index`` inside a data set folder."""
    return f"shard-{index:05d}.parquet"


def sha256_hex(data: bytes | memoryview | pa.Buffer) -> str:
    """Hex SHA-256 of a byte buffer (shard checksums in the manifest)."""
    return hashlib.sha256(memoryview(data)).hexdigest()


# ---------------------------------------------------------------------------- Instance <-> Arrow
def instance_to_table(instance: Instance, metadata: Mapping[str, object] | None = None) -> pa.Table:
    """Convert a float32 CPU batch to an Arrow table of B rows (one row per instance).

    Args:
        instance: batch with ``locs [B, N, 2]`` etc.; every tensor float32.
        metadata: extra key-value metadata; keys get the ``linc.`` prefix, values ``str()``.

    Returns:
        A table with :func:`dataset_schema` columns and the ``linc.*`` metadata.

    Raises:
        ValueError: a tensor is not float32, or a field the task does not store differs from
            the default the reader would restore (the round trip would not be exact).
    """
    problem = instance.problem
    stored = _TASK_FIELDS[problem]
    batch, num_nodes = instance.batch_size, instance.num_nodes
    defaults = _defaults(problem, batch, num_nodes)
    columns: dict[str, pa.Array] = {}
    names = instance.names
    columns["name"] = pa.array(list(names) if names is not None else [None] * batch, pa.string())
    for field_name, (_, width) in _FIELD_LAYOUT.items():
        tensor = getattr(instance, field_name).detach().cpu()
        if tensor.dtype != torch.float32:
            raise ValueError(
                f"instance_to_table: {field_name} is {tensor.dtype}; the schema stores float32 "
                "(cast with instance.to(dtype=torch.float32) first)."
            )
        if field_name not in stored:
            if not torch.equal(tensor, defaults[field_name]):
                raise ValueError(
                    f"instance_to_table: a {problem} data set does not store {field_name}, but "
                    "this batch holds non-default values that would be lost."
                )
            continue
        values = np.ascontiguousarray(tensor.numpy())
        if width == 0:
            columns[field_name] = pa.array(values, pa.float32())
        else:
            row_length = num_nodes * width
            offsets = pa.array(np.arange(0, (batch + 1) * row_length, row_length, dtype=np.int32))
            columns[field_name] = pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1)))
    schema = dataset_schema(problem).with_metadata(
        _metadata(problem, num_nodes, metadata or {}),
    )
    return pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)


def table_to_instance(table: pa.Table, source: str = "<table>") -> Instance:
    """Convert a shard table back to an :class:`Instance` (exact inverse of the writer).

    Args:
        table: a table carrying ``linc.*`` metadata, as written by :func:`instance_to_table`.
        source: where the table came from, named in every error.

    Returns:
        The batch, float32 CPU tensors; ``names`` is None when every name is null.

    Raises:
        DatasetSchemaError: wrong or missing schema version, unknown problem, missing column,
            wrong column type, nulls, or lists of the wrong length.
    """
    metadata = shard_metadata(table.schema, source)
    problem = metadata["problem"]
    num_nodes = _parse_int(metadata, "num_nodes", source)
    expected = dataset_schema(problem)
    for field in expected:
        if field.name not in table.column_names:
            raise DatasetSchemaError(source, field.name, None, f"missing column for {problem}")
        got = table.schema.field(field.name).type
        if got != field.type:
            raise DatasetSchemaError(source, field.name, str(got), f"expected type {field.type}")
    batch = table.num_rows
    tensors = _defaults(problem, batch, num_nodes)
    for field_name in _TASK_FIELDS[problem]:
        width = _FIELD_LAYOUT[field_name][1]
        column = table.column(field_name).combine_chunks()
        if column.null_count:
            raise DatasetSchemaError(source, field_name, "null", "nulls are not allowed")
        if width == 0:
            values = column.to_numpy()
            tensors[field_name] = torch.from_numpy(values.copy())
            continue
        row_length = num_nodes * width
        lengths = np.diff(column.offsets.to_numpy())
        bad = np.flatnonzero(lengths != row_length)
        if bad.size:
            raise DatasetSchemaError(
                source,
                f"{field_name}[{int(bad[0])}]",
                f"length {int(lengths[bad[0]])}",
                f"expected {row_length} values (num_nodes={num_nodes})",
            )
        flat = column.flatten().to_numpy()
        shape = (batch, num_nodes, 2) if width == 2 else (batch, num_nodes)
        tensors[field_name] = torch.from_numpy(flat.reshape(shape).copy())
    names_column = table.column("name").to_pylist()
    names = None if all(n is None for n in names_column) else tuple(names_column)
    if names is not None and any(n is None for n in names):
        raise DatasetSchemaError(source, "name", None, "either every row is named or none")
    return Instance(problem=problem, names=names, **tensors)  # type: ignore[arg-type]


def shard_metadata(schema: pa.Schema, source: str) -> dict[str, str]:
    """The ``linc.*`` key-value metadata of a shard, prefix stripped, version checked.

    Raises:
        DatasetSchemaError: no ``linc.schema_version`` (not a linc shard), another version,
            or an unknown problem.
    """
    raw = schema.metadata or {}
    metadata = {
        key.decode()[len(METADATA_PREFIX) :]: value.decode()
        for key, value in raw.items()
        if key.decode().startswith(METADATA_PREFIX)
    }
    version = metadata.get("schema_version")
    if version != str(SCHEMA_VERSION):
        raise DatasetSchemaError(
            source,
            f"{METADATA_PREFIX}schema_version",
            version,
            f"this linc reads schema version {SCHEMA_VERSION} only",
        )
    if metadata.get("problem") not in PROBLEM_KINDS:
        raise DatasetSchemaError(
            source, f"{METADATA_PREFIX}problem", metadata.get("problem"), "unknown problem"
        )
    return metadata


# ---------------------------------------------------------------------------- Parquet bytes
def parquet_bytes(table: pa.Table) -> pa.Buffer:
    """Serialise a shard table to Parquet in memory, deterministically (one row group).

    Returns:
        The whole file as one buffer, ready for an atomic write and a checksum.
    """
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=max(1, table.num_rows), **_PARQUET_OPTIONS)
    return sink.getvalue()


def read_shard_bytes(data: bytes | pa.Buffer, source: str) -> tuple[Instance, dict[str, str]]:
    """Parse a shard held in memory, verifying page checksums and the schema.

    Returns:
        ``(instance, metadata)`` with the ``linc.*`` metadata, prefix stripped.

    Raises:
        DatasetSchemaError: unreadable (truncated or corrupted) file or schema mismatch.
    """
    try:
        reader = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
        metadata = shard_metadata(reader.schema_arrow, source)
        table = reader.read(use_threads=False)
    except (OSError, pa.ArrowException) as err:
        raise DatasetSchemaError(source, "<file>", None, f"unreadable Parquet: {err}") from err
    instance = table_to_instance(table, source)
    return instance, metadata


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


# ---------------------------------------------------------------------------- helpers
def _check_problem(problem: str) -> None:
    if problem not in _TASK_FIELDS:
        raise ValueError(f"unknown problem {problem!r}; expected one of {tuple(_TASK_FIELDS)}")


def _defaults(problem: str, batch: int, num_nodes: int) -> dict[str, torch.Tensor]:
    """The values :meth:`Instance.from_arrays` gives the fields a task does not store."""
    blank = Instance.from_arrays(problem, torch.zeros(batch, num_nodes, 2), grid_size=1.0)
    unstored = ("demand", "capacity", "time_windows", "service_time", "travel_time_scale")
    return {name: getattr(blank, name) for name in unstored}


def _metadata(problem: str, num_nodes: int, extra: Mapping[str, object]) -> dict[str, str]:
    metadata = {f"{METADATA_PREFIX}{key}": str(value) for key, value in sorted(extra.items())}
    metadata.update(
        {
            f"{METADATA_PREFIX}schema_version": str(SCHEMA_VERSION),
            f"{METADATA_PREFIX}problem": problem,
            f"{METADATA_PREFIX}num_nodes": str(num_nodes),
        }
    )
    return metadata


def _parse_int(metadata: Mapping[str, str], key: str, source: str) -> int:
    value = metadata.get(key)
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise DatasetSchemaError(
            source, f"{METADATA_PREFIX}{key}", value, "expected an integer"
        ) from None
