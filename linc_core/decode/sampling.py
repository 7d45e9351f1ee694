"""Rollout machinery shared by every decoding method: rows, z-vectors, counter-based sampling.

A *row* is one augmented copy of one instance: with ``augment = 8`` a batch of B instances
becomes 8 B rows (row ``a * B + b`` is augmentation ``a`` of instance ``b``, as
``augment_dihedral`` lays them out). Each row decodes K rollouts.

Reproducibility does not depend on how the work is chunked:

- the z-vectors of row (b, a) come from a generator seeded with
  ``derive_seed(seed, "z", b, a)``; ``sample_z`` keeps the K smallest of 2^z_dim uniform keys
  in ascending order, so the first K z-vectors of a row are the same whatever the total K;
- a sampled rollout draws its uniforms from a counter-based hash of
  ``(derive_seed(seed, "sample", b, a), rollout index, step)``, not from a shared stream.

Hence rollout k of row (b, a) is the same rollout for every K > k and every chunk size: with
more samples the best cost can only improve (the property the tests check).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
from torch import Tensor

from linc_core.instances import Instance
from linc_core.model.policy import LincPolicy, sample_z
from linc_core.problems import make_env
from linc_core.problems.augment import augment_dihedral
from linc_core.seeding import derive_seed, torch_generator

# splitmix64 constants as signed int64 (torch has no uint64 arithmetic).
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15
_MIX_1 = -4658895280553007687  # 0xBF58476D1CE4E5B9
_MIX_2 = -7723592293110705685  # 0x94D049BB133111EB
_MANTISSA = float(2**53)

# Chooses ``[R, K]`` actions from ``[R, K, N]`` log-probabilities at decoding step ``t``.
Chooser = Callable[[Tensor, int], Tensor]


# ---------------------------------------------------------------------- counter-based RNG
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
        row_seeds: ``[R]`` int64, one seed per row.
    """
    index = torch.arange(first_rollout, first_rollout + num_rollouts, device=row_seeds.device)
    return splitmix64(splitmix64(row_seeds).unsqueeze(1) ^ splitmix64(index * _MIX_1))


def step_uniforms(keys: Tensor, step: int) -> Tensor:
    """``[R, K]`` float64 uniforms in [0, 1), a pure function of (key, step)."""
    mixed = splitmix64(keys ^ splitmix64(torch.full_like(keys, step)))
    return _shift_right(mixed, 11).double() / _MANTISSA


def sample_with_uniforms(log_probs: Tensor, uniforms: Tensor) -> Tensor:
    """Inverse-CDF sampling with given uniforms; a probability-0 action is never drawn.

    Args:
        log_probs: ``[R, K, N]``; uniforms: ``[R, K]`` in [0, 1).

    Returns:
        ``[R, K]`` long.
    """
    cdf = log_probs.double().exp().cumsum(-1)
    threshold = uniforms.unsqueeze(-1) * cdf[..., -1:]
    return (cdf <= threshold).sum(-1).clamp_max(log_probs.shape[-1] - 1)


def greedy_chooser(log_probs: Tensor, step: int) -> Tensor:
    """Argmax (the first of equal maxima)."""
    return log_probs.argmax(-1)


def sampling_chooser(keys: Tensor) -> Chooser:
    """Softmax sampling driven by per-rollout keys ``[R, K]``."""

    def choose(log_probs: Tensor, step: int) -> Tensor:
        return sample_with_uniforms(log_probs, step_uniforms(keys, step))

    return choose


# ---------------------------------------------------------------------- rows and z-vectors
@dataclass(frozen=True)
class Rows:
    """The rows of a decode call.

    Attributes:
        instance: ``R = A * B`` rows in the model's dtype (augmentation-major).
        instance_index: ``[R]`` long, b of each row.
        augmentation: ``[R]`` long, a of each row.
    """

    instance: Instance
    instance_index: Tensor
    augmentation: Tensor

    @property
    def count(self) -> int:
        return self.instance.batch_size

    def select(self, index: slice) -> Rows:
        return Rows(
            self.instance.select(index), self.instance_index[index], self.augmentation[index]
        )


def make_rows(instance: Instance, augment: int, dtype: torch.dtype) -> Rows:
    """The (augmented) rows of ``instance`` cast to the model's ``dtype``."""
    base = instance.to(dtype=dtype)
    rows = augment_dihedral(base) if augment == 8 else base
    b = instance.batch_size
    index = torch.arange(b).repeat(augment)
    aug = torch.arange(augment).repeat_interleave(b)
    return Rows(rows, index, aug)


def row_seeds(rows: Rows, seed: int, purpose: str) -> Tensor:
    """``[R]`` int64 seeds ``derive_seed(seed, purpose, b, a)``."""
    pairs = zip(rows.instance_index.tolist(), rows.augmentation.tolist(), strict=True)
    return torch.tensor([derive_seed(seed, purpose, b, a) for b, a in pairs], dtype=torch.long)


def row_z(rows: Rows, num_z: int, z_dim: int, seed: int) -> Tensor:
    """``[R, num_z, z_dim]`` distinct z-vectors per row, prefix-stable in ``num_z``."""
    pairs = zip(rows.instance_index.tolist(), rows.augmentation.tolist(), strict=True)
    blocks = [
        sample_z(1, num_z, z_dim, torch_generator(derive_seed(seed, "z", b, a))) for b, a in pairs
    ]
    return torch.cat(blocks).to(rows.instance.device)


# ---------------------------------------------------------------------- states
def select_rollouts(state: Any, index: Tensor) -> Any:
    """A state holding rollouts ``index`` of every row.

    Every tensor field of an environment state is ``[R, K, ...]`` (environment docs).

    Args:
        index: ``[R, K']`` long rollout indices.
    """
    rows = torch.arange(index.shape[0], device=index.device).unsqueeze(1)
    values = {}
    for f in fields(state):
        value = getattr(state, f.name)
        values[f.name] = value[rows, index] if isinstance(value, Tensor) else value
    return replace(state, **values)


def repeat_rollouts(state: Any, times: int) -> Any:
    """Each rollout repeated ``times`` times in place: ``[R, K] -> [R, K * times]``."""
    r, k = state.current.shape
    index = torch.arange(k, device=state.current.device).repeat_interleave(times)
    return select_rollouts(state, index.expand(r, -1))


def complete(
    policy: LincPolicy,
    env: Any,
    state: Any,
    cache: Any,
    time_scale: Tensor,
    z: Tensor | None,
    choose: Chooser,
    first_step: int = 0,
) -> tuple[Any, Tensor]:
    """Decode from ``state`` until every rollout has finished.

    Args:
        z: ``[R, K, z_dim]`` or None; choose: see ``Chooser``; first_step: the step counter
            of ``state`` (feeds the sampler's counter).

    Returns:
        (final state, actions ``[R, K, T]`` taken from ``state`` on; padded once finished).
    """
    actions: list[Tensor] = []
    for step in range(first_step, first_step + env.max_steps + 1):
        if bool(state.finished.all()):
            break
        scores = policy.step_scores(env, state, cache, time_scale, z)
        action = choose(policy.log_probs(scores, state.mask), step)
        actions.append(action)
        state = env.step(state, action)
    if not bool(state.finished.all()):
        raise RuntimeError("decoding did not finish within the environment's step bound")
    if not actions:
        r, k = state.current.shape
        return state, torch.zeros(r, k, 0, dtype=torch.long, device=state.current.device)
    return state, torch.stack(actions, dim=-1)


def start_state(env: Any, instance: Instance, starts: Tensor | None) -> tuple[Any, Tensor]:
    """The reset state, after the forced first move when ``starts`` is given (TSP: city 0).

    Returns:
        (state, prefix actions ``[R, K, 0 or 1]``).
    """
    state = env.reset()
    r, k = state.current.shape
    if instance.problem == "tsp" and starts is None:
        starts = torch.zeros(r, k, dtype=torch.long, device=instance.device)
    if starts is None:
        return state, torch.zeros(r, k, 0, dtype=torch.long, device=instance.device)
    return env.step(state, starts), starts.unsqueeze(-1)


def multistart_starts(instance: Instance, num_starts: int) -> Tensor:
    """``[R, K]`` POMO starts: customer k + 1 (city k for TSP) for rollout k."""
    offset = 1 if instance.has_depot else 0
    starts = torch.arange(offset, offset + num_starts, device=instance.device)
    return starts.expand(instance.batch_size, num_starts)


# ---------------------------------------------------------------------- best-of-K decoding
@dataclass
class RowBest:
    """Best rollout found so far per row.

    Attributes:
        cost: ``[R]`` environment cost (model dtype) of the best rollout.
        actions: R action sequences (1-D long tensors, prefix included).
    """

    cost: Tensor
    actions: list[Tensor]

    @classmethod
    def empty(cls, count: int) -> RowBest:
        return cls(torch.full((count,), float("inf"), dtype=torch.float64), [None] * count)

    def offer(self, first_row: int, cost: Tensor, actions: Tensor) -> None:
        """Keep, per row, the cheaper of the incumbent and the best of ``cost`` ``[r, K]``
        (actions ``[r, K, T]``) for rows ``first_row .. + r``."""
        best, index = cost.double().min(-1)
        rows = torch.arange(cost.shape[0], device=cost.device)
        chosen = actions[rows, index].cpu()
        current = self.cost[first_row : first_row + cost.shape[0]]
        better = (best.cpu() < current).tolist()
        for offset, take in enumerate(better):
            if take:
                self.cost[first_row + offset] = best[offset]
                self.actions[first_row + offset] = chosen[offset]


def decode_best_of_k(
    policy: LincPolicy,
    rows: Rows,
    num_rollouts: int,
    *,
    decoding: str,
    multistart: bool,
    seed: int,
    max_rollouts_per_chunk: int,
    progress: Callable[[int], None] | None = None,
) -> RowBest:
    """Best of ``num_rollouts`` rollouts per row, in chunks of bounded size.

    Rows are split into groups of ``max(1, max_rollouts_per_chunk // K)``; when K alone
    exceeds the bound, each row's rollouts are split into blocks too (the encoder then runs
    once per block, a small price next to the decoding steps).
    """
    best = RowBest.empty(rows.count)
    z_dim = policy.config.z_dim
    block = min(num_rollouts, max_rollouts_per_chunk)
    rows_per_chunk = max(1, max_rollouts_per_chunk // block)
    sample_seeds = row_seeds(rows, seed, "sample")
    for first in range(0, rows.count, rows_per_chunk):
        chunk = rows.select(slice(first, first + rows_per_chunk))
        z_all = row_z(chunk, num_rollouts, z_dim, seed) if z_dim > 0 else None
        cache, time_scale = policy.encode(chunk.instance)
        for k0 in range(0, num_rollouts, block):
            k = min(block, num_rollouts - k0)
            env = make_env(chunk.instance, k)
            starts = None
            if multistart:
                starts = multistart_starts(chunk.instance, num_rollouts)[:, k0 : k0 + k]
            state, prefix = start_state(env, chunk.instance, starts)
            z = z_all[:, k0 : k0 + k] if z_all is not None else None
            if decoding == "sample":
                keys = rollout_keys(sample_seeds[first : first + chunk.count], k0, k)
                choose = sampling_chooser(keys.to(chunk.instance.device))
            else:
                choose = greedy_chooser
            state, actions = complete(policy, env, state, cache, time_scale, z, choose)
            best.offer(first, state.cost, torch.cat([prefix, actions], dim=-1))
            if progress is not None:
                progress(chunk.count * k)
    return best
