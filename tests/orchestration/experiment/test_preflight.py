"""Pre-flight: what a sweep cannot use is refused in one line before Ray starts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from linc_core.instances.parquet import SCHEMA_VERSION
from orchestration.experiment.preflight import check_readable, preflight
from orchestration.failures import SweepRefused
from sweeps.compose import load_platform_config


def _config(tmp_path: Path, *overrides: str):
    storage = [f"cluster.storage={tmp_path / 'runs'}"]
    return load_platform_config(["preset=smoke", *storage, *overrides])


def test_an_evaluation_set_of_another_problem_is_refused(tmp_path: Path) -> None:
    """However the config was made (here: a run plan changed after validation), a trial of a
    CVRP model is never sent to evaluate on Solomon-50's CVRPTW instances."""
    config = _config(tmp_path, "task=cvrp", "task.num_customers=10")
    evaluation = dataclasses.replace(config.run.evaluation, source="solomon50")
    run = dataclasses.replace(config.run, evaluation=evaluation)
    with pytest.raises(SweepRefused) as err:
        preflight(dataclasses.replace(config, run=run))
    assert str(err.value) == (
        "data.eval_source: solomon50 holds cvrptw instances; the task is cvrp (evaluate on "
        "validation, a cvrp dataset or benchmark)"
    )
    preflight(config)  # its own validation set: fine


def _data_set(folder: Path, manifest: bytes) -> str:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_bytes(manifest)
    return str(folder)


def test_a_data_set_of_another_problem_is_refused(tmp_path: Path) -> None:
    named = {"schema_version": SCHEMA_VERSION, "shards": [], "generator": {"task": "cvrptw"}}
    cvrptw = _data_set(tmp_path / "a", json.dumps(named).encode())
    with pytest.raises(SweepRefused) as err:
        check_readable("data.eval_uri", cvrptw, "cvrp")
    assert str(err.value) == (
        f"data.eval_uri: the data set {cvrptw} holds cvrptw instances; the task is cvrp"
    )
    check_readable("data.eval_uri", cvrptw, "cvrptw")
    unnamed = _data_set(
        tmp_path / "b", json.dumps({"schema_version": SCHEMA_VERSION, "shards": []}).encode()
    )  # names no problem: not checked
    check_readable("data.uri", unnamed, "cvrp")
    outside = {"schema_version": SCHEMA_VERSION, "shards": [{"file": "../x", "rows": 1}]}
    for name, text in (
        ("cut", b'{"generator": {"ta'),
        ("binary", b"\xff\xfe"),
        ("outside", json.dumps(outside).encode()),  # the one manifest check: no shard outside
    ):
        broken = _data_set(tmp_path / name, text)
        with pytest.raises(SweepRefused, match=f"data.uri: cannot read the data set {broken}"):
            check_readable("data.uri", broken, "cvrp")
