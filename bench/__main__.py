"""Run every benchmark and print one table; results also go to bench/results/latest.json.

    python -m bench [--only env,generator] [--quick]

An ``--only`` name that is not a benchmark is refused (exit 2) before any benchmark runs.

Each benchmark returns ``{"name", "ours", "peer"?, "peer_name"?, "ratio", "target"}``; a ratio is
ours / peer measured in the same run (or ours / target where no peer exists).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import torch  # noqa: E402

from linc_core.utils.atomic import write_atomic  # noqa: E402
from linc_core.utils.runtime import tune_cpu_allocator  # noqa: E402


def run_env(quick: bool) -> list[dict]:
    from bench.bench_env import bench_env

    return [bench_env(repeats=1 if quick else 3)]


def run_generator(quick: bool) -> list[dict]:
    from bench.bench_generators import bench_envelope

    return [bench_envelope(n=100, instances=4096, seconds=1.0 if quick else 3.0)]


def run_train(quick: bool) -> list[dict]:
    from bench.bench_train import bench_train

    return bench_train(repeats=1 if quick else 3)


def run_memory(quick: bool) -> list[dict]:
    from bench.bench_memory import bench_memory

    return bench_memory(quick)


def run_datagen(quick: bool) -> list[dict]:
    from bench.bench_datagen import bench_datagen

    return bench_datagen(quick=quick)


def run_platform(quick: bool) -> list[dict]:
    from bench.bench_platform import bench_platform

    return bench_platform(quick=quick)


def run_decode(quick: bool) -> list[dict]:
    from bench.bench_decode import bench_decode

    return bench_decode(quick)


def run_compile(quick: bool) -> list[dict]:
    from bench.bench_compile import bench_compile

    return bench_compile(quick)


def run_quality(quick: bool) -> list[dict]:
    from bench.bench_quality import bench_quality

    return bench_quality(quick=quick)


BENCHMARKS = {
    "env": run_env,
    "generator": run_generator,
    "train": run_train,
    "memory": run_memory,
    "datagen": run_datagen,
    "platform": run_platform,
    "decode": run_decode,
    "compile": run_compile,
    "quality": run_quality,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated subset")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown or not names:  # refused before minutes of the known ones are spent
        print(
            f"python -m bench: --only {args.only}: no benchmark {', '.join(unknown) or 'named'} "
            f"(known: {', '.join(BENCHMARKS)})",
            file=sys.stderr,
        )
        return 2
    # Ray nices its worker processes to 15 (its raylet and GCS stay responsive); beside a
    # nice-0 peer on a busy host that alone would slow every Ray side, a scheduling choice
    # and not a cost of ours: the local Ray the bench starts runs workers at its own priority.
    os.environ.setdefault("RAY_worker_niceness", "0")
    torch.set_num_threads(1)
    tune_cpu_allocator()
    results = []
    for name in names:
        try:
            results.extend(BENCHMARKS[name](args.quick))
        except Exception as err:  # noqa: BLE001 - one broken group must not cost the others
            print(f"bench {name}: FAILED: {type(err).__name__}: {err}", flush=True)
    print(f"\n{'benchmark':<80} {'ours':>10} {'peer':>10} {'ratio':>7} {'target':>7}")
    for r in results:
        peer = f"{r['peer']:10.1f}" if "peer" in r else f"{'-':>10}"
        if r["target"] is None:
            target = "-"
        else:
            value = r["target"]
            target = (
                f"{value:.2f}x"
                if "peer" in r
                else f"{value:,.0f}"
                if value >= 100
                else f"{value:.2f}"
            )
        print(f"{r['name']:<80} {r['ours']:10.1f} {peer} {r['ratio']:7.2f} {target:>7}")
        if "peer_name" in r:
            print(f"{'':<4}peer: {r['peer_name']}")
    out = Path(__file__).parent / "results"
    record = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "host": platform.node(),
        "torch_threads": torch.get_num_threads(),
        "results": [{k: v for k, v in r.items() if k != "samples"} for r in results],
    }
    write_atomic(out / "latest.json", json.dumps(record, indent=2).encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
