"""Benchmark sets: named, synthetic and folder sets; the Solomon-50 ablation set."""

from __future__ import annotations

import shutil

import pytest
import torch

from linc_core.evaluate import load_benchmark, solomon50
from linc_core.instances import Instance


def test_unknown_benchmark_is_named():
    with pytest.raises(ValueError, match="no-such-set"):
        load_benchmark("no-such-set")


def test_solomon50_is_the_56_solomon_files_cut_to_50_customers(data_dir):
    instances = solomon50()
    assert len(instances) == 56
    assert all(i.num_customers == 50 and i.locs.dtype == torch.float32 for i in instances)
    assert instances[0].names == ("C101",) and instances[-1].names == ("RC208",)
    # the evaluation set is the same cut, in float64 and without best-known values
    bench = load_benchmark("solomon50", limit=3)
    assert (bench.name, bench.convention, bench.bks, bench.errors) == (
        "solomon50",
        "dimacs",
        {},
        [],
    )
    for loaded, cut in zip(bench.instances, instances, strict=False):
        assert loaded.locs.dtype == torch.float64 and loaded.names == cut.names
        assert torch.equal(loaded.time_windows.float(), cut.time_windows)
    # C101's customer 50 sits at (26, 32) with demand 10, and the depot window is kept
    c101 = solomon50(torch.float64)[0]
    assert c101.locs[0, 50].tolist() == [26.0, 32.0] and float(c101.demand[0, 50]) == 10.0
    assert c101.time_windows[0, 0].tolist() == [0.0, 1236.0]
    assert Instance.concat(instances).batch_size == 56


def test_a_folder_bks_csv_gives_the_best_known_costs(data_dir, tmp_path):
    (tmp_path / "C101.txt").write_text((data_dir / "solomon100" / "C101.txt").read_text())
    (tmp_path / "bks.csv").write_text("instance,vehicles,bks\nC101,10,827.3\n")
    bench = load_benchmark(str(tmp_path))
    assert bench.bks == {"C101": 827.3} and bench.convention == "dimacs"
    (tmp_path / "bks.csv").write_text("instance,vehicles\nC101,10\n")
    with pytest.raises(ValueError, match="bks.csv"):
        load_benchmark(str(tmp_path))


def test_a_folder_of_cvrplib_files_is_a_set(data_dir, tmp_path):
    """A subset of X copied into a folder: its .vrp files read, its bks.csv matched, each
    instance's own .sol kept quiet beside it; a .sol without its instance and a note skipped
    and listed."""
    folder = tmp_path / "x-small"
    folder.mkdir()
    for name in ("X-n101-k25", "X-n106-k14"):
        for suffix in (".vrp", ".sol"):
            shutil.copy(data_dir / "cvrplib_x" / f"{name}{suffix}", folder / f"{name}{suffix}")
    shutil.copy(data_dir / "cvrplib_x" / "bks.csv", folder / "bks.csv")
    shutil.copy(data_dir / "cvrplib_x" / "X-n110-k13.sol", folder / "X-n110-k13.sol")
    (folder / "notes.md").write_text("where these came from\n")
    loaded = load_benchmark(str(folder))
    assert [i.names[0] for i in loaded.instances] == ["X-n101-k25", "X-n106-k14"]
    assert {i.problem for i in loaded.instances} == {"cvrp"}
    assert loaded.convention == "cvrplib"
    assert loaded.bks == {"X-n101-k25": 27591.0, "X-n106-k14": 26362.0}
    not_vrp = "not a .vrp file"
    assert loaded.skipped == [("X-n110-k13.sol", not_vrp), ("notes.md", not_vrp)]


def test_a_folder_of_two_formats_is_refused_naming_them(data_dir, tmp_path):
    shutil.copy(data_dir / "cvrplib_x" / "X-n101-k25.vrp", tmp_path / "X-n101-k25.vrp")
    shutil.copy(data_dir / "tsplib" / "eil51.tsp", tmp_path / "eil51.tsp")
    with pytest.raises(ValueError, match=r"several formats \(1 cvrplib, 1 tsplib\)"):
        load_benchmark(str(tmp_path))


def test_max_customers_keeps_the_smaller_instances(data_dir):
    loaded = load_benchmark("cvrplib_x", limit=12, max_customers=150)
    sizes = [i.num_customers for i in loaded.instances]
    assert sizes and max(sizes) <= 150
    larger = [name for name, why in loaded.skipped if "more than 150" in why]
    everything = load_benchmark("cvrplib_x", limit=12)
    assert len(loaded.instances) + len(larger) == len(everything.instances)
    assert larger  # the first 12 files include instances over 150 customers
