"""GPU throughput: training samples/s, the paper's decode budget, peak memory, epoch time.

Every model here is the reference size (``ModelConfig`` defaults: d=128, 6 layers); weights
are seeded, not trained (speed and memory do not depend on them).

- training samples/s (instances x rollouts per second) at n=100, B=128, K=128 (the paper's
  main training batch), full_linc and our baseline, in fp32 (what ``auto`` resolves to) and
  under bf16 autocast, and rl4co's PolyNet in fp32 where its wheels were carried; median of the
  timed steps after two warm-up steps;
- decoding: ``decode(method="sampling", num_z=800, augment=8)`` of the 56 Solomon-100
  instances against the paper's 6 s, at two chunk sizes;
- peak GPU memory of the same decode of one 200-customer instance (the envelope generator's:
  Homberger-200 files are not shipped);
- the epoch time of the paper's training settings (n=100, 6400 instances, B=128, K=128): one
  ``fit`` epoch, data generation included.

The compiled decoding step has its own section (``bench.gpu.compiled``), run in CPU mode too.
"""

from __future__ import annotations

import statistics

import torch

from bench.gpu.rows import (
    INFO,
    CheckContext,
    Row,
    not_run,
    peak_memory,
    seeded_policy,
    solomon,
    timed,
    variant_setup,
)
from linc_core.config import ModelConfig
from linc_core.decoding import DecodeConfig, decode
from linc_core.train import GeneratedData, fit, train_step
from linc_core.train.data import generate
from linc_core.train.precision import resolve_precision

SECTION = "throughput"
PAPER_DECODE_SECONDS = 6.0  # Solomon-100, z=800 x8, 56 instances (the paper's GPU)
BATCH, ROLLOUTS, CUSTOMERS = 128, 128, 100


def _train_rate(variant: str, precision_name: str, ctx: CheckContext, steps: int) -> Row:
    model, train = variant_setup(variant, small=False, num_rollouts=ROLLOUTS, batch_size=BATCH)
    policy = seeded_policy(model).to(ctx.device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=train.learning_rate)
    precision = resolve_precision(precision_name, ctx.device)
    scaler = precision.grad_scaler()
    batches = [generate("cvrptw", BATCH, CUSTOMERS, seed=s).to(ctx.device) for s in range(steps)]
    seconds, decisions = [], []
    with peak_memory(ctx.device) as peak:
        for step, instance in enumerate(batches):
            took, metrics = timed(
                ctx.device,
                lambda instance=instance, step=step: train_step(
                    policy, optimizer, instance, train, 0.5, step,
                    precision=precision, scaler=scaler,
                ),
            )  # fmt: skip
            seconds.append(took)
            decisions.append(metrics.steps)
    timed_steps = seconds[2:] or seconds
    rate = BATCH * ROLLOUTS / statistics.median(timed_steps)
    return Row(
        SECTION,
        f"train {variant} {precision.name} n={CUSTOMERS} B={BATCH} K={ROLLOUTS}",
        rate,
        "samples/s",
        INFO,
        f"{statistics.median(timed_steps) * 1e3:.0f} ms/step over {len(timed_steps)} steps "
        f"(~{statistics.median(decisions):.0f} decoding steps each), peak "
        f"{peak['gib']:.1f} GiB",
        {"ms_per_step": statistics.median(timed_steps) * 1e3, "peak_gib": peak["gib"]},
    )


def _rl4co_row(ctx: CheckContext, steps: int) -> Row:
    """rl4co 0.7.0 PolyNet at our training batch and sizes on CUDA, where its wheels were
    carried (docs/how-to/gpu.md); not run otherwise."""
    name = f"train rl4co PolyNet fp32 n={CUSTOMERS} B={BATCH} K={ROLLOUTS}"
    try:
        from bench.bench_train import rl4co_step_seconds

        run = rl4co_step_seconds(BATCH, ROLLOUTS, CUSTOMERS, 0, ModelConfig(), str(ctx.device))
        seconds = [run(step) for step in range(steps)][2:]
    except ImportError as err:
        return not_run(SECTION, name, f"rl4co not importable here ({err.name or err})")
    median = statistics.median(seconds)
    detail = f"{median * 1e3:.0f} ms/step over {len(seconds)} steps"
    return Row(SECTION, name, BATCH * ROLLOUTS / median, "samples/s", INFO, detail)


def _decode_rows(ctx: CheckContext) -> list[Row]:
    model, _ = variant_setup("full_linc", small=False)
    policy = seeded_policy(model).to(ctx.device)
    instances = solomon()
    decode(policy, instances.select([0]), DecodeConfig(num_z=16))  # warm-up
    rows = []
    for chunk in (16384, 65536):
        config = DecodeConfig(method="sampling", num_z=800, augment=8, max_rollouts_per_chunk=chunk)
        with peak_memory(ctx.device) as peak:
            seconds, result = timed(
                ctx.device, lambda config=config: decode(policy, instances, config)
            )
        rows.append(
            Row(
                SECTION,
                f"decode sampling z=800 x8, 56 Solomon-100, chunk {chunk}",
                seconds,
                "s",
                INFO,
                f"paper 6 s: {seconds / PAPER_DECODE_SECONDS:.2f}x its time; "
                f"{result.rollouts_per_second:,.0f} rollouts/s; peak {peak['gib']:.1f} GiB",
                {"peak_gib": peak["gib"], "rollouts_per_second": result.rollouts_per_second},
            )
        )
    big = generate("cvrptw", 1, 200, seed=0).to(ctx.device)
    config = DecodeConfig(method="sampling", num_z=800, augment=8)
    with peak_memory(ctx.device) as peak:
        seconds, _ = timed(ctx.device, lambda: decode(policy, big, config))
    rows.append(
        Row(
            SECTION,
            "decode z=800 x8, one 200-customer instance: peak GPU memory",
            peak["gib"],
            "GiB",
            INFO,
            f"{seconds:.1f} s; chunk {config.max_rollouts_per_chunk} rollouts",
        )
    )
    return rows


def _epoch_row(ctx: CheckContext) -> Row:
    model, train = variant_setup(
        "full_linc", small=False, num_rollouts=ROLLOUTS, batch_size=BATCH,
        instances_per_epoch=6400, epochs=1, validation_size=0, device=str(ctx.device),
    )  # fmt: skip
    data = GeneratedData("cvrptw", CUSTOMERS, BATCH, 6400, seed=1)
    result = fit(seeded_policy(model), train, data)
    seconds = result.history[0]["seconds"]
    return Row(
        SECTION,
        "epoch, paper's training settings (n=100, 6400 inst, B=128, K=128)",
        seconds,
        "s",
        INFO,
        f"{result.precision}; 50 steps and their data; 12000 epochs would take "
        f"{seconds * 12000 / 86400:.1f} days on this GPU",
    )


def run(ctx: CheckContext) -> list[Row]:
    if not ctx.has_cuda:
        return [
            not_run(SECTION, f"train samples/s n={CUSTOMERS} (full_linc, baseline, rl4co)"),
            not_run(SECTION, "decode sampling z=800 x8, 56 Solomon-100"),
            not_run(SECTION, "decode z=800 x8, one 200-customer instance: peak GPU memory"),
            not_run(SECTION, "epoch, paper's training settings"),
        ]
    steps = 4 if ctx.quick else 7
    rows = [
        _train_rate(variant, precision, ctx, steps)
        for variant in ("full_linc", "baseline")
        for precision in ("fp32", "bf16")
    ]
    rows.append(_rl4co_row(ctx, steps))
    rows.extend(_decode_rows(ctx))
    if not ctx.quick:
        rows.append(_epoch_row(ctx))
    return rows


__all__ = ["run"]
