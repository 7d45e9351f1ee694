"""A trial trained to a time budget and retried keeps the budget it had left.

``linc-ablation preset=smoke`` with a 3-second budget per trial and a fault after epoch 3: the
retried attempt resumes from the epoch-3 checkpoint with the seconds it had spent, so the
``train_seconds`` logged to MLflow keep growing across the restart, the trial ends once the
budget is spent (not 3 s after the restart), and the run's params carry the budget.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mlflow import MlflowClient

from linc_core.metrics import TRAIN_SECONDS
from tests.conftest import sweep_env

ROOT = Path(__file__).resolve().parents[3]
BUDGET_S = 3.0


def test_a_retried_trial_keeps_its_budget(tmp_path) -> None:
    env = sweep_env()
    command = [
        sys.executable,
        "-m",
        "sweeps.ablation",
        "preset=smoke",
        "ablation.variants=[full_linc]",
    ]
    command += [f"cluster.storage={tmp_path / 'runs'}", "fault.fail_at_epoch=3"]
    # CPU seconds: on cores shared with other work a 3-second wall budget once ran out by
    # epoch 3, before the restart this test is about
    command += [f"train.budget_minutes={BUDGET_S / 60}", "train.budget_clock=cpu"]
    command += ["train.epochs=null"]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "restarted from its last checkpoint (attempt 2)" in output
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("linc-smoke")
    (trial,) = [
        r
        for r in client.search_runs([experiment.experiment_id])
        if r.data.tags.get("kind") != "sweep"
    ]
    assert float(trial.data.params["train.budget_minutes"]) == BUDGET_S / 60
    spent = [
        m.value
        for m in sorted(
            client.get_metric_history(trial.info.run_id, TRAIN_SECONDS), key=lambda m: m.step
        )
    ]
    assert len(spent) > 4  # past the restart after epoch 3
    assert spent == sorted(spent) and len(set(spent)) == len(spent)  # one clock, never reset
    # it ends after the step that spent the budget: one tiny epoch past it at most
    assert BUDGET_S <= spent[-1] < BUDGET_S + 1.0
    assert spent[-2] < BUDGET_S
