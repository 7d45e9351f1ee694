"""One REINFORCE step over K rollouts per instance.

``loss = mean_{b,k}( -A_bk * m_bk * sum_t log p_t )`` (reference section 4): the mean runs over
all B x K entries, including rollouts the best-only mask zeroes.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import Tensor

from linc_core.config import TrainConfig
from linc_core.instances import Instance
from linc_core.model.policy import LincPolicy, sample_z
from linc_core.train.advantage import (
    best_only_mask,
    group_mean_advantage,
    normalise_advantage,
    soft_top1_advantage,
    tau_at,
)


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


def rollout_starts(instance: Instance, num_rollouts: int) -> Tensor:
    """POMO starts ``[B, K]``: customer k+1 (or city k) for rollout k."""
    offset = 1 if instance.has_depot else 0
    if num_rollouts > instance.num_customers:
        raise ValueError(
            f"multi-start needs num_rollouts <= {instance.num_customers} customers, "
            f"got {num_rollouts}"
        )
    starts = torch.arange(offset, offset + num_rollouts, device=instance.device)
    return starts.expand(instance.batch_size, num_rollouts)


def rollout_conditioning(
    policy: LincPolicy,
    instance: Instance,
    num_rollouts: int,
    multi_start: bool,
    generator: torch.Generator,
) -> tuple[Tensor | None, Tensor | None]:
    """(z ``[B, K, z_dim]`` or None, starts ``[B, K]`` or None) for a training rollout."""
    z = None
    if policy.config.z_dim > 0:
        z = sample_z(
            instance.batch_size, num_rollouts, policy.config.z_dim, generator, instance.device
        )
    starts = rollout_starts(instance, num_rollouts) if multi_start else None
    return z, starts


def advantages(cost: Tensor, config: TrainConfig, progress: float) -> tuple[Tensor, Tensor, float]:
    """(advantage ``[B, K]``, rollout mask ``[B, K]``, tau) at training ``progress``."""
    tau = tau_at(progress, config.tau_start, config.tau_end, config.tau_anneal_ratio)
    if config.advantage == "soft_top1":
        advantage = soft_top1_advantage(cost, tau)
    else:
        advantage = group_mean_advantage(cost)
    if config.normalize_advantage:
        advantage = normalise_advantage(advantage)
    use_best_only = config.rollout_mask == "best_only" and progress >= config.best_only_start_ratio
    mask = best_only_mask(cost) if use_best_only else torch.ones_like(cost)
    return advantage, mask, tau


def train_step(
    policy: LincPolicy,
    optimizer: torch.optim.Optimizer,
    instance: Instance,
    config: TrainConfig,
    progress: float,
    generator: torch.Generator,
    *,
    scaler: torch.amp.GradScaler | None = None,
    morph: tuple[LincPolicy, float] | None = None,
) -> StepMetrics:
    """Sample K rollouts per instance, assign credit, and take one optimiser step."""
    policy.train()
    k = config.num_rollouts
    z, starts = rollout_conditioning(policy, instance, k, config.multi_start, generator)
    use_amp = scaler is not None
    autocast = (
        torch.autocast(device_type="cuda", dtype=torch.float16)
        if use_amp
        else contextlib.nullcontext()
    )
    with autocast:
        result = policy.rollout(
            instance, k, z=z, starts=starts, decoding="sample", generator=generator, morph=morph
        )
    cost = result.cost.detach().float()
    advantage, mask, tau = advantages(cost, config, progress)
    loss = -(advantage * mask * result.log_likelihood.float()).mean()
    optimizer.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
    else:
        loss.backward()
    grad_norm = _clip(policy, config.max_grad_norm)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    return StepMetrics(
        loss=float(loss.detach()),
        mean_cost=float(cost.mean()),
        best_cost=float(cost.min(-1).values.mean()),
        tau=tau,
        best_only=bool(mask.sum() < mask.numel()),
        grad_norm=grad_norm,
        steps=result.steps,
    )


def _clip(policy: LincPolicy, max_norm: float) -> float:
    params = [p for p in policy.parameters() if p.grad is not None]
    if max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    if not params:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))
