"""One import for a notebook: ``import linc_core as lc`` gives the notebook's names, lazily,
and README's notebook block runs as it is written.

The block is read from README.md (the first ```python block after "From a notebook"), so the
documentation cannot drift from the API: it runs in a fresh interpreter from the checkout,
where its ``../shared/data`` path resolves (``$LINC_DATA_DIR`` replaces it when set).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import linc_core

REPO = Path(__file__).resolve().parents[2]


def _notebook_block() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("From a notebook")
    match = re.search(r"```python\n(.*?)```", text[start:], re.DOTALL)
    assert match is not None, "README: no python block after 'From a notebook'"
    return match.group(1)


def test_every_public_name_resolves() -> None:
    for name in linc_core.__all__:
        assert getattr(linc_core, name) is not None, name
    assert set(linc_core.__all__) <= set(dir(linc_core))
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        linc_core.nonsense  # noqa: B018


def test_importing_the_package_loads_no_model() -> None:
    # the command lines import linc_core.utils.typed first: that must not pull the model in
    script = "import sys, linc_core.utils.typed; print('linc_core.model' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_readme_notebook_block_runs_with_one_import(data_dir: Path) -> None:
    block = _notebook_block()
    assert block.count("import linc_core") == 1 and "from linc_core" not in block
    block = block.replace('Path("../shared/data/', f'Path("{data_dir}/')
    done = subprocess.run(
        [sys.executable, "-c", block],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    # the decoded C101 cost, then the verifier's verdict on its routes
    found = re.fullmatch(r"C101: cost (\d+\.\d), feasible (True|False)", last)
    assert found is not None, last
    assert float(found.group(1)) > 827.3  # above C101's best-known 827.3, as any solution is
