"""``linc-solve``: solve one benchmark file with PyVRP and print the verified result.

    linc-solve INSTANCE --seconds S [--seed N] [--convention auto|exact|dimacs|tsplib|cvrplib]

(also ``python -m linc_core.pyvrp_cli``). The file format comes from the extension or the
header; ``auto`` takes the benchmark's own convention. When the file sits in a named benchmark
folder with a ``bks.csv``, the gap to the best-known value is printed too. Routes are printed
in CVRPLIB's solution-file syntax.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from linc_core.benchmarks import BENCHMARKS, load_bks
from linc_core.instances import Instance, read_cvrplib, read_solomon, read_tsplib
from linc_core.pyvrp_solver import PyVRPError, solve_with_pyvrp
from linc_core.verify import CONVENTIONS, convention_for

# File formats the command line recognises, and the benchmark family each one belongs to
# (the family decides the ``auto`` convention through ``verify.convention_for``).
_FORMAT_BENCHMARK = {"solomon": "solomon", "tsplib": "tsplib", "cvrplib": "cvrplib"}


# Decimals worth printing per convention: DIMACS edges have one, nint edges none.
_COST_DECIMALS = {"exact": 4, "dimacs": 1, "tsplib": 0, "cvrplib": 0}


def detect_format(path: Path) -> str:
    """``"solomon"``, ``"tsplib"`` or ``"cvrplib"`` from a file's extension and header.

    Raises:
        ValueError: The file is none of the three formats.
    """
    suffix = path.suffix.lower()
    if suffix == ".tsp":
        return "tsplib"
    if suffix == ".vrp":
        return "cvrplib"
    with path.open(errors="replace") as handle:
        head = handle.read(2000).upper()
    # Without a telling extension, fall back on the header: Solomon files carry a VEHICLE and a
    # CUSTOMER section, VRPLIB files a "TYPE :" line.
    if "CUSTOMER" in head and "VEHICLE" in head:
        return "solomon"
    compact = head.replace(" ", "").replace("\t", "")
    if "TYPE:TSP" in compact:
        return "tsplib"
    if "TYPE:CVRP" in compact:
        return "cvrplib"
    raise ValueError(f"{path}: not a Solomon (.txt), TSPLIB (.tsp) or CVRPLIB (.vrp) file.")


_READERS: dict[str, Callable[[Path], Instance]] = {
    "solomon": read_solomon,
    "tsplib": read_tsplib,
    "cvrplib": read_cvrplib,
}


def _best_known(path: Path, name: str) -> tuple[float, str] | None:
    """The best-known value of ``name`` and its convention, from the file's own folder.

    The folder must be one of the named benchmarks of ``linc_core.benchmarks`` (its name
    decides which ``bks.csv`` column holds the distance-only value); otherwise, or when the
    instance is not listed, there is no best-known value to compare with.
    """
    folder = path.resolve().parent
    if not (folder / "bks.csv").is_file():
        return None
    benchmark = next((b for b in BENCHMARKS.values() if b.folder == folder.name), None)
    if benchmark is None:
        return None
    try:
        table = load_bks(benchmark.name, root=folder.parent)
    except (OSError, ValueError) as error:  # a broken bks.csv must not hide the solution
        print(f"linc-solve: best-known values unavailable: {error}", file=sys.stderr)
        return None
    if name not in table:
        return None
    return table[name], benchmark.convention


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="linc-solve",
        description="Solve one Solomon, TSPLIB or CVRPLIB file with PyVRP and verify the result.",
    )
    parser.add_argument("instance", type=Path, help="path to a .txt (Solomon), .tsp or .vrp file")
    parser.add_argument("--seconds", type=float, required=True, help="PyVRP time limit")
    parser.add_argument("--seed", type=int, default=0, help="PyVRP random seed (default 0)")
    parser.add_argument(
        "--convention",
        choices=("auto", *CONVENTIONS),
        default="auto",
        help="cost convention; auto = the benchmark's own (Solomon: dimacs, TSPLIB: tsplib, "
        "CVRPLIB: cvrplib)",
    )
    parser.add_argument(
        "--scale", type=int, default=None, help="integer scale of lengths and times (advanced)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``linc-solve``.

    Returns:
        0 when the verified solution is feasible, 1 when the verifier rejects it, 2 when no
        solution could be produced (unreadable file, PyVRP found nothing feasible).
    """
    args = _parse_args(argv)
    path: Path = args.instance
    try:
        file_format = detect_format(path)
        instance = _READERS[file_format](path)
        convention = (
            convention_for(_FORMAT_BENCHMARK[file_format])
            if args.convention == "auto"
            else args.convention
        )
        solution = solve_with_pyvrp(
            instance,
            0,
            seconds=args.seconds,
            seed=args.seed,
            convention=convention,
            scale=args.scale,
        )
    except (OSError, ValueError, PyVRPError) as error:
        print(f"linc-solve: {error}", file=sys.stderr)
        return 2

    name = solution.name or path.stem
    print(
        f"instance: {name} ({file_format}, {instance.problem}, {instance.num_customers} "
        f"{'cities' if instance.problem == 'tsp' else 'customers'})"
    )
    print(f"convention: {convention} (scale {solution.scale}, seed {solution.seed})")
    for number, route in enumerate(solution.routes, start=1):
        # CVRPLIB's solution-file syntax, so the lines can be pasted into a .sol file.
        print(f"Route #{number}: {' '.join(str(node) for node in route)}")
    status = "feasible" if solution.feasible else "INFEASIBLE"
    print(f"cost: {solution.cost:.{_COST_DECIMALS[convention]}f} (verified, {status})")
    print(f"routes: {solution.num_routes}")
    best = _best_known(path, name)
    if best is not None:
        best_known, bks_convention = best
        gap = 100.0 * (solution.cost - best_known) / best_known
        print(f"bks: {best_known:g}")
        print(f"gap: {gap:.2f}%")
        if bks_convention != convention:
            # e.g. exact distances against DIMACS values: the gap mixes two cost rules.
            print(f"note: the bks is stated under {bks_convention}, this cost under {convention}")
    print(f"runtime: {solution.runtime:.2f} s")
    if not solution.feasible:
        for violation in solution.verify.violations:
            print(f"violation: {violation.kind}: {violation.detail}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
