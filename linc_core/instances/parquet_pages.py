"""What a shard's Parquet pages will make the reader allocate, bounded before it reads them.

A footer's sizes are the file's word only: Arrow's page reader allocates what each page header
says (``uncompressed_page_size``) and decodes as many values as it says (``num_values``), so a
few kilobytes of hostile file can make it allocate gigabytes (a "compression bomb"), whatever
the footer claims. :func:`check_decoded_size` therefore walks every column chunk's page headers
the way Arrow does and bounds their claims (and the footer's) by what a shard of the declared
shape holds, for :func:`linc_core.instances.parquet.read_shard_bytes` to call before reading.

Page headers are Thrift compact structs (``parquet.thrift``); this reads only that encoding,
with no code run and every length checked against the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from linc_core.instances.batch import InstanceError

# What a valid shard's columns may decode to. A float32 and its levels take 4.1 bytes, so 8 a
# value is twice that; a row's name (the string column ``name``) may take a kilobyte on
# average; a column's page headers and a tiny shard's overhead fit in the slack.
BYTES_PER_VALUE = 8
NAME_BYTES_PER_ROW = 1024
SLACK_BYTES = 1 << 16
# The file's own claims (rows, linc.num_nodes) scale every bound above, so the whole decoded
# shard is also bounded by the file's size: stored values compress less than 4x (random
# coordinates hardly at all), a hostile page of zeros more than 10,000x.
MAX_EXPANSION = 256

# Thrift compact type codes (a bool's value sits in its field header; in a list, one byte).
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
# PageHeader field ids (parquet.thrift): the page type, its sizes, its type's own header.
_TYPE, _UNCOMPRESSED_SIZE, _COMPRESSED_SIZE = 1, 2, 3
# Page type -> field id of its header (whose field 1 is num_values), as Arrow reads them.
_VALUE_HEADERS = {0: 5, 3: 8}  # DATA_PAGE: data_page_header, DATA_PAGE_V2: data_page_header_v2
_DICTIONARY_PAGE = 2
# Deeper nesting than any page header has is refused before Python's recursion limit is met.
_MAX_DEPTH = 16
# Arrow reads up to this many bytes past a chunk for files of old parquet-mr (PARQUET-816).
_ARROW_CHUNK_PADDING = 100
# A page header is tens of bytes (a linc shard's have no statistics): a longer one is refused
# before walking it costs time.
_MAX_HEADER_BYTES = 1 << 20


def check_decoded_size(
    metadata: pq.FileMetaData,
    data: bytes | pa.Buffer,
    row_values: Mapping[str, int],
    num_nodes: int,
    source: str,
) -> None:
    """Refuse a shard whose pages claim more than a shard of its rows and columns holds.

    Args:
        metadata: the file's footer; data: the whole file (as bytes or an Arrow buffer).
        row_values: the columns to be read, each with the values one row holds (``name``: 1).
        num_nodes: the file's ``linc.num_nodes``, that ``row_values`` follow.
        source: the file, named in the error.

    Raises:
        InstanceError: naming the file, the column (or ``num_rows``) and the claim.
    """
    rows = sum(metadata.row_group(i).num_rows for i in range(metadata.num_row_groups))
    if rows != metadata.num_rows or rows < 0:
        raise InstanceError(source, "num_rows", metadata.num_rows, f"its row groups hold {rows}")
    shape = f"{rows} rows of {num_nodes} nodes"
    decoded = rows * 4 * sum(count for name, count in row_values.items() if name != "name")
    if decoded > MAX_EXPANSION * len(data) + SLACK_BYTES:
        raise InstanceError(
            source,
            "num_rows x linc.num_nodes",
            f"{rows} x {num_nodes}",
            f"{decoded} bytes of values in a {len(data)}-byte file, over {MAX_EXPANSION} "
            "times its size (a compression bomb?)",
        )
    try:
        # Unsigned bytes: an Arrow buffer's memoryview holds signed ones.
        claims = column_claims(metadata, memoryview(data).cast("B"), list(row_values))
    except ValueError as err:
        raise InstanceError(source, "<file>", None, f"unreadable Parquet: {err}") from None
    for name, claim in claims.items():
        values = rows * row_values[name]
        most = rows * NAME_BYTES_PER_ROW if name == "name" else values * BYTES_PER_VALUE
        most += SLACK_BYTES
        size = max(claim.footer_bytes, claim.page_bytes)
        if claim.dictionary_pages:
            raise InstanceError(
                source, name, "a dictionary page", "shards are not dictionary-encoded"
            )
        if size > most:
            raise InstanceError(
                source, name, f"{size} bytes uncompressed", f"{shape} hold at most {most} bytes"
            )
        if claim.values > values:
            raise InstanceError(source, name, f"{claim.values} values", f"{shape} hold {values}")


@dataclass
class ColumnClaims:
    """What a column's chunks claim, over every row group: ``footer_bytes`` (the footer's
    ``total_uncompressed_size``), ``page_bytes`` (the pages' ``uncompressed_page_size``, what
    the reader allocates), ``values`` (the data pages' ``num_values``, levels included) and
    ``dictionary_pages``."""

    footer_bytes: int = 0
    page_bytes: int = 0
    values: int = 0
    dictionary_pages: int = 0


def column_claims(
    metadata: pq.FileMetaData, data: memoryview, columns: list[str]
) -> dict[str, ColumnClaims]:
    """The claims of each top-level column of ``columns``, in that order (a list column's
    leaves together).

    Raises:
        ValueError: a page header that is not valid Thrift or leads outside the file.
    """
    claims = {name: ColumnClaims() for name in columns}
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            column = chunk.path_in_schema.split(".")[0]
            if column in claims:
                claims[column].footer_bytes += chunk.total_uncompressed_size
                _walk_pages(data, chunk, claims[column])
    return claims


def _walk_pages(data: memoryview, chunk: pq.ColumnChunkMetaData, claims: ColumnClaims) -> None:
    """Add the pages of one column chunk: every page in its bytes, header after header from
    its first, and past them (as Arrow reads a little further for old writers' files) while
    the footer's value count is not yet seen. A page past those Arrow cannot read at all."""
    start = chunk.data_page_offset
    if chunk.has_dictionary_page and 0 < (chunk.dictionary_page_offset or 0) < start:
        start = chunk.dictionary_page_offset
    chunk_end = start + chunk.total_compressed_size
    if not 0 <= start <= chunk_end <= len(data):
        raise ValueError(f"column chunk {chunk.path_in_schema} lies outside the file")
    end = min(len(data), chunk_end + _ARROW_CHUNK_PADDING)
    reader, seen = _ThriftReader(data, start), 0
    while reader.position < chunk_end or (seen < chunk.num_values and reader.position < end):
        reader.end = min(len(data), reader.position + _MAX_HEADER_BYTES)
        header = reader.struct(0)
        reader.end = len(data)
        size, compressed = header.get(_UNCOMPRESSED_SIZE), header.get(_COMPRESSED_SIZE)
        if not (isinstance(size, int) and isinstance(compressed, int) and size >= 0):
            raise ValueError(f"a page header of {chunk.path_in_schema} has no valid sizes")
        claims.page_bytes += size
        kind = header.get(_TYPE)
        claims.dictionary_pages += kind == _DICTIONARY_PAGE
        page = header.get(_VALUE_HEADERS.get(kind, -1) if isinstance(kind, int) else -1)
        values = page.get(1) if isinstance(page, dict) else None
        if isinstance(values, int) and values > 0:
            seen += values
            claims.values += values
        reader.skip(compressed)


class _ThriftReader:
    """Reads Thrift compact values from ``data`` at ``position``, up to ``end``; structs
    become ``{field id: value}`` with integers and nested structs kept, other values skipped."""

    def __init__(self, data: memoryview, position: int) -> None:
        self.data, self.position, self.end = data, position, len(data)

    def byte(self) -> int:
        if self.position >= self.end:
            raise ValueError(f"a page header runs past byte {self.end}")
        self.position += 1
        return self.data[self.position - 1]

    def skip(self, count: int) -> None:
        if not 0 <= count <= self.end - self.position:
            raise ValueError(f"{count} bytes at byte {self.position} run past byte {self.end}")
        self.position += count

    def varint(self) -> int:
        value = shift = 0
        while shift < 70:
            byte = self.byte()
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
        raise ValueError("a Thrift integer longer than 10 bytes")

    def integer(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)  # zigzag

    def struct(self, depth: int) -> dict[int, object]:
        if depth > _MAX_DEPTH:
            raise ValueError("Thrift structs nested too deep")
        fields: dict[int, object] = {}
        field_id = 0
        while (head := self.byte()) != 0:
            delta, kind = head >> 4, head & 0x0F
            field_id = field_id + delta if delta else self.integer()
            fields[field_id] = kind == _TRUE if kind in (_TRUE, _FALSE) else self.value(kind, depth)
        return fields

    def value(self, kind: int, depth: int) -> object:
        if kind in (_TRUE, _FALSE, _BYTE):  # a bool inside a list or map is one byte
            return self.byte()
        if kind in (_I16, _I32, _I64):
            return self.integer()
        if kind == _DOUBLE:
            return self.skip(8)
        if kind == _BINARY:
            return self.skip(self.varint())
        if kind == _STRUCT:
            return self.struct(depth + 1)
        if kind in (_LIST, _SET):
            head = self.byte()
            count = head >> 4 if head >> 4 != 15 else self.varint()
            kinds = [head & 0x0F]
        elif kind == _MAP:
            count = self.varint()
            head = self.byte() if count else 0
            kinds = [head >> 4, head & 0x0F]
        else:
            raise ValueError(f"unknown Thrift type {kind} in a page header")
        for _ in range(count):  # every element takes at least one byte: bounded by the file
            for element in kinds:
                self.value(element, depth + 1)
        return None


__all__ = ["ColumnClaims", "check_decoded_size", "column_claims"]
