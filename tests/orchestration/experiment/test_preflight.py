"""Pre-flight: what a sweep cannot use is refused in one line before Ray starts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from linc_core.instances.parquet import SCHEMA_VERSION
from orchestration.experiment.preflight import (
    check_readable,
    check_readable_store,
    check_tracking,
    preflight,
    store_scheme,
)
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


ONE_SHARD = [{"file": "shard-00000.parquet", "rows": 1, "sha256": "0" * 64}]


def _data_set(folder: Path, manifest: bytes) -> str:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_bytes(manifest)
    return str(folder)


def test_a_data_set_of_another_problem_is_refused(tmp_path: Path) -> None:
    named = {"schema_version": SCHEMA_VERSION, "shards": ONE_SHARD, "generator": {"task": "cvrptw"}}
    cvrptw = _data_set(tmp_path / "a", json.dumps(named).encode())
    with pytest.raises(SweepRefused) as err:
        check_readable("data.eval_uri", cvrptw, "cvrp")
    assert str(err.value) == (
        f"data.eval_uri: the data set {cvrptw} holds cvrptw instances; the task is cvrp"
    )
    check_readable("data.eval_uri", cvrptw, "cvrptw")
    unnamed = _data_set(
        tmp_path / "b", json.dumps({"schema_version": SCHEMA_VERSION, "shards": ONE_SHARD}).encode()
    )  # names no problem: not checked
    check_readable("data.uri", unnamed, "cvrp")
    outside = {"schema_version": SCHEMA_VERSION, "shards": [{"file": "../x", "rows": 1}]}
    for name, text in (
        ("cut", b'{"generator": {"ta'),
        ("binary", b"\xff\xfe"),
        ("outside", json.dumps(outside).encode()),  # the one manifest check: no shard outside
        ("empty", json.dumps({"schema_version": SCHEMA_VERSION, "shards": []}).encode()),
    ):
        broken = _data_set(tmp_path / name, text)
        with pytest.raises(SweepRefused, match=f"data.uri: cannot read the data set {broken}"):
            check_readable("data.uri", broken, "cvrp")


def test_a_training_set_of_another_size_is_refused(tmp_path: Path) -> None:
    # trained on the set's 20 customers, validated and logged at the task's 6: refused
    named = {"schema_version": SCHEMA_VERSION, "shards": ONE_SHARD, "generator": {"task": "cvrptw"}}
    set_20 = _data_set(
        tmp_path / "a", json.dumps(named | {"generator": {"task": "cvrptw", "size": 20}}).encode()
    )
    with pytest.raises(SweepRefused) as err:
        preflight(_config(tmp_path, "data=dataset", f"data.uri={set_20}"))
    assert str(err.value) == (
        f"data.uri: the data set {set_20} holds cvrptw20 instances; the task has 6 customers "
        "(task.num_customers)"
    )
    preflight(_config(tmp_path, "data=dataset", f"data.uri={set_20}", "task.num_customers=20"))


@pytest.mark.parametrize("setting", ["data.source", "data.eval_source"])
def test_a_fixed_set_missing_from_the_data_folder_is_refused(tmp_path, monkeypatch, setting):
    monkeypatch.setenv("LINC_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(SweepRefused) as err:
        preflight(_config(tmp_path, f"{setting}=solomon50"))
    message = str(err.value)
    assert message.startswith(f"{setting}: solomon50: ") and "nowhere" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "uri, refusal",
    [
        ("http://127.0.0.1:9", "the store http://127.0.0.1:9 does not answer (Connection refused)"),
        (
            "postgresql+psycopg2://linc:hunter2@127.0.0.1:9/runs",
            "the database postgresql+psycopg2://linc:***@127.0.0.1:9/runs does not answer",
        ),
        ("sqlite://", "sqlite:// names no database file (expected sqlite:///PATH)"),
        ("sqlite://host/x.db", "sqlite://host/x.db names no database file"),
        ("sqlite:///{file}/mlflow.db", "cannot write to {file} (Not a directory)"),
        ("{file}", "cannot write to {file} (Not a directory)"),
        ("file://{file}/runs", "cannot write to {file}/runs (Not a directory)"),
    ],
)
def test_each_kind_of_tracking_store_gets_its_check(tmp_path: Path, uri, refusal) -> None:
    """A sweep's store (written) and linc-report's (read) go through one reading of the
    scheme (``store_scheme``): a server, a database (the driver named in the scheme), a SQLite
    file, a folder; the password masked. The writer's refusal is the same as the reader's
    for servers and databases."""
    file = tmp_path / "a-file"
    file.write_text("")
    uri, refusal = uri.format(file=file), refusal.format(file=file)
    with pytest.raises(SweepRefused) as refused:
        check_tracking(uri)
    assert str(refused.value).startswith(f"tracking.uri: {refusal}")
    if "does not answer" in refusal or "names no" in refusal:
        with pytest.raises(SweepRefused, match="^--tracking-uri: ") as read:
            check_readable_store("--tracking-uri", uri)
        assert str(read.value).startswith(f"--tracking-uri: {refusal}")
    assert "hunter2" not in str(refused.value)


def test_a_reader_refuses_what_is_not_there_and_creates_nothing(tmp_path: Path) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    for uri, refusal in [
        (str(tmp_path / "none"), f"no store at {tmp_path / 'none'}"),
        (f"file://{tmp_path / 'none'}", f"no store at {tmp_path / 'none'}"),
        (f"sqlite:///{tmp_path / 'none.db'}", f"no database at {tmp_path / 'none.db'}"),
        (str(file), f"{file} is not a folder"),
        (f"sqlite:///{file}", f"{file} is an SQLite file without MLflow's tables"),
    ]:
        with pytest.raises(SweepRefused) as refused:
            check_readable_store("--tracking-uri", uri)
        assert str(refused.value) == f"--tracking-uri: {refusal}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
    assert store_scheme("postgresql+psycopg2://h/db") == "postgresql"
    assert (store_scheme("/runs"), store_scheme("file:///runs")) == ("", "file")


def test_a_search_s_sqlite_storage_it_cannot_write_is_one_line(tmp_path: Path) -> None:
    # SQLAlchemy's 122-line traceback ("unable to open database file") before
    from orchestration.experiment.preflight import check_database

    file = tmp_path / "a-file"
    file.write_text("")
    with pytest.raises(SweepRefused) as refused:
        check_database("search.storage", f"sqlite:///{file}/x/optuna.db")
    assert str(refused.value) == f"search.storage: cannot write to {file}/x (Not a directory)"
    check_database("search.storage", f"sqlite:///{tmp_path}/ok/optuna.db")  # made on first use
    check_database("search.storage", "sqlite://")  # in memory
