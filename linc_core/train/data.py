"""Training data sources: batches as a pure function of (seed, epoch, batch index).

No random state is carried between batches, so a resumed run sees exactly the batches an
uninterrupted one would. ``GeneratedData`` samples fresh instances per batch (the paper's
training); ``FixedData`` cycles a fixed set shuffled per epoch (the ablation protocol trains
on the 56 truncated Solomon instances); ``ShardedTrainingData`` streams a Parquet data set
(:mod:`linc_core.instances.parquet`) with bounded memory.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow.fs as pafs
import torch

from linc_core.config import TrainConfig
from linc_core.instances import Instance
from linc_core.instances.datasets import load_shard, resolve_filesystem, shard_entries
from linc_core.problems.cvrptw import EnvelopeConfig
from linc_core.problems.spec import problem_spec
from linc_core.utils.seeding import derive_seed, torch_generator


class TrainingData(Protocol):
    batches_per_epoch: int

    def batch(self, epoch: int, index: int) -> Instance: ...


def generate(
    problem: str, batch: int, num_customers: int, seed: int, envelope: EnvelopeConfig | None = None
) -> Instance:
    """A seeded batch from the problem's training generator (its spec's ``generate``);
    ``envelope`` is the generator's options (CVRPTW's; the others take none)."""
    return problem_spec(problem).generate(batch, num_customers, seed, envelope)


@dataclass(frozen=True)
class GeneratedData:
    """Fresh instances every batch (``instances_per_epoch // batch_size`` batches an epoch)."""

    problem: str
    num_customers: int
    batch_size: int
    instances_per_epoch: int
    seed: int
    envelope: EnvelopeConfig = field(default_factory=EnvelopeConfig)

    @classmethod
    def for_training(
        cls,
        problem: str,
        num_customers: int,
        config: TrainConfig,
        seed: int = 0,
        envelope: EnvelopeConfig | None = None,
    ) -> GeneratedData:
        """The fresh-instance data of a run of ``config``: its ``batch_size`` and
        ``instances_per_epoch`` (the sizes are given once, in the training config)."""
        return cls(
            problem,
            num_customers,
            config.batch_size,
            config.instances_per_epoch,
            seed,
            envelope or EnvelopeConfig(),
        )

    @property
    def batches_per_epoch(self) -> int:
        return max(1, self.instances_per_epoch // self.batch_size)

    def batch(self, epoch: int, index: int) -> Instance:
        seed = derive_seed(self.seed, "train", self.problem, self.num_customers, epoch, index)
        return generate(self.problem, self.batch_size, self.num_customers, seed, self.envelope)


@dataclass(frozen=True)
class FixedData:
    """A fixed instance set, reshuffled every epoch with a seed derived from the epoch."""

    instances: Instance
    batch_size: int
    seed: int
    shuffle: bool = True

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.batch_size > self.instances.batch_size:
            raise ValueError(
                f"batch_size must be in [1, {self.instances.batch_size}], got {self.batch_size}"
            )

    @property
    def batches_per_epoch(self) -> int:
        return self.instances.batch_size // self.batch_size

    def batch(self, epoch: int, index: int) -> Instance:
        total = self.instances.batch_size
        if self.shuffle:
            order = torch.randperm(
                total, generator=torch_generator(derive_seed(self.seed, "shuffle", epoch))
            )
        else:
            order = torch.arange(total)
        rows = order[index * self.batch_size : (index + 1) * self.batch_size]
        return self.instances.select(rows.sort().values if not self.shuffle else rows)


class ShardedTrainingData:
    """Training batches streamed from a sharded data set, shuffled per epoch, bounded memory.

    Epoch ``e`` visits the shards in a seeded random order and the rows of each shard in a
    seeded random order; batch ``i`` is rows ``[i * batch_size, (i + 1) * batch_size)`` of that
    sequence. The row order is a pure function of ``(seed, epoch)``, so ``batch(epoch, index)``
    is a pure function of ``(seed, epoch, index)`` whatever was read before (a resumed run sees
    the same batches). A batch spans at most two shards when ``batch_size`` is at most a
    shard's size; the last ``cache_shards`` shards read stay in memory, so reading batches in
    order loads each shard once per epoch.

    Satisfies :class:`TrainingData`.

    Args:
        root: data set folder (local path or URI), or a path inside ``filesystem``.
        batch_size: instances per batch B.
        seed: shuffle seed.
        filesystem: optional ``pyarrow.fs.FileSystem`` (e.g. an ``S3FileSystem``).
        shuffle: False keeps file order (shard by shard, row by row) every epoch.
        cache_shards: shards kept in memory (>= 1; 2 avoids re-reading at shard boundaries).
    """

    def __init__(
        self,
        root: str,
        batch_size: int,
        seed: int,
        *,
        filesystem: pafs.FileSystem | None = None,
        shuffle: bool = True,
        cache_shards: int = 2,
    ) -> None:
        if batch_size < 1 or cache_shards < 1:
            raise ValueError(
                f"batch_size and cache_shards must be >= 1, got {batch_size}, {cache_shards}"
            )
        self.root = root
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self._fs, self._path = resolve_filesystem(root, filesystem)
        self._entries = shard_entries(root, self._fs, self._path)
        self._rows = np.array([e.rows for e in self._entries], dtype=np.int64)
        self.num_instances = int(self._rows.sum())
        if batch_size > self.num_instances:
            raise ValueError(f"batch_size {batch_size} > {self.num_instances} instances in {root}")
        self.batches_per_epoch = self.num_instances // batch_size
        self._cache_size = cache_shards
        self._cache: OrderedDict[int, Instance] = OrderedDict()

    def _shard(self, index: int) -> Instance:
        if index in self._cache:
            self._cache.move_to_end(index)
            return self._cache[index]
        instance = load_shard(self.root, self._fs, self._path, self._entries[index])
        self._cache[index] = instance
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return instance

    def _shard_order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(len(self._entries))
        gen = torch_generator(derive_seed(self.seed, "shard-order", epoch))
        return torch.randperm(len(self._entries), generator=gen).numpy()

    def _row_order(self, epoch: int, shard: int) -> torch.Tensor:
        rows = int(self._rows[shard])
        if not self.shuffle:
            return torch.arange(rows)
        gen = torch_generator(derive_seed(self.seed, "row-order", epoch, shard))
        return torch.randperm(rows, generator=gen)

    def batch(self, epoch: int, index: int) -> Instance:
        """Batch ``index`` (0 <= index < batches_per_epoch) of epoch ``epoch``."""
        if not 0 <= index < self.batches_per_epoch:
            raise IndexError(f"batch index {index} outside [0, {self.batches_per_epoch})")
        order = self._shard_order(epoch)
        ends = np.cumsum(self._rows[order])
        start, stop = index * self.batch_size, (index + 1) * self.batch_size
        parts = []
        position = int(np.searchsorted(ends, start, side="right"))
        while start < stop:
            shard = int(order[position])
            shard_start = int(ends[position] - self._rows[shard])
            take = self._row_order(epoch, shard)[start - shard_start : stop - shard_start]
            parts.append(self._shard(shard).select(take))
            start += len(take)
            position += 1
        return parts[0] if len(parts) == 1 else Instance.concat(parts)
