"""The Ray Tune trainable: one trial trains one (variant, seed, hyper-parameters) with ``fit``.

A trial receives the whole composed platform mapping (see :mod:`orchestration.config`) with its
own ``model.variant`` and ``train.seed`` filled in, resolves it once into a
:class:`~orchestration.plan.TrialPlan` (a trial never runs an unchecked config), and then runs
in a straight line:

1. data: the plan's training batches (fresh generated ones, a Parquet data set from
   ``linc-generate`` whose manifest checksum identifies the data in checkpoints and MLflow, or
   the Solomon-50 set) and validation set;
2. tracking: joins or creates its MLflow run with ``setup_mlflow`` (so logging works on every
   node), nested under the sweep's parent run, with the plan's effective settings as params and
   the variant, seed, git commit and data id as tags;
3. policy and fit: trains, reporting every epoch's record to Tune together with a checkpoint
   folder holding ``latest.pt`` and the MLflow run id; a retried or resumed trial restores both
   and continues bit-identically (``fit`` derives every random stream from (seed, step));
4. evaluation: the final policy on the plan's evaluation set; the per-instance rows and a route
   plot are logged as artifacts and ``eval_cost`` is reported to Tune.

Trials with ``cluster.num_workers > 1`` train data-parallel through Ray Train
(:mod:`orchestration.distributed`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune

from linc_core.model import LincPolicy
from linc_core.plan import data_id, evaluation_set, training_data, validation_set
from linc_core.runtime import tune_cpu_allocator
from linc_core.train.checkpoint import git_commit
from linc_core.train.loop import BaseCallback, fit, initial_policy, policy_from_checkpoint
from orchestration.datasets import open_filesystem
from orchestration.evaluation import evaluate_trial, evaluation_metrics, log_evaluation
from orchestration.plan import TrialPlan
from orchestration.tracking import MLflowCallback, ensure_experiment

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


def _start_mlflow(plan: TrialPlan, run_id: str | None, data: str):
    """The trial's MLflow module with its run active (an earlier attempt's run is re-opened)."""
    import mlflow
    from ray.air.integrations.mlflow import setup_mlflow

    tracking = plan.tracking
    experiment_id = ensure_experiment(tracking.uri, tracking.experiment)
    if run_id is not None:  # a retried or resumed trial keeps logging into its run
        mlflow.set_tracking_uri(tracking.uri)
        mlflow.start_run(run_id=run_id)
    tags = {
        "ray_node": ray.get_runtime_context().get_node_id(),
        "worker_pid": str(os.getpid()),  # equal across trials that reused one process
        "variant": plan.run.variant,
        "seed": str(plan.run.train.seed),
        "problem": plan.run.data.problem,
        "data_id": data,
        "git_commit": git_commit() or "unknown",
    }
    if tracking.parent_run_id:
        tags[PARENT_RUN_TAG] = tracking.parent_run_id
    if tracking.sweep:
        tags["sweep"] = tracking.sweep
    return setup_mlflow(
        tracking_uri=tracking.uri,
        experiment_id=experiment_id,
        run_name=plan.run_name,
        tags=tags,
    )


def train_linc(trial_config: dict[str, Any]) -> None:
    """Ray Tune function trainable: train one linc configuration, report every epoch."""
    plan = TrialPlan.from_mapping(trial_config)
    run = plan.run
    # A trial's process is Ray's, not linc-train's: give it the same allocator settings
    # (without them every rollout step pays fresh-page faults; see tune_cpu_allocator).
    tune_cpu_allocator()
    torch.set_num_threads(plan.resources.torch_threads)
    data = training_data(run, open_filesystem)
    validation = validation_set(run, data)
    data_name = data_id(run, open_filesystem)

    work_dir = Path(tempfile.mkdtemp(prefix="linc-trial-"))
    checkpoint_dir = work_dir / "checkpoint"
    checkpoint_dir.mkdir()
    resume_from, run_id = _restore(work_dir)
    mlflow = _start_mlflow(plan, run_id, data_name)
    try:
        active = mlflow.active_run()
        if run_id is None:
            mlflow.log_params(plan.params(data_name))
            mlflow.log_dict(plan.settings(), "plan.json")  # what the trial ran
            mlflow.log_dict(trial_config, "config.json")  # what it was given
        run_file = json.dumps({"run_id": active.info.run_id})
        fail_at = plan.fault.fail_at_epoch if resume_from is None else None
        callbacks = [
            MLflowCallback(mlflow),
            TuneReportCallback(checkpoint_dir, {RUN_FILE: run_file}, fail_at_epoch=fail_at),
        ]
        policy = initial_policy(run.model, run.train)
        mlflow.log_metric("num_parameters", sum(p.numel() for p in policy.parameters()))
        if plan.resources.num_workers > 1:
            history = _fit_data_parallel(plan, callbacks, checkpoint_dir, resume_from)
        else:
            history = fit(
                policy,
                run.train,
                data,
                validation=validation,
                callbacks=callbacks,
                checkpoint_dir=checkpoint_dir,
                resume_from=resume_from,
                data_id=data_name,
            ).history
        mlflow.set_tag("checkpoint", str(tune.get_context().get_trial_dir()))
        evaluation_instances = evaluation_set(run, validation, open_filesystem)
        if evaluation_instances is not None:
            instances, set_name = evaluation_instances
            final_policy = _policy_from(checkpoint_dir / CHECKPOINT_FILE, policy)
            evaluation = evaluate_trial(final_policy, instances, run.evaluation, plan.run_name)
            log_evaluation(mlflow, evaluation, instances, set_name, work_dir / "evaluation")
            last = history[-1] if history else {}
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
    plan: TrialPlan,
    callbacks: list[BaseCallback],
    checkpoint_dir: Path,
    resume_from: Path | None,
) -> list[dict[str, Any]]:
    """Train over ``resources.num_workers`` Ray Train workers; each epoch goes through the same
    callbacks as a single-process trial, with Train's checkpoint copied into ``checkpoint_dir``
    (so Tune checkpoints, retries and MLflow behave identically)."""
    import uuid

    from orchestration.distributed import CHECKPOINT_FILE as TRAIN_FILE
    from orchestration.distributed import fit_data_parallel

    resources = plan.resources
    storage = resources.storage_path()
    filesystem = None
    if "://" in storage:
        filesystem, storage = open_filesystem(storage)
    local = not (resources.address or os.environ.get("RAY_ADDRESS"))

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
        plan.run,
        num_workers=resources.num_workers,
        storage_path=storage,
        storage_filesystem=filesystem,
        # a fresh Train run per attempt: a retry resumes from the Tune checkpoint it restored
        run_name=f"ddp-{tune.get_context().get_trial_id()}-{uuid.uuid4().hex[:8]}",
        use_gpu=resources.use_gpu,
        resources_per_worker=resources.worker_resources(),
        resume_from=resume_from,
        on_epoch=on_epoch,
        open_filesystem=open_filesystem,
        worker_env={"GLOO_SOCKET_IFNAME": "lo"} if local else None,
    )
    return result.history


def _policy_from(path: Path, policy: LincPolicy) -> LincPolicy:
    if path.exists():
        loaded, _ = policy_from_checkpoint(path)
        return loaded
    return policy


__all__ = ["InjectedFault", "TuneReportCallback", "train_linc"]
