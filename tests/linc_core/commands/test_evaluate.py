"""``linc-eval``: a malformed file is named and the rest evaluated; every output is written."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

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


def test_a_small_container_decodes_in_smaller_chunks_to_the_same_rows(
    memory_cgroup, data_dir, tmp_path, capsys
) -> None:
    """In a real cgroup of 512 MiB, two Solomon-100 at z=800 x8 in a chunk of 16,384 rollouts
    (all 12,800 at once, the default then) were killed by the kernel (SIGKILL 3 s in); linc-eval now
    halves the chunk until the decoding fits what the process may still use, says so, records
    it, and writes the rows an unconfined run writes."""
    checkpoint = Path(__file__).resolve().parents[3] / "models" / "full_linc_cvrptw_n100.pt"
    flags = ["--checkpoint", str(checkpoint), "--benchmark", "solomon100", "--limit", "2"]
    flags += ["--no-progress", "--plot", "0"]
    free, confined = tmp_path / "free", tmp_path / "confined"
    assert main([*flags, "--out", str(free)]) == 0
    capsys.readouterr()
    command = [*memory_cgroup(512 << 20), sys.executable, "-m", "linc_core.commands.evaluate"]
    environment = os.environ | {"LINC_DATA_DIR": str(data_dir)}
    ran = subprocess.run(
        [*command, *flags, "--out", str(confined)],
        capture_output=True, text=True, timeout=300, env=environment,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    chosen = json.loads((confined / "summary.json").read_text())["decode"]
    assert (
        json.loads((free / "summary.json").read_text())["decode"]["max_rollouts_per_chunk"] is None
    )
    chunk = chosen["max_rollouts_per_chunk"]
    assert chunk in (256, 512, 1024, 2048, 4096), chunk  # below the default 8,192
    told = f"decoding at most {chunk} rollouts at a time: this process's cgroup allows 512 MiB"
    assert f"{told} (--max-rollouts-per-chunk to choose)\n" in ran.stdout

    def rows(folder: Path) -> list[dict]:
        with open(folder / "rows.csv", newline="") as f:
            return [{k: v for k, v in row.items() if k != "seconds"} for row in csv.DictReader(f)]

    assert rows(confined) == rows(free) and len(rows(free)) == 2
