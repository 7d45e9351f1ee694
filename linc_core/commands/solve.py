"""``linc-solve``: solve one benchmark file with PyVRP, or re-verify a solution file.

    linc-solve INSTANCE --seconds S [--seed N] [--convention auto|exact|dimacs|tsplib|cvrplib]
    linc-solve --verify FILE.sol [INSTANCE] [--convention ...]

(also ``python -m linc_core.commands.solve``). The reader comes from the extension (``.txt``
Solomon, ``.tsp`` TSPLIB, ``.vrp`` CVRPLIB, any case) and a file it cannot read is refused
with the reader's own reason; ``auto`` takes the benchmark's own convention. When the file sits
in a named benchmark folder with a ``bks.csv``, the gap to the best-known value is printed too.
Routes are printed in CVRPLIB's solution-file syntax.

``--verify`` checks a CVRPLIB-style ``.sol`` file (``Route #i:`` lines, ``Cost``, optionally
``Instance PATH`` and ``Convention NAME`` lines, as ``linc-eval`` writes them into
``routes/``) against its instance with the independent verifier: feasibility, and the cost
recomputed under the convention against the file's ``Cost``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from linc_core.commands.flags import CommandLineError, OneLineParser, require_flag, require_int
from linc_core.evaluate.pyvrp_solver import MAX_SEED, PyVRPError, solve_with_pyvrp
from linc_core.instances import read_solution
from linc_core.instances.any_file import read_instance
from linc_core.instances.benchmarks import BENCHMARKS, load_bks
from linc_core.verify import CONVENTIONS, convention_for, verify_instance

# File formats the command line recognises, and the benchmark family each one belongs to
# (the family decides the ``auto`` convention through ``verify.convention_for``).
_FORMAT_BENCHMARK = {"solomon": "solomon", "tsplib": "tsplib", "cvrplib": "cvrplib"}


# Decimals worth printing per convention: DIMACS edges have one, nint edges none.
_COST_DECIMALS = {"exact": 4, "dimacs": 1, "tsplib": 0, "cvrplib": 0}


def _best_known(path: Path, name: str) -> tuple[float, str] | None:
    """The best-known value of ``name`` and its convention, from the file's own folder.

    The folder must be one of the named benchmarks of ``linc_core.instances.benchmarks`` (its name
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
    parser = OneLineParser(
        prog="linc-solve",
        description="Solve one Solomon, TSPLIB or CVRPLIB file with PyVRP and verify the result, "
        "or re-verify a solution file (--verify).",
    )
    parser.add_argument(
        "instance",
        type=Path,
        nargs="?",
        help="a .txt (Solomon), .tsp or .vrp file (with --verify: default the .sol's Instance)",
    )
    parser.add_argument("--seconds", type=float, help="PyVRP time limit (required to solve)")
    parser.add_argument("--seed", type=int, default=0, help="PyVRP random seed (default 0)")
    parser.add_argument(
        "--verify",
        type=Path,
        metavar="FILE.sol",
        help="check this CVRPLIB-style solution instead of solving (as linc-eval writes them)",
    )
    parser.add_argument(
        "--convention",
        choices=("auto", *CONVENTIONS),
        default="auto",
        help="cost convention; auto = the .sol's Convention line, else the benchmark's own "
        "(Solomon: dimacs, TSPLIB: tsplib, CVRPLIB: cvrplib)",
    )
    parser.add_argument(
        "--scale", type=int, default=None, help="integer scale of lengths and times (advanced)"
    )
    args = parser.parse_args(argv)
    if args.verify is None and (args.instance is None or args.seconds is None):
        parser.error("give INSTANCE --seconds S to solve, or --verify FILE.sol to check")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``linc-solve``.

    Returns:
        0 when the verified solution is feasible, 1 when the verifier rejects it, 2 when no
        solution could be produced (unreadable file, PyVRP found nothing feasible).
    """
    args = _parse_args(argv)
    if args.verify is not None:
        return verify_solution_file(args.verify, args.instance, args.convention)
    path: Path = args.instance
    try:  # nan seconds would never stop the search; PyVRP's seed is 32-bit unsigned
        finite = math.isfinite(args.seconds) and args.seconds > 0
        require_flag(finite, "--seconds", args.seconds, "a finite number > 0")
        require_int("--seed", args.seed, 0, MAX_SEED)
    except CommandLineError as error:
        print(f"linc-solve: {error}", file=sys.stderr)
        return 2
    try:
        file_format, instance = read_instance(path)
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


def verify_solution_file(sol: Path, instance_path: Path | None, convention: str) -> int:
    """``linc-solve --verify``: 0 feasible (and the file's cost reproduced), 1 infeasible or
    another cost, 2 when the files cannot be read."""
    try:
        routes = read_solution(sol)
        fields = _solution_fields(sol)
        if instance_path is None:
            if "instance" not in fields:
                raise ValueError(
                    f"{sol}: no 'Instance' line; give the instance: "
                    f"linc-solve INSTANCE --verify {sol}"
                )
            instance_path = sol.parent / Path(fields["instance"])  # an absolute one wins
        file_format, instance = read_instance(instance_path)
        if convention == "auto":
            convention = fields.get("convention") or convention_for(_FORMAT_BENCHMARK[file_format])
        if convention not in CONVENTIONS:
            raise ValueError(f"{sol}: Convention {convention!r}: expected one of {CONVENTIONS}")
    except (OSError, ValueError) as error:
        print(f"linc-solve: {error}", file=sys.stderr)
        return 2
    solution = routes if instance.has_depot else [[c for r in routes for c in r]]
    result = verify_instance(instance, 0, solution, convention=convention)
    decimals = _COST_DECIMALS[convention]
    print(f"solution: {sol}")
    print(f"instance: {instance_path} ({file_format}, {instance.problem})")
    print(f"convention: {convention}")
    status = "feasible" if result.feasible else "INFEASIBLE"
    print(f"cost: {result.cost:.{decimals}f} (verified, {status})")
    print(f"routes: {result.num_routes}")
    agrees = True
    if "cost" in fields:
        stated = fields["cost"]
        tolerance = 0.5 * 10.0 ** -_decimals(stated) + 1e-9 * abs(result.cost)
        agrees = abs(float(stated) - result.cost) <= tolerance
        print(f"file cost: {stated} ({'reproduced' if agrees else 'NOT reproduced'})")
    for violation in result.violations:
        print(f"violation: {violation.kind}: {violation.detail}", file=sys.stderr)
    return 0 if result.feasible and agrees else 1


def _solution_fields(sol: Path) -> dict[str, str]:
    """The ``Key value`` lines of a ``.sol`` file besides its routes, keys lower-cased."""
    fields = {}
    for line in sol.read_text().splitlines():
        text = line.strip()
        if text and not text.startswith("#") and not text.startswith("Route"):
            key, _, value = text.partition(" ")
            fields[key.rstrip(":").lower()] = value.strip()
    if "cost" in fields:
        try:
            float(fields["cost"])
        except ValueError:
            raise ValueError(f"{sol}: Cost {fields['cost']!r} is not a number") from None
    return fields


def _decimals(number: str) -> int:
    """Decimals a number was written with (``827.3`` -> 1): the precision of a stated cost."""
    mantissa = number.lower().split("e")[0]
    return len(mantissa.split(".")[1]) if "." in mantissa else 0


if __name__ == "__main__":
    sys.exit(main())
