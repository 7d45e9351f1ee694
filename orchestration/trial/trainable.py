"""The Ray Tune trainable: one trial trains one (variant, seed, hyper-parameters) with ``fit``.

A trial receives the whole composed platform mapping (see :mod:`orchestration.config`) with its
own ``model.variant`` and ``train.seed`` filled in, resolves it once into a
:class:`~orchestration.trial.plan.TrialPlan` (a trial never runs an unchecked config), and then runs
in a straight line:

1. data: the plan's training batches (fresh generated ones, a Parquet data set from
   ``linc-generate`` whose manifest checksum identifies the data in checkpoints and MLflow, or
   the Solomon-50 set) and validation set;
2. restore: the newest intact checkpoint of the trial on its storage, verified
   (:mod:`orchestration.trial.checkpoints`), with the tracking journal saved in it;
3. tracking: every write goes through a :class:`~orchestration.tracking.writer.RunWriter`, which
   never raises into training: the trial's MLflow run (found again by its trial id on a retry or
   resume, else created) is nested under the sweep's parent run, with the plan's effective
   settings as params, the variant, seed, git commit and data id as tags, and the node, process
   and attempt refreshed on every attempt; a restored trial's epochs are logged exactly once;
4. policy and fit: trains, reporting every epoch's record to Tune together with a checkpoint
   folder holding ``latest.pt``, its manifest and the tracking journal; a retried or resumed
   trial continues bit-identically (``fit`` derives every random stream from (seed, step)). A
   SIGTERM to the trial's process checkpoints the current step first
   (:mod:`orchestration.trial.preemption`);
5. evaluation: the final policy on the plan's evaluation set; the per-instance rows and a route
   plot are logged as artifacts and ``eval_cost`` is reported to Tune in one report with the
   last epoch's record (so no scheduler stops a trial between the two). The run is then
   flushed (``tracking.flush_timeout_s``); what the store did not take by then stays in the
   final checkpoint's journal, which the sweep driver replays. A trial that Tune stops at a
   report (its scheduler, or the sweep's stop) leaves its run's status to the driver
   (:meth:`orchestration.tracking.runs.SweepRuns.settle`).

Trials with ``cluster.num_workers > 1`` train data-parallel through Ray Train
(:mod:`orchestration.trial.data_parallel`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune

from linc_core.metrics import EPOCH, EPOCH_METRICS, HEAP_TRIMS, NUM_PARAMETERS, PEAK_RSS_GB
from linc_core.model import LincPolicy
from linc_core.runs.plan import data_id, evaluation_set, training_data, validation_set
from linc_core.train.checkpoint import CHECKPOINT_NAME, copy_checkpoint, git_commit, load_checkpoint
from linc_core.train.loop import BaseCallback, fit, initial_policy, policy_from_checkpoint
from linc_core.utils.runtime import (
    import_in_background,
    peak_rss_gb,
    release_free_heap,
    reset_peak_rss,
    tune_cpu_allocator,
)
from linc_core.utils.secrets import redact_logging
from orchestration.data.storage import open_filesystem
from orchestration.experiment.folder import SweepFolder
from orchestration.tracking.fit_metrics import MLflowCallback
from orchestration.tracking.store import PARENT_RUN_TAG, TRIAL_TAG
from orchestration.tracking.target import TrackingTarget
from orchestration.tracking.writer import RunWriter
from orchestration.trial.checkpoints import (
    PREEMPTED_PREFIX,
    Restored,
    next_attempt,
    persist,
    remove_preempted,
    restore_newest_intact,
)
from orchestration.trial.evaluation import evaluate_trial, log_evaluation
from orchestration.trial.plan import TrialPlan
from orchestration.trial.preemption import TrialGuard
from orchestration.trial.reports import (
    StoppedByTune,
    TuneReportCallback,
    report_to_tune,
)
from orchestration.trial.resources import (
    check_device,
    memory_bytes,
    trial_heap_ceiling,
    worker_resources,
)


class TrialPreempted(RuntimeError):
    """The trial's process was told to end; its current step is checkpointed on storage."""


def _start_tracking(
    plan: TrialPlan, restored: Restored, data: str, attempt: int, work_dir: Path
) -> RunWriter:
    """The trial's run writer: the run is the restored journal's (same store and sweep), else
    the one an earlier attempt created (found by trial id), else a new one."""
    tracking = plan.tracking
    trial_id = tune.get_context().get_trial_id()
    tags = {
        "variant": plan.run.variant,
        "seed": str(plan.run.train.seed),
        "problem": plan.run.data.problem,
        "data_id": data,
        "git_commit": git_commit() or "unknown",
    } | plan.study_tags  # a search's trial: its Optuna study and number
    if tracking.sweep:
        tags["sweep"] = tracking.sweep
    key = {TRIAL_TAG: trial_id}
    if tracking.parent_run_id:
        key[PARENT_RUN_TAG] = tracking.parent_run_id
    writer = tracking.writer(spool=work_dir / "tracking-spool")
    writer.start(tracking.experiment, plan.run_name, tags, key, journal=restored.folder)
    writer.set_status("RUNNING")  # a retried trial's run was marked FAILED by the last attempt
    if restored.source is not None:
        tags["resumed_from"] = f"{restored.source} (step {restored.global_step})"
    # where this attempt runs: refreshed on every attempt (a lost node's retry runs elsewhere)
    writer.set_tags(
        tags
        | {
            "ray_node": ray.get_runtime_context().get_node_id(),
            "worker_pid": str(os.getpid()),  # equal across trials that reused one process
            "attempt": str(attempt),
            "gpu_ids": ",".join(map(str, ray.get_gpu_ids())) or "none",
        }
    )
    return writer


def train_linc(
    trial_config: dict[str, Any], tracking: TrackingTarget | None = None, storage: str | None = None
) -> None:
    """Ray Tune function trainable: train one linc configuration, report every epoch.

    ``tracking`` and ``storage`` are the sweep driver's current store and Tune storage (passed
    with ``tune.with_parameters``); they win over the trial's own, possibly older, mapping.
    """
    redact_logging()  # what this process logs goes to Ray's log files and the driver's console
    plan = TrialPlan.from_mapping(trial_config, tracking, storage)
    run = plan.run
    if plan.resources.num_workers == 1:  # data-parallel workers are placed by Ray Train
        check_device(plan.resources, run, ray.get_gpu_ids())
    import_in_background("torch._dynamo")  # the optimizer's first step needs it
    # A trial's process is Ray's, not linc-train's: give it the same allocator settings
    # (without them every rollout step pays fresh-page faults; see tune_cpu_allocator).
    tune_cpu_allocator()
    reset_peak_rss()  # a reused process reports this trial's peak, not an earlier trial's
    torch.set_num_threads(plan.resources.torch_threads)
    data = training_data(run, open_filesystem)
    validation = validation_set(run, data)
    data_name = data_id(run, open_filesystem)

    work_dir = Path(tempfile.mkdtemp(prefix="linc-trial-"))
    checkpoint_dir = work_dir / "checkpoint"
    checkpoint_dir.mkdir()
    trial_storage = SweepFolder.of_trial()
    restored = restore_newest_intact(trial_storage, work_dir)
    writer = _start_tracking(plan, restored, data_name, next_attempt(trial_storage), work_dir)
    resume_from, history = None, []
    if restored.checkpoint is not None:
        resume_from = copy_checkpoint(restored.checkpoint, work_dir / "resume.pt")
        history = load_checkpoint(resume_from)["history"]
    try:
        if resume_from is None:
            writer.log_dict(plan.settings(), "plan.json")  # what the trial ran
            writer.log_dict(trial_config, "config.json")  # what it was given
        writer.log_params(plan.params(data_name))  # the same values on every attempt
        writer.log_history(history, EPOCH_METRICS)  # what the checkpoint saw (exactly once)
        fault = plan.fault if resume_from is None else None  # a deliberate failure: once
        policy = initial_policy(run.model, run.train)
        writer.log_metric(NUM_PARAMETERS, sum(p.numel() for p in policy.parameters()))
        # what this process reserved, on the CPU (a data-parallel trial's own process reserves
        # none, its workers their own; a GPU trial's estimate is for a GPU run)
        single_cpu = plan.resources.num_workers == 1 and run.train.device == "cpu"
        reserved = memory_bytes(plan.resources, run) if single_cpu else 0
        with TrialGuard(plan.resources.preemption_grace_s) as guard:
            callbacks = [
                MLflowCallback(writer),
                TuneReportCallback(checkpoint_dir, writer, fault, guard, run.train),
            ]
            if plan.resources.num_workers > 1:  # each worker holds its own heap
                history = _fit_data_parallel(plan, callbacks, checkpoint_dir, resume_from)
                if history and HEAP_TRIMS in history[-1]:  # the workers', summed
                    writer.log_metric(HEAP_TRIMS, history[-1][HEAP_TRIMS])
            else:
                ceiling = trial_heap_ceiling(reserved, run)
                result = fit(
                    policy,
                    run.train,
                    data,
                    validation=validation,
                    callbacks=callbacks + ([ceiling] if ceiling else []),
                    checkpoint_dir=checkpoint_dir,
                    resume_from=resume_from,
                    data_id=data_name,
                    stop=guard.requested,
                )
                if result.stopped_by_request:
                    _persist_preempted(trial_storage, checkpoint_dir, writer, result.global_step)
                    guard.checkpointed()
                    raise TrialPreempted(f"stopped at step {result.global_step} (SIGTERM)")
                history = result.history
                if ceiling is not None:  # a trial that trims every step wants more memory
                    writer.log_metric(HEAP_TRIMS, ceiling.trims)
        if restored.source and PREEMPTED_PREFIX in restored.source:
            remove_preempted(trial_storage, before_step=restored.global_step + 1)
        release_free_heap()  # the evaluation's decodings start from the live tensors only
        final = _evaluate(plan, validation, checkpoint_dir, policy, writer, work_dir, reserved)
        peak_rss = peak_rss_gb()  # the trial process's, training and evaluation included
        writer.log_metric(PEAK_RSS_GB, peak_rss)
        writer.end_run("FINISHED")
        writer.close(timeout=plan.tracking.flush_timeout_s)
        # The last epoch's record with the evaluation, in one report; undelivered records
        # travel in the final checkpoint's journal (the driver replays them).
        writer.save(checkpoint_dir)
        last = history[-1] if history else {}
        last = {k: v for k, v in last.items() if isinstance(v, int | float)}
        completed = {"completed": 1, PEAK_RSS_GB: peak_rss}
        report_to_tune(last | (final or {}) | completed, checkpoint_dir, int(last.get(EPOCH, 0)))
    except StoppedByTune:
        # Undelivered records are in the journal of the checkpoint reported last, which the
        # driver replays; the driver also settles the run (FINISHED when the scheduler stopped
        # it, KILLED with the sweep). Not waiting here: Tune reuses this process for the next
        # trial only if this thread ends within 2 s (TUNE_FUNCTION_THREAD_TIMEOUT_S), and only
        # if it ends as Tune's own stop does: a function that returns reports once more, and
        # that report would wait for ever on a stopped session.
        writer.close(timeout=0, warn=False)
        raise SystemExit(0) from None
    except BaseException as err:
        stopped = isinstance(err, SystemExit | KeyboardInterrupt | TrialPreempted)
        writer.set_tag("error", f"{type(err).__name__}: {err}"[:500])
        writer.end_run("KILLED" if stopped else "FAILED")
        writer.close(timeout=0 if stopped else min(30.0, plan.tracking.flush_timeout_s))
        raise  # the trial's own error, whatever the tracking store does
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
        # a reused process (cluster.reuse_actors) starts the next trial without this one's
        # freed heap (the allocator setting keeps up to 1 GiB of it, fragmentation more)
        release_free_heap()


def _persist_preempted(
    storage: SweepFolder, checkpoint_dir: Path, writer: RunWriter, global_step: int
) -> None:
    writer.save(checkpoint_dir)
    persist(storage, checkpoint_dir, f"{PREEMPTED_PREFIX}{global_step:012d}")


def _evaluate(
    plan: TrialPlan,
    validation: Any,
    checkpoint_dir: Path,
    policy: LincPolicy,
    writer: RunWriter,
    work_dir: Path,
    reserved: int,
) -> dict[str, float] | None:
    """The final policy on the plan's evaluation set, logged; its metrics (None: no set).
    ``reserved``: the memory the trial's process reserved (0: none to keep within)."""
    evaluated = evaluation_set(plan.run, validation, open_filesystem)
    if evaluated is None:
        return None
    final = checkpoint_dir / CHECKPOINT_NAME
    final_policy = policy_from_checkpoint(final)[0] if final.exists() else policy
    source, run = plan.run.evaluation, plan.run
    evaluations = evaluate_trial(
        final_policy, evaluated, source, plan.run_name, run.train.compile, run.variant, reserved
    )
    return log_evaluation(writer, evaluations, evaluated, source, work_dir / "evaluation")


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

    from orchestration.trial.data_parallel import fit_data_parallel

    resources = plan.resources
    storage = resources.storage_path()
    filesystem = None
    if "://" in storage:
        filesystem, storage = open_filesystem(storage)
    local = not (resources.address or os.environ.get("RAY_ADDRESS"))

    def on_epoch(record: dict[str, Any], checkpoint: Any) -> None:
        epoch = int(record[EPOCH]) - 1
        for callback in callbacks:
            callback.on_epoch(epoch, record)
        if checkpoint is not None:
            with checkpoint.as_directory() as folder:
                copy_checkpoint(Path(folder) / CHECKPOINT_NAME, checkpoint_dir / CHECKPOINT_NAME)
            for callback in callbacks:
                callback.on_checkpoint(epoch, checkpoint_dir / CHECKPOINT_NAME)

    result = fit_data_parallel(
        plan.run,
        num_workers=resources.num_workers,
        storage_path=storage,
        storage_filesystem=filesystem,
        # a fresh Train run per attempt: a retry resumes from the Tune checkpoint it restored
        run_name=f"ddp-{tune.get_context().get_trial_id()}-{uuid.uuid4().hex[:8]}",
        use_gpu=resources.use_gpu,
        resources_per_worker=worker_resources(resources, plan.run),
        # a lost worker restarts the worker group from Train's last checkpoint; past these
        # restarts the Tune trial fails and Tune retries it from its own checkpoint
        max_failures=resources.max_failures,
        resume_from=resume_from,
        on_epoch=on_epoch,
        open_filesystem=open_filesystem,
        worker_env={"GLOO_SOCKET_IFNAME": "lo"} if local else None,
    )
    return result.history


__all__ = ["TrialPreempted", "train_linc"]
