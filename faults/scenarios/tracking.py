"""Faults of the tracking store: an outage during a sweep, a store that never answers, a
server up but sick, its PostgreSQL failing over, many trials writing the embedded SQLite store
at once."""

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
from faults.postgres import PostgresServer
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
from faults.sick_proxy import SickProxy


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


def tracking_sick(folder: Path, epochs: int = 300) -> Row:
    """A proxy in front of ``mlflow server`` fails 30% of requests with 503 (half of them after
    the server did the work) and delays 10% by 3 s, from the first epoch to the sweep's end:
    every epoch's metrics land exactly once."""
    row = Row("tracking server sick (503s, slow answers)")
    with MlflowServer(folder / "mlflow") as server:
        body = b'{"error_code": "TEMPORARILY_UNAVAILABLE", "message": "sick proxy"}'
        proxy = SickProxy(
            server.port,
            fail_share=0.3,
            body=body,
            content_type="application/json",
            delay_share=0.1,
            delay_s=3.0,
            seed=1,
        ).start()
        try:
            storage = folder / "runs"
            uri = f"http://{proxy.address}"
            driver = Driver(
                folder, "sweeps.train", train_args(storage, epochs, f"tracking.uri={uri}")
            )
            wait_for(lambda: reported(storage, TRAIN) >= 1, 600, "training to start", driver)
            proxy.sick = True
            began = time.monotonic()
            rc = driver.wait(1800)
            sick_s = time.monotonic() - began
            proxy.sick = False
        finally:
            proxy.stop()
        counts = proxy.counts
        row.notes.append(
            f"sick for {sick_s:.0f} s: {counts['failed_before'] + counts['failed_after']} "
            f"requests answered 503 ({counts['failed_after']} after the server did them), "
            f"{counts['delayed']} delayed, {counts['passed']} passed"
        )
        result = audit(server.uri, EXPERIMENT, TRAIN, epochs)
        faulted = counts["failed_after"] > 0 and counts["delayed"] > 0
        return finish_row(row, result, rc, "every epoch logged once", faulted)


def tracking_database_failover(folder: Path, epochs: int = 200, down_s: float = 5.0) -> Row:
    """``mlflow server`` backed by PostgreSQL (a throw-away cluster on 127.0.0.1, as
    ``infra/mlflow`` puts RDS behind the server); the database is restarted mid-sweep, down
    ``down_s`` seconds, as a managed database's failover: the server and the trial carry on,
    nothing is lost or logged twice."""
    row = Row("tracking database failover (PostgreSQL)")
    database = PostgresServer().start()
    try:
        with MlflowServer(folder / "mlflow", backend=database.url) as server:
            storage = folder / "runs"
            args = train_args(storage, epochs, f"tracking.uri={server.uri}")
            driver = Driver(folder, "sweeps.train", args)
            wait_for(lambda: reported(storage, TRAIN) >= 3, 600, "training to start", driver)
            at_epoch = reported(storage, TRAIN) + 1
            database.restart(down_s)
            rc = driver.wait(1800)
            carried_on = server.process is not None and server.process.poll() is None
            carried_on = carried_on and server.healthy()
            log = (server.folder / "server.log").read_text(errors="replace")
            answered_500 = len(re.findall(r'" 500 ', log))
            database_log = (database.folder / "log").read_text(errors="replace")
            restarted = database_log.count("database system is ready to accept connections") == 2
            row.notes.append(
                f"PostgreSQL restarted (its log: shut down and ready again: {restarted}) at "
                f"about epoch {at_epoch}, down {down_s:.0f} s; the server answered 500 "
                f"{answered_500} times meanwhile; still serving: {carried_on}"
            )
            result = audit(server.uri, EXPERIMENT, TRAIN, epochs)
            outcome = "server and trial carried on, every epoch logged once"
            return finish_row(row, result, rc, outcome, carried_on and restarted)
    finally:
        database.stop()


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


__all__ = [
    "concurrent_sqlite",
    "tracking_database_failover",
    "tracking_down",
    "tracking_sick",
    "tracking_unreachable",
]
