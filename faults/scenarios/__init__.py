"""The fault matrix: one function per fault, each returning its :class:`~faults.harness.Row`.

Every scenario runs the real entry point in its own process (with its own local Ray on
127.0.0.1, or joined to a loopback cluster of Ray's ``cluster_utils``), injects one fault and
reads the outcome from the tracking store. A row passes when its trials finished with no epoch
metric lost or logged twice and no run left RUNNING, or when the command refused at once with
one line (exit 2) and created nothing.

Scenarios by what fails: ``tracking`` (the store: down, sick, failing over, many writers),
``signals`` (SIGTERM to a driver or a trial), ``storage`` (checkpoints, folders, a sweep
submitted twice, S3 killed or throttling), ``disk`` (the storage filling up), ``nodes`` (Ray
nodes, workers, the memory monitor, a hung trial); ``common`` holds what they share.
``.ci/run`` runs every row after the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from faults.harness import Row
from faults.scenarios.disk import storage_full
from faults.scenarios.nodes import ddp_worker_killed, hung_trial, memory_monitor, node_killed
from faults.scenarios.signals import driver_sigterm, trial_sigterm
from faults.scenarios.storage import (
    checkpoint_truncated,
    s3_driver_killed,
    s3_throttling,
    storage_not_writable,
    sweep_moved,
    sweep_submitted_twice,
)
from faults.scenarios.tracking import (
    concurrent_sqlite,
    tracking_database_failover,
    tracking_down,
    tracking_sick,
    tracking_unreachable,
)

MATRIX: dict[str, Callable[[Path], Row]] = {
    "tracking-30s": lambda folder: tracking_down(folder, 30),
    "tracking-5min": lambda folder: tracking_down(folder, 300),
    "driver-sigterm": driver_sigterm,
    "trial-sigterm": trial_sigterm,
    "checkpoint-truncated": checkpoint_truncated,
    "storage-not-writable": storage_not_writable,
    "tracking-unreachable": tracking_unreachable,
    "sweep-moved": sweep_moved,
    "node-killed": node_killed,
    "no-node-left": lambda folder: node_killed(folder, pending_timeout=True),
    "ddp-worker-killed": ddp_worker_killed,
    "s3-driver-killed": s3_driver_killed,
    "memory-monitor": memory_monitor,
    "hung-trial": hung_trial,
    "concurrent-sqlite": concurrent_sqlite,
    "sweep-submitted-twice": sweep_submitted_twice,
    "tracking-sick": tracking_sick,
    "tracking-db-failover": tracking_database_failover,
    "s3-throttling": s3_throttling,
    "storage-full": storage_full,
}


__all__ = ["MATRIX"]
