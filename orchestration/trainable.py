"""The Ray Tune trainable: one trial trains one (variant, seed, hyper-parameters) with ``fit``.

A trial receives the whole composed platform mapping (see :mod:`orchestration.config`) with its
own ``model.variant`` and ``train.seed`` filled in, converts it again (a trial never runs an
unchecked config), and then:

1. builds its data: fresh generated batches, a Parquet data set from ``linc-generate`` (its
   manifest checksum identifies the data in checkpoints and MLflow), or the Solomon-50 set;
2. joins or creates its MLflow run with ``setup_mlflow`` (so logging works on every node),
   nested under the sweep's parent run, with the flattened config as params and the variant,
   seed, git commit and data id as tags;
3. trains, reporting every epoch's record to Tune together with a checkpoint folder holding
   ``latest.pt`` and the MLflow run id; a retried or resumed trial restores both and continues
   bit-identically (``fit`` derives every random stream from (seed, step));
4. evaluates the final policy on the configured evaluation set, logs the per-instance rows and a
   route plot as artifacts and reports ``eval_cost`` to Tune.

Trials with ``cluster.num_workers > 1`` train data-parallel through Ray Train
(:mod:`orchestration.distributed`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune

from linc_core.instances import Instance
from linc_core.model import LincPolicy
from linc_core.runtime import tune_cpu_allocator
from linc_core.seeding import derive_seed
from linc_core.train.checkpoint import git_commit
from linc_core.train.data import FixedData, GeneratedData, TrainingData, generate
from linc_core.train.loop import BaseCallback, fit, initial_policy
from orchestration.config import PlatformConfig
from orchestration.datasets import open_filesystem, open_training_data
from orchestration.evaluation import evaluate_trial, evaluation_metrics, log_evaluation
from orchestration.tracking import MLflowCallback, ensure_experiment, flatten_params

CHECKPOINT_FILE = "latest.pt"
RUN_FILE = "mlflow_run.json"
PARENT_RUN_TAG = "mlflow.parentRunId"


class InjectedFault(RuntimeError):
    """Raised by ``fault.fail_at_epoch`` to exercise Tune's retry-from-checkpoint path."""


class TuneReportCallback(BaseCallback):
    """After each epoch's checkpoint is written, report the epoch record and the folder to Tune."""

    def __init__(
        self,
        checkpoint_dir: Path,
        extra_files: dict[str, str] | None = None,
        fail_at_epoch: int | None = None,
    ):
        self.checkpoint_dir = checkpoint_dir
        self.extra_files = extra_files or {}
        self.fail_at_epoch = fail_at_epoch
        self._pending: dict[str, Any] | None = None

    def on_epoch(self, epoch: int, metrics: dict[str, Any]) -> None:
        self._pending = {k: v for k, v in metrics.items() if isinstance(v, int | float)}

    def on_checkpoint(self, epoch: int, path: Path) -> None:
        for name, text in self.extra_files.items():
            (self.checkpoint_dir / name).write_text(text)
        metrics = self._pending or {"epoch": epoch + 1}
        self._pending = None
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(self.checkpoint_dir)))
        if self.fail_at_epoch is not None and epoch + 1 == self.fail_at_epoch:
            raise InjectedFault(f"fault.fail_at_epoch={self.fail_at_epoch}: failing on purpose")


def manifest_id(uri: str) -> str:
    """``sha256:...`` of a data set's ``manifest.json`` (which itself lists every shard's hash)."""
    filesystem, root = open_filesystem(uri)
    with filesystem.open_input_stream(f"{root.rstrip('/')}/manifest.json") as stream:
        return "sha256:" + hashlib.sha256(stream.read()).hexdigest()


def solomon50_instances() -> Instance:
    from linc_core.evaluate import solomon50

    return Instance.concat(solomon50())


def training_data(config: PlatformConfig) -> tuple[TrainingData, str]:
    """The trial's batches and the id of that data (stored in checkpoints and MLflow tags)."""
    _, train = config.linc_configs()
    data = config.data
    problem, size = config.task.problem, config.task.num_customers
    if data.source == "dataset":
        assert data.uri is not None
        loaded = open_training_data(data.uri, train.batch_size, derive_seed(data.seed, "shuffle"))
        return loaded, manifest_id(data.uri)
    if data.source == "solomon50":
        return (
            FixedData(solomon50_instances(), train.batch_size, derive_seed(data.seed, "shuffle")),
            "solomon100-first50",
        )
    generated = GeneratedData(problem, size, train.batch_size, train.instances_per_epoch, data.seed)
    return generated, f"generated:{problem}{size}:seed{data.seed}"


def validation_set(config: PlatformConfig) -> Instance | None:
    """The fixed, seeded validation instances (same for every trial of a sweep)."""
    _, train = config.linc_configs()
    if train.validation_size == 0:
        return None
    return generate(
        config.task.problem,
        train.validation_size,
        config.task.num_customers,
        derive_seed(config.data.seed, "validation-set"),
    )


def evaluation_set(config: PlatformConfig, validation: Instance | None) -> tuple[Instance, str]:
    """The final-evaluation instances and their name (``none`` is handled by the caller)."""
    source = config.data.eval_source
    if source == "validation":
        assert validation is not None
        return validation, f"validation:{config.task.problem}{config.task.num_customers}"
    if source == "solomon50":
        return solomon50_instances(), "solomon50"
    from orchestration.datasets import load_evaluation_set

    assert config.data.eval_uri is not None
    return load_evaluation_set(config.data.eval_uri), config.data.eval_uri


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


def _start_mlflow(config: PlatformConfig, run_id: str | None, data_id: str):
    """The trial's MLflow module with its run active (an earlier attempt's run is re-opened)."""
    import mlflow
    from ray.air.integrations.mlflow import setup_mlflow

    tracking_uri = config.tracking_uri()
    experiment_id = ensure_experiment(tracking_uri, config.tracking.experiment)
    if run_id is not None:  # a retried or resumed trial keeps logging into its run
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.start_run(run_id=run_id)
    _, train = config.linc_configs()
    tags = {
        "ray_node": ray.get_runtime_context().get_node_id(),
        "worker_pid": str(os.getpid()),  # equal across trials that reused one process
        "variant": config.model.variant,
        "seed": str(train.seed),
        "problem": config.task.problem,
        "data_id": data_id,
        "git_commit": git_commit() or "unknown",
    }
    if config.tracking.parent_run_id:
        tags[PARENT_RUN_TAG] = config.tracking.parent_run_id
    if config.tracking.sweep:
        tags["sweep"] = config.tracking.sweep
    return setup_mlflow(
        tracking_uri=tracking_uri,
        experiment_id=experiment_id,
        run_name=f"{config.model.variant}-seed{train.seed}",
        tags=tags,
    )


def train_linc(trial_config: dict[str, Any]) -> None:
    """Ray Tune function trainable: train one linc configuration, report every epoch."""
    config = PlatformConfig.from_mapping(trial_config)
    model_config, train_config = config.linc_configs()
    # A trial's process is Ray's, not linc-train's: give it the same allocator settings
    # (without them every rollout step pays fresh-page faults; see tune_cpu_allocator).
    tune_cpu_allocator()
    torch.set_num_threads(config.cluster.torch_threads)
    data, data_id = training_data(config)
    validation = validation_set(config)

    work_dir = Path(tempfile.mkdtemp(prefix="linc-trial-"))
    checkpoint_dir = work_dir / "checkpoint"
    checkpoint_dir.mkdir()
    resume_from, run_id = _restore(work_dir)
    mlflow = _start_mlflow(config, run_id, data_id)
    try:
        active = mlflow.active_run()
        if run_id is None:
            mlflow.log_params(flatten_params(trial_config))
            mlflow.log_dict(trial_config, "config.json")
        run_file = json.dumps({"run_id": active.info.run_id})
        fail_at = config.fault.fail_at_epoch if resume_from is None else None
        callbacks = [
            MLflowCallback(mlflow),
            TuneReportCallback(checkpoint_dir, {RUN_FILE: run_file}, fail_at_epoch=fail_at),
        ]
        policy = initial_policy(model_config, train_config)
        mlflow.log_metric("num_parameters", sum(p.numel() for p in policy.parameters()))
        if config.cluster.num_workers > 1:
            result_history = _fit_data_parallel(
                config, data, validation, callbacks, checkpoint_dir, resume_from, data_id
            )
        else:
            result = fit(
                policy,
                train_config,
                data,
                validation=validation,
                callbacks=callbacks,
                checkpoint_dir=checkpoint_dir,
                resume_from=resume_from,
                data_id=data_id,
            )
            result_history = result.history
        mlflow.set_tag("checkpoint", str(tune.get_context().get_trial_dir()))
        if config.data.eval_source != "none":
            final_policy = _policy_from(checkpoint_dir / CHECKPOINT_FILE, policy)
            instances, set_name = evaluation_set(config, validation)
            evaluation = evaluate_trial(final_policy, instances, config.data)
            log_evaluation(mlflow, evaluation, instances, set_name, work_dir / "evaluation")
            last = dict(result_history[-1]) if result_history else {}
            last = {k: v for k, v in last.items() if isinstance(v, int | float)}
            tune.report(
                last | evaluation_metrics(evaluation),
                checkpoint=tune.Checkpoint.from_directory(str(checkpoint_dir)),
            )
    except BaseException:
        mlflow.end_run(status="FAILED")
        raise
    else:
        mlflow.end_run()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def _fit_data_parallel(
    config: PlatformConfig,
    data: TrainingData,
    validation: Instance | None,
    callbacks: list[BaseCallback],
    checkpoint_dir: Path,
    resume_from: Path | None,
    data_id: str,
) -> list[dict[str, Any]]:
    """Train over ``cluster.num_workers`` Ray Train workers; each epoch goes through the same
    callbacks as a single-process trial, with Train's checkpoint copied into ``checkpoint_dir``
    (so Tune checkpoints, retries and MLflow behave identically)."""
    import uuid

    from orchestration.distributed import CHECKPOINT_FILE as TRAIN_FILE
    from orchestration.distributed import fit_data_parallel

    model_config, train_config = config.linc_configs()
    storage = config.cluster.storage_path()
    filesystem = None
    if "://" in storage:
        filesystem, storage = open_filesystem(storage)
    local = not (config.cluster.address or os.environ.get("RAY_ADDRESS"))

    def on_epoch(record: dict[str, Any], checkpoint: Any) -> None:
        epoch = int(record["epoch"]) - 1
        for callback in callbacks:
            callback.on_epoch(epoch, record)
        if checkpoint is not None:
            with checkpoint.as_directory() as folder:
                shutil.copy(Path(folder) / TRAIN_FILE, checkpoint_dir / CHECKPOINT_FILE)
            for callback in callbacks:
                callback.on_checkpoint(epoch, checkpoint_dir / CHECKPOINT_FILE)

    result = fit_data_parallel(
        model_config,
        train_config,
        data,
        num_workers=config.cluster.num_workers,
        storage_path=storage,
        storage_filesystem=filesystem,
        # a fresh Train run per attempt: a retry resumes from the Tune checkpoint it restored
        run_name=f"ddp-{tune.get_context().get_trial_id()}-{uuid.uuid4().hex[:8]}",
        use_gpu=config.cluster.use_gpu,
        resources_per_worker=worker_resources(config),
        resume_from=resume_from,
        validation=validation,
        on_epoch=on_epoch,
        init_seed=derive_seed(train_config.seed, "init"),
        data_id=data_id,
        worker_env={"GLOO_SOCKET_IFNAME": "lo"} if local else None,
    )
    return result.history


def _policy_from(path: Path, policy: LincPolicy) -> LincPolicy:
    from linc_core.train.loop import policy_from_checkpoint

    if path.exists():
        loaded, _ = policy_from_checkpoint(path)
        return loaded
    return policy


def trial_resources(config: PlatformConfig) -> dict[str, float]:
    """Tune resources of one trial (a data-parallel trial's workers reserve their own)."""
    cluster = config.cluster
    if cluster.num_workers > 1:
        # the workers reserve their own resources; Tune refuses an all-zero request
        return {"cpu": 0.0, "memory": 1}
    resources: dict[str, float] = {"cpu": cluster.cpus_per_trial, "gpu": cluster.gpus_per_trial}
    resources.update(cluster.custom_resources)
    return resources


def worker_resources(config: PlatformConfig) -> dict[str, float]:
    """Ray resources of each data-parallel worker."""
    cluster = config.cluster
    resources = {"CPU": cluster.cpus_per_worker}
    if cluster.gpus_per_worker:
        resources["GPU"] = cluster.gpus_per_worker
    resources.update(cluster.custom_resources)
    return resources


__all__ = [
    "InjectedFault",
    "TuneReportCallback",
    "evaluation_set",
    "manifest_id",
    "train_linc",
    "trial_resources",
    "training_data",
    "validation_set",
    "worker_resources",
]
