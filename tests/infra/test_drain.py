"""infra/preemption/drain-trials.sh finds the processes of trials as linc's sweeps run them.

Its pattern once named Tune's ``ray::ImplicitFunc`` only, while a sweep's trial (its trainable
wrapped by ``tune.with_resources``) runs as ``ray::ResourceTrainable.train``: the preStop hook
and the spot watcher signalled no trial and returned at once."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from orchestration.experiment.ray_compat import tolerate_gone_checkpoints

DRAIN = Path(__file__).resolve().parents[2] / "infra" / "preemption" / "drain-trials.sh"


def _waiting_trial(config: dict) -> None:
    """A trial that names its process and waits for the test to end it."""
    folder = Path(config["folder"])
    (folder / "pid").write_text(str(os.getpid()))
    deadline = time.monotonic() + 120
    while not (folder / "done").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def test_the_drain_script_lists_a_sweep_trial_s_process(ray_session, tmp_path) -> None:
    from ray import tune

    trainable = tune.with_resources(tolerate_gone_checkpoints(_waiting_trial), {"cpu": 1})
    tuner = tune.Tuner(
        trainable,
        param_space={"folder": str(tmp_path)},
        run_config=tune.RunConfig(storage_path=str(tmp_path / "runs"), verbose=0),
    )
    fitting = threading.Thread(target=tuner.fit, daemon=True)
    fitting.start()
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        pid = (tmp_path / "pid").read_text()
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        assert title.startswith("ray::ResourceTrainable"), title  # what a sweep's trial runs as
        env = dict(os.environ, DRAIN_LIST_ONLY="1")
        listed = subprocess.run(
            ["sh", str(DRAIN)], env=env, capture_output=True, text=True, timeout=60, check=True
        ).stdout.split()
        assert pid in listed, (title, listed)
        assert str(os.getpid()) not in listed  # this test's own process is no trial
    finally:
        (tmp_path / "done").write_text("")
        fitting.join(timeout=120)
