"""Data set folders written for the tests of ``linc_core.instances.datasets``: real shards,
manifests, and the check that a refusal is one line naming its field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from linc_core.instances.datasets import MANIFEST_NAME, shard_name
from linc_core.instances.parquet import (
    SCHEMA_VERSION,
    instance_to_table,
    parquet_bytes,
    sha256_hex,
)
from linc_core.problems import generate_cvrp

SHARD = shard_name(0)
# What a test run in a fresh process imports to read a data set and catch its refusals.
READERS = "list_shards, load_dataset, read_manifest, read_shard"
DATASET_SCHEMA_ERROR = "from linc_core.instances.parquet import DatasetSchemaError"


def write_shard(folder: Path, seed: int = 0) -> dict:
    """One real shard in ``folder``; returns its manifest entry."""
    folder.mkdir(parents=True, exist_ok=True)
    data = parquet_bytes(instance_to_table(generate_cvrp(4, 10, seed)))
    (folder / SHARD).write_bytes(data.to_pybytes())
    return {"file": SHARD, "rows": 4, "sha256": sha256_hex(data)}


def write_manifest(folder: Path, entries: list, **extra: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {"schema_version": SCHEMA_VERSION, "shards": entries} | extra
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    return folder


def assert_one_line(err: pytest.ExceptionInfo, source: str, field: str) -> str:
    message = str(err.value)
    assert message.startswith(f"{source}: field '{field}' = "), message
    assert "\n" not in message and err.value.field == field
    return message
