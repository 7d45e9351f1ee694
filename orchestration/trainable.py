"""Ray Tune function trainable for linc, with per-epoch Tune checkpoints and MLflow tracking.

Trial config (a plain dict, e.g. composed by Hydra)::

    {
        "preset": "full_linc",            # a key of linc_core.config.PRESETS
        "problem": "cvrptw",
        "num_customers": 8,
        "train": {...},                   # TrainConfig overrides (preset_configs(**train))
        "model": {...},                   # optional ModelConfig field overrides
        "data_seed": 0,                   # optional; defaults to train seed
        "mlflow": {"tracking_uri": "sqlite:////abs/mlflow.db", "experiment_name": "linc"},
        "resources": {"cpu": 1, "gpu": 0},  # used by run_single_trial
    }

Every epoch the trial reports fit()'s epoch record to Tune with a checkpoint holding ``latest.pt``
and ``mlflow_run.json``; a restored trial resumes training from ``latest.pt`` (bit-identical, see
``fit``) and keeps logging into the same MLflow run.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from ray import tune

from linc_core.config import preset_configs
from linc_core.model import LincPolicy
from linc_core.seeding import derive_seed
from linc_core.train.data import GeneratedData, generate
from linc_core.train.loop import BaseCallback, fit
from orchestration.tracking import MLflowCallback, ensure_experiment, flatten_params

CHECKPOINT_FILE = "latest.pt"
RUN_FILE = "mlflow_run.json"


class TuneReportCallback(BaseCallback):
    """After each epoch's checkpoint is written, report the epoch record and the folder to Tune."""

    def __init__(self, checkpoint_dir: Path, extra_files: dict[str, str] | None = None):
        self.checkpoint_dir = checkpoint_dir
        self.extra_files = extra_files or {}
        self._pending: dict[str, Any] | None = None

    def on_epoch(self, epoch: int, metrics: dict[str, Any]) -> None:
        self._pending = {k: v for k, v in metrics.items() if isinstance(v, int | float)}

    def on_checkpoint(self, epoch: int, path: Path) -> None:
        for name, text in self.extra_files.items():
            (self.checkpoint_dir / name).write_text(text)
        metrics = self._pending or {"epoch": epoch + 1}
        self._pending = None
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(self.checkpoint_dir)))


def build_configs(config: dict[str, Any]):
    """(ModelConfig, TrainConfig) of a trial config: the preset plus train and model overrides."""
    model, train = preset_configs(config["preset"], config["problem"], **config.get("train", {}))
    if config.get("model"):
        model = dataclasses.replace(model, **config["model"])
    return model, train


def _restore(work_dir: Path) -> tuple[Path | None, str | None]:
    """Copy the latest Tune checkpoint (if any) into ``work_dir``: (latest.pt, MLflow run id)."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return None, None
    resume_from, run_id = None, None
    with checkpoint.as_directory() as folder:
        source = Path(folder)
        if (source / CHECKPOINT_FILE).exists():
            resume_from = work_dir / "resume.pt"
            shutil.copy(source / CHECKPOINT_FILE, resume_from)
        if (source / RUN_FILE).exists():
            run_id = json.loads((source / RUN_FILE).read_text()).get("run_id")
    return resume_from, run_id


def train_linc(config: dict[str, Any]) -> None:
    """Ray Tune function trainable: train one linc configuration, report every epoch."""
    from ray.air.integrations.mlflow import setup_mlflow

    model_config, train_config = build_configs(config)
    num_customers = int(config["num_customers"])
    data_seed = int(config.get("data_seed", train_config.seed))
    data = GeneratedData(
        config["problem"],
        num_customers,
        train_config.batch_size,
        train_config.instances_per_epoch,
        data_seed,
    )
    validation = None
    if train_config.validation_size > 0:
        validation = generate(
            config["problem"],
            train_config.validation_size,
            num_customers,
            derive_seed(data_seed, "validation"),
        )

    work_dir = Path(tempfile.mkdtemp(prefix="linc-trial-"))
    checkpoint_dir = work_dir / "checkpoint"
    checkpoint_dir.mkdir()
    resume_from, run_id = _restore(work_dir)

    tracking = config.get("mlflow") or {}
    tracking_uri = tracking["tracking_uri"]
    experiment_id = ensure_experiment(tracking_uri, tracking.get("experiment_name", "linc"))
    import mlflow as mlflow_module

    if run_id is not None:  # a restored trial keeps logging into its run
        mlflow_module.set_tracking_uri(tracking_uri)
        mlflow_module.start_run(run_id=run_id)
    context = tune.get_context()
    mlflow = setup_mlflow(
        tracking_uri=tracking_uri,
        experiment_id=experiment_id,
        run_name=context.get_trial_name(),
        tags={"preset": config["preset"], "seed": str(train_config.seed)},
    )
    try:
        active = mlflow.active_run()
        if run_id is None:
            mlflow.log_params(flatten_params(config))
        run_file = json.dumps({"run_id": active.info.run_id})

        torch.manual_seed(train_config.seed)
        policy = LincPolicy(model_config)
        callbacks = [
            MLflowCallback(mlflow),
            TuneReportCallback(checkpoint_dir, extra_files={RUN_FILE: run_file}),
        ]
        fit(
            policy,
            train_config,
            data,
            validation=validation,
            callbacks=callbacks,
            checkpoint_dir=checkpoint_dir,
            resume_from=resume_from,
        )
    except BaseException:
        mlflow.end_run(status="FAILED")
        raise
    else:
        mlflow.end_run()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def _absolute_storage(storage_path: str | Path) -> str:
    """A URI (``s3://...``) unchanged; a local folder as an absolute path."""
    text = str(storage_path)
    return text if "://" in text else str(Path(text).resolve())


def run_single_trial(
    config: dict[str, Any],
    storage_path: str | Path,
    tracking_uri: str,
    *,
    name: str | None = None,
    experiment_name: str | None = None,
):
    """Run ``config`` as one Tune trial (resources from ``config["resources"]``); best Result.

    ``storage_path`` must be absolute (workers write there); the MLflow store and experiment are
    created on the driver first so concurrent trials never race on the SQLite schema.
    """
    config = dict(config)
    mlflow_section = dict(config.get("mlflow") or {})
    mlflow_section["tracking_uri"] = tracking_uri
    if experiment_name is not None:
        mlflow_section["experiment_name"] = experiment_name
    mlflow_section.setdefault("experiment_name", "linc")
    config["mlflow"] = mlflow_section
    ensure_experiment(tracking_uri, mlflow_section["experiment_name"])

    resources = config.get("resources") or {}
    trainable = tune.with_resources(
        train_linc,
        {"cpu": float(resources.get("cpu", 1)), "gpu": float(resources.get("gpu", 0))},
    )
    tuner = tune.Tuner(
        trainable,
        param_space=config,
        run_config=tune.RunConfig(
            storage_path=_absolute_storage(storage_path),
            name=name or f"linc-{config['preset']}-{config['problem']}",
        ),
        tune_config=tune.TuneConfig(num_samples=1),
    )
    results = tuner.fit()
    if results.errors:
        raise RuntimeError(f"trial failed: {results.errors[0]}")
    return results.get_best_result(metric="train_best_cost", mode="min")


__all__ = ["TuneReportCallback", "build_configs", "run_single_trial", "train_linc"]
