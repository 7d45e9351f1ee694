"""``linc-diagnose``: the paper's mechanism diagnostics of a checkpoint
(:mod:`linc_core.evaluate.diagnostics`), as JSON and figures."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

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
)
from linc_core.evaluate.diagnostics import DEFAULT_OFFSETS, run_diagnostics, write_outputs
from linc_core.instances import Instance


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="linc-diagnose", description=__doc__.splitlines()[0])
    add_policy_run_flags(
        p,
        benchmark="solomon50",
        z=8,
        z_help="greedy z-rollouts per instance",
        out=Path("runs") / "diagnose",
    )
    p.add_argument("--offsets", default=",".join(str(o) for o in DEFAULT_OFFSETS))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _diagnose(args)
    except CommandLineError as err:
        print(f"linc-diagnose: {err}", file=sys.stderr)
        return 2


def _offsets(spec: str) -> list[float]:
    try:
        offsets = [float(o) for o in spec.split(",")]
    except ValueError:
        offsets = [math.nan]
    if not all(math.isfinite(o) for o in offsets):  # nan or inf: a drift of nan, silently
        raise CommandLineError(f"--offsets {spec}: expected finite numbers separated by commas")
    return offsets


def _diagnose(args: argparse.Namespace) -> int:
    check_policy_run_flags(args)
    apply_runtime_flags(args)
    offsets = _offsets(args.offsets)
    policy, _ = load_policy(args)
    require_distinct_z("--z", args.z, policy.config.z_dim)
    bench = load_set(args)
    # refused before the diagnostics run, not after: they decode every instance
    check_writable_folder("--out", args.out)
    for name, message in bench.errors:
        print(f"skipped {name}: {message}")
    if not bench.instances:  # only unreadable files (an empty set is load_set's refusal)
        names = ", ".join(name for name, _ in bench.errors[:3])
        more = ", ..." if len(bench.errors) > 3 else ""
        raise CommandLineError(
            f"--benchmark {args.benchmark}: every instance file is unreadable ({names}{more})"
        )
    sizes = {i.num_nodes for i in bench.instances}
    results = []
    for size in sorted(sizes):
        batch = Instance.concat([i for i in bench.instances if i.num_nodes == size])
        results.append(
            run_diagnostics(policy, batch, num_z=args.z, seed=args.seed, offsets=offsets)
        )
    result = results[0] if len(results) == 1 else {"by_size": results, **results[0]}
    for path in write_outputs(result, args.out):
        print(f"wrote {path}")
    probe = result["translation_probe"]
    print(f"decisions probed: {result['decisions']}")
    for o, c, r in zip(
        probe["offsets"], probe["tv_drift_centred"], probe["tv_drift_raw"], strict=True
    ):
        print(f"offset {o:>6g}: TV drift centred {c:.2e}  raw {r:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
