"""Shared fixtures: the benchmark data folder (tests that need it skip when it is absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from linc_core.benchmarks import data_dir as resolve_data_dir

# Test tensors are small: one intra-op thread avoids OpenMP spin-waiting when the 2 CPUs are
# shared (another pytest, a Ray worker), which slows small ops down by an order of magnitude.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The benchmark data folder (``$LINC_DATA_DIR`` or ``../shared/data``); skip if absent."""
    try:
        return resolve_data_dir()
    except FileNotFoundError as err:
        pytest.skip(f"benchmark data not available: {err}")


# Ray's node address is loopback only when it believes it is not part of a cluster; set before
# `ray` is first imported so every socket of the test session listens on 127.0.0.1.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray (2 CPUs, no dashboard) shared by every test that needs it; skip without Ray."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        # address="local": always a fresh cluster of this process, even when a `ray start`
        # head of another program is running on the machine
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
