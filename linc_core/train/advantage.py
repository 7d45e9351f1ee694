"""Credit assignment over the K rollouts of each instance (paper section 3.5, appendix).

All functions take costs ``[B, K]`` (raw distance; reward = -cost) and return ``[B, K]``.

- group mean: ``A = r - mean_K(r)``;
- matched soft top-1: with ``s_j = -c_j / tau``, ``m_all = -tau log mean_j exp(s_j)`` and the
  leave-one-out ``m_loo,i = -tau log mean_{j != i} exp(s_j)``; ``A_i = (K - 1)(m_loo,i - m_all)``.
  As tau grows this tends to the group-mean advantage; as tau -> 0 the credit concentrates on
  the best rollout. tau is in raw cost units (reference section 4);
- optional normalisation by the standard deviation of the whole ``[B, K]`` tensor;
- the best-only rollout mask, and the geometric tau schedule.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

# The leave-one-out sum (after shifting by the max) is floored here, as in the reference: it
# bounds the best rollout's credit when every other rollout is negligibly unlikely.
LOO_FLOOR = 1e-6
NORMALISE_EPS = 1e-6


def group_mean_advantage(cost: Tensor) -> Tensor:
    reward = -cost
    return reward - reward.mean(-1, keepdim=True)


def soft_top1_advantage(cost: Tensor, tau: float) -> Tensor:
    """Matched soft top-1 advantage (computed in float64, returned in ``cost.dtype``)."""
    if tau <= 0:
        raise ValueError(f"tau must be positive, got {tau}")
    k = cost.shape[-1]
    if k < 2:
        raise ValueError("soft top-1 needs at least 2 rollouts per instance")
    s = -cost.double() / tau
    s_max = s.amax(-1, keepdim=True)
    weights = torch.exp(s - s_max)
    total = weights.sum(-1, keepdim=True)
    leave_one_out = (total - weights).clamp_min(LOO_FLOOR)
    m_all = -tau * (s_max + torch.log(total / k))
    m_loo = -tau * (s_max + torch.log(leave_one_out / (k - 1)))
    return ((k - 1) * (m_loo - m_all)).to(cost.dtype)


def normalise_advantage(advantage: Tensor) -> Tensor:
    """Divide by the unbiased std of the whole tensor (+1e-6)."""
    return advantage / (advantage.std() + NORMALISE_EPS)


def best_only_mask(cost: Tensor) -> Tensor:
    """``[B, K]`` float: 1 for the lowest-cost rollout of each instance (first on ties)."""
    mask = torch.zeros_like(cost)
    return mask.scatter_(-1, cost.argmin(-1, keepdim=True), 1.0)


def tau_at(progress: float, tau_start: float, tau_end: float, anneal_ratio: float) -> float:
    """Geometric anneal from ``tau_start`` to ``tau_end`` over the first ``anneal_ratio`` of
    training progress (in [0, 1]), constant afterwards."""
    fraction = min(max(progress, 0.0) / anneal_ratio, 1.0)
    return tau_start * math.exp(fraction * math.log(tau_end / tau_start))


def training_progress(global_batch: int, total_batches: int) -> float:
    """``global_batch / (total_batches - 1)`` (0 for a single batch), as the reference."""
    return global_batch / max(total_batches - 1, 1)
