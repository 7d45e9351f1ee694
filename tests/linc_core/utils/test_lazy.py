"""Lazily exported names: imported on first use, listed by dir, unknown ones refused."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_a_lazy_package_imports_a_name_on_first_use_only() -> None:
    code = (
        "import sys, linc_core.problems as p\n"
        "before = 'linc_core.problems.cvrptw.env' in sys.modules\n"
        "env = p.CVRPTWEnv\n"
        "print(before, 'linc_core.problems.cvrptw.env' in sys.modules, 'make_env' in dir(p),"
        " p.CVRPTWEnv is env)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True", "True"]


def test_an_unknown_name_is_an_attribute_error() -> None:
    import linc_core.problems

    with pytest.raises(AttributeError, match="'linc_core.problems' has no attribute 'Nope'"):
        linc_core.problems.Nope  # noqa: B018
