"""The Parquet data set schema, shard IO and ``load_dataset`` (pure pyarrow/numpy/torch, no
Ray, no S3)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from linc_core.instances import TENSOR_FIELDS, Instance
from linc_core.instances.datasets import MANIFEST_NAME, load_dataset, read_shard, shard_name
from linc_core.instances.parquet import (
    SCHEMA_VERSION,
    DatasetSchemaError,
    dataset_schema,
    instance_to_table,
    parquet_bytes,
    read_shard_bytes,
    sha256_hex,
)
from linc_core.problems import generate_cvrp, generate_cvrptw_envelope, generate_tsp
from tests.conftest import fresh_python


def assert_bit_identical(left: Instance, right: Instance) -> None:
    assert left.problem == right.problem
    assert left.names == right.names
    for name in TENSOR_FIELDS:
        a, b = getattr(left, name), getattr(right, name)
        assert a.dtype == b.dtype == torch.float32, name
        assert a.shape == b.shape, name
        # Compare bit patterns: equal also for inf, NaN and signed zeros.
        assert torch.equal(a.view(torch.int32), b.view(torch.int32)), name


def sample(problem: str, batch: int = 6, seed: int = 3) -> Instance:
    if problem == "tsp":
        return generate_tsp(batch, 15, seed)
    if problem == "cvrp":
        return generate_cvrp(batch, 20, seed)
    return generate_cvrptw_envelope(batch, 20, seed)


@pytest.mark.parametrize("problem", ["tsp", "cvrp", "cvrptw"])
def test_round_trip_is_bit_identical(problem: str) -> None:
    instance = sample(problem)
    named = Instance(
        problem=instance.problem,
        names=tuple(f"i{k}" for k in range(instance.batch_size)),
        **{f: getattr(instance, f) for f in TENSOR_FIELDS},
    )
    for original in (instance, named):
        data = parquet_bytes(instance_to_table(original, {"shard_index": 4}))
        back, metadata = read_shard_bytes(data, "mem.parquet")
        assert_bit_identical(original, back)
        assert metadata["schema_version"] == str(SCHEMA_VERSION)
        assert metadata["problem"] == problem
        assert metadata["shard_index"] == "4"


def test_schema_columns_per_task() -> None:
    assert dataset_schema("tsp").names == ["name", "locs", "grid_size"]
    assert dataset_schema("cvrp").names == ["name", "locs", "grid_size", "demand", "capacity"]
    cvrptw = dataset_schema("cvrptw")
    assert cvrptw.field("locs").type == pa.list_(pa.float32())
    assert cvrptw.field("travel_time_scale").type == pa.float32()
    table = instance_to_table(sample("cvrptw", batch=2))
    # locs: 2N floats per row, depot first.
    n = 21
    assert len(table.column("locs")[0]) == 2 * n
    assert len(table.column("demand")[0]) == n


def test_parquet_bytes_are_deterministic() -> None:
    first = parquet_bytes(instance_to_table(sample("cvrptw"), {"seed": 1}))
    second = parquet_bytes(instance_to_table(sample("cvrptw"), {"seed": 1}))
    assert sha256_hex(first) == sha256_hex(second)


def test_writer_refuses_lossy_input() -> None:
    with pytest.raises(ValueError, match="float32"):
        instance_to_table(sample("cvrp").to(dtype=torch.float64))
    tsp = sample("tsp")
    with pytest.raises(ValueError, match="does not store demand"):
        instance_to_table(Instance.from_arrays("tsp", tsp.locs, demand=torch.ones(6, 15)))


def write_table(path: Path, table: pa.Table) -> None:
    path.write_bytes(parquet_bytes(table).to_pybytes())


def test_wrong_schema_version_is_refused(tmp_path: Path) -> None:
    table = instance_to_table(sample("cvrp"))
    metadata = dict(table.schema.metadata)
    metadata[b"linc.schema_version"] = b"99"
    path = tmp_path / "old.parquet"
    write_table(path, table.replace_schema_metadata(metadata))
    with pytest.raises(DatasetSchemaError) as info:
        read_shard(str(path))
    message = str(info.value)
    assert str(path) in message and "linc.schema_version" in message and "'99'" in message


def test_foreign_parquet_and_bad_columns_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"x": [1.0]}), path)
    with pytest.raises(DatasetSchemaError, match="schema_version.*None"):
        read_shard(str(path))
    table = instance_to_table(sample("cvrp"))
    short = table.set_column(
        1, "locs", pa.array([[0.0, 1.0]] * table.num_rows, pa.list_(pa.float32()))
    )
    write_table(tmp_path / "short.parquet", short)
    with pytest.raises(DatasetSchemaError, match=r"locs\[0\].*length 2"):
        read_shard(str(tmp_path / "short.parquet"))


def test_truncated_and_corrupted_shards_are_refused(tmp_path: Path) -> None:
    data = parquet_bytes(instance_to_table(sample("cvrptw", batch=16))).to_pybytes()
    with pytest.raises(DatasetSchemaError, match="unreadable"):
        read_shard_bytes(data[: len(data) // 2], "cut.parquet")
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0xFF  # inside the data pages: caught by the page CRC
    with pytest.raises(DatasetSchemaError, match="unreadable"):
        read_shard_bytes(bytes(flipped), "flip.parquet")


def write_set(root: Path, shards: list[Instance], manifest: bool = True) -> None:
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for index, shard in enumerate(shards):
        data = parquet_bytes(instance_to_table(shard))
        (root / shard_name(index)).write_bytes(data.to_pybytes())
        entries.append(
            {"file": shard_name(index), "rows": shard.batch_size, "sha256": sha256_hex(data)}
        )
    if manifest:
        text = json.dumps({"schema_version": SCHEMA_VERSION, "shards": entries})
        (root / MANIFEST_NAME).write_text(text)


def named_shards(sizes: list[int]) -> list[Instance]:
    shards, first = [], 0
    for index, rows in enumerate(sizes):
        inst = generate_cvrptw_envelope(rows, 10, seed=index)
        names = tuple(f"row{first + k}" for k in range(rows))
        shards.append(
            Instance(problem="cvrptw", names=names, **{f: getattr(inst, f) for f in TENSOR_FIELDS})
        )
        first += rows
    return shards


def test_load_dataset_and_checksum(tmp_path: Path) -> None:
    shards = named_shards([8, 8, 5])
    write_set(tmp_path / "set", shards)
    assert_bit_identical(load_dataset(str(tmp_path / "set")), Instance.concat(shards))
    write_set(tmp_path / "plain", shards, manifest=False)
    assert_bit_identical(load_dataset(str(tmp_path / "plain")), Instance.concat(shards))
    tampered = tmp_path / "set" / shard_name(1)
    other = parquet_bytes(instance_to_table(shards[0])).to_pybytes()
    tampered.write_bytes(other)
    with pytest.raises(DatasetSchemaError, match="sha256"):
        load_dataset(str(tmp_path / "set"))


def edited(instance: Instance, field: str, row: int, index: tuple, value: float) -> Instance:
    """``instance`` with one value of one row replaced."""
    tensor = getattr(instance, field).clone()
    tensor[(row, *index)] = value
    return dataclasses.replace(instance, **{field: tensor})


@pytest.mark.parametrize(
    ("problem", "field", "index", "value", "shown_field", "shown", "reason"),
    [
        ("cvrp", "locs", (3, 0), float("nan"), "locs[3]", None, "non-finite"),
        ("tsp", "locs", (2, 1), float("inf"), "locs[2]", None, "non-finite"),
        ("cvrp", "demand", (2,), -5.0, "demand[2]", -5, "negative"),
        ("cvrp", "capacity", (), 0.0, "capacity", 0, "must be positive"),
        ("cvrp", "grid_size", (), float("nan"), "grid_size", None, "finite"),
        ("cvrptw", "time_windows", (4, 0), 1e6, "time_windows[4]", None, "ready time is after"),
        ("cvrptw", "service_time", (1,), float("nan"), "service_time[1]", None, "non-finite"),
        ("cvrptw", "travel_time_scale", (), -1.0, "travel_time_scale", -1.0, "positive"),
    ],
)
def test_shard_values_are_checked_naming_file_row_field_and_value(
    tmp_path: Path, problem, field, index, value, shown_field, shown, reason
) -> None:
    good = sample(problem)
    names = tuple(f"i{k}" for k in range(good.batch_size))
    bad = edited(dataclasses.replace(good, names=names), field, 4, index, value)
    path = tmp_path / "bad.parquet"
    write_table(path, instance_to_table(bad))
    with pytest.raises(DatasetSchemaError) as err:
        read_shard(str(path))
    message = str(err.value)
    assert message.startswith(f"{path} (row 4: i4): field '{shown_field}' = "), message
    assert reason in message and "\n" not in message
    if shown is not None:
        assert err.value.value == shown
    write_set(tmp_path / "set", [good, bad])  # through a data set too: the shard's file
    with pytest.raises(DatasetSchemaError, match=rf"set/{shard_name(1)} \(row 4: i4\)"):
        load_dataset(str(tmp_path / "set"))


def test_a_row_name_cannot_break_the_error_line(tmp_path: Path) -> None:
    good = sample("cvrp")
    names = ("a",) * 5 + ("evil\nINFO all good",)
    bad = edited(dataclasses.replace(good, names=names), "demand", 5, (1,), -1.0)
    with pytest.raises(DatasetSchemaError) as err:
        read_shard_bytes(parquet_bytes(instance_to_table(bad)), "mem.parquet")
    assert "\n" not in str(err.value) and "'evil\\nINFO all good'" in str(err.value)


def with_metadata(table: pa.Table, key: bytes, value: bytes) -> bytes:
    return parquet_bytes(table.replace_schema_metadata(table.schema.metadata | {key: value}))


@pytest.mark.parametrize(
    "claim", [b"-11", b"0", b"1000000000000000", b"1073741824", b"1_0", b" 21", b"21.0", b"x"]
)
def test_a_bad_num_nodes_claim_is_refused_before_any_allocation(claim: bytes) -> None:
    data = with_metadata(instance_to_table(sample("cvrp")), b"linc.num_nodes", claim)
    with pytest.raises(DatasetSchemaError) as err:
        read_shard_bytes(data, "claim.parquet")
    assert str(err.value).startswith("claim.parquet: field 'linc.num_nodes' = ")
    assert err.value.value == claim.decode() and "from 1 to" in str(err.value)


def test_a_num_nodes_claim_is_checked_against_the_columns_first() -> None:
    # A claim the file's size allows is checked against the columns actually read, before
    # anything sized by it is allocated.
    data = with_metadata(instance_to_table(sample("cvrp")), b"linc.num_nodes", b"25")
    with pytest.raises(DatasetSchemaError) as err:
        read_shard_bytes(data, "claim.parquet")
    assert str(err.value).startswith("claim.parquet: field 'locs[0]' = 'length 42'")
    assert "linc.num_nodes=25" in str(err.value)


# A fresh process's peak memory so far: VmHWM, as the rusage peak of a child starts at the
# parent's at its fork (a test process that built big files would hide every growth).
PEAK_KIB = (
    "def peak_kib():\n"
    "    status = open('/proc/self/status').read()\n"
    "    return int(status.split('VmHWM:')[1].split()[0])\n"
)


def test_an_inflated_num_nodes_claim_is_refused_before_reading() -> None:
    # A 3 KB shard claiming 20 million nodes: refused from its footer, and the reader's peak
    # memory stays that of a small shard (it used to allocate ~2 GB of defaults first).
    out = fresh_python(
        "from linc_core.instances.parquet import instance_to_table, parquet_bytes, "
        "read_shard_bytes\n"
        "from linc_core.problems import generate_cvrp\n"
        f"{PEAK_KIB}"
        "table = instance_to_table(generate_cvrp(6, 20, 3))\n"
        "meta = table.schema.metadata | {b'linc.num_nodes': b'20000000'}\n"
        "data = parquet_bytes(table.replace_schema_metadata(meta))\n"
        "before = peak_kib()\n"
        "try:\n"
        "    read_shard_bytes(data, 'claim.parquet')\n"
        "except ValueError as err:\n"
        "    print(type(err).__name__, err)\n"
        "print('grew_mib', (peak_kib() - before) // 1024)\n"
    )
    assert int(out.split("grew_mib")[1]) < 200, out
    assert "claim.parquet: field 'num_rows x linc.num_nodes' = '6 x 20000000'" in out
    assert "compression bomb" in out


def test_non_utf8_metadata_is_refused() -> None:
    data = with_metadata(instance_to_table(sample("cvrp")), b"linc.\xff", b"1")
    with pytest.raises(DatasetSchemaError, match="<metadata>.*not UTF-8"):
        read_shard_bytes(data, "meta.parquet")


def zigzag_varint(value: int, width: int | None = None) -> bytes:
    """``value`` as a Thrift compact integer, padded to ``width`` bytes (still valid Thrift)."""
    rest, out = (value << 1) ^ (value >> 63), bytearray()
    while rest >= 0x80 or (width is not None and len(out) + 1 < width):
        out.append((rest & 0x7F) | 0x80)
        rest >>= 7
    return bytes([*out, rest])


def understate_footer(data: bytes) -> bytes:
    """``data`` whose footer claims 1 uncompressed byte where it said megabytes (the bomb's
    chunk and its row group): what a bomb's author would write, as the footer is the file's
    word only."""
    metadata = pq.ParquetFile(pa.BufferReader(data)).metadata
    sizes = {metadata.row_group(0).total_byte_size}
    sizes |= {metadata.row_group(0).column(j).total_uncompressed_size for j in range(5)}
    sizes = {size for size in sizes if size > 2**20}
    assert len(sizes) == 2
    footer_length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - footer_length : -8]
    for size in sizes:
        claim = zigzag_varint(size)
        assert footer.count(claim) == 1, size
        footer = footer.replace(claim, zigzag_varint(1, len(claim)))
    return data[: -8 - footer_length] + footer + data[-8:]


def bomb(column: str) -> bytes:
    """A cvrp shard of 6 rows whose ``column`` holds 64 MiB in row 0, zstd-compressed to a few
    kilobytes."""
    table = instance_to_table(sample("cvrp"))
    if column == "name":
        values = pa.array(["x" * 2**26] + ["i"] * 5, pa.string())
    else:
        lengths = [2**24] + [42] * 5
        offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        values = pa.ListArray.from_arrays(offsets, pa.array(np.zeros(sum(lengths), np.float32)))
    bomb_table = table.set_column(table.column_names.index(column), column, values)
    return parquet_bytes(bomb_table).to_pybytes()


def test_a_compression_bomb_is_refused_before_it_is_decompressed(tmp_path: Path) -> None:
    files = []
    for column in ("name", "locs"):
        data = bomb(column)
        assert len(data) < 50_000
        for lying in (False, True):
            files.append(tmp_path / f"{column}{'-lying' if lying else ''}.parquet")
            files[-1].write_bytes(understate_footer(data) if lying else data)
    # Read in a process of its own, so its peak memory is the reads' alone (unbounded, the
    # four reads took 465 MiB: each 64 MiB value decoded and copied).
    out = fresh_python(
        "from linc_core.instances.datasets import read_shard\n"
        f"{PEAK_KIB}"
        "before = peak_kib()\n"
        f"for path in {[str(f) for f in files]!r}:\n"
        "    try:\n"
        "        read_shard(path)\n"
        "    except ValueError as err:\n"
        "        print(type(err).__name__, err)\n"
        "print('grew_mib', (peak_kib() - before) // 1024)\n"
    )
    assert int(out.split("grew_mib")[1]) < 40, out
    lines = out.splitlines()[:-1]
    assert len(lines) == 4, out
    for path, line in zip(files, lines, strict=True):
        column = path.stem.split("-")[0]
        assert line.startswith(f"DatasetSchemaError {path}: field '{column}' = '"), line
        assert "bytes uncompressed': 6 rows of 21 nodes hold at most" in line, line


def test_a_dictionary_encoded_shard_is_refused(tmp_path: Path) -> None:
    # A dictionary lets a page of a few names decode to every row repeating the longest one.
    table = instance_to_table(dataclasses.replace(sample("cvrp"), names=("n",) * 6))
    path = tmp_path / "dictionary.parquet"
    pq.write_table(table, path, use_dictionary=["name"])
    with pytest.raises(DatasetSchemaError) as err:
        read_shard(str(path))
    assert str(err.value).startswith(f"{path}: field 'name' = 'a dictionary page': ")


@pytest.mark.parametrize(
    "header",
    [
        b"\xff" * 16,  # an integer that never ends
        b"\x00",  # a header without sizes
        b"\x1c" * 64,  # structs nested deeper than any page header
        b"\x19\xff\xff\xff\xff\x0f",  # a list of 4 billion elements, past the file's end
        b"\x15\x00\x15\x02\x15\xfe\xff\xff\xff\x0f\x00",  # a page body past the file's end
        b"\x1c\x00\x15\x02\x15\x02\x00",  # a page type that is a struct, not a number
        b"\x18\x80\x80\x80\x01",  # a 2 MiB string in a header: past the header bound
    ],
)
def test_a_garbled_page_header_is_one_error(header: bytes) -> None:
    data = bytearray(parquet_bytes(instance_to_table(sample("cvrp"))).to_pybytes())
    start = pq.ParquetFile(pa.BufferReader(bytes(data))).metadata.row_group(0).column(1)
    offset = start.data_page_offset  # locs: its first page header
    data[offset : offset + len(header)] = header
    with pytest.raises(DatasetSchemaError) as err:
        read_shard_bytes(bytes(data), "garbled.parquet")
    message = str(err.value)
    assert message.startswith("garbled.parquet: field '<file>' = None: unreadable Parquet: ")
    assert "\n" not in message


def test_more_values_than_the_rows_hold_are_refused_before_reading() -> None:
    # 1,000 extra values in row 0 of locs: few bytes, but more values than 6 rows of 21 nodes.
    table = instance_to_table(sample("cvrp"))
    lengths = [42 + 1000] + [42] * 5
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    locs = pa.ListArray.from_arrays(offsets, pa.array(np.zeros(sum(lengths), np.float32)))
    data = parquet_bytes(table.set_column(1, "locs", locs))
    with pytest.raises(DatasetSchemaError) as err:
        read_shard_bytes(data, "long.parquet")
    assert str(err.value) == (
        "long.parquet: field 'locs' = '1252 values': 6 rows of 21 nodes hold 252"
    )
