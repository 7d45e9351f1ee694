"""The ``Instance`` batch type: truncation (the Solomon-50 cut) and the content fingerprint."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from linc_core.instances import Instance, read_solomon, truncate_customers
from linc_core.problems import generate_cvrptw_envelope, generate_tsp


def _solomon_like(num_customers: int = 100) -> Instance:
    rng = np.random.default_rng(0)
    n = num_customers
    locs = np.concatenate([[[40.0, 50.0]], rng.integers(0, 101, size=(n, 2))]).astype(np.float64)
    demand = np.concatenate([[0.0], rng.integers(1, 41, size=n)])
    ready = rng.integers(0, 1000, size=n).astype(np.float64)
    windows = np.concatenate([[[0.0, 1236.0]], np.stack([ready, ready + 60.0], axis=1)])
    service = np.concatenate([[0.0], np.full(n, 90.0)])
    return Instance.from_arrays(
        "cvrptw",
        locs,
        demand=demand,
        capacity=200.0,
        time_windows=windows,
        service_time=service,
        grid_size=100.0,
        names=["C1xx"],
    )


def _check_truncation(full: Instance, cut: Instance, k: int) -> None:
    assert cut.num_customers == k and cut.num_nodes == k + 1
    assert cut.problem == full.problem and cut.names == full.names
    for f in ("locs", "demand", "time_windows", "service_time"):
        assert torch.equal(getattr(cut, f), getattr(full, f)[:, : k + 1]), f
    for f in ("capacity", "travel_time_scale", "grid_size"):
        assert torch.equal(getattr(cut, f), getattr(full, f)), f
    assert torch.equal(cut.time_windows[:, 0], full.time_windows[:, 0])


def test_truncate_customers_solomon_like() -> None:
    full = _solomon_like()
    cut = truncate_customers(full, 50)
    _check_truncation(full, cut, 50)
    assert cut.locs.dtype == full.locs.dtype
    # A copy: editing the cut leaves the source untouched.
    cut.locs[0, 1, 0] = -1.0
    assert full.locs[0, 1, 0] != -1.0
    assert truncate_customers(full, 100).num_customers == 100
    with pytest.raises(ValueError):
        truncate_customers(full, 101)
    with pytest.raises(ValueError):
        truncate_customers(full, 0)
    tsp = generate_tsp(3, 20, seed=0)
    assert torch.equal(truncate_customers(tsp, 5).locs, tsp.locs[:, :5])
    batch = generate_cvrptw_envelope(4, 60, seed=0)
    _check_truncation(batch, truncate_customers(batch, 50), 50)


def test_truncate_customers_real_solomon(data_dir) -> None:
    path = data_dir / "solomon100" / "C101.txt"
    full = read_solomon(path)
    cut = truncate_customers(full, 50)
    _check_truncation(full, cut, 50)
    assert cut.names == ("C101",)
    assert float(cut.time_windows[0, 0, 1]) == 1236.0
    assert float(cut.capacity[0]) == 200.0
    assert torch.all(cut.service_time[0, 1:] == 90.0)
    # Customer 50 matches the file's own row (id x y demand ready due service).
    row = next(
        [float(v) for v in line.split()]
        for line in path.read_text().splitlines()
        if line.split()[:1] == ["50"] and len(line.split()) == 7
    )
    assert cut.locs[0, 50].tolist() == row[1:3]
    assert float(cut.demand[0, 50]) == row[3]
    assert cut.time_windows[0, 50].tolist() == row[4:6]


def test_fingerprint_hashes_the_problem_and_one_row_as_float64_bytes() -> None:
    batch = Instance.from_arrays(
        "cvrp", [[[0.0, 0.0], [1.0, 2.0]], [[0.0, 0.0], [1.0, 3.0]]], demand=[[0, 3], [0, 3]],
        capacity=5,
    )  # fmt: skip
    digest = hashlib.sha256(b"cvrp")
    for name in ("locs", "demand", "capacity", "time_windows", "service_time"):
        digest.update(getattr(batch, name)[1].double().numpy().tobytes())
    digest.update(batch.travel_time_scale[1].double().numpy().tobytes())
    assert batch.fingerprint(1) == digest.hexdigest()[:16]
    # the value the PyVRP cost cache has stored for this data since the first release
    assert batch.fingerprint(0) == batch.select([0]).fingerprint() == "ca6125ca08b1db7a"
    assert batch.fingerprint(0) != batch.fingerprint(1)
    # names, grid size and dtype do not enter it
    renamed = batch.to(dtype=torch.float64).select([0])
    renamed = Instance.from_arrays(
        "cvrp", renamed.locs, demand=renamed.demand, capacity=renamed.capacity, grid_size=7.0,
        names=["other"],
    )  # fmt: skip
    assert renamed.fingerprint() == "ca6125ca08b1db7a"


def test_fingerprint_of_a_real_file_is_stable(data_dir) -> None:
    c101 = read_solomon(data_dir / "solomon100" / "C101.txt")
    assert c101.fingerprint() == "53da7724e03613c8"
    assert c101.to(dtype=torch.float32).fingerprint() == "53da7724e03613c8"
