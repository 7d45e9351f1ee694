"""The Parquet data set schema, shard IO and ``load_dataset`` (pure pyarrow/numpy/torch, no
Ray, no S3)."""

from __future__ import annotations

import json
from pathlib import Path

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
