"""Mixed precision against fp32: the gradient of the same rollouts, then a few hundred steps.

- gradient: rollouts sampled once in fp32; the gradient of their REINFORCE loss recomputed
  (``backward_replay``) under each precision's autocast and compared with fp32's (cosine and
  relative norm of the difference). Gate: cosine >= ``GRAD_COSINE``.
- training: ``steps`` training steps of full_linc from the same weights, batches and seeds in
  each precision; gate: the mean best-of-K training cost over the last quarter within
  ``CURVE_TOLERANCE`` of fp32's (the runs sample different rollouts once probabilities differ,
  so the curves agree statistically, not step by step), and every loss finite; a run of fewer
  than 100 steps (``--quick``, CPU mode) is reported, not gated. The seconds
  per step say which precision pays.

On CPU, bf16 autocast runs through the same code path (fp16 is CUDA-only).
"""

from __future__ import annotations

import math
import statistics

import torch

from bench.gpu.rows import (
    FAIL,
    INFO,
    PASS,
    CheckContext,
    Row,
    flat_gradient,
    not_run,
    seeded_policy,
    timed,
    variant_setup,
)
from linc_core.model.replay import backward_replay
from linc_core.train import train_step
from linc_core.train.data import generate
from linc_core.train.precision import resolve_precision
from linc_core.train.step import advantages, rollout_draws

SECTION = "precision"
GRAD_COSINE = 0.99
CURVE_TOLERANCE = 0.03
BATCH, ROLLOUTS, CUSTOMERS = 32, 32, 50
MAX_SKIPPED_STEPS = 24  # 65536 / 2**24: far below any scale a finite fp16 gradient needs


def _precisions(ctx: CheckContext) -> list[str]:
    return ["bf16", "fp16"] if ctx.has_cuda else ["bf16"]


def _replayed_gradient(precision_name: str, ctx: CheckContext) -> tuple[torch.Tensor, str]:
    """The gradient of one fixed set of fp32 rollouts, recomputed under ``precision_name``, and
    a note of the loss scale it took.

    fp16 recomputes as a training step does: its ``GradScaler`` starts at 65536, and a scaled
    gradient that overflows is a skipped step after which the scale halves; the gradient
    compared is the first finite one (the one training would apply)."""
    model, train = variant_setup("full_linc", num_rollouts=ROLLOUTS, batch_size=BATCH)
    policy = seeded_policy(model).to(ctx.device)
    instance = generate("cvrptw", BATCH, CUSTOMERS, seed=7).to(ctx.device)
    draws = rollout_draws(policy, instance, ROLLOUTS, False, seed=13)
    with torch.no_grad():
        sampled = policy.rollout(
            instance,
            ROLLOUTS,
            z=draws.z,
            sample_seeds=draws.sample_seeds,
            encoded=policy.encode(instance),
            keep_trajectory=True,
        )
    advantage, mask, _ = advantages(sampled.cost.float(), train, 0.5)
    precision = resolve_precision(precision_name, ctx.device)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.0)
    scaler = precision.grad_scaler()
    for skipped in range(MAX_SKIPPED_STEPS + 1):
        optimizer.zero_grad()
        with precision.autocast():
            encoded = policy.encode(instance)
        backward_replay(
            policy,
            sampled.trajectory,
            encoded.cache,
            advantage * mask,
            loss_scale=-1.0 / (BATCH * ROLLOUTS),
            chunk_rollouts=train.replay_chunk,
            backward=torch.Tensor.backward
            if scaler is None
            else lambda x: scaler.scale(x).backward(),
            autocast=precision.autocast,
        )
        if scaler is None:
            return flat_gradient(policy), ""
        scale = scaler.get_scale()
        scaler.unscale_(optimizer)
        gradient = flat_gradient(policy)
        if bool(torch.isfinite(gradient).all()):
            return gradient, f"; loss scale {scale:g} after {skipped} skipped step(s)"
        scaler.update()  # an overflow: training skips the step and halves the scale
    return gradient, f"; still not finite after {MAX_SKIPPED_STEPS} halvings of the loss scale"


def _gradient_rows(ctx: CheckContext) -> list[Row]:
    reference, _ = _replayed_gradient("fp32", ctx)
    rows = []
    for name in _precisions(ctx):
        grad, scaling = _replayed_gradient(name, ctx)
        cosine = float(torch.nn.functional.cosine_similarity(grad, reference, dim=0))
        rel = float((grad - reference).norm() / reference.norm())
        ok = math.isfinite(cosine) and cosine >= GRAD_COSINE
        rows.append(
            Row(
                SECTION,
                f"gradient {name} vs fp32, same rollouts ({ctx.device.type})",
                cosine,
                "cosine",
                PASS if ok else FAIL,
                f"|g - g32| / |g32| = {rel:.3f}; gate cosine >= {GRAD_COSINE}{scaling}",
            )
        )
    if not ctx.has_cuda:
        rows.append(not_run(SECTION, "gradient fp16 vs fp32, same rollouts", "fp16 is CUDA-only"))
    return rows


def _train(precision_name: str, steps: int, ctx: CheckContext) -> dict:
    """``steps`` training steps of full_linc: best-of-K costs, losses, seconds per step."""
    model, train = variant_setup("full_linc", num_rollouts=ROLLOUTS, batch_size=BATCH)
    policy = seeded_policy(model).to(ctx.device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=train.learning_rate)
    precision = resolve_precision(precision_name, ctx.device)
    scaler = precision.grad_scaler()
    best, losses, seconds = [], [], []
    for step in range(steps):
        instance = generate("cvrptw", BATCH, CUSTOMERS, seed=1000 + step).to(ctx.device)
        took, metrics = timed(
            ctx.device,
            lambda instance=instance, step=step: train_step(
                policy,
                optimizer,
                instance,
                train,
                step / steps,
                step,
                precision=precision,
                scaler=scaler,
            ),
        )
        best.append(metrics.best_cost)
        losses.append(metrics.loss)
        seconds.append(took)
    return {"best": best, "losses": losses, "seconds": seconds}


def _curve_rows(ctx: CheckContext) -> list[Row]:
    steps = 20 if ctx.quick or not ctx.has_cuda else 200
    runs = {name: _train(name, steps, ctx) for name in ["fp32", *_precisions(ctx)]}
    tail = max(1, steps // 4)

    def tail_mean(name: str) -> float:
        return statistics.fmean(runs[name]["best"][-tail:])

    def step_seconds(name: str) -> float:
        return statistics.median(runs[name]["seconds"][1:] or runs[name]["seconds"])

    reference = tail_mean("fp32")
    rows = [
        Row(
            SECTION,
            f"train fp32 {steps} steps ({ctx.device.type})",
            step_seconds("fp32") * 1e3,
            "ms/step",
            INFO,
            f"best-of-K over the last {tail} steps {reference:.3f} (first "
            f"{statistics.fmean(runs['fp32']['best'][:tail]):.3f})",
        )
    ]
    for name in _precisions(ctx):
        mean = tail_mean(name)
        rel = abs(mean - reference) / reference
        finite = all(math.isfinite(x) for x in runs[name]["losses"])
        ok = finite and rel <= CURVE_TOLERANCE
        # A few steps (quick, CPU mode) show the path runs; too few to compare curves.
        status = (PASS if ok else FAIL) if steps >= 100 else (INFO if finite else FAIL)
        rows.append(
            Row(
                SECTION,
                f"train {name} {steps} steps vs fp32 ({ctx.device.type})",
                step_seconds(name) * 1e3,
                "ms/step",
                status,
                f"best-of-K over the last {tail} steps {mean:.3f} vs fp32 {reference:.3f} "
                f"({rel:.1%}, gate {CURVE_TOLERANCE:.0%}); losses finite: {finite}; "
                f"{step_seconds('fp32') / step_seconds(name):.2f}x fp32's speed",
            )
        )
    if not ctx.has_cuda:
        rows.append(not_run(SECTION, "train fp16 vs fp32", "fp16 is CUDA-only"))
    return rows


def run(ctx: CheckContext) -> list[Row]:
    return _gradient_rows(ctx) + _curve_rows(ctx)


__all__ = ["run"]
