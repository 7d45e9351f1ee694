"""Data-parallel training over ``torch.distributed``: the few collectives ``train_step`` needs.

Mechanism (explicit, no wrapper module): every rank holds the same model and receives the same
whole batch of B instances; rank r rolls out rows ``[r B / N, (r + 1) B / N)`` (``batch_rows``).
Every batch-wide quantity is made global with one all-reduce:

- the loss is a mean over all ``B x K`` entries, so each rank divides its *sum* by the global
  ``B x K`` and gradients are all-reduced with a SUM (``all_reduce_grads``): the result is the
  gradient of the whole-batch loss, not an average of per-rank means;
- advantage normalisation divides by the unbiased std of the whole batch (``global_std``: an
  all-reduce of count, sum and sum of squares, in float64);
- reported costs and loss are global sums divided by global counts.

Random draws: z and the sampling noise are keyed by the step's seed (the same on every rank)
and the global row (``linc_core.model.sampling.row_seeds`` of the whole batch, sliced to the
rank's ``BatchRows``), so the rollouts of global instance b are the same for any number of
workers.

``torch.nn.parallel.DistributedDataParallel`` is not used: it hooks ``forward``, while a
rollout calls the policy's pieces many times per step, and it averages gradients per rank, which
is exact only for equal per-rank means; a single flat all-reduce after ``backward`` is exact and
as cheap.

A ``World`` of size 1 (the default, and whenever ``torch.distributed`` is not initialised) makes
no collective call at all: the single-process path is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from linc_core.model.sampling import BatchRows


@dataclass(frozen=True)
class World:
    """This process's place among data-parallel workers.

    Attributes:
        rank: 0..size-1; rank 0 alone writes checkpoints and runs writing callbacks.
        size: number of workers (1 = single process, no collectives).
        group: the ``torch.distributed`` process group (None = the default group).
    """

    rank: int = 0
    size: int = 1
    group: Any = None

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise ValueError(f"invalid world: rank {self.rank} of size {self.size}")

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


SINGLE = World()


def world(group: Any = None) -> World:
    """The current ``torch.distributed`` world, or a single process when not initialised."""
    if not (dist.is_available() and dist.is_initialized()):
        return SINGLE
    return World(rank=dist.get_rank(group), size=dist.get_world_size(group), group=group)


def batch_rows(batch_size: int, world: World) -> BatchRows:
    """This rank's contiguous share of a batch of ``batch_size`` instances."""
    if batch_size % world.size:
        raise ValueError(
            f"a batch of {batch_size} instances cannot be split evenly over {world.size} "
            "data-parallel workers: make batch_size a multiple of num_workers"
        )
    per = batch_size // world.size
    return BatchRows(world.rank * per, (world.rank + 1) * per, batch_size)


def all_reduce_(tensor: Tensor, world: World, op: str = "sum") -> Tensor:
    """In-place all-reduce (``sum`` or ``max``) over the world; a no-op for one process."""
    if world.distributed:
        reduce_op = dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX
        dist.all_reduce(tensor, op=reduce_op, group=world.group)
    return tensor


def global_std(x: Tensor, world: World) -> Tensor:
    """Unbiased std (as ``torch.std``) of the union of every rank's ``x``; 0-dim, ``x.dtype``.

    Float64 moments keep the one-pass formula accurate: advantages are roughly centred, so the
    cancellation in ``sum_sq - sum^2 / n`` loses little.
    """
    flat = x.detach().double().reshape(-1)
    moments = torch.stack([flat.new_tensor(float(flat.numel())), flat.sum(), flat.square().sum()])
    count, total, squares = all_reduce_(moments, world).unbind()
    variance = (squares - total * total / count) / (count - 1)
    return variance.clamp_min(0.0).sqrt().to(x.dtype)


def all_reduce_grads(parameters: Iterable[nn.Parameter], world: World) -> None:
    """Sum every parameter's gradient over the world (one flat all-reduce per dtype).

    Each rank's loss must already be divided by the global number of entries, so the sum is the
    whole-batch gradient. A parameter with no gradient on any rank keeps ``grad = None`` (Adam
    then skips it, as in a single process); one that has a gradient on some ranks only gets the
    sum over the ranks that have one. A presence flag per parameter travels in the same buffer.
    """
    if not world.distributed:
        return
    params = [p for p in parameters if p.requires_grad]
    by_dtype: dict[tuple[torch.dtype, torch.device], list[nn.Parameter]] = {}
    for p in params:
        by_dtype.setdefault((p.dtype, p.device), []).append(p)
    for (dtype, device), group in by_dtype.items():
        pieces = [
            p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), dtype=dtype)
            for p in group
        ]
        present = torch.tensor([float(p.grad is not None) for p in group], dtype=dtype)
        buffer = torch.cat([piece.to(device) for piece in pieces] + [present.to(device)])
        all_reduce_(buffer, world)
        presence = buffer[buffer.numel() - len(group) :].tolist()
        offset = 0
        for p, flag in zip(group, presence, strict=True):
            n = p.numel()
            if flag > 0:
                summed = buffer[offset : offset + n].view_as(p)
                if p.grad is None:
                    p.grad = summed.clone()
                else:
                    p.grad.copy_(summed)
            offset += n


def broadcast_module_(module: nn.Module, world: World, src: int = 0) -> None:
    """Copy rank ``src``'s parameters and buffers to every rank (identical starting points)."""
    if not world.distributed:
        return
    with torch.no_grad():
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.data, src=src, group=world.group)


def agree_any(flag: bool, world: World, device: torch.device | str = "cpu") -> bool:
    """True on every rank if ``flag`` is True on any rank (e.g. a wall-clock budget ran out)."""
    if not world.distributed:
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=device)
    return bool(all_reduce_(value, world, op="max").item() > 0)


__all__ = [
    "SINGLE",
    "BatchRows",
    "World",
    "agree_any",
    "all_reduce_",
    "all_reduce_grads",
    "batch_rows",
    "broadcast_module_",
    "global_std",
    "world",
]
