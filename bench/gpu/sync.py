"""Host-device synchronisations of the decoding loop and of a training step.

Each run is made under ``torch.cuda.set_sync_debug_mode("warn")``, which warns at every
operation that makes the host wait for the GPU (``.item()``, a D2H copy, ``nonzero``, a
blocking H2D copy...); the warnings are counted and attributed to the Python lines that
raised them. A sync stalls the host until the GPU has drained its queue, so one per decoding
step would tie the step's launch overhead to the GPU's work; the gate is well below one.
"""

from __future__ import annotations

import collections
import os
import warnings
from collections.abc import Callable
from typing import Any

import torch

from bench.gpu.rows import FAIL, PASS, CheckContext, Row, not_run, seeded_policy, solomon
from bench.gpu.rows import variant_setup as setup
from linc_core.decoding import DecodeConfig, decode
from linc_core.train import train_step
from linc_core.train.data import generate

SECTION = "sync"
DECODE_GATE, TRAIN_GATE = 0.1, 0.25  # syncs per decoding step


def count_syncs(run: Callable[[], Any]) -> tuple[Any, collections.Counter]:
    """(``run()``'s result, synchronisations counted per ``file:line`` of the caller)."""
    counts: collections.Counter = collections.Counter()
    torch.cuda.synchronize()
    torch.set_warn_always(True)
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = run()
    finally:
        torch.cuda.set_sync_debug_mode("default")
        torch.set_warn_always(False)
    for warning in caught:
        if "synchroniz" in str(warning.message):
            counts[f"{os.path.basename(warning.filename)}:{warning.lineno}"] += 1
    return result, counts


def _row(name: str, syncs: collections.Counter, steps: int, gate: float) -> Row:
    total = sum(syncs.values())
    per_step = total / max(steps, 1)
    where = ", ".join(f"{place} x{n}" for place, n in syncs.most_common(6)) or "none"
    return Row(
        SECTION,
        name,
        per_step,
        "syncs/step",
        PASS if per_step <= gate else FAIL,
        f"{total} syncs over {steps} decoding steps (gate {gate}); at {where}",
        {"syncs": dict(syncs), "steps": steps},
    )


def run(ctx: CheckContext) -> list[Row]:
    if not ctx.has_cuda:
        return [
            not_run(SECTION, "decode loop: syncs per decoding step"),
            not_run(SECTION, "training step: syncs per decoding step"),
        ]
    model, train = setup("full_linc", num_rollouts=32, batch_size=16)
    policy = seeded_policy(model).to(ctx.device)
    instances = solomon(("C101", "R101", "RC101", "R201"))
    config = DecodeConfig(method="sampling", num_z=64, augment=8, seed=0)
    decode(policy, instances, config)  # warm-up: CUDA context, kernels, allocator
    result, decode_syncs = count_syncs(lambda: decode(policy, instances, config))
    # One chunk of 2048 rollouts runs until its longest rollout ends; the best solutions'
    # decisions (a customer each, a depot return per route) are a lower bound on that.
    decode_steps = max(len(solution) + sum(map(len, solution)) for solution in result.routes)
    instance = generate("cvrptw", 16, 50, seed=2).to(ctx.device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-4)
    train_step(policy, optimizer, instance, train, 0.5, 0)  # warm-up
    metrics, train_syncs = count_syncs(
        lambda: train_step(policy, optimizer, instance, train, 0.5, 1)
    )
    return [
        _row(
            "decode loop (sampling z=64 x8, 4 Solomon-100)", decode_syncs, decode_steps, DECODE_GATE
        ),
        _row("training step (B=16 K=32 n=50)", train_syncs, metrics.steps, TRAIN_GATE),
    ]


__all__ = ["count_syncs", "run"]
