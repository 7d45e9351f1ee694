"""Instance data sets on disk: a versioned Arrow/Parquet schema, shard I/O and streaming readers.

A data set is a folder (local, or any ``pyarrow.fs.FileSystem`` such as S3) holding Parquet
shards ``shard-00000.parquet``, ``shard-00001.parquet``, ... and, once complete, a
``manifest.json`` (written by ``orchestration.data.generation``; see :data:`MANIFEST_NAME`). One
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

Which columns a problem stores is its spec's ``instance_fields`` (the table gives the built-in
problems'); a problem's ``extra_fields`` follow as float32 columns (one value per instance, or
``w`` values per node in a list of ``w N``).

N counts every node (depot included). Lists are flattened row-major so a ``[B, N, 2]`` tensor
maps to B lists of 2N floats with no reordering. Fields a task does not store take the
:class:`~linc_core.instances.Instance` defaults on reading (demand 0, capacity inf, windows
``[0, inf]``, service 0, alpha 1); writing refuses an instance whose unstored fields differ
from those defaults, so the round trip is always exact (bit-identical float32 tensors).

Parquet key-value metadata (all strings): ``linc.schema_version``, ``linc.problem``,
``linc.num_nodes``, plus any extra keys a writer adds (the generator adds the shard's seed,
split and index). Readers refuse a shard whose version or problem is not what they expect,
naming the file, the field and the value (:class:`DatasetSchemaError`), and, before anything
is decompressed, one whose pages claim more than its rows and ``linc.num_nodes`` hold
(:mod:`linc_core.instances.parquet_pages`: a few kilobytes can otherwise decode to gigabytes).

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
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from linc_core.instances import Instance, InstanceError
from linc_core.instances.batch import extra_field_shape
from linc_core.instances.parquet_pages import check_decoded_size
from linc_core.instances.validation import validate_instance
from linc_core.problems.spec import problem_names, problem_spec

SCHEMA_VERSION = 1
METADATA_PREFIX = "linc."
# Largest ``linc.num_nodes`` a shard may claim: a list column's offsets are int32, so one row
# of ``locs`` (2N values) holds fewer than 2**31 values.
MAX_NUM_NODES = 2**30 - 1

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

# The Instance fields a problem may store (its spec's instance_fields), each with its Arrow type
# and per-node width (0 = one value per instance, k = k values per node).
_FIELD_LAYOUT: dict[str, tuple[pa.DataType, int]] = {
    "locs": (pa.list_(pa.float32()), 2),
    "grid_size": (pa.float32(), 0),
    "demand": (pa.list_(pa.float32()), 1),
    "capacity": (pa.float32(), 0),
    "time_windows": (pa.list_(pa.float32()), 2),
    "service_time": (pa.list_(pa.float32()), 1),
    "travel_time_scale": (pa.float32(), 0),
}


def _layout(problem: str) -> dict[str, tuple[pa.DataType, int]]:
    """The stored columns of ``problem`` after ``name``: field -> (Arrow type, per-node width)."""
    spec = problem_spec(problem)
    layout = {name: _FIELD_LAYOUT[name] for name in spec.instance_fields}
    for name, width in spec.extra_fields.items():
        layout[name] = (pa.list_(pa.float32()) if width else pa.float32(), width)
    return layout


class DatasetSchemaError(InstanceError):
    """A shard or manifest that does not follow the schema: names the file, field and value."""


def dataset_schema(problem: str) -> pa.Schema:
    """The Arrow schema of a shard of ``problem`` (without the key-value metadata)."""
    columns = [pa.field("name", pa.string(), nullable=True)]
    columns += [
        pa.field(name, kind, nullable=False) for name, (kind, _) in _layout(problem).items()
    ]
    return pa.schema(columns)


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
    layout = _layout(problem)
    batch, num_nodes = instance.batch_size, instance.num_nodes
    defaults = _defaults(problem, batch, num_nodes)
    columns: dict[str, pa.Array] = {}
    names = instance.names
    columns["name"] = pa.array(list(names) if names is not None else [None] * batch, pa.string())
    tensors = {field_name: getattr(instance, field_name) for field_name in _FIELD_LAYOUT}
    for field_name, (_, width) in (_FIELD_LAYOUT | layout).items():
        tensor = tensors.get(field_name, instance.extras.get(field_name))
        tensor = tensor.detach().cpu()  # type: ignore[union-attr]
        if tensor.dtype != torch.float32:
            raise ValueError(
                f"instance_to_table: {field_name} is {tensor.dtype}; the schema stores float32 "
                "(cast with instance.to(dtype=torch.float32) first)."
            )
        if field_name not in layout:
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
        DatasetSchemaError: wrong or missing schema version, unknown problem, bad
            ``linc.num_nodes``, missing column, wrong column type, nulls, lists of the wrong
            length, or values :func:`~linc_core.instances.validate_instance` refuses (the
            error then names the row, e.g. ``shard.parquet (row 3: name)``).
    """
    metadata = shard_metadata(table.schema, source)
    problem = metadata["problem"]
    num_nodes = _parse_num_nodes(metadata, source)
    expected = dataset_schema(problem)
    for field in expected:
        if field.name not in table.column_names:
            raise DatasetSchemaError(source, field.name, None, f"missing column for {problem}")
        got = table.schema.field(field.name).type
        if got != field.type:
            raise DatasetSchemaError(source, field.name, str(got), f"expected type {field.type}")
    batch = table.num_rows
    # Every column is checked against num_nodes before anything sized by it is allocated: the
    # metadata is the file's word only, the columns are the data actually read.
    columns = {}
    for field_name, (_, width) in _layout(problem).items():
        column = table.column(field_name).combine_chunks()
        if column.null_count:
            raise DatasetSchemaError(source, field_name, "null", "nulls are not allowed")
        columns[field_name] = column
        if width == 0:
            continue
        row_length = num_nodes * width
        lengths = np.diff(column.offsets.to_numpy())
        bad = np.flatnonzero(lengths != row_length)
        if bad.size:
            raise DatasetSchemaError(
                source,
                f"{field_name}[{int(bad[0])}]",
                f"length {int(lengths[bad[0]])}",
                f"expected {row_length} values ({METADATA_PREFIX}num_nodes={num_nodes})",
            )
    tensors = _defaults(problem, batch, num_nodes)
    for field_name, (_, width) in _layout(problem).items():
        column = columns[field_name]
        if width == 0:
            tensors[field_name] = torch.from_numpy(column.to_numpy().copy())
            continue
        flat = column.flatten().to_numpy()
        shape = (batch, num_nodes, width) if width > 1 else (batch, num_nodes)
        tensors[field_name] = torch.from_numpy(flat.reshape(shape).copy())
    names_column = table.column("name").to_pylist()
    names = None if all(n is None for n in names_column) else tuple(names_column)
    if names is not None and any(n is None for n in names):
        raise DatasetSchemaError(source, "name", None, "either every row is named or none")
    extras = {name: tensors.pop(name) for name in problem_spec(problem).extra_fields}
    instance = Instance(problem=problem, names=names, extras=extras, **tensors)  # type: ignore[arg-type]
    try:
        validate_instance(instance, source)
    except InstanceError as err:  # the data checks every reader runs, as a shard's error
        raise DatasetSchemaError(err.source, err.field, err.value, err.problem) from None
    return instance


def shard_metadata(schema: pa.Schema, source: str) -> dict[str, str]:
    """The ``linc.*`` key-value metadata of a shard, prefix stripped, version checked.

    Raises:
        DatasetSchemaError: no ``linc.schema_version`` (not a linc shard), another version,
            or an unknown problem.
    """
    metadata = {}
    for key, value in (schema.metadata or {}).items():
        try:
            key_text, value_text = key.decode(), value.decode()
        except UnicodeDecodeError:
            raise DatasetSchemaError(source, "<metadata>", key, "not UTF-8 text") from None
        if key_text.startswith(METADATA_PREFIX):
            metadata[key_text[len(METADATA_PREFIX) :]] = value_text
    version = metadata.get("schema_version")
    if version != str(SCHEMA_VERSION):
        raise DatasetSchemaError(
            source,
            f"{METADATA_PREFIX}schema_version",
            version,
            f"this linc reads schema version {SCHEMA_VERSION} only",
        )
    if metadata.get("problem") not in problem_names():
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
        DatasetSchemaError: unreadable (truncated or corrupted) file, schema mismatch, or pages
            claiming more than a shard of their rows and ``linc.num_nodes`` holds.
    """
    try:
        reader = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
        metadata = shard_metadata(reader.schema_arrow, source)
        # Only the schema's columns are read, each bounded first (parquet_pages: a small file
        # can claim gigabytes); a missing one is named by table_to_instance.
        num_nodes = _parse_num_nodes(metadata, source)
        widths = {"name": 0} | {n: w for n, (_, w) in _layout(metadata["problem"]).items()}
        row_values = {
            n: w * num_nodes or 1 for n, w in widths.items() if n in reader.schema_arrow.names
        }
        try:
            check_decoded_size(reader.metadata, data, row_values, num_nodes, source)
        except InstanceError as err:
            raise DatasetSchemaError(err.source, err.field, err.value, err.problem) from None
        table = reader.read(list(row_values), use_threads=False)
    except (OSError, pa.ArrowException) as err:
        raise DatasetSchemaError(source, "<file>", None, f"unreadable Parquet: {err}") from err
    instance = table_to_instance(table, source)
    return instance, metadata


# ---------------------------------------------------------------------------- helpers
def _defaults(problem: str, batch: int, num_nodes: int) -> dict[str, torch.Tensor]:
    """The values :meth:`Instance.from_arrays` gives the fields a problem does not store."""
    extras = {
        name: torch.zeros(extra_field_shape(width, batch, num_nodes))
        for name, width in problem_spec(problem).extra_fields.items()
    }
    blank = Instance.from_arrays(
        problem, torch.zeros(batch, num_nodes, 2), grid_size=1.0, extras=extras
    )
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


def _parse_num_nodes(metadata: Mapping[str, str], source: str) -> int:
    """``linc.num_nodes``: a plain decimal integer in ``[1, MAX_NUM_NODES]``."""
    value = metadata.get("num_nodes")
    plain = value is not None and value.isascii() and value.isdecimal() and len(value) <= 12
    if not (plain and 1 <= int(value) <= MAX_NUM_NODES):  # type: ignore[arg-type]
        raise DatasetSchemaError(
            source,
            f"{METADATA_PREFIX}num_nodes",
            value,
            f"expected an integer from 1 to {MAX_NUM_NODES}",
        )
    return int(value)  # type: ignore[arg-type]


__all__ = [
    "DatasetSchemaError",
    "MAX_NUM_NODES",
    "METADATA_PREFIX",
    "SCHEMA_VERSION",
    "dataset_schema",
    "instance_to_table",
    "parquet_bytes",
    "read_shard_bytes",
    "sha256_hex",
    "shard_metadata",
    "table_to_instance",
]
