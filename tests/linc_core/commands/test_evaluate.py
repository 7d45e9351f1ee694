"""``linc-eval``: a malformed file is named and the rest evaluated; every output is written."""

from __future__ import annotations

import csv
import json
import shutil
import sys

import pyarrow.parquet as pq
import pytest

from linc_core.commands.evaluate import main
from linc_core.decoding import DecodeConfig
from linc_core.evaluate import evaluate_policy, load_benchmark
from tests.conftest import PNG_MAGIC, tiny_checkpoint, tiny_policy


def test_a_malformed_file_is_reported_by_name_and_the_rest_evaluated(data_dir, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for name in ("C101", "R101", "RC101"):
        shutil.copy(data_dir / "solomon100" / f"{name}.txt", folder / f"{name}.txt")
    broken = (folder / "R101.txt").read_text().splitlines()
    broken[15] = broken[15].replace(broken[15].split()[1], "x1y", 1)  # a coordinate
    (folder / "R101.txt").write_text("\n".join(broken) + "\n")

    loaded = load_benchmark(str(folder))
    assert [i.names[0] for i in loaded.instances] == ["C101", "RC101"]
    assert [name for name, _ in loaded.errors] == ["R101.txt"]

    checkpoint = tiny_checkpoint(tmp_path / "tiny.pt")
    out = tmp_path / "out"
    status = main(
        [
            "--checkpoint", str(checkpoint), "--benchmark", str(folder), "--decode", "greedy",
            "--z", "2", "--aug", "1", "--out", str(out), "--plot", "1", "--no-progress",
        ]
    )  # fmt: skip
    assert status == 1  # an error row exists
    with (out / "rows.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["instance"] for r in rows] == ["C101", "RC101", "R101.txt"]
    assert rows[2]["feasible"] == "False" and "R101.txt" in rows[2]["error"]
    assert "x1y" in rows[2]["error"]
    # The command's costs are those of the saved policy decoding with these flags in-process.
    config = DecodeConfig(method="greedy", num_z=2, augment=1, seed=0)
    assert loaded.convention == "dimacs"  # a folder of Solomon files
    expected = evaluate_policy(tiny_policy(), loaded.instances, config, convention="dimacs")
    for row, in_process in zip(rows[:2], expected.rows, strict=True):
        assert row["feasible"] == "True" and row["error"] == ""
        assert float(row["cost"]) == pytest.approx(in_process.cost, rel=1e-9)
    table = pq.read_table(out / "rows.parquet").to_pylist()
    assert [r["instance"] for r in table] == ["C101", "RC101", "R101.txt"]
    assert table[0]["cost"] == pytest.approx(float(rows[0]["cost"]), rel=1e-12)
    markdown = (out / "table.md").read_text()
    assert "| Method | Obj. | Gap |" in markdown and "1/3" in markdown
    assert (out / "plots" / "C101.png").read_bytes().startswith(PNG_MAGIC)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == 1 and summary["feasible"] == 2


def test_the_table_names_the_checkpoints_variant_on_a_cvrplib_folder(data_dir, tmp_path):
    """A PolyNet checkpoint's rows are PolyNet's, not "LINC"; a folder of CVRPLIB files is a
    set (its bks.csv gives the gaps); --max-customers keeps the smaller instances."""
    folder = tmp_path / "x"
    folder.mkdir()
    for name in ("X-n101-k25", "X-n106-k14", "X-n110-k13"):
        shutil.copy(data_dir / "cvrplib_x" / f"{name}.vrp", folder / f"{name}.vrp")
    shutil.copy(data_dir / "cvrplib_x" / "bks.csv", folder / "bks.csv")
    checkpoint = tiny_checkpoint(tmp_path / "polynet.pt", "polynet", "cvrp")
    out = tmp_path / "out"
    status = main(
        [
            "--checkpoint", str(checkpoint), "--benchmark", str(folder), "--decode", "greedy",
            "--z", "1", "--aug", "1", "--max-customers", "104", "--out", str(out), "--plot", "0",
            "--no-progress",
        ]
    )  # fmt: skip
    assert status == 0
    with (out / "rows.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["instance"] for r in rows] == ["X-n101-k25"]  # 105 and 109 customers: left out
    assert rows[0]["method"].startswith("PolyNet greedy")
    assert float(rows[0]["gap_bks_pct"]) > 0  # against 27591, in the CVRPLIB convention
    assert "| PolyNet greedy" in (out / "table.md").read_text()


def test_without_matplotlib_the_results_are_written_and_the_plots_left_out(
    data_dir, tmp_path, monkeypatch, capsys
):
    """A bare GPU machine (PyTorch, numpy, pyarrow, vrplib) evaluates to the end: a None in
    sys.modules makes ``import matplotlib`` fail there as it does where it is not installed."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(data_dir / "solomon100" / "C101.txt", folder / "C101.txt")
    out = tmp_path / "out"
    status = main(
        [
            "--checkpoint", str(tiny_checkpoint(tmp_path / "tiny.pt")), "--benchmark",
            str(folder), "--decode", "greedy", "--z", "1", "--aug", "1", "--out", str(out),
            "--no-progress",
        ]
    )  # fmt: skip
    assert status == 0
    captured = capsys.readouterr()
    assert "note: no route plots: matplotlib is not installed here" in captured.err
    assert "plots/" not in captured.out and not (out / "plots").exists()
    assert json.loads((out / "summary.json").read_text())["feasible"] == 1
    assert (out / "routes" / "C101.sol").is_file()
