"""``linc-report --tracking-uri``: a SQLite path that is no MLflow store is refused in one
line, exit 2, and left as it was (MLflow would print SQLAlchemy's traceback, retry a folder
for minutes, or create its tables in the file); so are a folder store that is not there (MLflow
would create it), a server that does not answer (MLflow retries for minutes) and a scheme
MLflow refuses (its traceback)."""

from __future__ import annotations

import socket
import sqlite3
import time
from pathlib import Path

import pytest

from orchestration.experiment.preflight import _not_a_store
from sweeps.report import main as report_main


def _stores(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "garbage.db").write_bytes(b"not a database at all, " * 10)
    (tmp_path / "empty.db").write_bytes(b"")
    with sqlite3.connect(tmp_path / "other.db") as other:
        other.execute("CREATE TABLE notes (text TEXT)")
    (tmp_path / "a?b#c.db").write_bytes(b"x" * 100)  # URI characters in the name
    (tmp_path / "folder").mkdir()
    (tmp_path / "zero-link.db").symlink_to("/dev/zero")
    return {
        "device": Path("/dev/zero"),
        "folder": tmp_path / "folder",
        "link_to_a_device": tmp_path / "zero-link.db",
        "garbage": tmp_path / "garbage.db",
        "empty": tmp_path / "empty.db",
        "other_database": tmp_path / "other.db",
        "uri_characters": tmp_path / "a?b#c.db",
    }


@pytest.mark.parametrize(
    ("case", "problem"),
    [
        ("device", "not a file"),
        ("folder", "not a file"),
        ("link_to_a_device", "not a file"),
        ("garbage", "not an SQLite database (file is not a database)"),
        ("empty", "an SQLite file without MLflow's tables"),
        ("other_database", "an SQLite file without MLflow's tables"),
        ("uri_characters", "not an SQLite database (file is not a database)"),
    ],
)
def test_a_sqlite_path_that_is_no_mlflow_store_is_one_line_and_left_unchanged(
    case, problem, tmp_path, capsys
) -> None:
    path = _stores(tmp_path)[case]
    before = path.read_bytes() if path.is_file() else None
    assert report_main(["ablation", "--tracking-uri", f"sqlite:///{path}"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"linc-report: --tracking-uri: {path} is {problem}\n"
    assert "Traceback" not in captured.out + captured.err
    if before is not None:
        assert path.read_bytes() == before  # no MLflow tables created, nothing written
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(("-journal", "-wal"))) == []


def test_a_file_with_mlflows_tables_is_a_store(tmp_path) -> None:
    with sqlite3.connect(tmp_path / "mlflow.db") as store:
        store.execute("CREATE TABLE experiments (experiment_id INTEGER)")
    assert _not_a_store(tmp_path / "mlflow.db") is None
    (tmp_path / "link.db").symlink_to(tmp_path / "mlflow.db")
    assert _not_a_store(tmp_path / "link.db") is None


def test_a_missing_folder_store_is_refused_and_not_created(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow would create it
    for uri in (str(tmp_path / "mlruns"), (tmp_path / "mlruns").as_uri()):
        assert report_main(["budget", "--tracking-uri", uri]) == 2
        assert capsys.readouterr().err == (
            f"linc-report: --tracking-uri: no store at {tmp_path / 'mlruns'}\n"
        )
    assert list(tmp_path.iterdir()) == []


def test_a_server_that_does_not_answer_is_one_line_in_seconds(capsys) -> None:
    with socket.socket() as closed:  # a port that was just free: nothing listens on it
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    start = time.monotonic()
    assert report_main(["budget", "--tracking-uri", f"http://127.0.0.1:{port}"]) == 2
    assert time.monotonic() - start < 30  # MLflow's own retries took minutes
    assert capsys.readouterr().err == (
        f"linc-report: --tracking-uri: the store http://127.0.0.1:{port} does not answer "
        "(Connection refused)\n"
    )


def test_a_scheme_mlflow_refuses_is_one_line_with_its_password_masked(capsys) -> None:
    assert report_main(["budget", "--tracking-uri", "foo://linc:hunter2hunter2@db/x"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("linc-report: --tracking-uri: foo://linc:***@db/x: ")
    assert "unsupported URI" in captured.err and captured.err.count("\n") == 1
    assert "hunter2" not in captured.out + captured.err
