"""Signals: SIGTERM to the sweep's driver, and to a trial's process."""

from __future__ import annotations

import os
import re
import signal
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
    run_tag,
    sqlite_uri,
    train_args,
)


def driver_sigterm(folder: Path, epochs: int = 30) -> Row:
    """SIGTERM to the sweep driver's process group mid-ablation (as ``timeout`` or a process
    manager sends it: a local Ray in that group used to die first, and the driver exited 1
    after 60 s with its runs RUNNING); then the same command again."""
    row = Row("SIGTERM to the driver")
    storage = folder / "runs"
    args = [*train_args(storage, epochs), "cluster.max_concurrent_trials=1"]
    first = Driver(folder, "sweeps.ablation", args)
    wait_for(lambda: reported(storage, ABLATION) >= 3, 600, "training to start", first)
    first.signal(signal.SIGTERM, group=True)
    began = time.monotonic()
    rc = first.wait(300)
    stopped = audit(sqlite_uri(storage), EXPERIMENT, ABLATION, epochs)
    row.notes.append(
        f"driver exited {rc} after {time.monotonic() - began:.1f} s, "
        f"{stopped.runs_running} run(s) RUNNING after the stop"
    )
    second = Driver(folder, "sweeps.ablation", args)
    rc = second.wait(1800)
    result = audit(sqlite_uri(storage), EXPERIMENT, ABLATION, epochs)
    # The console says it once, in linc's words: not Tune's "Tuner.restore(...)" advice nor
    # its list of trials without results (the pending ones), not linc's line twice.
    consoles = first.output(10**7) + second.output(10**7)
    foreign = [s for s in ("Tuner.restore", "Failed to fetch metrics") if s in consoles]
    said = first.output(10**7).count("stopping the sweep")
    row.notes.append(f"console: stop line {said}x, Tune's lines {foreign or 'none'}")
    outcome = "stopped gracefully (KILLED), re-run resumed and finished"
    checks = stopped.runs_running == 0 and not foreign and said == 1
    return finish_row(row, result, rc, outcome, checks)


def trial_sigterm(folder: Path, epochs: int = 60) -> Row:
    """SIGTERM to the trial's process: it checkpoints its current step, the retry resumes.

    ``epochs``: enough that the signal lands long before the trial's end (a smoke epoch takes
    a tenth of a second on an idle host)."""
    row = Row("SIGTERM to a trial")
    storage = folder / "runs"
    driver = Driver(folder, "sweeps.train", train_args(storage, epochs))
    wait_for(lambda: reported(storage, TRAIN) >= 1, 600, "training to start", driver)
    began = time.monotonic()
    wait_for(lambda: reported(storage, TRAIN) >= 2, 600, "a second epoch", driver)
    epoch_s = time.monotonic() - began
    (trial,) = wait_for(
        lambda: driver.descendants("Trainable.train") or driver.descendants("ImplicitFunc"),
        60,
        "the trial's process",
    )
    time.sleep(epoch_s / 2)  # half an epoch after one ended (on a loaded machine, too)
    os.kill(trial, signal.SIGTERM)
    rc = driver.wait(1800)
    log = driver.output(10**7)
    resumed = run_tag(sqlite_uri(storage), "resumed_from") or ""
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
    result = audit(sqlite_uri(storage), EXPERIMENT, TRAIN, epochs)
    return finish_row(row, result, rc, "checkpointed, retried, finished", current)


__all__ = ["driver_sigterm", "trial_sigterm"]
