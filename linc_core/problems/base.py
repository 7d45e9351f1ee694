"""Tensor helpers shared by the batched routing environments.

Every environment works on leading dims ``[B, K]``: B instances, K rollouts per instance
(z-vectors, starts or samples). Static instance data is ``[B, N, ...]`` and is broadcast over
K; the dynamic state is ``[B, K, ...]``. Nothing here loops over batch rows or nodes.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

# A customer fits when ``demand / capacity <= load + CAPACITY_EPS`` (every problem with loads).
CAPACITY_EPS = 1e-5


def euclidean_distances(locs: Tensor) -> Tensor:
    """Exact pairwise Euclidean distances.

    Computed from coordinate differences rather than ``torch.cdist``'s matrix-multiply path,
    whose cancellation error is visible at benchmark coordinates (hundreds of units).

    Args:
        locs: ``[B, N, 2]``.

    Returns:
        ``[B, N, N]`` distances in the dtype of ``locs``.
    """
    diff = locs.unsqueeze(2) - locs.unsqueeze(1)  # [B, N, N, 2]
    return diff.square().sum(-1).sqrt()


def depot_angles(locs: Tensor, origin: Tensor) -> Tensor:
    """Polar angle of every node about ``origin`` (``atan2``; the origin itself gets 0).

    Args:
        locs: ``[B, N, 2]``; origin: ``[B, 2]``.

    Returns:
        ``[B, N]`` angles in ``(-pi, pi]``.
    """
    rel = locs - origin.unsqueeze(1)
    return torch.atan2(rel[..., 1], rel[..., 0])


def angle_difference_norm(angles: Tensor, current_angle: Tensor) -> Tensor:
    """``|wrap(theta_k - theta_i)| / pi`` with wrap to ``(-pi, pi]``.

    Args:
        angles: ``[B, 1, N]`` (or broadcastable); current_angle: ``[B, K, 1]``.

    Returns:
        ``[B, K, N]`` in ``[0, 1]``.
    """
    delta = angles - current_angle
    wrapped = torch.atan2(torch.sin(delta), torch.cos(delta))
    return wrapped.abs() / math.pi


def gather_rows(matrix: Tensor, index: Tensor) -> Tensor:
    """Rows of a per-instance matrix at per-rollout nodes.

    Args:
        matrix: ``[B, N, M]``; index: ``[B, K]`` long.

    Returns:
        ``[B, K, M]`` with ``out[b, k] = matrix[b, index[b, k]]``.
    """
    b, n, m = matrix.shape
    # Row copies through index_select are an order of magnitude faster than a gather with an
    # expanded index on CPU.
    offsets = torch.arange(0, b * n, n, device=index.device).unsqueeze(1)
    return (
        matrix.reshape(b * n, m).index_select(0, (index + offsets).flatten()).view(*index.shape, m)
    )


def gather_nodes(values: Tensor, index: Tensor) -> Tensor:
    """Per-node values at per-rollout nodes.

    Args:
        values: ``[B, N]`` (static) or ``[B, K, N]`` (dynamic); index: ``[B, K]`` long.

    Returns:
        ``[B, K]``.
    """
    if values.dim() == 2:
        values = values.unsqueeze(1).expand(-1, index.shape[1], -1)
    return values.gather(-1, index.unsqueeze(-1)).squeeze(-1)


def gather_pairs(matrix: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
    """``matrix[b, rows[b, k], cols[b, k]]`` for per-instance ``[B, N, N]`` matrices.

    Returns:
        ``[B, K]``.
    """
    n = matrix.shape[-1]
    return matrix.flatten(1).gather(1, rows * n + cols)


def depot_decisions_left(num_customers: int, num_visited: Tensor, finished: Tensor) -> Tensor:
    """``[B, K]`` long: a lower bound on the decisions a depot rollout needs to finish.

    An unfinished rollout must still visit its ``num_customers - num_visited`` customers, one
    decision each, and then decide the return to the depot; a finished one needs none.
    """
    return (num_customers + 1 - num_visited).masked_fill(finished, 0)


def finite_or_zero(x: Tensor) -> Tensor:
    """Replace NaN and +-inf by 0 (unbounded windows give infinite slack ratios)."""
    return torch.where(torch.isfinite(x), x, torch.zeros((), dtype=x.dtype, device=x.device))


def random_feasible_actions(mask: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One uniformly random feasible node per rollout (exactly uniform).

    Draws one uniform rank ``r`` in ``[0, count)`` per rollout and returns the position of the
    ``(r + 1)``-th feasible node: a running count over the mask, then the number of positions
    whose count is still ``<= r``. One random number per rollout instead of one per node makes
    this several times cheaper than masked argmax of random scores.

    Args:
        mask: ``[B, K, N]`` bool, True = feasible (at least one per row).

    Returns:
        ``[B, K]`` long.
    """
    count_dtype = torch.int16 if mask.shape[-1] < 2**15 else torch.int32
    running = mask.view(torch.uint8).cumsum(-1, dtype=count_dtype)  # [B, K, N]
    u = torch.rand(
        *mask.shape[:-1], 1, generator=generator, device=mask.device, dtype=torch.float64
    )
    rank = (u * running[..., -1:]).to(count_dtype)  # in [0, count)
    before = (running <= rank).view(torch.uint8).sum(-1, dtype=torch.int32)
    return before.long()


def actions_to_routes(actions: Tensor | list[int]) -> list[list[int]]:
    """Split one rollout's depot-separated action sequence into routes of customer ids.

    Args:
        actions: ``[T]`` node ids where 0 is the depot (leading/trailing depots and padding
            are dropped).
    """
    seq = actions.tolist() if isinstance(actions, Tensor) else list(actions)
    routes: list[list[int]] = []
    current: list[int] = []
    for node in seq:
        if node == 0:
            if current:
                routes.append(current)
            current = []
        else:
            current.append(int(node))
    if current:
        routes.append(current)
    return routes


def check_positive(**values: int) -> None:
    """Refuse a size that is not a positive integer (the generators' arguments), naming it."""
    for name, value in values.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")


def bind_instance(env: Any, instance: Any, num_rollouts: int, *, needs_depot: bool) -> None:
    """Set what every environment reads off its ``instance`` (``RoutingEnv``'s attributes and
    ``num_customers``), refusing in one line a rollout count below 1 or, for a problem with
    routes (``needs_depot``), an instance without a depot."""
    name = type(env).__name__
    if needs_depot and not instance.has_depot:
        raise ValueError(f"{name} needs an instance with a depot (a problem with routes).")
    if num_rollouts < 1:
        raise ValueError(f"{name}: expected num_rollouts >= 1, got {num_rollouts}.")
    env.instance = instance
    env.num_rollouts = num_rollouts
    env.batch_size = instance.batch_size
    env.num_nodes = instance.num_nodes
    env.num_customers = instance.num_customers
