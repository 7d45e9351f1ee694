"""Shared fixtures: the benchmark data folder (tests that need it skip when it is absent)."""

from __future__ import annotations

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
