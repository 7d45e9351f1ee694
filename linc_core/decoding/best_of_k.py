"""Best-of-K decoding: the rows of a decode call, their seeds, and the best rollout per row.

A *row* is one augmented copy of one instance: with ``augment = 8`` a batch of B instances
becomes 8 B rows (row ``a * B + b`` is augmentation ``a`` of instance ``b``, as
``augment_dihedral`` lays them out). Each row decodes K rollouts.

One seeding scheme for every decode (validation during training included). A row's random
draws derive from ``seed``, the content of its instance (``Instance.fingerprint``: a hash of
the instance's data, so the same instance decodes the same wherever it sits in a batch or a folder)
and its augmentation:

- its z-vectors are keyed by ``derive_seed(seed, "z", fingerprint, a)``: ``sample_z`` keeps
  the K smallest of 2^z_dim keyed hashes in ascending order, so the first K z-vectors of a row
  are the same whatever the total K;
- a sampled rollout draws its uniforms from a counter-based hash of
  ``(derive_seed(seed, "sample", fingerprint, a), rollout index, step)``
  (``linc_core.model.sampling.keyed_sampler``), not from a shared stream.

Hence rollout k of a row is the same rollout for every K > k, every chunk size, every batch it
is decoded in and every device (the draws are computed on the device, no host copy per
decision): with more samples the best cost can only improve (the property the tests check).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import functional

from linc_core.decoding.config import best_of_k_chunk
from linc_core.decoding.deadline import check_deadline, with_deadline
from linc_core.instances import Instance
from linc_core.model.decisions import PolicyChooser
from linc_core.model.policy import LincPolicy
from linc_core.model.sampling import greedy, keyed_sampler, rollout_keys, sample_z
from linc_core.problems import make_env
from linc_core.problems.augment import augment_dihedral
from linc_core.problems.rollout import complete_rollouts, pomo_starts, start_rollouts
from linc_core.utils.runtime import trim_free_heap
from linc_core.utils.seeding import derive_seed


@dataclass(frozen=True)
class Rows:
    """The rows of a decode call.

    Attributes:
        instance: ``R = A * B`` rows in the model's dtype (augmentation-major).
        instance_index: ``[R]`` long, b of each row.
        augmentation: ``[R]`` long, a of each row.
        fingerprints: R fingerprints of each row's un-augmented instance (what seeds derive from).
    """

    instance: Instance
    instance_index: Tensor
    augmentation: Tensor
    fingerprints: tuple[str, ...]

    @property
    def count(self) -> int:
        return self.instance.batch_size

    def select(self, index: slice) -> Rows:
        return Rows(
            self.instance.select(index),
            self.instance_index[index],
            self.augmentation[index],
            self.fingerprints[index],
        )

    def seeds(self, seed: int, purpose: str) -> Tensor:
        """``[R]`` int64 seeds ``derive_seed(seed, purpose, fingerprint, a)``."""
        pairs = zip(self.fingerprints, self.augmentation.tolist(), strict=True)
        return torch.tensor([derive_seed(seed, purpose, f, a) for f, a in pairs], dtype=torch.long)

    def z(self, num_z: int, z_dim: int, seed: int) -> Tensor:
        """``[R, num_z, z_dim]`` distinct z-vectors per row, prefix-stable in ``num_z``."""
        seeds = self.seeds(seed, "z").to(self.instance.device, non_blocking=True)
        return sample_z(seeds, num_z, z_dim)


def make_rows(
    instance: Instance, augment: int, dtype: torch.dtype, device: torch.device | None = None
) -> Rows:
    """The (augmented) rows of ``instance`` cast to the model's ``dtype``, on ``device``
    (default: the instance's).

    The rows' fingerprints (which key their seeds) are hashed from one host copy of the batch:
    none to make when ``instance`` is on the CPU, one transfer per field when it is on a GPU,
    instead of one host-device synchronisation per field and row.
    """
    base = instance.to(dtype=dtype)
    host = base.to(device="cpu")
    b = instance.batch_size
    prints = tuple(host.fingerprint(i) for i in range(b))
    base = base.to(device=device)
    rows = augment_dihedral(base) if augment == 8 else base
    return Rows(
        rows,
        torch.arange(b).repeat(augment),
        torch.arange(augment).repeat_interleave(b),
        prints * augment,
    )


@dataclass
class BestRollouts:
    """The best rollout found so far per row, kept on the decoding device.

    Attributes:
        cost: ``[R]`` float64 environment cost of the best rollout (+inf before any).
        actions: ``[R, L]`` long, its actions (forced prefix included), padded with 0 (the
            depot; a finished TSP tour is read up to its N cities).
    """

    cost: Tensor
    actions: Tensor

    @classmethod
    def empty(cls, count: int, length: int, device: torch.device | str) -> BestRollouts:
        return cls(
            torch.full((count,), float("inf"), dtype=torch.float64, device=device),
            torch.zeros(count, length, dtype=torch.long, device=device),
        )

    def offer(self, first_row: int, cost: Tensor, actions: Tensor) -> None:
        """Keep, per row, the cheaper of the incumbent and the best of ``cost`` ``[r, K]``
        (actions ``[r, K, T]``) for rows ``first_row .. + r`` (ties keep the incumbent)."""
        r, _, t = actions.shape
        length = self.actions.shape[1]
        if t > length:
            raise ValueError(f"a rollout of {t} actions does not fit the {length} kept per row")
        best, index = cost.double().min(-1)
        chosen = actions[torch.arange(r, device=actions.device), index]  # [r, T]
        rows = slice(first_row, first_row + r)
        better = best < self.cost[rows]
        self.cost[rows] = torch.where(better, best, self.cost[rows])
        padded = functional.pad(chosen, (0, length - t))
        self.actions[rows] = torch.where(better.unsqueeze(1), padded, self.actions[rows])


def rollout_capacity(instance: Instance) -> int:
    """Actions a complete rollout can hold, forced prefix included (every customer its own
    route: 2 n, plus the start and one decision of slack)."""
    return 2 * instance.num_nodes + 2


def decode_best_of_k(
    policy: LincPolicy,
    rows: Rows,
    num_rollouts: int,
    *,
    sample: bool,
    multistart: bool,
    seed: int,
    max_rollouts_per_chunk: int,
    progress: Callable[[int], None] | None = None,
    deadline: float | None = None,
    compiled: bool = False,
) -> BestRollouts:
    """Best of ``num_rollouts`` rollouts per row (sampled or greedy), in chunks of bounded size.

    Rows are split into groups of ``max(1, max_rollouts_per_chunk // K)``; when K alone
    exceeds the bound, each row's rollouts are split into blocks too (sharing the row's
    encoding). On CPU the heap's free pages go back to the OS between chunks
    (``trim_between_chunks``). Past ``deadline`` (``linc_core.decoding.deadline``) it raises
    ``DeadlineExceeded`` within one decision. ``compiled``: the decision step under
    ``torch.compile`` (``PolicyChooser``).
    """
    device = rows.instance.device
    best = BestRollouts.empty(rows.count, rollout_capacity(rows.instance), device)
    rows_per_chunk, block = best_of_k_chunk(num_rollouts, max_rollouts_per_chunk)
    sample_seeds = rows.seeds(seed, "sample").to(device, non_blocking=True)
    for first in range(0, rows.count, rows_per_chunk):
        if first > 0:
            trim_between_chunks(device)
        check_deadline(deadline)
        chunk = rows.select(slice(first, first + rows_per_chunk))
        keys = sample_seeds[first : first + chunk.count] if sample else None
        _best_of_chunk(
            policy, chunk, first, best, num_rollouts, block, keys, multistart, seed,
            progress=progress, deadline=deadline, compiled=compiled,
        )  # fmt: skip
    return best


def _best_of_chunk(
    policy: LincPolicy,
    chunk: Rows,
    first: int,
    best: BestRollouts,
    num_rollouts: int,
    block: int,
    sample_seeds: Tensor | None,
    multistart: bool,
    seed: int,
    progress: Callable[[int], None] | None,
    deadline: float | None,
    compiled: bool,
) -> None:
    """Offer ``best`` the ``num_rollouts`` rollouts of each row of ``chunk`` (rows ``first``
    on), ``block`` at a time, sampled with the rows' ``sample_seeds`` (``[r]``; None: greedy).
    Its tensors are freed when it returns, before the next chunk."""
    z_dim = policy.config.z_dim
    z_all = chunk.z(num_rollouts, z_dim, seed) if z_dim > 0 else None
    encoded = policy.encode(chunk.instance)
    for k0 in range(0, num_rollouts, block):
        k = min(block, num_rollouts - k0)
        env = make_env(chunk.instance, k)
        starts = None
        if multistart:
            starts = pomo_starts(chunk.instance, num_rollouts)[:, k0 : k0 + k]
        state, prefix = start_rollouts(env, starts)
        z = z_all[:, k0 : k0 + k] if z_all is not None else None
        pick = greedy
        if sample_seeds is not None:
            pick = keyed_sampler(rollout_keys(sample_seeds, k0, k))
        chooser = PolicyChooser(
            policy, env, encoded, z, pick, track_log_likelihood=False, compiled=compiled
        )
        final, actions = complete_rollouts(
            env, with_deadline(chooser, deadline), state, transition=chooser.transition
        )
        best.offer(first, final.cost, torch.cat([prefix, actions], dim=-1))
        if progress is not None:
            progress(chunk.count * k)


def trim_between_chunks(device: torch.device) -> None:
    """Before a decoding's next chunk on CPU, give the heap's free pages back to the OS
    (``linc_core.utils.runtime.trim_free_heap``): the chunks' freed tensors would otherwise
    stay resident under ``tune_cpu_allocator`` and, with SGBS's shapes changing at every
    depth, fragment the heap: SGBS on 24 Solomon-100 at 8,192 rollouts a chunk (one thread,
    2026-11-29) held 1,454, 2,090 and 2,583 MiB above its start after its three chunks, and at
    most 600 MiB trimmed between them, in the same time. A decoding of one chunk never trims;
    a GPU's memory is not the heap's."""
    if device.type == "cpu":
        trim_free_heap()


__all__ = [
    "BestRollouts",
    "Rows",
    "decode_best_of_k",
    "make_rows",
    "rollout_capacity",
    "trim_between_chunks",
]
