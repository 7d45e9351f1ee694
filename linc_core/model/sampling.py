"""The random draws of rollouts: z-vectors, action sampling, and the choice rules built on them.

A choice rule ``pick(log_probs, step, positions) -> actions`` turns a step's log-probabilities
into actions; the rollout engine calls it once per decision. ``positions`` (``[B, K']`` or None)
says which of the K rollouts the rows of ``log_probs`` are when the caller decides only some of
them (rollouts with a single feasible action need no model): a sampler still gives every
rollout its own noise whichever rollouts are decided. There is one inverse-CDF sampler
(``sample_with_uniforms``) and one source of randomness for training and decoding alike: a
counter-based hash (splitmix64) of (row seed, rollout index, step), computed on the rollouts'
device. Hence

- a seed means the same z-vectors and the same rollouts on CPU and on CUDA (up to the float
  rounding of the scores), with no host-device copy in the decoding loop;
- rollout k of a row is the same rollout whatever K, chunking, batch composition or the number
  of data-parallel workers (each row's draws depend on its own seed only).

``keyed_sampler`` samples, ``greedy`` takes the most likely action.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

# Chooses ``[B, K']`` actions from ``[B, K', N]`` log-probabilities at decision ``step`` (an int,
# or a 0-d tensor in a compiled step); the optional ``[B, K']`` positions name the rollouts the
# rows are (None: all K, in order).
Pick = Callable[[Tensor, int | Tensor, Tensor | None], Tensor]

# splitmix64 constants as signed int64 (torch has no uint64 arithmetic).
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15
_MIX_1 = -4658895280553007687  # 0xBF58476D1CE4E5B9
_MIX_2 = -7723592293110705685  # 0x94D049BB133111EB
_MANTISSA = float(2**53)
FEISTEL_ROUNDS = 6  # even: the permutation's halves end at the widths they started with


def sample_z(seeds: Tensor, num_rollouts: int, z_dim: int) -> Tensor:
    """Distinct binary z-vectors per row: the first K of a random ordering keyed by its seed.

    Rollout k of a row gets vector ``keyed_permutation(k)`` of the ``2^z_dim`` vectors, so the
    K vectors of a row are pairwise different, the first K are the same whatever the total K,
    and the draw costs O(K) per row (not O(2^z_dim)) and is the same on every device.

    Args:
        seeds: ``[R]`` int64, one per row (``row_seeds``).

    Returns:
        ``[R, K, z_dim]`` float in {0, 1}.
    """
    if num_rollouts > 2**z_dim:
        raise ValueError(f"cannot draw {num_rollouts} distinct z from 2^{z_dim} vectors")
    index = torch.arange(num_rollouts, device=seeds.device).expand(seeds.shape[0], -1)
    vectors = keyed_permutation(index, z_dim, seeds)  # [R, K]
    bits = torch.arange(z_dim - 1, -1, -1, device=seeds.device)
    return ((vectors.unsqueeze(-1) >> bits) & 1).float()


def keyed_permutation(values: Tensor, bits: int, seeds: Tensor) -> Tensor:
    """A pseudo-random permutation of ``[0, 2^bits)`` per row, keyed by the row's seed.

    A Feistel network (``FEISTEL_ROUNDS`` rounds) over the value's bits split into a high and a
    low part of ``ceil(bits / 2)`` and ``floor(bits / 2)`` bits; round r maps (L, R) to
    (R, L xor F_r(R)) with F_r a splitmix64 hash of R and the row's round key. Every round is
    a bijection whatever F_r is (the unbalanced halves swap widths each round, FFX-style), so
    the whole is a permutation; the hashed round functions make it look random.

    Args:
        values: ``[R, K]`` int64 in ``[0, 2^bits)``; seeds: ``[R]`` int64.

    Returns:
        ``[R, K]`` int64: row r's permutation applied to its values.
    """
    high_bits, low_bits = (bits + 1) // 2, bits // 2
    left, right = values >> low_bits, values & ((1 << low_bits) - 1)
    left_bits, right_bits = high_bits, low_bits
    for round_index in range(FEISTEL_ROUNDS):
        key = splitmix64(seeds ^ splitmix64(torch.full_like(seeds, round_index))).unsqueeze(1)
        mixed = splitmix64(right ^ key) & ((1 << left_bits) - 1)
        left, right = right, left ^ mixed
        left_bits, right_bits = right_bits, left_bits
    # An even number of rounds leaves the halves at their starting widths.
    return (left << right_bits) | right


@dataclass(frozen=True)
class BatchRows:
    """Rows ``[start, stop)`` of a batch of ``total`` instances (a data-parallel worker's share).

    Random draws are keyed by the global row (``row_seeds`` of the whole batch, then sliced),
    so the rollouts of a global instance do not depend on how the batch is split.
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

    The CDF is accumulated in the uniforms' dtype (float64 from ``step_uniforms``), so the
    draw does not depend on the model's dtype beyond its probabilities.

    Args:
        log_probs: ``[B, K, N]``; uniforms: ``[B, K]`` in [0, 1).

    Returns:
        ``[B, K]`` long.
    """
    cdf = log_probs.to(uniforms.dtype).exp().cumsum(-1)
    threshold = uniforms.unsqueeze(-1) * cdf[..., -1:]
    return (cdf <= threshold).sum(-1).clamp_max(log_probs.shape[-1] - 1)


def _at(values: Tensor, positions: Tensor | None) -> Tensor:
    return values if positions is None else values.gather(1, positions)


def greedy(log_probs: Tensor, step: int | Tensor, positions: Tensor | None = None) -> Tensor:
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


def row_seeds(seed: int, count: int, device: torch.device | str = "cpu") -> Tensor:
    """``[count]`` int64 seeds of rows ``0 .. count - 1`` of a batch drawn under ``seed``.

    Computed on ``device`` (no host-device copy); a data-parallel worker takes the whole
    batch's seeds and slices its rows (``BatchRows.index``).
    """
    index = torch.arange(count, device=device)
    return splitmix64(splitmix64(index) ^ int(seed))


def step_uniforms(keys: Tensor, step: int | Tensor) -> Tensor:
    """``[R, K]`` float64 uniforms in [0, 1), a pure function of (key, step).

    ``step`` is an int or a 0-d int64 tensor (a compiled step's: one graph for every step);
    both give the same bits.
    """
    steps = torch.full_like(keys, step) if isinstance(step, int) else step.expand_as(keys)
    mixed = splitmix64(keys ^ splitmix64(steps))
    return _shift_right(mixed, 11).double() / _MANTISSA


def keyed_sampler(keys: Tensor) -> Pick:
    """The sampling choice rule: float64 inverse-CDF sampling keyed by rollout and step.

    Args:
        keys: ``[R, K]`` from ``rollout_keys``.
    """

    def pick(log_probs: Tensor, step: int | Tensor, positions: Tensor | None = None) -> Tensor:
        return sample_with_uniforms(log_probs, _at(step_uniforms(keys, step), positions))

    return pick


__all__ = [
    "BatchRows",
    "Pick",
    "greedy",
    "keyed_permutation",
    "keyed_sampler",
    "rollout_keys",
    "row_seeds",
    "sample_with_uniforms",
    "sample_z",
    "splitmix64",
    "step_uniforms",
]
