"""The random draws of rollouts: z-vectors, action sampling, and the choice rules built on them.

A choice rule ``pick(log_probs, step, positions) -> actions`` turns a step's log-probabilities
into actions; the rollout engine calls it once per decision. ``positions`` (``[B, K']`` or None)
says which of the K rollouts the rows of ``log_probs`` are when the caller decides only some of
them (rollouts with a single feasible action need no model): a sampler still draws its uniforms
for all K rollouts, so every rollout gets the same noise whichever rollouts are decided. There is
one inverse-CDF sampler (``sample_with_uniforms``); the rules differ only in where the uniforms
come from:

- ``sample_from_log_probs`` / ``generator_sampler``: a ``torch.Generator`` stream (training).
  With ``BatchRows`` the uniforms are drawn for the whole batch and sliced, so a data-parallel
  worker's rollouts are those the whole batch would get.
- ``keyed_sampler``: a counter-based hash of (rollout key, step) (decoding), so that rollout k
  of an instance is the same rollout whatever K, chunking or batch composition.
- ``greedy``: no randomness, the most likely action.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

# Chooses ``[B, K']`` actions from ``[B, K', N]`` log-probabilities at decision ``step``; the
# optional ``[B, K']`` positions name the rollouts the rows are (None: all K, in order).
Pick = Callable[[Tensor, int, Tensor | None], Tensor]

# splitmix64 constants as signed int64 (torch has no uint64 arithmetic).
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15
_MIX_1 = -4658895280553007687  # 0xBF58476D1CE4E5B9
_MIX_2 = -7723592293110705685  # 0x94D049BB133111EB
_MANTISSA = float(2**53)


def sample_z(
    batch: int,
    num_rollouts: int,
    z_dim: int,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> Tensor:
    """Distinct binary z-vectors per instance, drawn uniformly without replacement.

    The K smallest of ``2^z_dim`` uniform keys, in ascending order, form a uniform K-subset; so
    the first K z-vectors of an instance are the same whatever the total K.

    Returns:
        ``[B, K, z_dim]`` float in {0, 1}; rows of an instance are pairwise different.
    """
    pool = 2**z_dim
    if num_rollouts > pool:
        raise ValueError(f"cannot draw {num_rollouts} distinct z from 2^{z_dim} vectors")
    keys = torch.rand(batch, pool, generator=generator, device=device)
    index = keys.topk(num_rollouts, dim=-1, largest=False).indices  # [B, K]
    bits = torch.arange(z_dim - 1, -1, -1, device=device)
    return ((index.unsqueeze(-1) >> bits) & 1).float()


@dataclass(frozen=True)
class BatchRows:
    """Rows ``[start, stop)`` of a batch of ``total`` instances (a data-parallel worker's share).

    Random draws meant for the whole batch are made for all ``total`` rows and then sliced to
    these rows, so the rollouts of a global instance do not depend on how the batch is split.
    """

    start: int
    stop: int
    total: int

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.stop <= self.total:
            raise ValueError(
                f"rows [{self.start}, {self.stop}) are not a non-empty part of {self.total}"
            )

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def index(self) -> slice:
        return slice(self.start, self.stop)


# ---------------------------------------------------------------------- the sampler
def sample_with_uniforms(log_probs: Tensor, uniforms: Tensor) -> Tensor:
    """Inverse-CDF sampling with given uniforms; an action of probability 0 is never drawn.

    The CDF is accumulated in the uniforms' dtype (float64 for decoding, the model's dtype in
    training), so the caller chooses the precision.

    Args:
        log_probs: ``[B, K, N]``; uniforms: ``[B, K]`` in [0, 1).

    Returns:
        ``[B, K]`` long.
    """
    cdf = log_probs.to(uniforms.dtype).exp().cumsum(-1)
    threshold = uniforms.unsqueeze(-1) * cdf[..., -1:]
    return (cdf <= threshold).sum(-1).clamp_max(log_probs.shape[-1] - 1)


def draw_uniforms(
    generator: torch.Generator | None,
    batch: int,
    num_rollouts: int,
    dtype: torch.dtype,
    device: torch.device | str,
    rows: BatchRows | None = None,
) -> Tensor:
    """``[B, K]`` uniforms from ``generator``: one per rollout of the batch.

    With ``rows`` the uniforms are drawn for ``[rows.total, K]`` and sliced, consuming
    ``generator`` as the whole batch would.
    """
    shape = (batch if rows is None else rows.total, num_rollouts, 1)
    uniforms = torch.rand(shape, generator=generator, device=device, dtype=dtype)
    if rows is not None:
        uniforms = uniforms[rows.index]
    return uniforms.squeeze(-1)


def sample_from_log_probs(
    log_probs: Tensor, generator: torch.Generator | None, rows: BatchRows | None = None
) -> Tensor:
    """One inverse-CDF draw per rollout with uniforms from ``generator``.

    Args:
        log_probs: ``[B, K, N]``.
        rows: the B instances are these rows of a larger batch (see ``draw_uniforms``).

    Returns:
        ``[B, K]`` long.
    """
    b, k, _ = log_probs.shape
    uniforms = draw_uniforms(generator, b, k, log_probs.dtype, log_probs.device, rows)
    return sample_with_uniforms(log_probs, uniforms)


def _at(values: Tensor, positions: Tensor | None) -> Tensor:
    return values if positions is None else values.gather(1, positions)


def generator_sampler(
    generator: torch.Generator | None, num_rollouts: int, rows: BatchRows | None = None
) -> Pick:
    """The training choice rule: inverse-CDF sampling with one generator stream, which draws
    ``[B, num_rollouts]`` uniforms per decision whichever rollouts are decided."""

    def pick(log_probs: Tensor, step: int, positions: Tensor | None = None) -> Tensor:
        b = log_probs.shape[0]
        uniforms = draw_uniforms(
            generator, b, num_rollouts, log_probs.dtype, log_probs.device, rows
        )
        return sample_with_uniforms(log_probs, _at(uniforms, positions))

    return pick


def greedy(log_probs: Tensor, step: int, positions: Tensor | None = None) -> Tensor:
    """The greedy choice rule: argmax (the first of equal maxima)."""
    return log_probs.argmax(-1)


# ---------------------------------------------------------------------- counter-based uniforms
def _shift_right(x: Tensor, bits: int) -> Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic on negative values)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def splitmix64(x: Tensor) -> Tensor:
    """The splitmix64 finaliser on int64 tensors (wrapping arithmetic), elementwise."""
    z = x + _GOLDEN
    z = (z ^ _shift_right(z, 30)) * _MIX_1
    z = (z ^ _shift_right(z, 27)) * _MIX_2
    return z ^ _shift_right(z, 31)


def rollout_keys(row_seeds: Tensor, first_rollout: int, num_rollouts: int) -> Tensor:
    """Per-rollout random keys ``[R, K]`` for rollouts ``first_rollout .. + K`` of each row.

    Args:
        row_seeds: ``[R]`` int64, one seed per row (an instance or an augmented copy).
    """
    index = torch.arange(first_rollout, first_rollout + num_rollouts, device=row_seeds.device)
    return splitmix64(splitmix64(row_seeds).unsqueeze(1) ^ splitmix64(index * _MIX_1))


def step_uniforms(keys: Tensor, step: int) -> Tensor:
    """``[R, K]`` float64 uniforms in [0, 1), a pure function of (key, step)."""
    mixed = splitmix64(keys ^ splitmix64(torch.full_like(keys, step)))
    return _shift_right(mixed, 11).double() / _MANTISSA


def keyed_sampler(keys: Tensor) -> Pick:
    """The decoding choice rule: float64 inverse-CDF sampling keyed by rollout and step.

    Args:
        keys: ``[R, K]`` from ``rollout_keys``.
    """

    def pick(log_probs: Tensor, step: int, positions: Tensor | None = None) -> Tensor:
        return sample_with_uniforms(log_probs, _at(step_uniforms(keys, step), positions))

    return pick


__all__ = [
    "BatchRows",
    "Pick",
    "draw_uniforms",
    "generator_sampler",
    "greedy",
    "keyed_sampler",
    "rollout_keys",
    "sample_from_log_probs",
    "sample_with_uniforms",
    "sample_z",
    "splitmix64",
    "step_uniforms",
]
