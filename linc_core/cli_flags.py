"""Command-line flags shared by ``linc-eval`` and ``linc-diagnose``, each defined once.

Both commands load a checkpoint, decode a benchmark set with ``--z`` rollouts per instance
under a seed, on a device with a thread count, and write into an output folder; each command
states its own defaults and adds its own flags after these.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from linc_core.runtime import tune_cpu_allocator

BENCHMARK_HELP = (
    "set name (solomon100, solomon50, tsplib, cvrplib_x, xml100, synthetic-PROBLEM-SIZE) or a "
    "folder of Solomon-format files"
)


def add_policy_run_flags(
    parser: argparse.ArgumentParser,
    *,
    benchmark: str | None,
    z: int,
    z_help: str,
    out: Path | None,
) -> None:
    """Add ``--checkpoint --benchmark --limit --z --seed --device --threads --out``.

    Args:
        parser: the command's parser.
        benchmark: default of ``--benchmark``; ``None`` makes the flag required.
        z: default of ``--z``; ``z_help`` says what the z-rollouts are for in this command.
        out: default output folder (``None``: the command derives one).
    """
    parser.add_argument("--checkpoint", type=Path, required=True, help="linc checkpoint (.pt)")
    parser.add_argument(
        "--benchmark", required=benchmark is None, default=benchmark, help=BENCHMARK_HELP
    )
    parser.add_argument("--limit", type=int, default=None, help="first N instances only")
    parser.add_argument("--z", type=int, default=z, help=z_help)
    parser.add_argument("--seed", type=int, default=0, help="decoding seed")
    parser.add_argument("--device", default="cpu", help="torch device of the policy")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=out, help="output folder")


def apply_runtime_flags(args: argparse.Namespace) -> None:
    """Process settings from the flags: the CPU allocator tuning and ``--threads``."""
    tune_cpu_allocator()
    if args.threads:
        torch.set_num_threads(args.threads)
