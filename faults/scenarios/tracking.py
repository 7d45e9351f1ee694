"""Faults of the tracking store: an outage during a sweep, a store that never answers, many
trials writing the embedded SQLite store at once."""

from __future__ import annotations

import re
import time
from pathlib import Path

from faults.harness import (
    Driver,
    Row,
    audit,
    reported,
    wait_for,
)
from faults.scenarios.common import (
    ABLATION,
    EXPERIMENT,
    TRAIN,
    finish_row,
    refusal_row,
    sqlite_uri,
    train_args,
)
from faults.servers import (
    LOOPBACK,
    MlflowServer,
    free_port,
    listening_addresses,
    non_loopback,
)


def tracking_down(folder: Path, seconds: float, epochs: int = 100) -> Row:
    """The MLflow server stops in the middle of training and comes back ``seconds`` later."""
    row = Row(f"tracking server down {seconds:.0f} s")
    with MlflowServer(folder / "mlflow") as server:
        storage = folder / "runs"
        driver = Driver(
            folder, "sweeps.train", train_args(storage, epochs, f"tracking.uri={server.uri}")
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
        return finish_row(row, result, rc, "trial finished", warnings >= 1 and not exposed)


def tracking_unreachable(folder: Path) -> Row:
    """``tracking.uri`` names a port nothing listens on."""
    row = Row("tracking store unreachable at start")
    uri = f"http://{LOOPBACK}:{free_port()}"
    storage = folder / "runs"
    driver = Driver(folder, "sweeps.train", train_args(storage, 2, f"tracking.uri={uri}"))
    return refusal_row(row, driver, f"tracking.uri: the store {uri} does not answer", storage)


def concurrent_sqlite(folder: Path, trials: int = 8, epochs: int = 6) -> Row:
    """``trials`` trials at once (one variant, as many seeds) on the default embedded SQLite
    store: no "database is locked" reaches a trial, every epoch lands once."""
    row = Row(f"{trials} trials writing SQLite at once")
    storage = folder / "runs"
    seeds = ",".join(str(seed) for seed in range(1, trials + 1))
    args = train_args(
        storage,
        epochs,
        "ablation.variants=[full_linc]",
        f"ablation.seeds=[{seeds}]",
        f"cluster.num_cpus={trials}",
        f"cluster.max_concurrent_trials={trials}",
        "cluster.memory_per_trial_gb=0",
    )
    driver = Driver(folder, "sweeps.ablation", args)
    rc = driver.wait(1800)
    log = driver.output(10**8)
    errors = " ".join(p.read_text() for p in storage.glob(f"{ABLATION}/*/error.txt"))
    locked = (log + errors).count("database is locked")
    started = len(re.findall(r": started \(trial ", log))
    row.notes.append(f"trials started: {started}; 'database is locked' seen: {locked}")
    result = audit(sqlite_uri(storage), EXPERIMENT, ABLATION, epochs)
    checks = locked == 0 and result.trials == trials
    return finish_row(row, result, rc, f"{trials} trials finished on one SQLite store", checks)


__all__ = ["concurrent_sqlite", "tracking_down", "tracking_unreachable"]
