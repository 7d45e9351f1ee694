"""``python -m bench.gpu``: run the GPU check, print its table, write its JSON file.

    python -m bench.gpu                       # every section on CUDA (CPU mode without CUDA)
    python -m bench.gpu --device cpu --quick  # the CPU mode CI runs
    python -m bench.gpu --sections sync,precision --out /tmp/gpu.json

Exit status 0 when no row failed, 1 otherwise, 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from bench.gpu import compiled, correctness, precision, sync, throughput
from bench.gpu.rows import FAIL, CheckContext, Row

SECTIONS: dict[str, Callable[[CheckContext], list[Row]]] = {
    "correctness": correctness.run,
    "precision": precision.run,
    "sync": sync.run,
    "throughput": throughput.run,
    "compile": compiled.run,
}
DEFAULT_SECTIONS = "correctness,precision,sync,throughput,compile"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "results" / "gpu.json"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--device", default="auto", help="cuda, cuda:N, cpu, or auto (cuda when available)"
    )
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    parser.add_argument("--sections", default=DEFAULT_SECTIONS, help="comma-separated subset")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON file to write")
    args = parser.parse_args(argv)
    unknown = [s for s in args.sections.split(",") if s.strip() not in SECTIONS]
    if unknown:
        parser.error(f"--sections: unknown {unknown}; expected a subset of {list(SECTIONS)}")
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: this torch ({torch.__version__}) sees no CUDA")
    if not (args.device == "cpu" or args.device.startswith("cuda")):
        parser.error(f"--device: expected cpu, cuda or cuda:N, got {args.device!r}")
    return args


def _header(device: torch.device) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    return {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "device": str(device),
        "device_name": name or platform.machine(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }


def _print_header(header: dict) -> None:
    print(
        f"GPU check {header['when']}: {header['device_name']} ({header['device']}), "
        f"torch {header['torch']}, CUDA {header['cuda']}, Python {header['python']}"
    )
    print(f"{'section':<12} {'check':<62} {'value':>12} {'unit':<15} {'status':<8} detail")


def _print_rows(rows: list[Row]) -> None:
    for r in rows:
        value = "-" if r.value is None else f"{r.value:12.4g}"
        print(f"{r.section:<12} {r.name:<62} {value:>12} {r.unit:<15} {r.status:<8} {r.detail}")
    sys.stdout.flush()


def _write(path: Path, header: dict, rows: list[Row]) -> None:
    """The JSON file, rewritten after every section (atomically) so a cut run keeps its rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({**header, "rows": [r.as_dict() for r in rows]}, indent=2))
    temporary.replace(path)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    ctx = CheckContext(torch.device(args.device), args.quick)
    header = _header(ctx.device)
    rows: list[Row] = []
    _print_header(header)
    for name in args.sections.split(","):
        began = time.perf_counter()
        try:
            section_rows = SECTIONS[name.strip()](ctx)
        except Exception as err:  # noqa: BLE001 - one broken section must not hide the others
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            section_rows = [Row(name, "section crashed", status=FAIL, detail=repr(err)[:300])]
        rows.extend(section_rows)
        _print_rows(section_rows)
        print(f"[{name}: {time.perf_counter() - began:.0f} s]", file=sys.stderr, flush=True)
        _write(args.out, header, rows)
    counts = {s: sum(r.status == s for r in rows) for s in ("pass", FAIL, "info", "not run")}
    print("summary: " + ", ".join(f"{n} {s}" for s, n in counts.items()), flush=True)
    return 1 if any(r.status == FAIL for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
