"""MLflow helpers without Ray: parameter flattening, credential filtering, the fit() callback."""

from __future__ import annotations

import shutil
from pathlib import Path

import mlflow
import pytest
import torch
from mlflow.tracking import MlflowClient

from linc_core.model import LincPolicy
from linc_core.train.data import GeneratedData
from linc_core.train.loop import fit
from orchestration.tracking.fit_metrics import MLflowCallback
from orchestration.tracking.params import MAX_PARAM_VAL_LENGTH, flatten_params
from orchestration.tracking.store import ensure_experiment, resolve_tracking_uri
from tests.conftest import fresh_python, tiny_configs


@pytest.fixture(autouse=True)
def _restore_tracking_uri(monkeypatch):
    """Tests set MLflow's process-wide tracking URI; put the previous value back afterwards.
    Without ``$MLFLOW_TRACKING_URI`` the store is the local SQLite file these tests expect."""
    from mlflow.tracking._tracking_service import utils

    monkeypatch.setattr(utils, "_tracking_uri", utils._tracking_uri)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


SECRETS = {
    "aws": {"AWS_SECRET_ACCESS_KEY": "s3cr3t", "aws_access_key_id": "AKIA", "region": "us-east-1"},
    "db_password": "hunter2",
    "MLFLOW_TRACKING_TOKEN": "tok",
    "credentials": {"user": "me", "pass": "x"},
    "s3": {"access_key": "a", "Secret": "b", "endpoint": "http://127.0.0.1:9000"},
}
SECRET_VALUES = {"s3cr3t", "AKIA", "hunter2", "tok", "me", "x", "a", "b"}


def test_tracking_uri_is_explicit_else_environment_else_absolute_sqlite(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    uri = resolve_tracking_uri(None, "store")
    assert uri == f"sqlite:///{tmp_path.resolve() / 'store' / 'mlflow.db'}"
    assert (tmp_path / "store").is_dir()
    assert resolve_tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'runs' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert resolve_tracking_uri(None, "s3://bucket/runs") == "http://127.0.0.1:5000"
    assert resolve_tracking_uri("sqlite:////x/y.db", "store") == "sqlite:////x/y.db"


def test_flatten_params_dots_stringifies_and_truncates() -> None:
    flat = flatten_params(
        {"train": {"num_rollouts": 4, "amp": False}, "model": {"feats": ("a", "b")}, "x": 1.5}
    )
    assert flat == {
        "train.num_rollouts": "4",
        "train.amp": "False",
        "model.feats": "('a', 'b')",
        "x": "1.5",
    }
    long = flatten_params({"note": "y" * (MAX_PARAM_VAL_LENGTH + 50)})
    assert len(long["note"]) == MAX_PARAM_VAL_LENGTH
    assert flatten_params({"a": "abcdef"}, max_length=3) == {"a": "abc"}


def test_flatten_params_drops_credentials() -> None:
    flat = flatten_params(SECRETS | {"train": {"seed": 1}})
    assert flat == {
        "aws.region": "us-east-1",
        "s3.endpoint": "http://127.0.0.1:9000",
        "train.seed": "1",
    }


def test_flatten_params_masks_the_secrets_inside_values() -> None:
    flat = flatten_params(
        {
            "sweep": {"storage": "postgresql://linc:hunter22@db:5432/optuna"},
            "data": {"uri": "s3://b/p?region=eu&session_token=FwoG"},
            "note": ("http://u:pw@h", 1),
        }
    )
    assert flat == {
        "sweep.storage": "postgresql://linc:***@db:5432/optuna",
        "data.uri": "s3://b/p?region=eu&session_token=***",
        "note": "('http://u:***@h', 1)",
    }


def test_no_credential_ever_reaches_mlflow(tmp_path: Path) -> None:
    uri = resolve_tracking_uri(None, tmp_path)
    experiment_id = ensure_experiment(uri, "creds")
    assert ensure_experiment(uri, "creds") == experiment_id
    mlflow.set_tracking_uri(uri)
    with mlflow.start_run(experiment_id=experiment_id) as run:
        mlflow.log_params(flatten_params(SECRETS))
    params = MlflowClient(tracking_uri=uri).get_run(run.info.run_id).data.params
    assert set(params) == {"aws.region", "s3.endpoint"}
    assert not SECRET_VALUES & set(params.values())


def test_mlflow_callback_logs_each_epoch(tmp_path: Path) -> None:
    model, config = tiny_configs(
        num_rollouts=4, batch_size=4, instances_per_epoch=4, epochs=2, validation_size=0
    )
    torch.manual_seed(0)
    uri = resolve_tracking_uri(None, tmp_path)
    mlflow.set_tracking_uri(uri)
    with mlflow.start_run(experiment_id=ensure_experiment(uri, "cb")) as run:
        result = fit(
            LincPolicy(model),
            config,
            GeneratedData("cvrptw", 6, 4, 4, seed=1),
            callbacks=[MLflowCallback()],
        )
    client = MlflowClient(tracking_uri=uri)
    history = client.get_metric_history(run.info.run_id, "train_best_cost")
    assert [m.step for m in history] == [1, 2]
    assert [m.value for m in history] == pytest.approx(
        [h["train_best_cost"] for h in result.history]
    )
    logged = client.get_run(run.info.run_id).data.metrics
    assert {"train_best_cost", "train_mean_cost", "loss", "tau"} <= set(logged)
    assert "validation_cost" not in logged


def test_a_moved_sqlite_store_keeps_its_artifacts_beside_it(tmp_path: Path) -> None:
    first = tmp_path / "first"
    uri = resolve_tracking_uri(None, first)
    experiment = ensure_experiment(uri, "moving")
    client = MlflowClient(tracking_uri=uri)
    run = client.create_run(experiment).info.run_id
    client.log_text(run, "kept", "note.txt")
    assert (first / "mlartifacts" / run / "artifacts" / "note.txt").is_file()
    # a copy leaves the original's experiment as it is: its store is still there
    copy = tmp_path / "copy"
    shutil.copytree(first, copy)
    copy_uri = f"sqlite:///{copy / 'mlflow.db'}"
    ensure_experiment(copy_uri, "moving")
    copied = MlflowClient(tracking_uri=copy_uri).get_experiment(experiment)
    assert copied.artifact_location == str(first / "mlartifacts")
    # a move re-points the experiment and its runs to the new folder; nothing recreates the old
    moved = tmp_path / "moved"
    shutil.rmtree(copy)
    shutil.move(first, moved)
    moved_uri = f"sqlite:///{moved / 'mlflow.db'}"
    assert ensure_experiment(moved_uri, "moving") == experiment
    client = MlflowClient(tracking_uri=moved_uri)
    assert client.get_experiment(experiment).artifact_location == str(moved / "mlartifacts")
    assert client.get_run(run).info.artifact_uri == str(moved / "mlartifacts" / run / "artifacts")
    assert Path(client.download_artifacts(run, "note.txt")).read_text() == "kept"
    later = client.create_run(experiment).info.run_id
    client.log_text(later, "new", "note.txt")
    assert (moved / "mlartifacts" / later / "artifacts" / "note.txt").is_file()
    assert not first.exists()


def test_the_parameter_length_limit_is_mlflows() -> None:
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH as mlflow_limit

    assert mlflow_limit == MAX_PARAM_VAL_LENGTH


def test_a_trial_process_imports_the_trainable_without_mlflow() -> None:
    """MLflow is imported by the trial's writer thread, off the trial's critical path."""
    script = "import sys, orchestration.trial.trainable; print('mlflow' in sys.modules)"
    assert fresh_python(script).strip() == "False"
