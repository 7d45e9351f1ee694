"""Benchmark evaluation: decode, verify every solution, gaps vs BKS and PyVRP, tables and plots.

The ``linc-eval`` command: a checkpoint decodes a benchmark set; every solution is verified,
scored and reported.

    linc-eval --checkpoint runs/x/latest.pt --benchmark solomon100 --decode sampling --z 800 --aug 8
    linc-eval --checkpoint ... --benchmark path/to/homberger200 --decode sgbs --out runs/eval-hg

Sets: see :mod:`linc_core.evaluate.benchmark_sets`. Gaps against PyVRP (``--pyvrp-seconds S``)
come from :mod:`linc_core.evaluate.pyvrp_cache`, computed once per instance and time budget.

Outputs in ``--out``: ``rows.csv`` and ``rows.parquet`` (one row per instance), ``table.md``
(method, Obj., Gap, Time, as the paper's tables), ``summary.json`` and ``plots/NAME.png`` route
plots; every file is written to a temporary name and renamed into place. The exit status is 1
when any row is an error (unreadable file or infeasible solution), else 0.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from linc_core.atomic import write_atomic
from linc_core.cli_flags import add_policy_run_flags, apply_runtime_flags
from linc_core.decode import DecodeConfig
from linc_core.evaluate.benchmark_sets import load_benchmark
from linc_core.evaluate.pyvrp_cache import pyvrp_costs
from linc_core.evaluate.reporting import markdown_table, plot_routes, rows_csv, rows_parquet
from linc_core.evaluate.scoring import Evaluation, error_rows, evaluate_policy, summarize
from linc_core.instances import Instance


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="linc-eval", description=__doc__.splitlines()[0])
    add_policy_run_flags(
        p, benchmark=None, z=800, z_help="z-vectors (rollouts) per augmented copy", out=None
    )
    p.add_argument(
        "--decode", choices=("greedy", "sampling", "sgbs", "multistart"), default="sampling"
    )
    p.add_argument("--aug", type=int, choices=(1, 8), default=8)
    p.add_argument("--beam", type=int, default=4, help="SGBS beam width")
    p.add_argument("--expansion", type=int, default=4, help="SGBS children per beam")
    p.add_argument("--sgbs-z", type=int, default=128, help="SGBS initial greedy z-rollouts")
    p.add_argument("--starts", type=int, default=None, help="multistart starts (default all)")
    p.add_argument("--max-rollouts-per-chunk", type=int, default=16384)
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


def _plot_names(spec: str, names: Sequence[str]) -> list[str]:
    if spec.isdigit():
        return list(names[: int(spec)])
    wanted = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        raise SystemExit(f"--plot: unknown instances {unknown}")
    return wanted


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from tqdm import tqdm

    from linc_core.train.loop import policy_from_checkpoint

    apply_runtime_flags(args)
    config = DecodeConfig(
        method=args.decode,
        num_z=args.z,
        augment=args.aug,
        seed=args.seed,
        num_starts=args.starts,
        beam_width=args.beam,
        expansion=args.expansion,
        sgbs_z=args.sgbs_z,
        max_rollouts_per_chunk=args.max_rollouts_per_chunk,
    )
    policy, _ = policy_from_checkpoint(args.checkpoint, args.device)
    bench = load_benchmark(
        args.benchmark, limit=args.limit, count=args.count, data_seed=args.data_seed
    )
    for file_name, message in bench.errors:
        print(f"error: {file_name}: {message}", file=sys.stderr)
    if bench.instances and bench.instances[0].problem != policy.config.problem:
        raise SystemExit(
            f"--checkpoint is a {policy.config.problem} model; --benchmark {args.benchmark} "
            f"holds {bench.instances[0].problem} instances"
        )
    out = args.out or Path("runs") / "eval" / f"{Path(bench.name).name}-{args.decode}"
    pyvrp, pyvrp_seconds = None, math.nan
    if args.pyvrp_seconds > 0 and bench.instances:
        pyvrp = pyvrp_costs(bench.instances, bench.convention, args.pyvrp_seconds, log=print)
        pyvrp_seconds = args.pyvrp_seconds * len(bench.instances)
    method = f"LINC {config.label}"
    evaluation = Evaluation([], summarize([], 0.0), {})
    if bench.instances:
        bar = tqdm(
            total=_planned_rollouts(config, bench.instances, policy.config.z_dim),
            unit="rollout",
            unit_scale=True,
            disable=args.no_progress,
            desc=f"{Path(bench.name).name} {config.label}",
        )
        with bar:
            evaluation = evaluate_policy(
                policy,
                bench.instances,
                config,
                convention=bench.convention,
                bks=bench.bks,
                pyvrp=pyvrp,
                method=method,
                progress=bar.update,
            )
    rows = evaluation.rows + error_rows(bench.errors, method)
    summary = summarize(rows, evaluation.summary["seconds"], evaluation.summary["rollouts"])
    pyvrp_row = None
    if pyvrp:
        pyvrp_row = (
            f"PyVRP ({args.pyvrp_seconds:g}s)",
            float(np.mean(list(pyvrp.values()))),
            pyvrp_seconds,
        )
    table = markdown_table(Path(bench.name).name, bench.convention, [(method, summary)], pyvrp_row)
    write_atomic(out / "rows.csv", rows_csv(rows))
    write_atomic(out / "rows.parquet", rows_parquet(rows))
    write_atomic(out / "table.md", table.encode())
    record = {"benchmark": bench.name, "checkpoint": str(args.checkpoint), "decode": asdict(config)}
    write_atomic(out / "summary.json", json.dumps(record | summary, indent=2).encode())
    by_name = {i.names[0]: i for i in bench.instances}
    for name in _plot_names(args.plot, [r.instance for r in evaluation.rows]):
        row = next(r for r in evaluation.rows if r.instance == name)
        title = f"{name}  {method}  cost {row.cost:.1f}" + ("" if row.feasible else "  INFEASIBLE")
        png = plot_routes(by_name[name], evaluation.solutions[name], title)
        write_atomic(out / "plots" / f"{name}.png", png)
    print(table)
    print(f"wrote {out}/rows.csv, rows.parquet, table.md, summary.json, plots/")
    return 1 if summary["errors"] else 0


def _planned_rollouts(
    config: DecodeConfig, instances: Sequence[Instance], z_dim: int
) -> int | None:
    if config.method == "sgbs":
        return None  # the number of simulations depends on the search
    per_copy = config.num_z
    if config.method == "multistart":
        per_copy = sum(
            i.num_customers
            if config.num_starts is None
            else min(config.num_starts, i.num_customers)
            for i in instances
        )
        return per_copy * config.augment
    if config.method == "greedy" and z_dim == 0:
        per_copy = 1
    return per_copy * config.augment * len(instances)


if __name__ == "__main__":
    raise SystemExit(main())
