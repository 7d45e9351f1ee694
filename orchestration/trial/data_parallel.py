"""Data-parallel ``fit`` over N Ray Train workers (``TorchTrainer``: gloo on CPU, NCCL on GPU).

Ray 2.60 runs Ray Train V2 by default (``RAY_TRAIN_V2_ENABLED`` defaults to on): inside a Tune
function trainable the trainer is launched with ``TorchTrainer(...).fit()``, workers report with
``ray.train.report`` (a barrier: every worker calls it once per epoch), and a ``UserCallback``
on the Train controller sees each report. ``ray.train.report`` may not be called from the Tune
function itself, and Train's reports do not reach Tune by themselves; this module forwards each
epoch to the caller's ``on_epoch`` in the caller's thread, where the Tune trainable can call
``tune.report``.

Contract::

    result = fit_data_parallel(
        plan,                                       # a linc_core.runs.plan.RunPlan
        num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1},
        storage_path="/abs/folder" or "bucket/prefix" (+ storage_filesystem), run_name="trial-x",
        resume_from=None or a linc checkpoint file (latest.pt) readable by the caller,
        on_epoch=callback(record, checkpoint),
    )

- Each worker realises the plan itself (its training data, validation set and data id, data
  sets opened with ``open_filesystem``; only the plan travels to the workers) and builds its
  policy with ``initial_policy(plan.model, plan.train)``, the single-process trial's initial
  weights; rank 0's weights are broadcast, and ``linc_core.train.loop.fit`` runs with the
  worker's ``World``: every worker rebuilds the same whole batch and rolls out its
  ``batch_size / num_workers`` rows (``batch_size`` must be a multiple of ``num_workers``). The
  run follows single-process ``fit`` of the same plan up to float rounding.
- After every epoch ``on_epoch(record, checkpoint)`` is called in the caller's thread, in epoch
  order: ``record`` is fit's epoch record (global metrics: ``epoch``, ``global_step``,
  ``train_best_cost``, ``train_mean_cost``, ``loss``, ``tau``, ``seconds``,
  ``validation_cost`` when validated; ``heap_trims``, the steps after which the workers gave
  their free heap back so far, summed over them, when they reserve ``memory``),
  ``checkpoint`` a ``ray.train.Checkpoint`` persisted under ``storage_path/run_name``
  holding ``latest.pt`` (``CHECKPOINT_FILE``), the linc checkpoint after that epoch
  (``checkpoint.path``; ``checkpoint.as_directory()`` for a local copy).
  Inside Tune: ``tune.report(record, checkpoint=checkpoint)`` from ``on_epoch``.
- Resume: ``resume_from`` is shipped to the workers through the object store (any node).
  Ray Train V2 keeps a snapshot of a run's checkpoints under ``storage_path/run_name``: calling
  again with the same ``storage_path`` and ``run_name`` (e.g. a restarted Tune trial), or a
  worker group restarted by ``max_failures``, continues from that run's last checkpoint, which
  takes precedence over ``resume_from``. Use a new ``run_name`` for a fresh run.
- If ``on_epoch`` raises, the run is aborted and the exception propagates.
- Returns ``DataParallelResult`` (history, last checkpoint); raises if training failed.
- Resources: the workers reserve ``num_workers x resources_per_worker`` (default 1 CPU, plus 1
  GPU each with ``use_gpu``; a ``memory`` there is also each CPU worker's heap ceiling,
  :func:`orchestration.trial.resources.trial_heap_ceiling`) in their own placement group,
  outside the Tune trial's; the Train
  controller takes 0 CPU. The Tune trial that calls this should reserve no CPU: Tune rejects an
  all-zero request, so use ``tune.with_resources(trainable, {"cpu": 0, "memory": 1})``. Seen on
  a 2-CPU local Ray: with ``{"cpu": 0.01}`` the two 1-CPU workers never fit, and Ray Train V2
  retries the worker-group start (60 s timeout each) forever, so the call hangs.
- ``worker_env`` sets environment variables of the workers, e.g. ``{"GLOO_SOCKET_IFNAME":
  "lo"}`` to keep gloo's sockets on loopback for a single-node run.
"""

from __future__ import annotations

import dataclasses
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray import train
from ray.train.torch import TorchConfig, TorchTrainer
from ray.train.v2._internal.constants import is_v2_enabled
from ray.train.v2.api.callback import UserCallback
from ray.util.queue import Empty, Queue

from linc_core.metrics import HEAP_TRIMS
from linc_core.runs.plan import FilesystemOpener, RunPlan, data_id, training_data, validation_set
from linc_core.train.checkpoint import CHECKPOINT_NAME as CHECKPOINT_FILE
from linc_core.train.checkpoint import copy_checkpoint
from linc_core.train.distributed import world
from linc_core.train.loop import BaseCallback, fit, initial_policy
from linc_core.train.memory_ceiling import HeapCeiling
from linc_core.utils.runtime import tune_cpu_allocator
from orchestration.data.storage import open_filesystem as open_any_filesystem
from orchestration.trial.resources import trial_heap_ceiling

ABORT_WAIT_SECONDS = 60.0
_DONE = "__linc_done__"

EpochCallback = Callable[[dict[str, Any], "train.Checkpoint | None"], None]


@dataclass
class DataParallelResult:
    """What a data-parallel run gives back to the caller.

    Attributes:
        history: fit's epoch records (global metrics), one per epoch of this call.
        checkpoint: the last persisted checkpoint (folder with ``latest.pt``), or None.
    """

    history: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: train.Checkpoint | None = None

    @property
    def checkpoint_path(self) -> str | None:
        """``latest.pt`` of the last checkpoint on the storage filesystem."""
        if self.checkpoint is None:
            return None
        return f"{self.checkpoint.path.rstrip('/')}/{CHECKPOINT_FILE}"


class _ReportEpochs(BaseCallback):
    """Per-worker fit() callback: one ``ray.train.report`` per epoch on every rank.

    Rank 0 reports after it wrote ``latest.pt`` (``on_checkpoint``), with that folder as the
    checkpoint; the other ranks report the same metrics without one (report is a barrier).
    A rank held under its reservation (``ceiling``) adds the steps it trimmed after so far
    (``heap_trims``).
    """

    all_ranks = True

    def __init__(self, rank: int, checkpoint_dir: Path, ceiling: HeapCeiling | None = None):
        self.rank = rank
        self.checkpoint_dir = checkpoint_dir
        self.ceiling = ceiling

    def on_epoch(self, epoch: int, metrics: dict[str, Any]) -> None:
        self._pending = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        if self.ceiling is not None:
            self._pending[HEAP_TRIMS] = self.ceiling.trims
        if self.rank != 0:
            train.report(self._pending, checkpoint=None)

    def on_checkpoint(self, epoch: int, path: Path) -> None:
        train.report(
            self._pending,
            checkpoint=train.Checkpoint.from_directory(str(self.checkpoint_dir)),
            checkpoint_dir_name=f"epoch_{epoch + 1:06d}",
        )


class _ForwardReports(UserCallback):
    """Runs on the Train controller: puts rank 0's metrics, with the heap trims of all ranks
    summed (each worker holds its own heap), and the checkpoint on a queue."""

    def __init__(self, queue: Queue):
        self.queue = queue

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any):
        self.queue.put((_epoch_record(metrics), checkpoint))


def _epoch_record(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """One epoch's record from the ranks' reports (one dict each, rank 0's first): rank 0's
    global metrics, and ``heap_trims`` the sum over the ranks that count them (since their
    worker group started: a group restarted by ``max_failures`` counts afresh)."""
    record = dict(metrics[0])
    trims = [rank[HEAP_TRIMS] for rank in metrics if HEAP_TRIMS in rank]
    if trims:
        record[HEAP_TRIMS] = sum(trims)
    return record


def _worker_loop(config: dict[str, Any]) -> None:
    """Body of every Ray Train worker: realise the plan and run data-parallel ``fit``."""
    here = world()
    tune_cpu_allocator()  # as the single-process trainable
    plan: RunPlan = config["plan"]
    opener: FilesystemOpener = config["open_filesystem"]
    train_config = plan.train
    if config["use_gpu"]:
        import ray.train.torch as train_torch

        train_config = dataclasses.replace(train_config, device=str(train_torch.get_device()))
    data = training_data(plan, opener)
    policy = initial_policy(plan.model, train_config)
    work = Path(tempfile.mkdtemp(prefix=f"linc-dp-rank{here.rank}-"))
    resume_from = None
    restarted = train.get_checkpoint()
    if restarted is not None:
        with restarted.as_directory() as folder:
            resume_from = copy_checkpoint(Path(folder) / CHECKPOINT_FILE, work / "resume.pt")
    elif config["resume_ref"] is not None:
        resume_from = work / "resume.pt"
        resume_from.write_bytes(ray.get(config["resume_ref"]))
    checkpoint_dir = work / "checkpoint"
    trained = dataclasses.replace(plan, train=train_config)  # on the worker's own device
    ceiling = trial_heap_ceiling(config["memory_bytes"], trained)
    fit(
        policy,
        train_config,
        data,
        validation=validation_set(plan, data),
        callbacks=[_ReportEpochs(here.rank, checkpoint_dir, ceiling)]
        + ([ceiling] if ceiling else []),
        checkpoint_dir=checkpoint_dir,
        resume_from=resume_from,
        max_seconds=config["max_seconds"],
        max_steps=config["max_steps"],
        data_id=data_id(plan, opener),
        world=here,
    )


def fit_data_parallel(
    plan: RunPlan,
    *,
    num_workers: int,
    storage_path: str | Path,
    run_name: str,
    use_gpu: bool = False,
    resources_per_worker: dict[str, float] | None = None,
    resume_from: str | Path | None = None,
    on_epoch: EpochCallback | None = None,
    open_filesystem: FilesystemOpener = open_any_filesystem,
    max_seconds: float | None = None,
    max_steps: int | None = None,
    max_failures: int = 0,
    storage_filesystem: Any = None,
    worker_env: dict[str, str] | None = None,
) -> DataParallelResult:
    """Train ``plan`` with ``fit`` data-parallel over ``num_workers`` Ray Train workers.

    See the module docstring for the full contract. ``storage_path`` (an absolute folder, or a
    bucket path with ``storage_filesystem``) and ``run_name`` locate Ray Train's persisted
    checkpoints: ``storage_path/run_name/epoch_NNNNNN/latest.pt``.
    """
    if not is_v2_enabled():
        raise RuntimeError("fit_data_parallel needs Ray Train V2 (RAY_TRAIN_V2_ENABLED=1)")
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    if plan.train.batch_size % num_workers:
        raise ValueError(
            f"batch_size {plan.train.batch_size} cannot be split evenly over {num_workers} "
            "workers: make it a multiple of num_workers"
        )
    if use_gpu and not plan.train.device.startswith("cuda"):
        plan = dataclasses.replace(plan, train=dataclasses.replace(plan.train, device="cuda"))
    storage = str(storage_path)
    if storage_filesystem is None and "://" not in storage:
        storage = str(Path(storage).resolve())
    loop_config = {
        "plan": plan,
        "open_filesystem": open_filesystem,
        "use_gpu": use_gpu,
        "resume_ref": ray.put(Path(resume_from).read_bytes()) if resume_from else None,
        "max_seconds": max_seconds,
        "max_steps": max_steps,
        "memory_bytes": (resources_per_worker or {}).get("memory", 0),
    }
    queue = Queue(actor_options={"num_cpus": 0})
    trainer = TorchTrainer(
        _worker_loop,
        train_loop_config=loop_config,
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        scaling_config=train.ScalingConfig(
            num_workers=num_workers,
            use_gpu=use_gpu,
            resources_per_worker=resources_per_worker,
        ),
        run_config=train.RunConfig(
            name=run_name,
            storage_path=storage,
            storage_filesystem=storage_filesystem,
            failure_config=train.FailureConfig(max_failures=max_failures),
            callbacks=[_ForwardReports(queue)],
            worker_runtime_env={"env_vars": dict(worker_env)} if worker_env else None,
        ),
    )
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = trainer.fit()
        except BaseException as err:  # re-raised in the caller's thread below
            outcome["error"] = err
        finally:
            queue.put((_DONE, None))

    # trainer.fit() blocks until training ends; run it beside the caller's thread so that
    # on_epoch (e.g. tune.report) runs live, in the thread that called this function.
    runner = threading.Thread(target=run, name=f"linc-dp-{run_name}", daemon=True)
    runner.start()
    result = DataParallelResult()
    try:
        while True:
            try:
                record, checkpoint = queue.get(timeout=1.0)
            except Empty:
                if not runner.is_alive() and queue.empty():
                    break
                continue
            if record == _DONE:
                break
            result.history.append(record)
            if checkpoint is not None:
                result.checkpoint = checkpoint
            if on_epoch is not None:
                on_epoch(record, checkpoint)
    except BaseException:
        # Killing the queue makes the controller's next report fail, which ends the run.
        queue.shutdown(force=True)
        runner.join(timeout=ABORT_WAIT_SECONDS)
        raise
    runner.join()
    queue.shutdown()
    if "error" in outcome:
        raise outcome["error"]
    return result


__all__ = ["CHECKPOINT_FILE", "DataParallelResult", "fit_data_parallel"]
