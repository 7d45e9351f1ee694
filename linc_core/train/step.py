"""One REINFORCE step over K rollouts per instance.

``loss = mean_{b,k}( -A_bk * m_bk * sum_t log p_t )`` (reference section 4): the mean runs over
all B x K entries, including rollouts the best-only mask zeroes.

Data-parallel (``world.size > 1``, see ``linc_core.train.distributed``): every rank receives the
whole batch, rolls out its contiguous rows, divides its loss sum by the global ``B x K`` and sums
gradients over ranks, so the update equals the single-process update on the whole batch up to
float rounding. The step's random draws are keyed by ``(seed, global row)``
(``linc_core.model.sampling``): a rank computes the whole batch's row seeds and slices its own,
and the same seed gives the same rollouts on CPU and CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from linc_core.config import TrainConfig
from linc_core.instances import Instance
from linc_core.model.policy import LincPolicy
from linc_core.model.replay import at_least_float32, backward_replay
from linc_core.model.sampling import BatchRows, row_seeds, sample_z
from linc_core.problems.rollout import pomo_starts
from linc_core.train.advantage import (
    NORMALISE_EPS,
    best_only_mask,
    group_mean_advantage,
    normalise_advantage,
    soft_top1_advantage,
    tau_at,
)
from linc_core.train.distributed import (
    SINGLE,
    World,
    all_reduce_,
    all_reduce_grads,
    batch_rows,
    global_std,
)
from linc_core.train.precision import FP32, MixedPrecision
from linc_core.utils.seeding import derive_seed


@dataclass(frozen=True)
class StepMetrics:
    """What one step reports (floats, safe to log)."""

    loss: float
    mean_cost: float
    best_cost: float  # mean over instances of the best-of-K cost
    tau: float
    best_only: bool
    grad_norm: float
    steps: int


@dataclass(frozen=True)
class RolloutDraws:
    """What a training step's rollouts are conditioned on and sample with.

    Attributes:
        z: ``[B, K, z_dim]`` float, or None (a model without z).
        starts: ``[B, K]`` POMO first moves, or None.
        sample_seeds: ``[B]`` int64 row seeds of the action draws.
    """

    z: Tensor | None
    starts: Tensor | None
    sample_seeds: Tensor


def rollout_draws(
    policy: LincPolicy,
    instance: Instance,
    num_rollouts: int,
    multi_start: bool,
    seed: int,
    rows: BatchRows | None = None,
) -> RolloutDraws:
    """The z-vectors, starts and sampling seeds of a training rollout drawn under ``seed``.

    Every draw is keyed by the global row: with ``rows`` (``instance`` is those rows of a
    larger batch) an instance gets what it would get in the whole batch.
    """
    total = instance.batch_size if rows is None else rows.total
    index = slice(None) if rows is None else rows.index
    device = instance.device
    z = None
    if policy.config.z_dim > 0:
        z_seeds = row_seeds(derive_seed(seed, "z"), total, device)[index]
        z = sample_z(z_seeds, num_rollouts, policy.config.z_dim)
    starts = pomo_starts(instance, num_rollouts) if multi_start else None
    sample_seeds = row_seeds(derive_seed(seed, "sample"), total, device)[index]
    return RolloutDraws(z, starts, sample_seeds)


def uses_best_only(config: TrainConfig, progress: float) -> bool:
    """Whether the best-only rollout mask applies at training ``progress``."""
    return config.rollout_mask == "best_only" and progress >= config.best_only_start_ratio


def advantages(
    cost: Tensor, config: TrainConfig, progress: float, world: World = SINGLE
) -> tuple[Tensor, Tensor, float]:
    """(advantage ``[B, K]``, rollout mask ``[B, K]``, tau) at training ``progress``.

    Credit and mask are per instance; only the normalisation is batch-wide, and over a
    data-parallel ``world`` it uses the std of every rank's advantages together.
    """
    tau = tau_at(progress, config.tau_start, config.tau_end, config.tau_anneal_ratio)
    if config.advantage == "soft_top1":
        advantage = soft_top1_advantage(cost, tau)
    else:
        advantage = group_mean_advantage(cost)
    if config.normalise_advantage:
        if world.distributed:
            advantage = advantage / (global_std(advantage, world) + NORMALISE_EPS)
        else:
            advantage = normalise_advantage(advantage)
    mask = best_only_mask(cost) if uses_best_only(config, progress) else torch.ones_like(cost)
    return advantage, mask, tau


def train_step(
    policy: LincPolicy,
    optimizer: torch.optim.Optimizer,
    instance: Instance,
    config: TrainConfig,
    progress: float,
    seed: int,
    *,
    precision: MixedPrecision = FP32,
    scaler: torch.amp.GradScaler | None = None,
    morph: tuple[LincPolicy, float] | None = None,
    world: World = SINGLE,
) -> StepMetrics:
    """Sample K rollouts per instance, assign credit, and take one optimiser step.

    Args:
        instance: the whole batch of B instances (on every rank when data-parallel).
        seed: every random draw of the step derives from it (``rollout_draws``);
            data-parallel ranks pass the same seed.
        precision: the autocast of the forward passes (``linc_core.train.precision``).
        scaler: the run's ``GradScaler`` when ``precision`` needs one (fp16).
        world: data-parallel workers (``linc_core.train.distributed``). With ``size > 1`` this
            rank rolls out rows ``[rank B / size, (rank + 1) B / size)`` (B must be divisible by
            size), gradients are summed over ranks, and the returned metrics are global, equal
            on every rank.
    """
    policy.train()
    k = config.num_rollouts
    rows = batch_rows(instance.batch_size, world) if world.distributed else None
    if rows is not None:
        instance = instance.select(rows.index)
    if precision.needs_scaler and scaler is None:
        raise ValueError(f"train_step: precision {precision.name} needs a GradScaler")
    draws = rollout_draws(policy, instance, k, config.multi_start, seed, rows)
    # Every credit mode trains the same way: sample the K rollouts without autograd, then
    # recompute with gradients only the decisions that carry weight, chunk by chunk
    # (``backward_replay``): the loss and gradient of weighting the rollouts' log-likelihood
    # under autograd, in memory bounded by ``config.replay_chunk`` rollouts per instance.
    with precision.autocast():
        encoded = policy.encode(instance)
        with torch.no_grad():
            result = policy.rollout(
                instance,
                k,
                z=draws.z,
                starts=draws.starts,
                decoding="sample",
                sample_seeds=draws.sample_seeds,
                morph=morph,
                encoded=encoded,
                keep_trajectory=True,
                compiled=config.compile,
            )
    # At least float32 (costs of a half-precision model), never below the model's dtype: a
    # float64 run keeps float64 credit, or its group-mean advantages would carry float32's
    # rounding (the CUDA-vs-CPU float64 check saw 1e-5 loss differences from it).
    cost = at_least_float32(result.cost.detach())
    steps, trajectory = result.steps, result.trajectory
    del result
    advantage, mask, tau = advantages(cost, config, progress, world)
    # Data-parallel: this rank's share of the whole-batch mean, so that the sum over ranks of
    # the gradients is the gradient of the mean over all B x K entries.
    loss_scale = -1.0 / (cost.numel() if rows is None else rows.total * k)
    optimizer.zero_grad(set_to_none=True)
    weighted_sum = backward_replay(
        policy,
        trajectory,
        encoded.cache,
        advantage * mask,
        loss_scale=loss_scale,
        chunk_rollouts=config.replay_chunk,
        backward=Tensor.backward if scaler is None else lambda x: scaler.scale(x).backward(),
        autocast=precision.autocast,
        compiled=config.compile,
    )
    del trajectory, encoded
    loss = at_least_float32(weighted_sum) * loss_scale
    # Reduce before unscaling: every rank then sees the same inf/nan and skips together.
    all_reduce_grads(policy.parameters(), world)
    if scaler is not None:
        scaler.unscale_(optimizer)
    grad_norm = _clip(policy, config.max_grad_norm)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    best_only = bool(mask.sum() < mask.numel())
    if rows is None:
        return StepMetrics(
            loss=float(loss.detach()),
            mean_cost=float(cost.mean()),
            best_cost=float(cost.min(-1).values.mean()),
            tau=tau,
            best_only=best_only,
            grad_norm=grad_norm,
            steps=steps,
        )
    best = cost.min(-1).values
    sums = torch.stack([loss.detach().double(), cost.double().sum(), best.double().sum()])
    loss_sum, cost_sum, best_sum = all_reduce_(sums, world).tolist()
    steps = all_reduce_(torch.tensor([steps], device=cost.device), world, "max")
    return StepMetrics(
        loss=loss_sum,
        mean_cost=cost_sum / (rows.total * k),
        best_cost=best_sum / rows.total,
        tau=tau,
        best_only=best_only,
        grad_norm=grad_norm,
        steps=int(steps.item()),
    )


def _clip(policy: LincPolicy, max_norm: float) -> float:
    params = [p for p in policy.parameters() if p.grad is not None]
    if max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    if not params:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))
