"""Run the fault matrix and print fault -> outcome -> metrics lost -> duplicated steps -> runs
left RUNNING (see :mod:`faults.scenarios`).

    python -m faults                         # every row (about half an hour on 2 cores)
    python -m faults --only trial-sigterm,sweep-moved --keep /tmp/faults

Exit status 0 when every row passed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import traceback
from pathlib import Path

from orchestration.ray_session import prefer_loopback

prefer_loopback()  # before ray is imported: every node of the matrix listens on 127.0.0.1
# before MLflow is imported: its INFO lines (a new store's tables) stay out of the matrix's output
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")

from faults.harness import Row  # noqa: E402
from faults.scenarios import MATRIX  # noqa: E402


def table(rows: list[Row]) -> str:
    lines = [
        "| fault | outcome | metrics lost | duplicated steps | runs left RUNNING | s | pass |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        cells = [row.metrics_lost, row.duplicated_steps, row.runs_running]
        numbers = ["-" if c is None else str(c) for c in cells]
        lines.append(
            f"| {row.fault} | {row.outcome} | {' | '.join(numbers)} | {row.seconds:.0f} | "
            f"{'yes' if row.ok else 'NO'} |"
        )
    notes = [f"- {row.fault}: {'; '.join(row.notes)}" for row in rows if row.notes]
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults", description=__doc__)
    parser.add_argument("--only", help=f"comma-separated rows of {', '.join(MATRIX)}")
    parser.add_argument("--keep", type=Path, help="keep each row's folder under this one")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(MATRIX)
    unknown = sorted(set(names) - set(MATRIX))
    if unknown:
        parser.error(f"--only: unknown row(s) {unknown}; known: {', '.join(MATRIX)}")
    base = args.keep or Path(tempfile.mkdtemp(prefix="linc-faults-"))
    rows = []
    for name in names:
        folder = base / name
        folder.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        try:
            row = MATRIX[name](folder)
        except Exception as err:  # a harness failure is a failed row, not the end of the matrix
            row = Row(name, outcome=f"ERROR: {type(err).__name__}: {err}"[:300])
            row.notes.append(traceback.format_exc().splitlines()[-1])
        row.seconds = time.monotonic() - began
        rows.append(row)
        print(f"{name}: {'pass' if row.ok else 'FAIL'} ({row.seconds:.0f} s)", flush=True)
    print()
    print(table(rows))
    if args.keep is None:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if all(row.ok for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
