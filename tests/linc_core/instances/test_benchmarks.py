"""Data-folder resolution, best-known tables, instance listings and families, and
``linc-data where``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from linc_core.commands.data import main
from linc_core.instances import InstanceError, benchmarks
from linc_core.instances.benchmarks import (
    BENCHMARKS,
    DATA_DIR_ENV,
    data_dir,
    instance_family,
    list_instances,
    load_bks,
)
from linc_core.instances.download import remote_names
from tests.conftest import refusals_in_fresh_process


# ---------------------------------------------------------------------- data folder
def test_data_dir_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert data_dir() == tmp_path.resolve()


def test_data_dir_env_pointing_nowhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match=DATA_DIR_ENV):
        data_dir()


@pytest.mark.parametrize(
    ("checkout", "cwd"),
    [
        ("checkout", "elsewhere/work"),  # beside the checkout, whatever the current folder
        ("elsewhere/checkout", "work"),  # else beside the current folder
    ],
)
def test_data_dir_default_is_shared_data_beside_the_checkout_or_the_current_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, checkout: str, cwd: str
) -> None:
    """Without ``LINC_DATA_DIR``: ``<checkout>/../shared/data``, else ``<cwd>/../shared/data``;
    tmp/shared/data is reached from one of the two only."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    for folder in (checkout, cwd, "shared/data"):
        (tmp_path / folder).mkdir(parents=True)
    monkeypatch.setattr(benchmarks, "_REPO_ROOT", tmp_path / checkout)
    monkeypatch.chdir(tmp_path / cwd)
    assert data_dir() == (tmp_path / "shared" / "data").resolve()


def test_data_dir_absent_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setattr(benchmarks, "_REPO_ROOT", tmp_path / "a" / "repo")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=DATA_DIR_ENV):
        data_dir()


# ---------------------------------------------------------------------- BKS and listings
def test_load_bks_values(data_dir: Path) -> None:
    solomon = load_bks("solomon100")
    assert len(solomon) == 56
    assert solomon["R101"] == 1637.7  # distance-only DIMACS, not the hierarchical 1650.80
    assert solomon["C101"] == 827.3
    tsplib = load_bks("tsplib")
    assert len(tsplib) == 29
    assert tsplib["berlin52"] == 7542 and tsplib["kroA100"] == 21282
    x = load_bks("cvrplib_x")
    assert len(x) == 100 and x["X-n101-k25"] == 27591
    xml = load_bks("xml100")
    assert len(xml) == 10_000 and xml["XML100_1111_01"] == 29888
    assert sum(xml.values()) / len(xml) == pytest.approx(16975.92, abs=0.005)


def test_list_instances_matches_bks(data_dir: Path) -> None:
    for name, count in (("solomon100", 56), ("tsplib", 29), ("cvrplib_x", 100)):
        paths = list_instances(name)
        assert len(paths) == count
        assert {p.stem for p in paths} == set(load_bks(name))
    xml = list_instances("xml100")
    assert len(xml) == 10_000 and xml[0].name == "XML100_1111_01.vrp"


def test_benchmark_read_dispatches_to_the_right_reader(data_dir: Path) -> None:
    for name, benchmark in BENCHMARKS.items():
        instance = benchmark.read(list_instances(name)[0])
        assert instance.problem == benchmark.problem


def test_load_bks_reports_missing_column(tmp_path: Path) -> None:
    (tmp_path / "solomon100").mkdir()
    (tmp_path / "solomon100" / "bks.csv").write_text("instance,bks\nC101,827.3\n")
    with pytest.raises(InstanceError) as err:
        load_bks("solomon100", root=tmp_path)
    assert "bks.csv" in str(err.value) and err.value.field == "bks_distance_only_dimacs"


def test_unknown_benchmark() -> None:
    with pytest.raises(KeyError, match="solomon100"):
        load_bks("golden")


# ---------------------------------------------------------------------- families, where
def test_every_solomon_and_homberger_name_reads_back_its_family() -> None:
    solomon = [instance_family(n) for n in remote_names("solomon100")]
    assert [solomon.count(f) for f in ("C1", "C2", "R1", "R2", "RC1", "RC2")] == [
        9,
        8,
        12,
        11,
        8,
        8,
    ]
    homberger = [instance_family(n) for n in remote_names("homberger200")]
    assert homberger == [f for f in ("C1", "C2", "R1", "R2", "RC1", "RC2") for _ in range(10)]
    assert [instance_family(n) for n in ("c208", "rc2_10_5")] == ["C2", "RC2"]
    assert [instance_family(n) for n in ("X-n101-k25", "berlin52", "R3", "CX101", "R1")] == [
        None
    ] * 5


def test_main_where(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    assert main(["where"]) == 0
    assert Path(capsys.readouterr().out.strip()) == data_dir


def test_main_where_without_data(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "missing"))
    assert main(["where"]) == 1
    assert DATA_DIR_ENV in capsys.readouterr().err


def test_a_bks_csv_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "cvrplib_x").mkdir(parents=True)
    os.mkfifo(data / "cvrplib_x" / "bks.csv")
    [(seconds, message)] = refusals_in_fresh_process(
        "from linc_core.instances import InstanceError\n"
        "from linc_core.instances.benchmarks import load_bks",
        [f"load_bks('cvrplib_x', {str(data)!r})"],
        "InstanceError",
    )
    path = data / "cvrplib_x" / "bks.csv"
    assert message == f"{path}: field 'file' = 'a named pipe (FIFO)': expected a regular file"
    assert seconds < 1.0
