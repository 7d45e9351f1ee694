"""Benchmark evaluation: decode, verify every solution, gaps vs BKS and PyVRP, tables and plots.

The ``linc-eval`` command: a checkpoint decodes a benchmark set; every solution is verified,
scored and reported.

    linc-eval --checkpoint runs/x/latest.pt --benchmark solomon100 --decode sampling --z 800 --aug 8
    linc-eval --checkpoint ... --benchmark path/to/homberger200 --decode sgbs --out runs/eval-hg
    linc-eval --checkpoint cvrp.pt --benchmark cvrplib_x --max-customers 200

The table's method is what the checkpoint is: its variant's label (Full LINC, PolyNet, POMO,
an ablation's row), read from the switches its configs carry.

Decoding (``--decode``; the budget is printed before decoding starts and is the table's label):

- ``sampling``: softmax sampling, ``--z`` rollouts per augmented copy, each with its own
  z-vector (default 800, the paper's budget);
- ``greedy``: the argmax rollout, ``--z`` of them per augmented copy, each under its own
  z-vector (default 1: one rollout per copy);
- ``multistart``: POMO, one greedy rollout per forced first customer (``--starts``);
- ``sgbs``: simulation-guided beam search (``--beam``, ``--expansion``, ``--sgbs-z``).

``--aug 8`` decodes the 8 dihedral copies of every instance (``--aug 1``: as given).

Sets: see :mod:`linc_core.evaluate.benchmark_sets` (a folder's best-known values are matched to
file names ignoring case; instances without one are counted in a warning). Gaps against PyVRP
(``--pyvrp-seconds S``) come from :mod:`linc_core.evaluate.pyvrp_cache`, computed once per
instance and time budget.

Outputs in ``--out``: ``rows.csv`` and ``rows.parquet`` (one row per instance), ``table.md``
(method, Obj., Gap, Time, as the paper's tables; then the mean, median and aggregate gaps and,
on Solomon-style names, each family's mean gap), ``summary.json`` (strict JSON: ``null`` where
there is no number), ``routes/NAME.sol`` (each solution in CVRPLIB's syntax; re-verify one with
``linc-solve --verify routes/NAME.sol``) and ``plots/NAME.png`` route plots; every file is
written to a temporary name and renamed into place. The exit status is 1 when any row is an
error (unreadable instance file or infeasible solution), 2 when the command cannot start
(missing or unreadable checkpoint, missing or empty folder, an ``--out`` it cannot write, a
``--plot`` name not in the set; all refused before decoding), else 0.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from linc_core.commands.flags import (
    CommandLineError,
    OneLineParser,
    add_policy_run_flags,
    apply_runtime_flags,
    check_policy_run_flags,
    check_writable_folder,
    load_policy,
    load_set,
    require_distinct_z,
    require_int,
    require_seconds,
)
from linc_core.decoding import DecodeConfig
from linc_core.evaluate.benchmark_sets import BenchmarkSet
from linc_core.evaluate.pyvrp_cache import pyvrp_costs
from linc_core.evaluate.reporting import (
    markdown_table,
    plot_routes,
    rows_csv,
    rows_parquet,
    solution_sol,
    summary_json,
)
from linc_core.evaluate.scoring import (
    evaluate_set,
    planned_rollouts,
)
from linc_core.model import LincPolicy
from linc_core.presets import variant_of
from linc_core.runs.memory import chunk_under_limit
from linc_core.runs.memory_limit import memory_limit
from linc_core.utils.atomic import write_atomic
from linc_core.utils.files import size_in_words
from linc_core.utils.progress import Progress

# --z when not given: sampling spends the paper's budget, greedy one argmax rollout per copy.
DEFAULT_Z = {"sampling": 800, "greedy": 1}
# DecodeConfig's fields and the flags that set them: its refusals name the flag given.
DECODE_FLAGS = {
    "method": "--decode",
    "num_z": "--z",
    "augment": "--aug",
    "seed": "--seed",
    "num_starts": "--starts",
    "beam_width": "--beam",
    "expansion": "--expansion",
    "sgbs_z": "--sgbs-z",
    "max_rollouts_per_chunk": "--max-rollouts-per-chunk",
    "compile": "--compile",
}


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="linc-eval",
        description=__doc__.split("\n\n")[1].replace("``", ""),
        epilog="Outputs, decoding methods and exit status: see python -m pydoc "
        "linc_core.commands.evaluate",
    )
    add_policy_run_flags(
        p,
        benchmark=None,
        z=None,
        z_help="rollouts (z-vectors) per augmented copy for sampling and greedy "
        f"(default: sampling {DEFAULT_Z['sampling']}, the paper's budget; greedy "
        f"{DEFAULT_Z['greedy']})",
        out=None,
    )
    p.add_argument(
        "--decode",
        choices=("greedy", "sampling", "sgbs", "multistart"),
        default="sampling",
        help="sampling: softmax rollouts, --z per copy; greedy: argmax rollouts, --z per copy "
        "(one z-vector each); multistart: one greedy rollout per first customer; sgbs: "
        "simulation-guided beam search (default sampling)",
    )
    p.add_argument("--aug", type=int, choices=(1, 8), default=8, help="dihedral copies")
    p.add_argument("--beam", type=int, default=4, help="SGBS beam width")
    p.add_argument("--expansion", type=int, default=4, help="SGBS children per beam")
    p.add_argument("--sgbs-z", type=int, default=128, help="SGBS initial greedy z-rollouts")
    p.add_argument("--starts", type=int, default=None, help="multistart starts (default all)")
    p.add_argument(
        "--max-rollouts-per-chunk",
        type=int,
        default=None,
        help="rollouts decoded at once (default: 65536 on CUDA; 8192 on CPU, halved until a "
        "chunk fits the memory this process may use, a container's limit included)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the decision step (DecodeConfig.compile; docs: GPU runs)",
    )
    p.add_argument(
        "--max-customers",
        type=int,
        default=None,
        help="keep the instances with at most this many customers (e.g. X up to 200)",
    )
    p.add_argument("--count", type=int, default=128, help="synthetic set size")
    p.add_argument("--data-seed", type=int, default=0, help="synthetic set seed")
    p.add_argument(
        "--pyvrp-seconds",
        type=float,
        default=0.0,
        help="PyVRP budget per instance (0: no PyVRP row or gap); cached in $LINC_CACHE_DIR",
    )
    p.add_argument("--plot", default="3", help="route plots: a count (first N) or names a,b")
    p.add_argument("--no-progress", action="store_true")
    return p


def _plot_names(spec: str, benchmark: str, names: Sequence[str]) -> list[str]:
    """The instances ``--plot`` asks for among the set's ``names``, in the set's spelling (they
    match ignoring case, as best-known values do); every instance read gets a solution, so
    the names are checked before anything is decoded."""
    if spec.isdigit():
        return list(names[: int(spec)])
    by_key = {name.casefold(): name for name in names}
    wanted = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in wanted if n.casefold() not in by_key]
    if unknown:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise CommandLineError(
            f"--plot {spec}: no instance {', '.join(unknown)} in --benchmark {benchmark} "
            f"(give a count, or names among {shown})"
        )
    return list(dict.fromkeys(by_key[n.casefold()] for n in wanted))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _evaluate(args)
    except CommandLineError as err:
        print(f"linc-eval: {err}", file=sys.stderr)
        return 2


def _decode_config(args: argparse.Namespace) -> DecodeConfig:
    """The decoding the flags ask for; a value DecodeConfig refuses is a one-line
    :class:`CommandLineError` naming the flag (its message: ``DecodeConfig.FIELD: ...``)."""
    num_z = DEFAULT_Z.get(args.decode, DEFAULT_Z["sampling"]) if args.z is None else args.z
    try:
        return DecodeConfig(
            method=args.decode,
            num_z=num_z,
            augment=args.aug,
            seed=args.seed,
            num_starts=args.starts,
            beam_width=args.beam,
            expansion=args.expansion,
            sgbs_z=args.sgbs_z,
            max_rollouts_per_chunk=args.max_rollouts_per_chunk,
            compile=args.compile,
        )
    except ValueError as err:
        field, _, reason = str(err).removeprefix("DecodeConfig.").partition(": ")
        flag = DECODE_FLAGS.get(field)
        raise CommandLineError(
            f"{flag}: {reason}" if flag else f"invalid settings: {err}"
        ) from None


def _evaluate(args: argparse.Namespace) -> int:
    check_policy_run_flags(args)
    require_int("--count", args.count, 1)
    require_int("--data-seed", args.data_seed, 0)
    require_int("--max-customers", args.max_customers, 1)
    require_seconds("--pyvrp-seconds", args.pyvrp_seconds)
    apply_runtime_flags(args)
    config = _decode_config(args)
    policy, payload = load_policy(args)
    # each z-rollout of a copy has its own z-vector: no more than the model has
    if config.method in ("sampling", "greedy"):
        require_distinct_z("--z", config.num_z, policy.config.z_dim)
    if config.method == "sgbs":
        require_distinct_z("--sgbs-z", config.sgbs_z, policy.config.z_dim)
    bench = load_set(
        args, count=args.count, data_seed=args.data_seed, max_customers=args.max_customers
    )
    if bench.instances and bench.instances[0].problem != policy.config.problem:
        raise CommandLineError(
            f"--checkpoint is a {policy.config.problem} model; --benchmark {args.benchmark} "
            f"holds {bench.instances[0].problem} instances"
        )
    set_name = Path(bench.name).name
    out = args.out or Path("runs") / "eval" / f"{set_name}-{args.decode}"
    # both refused before PyVRP and decoding spend minutes on results that cannot be kept
    plotted = _plot_names(args.plot, args.benchmark, [i.names[0] for i in bench.instances])
    check_writable_folder("--out", out)
    _report_set(bench)
    config = _chunk_within_memory(config, bench, policy)
    pyvrp, pyvrp_seconds = None, math.nan
    if args.pyvrp_seconds > 0 and bench.instances:
        pyvrp = pyvrp_costs(bench.instances, bench.convention, args.pyvrp_seconds, log=print)
        pyvrp_seconds = args.pyvrp_seconds * len(bench.instances)
    variant = variant_of(policy.config, payload["train_config"])
    # the method is what the checkpoint is (its variant's label: LINC, PolyNet, POMO, ...)
    method = f"{variant.label if variant else 'policy'} {config.label}"
    planned = planned_rollouts(config, bench.instances, policy.config.z_dim)
    per_instance = f", {planned // len(bench.instances)} rollouts per instance" if planned else ""
    print(f"decoding {len(bench.instances)} instances: {config.label}{per_instance}", flush=True)
    with Progress(
        planned,
        f"{set_name} {config.label}",
        "rollout",
        enabled=not args.no_progress and bool(bench.instances),
    ) as progress:
        evaluation = evaluate_set(
            policy, bench, config, method=method, pyvrp=pyvrp, progress=progress.update
        )
    rows, summary = evaluation.rows, evaluation.summary
    pyvrp_row = None
    if pyvrp:
        pyvrp_row = (
            f"PyVRP ({args.pyvrp_seconds:g}s)",
            float(np.mean(list(pyvrp.values()))),
            pyvrp_seconds,
        )
    table = markdown_table(set_name, bench.convention, [(method, summary)], pyvrp_row)
    write_atomic(out / "rows.csv", rows_csv(rows))
    write_atomic(out / "rows.parquet", rows_parquet(rows))
    write_atomic(out / "table.md", table.encode())
    record = {"benchmark": bench.name, "checkpoint": str(args.checkpoint), "decode": asdict(config)}
    write_atomic(out / "summary.json", summary_json(record | summary))
    solved = [row for row in rows if row.instance in evaluation.solutions]  # not error rows
    for row in solved:
        solution = evaluation.solutions[row.instance]
        sol = solution_sol(solution, row, bench.convention, bench.sources.get(row.instance))
        write_atomic(out / "routes" / f"{row.instance}.sol", sol)
    by_name = {i.names[0]: i for i in bench.instances}
    if plotted and find_spec("matplotlib") is None:  # a bare GPU machine: results first
        print("note: no route plots: matplotlib is not installed here", file=sys.stderr)
        plotted = []
    for name in plotted:
        row = next(r for r in solved if r.instance == name)
        title = f"{name}  {method}  cost {row.cost:.1f}" + ("" if row.feasible else "  INFEASIBLE")
        png = plot_routes(by_name[name], evaluation.solutions[name], title)
        write_atomic(out / "plots" / f"{name}.png", png)
    print(table)
    plots = ", plots/" if plotted else ""
    print(f"wrote {out}/rows.csv, rows.parquet, table.md, summary.json, routes/*.sol{plots}")
    return 1 if summary["errors"] else 0


def _chunk_within_memory(
    config: DecodeConfig, bench: BenchmarkSet, policy: LincPolicy
) -> DecodeConfig:
    """On CPU, without ``--max-rollouts-per-chunk``: the default chunk, halved while a chunk
    of the set's largest instance would not fit in what this process may still use (in a
    small container, its cgroup's limit), said in one line. The rows are the same whatever the
    chunk; ``summary.json`` records the one used."""
    if next(policy.parameters()).device.type != "cpu":
        return config
    limit = memory_limit()
    width, z_dim = policy.config.embedding_dim, policy.config.z_dim
    chunk = chunk_under_limit(config, bench.instances, limit.size, width=width, z_dim=z_dim)
    if chunk is None:
        return config
    print(
        f"decoding at most {chunk} rollouts at a time: {limit.describe()} "
        f"{size_in_words(limit.size)} (--max-rollouts-per-chunk to choose)",
        flush=True,
    )
    return replace(config, max_rollouts_per_chunk=chunk)


def _report_set(bench: BenchmarkSet) -> None:
    """Unreadable files (errors), skipped files (notes) and instances without a best-known
    value (a warning: their gap is empty), before anything is decoded."""
    for file_name, message in bench.errors:
        print(f"error: {file_name}: {message}", file=sys.stderr)
    if bench.skipped:
        names = ", ".join(f"{name} ({why})" for name, why in bench.skipped[:5])
        more = f", ... ({len(bench.skipped)} in all)" if len(bench.skipped) > 5 else ""
        print(f"note: skipped {names}{more}", file=sys.stderr)
    missing = bench.without_bks()
    if missing:
        names = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        print(
            f"warning: {len(missing)} of {len(bench.instances)} instances have no best-known "
            f"value ({names}); their Gap is --",
            file=sys.stderr,
        )


if __name__ == "__main__":
    raise SystemExit(main())
