"""Access to the golden vectors recorded from the reference implementation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "shared" / "spec" / "golden"


def load_golden(name: str) -> dict:
    """The parsed golden file ``name``; skips the test when the shared folder is absent."""
    path = GOLDEN_DIR / name
    if not path.exists():
        pytest.skip(f"golden file {path} not present")
    return json.loads(path.read_text())
