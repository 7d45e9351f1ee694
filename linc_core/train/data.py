"""Training data sources: batches as a pure function of (seed, epoch, batch index).

No random state is carried between batches, so a resumed run sees exactly the batches an
uninterrupted one would. ``GeneratedData`` samples fresh instances per batch (the paper's
training); ``FixedData`` cycles a fixed set shuffled per epoch (the ablation protocol trains
on the 56 truncated Solomon instances).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from linc_core.instances import Instance
from linc_core.problems.generators import (
    EnvelopeConfig,
    generate_cvrp,
    generate_cvrptw_envelope,
    generate_tsp,
)
from linc_core.seeding import derive_seed, torch_generator


class TrainingData(Protocol):
    batches_per_epoch: int

    def batch(self, epoch: int, index: int) -> Instance: ...


def generate(
    problem: str, batch: int, num_customers: int, seed: int, envelope: EnvelopeConfig | None = None
) -> Instance:
    """A seeded batch from the problem's training generator."""
    if problem == "cvrptw":
        return generate_cvrptw_envelope(batch, num_customers, seed, envelope or EnvelopeConfig())
    if problem == "cvrp":
        return generate_cvrp(batch, num_customers, seed)
    if problem == "tsp":
        return generate_tsp(batch, num_customers, seed)
    raise ValueError(f"unknown problem {problem!r}")


@dataclass(frozen=True)
class GeneratedData:
    """Fresh instances every batch (``instances_per_epoch // batch_size`` batches an epoch)."""

    problem: str
    num_customers: int
    batch_size: int
    instances_per_epoch: int
    seed: int
    envelope: EnvelopeConfig = field(default_factory=EnvelopeConfig)

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
