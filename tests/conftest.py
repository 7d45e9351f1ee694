"""Shared fixtures: the benchmark data folder (tests that need it skip when it is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from linc_core.benchmarks import data_dir as resolve_data_dir


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The benchmark data folder (``$LINC_DATA_DIR`` or ``../shared/data``); skip if absent."""
    try:
        return resolve_data_dir()
    except FileNotFoundError as err:
        pytest.skip(f"benchmark data not available: {err}")
