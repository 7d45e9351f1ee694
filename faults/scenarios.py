"""The fault matrix: one function per fault, each returning its :class:`~faults.harness.Row`.

Every scenario runs the real entry point in its own process (with its own local Ray on
127.0.0.1, or joined to a loopback cluster of Ray's ``cluster_utils``), injects one fault and
reads the outcome from the tracking store. A row passes when its trials finished with no epoch
metric lost or logged twice and no run left RUNNING, or when the command refused at once with
one line (exit 2) and created nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

from faults.harness import (
    SWEEP,
    Audit,
    Driver,
    Row,
    audit,
    checkpoints,
    one_line_error,
    reported,
    wait_for,
)
from faults.servers import (
    LOOPBACK,
    MlflowServer,
    S3Server,
    free_port,
    listening_addresses,
    non_loopback,
)
from orchestration.tracking import ensure_experiment

TRAIN = "train-full_linc-cvrptw-seed1234"  # linc-tune's experiment name for the SWEEP config
ABLATION = "ablation-smoke"
EXPERIMENT = "faults"


def _sqlite(storage: Path) -> str:
    return f"sqlite:///{storage / 'mlflow.db'}"


def _train_args(storage: Path, epochs: int, *extra: str) -> list[str]:
    return [*SWEEP, f"train.epochs={epochs}", f"cluster.storage={storage}", *extra]


def _finish(row: Row, result: Audit, rc: int, outcome: str, checks: bool = True) -> Row:
    """The row of a sweep that should have finished; ``checks``: the scenario's own checks."""
    row.metrics_lost, row.duplicated_steps = result.metrics_lost, result.duplicated_steps
    row.runs_running = result.runs_running
    finished = rc == 0 and result.trials > 0 and result.finished == result.trials
    row.ok = finished and result.clean and checks
    row.outcome = outcome if finished else f"NOT FINISHED (exit {rc}, {result})"
    if finished and not checks:
        row.outcome += " (but see the notes)"
    return row


def tracking_down(folder: Path, seconds: float, epochs: int = 100) -> Row:
    """The MLflow server stops in the middle of training and comes back ``seconds`` later."""
    row = Row(f"tracking server down {seconds:.0f} s")
    with MlflowServer(folder / "mlflow") as server:
        storage = folder / "runs"
        driver = Driver(
            folder, "sweeps.train", _train_args(storage, epochs, f"tracking.uri={server.uri}")
        )
        wait_for(lambda: reported(storage, TRAIN) >= 3, 600, "training to start", driver)
        server.stop()
        time.sleep(seconds)
        server.start()
        exposed = non_loopback(listening_addresses(server.pids()))
        rc = driver.wait(1800)
        log = driver.output(10**7)
        warnings = log.count("unreachable (")
        row.notes.append(f"server sockets off loopback: {sorted(exposed) or 'none'}")
        row.notes.append(f"outage warnings: {warnings}; recovered: {'answers again' in log}")
        result = audit(server.uri, EXPERIMENT, TRAIN, epochs)
        return _finish(row, result, rc, "trial finished", warnings >= 1 and not exposed)


def driver_sigterm(folder: Path, epochs: int = 30) -> Row:
    """SIGTERM to the sweep driver mid-ablation; then the same command again."""
    row = Row("SIGTERM to the driver")
    storage = folder / "runs"
    args = [*_train_args(storage, epochs), "cluster.max_concurrent_trials=1"]
    first = Driver(folder, "sweeps.ablation", args)
    wait_for(lambda: reported(storage, ABLATION) >= 3, 600, "training to start", first)
    first.signal(signal.SIGTERM)
    began = time.monotonic()
    rc = first.wait(300)
    stopped = audit(_sqlite(storage), EXPERIMENT, ABLATION, epochs)
    row.notes.append(
        f"driver exited {rc} after {time.monotonic() - began:.1f} s, "
        f"{stopped.runs_running} run(s) RUNNING after the stop"
    )
    second = Driver(folder, "sweeps.ablation", args)
    rc = second.wait(1800)
    result = audit(_sqlite(storage), EXPERIMENT, ABLATION, epochs)
    outcome = "stopped gracefully (KILLED), re-run resumed and finished"
    return _finish(row, result, rc, outcome, stopped.runs_running == 0)


def trial_sigterm(folder: Path, epochs: int = 30) -> Row:
    """SIGTERM to the trial's process: it checkpoints its current step, the retry resumes."""
    row = Row("SIGTERM to a trial")
    storage = folder / "runs"
    driver = Driver(folder, "sweeps.train", _train_args(storage, epochs))
    wait_for(lambda: reported(storage, TRAIN) >= 1, 600, "training to start", driver)
    began = time.monotonic()
    wait_for(lambda: reported(storage, TRAIN) >= 2, 600, "a second epoch", driver)
    epoch_s = time.monotonic() - began
    (trial,) = wait_for(lambda: driver.descendants("ImplicitFunc"), 60, "the trial's process")
    time.sleep(epoch_s / 2)  # half an epoch after one ended (on a loaded machine, too)
    os.kill(trial, signal.SIGTERM)
    rc = driver.wait(1800)
    log = driver.output(10**7)
    resumed = _tag(_sqlite(storage), "resumed_from") or ""
    # The retry must start from the state the trial stopped at: its preemption checkpoint, or,
    # when the SIGTERM came during an epoch's report after Tune had stored its checkpoint, a
    # Tune checkpoint the driver never received (numbered from the last epoch the driver had
    # received and printed before the failure). An older one would mean training was redone.
    printed = re.findall(r": epoch (\d+)/", log.split("FAILED (attempt 1", 1)[0])
    seen = max(map(int, printed), default=0)
    # Ray's worker can itself crash on the signal (a failed RAY_CHECK while storing a task's
    # return, ray-project/ray#47759) before any Python handler runs; then the last checkpoint
    # the driver received (epoch ``seen``, Tune's ``checkpoint_<seen - 1>``) is the newest state.
    ray_crashed = "Check failed: objects_valid" in log
    tune_index = re.search(r"/checkpoint_(\d+) \(step", resumed)
    oldest_allowed = seen - 1 if ray_crashed else seen
    current = "preempted_" in resumed or (
        tune_index is not None and int(tune_index[1]) >= oldest_allowed
    )
    row.notes.append(
        f"checkpointed on SIGTERM: {'checkpointing the current step' in log}; "
        f"resumed from {resumed or 'nothing'}; the driver had received epoch {seen}"
        + ("; Ray's worker crashed on the signal (RAY_CHECK objects_valid)" if ray_crashed else "")
    )
    result = audit(_sqlite(storage), EXPERIMENT, TRAIN, epochs)
    return _finish(row, result, rc, "checkpointed, retried, finished", current)


def checkpoint_truncated(folder: Path, epochs: int = 30) -> Row:
    """The newest checkpoint is cut in half while the sweep is down; the re-run falls back."""
    row = Row("newest checkpoint truncated")
    storage = folder / "runs"
    first = Driver(folder, "sweeps.train", _train_args(storage, epochs))
    wait_for(lambda: reported(storage, TRAIN) >= 3, 600, "training to start", first)
    first.kill()
    newest = checkpoints(storage, TRAIN)[-1] / "latest.pt"
    with newest.open("r+b") as handle:
        handle.truncate(newest.stat().st_size // 2)
    second = Driver(folder, "sweeps.train", _train_args(storage, epochs))
    rc = second.wait(1800)
    log = second.output(10**7)
    named = f"{newest}: truncated" in log
    row.notes.append(f"warning names {newest.parent.name} and says truncated: {named}")
    result = audit(_sqlite(storage), EXPERIMENT, TRAIN, epochs)
    return _finish(row, result, rc, "fell back to the intact one, finished", named)


def _refusal(row: Row, driver: Driver, expected: str, storage: Path) -> Row:
    """A command that must refuse at once: exit 2, one line naming the setting and the place,
    no Ray started, nothing created under the storage folder (no store, no run, no state)."""
    rc = driver.wait(300)
    output = driver.output()
    line = one_line_error(output)
    no_ray = "Started a local Ray" not in output and "ray.init" not in output
    created = sorted(p.name for p in storage.rglob("*")) if storage.exists() else []
    row.ok = rc == 2 and line is not None and expected in line and no_ray and not created
    row.outcome = f"exit {rc}: {line}" if line else f"exit {rc}: {output[-300:]!r}"
    row.metrics_lost, row.duplicated_steps, row.runs_running = 0, 0, 0
    row.notes.append(f"Ray started: {not no_ray}; created in the storage: {created or 'none'}")
    return row


def storage_not_writable(folder: Path) -> Row:
    """``cluster.storage`` inside a read-only folder (root's override of permissions dropped)."""
    row = Row("storage not writable")
    locked = folder / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        driver = Driver(
            folder, "sweeps.train", _train_args(locked / "runs", 2), drop_file_override=True
        )
        expected = f"cluster.storage: cannot write to {locked / 'runs'}"
        return _refusal(row, driver, expected, locked / "runs")
    finally:
        locked.chmod(0o755)


def tracking_unreachable(folder: Path) -> Row:
    """``tracking.uri`` names a port nothing listens on."""
    row = Row("tracking store unreachable at start")
    uri = f"http://{LOOPBACK}:{free_port()}"
    storage = folder / "runs"
    driver = Driver(folder, "sweeps.train", _train_args(storage, 2, f"tracking.uri={uri}"))
    return _refusal(row, driver, f"tracking.uri: the store {uri} does not answer", storage)


def sweep_moved(folder: Path, epochs: int = 20) -> Row:
    """An ablation stopped, its folder (with its SQLite store) moved, the command re-run there;
    then a copy of the finished sweep re-run against the same store."""
    row = Row("sweep folder moved")
    storage, moved = folder / "runs", folder / "moved"
    args = ["cluster.max_concurrent_trials=1"]
    first = Driver(folder, "sweeps.ablation", _train_args(storage, epochs, *args))
    wait_for(lambda: reported(storage, ABLATION) >= 3, 600, "training to start", first)
    first.signal(signal.SIGTERM)
    first.wait(300)
    shutil.move(storage, moved)
    second = Driver(folder, "sweeps.ablation", _train_args(moved, epochs, *args))
    rc = second.wait(1800)
    result = audit(_sqlite(moved), EXPERIMENT, ABLATION, epochs)
    row.notes.append(f"old folder recreated: {storage.exists()}")
    # A copy of the finished sweep, pointed at the moved store: a parent run of its own.
    copy = folder / "copy"
    shutil.copytree(moved / ABLATION, copy / ABLATION)
    parents = _parents(_sqlite(moved))
    third = Driver(
        folder,
        "sweeps.ablation",
        _train_args(copy, epochs, *args, f"tracking.uri={_sqlite(moved)}"),
    )
    copy_rc = third.wait(900)
    after = _parents(_sqlite(moved))
    untouched = all(after.get(run) == status for run, status in parents.items())
    row.notes.append(
        f"copy re-run exit {copy_rc}, new parent run: {len(after) == len(parents) + 1}, "
        f"original runs untouched: {untouched}"
    )
    checks = not storage.exists() and copy_rc == 0 and untouched
    outcome = "resumed in the moved folder; a copy got its own runs"
    return _finish(row, result, rc, outcome, checks)


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
        driver = Driver(folder, "sweeps.train", _train_args(storage, epochs, *extra))
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
        result = audit(_sqlite(storage), EXPERIMENT, TRAIN, epochs)
        row.notes.append(f"sockets off loopback: {sorted(exposed) or 'none'}")
        if pending_timeout:
            line = [x for x in driver.output().splitlines() if "pending_timeout_s" in x]
            row.outcome = line[-1][:200] if line else f"exit {rc}, no pending-timeout error"
            row.ok = rc == 1 and bool(line) and result.runs_running == 0 and not exposed
            row.runs_running = result.runs_running  # metrics: the trial stopped half-way
            row.notes.append(f"exit {rc}; the same command resumes once a node is back")
            return row
        moved = _tag(_sqlite(storage), "ray_node") == second.node_id
        resumed = _tag(_sqlite(storage), "resumed_from")
        moved = moved and resumed is not None
        row.notes.append(f"node tag names the new node: {moved}; resumed from {resumed}")
        outcome = "trial moved to the new node, finished"
        return _finish(row, result, rc, outcome, moved and not exposed)
    finally:
        cluster.shutdown()


def ddp_worker_killed(folder: Path, epochs: int = 20) -> Row:
    """A data-parallel trial (2 Ray Train workers): one worker process is SIGKILLed."""
    row = Row("DDP worker killed")
    storage = folder / "runs"
    extra = ["cluster.num_workers=2", "cluster.cpus_per_worker=1"]
    driver = Driver(folder, "sweeps.train", _train_args(storage, epochs, *extra))
    wait_for(lambda: reported(storage, TRAIN) >= 3, 900, "training to start", driver)
    workers = wait_for(lambda: driver.descendants("RayTrainWorker"), 60, "the Train workers")
    os.kill(workers[-1], signal.SIGKILL)
    rc = driver.wait(1800)
    result = audit(_sqlite(storage), EXPERIMENT, TRAIN, epochs)
    return _finish(row, result, rc, "Train restarted from its checkpoint, finished")


def s3_driver_killed(folder: Path, epochs: int = 30) -> Row:
    """Tune storage on the S3 server; the driver (and its Ray) SIGKILLed; resumed from S3."""
    row = Row("S3 storage, driver killed")
    server = S3Server().start()
    try:
        # quoted: Hydra's override grammar reads `=` and `&` of the URI's query otherwise
        storage, store = f"'{server.uri('tune')}'", _sqlite(folder / "tracking")
        (folder / "tracking").mkdir()
        args = [
            *SWEEP,
            f"train.epochs={epochs}",
            f"cluster.storage={storage}",
            f"tracking.uri={store}",
        ]
        # the store's tables exist before this process reads it while the driver writes to it
        ensure_experiment(store, EXPERIMENT)
        first = Driver(folder, "sweeps.train", args)
        wait_for(lambda: _epochs_logged(store) >= 3, 600, "training to start", first)
        exposed = non_loopback(listening_addresses(server.pids()))
        first.kill()
        second = Driver(folder, "sweeps.train", args)
        rc = second.wait(1800)
        resumed = _tag(store, "resumed_from")
        row.notes.append(f"resumed from {resumed}; S3 sockets off loopback: {exposed or 'none'}")
        from_s3 = bool(resumed and resumed.startswith("s3://")) and not exposed
        result = audit(store, EXPERIMENT, TRAIN, epochs)
        return _finish(row, result, rc, "resumed from S3, finished", from_s3)
    finally:
        server.stop()


def memory_monitor(folder: Path, epochs: int = 20, spike_gb: float = 8.0) -> Row:
    """Ray's memory monitor, set just above what the machine uses now, kills the trial that
    allocates ``spike_gb`` after its first epoch; the retry (no spike) finishes."""
    row = Row("trial killed by the memory monitor")
    total, available = _meminfo()
    # above what the machine uses now plus this sweep's Ray and trial (about 2.5 GB), below
    # that plus the spike: 2.5 GB of margin for other jobs growing, 5.5 GB for them shrinking
    threshold = min(0.98, (total - available + (spike_gb - 3.0) * (1 << 30)) / total)
    env = {"RAY_memory_usage_threshold": f"{threshold:.3f}", "RAY_memory_monitor_refresh_ms": "100"}
    storage = folder / "runs"
    args = _train_args(
        storage, epochs, f"fault.memory_spike_gb={spike_gb}", "cluster.max_failures=3"
    )
    driver = Driver(folder, "sweeps.train", args, env=env)
    rc = driver.wait(1800)
    # the console prints one line per failure; Tune keeps the whole error beside the trial
    errors = " ".join(p.read_text() for p in storage.glob(f"{TRAIN}/*/error.txt"))
    killed = "killed due to the node running low on memory" in errors
    row.notes.append(f"threshold {threshold:.3f}; killed by the monitor: {killed}")
    result = audit(_sqlite(storage), EXPERIMENT, TRAIN, epochs)
    outcome = "failed with the memory reason, retried, finished"
    return _finish(row, result, rc, outcome, killed)


def _meminfo() -> tuple[int, int]:
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, amount = line.split(":")
        values[name] = int(amount.split()[0]) * 1024
    return values["MemTotal"], values["MemAvailable"]


def _tag(uri: str, key: str) -> str | None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    values = [r.data.tags.get(key) for r in runs if "variant" in r.data.tags]
    return values[0] if values else None


def _parents(uri: str) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    return {r.info.run_id: r.info.status for r in runs if r.data.tags.get("kind") == "sweep"}


def _epochs_logged(uri: str) -> int:
    """Epochs the sweep's trial has logged (0 while the driver is still creating the store)."""
    from mlflow.tracking import MlflowClient

    try:
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(EXPERIMENT)
        runs = client.search_runs([experiment.experiment_id]) if experiment else []
        trials = [r for r in runs if "variant" in r.data.tags]
        return len(client.get_metric_history(trials[0].info.run_id, "epoch")) if trials else 0
    except Exception:  # noqa: BLE001 - the store's tables are being created by the driver
        return 0


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
}

__all__ = ["MATRIX"]
