"""Shared fixtures: the benchmark data folder (tests that need it skip when it is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from linc_core.benchmarks import data_dir as resolve_data_dir
from orchestration.ray_session import init_ray, prefer_loopback

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


# Before `ray` is first imported, so every socket of the test session listens on 127.0.0.1.
prefer_loopback()


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray (2 CPUs, no dashboard) shared by every test that needs it; skip without Ray."""
    ray = pytest.importorskip("ray")
    # "local": always a fresh Ray of this process, even when another program's head is up
    init_ray("local", num_cpus=2, log_to_driver=False)
    yield ray
    ray.shutdown()
