"""One tiny Ray Tune trial end to end: Tune metrics and checkpoint, one finished MLflow run."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from mlflow.tracking import MlflowClient

from linc_core.train.checkpoint import load_checkpoint
from orchestration.tracking import default_tracking_uri
from orchestration.trainable import CHECKPOINT_FILE, RUN_FILE, run_single_trial

TINY_MODEL = {
    "embedding_dim": 16,
    "encoder_layers": 1,
    "num_heads": 2,
    "ff_hidden_dim": 32,
    "scorer_hidden_dim": 16,
    "poly_hidden_dim": 16,
}


def test_single_trial_reports_checkpoints_and_tracks(ray_session, tmp_path: Path) -> None:
    uri = default_tracking_uri(tmp_path / "mlflow")
    config = {
        "preset": "full_linc",
        "problem": "cvrptw",
        "num_customers": 8,
        "train": {
            "num_rollouts": 4,
            "batch_size": 4,
            "instances_per_epoch": 4,
            "epochs": 2,
            "validation_size": 4,
            "seed": 7,
        },
        "model": TINY_MODEL,
        "resources": {"cpu": 1, "gpu": 0},
        "aws_secret_access_key": "must-not-be-logged",
    }
    began = time.perf_counter()
    result = run_single_trial(
        config, tmp_path / "tune", uri, name="tiny", experiment_name="linc-test"
    )
    elapsed = time.perf_counter() - began
    print(f"single trial took {elapsed:.1f} s")

    assert result.error is None
    assert result.metrics["epoch"] == 2 and result.metrics["training_iteration"] == 2
    assert result.metrics["global_step"] == 2
    assert {"train_best_cost", "train_mean_cost", "loss", "tau", "validation_cost"} <= set(
        result.metrics
    )
    assert result.checkpoint is not None
    with result.checkpoint.as_directory() as folder:
        payload = load_checkpoint(Path(folder) / CHECKPOINT_FILE)
        assert payload["epoch"] == 2
        assert torch.is_tensor(next(iter(payload["model_state"].values())))
        assert (Path(folder) / RUN_FILE).exists()
    assert Path(result.path).is_relative_to((tmp_path / "tune").resolve())

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("linc-test")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.info.run_name.startswith("train_linc")
    assert run.data.tags["preset"] == "full_linc" and run.data.tags["seed"] == "7"
    params = run.data.params
    assert params["train.num_rollouts"] == "4" and params["model.embedding_dim"] == "16"
    assert params["mlflow.experiment_name"] == "linc-test"
    assert not any("secret" in key.lower() for key in params)
    assert "must-not-be-logged" not in params.values()
    history = client.get_metric_history(run.info.run_id, "train_best_cost")
    assert [m.step for m in history] == [1, 2]
    assert history[-1].value == result.metrics["train_best_cost"]
    assert len(client.get_metric_history(run.info.run_id, "validation_cost")) == 2
