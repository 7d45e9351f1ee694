"""Faults of the tracking store: an outage during a sweep, a store that never answers."""

from __future__ import annotations

import time
from pathlib import Path

from faults.harness import (
    Driver,
    Row,
    audit,
    reported,
    wait_for,
)
from faults.scenarios.common import EXPERIMENT, TRAIN, finish_row, refusal_row, train_args
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


__all__ = ["tracking_down", "tracking_unreachable"]
