"""The golden vectors recorded from the reference implementation, and where they are found.

The folder is ``$LINC_GOLDEN_DIR``, else ``<checkout>/../shared/spec/golden`` (beside the
benchmark data). A test that asks for a golden file that is not there fails with one line naming
the file and the variable; it never skips.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

GOLDEN_DIR_ENV = "LINC_GOLDEN_DIR"
DEFAULT_GOLDEN_DIR = Path(__file__).resolve().parents[2] / "shared" / "spec" / "golden"
# The reference's full_linc CVRPTW weights, the model linc_model_golden.json was recorded with.
REFERENCE_STATE_DICT = "linc_cvrptw_full_linc_random_state_dict.pt"


def golden_path(name: str) -> Path:
    """The golden file ``name``; fails the calling test (one line) when it is absent."""
    configured = os.environ.get(GOLDEN_DIR_ENV)
    folder = Path(configured).expanduser() if configured else DEFAULT_GOLDEN_DIR
    path = folder / name
    if not path.is_file():
        where = f"{GOLDEN_DIR_ENV}={configured!r}" if configured else f"{GOLDEN_DIR_ENV} unset"
        pytest.fail(
            f"golden file {path} not found ({where}); set {GOLDEN_DIR_ENV} to the folder "
            "holding the golden vectors (shared/spec/golden)",
            pytrace=False,
        )
    return path


def load_golden(name: str) -> dict:
    """The parsed golden JSON file ``name`` (see ``golden_path``)."""
    return json.loads(golden_path(name).read_text())


def reference_state_dict() -> dict[str, torch.Tensor]:
    """The reference's own state dict of ``REFERENCE_STATE_DICT`` (its key names)."""
    return torch.load(golden_path(REFERENCE_STATE_DICT), weights_only=True)
