"""The feasible set F_t of a decision step and the statistics the scorers take over it.

F_t is the feasible customers (the depot excluded, paper section 3.3). Its means (mu_t, eq. 2)
centre the relative features, and its ratio, means and minima make the step summary r_t
(eq. 5). Every helper works on whole batches ``[B, K, ...]`` and on empty sets (0 there, as
the paper says); ``linc_core.model.scorer`` and ``linc_core.evaluate.diagnostics`` use them.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


def feature_major(table: Tensor) -> Tensor:
    """``[B, K, N, F] -> [B, K, F, N]``, free when the environment built it feature-major."""
    fm = table.transpose(-1, -2)
    return fm if fm.is_contiguous() else fm.contiguous()


def feasible_weight(
    feasible: Tensor, dtype: torch.dtype, num_customers: int
) -> tuple[Tensor, Tensor, Tensor]:
    """(``[B, K, N]`` 0/1 weights, ``[B, K, 1]`` |F|, ``[B, K]`` ratio ``max(|F|, 1) / n``).

    |F| is floored at 1 in the ratio, as the reference does (rho = 1/n on an empty F, where the
    paper's formula gives 0). Only the depot is feasible then, so the policy is the same either
    way; the floor keeps our summaries equal to the reference's at every step.
    """
    weight = feasible.to(dtype)
    count = weight.sum(-1, keepdim=True)
    return weight, count, count.squeeze(-1).clamp_min(1.0) / max(num_customers, 1)


def masked_means(fm: Tensor, weight: Tensor, count: Tensor) -> Tensor:
    """``[B, K, F]`` means of feature-major rows ``[B, K, F, N]`` over F (0 when F is empty)."""
    # Multiply-and-sum: a batched matmul over B x K tiny [F, N] x [N, 1] products is slower.
    return (fm * weight.unsqueeze(-2)).sum(-1) / count.clamp_min(1.0)


class FeasibleStats(NamedTuple):
    """What a step's scorer needs about the feasible set F, computed once per step.

    Attributes:
        weight: ``[B, K, N]`` 0/1 weights of F.
        count: ``[B, K, 1]`` |F|.
        ratio: ``[B, K]`` ``max(|F|, 1) / n``.
        means: ``[B, K, F]`` every table feature's mean over F (0 when F is empty).
    """

    weight: Tensor
    count: Tensor
    ratio: Tensor
    means: Tensor


def feasible_stats(fm: Tensor, feasible: Tensor, num_customers: int) -> FeasibleStats:
    """``FeasibleStats`` of a feature-major table ``[B, K, F, N]`` and F ``[B, K, N]``."""
    weight, count, ratio = feasible_weight(feasible, fm.dtype, num_customers)
    return FeasibleStats(weight, count, ratio, masked_means(fm, weight, count))


def mask_offsets(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """0 where ``mask`` is True (or 1), -inf where it is False (or 0), as ``dtype``.

    ``(m - 1) * max * 2`` is exactly 0 for m = 1 and overflows to -inf for m = 0 (``0 * inf``
    would give nan); these elementwise passes cost less than one boolean masked fill on CPU.
    """
    return (mask.to(dtype) - 1.0).mul_(torch.finfo(dtype).max).mul_(2.0)


def masked_minima(rows: Tensor, weight: Tensor, count: Tensor) -> Tensor:
    """``[B, K]`` minimum over F of one feature row ``[B, K, N]`` (0 when F is empty).

    Rows outside F are lifted to inf by subtracting ``mask_offsets`` (exact on F, where it
    subtracts 0). Like ``masked_means`` (where ``nan * 0`` is nan) it needs a finite table,
    which the environments guarantee.

    Args:
        weight: ``[B, K, N]`` 0/1 weights of F. count: ``[B, K, 1]`` |F|.
    """
    minimum = (rows - mask_offsets(weight, rows.dtype)).amin(-1)
    return torch.where(count.squeeze(-1) > 0, minimum, torch.zeros_like(minimum))


def feasible_customers(mask: Tensor, has_depot: bool) -> Tensor:
    """``[B, K, N]`` the feasible set F: the mask with the depot column cleared."""
    if not has_depot:
        return mask
    feasible = mask.clone()
    feasible[..., 0] = False
    return feasible


__all__ = [
    "FeasibleStats",
    "feasible_customers",
    "feasible_stats",
    "feasible_weight",
    "feature_major",
    "mask_offsets",
    "masked_means",
    "masked_minima",
]
