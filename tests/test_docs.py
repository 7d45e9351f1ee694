"""The documentation's shell commands run as written.

Every ```bash block of README.md, docs/ and infra/README.md is read. A command of linc's is run
when it is cheap (``--help``, ``--cfg``, ``linc-data where``, ``linc-solve``); a platform
command that would start a sweep (``linc-tune``, ``linc-ablation``, ``linc-hpo``) is run with
``--cfg plan`` appended, which composes its config and resolves it into the run plan (every
override, group option and preset it names is validated) without running it; ``linc-generate``
with ``--cfg job``. Each distinct command runs once. The notebooks in
docs/tutorials execute as the site builds (``make docs``), and README's notebook block runs in
``tests/linc_core/test_public_api.py``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PAGES = [REPO / "README.md", REPO / "infra" / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
PLATFORM = ("linc-tune", "linc-ablation", "linc-hpo", "linc-generate")
CHEAP = (
    re.compile(r"(^| )(--help|-h)( |$)"),
    re.compile(r" --cfg (job|plan)"),
    re.compile(r"linc-data where"),
    re.compile(r"linc-solve .*(--seconds \d|--verify)"),
)


def _commands(page: Path) -> list[str]:
    """The command lines of a page's bash blocks (continuations joined, comments dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" # ")[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def _linc_command(line: str) -> str | None:
    """The line as this checkout runs it, when it is one of linc's cheap commands."""
    if not line.startswith(".venv/bin/linc-"):
        return None
    if any(pattern.search(line) for pattern in CHEAP):
        return line
    command = line.split()[0].rsplit("/", 1)[-1]
    if command in PLATFORM and "..." not in line:
        # plan: composed and validated into the run plan (linc-generate composes only)
        return f"{line} --cfg {'job' if command == 'linc-generate' else 'plan'}"
    return None


def _cases() -> list[tuple[str, str]]:
    """(the pages that show it, the command), once per distinct command."""
    pages: dict[str, list[str]] = {}
    for page in PAGES:
        for line in _commands(page):
            command = _linc_command(line)
            if command is not None:
                pages.setdefault(command, []).append(str(page.relative_to(REPO)))
    return [(", ".join(sorted(set(where))), command) for command, where in pages.items()]


CASES = _cases()


def test_the_pages_hold_commands_to_run() -> None:
    # the check cannot pass by finding nothing: the README's and the docs' commands are many
    assert len(CASES) >= 10, CASES


@pytest.mark.parametrize(("page", "command"), CASES, ids=[f"{p}: {c}"[:90] for p, c in CASES])
def test_a_documented_command_runs(page: str, command: str, data_dir: Path) -> None:
    text = command.replace(".venv/bin/", f"{BIN}/").replace("../shared/data", str(data_dir))
    text = text.replace("$PWD", str(REPO))
    done = subprocess.run(
        shlex.split(text),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"PATH": f"{BIN}:{os.environ['PATH']}"},
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{page}: `{command}` exited {done.returncode}:\n{output[-2000:]}"
    assert "Traceback" not in output, output[-2000:]
