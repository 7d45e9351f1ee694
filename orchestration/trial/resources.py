"""What a trial reserves (CPUs, GPUs, memory), and that its process can use what it reserved.

Ray schedules by declared resources and its memory monitor kills by use. A trial therefore
declares the memory it needs (Ray's ``memory`` resource): ``cluster.memory_per_trial_gb``, or
the estimate of its own plan (:func:`linc_core.runs.memory.estimate_run_memory`: model, batch,
rollouts, size, decoding), so Tune never starts trials side by side on a node they do not fit
together. Each trial's reservation is computed from that trial's own config (an ablation's
variants differ). A trial the memory monitor kills anyway is a failed trial (Ray's
``OutOfMemoryError``), retried per ``cluster.max_failures`` like any other failure. A trial
that reserves GPUs trains on the one Ray gives it (fractions share a GPU); in a process
without CUDA it stops at once, naming the settings (:func:`check_device`). What happens when no
node can place a trial is the driver's: :mod:`orchestration.experiment.callbacks`.

A CPU trial also stays within the memory it reserved as it trains: its heap grows between steps
past what its tensors hold (the packed widths leave holes: a trial of ``preset=cpu-repro``,
reserving 2.75 GiB then, held 1.9 GB after one minute and 2.4 GB after twelve), so after any step
that ends with the process holding more than its reservation less one step's rise, the
validation's decoding and an MLP scorer's tensors, the free heap is given back
(:func:`trial_heap_ceiling`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from ray import tune

from linc_core.runs.memory import estimate_run_memory, scorer_bytes, validation_bytes
from linc_core.runs.plan import RunPlan
from linc_core.train.memory_ceiling import HeapCeiling, heap_ceiling
from linc_core.utils.runtime import resident_bytes
from orchestration.config.platform import PlatformConfig
from orchestration.config.sections import ClusterSpec

GIB = 1 << 30
MEMORY_STEP = GIB // 4


def memory_bytes(cluster: ClusterSpec, run: RunPlan) -> int:
    """The memory one trial process (or one data-parallel worker) reserves: the estimate is
    rounded up to ``MEMORY_STEP``, so that variants of about the same size ask for the same
    resources (Tune reuses a finished trial's process only for an identical request)."""
    if cluster.memory_per_trial_gb is not None:
        return int(cluster.memory_per_trial_gb * GIB / cluster.num_workers)
    estimate = estimate_run_memory(run, workers=cluster.num_workers)
    return -(-estimate // MEMORY_STEP) * MEMORY_STEP


def trial_resources(cluster: ClusterSpec, run: RunPlan) -> dict[str, float]:
    """Tune resources of one trial (a data-parallel trial's workers reserve their own)."""
    if cluster.num_workers > 1:
        # the workers reserve their own resources; Tune refuses an all-zero request
        return {"cpu": 0.0, "memory": 1}
    resources = {"cpu": cluster.cpus_per_trial, "gpu": cluster.gpus_per_trial}
    memory = memory_bytes(cluster, run)
    return resources | ({"memory": memory} if memory else {}) | cluster.custom_resources


def worker_resources(cluster: ClusterSpec, run: RunPlan) -> dict[str, float]:
    """Ray resources of each data-parallel worker."""
    resources = {"CPU": cluster.cpus_per_worker}
    memory = memory_bytes(cluster, run)
    if memory:
        resources["memory"] = memory
    if cluster.gpus_per_worker:
        resources["GPU"] = cluster.gpus_per_worker
    return resources | cluster.custom_resources


# The most one training step was seen to add to a warm trial's peak resident memory: 103 MiB
# between samples 5 s apart (full_linc, preset=cpu-repro, one step of about 5 s an epoch, one
# thread, 14 minutes, 2026-11-29). The rest of a step's pages are the heap's own, kept free from
# the step before (tune_cpu_allocator); after a trim the step takes them afresh, within the
# estimate the trial reserved.
STEP_RISE_BYTES = GIB // 4


def trial_heap_ceiling(reserved_bytes: int, run: RunPlan) -> HeapCeiling | None:
    """The callback that holds a CPU trial's process (or data-parallel worker) within the
    ``reserved_bytes`` it reserved: after a step that ends above them less ``STEP_RISE_BYTES``,
    the validation decoding's memory and the ``mlp`` scorer's (whose tensors a step takes
    afresh: a naive_mlp trial at ``preset=cpu-repro`` rose by up to 681 MiB within 5 s between
    steps, its peak 2,368 MiB against 1.6-2.0 GB held after them), its free heap is given
    back; never below what the process holds now. None for a trial that reserves no memory, or
    trains on a GPU."""
    if not reserved_bytes or run.train.device != "cpu":
        return None
    resident = resident_bytes()
    headroom = STEP_RISE_BYTES + validation_bytes(run) + scorer_bytes(run)
    return HeapCeiling(heap_ceiling(int(reserved_bytes), resident + headroom, resident))


class TrialDeviceError(RuntimeError):
    """A trial whose training device is not there (a GPU it reserved, but no CUDA in its
    process); the message is one line naming the settings."""


def check_device(cluster: ClusterSpec, run: RunPlan, gpu_ids: list | None = None) -> None:
    """Refuse, in one line, a trial that is to train on CUDA in a process that has none.

    Ray makes the GPUs it gives a trial the only visible ones (``CUDA_VISIBLE_DEVICES``), so
    ``cuda`` is the trial's own GPU (shared when ``gpus_per_trial`` is a fraction).

    Raises:
        TrialDeviceError: ``train.device`` is CUDA and torch sees no CUDA device.
    """
    device = run.train.device
    if not device.startswith("cuda") or torch.cuda.is_available():
        return
    given = f"Ray gave it GPU {gpu_ids}" if gpu_ids else "Ray gave it no GPU"
    raise TrialDeviceError(
        f"train.device={device} (cluster.gpus_per_trial={cluster.gpus_per_trial:g}): this "
        f"trial's process sees no CUDA device ({given}; torch {torch.__version__}); reserve "
        "GPUs only on nodes with CUDA, or set train.device=cpu"
    )


def placement(trial_config: Mapping[str, Any]) -> tune.PlacementGroupFactory:
    """``tune.with_resources``' per-trial resources: from the trial's own config."""
    config = PlatformConfig.from_mapping(trial_config)
    spec = trial_resources(config.cluster, config.run)
    bundle = {"CPU": spec.pop("cpu"), "GPU": spec.pop("gpu", 0.0)} | spec
    return tune.PlacementGroupFactory([bundle])


__all__ = [
    "TrialDeviceError",
    "check_device",
    "GIB",
    "MEMORY_STEP",
    "STEP_RISE_BYTES",
    "memory_bytes",
    "placement",
    "trial_heap_ceiling",
    "trial_resources",
    "worker_resources",
]
