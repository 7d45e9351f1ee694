"""What many test files share: the benchmark data folder and one local Ray.

Benchmark data (``data_dir``) is ``$LINC_DATA_DIR``, else ``<checkout>/../shared/data``; the
golden vectors (``tests.golden``) are ``$LINC_GOLDEN_DIR``, else
``<checkout>/../shared/spec/golden``. A test that needs either and cannot find it fails with one
line naming the folders looked in and the variable to set; it never skips. From a worktree::

    export LINC_DATA_DIR=/work/shared/data LINC_GOLDEN_DIR=/work/shared/spec/golden
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from linc_core.benchmarks import data_dir as resolve_data_dir
from orchestration.ray_session import init_ray, prefer_loopback

# Test tensors are small: one intra-op thread avoids OpenMP spin-waiting when the 2 CPUs are
# shared (another pytest, a Ray worker), which slows small ops down by an order of magnitude.
torch.set_num_threads(1)

# Before `ray` is first imported, so every socket of the test session listens on 127.0.0.1.
prefer_loopback()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The benchmark data folder; fails (one line, naming ``LINC_DATA_DIR``) when absent."""
    try:
        return resolve_data_dir()
    except FileNotFoundError as missing:
        message = str(missing)
    pytest.fail(message, pytrace=False)  # outside the except: no chained traceback


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray (2 CPUs, no dashboard) shared by every test that needs it."""
    import ray  # after prefer_loopback(), which must run before Ray's first import

    # "local": always a fresh Ray of this process, even when another program's head is up
    init_ray("local", num_cpus=2, log_to_driver=False)
    yield ray
    ray.shutdown()
