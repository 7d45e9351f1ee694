"""Faults of nodes and processes: a node lost (and none left), a data-parallel worker
killed, a trial killed by Ray's memory monitor, a trial hung without dying."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from faults.harness import (
    Driver,
    Row,
    audit,
    reported,
    wait_for,
)
from faults.scenarios.common import (
    EXPERIMENT,
    TRAIN,
    finish_row,
    meminfo,
    run_tag,
    sqlite_uri,
    train_args,
)
from faults.servers import (
    listening_addresses,
    non_loopback,
)


def node_killed(folder: Path, epochs: int = 60, pending_timeout: bool = False) -> Row:
    """A loopback cluster (head with no CPU, one worker node); the worker's raylet is killed
    while the trial trains on it, after a second worker joined (or, with ``pending_timeout``,
    with none to take over)."""
    from ray.cluster_utils import Cluster

    from faults.servers import process_tree

    row = Row("no node left (pending timeout)" if pending_timeout else "worker node killed")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        first = cluster.add_node(num_cpus=2)
        storage = folder / "runs"
        extra = [f"cluster.address={cluster.address}", "cluster.pending_timeout_s=30"]
        driver = Driver(folder, "sweeps.train", train_args(storage, epochs, *extra))
        wait_for(lambda: reported(storage, TRAIN) >= 3, 600, "training to start", driver)
        second = None if pending_timeout else cluster.add_node(num_cpus=2)
        pids = set()
        for node in [cluster.head_node, first, second]:
            for infos in node.all_processes.values() if node else ():
                for info in infos:
                    pids |= process_tree(info.process.pid)
        exposed = non_loopback(listening_addresses(pids))
        cluster.remove_node(first, allow_graceful=False)
        rc = driver.wait(1800)
        result = audit(sqlite_uri(storage), EXPERIMENT, TRAIN, epochs)
        row.notes.append(f"sockets off loopback: {sorted(exposed) or 'none'}")
        if pending_timeout:
            line = [x for x in driver.output().splitlines() if "pending_timeout_s" in x]
            row.outcome = line[-1][:200] if line else f"exit {rc}, no pending-timeout error"
            row.ok = rc == 1 and bool(line) and result.runs_running == 0 and not exposed
            row.runs_running = result.runs_running  # metrics: the trial stopped half-way
            row.notes.append(f"exit {rc}; the same command resumes once a node is back")
            return row
        moved = run_tag(sqlite_uri(storage), "ray_node") == second.node_id
        resumed = run_tag(sqlite_uri(storage), "resumed_from")
        moved = moved and resumed is not None
        row.notes.append(f"node tag names the new node: {moved}; resumed from {resumed}")
        outcome = "trial moved to the new node, finished"
        return finish_row(row, result, rc, outcome, moved and not exposed)
    finally:
        cluster.shutdown()


def ddp_worker_killed(folder: Path, epochs: int = 20) -> Row:
    """A data-parallel trial (2 Ray Train workers): one worker process is SIGKILLed."""
    row = Row("DDP worker killed")
    storage = folder / "runs"
    extra = ["cluster.num_workers=2", "cluster.cpus_per_worker=1"]
    driver = Driver(folder, "sweeps.train", train_args(storage, epochs, *extra))
    wait_for(lambda: reported(storage, TRAIN) >= 3, 900, "training to start", driver)
    workers = wait_for(lambda: driver.descendants("RayTrainWorker"), 60, "the Train workers")
    os.kill(workers[-1], signal.SIGKILL)
    rc = driver.wait(1800)
    result = audit(sqlite_uri(storage), EXPERIMENT, TRAIN, epochs)
    return finish_row(row, result, rc, "Train restarted from its checkpoint, finished")


def memory_monitor(folder: Path, epochs: int = 20, spike_gb: float = 8.0) -> Row:
    """Ray's memory monitor, set just above what the machine uses now, kills the trial that
    allocates ``spike_gb`` after its first epoch; the retry (no spike) finishes."""
    row = Row("trial killed by the memory monitor")
    total, available = meminfo()
    # above what the machine uses now plus this sweep's Ray and trial (about 2.5 GB), below
    # that plus the spike: 2.5 GB of margin for other jobs growing, 5.5 GB for them shrinking
    threshold = min(0.98, (total - available + (spike_gb - 3.0) * (1 << 30)) / total)
    env = {"RAY_memory_usage_threshold": f"{threshold:.3f}", "RAY_memory_monitor_refresh_ms": "100"}
    storage = folder / "runs"
    args = train_args(
        storage, epochs, f"fault.memory_spike_gb={spike_gb}", "cluster.max_failures=3"
    )
    driver = Driver(folder, "sweeps.train", args, env=env)
    rc = driver.wait(1800)
    # the console prints one line per failure; Tune keeps the whole error beside the trial
    errors = " ".join(p.read_text() for p in storage.glob(f"{TRAIN}/*/error.txt"))
    killed = "killed due to the node running low on memory" in errors
    row.notes.append(f"threshold {threshold:.3f}; killed by the monitor: {killed}")
    result = audit(sqlite_uri(storage), EXPERIMENT, TRAIN, epochs)
    outcome = "failed with the memory reason, retried, finished"
    return finish_row(row, result, rc, outcome, killed)


def hung_trial(folder: Path, epochs: int = 12, stall_at: int = 3, timeout_s: int = 10) -> Row:
    """A trial stops reporting after epoch ``stall_at`` (alive, sleeping: a stuck collective or
    a dead mount); ``cluster.stall_timeout_s`` ends it with one line naming it and the epoch,
    and the retry resumes from that epoch's checkpoint."""
    row = Row("hung trial (stall timeout)")
    storage = folder / "runs"
    args = train_args(
        storage, epochs, f"fault.stall_at_epoch={stall_at}", f"cluster.stall_timeout_s={timeout_s}"
    )
    driver = Driver(folder, "sweeps.train", args)
    rc = driver.wait(1800)
    log = driver.output(10**7)
    line = re.compile(
        rf"^\[\d+:\d\d\] full_linc seed=1234: stalled: no report for \d+ s after epoch "
        rf"{stall_at} \(cluster\.stall_timeout_s={timeout_s}\); ending trial \w+ to retry it "
        r"from its checkpoint$",
        re.MULTILINE,
    )
    named = len(line.findall(log)) == 1
    resumed = run_tag(sqlite_uri(storage), "resumed_from") or ""
    from_stall = f"/checkpoint_{stall_at - 1:06d} (step" in resumed
    row.notes.append(
        f"one stall line naming the trial and epoch {stall_at}: {named}; resumed from "
        f"{resumed.rsplit('/', 1)[-1] or 'nothing'}"
    )
    result = audit(sqlite_uri(storage), EXPERIMENT, TRAIN, epochs)
    outcome = "ended after the stall timeout, retried from its checkpoint, finished"
    return finish_row(row, result, rc, outcome, named and from_stall)


__all__ = ["ddp_worker_killed", "hung_trial", "memory_monitor", "node_killed"]
