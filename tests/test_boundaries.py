"""Layering: linc_core is pure science code; orchestration never imports sweeps."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN_IN_CORE = ("ray", "mlflow", "hydra", "omegaconf", "optuna", "boto3", "botocore")


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("linc_core", FORBIDDEN_IN_CORE + ("orchestration", "sweeps")),
        ("orchestration", ("sweeps",)),
    ],
)
def test_no_forbidden_imports_in_source(package: str, forbidden: tuple[str, ...]) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_roots(path) & set(forbidden))
        for path in (ROOT / package).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_importing_every_core_module_loads_no_platform_package() -> None:
    """Catches indirect imports too: import all of linc_core in a clean interpreter."""
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "linc_core").rglob("*.py")
    )
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"print(sorted(r for r in {FORBIDDEN_IN_CORE!r} if r in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
