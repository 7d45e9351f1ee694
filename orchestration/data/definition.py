"""What a generated data set is: its config (identity and how to run) and its shards' specs.

A data set is a pure function of the identity fields of :class:`DatagenConfig` (task, size,
count, shard_size, seed, split and the generator's constants); :mod:`orchestration.data.generation`
generates it with a pool of Ray actors. ``linc-generate`` builds the config from
``sweeps/conf/generate/generate.yaml`` with :func:`linc_core.utils.typed.build`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from linc_core.config import ProblemName
from linc_core.instances.datasets import shard_name
from linc_core.problems.generators import DEFAULT_ENVELOPE_CONFIG
from linc_core.utils.seeding import derive_seed
from linc_core.utils.typed import check_fields, require

SPLIT_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class DatagenConfig:
    """Everything a generation run needs. Identity fields define the data; the rest, how to run.

    Attributes:
        task: ``"tsp"``, ``"cvrp"`` or ``"cvrptw"`` (CVRPTW uses the envelope generator).
        size: customers per instance (cities for TSP); the depot is extra.
        count: instances in the set.
        shard_size: instances per shard (the last shard may be smaller).
        seed: base seed; shard seeds derive from it, the task, size, split and shard index.
        split: split name (``train``, ``val``, ``test``...); part of every shard seed.
        uri: output folder: local path or ``s3://bucket/prefix?endpoint_override=...``.
        workers: Ray actors generating in parallel.
        cpus_per_worker: CPUs Ray reserves per actor (fractions allowed, e.g. 0.5).
        num_cpus: CPUs of a local Ray started by the entry point (None: enough for the pool).
        max_actor_restarts: Ray restarts of a dead actor (its shard is then retried); 0 makes
            a dead actor fail the run (re-run to resume).
        storage_attempts: tries per storage operation before giving up.
        forward_aws_env: pass the driver's ``AWS_*`` variables to the actors on a cluster (on S3
            only; in Ray's memory, never its logs: ``orchestration.data.generation``); off, the
            default, each node's own AWS chain (its role, ``~/.aws``) serves its actors. The
            actors of a local Ray always get them.
        progress: show a progress bar (instances/s).
    """

    count: int
    shard_size: int
    task: ProblemName = "cvrptw"
    size: int = 100
    seed: int = 0
    split: str = "train"
    uri: str = "data/dataset"
    workers: int = 2
    cpus_per_worker: float = 1.0
    num_cpus: int | None = None
    max_actor_restarts: int = 1
    storage_attempts: int = 3
    forward_aws_env: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        check_fields(self)
        for name in ("count", "shard_size", "size", "workers", "storage_attempts"):
            require(getattr(self, name) >= 1, name, getattr(self, name), ">= 1")
        for name in ("seed", "max_actor_restarts"):
            require(getattr(self, name) >= 0, name, getattr(self, name), ">= 0")
        require(self.cpus_per_worker > 0, "cpus_per_worker", self.cpus_per_worker, "> 0")
        require(self.num_cpus is None or self.num_cpus >= 1, "num_cpus", self.num_cpus, ">= 1")
        require(bool(SPLIT_PATTERN.match(self.split)), "split", self.split, SPLIT_PATTERN.pattern)
        require(bool(self.uri.strip()), "uri", self.uri, "a folder or URI")

    @property
    def num_shards(self) -> int:
        return math.ceil(self.count / self.shard_size)

    @property
    def ray_cpus(self) -> int:
        """CPUs for a local Ray: ``num_cpus`` or enough to run every actor at once."""
        return self.num_cpus or max(1, math.ceil(self.workers * self.cpus_per_worker))

    def identity(self) -> dict[str, Any]:
        """The fields the data depends on (the manifest's ``generator`` entry)."""
        identity: dict[str, Any] = {
            "task": self.task,
            "size": self.size,
            "count": self.count,
            "shard_size": self.shard_size,
            "seed": self.seed,
            "split": self.split,
            "seed_rule": "derive_seed(seed, task, size, split, shard_index)",
        }
        if self.task == "cvrptw":
            identity["envelope"] = json.loads(
                json.dumps(dataclasses.asdict(DEFAULT_ENVELOPE_CONFIG))
            )
        return identity

    def identity_digest(self) -> str:
        """Short hash of :meth:`identity`, stamped into every shard's metadata."""
        text = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def shard_specs(self, expected: Mapping[int, str] | None = None) -> list[ShardSpec]:
        """One spec per shard; ``expected`` maps shard index to the manifest's sha256."""
        digest = self.identity_digest()
        specs = []
        for index in range(self.num_shards):
            first = index * self.shard_size
            rows = min(self.shard_size, self.count - first)
            seed = derive_seed(self.seed, self.task, self.size, self.split, index)
            metadata = {
                "dataset": digest,
                "split": self.split,
                "shard_index": index,
                "shard_seed": seed,
                "rows": rows,
            }
            specs.append(
                ShardSpec(
                    index=index,
                    file=shard_name(index),
                    task=self.task,
                    size=self.size,
                    rows=rows,
                    seed=seed,
                    first_row=first,
                    name_prefix=f"{self.task}{self.size}-{self.split}-",
                    metadata={k: str(v) for k, v in metadata.items()},
                    expected_sha256=(expected or {}).get(index),
                )
            )
        return specs


@dataclass(frozen=True)
class ShardSpec:
    """What one shard must contain. ``metadata`` is stamped into (and checked against) the file."""

    index: int
    file: str
    task: str
    size: int
    rows: int
    seed: int
    first_row: int
    name_prefix: str
    metadata: dict[str, str]
    expected_sha256: str | None = None


__all__ = ["SPLIT_PATTERN", "DatagenConfig", "ShardSpec"]
