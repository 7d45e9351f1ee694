"""Correctness on CUDA against CPU: a training step of every variant, and decoding.

Both devices start from the same weights and batch and draw with the same seed; the draws are
keyed by (seed, row, rollout, step) and computed on each device (``linc_core.model.sampling``),
so both sample the same rollouts as long as no probability differs across a draw's threshold.
In float64 that cannot happen at these sizes (the devices' scores differ by ~1e-15): the
rollouts must be identical, and loss and gradients equal to rounding. In float32 the devices'
matrix products round differently (~1e-6), so a rare draw may flip; those rows are reported,
not gated.
"""

from __future__ import annotations

import torch

from bench.gpu.rows import (
    FAIL,
    INFO,
    PASS,
    CheckContext,
    Row,
    flat_gradient,
    not_run,
    relative_difference,
    seeded_policy,
    solomon,
    variant_setup,
)
from linc_core.decoding import DecodeConfig, decode
from linc_core.presets import ABLATION_VARIANTS
from linc_core.train import train_step
from linc_core.train.data import generate
from linc_core.verify import verify_instance

SECTION = "correctness"
BATCH, ROLLOUTS, CUSTOMERS, PROGRESS, STEP_SEED = 4, 16, 20, 0.5, 11
# float64 gates: the same rollouts (costs to rounding), loss and gradient to rounding.
F64_COST, F64_LOSS, F64_GRAD = 1e-10, 1e-8, 1e-8
# float32: reported against these (a flipped draw is a different, equally valid rollout).
F32_LOSS, F32_GRAD = 1e-3, 1e-3


def _step(variant: str, device: torch.device, dtype: torch.dtype) -> dict:
    """One training step of ``variant`` on ``device`` in ``dtype``: metrics and gradients."""
    model, train = variant_setup(variant, num_rollouts=ROLLOUTS, batch_size=BATCH)
    policy = seeded_policy(model).to(device=device, dtype=dtype)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.0)  # gradients only, weights stay
    instance = generate("cvrptw", BATCH, CUSTOMERS, seed=3).to(device=device, dtype=dtype)
    metrics = train_step(policy, optimizer, instance, train, PROGRESS, STEP_SEED)
    return {"metrics": metrics, "grads": flat_gradient(policy)}


def _compare_step(variant: str, ctx: CheckContext) -> Row:
    name = f"train step {variant}: CUDA vs CPU"
    cpu64 = _step(variant, torch.device("cpu"), torch.float64)
    if not ctx.has_cuda:
        finite = bool(torch.isfinite(cpu64["grads"]).all()) and cpu64["grads"].abs().sum() > 0
        return not_run(SECTION, name, f"CPU side ran (finite, non-zero gradient: {finite})")
    gpu64 = _step(variant, ctx.device, torch.float64)
    cpu32 = _step(variant, torch.device("cpu"), torch.float32)
    gpu32 = _step(variant, ctx.device, torch.float32)
    m_cpu, m_gpu = cpu64["metrics"], gpu64["metrics"]
    cost = relative_difference(m_gpu.mean_cost, m_cpu.mean_cost)
    loss = relative_difference(m_gpu.loss, m_cpu.loss)
    grad = relative_difference(gpu64["grads"], cpu64["grads"])
    same = m_gpu.steps == m_cpu.steps and cost <= F64_COST
    ok = same and loss <= F64_LOSS and grad <= F64_GRAD and float(cpu64["grads"].abs().max()) > 0
    loss32 = relative_difference(gpu32["metrics"].loss, cpu32["metrics"].loss)
    grad32 = relative_difference(gpu32["grads"], cpu32["grads"])
    same32 = relative_difference(gpu32["metrics"].mean_cost, cpu32["metrics"].mean_cost) <= 1e-5
    detail = (
        f"f64: rollouts {'same' if same else 'DIFFER'}, loss rel {loss:.1e}, grad rel "
        f"{grad:.1e} (gates {F64_LOSS:.0e}); f32: rollouts {'same' if same32 else 'differ'}, "
        f"loss rel {loss32:.1e}, grad rel {grad32:.1e}"
    )
    return Row(
        SECTION,
        name,
        grad,
        "grad rel (f64)",
        PASS if ok else FAIL,
        detail,
        {"f64_loss_rel": loss, "f32_loss_rel": loss32, "f32_grad_rel": grad32, "f32_same": same32},
    )


DECODINGS = (
    ("greedy z=16 x8", DecodeConfig(method="greedy", num_z=16, augment=8, seed=5)),
    ("sampling z=16 x8", DecodeConfig(method="sampling", num_z=16, augment=8, seed=5)),
    ("sgbs b2 e2 z8 x1", DecodeConfig(method="sgbs", beam_width=2, expansion=2, sgbs_z=8,
                                      augment=1, seed=5)),
)  # fmt: skip


def _verified(instances, result) -> tuple[int, int]:
    """(feasible solutions whose verified cost equals the decoded cost, solutions)."""
    good = 0
    for b, routes in enumerate(result.routes):
        checked = verify_instance(instances, b, routes, convention="exact")
        if checked.feasible and abs(checked.cost - float(result.cost[b])) <= 1e-9 * checked.cost:
            good += 1
    return good, len(result.routes)


def _compare_decode(label: str, config: DecodeConfig, ctx: CheckContext) -> list[Row]:
    instances = solomon(("C101", "R101", "RC101", "R201"), customers=50)
    model, _ = variant_setup("full_linc")
    rows = []
    for dtype in (torch.float64, torch.float32):
        kind = "f64" if dtype == torch.float64 else "f32"
        name = f"decode {label} {kind}: CUDA vs CPU, verified"
        policy = seeded_policy(model).to(dtype=dtype)
        cpu = decode(policy, instances, config)
        good, total = _verified(instances, cpu)
        if not ctx.has_cuda:
            rows.append(not_run(SECTION, name, f"CPU side: {good}/{total} verified"))
            continue
        gpu = decode(policy.to(ctx.device), instances, config)
        gpu_good, _ = _verified(instances, gpu)
        same = sum(a == b for a, b in zip(gpu.routes, cpu.routes, strict=True))
        verified = good == total and gpu_good == total
        # float64 must give the same solutions; float32 may differ where a draw flips.
        gate = same == total if dtype == torch.float64 else True
        status = (PASS if gate else FAIL) if verified else FAIL
        if dtype == torch.float32 and verified:
            status = PASS if same == total else INFO
        detail = (
            f"{same}/{total} identical solutions, verified CPU {good}/{total} and CUDA "
            f"{gpu_good}/{total}; cost rel {relative_difference(gpu.cost, cpu.cost):.1e}"
        )
        rows.append(Row(SECTION, name, float(same) / total, "identical", status, detail))
    return rows


def run(ctx: CheckContext) -> list[Row]:
    rows = [_compare_step(variant, ctx) for variant in ABLATION_VARIANTS]
    for label, config in DECODINGS:
        rows.extend(_compare_decode(label, config, ctx))
    return rows


__all__ = ["run"]
