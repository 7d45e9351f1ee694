"""A plain training loop: no Ray, no Lightning; callbacks for metrics and checkpoints.

    policy = initial_policy(model_config, train_config)
    result = fit(policy, train_config, GeneratedData(...), validation=instances,
                 checkpoint_dir="runs/x", callbacks=[PrintProgress()])

Every random draw of step ``s`` derives from the seed ``(seed, "rollout", s)`` (keyed draws,
the same on every device) and every batch from ``(seed, epoch, batch)``, so a run resumed from a
checkpoint is bit-identical to an uninterrupted one on CPU. ``config.precision`` is resolved
once for the device (``linc_core.train.precision``; ``auto``: fp32, measured faster on CUDA
and CPU) and reported as ``FitResult.precision``.

Data-parallel (``world`` of size N > 1, ``linc_core.train.distributed``): every rank builds the
same whole batch and the same step generator, rolls out its B / N rows and sums gradients, so
the run follows the single-process run up to float rounding. Rank 0's parameters are broadcast
at the start. Only rank 0 writes ``latest.pt`` and calls the callbacks, except callbacks with a
true ``all_ranks`` attribute (e.g. a reporter that must be called on every worker), which every
rank calls with the same (global) metrics; ``on_checkpoint`` fires only where a checkpoint was
written. Validation is decoded on every rank (identical parameters, identical result), which
keeps the ranks in step without a broadcast. The time budget is agreed across ranks.

A time budget (``config.budget_minutes``, :mod:`linc_core.train.budget`): the schedules follow
the fraction of the budget spent, the run ends after the step that spends it (its last epoch is
recorded with the batches it did), and ``train_seconds`` (the budget's clock) is in every epoch's
record and checkpoint, so a resumed run continues on the budget it had left.

Stopping inside an epoch (``stop``, e.g. a preemption notice): after the step during which
``stop()`` turned true, ``fit`` writes ``latest.pt`` with the batches done so far of the current
epoch and returns with ``FitResult.stopped_by_request``; resuming from that checkpoint continues
with the next batch and is bit-identical to a run that never stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from linc_core.config import ModelConfig, TrainConfig
from linc_core.decoding import DecodeConfig, decode
from linc_core.instances import Instance
from linc_core.metrics import (
    EPOCH,
    GLOBAL_STEP,
    LOSS,
    SECONDS,
    TAU,
    TRAIN_BEST_COST,
    TRAIN_MEAN_COST,
    TRAIN_SECONDS,
    VALIDATION_COST,
)
from linc_core.model.policy import LincPolicy
from linc_core.model.reference_format import (
    load_reference_state_dict,
    reference_initial_state_dict,
)
from linc_core.train.budget import BudgetClock, Clock
from linc_core.train.checkpoint import (
    CHECKPOINT_NAME,
    build_payload,
    check_resumable,
    load_checkpoint,
    save_checkpoint,
)
from linc_core.train.data import TrainingData
from linc_core.train.distributed import SINGLE, World, agree_any, broadcast_module_
from linc_core.train.precision import resolve_precision
from linc_core.train.step import StepMetrics, train_step
from linc_core.utils.seeding import derive_seed

logger = logging.getLogger(__name__)


class Callback(Protocol):
    """Hooks called by ``fit``; implement any subset (see ``BaseCallback``)."""

    def on_step(self, global_step: int, metrics: StepMetrics) -> None: ...

    def on_epoch(self, epoch: int, metrics: dict[str, Any]) -> None: ...

    def on_checkpoint(self, epoch: int, path: Path) -> None: ...


class BaseCallback:
    # Data-parallel fit() calls a callback on rank 0 only unless this is True.
    all_ranks: bool = False

    def on_step(self, global_step: int, metrics: StepMetrics) -> None:
        return None

    def on_epoch(self, epoch: int, metrics: dict[str, Any]) -> None:
        return None

    def on_checkpoint(self, epoch: int, path: Path) -> None:
        return None


class PrintProgress(BaseCallback):
    """One console line per epoch."""

    def on_epoch(self, epoch: int, metrics: dict[str, Any]) -> None:
        validation = metrics.get(VALIDATION_COST)
        extra = f"  validation {validation:.4f}" if validation is not None else ""
        print(
            f"epoch {epoch + 1:>5}  train best-of-K {metrics['train_best_cost']:.4f}  "
            f"mean {metrics['train_mean_cost']:.4f}  tau {metrics['tau']:.3g}  "
            f"{metrics['seconds']:.1f}s{extra}",
            flush=True,
        )


@dataclass
class FitResult:
    policy: LincPolicy
    history: list[dict[str, Any]] = field(default_factory=list)
    epochs_done: int = 0
    global_step: int = 0
    last_checkpoint: Path | None = None
    stopped_early: bool = False
    stopped_by_request: bool = False
    precision: str = "fp32"  # the effective precision (``auto`` resolved for the device)
    train_seconds: float = 0.0  # training seconds spent (the budget's clock), earlier runs too


def validation_decoding(config: TrainConfig) -> DecodeConfig:
    """How ``fit`` decodes its validation set: greedy per z-vector (or per POMO start), K of
    them per instance, best of K, seeded by ``(seed, "validation")`` (``linc_core.decoding``'s
    seeding: the same instance gets the same z-vectors in every epoch and every batch)."""
    return DecodeConfig(
        method="multistart" if config.multi_start else "greedy",
        num_z=config.num_rollouts,
        num_starts=config.num_rollouts if config.multi_start else None,
        augment=1,
        seed=derive_seed(config.seed, "validation"),
        compile=config.compile,
    )


def fit(
    policy: LincPolicy,
    config: TrainConfig,
    data: TrainingData,
    *,
    validation: Instance | None = None,
    callbacks: Sequence[Callback] = (),
    checkpoint_dir: str | Path | None = None,
    resume_from: str | Path | None = None,
    max_seconds: float | None = None,
    max_steps: int | None = None,
    data_id: str | None = None,
    morph_from: LincPolicy | None = None,
    world: World = SINGLE,
    stop: Callable[[], bool] | None = None,
    clock: Clock | None = None,
) -> FitResult:
    """Train ``policy`` for ``config.epochs`` epochs, or ``config.budget_minutes`` of training
    (or until ``max_seconds``/``max_steps``).

    Args:
        policy: the model (moved to ``config.device``).
        config: training settings.
        data: batches by (epoch, index).
        validation: fixed instances decoded every ``config.validation_every`` epochs
            (``validation_decoding``); ``validation_cost`` is their mean best-of-K cost.
        callbacks: progress, tracking, checkpoint hooks.
        checkpoint_dir: ``latest.pt`` is written there after every epoch.
        resume_from: a checkpoint to continue from (model, optimiser, epoch, history).
        max_seconds: stop early after the epoch that crosses this many seconds.
        max_steps: stop early after the step that crosses this many steps.
        data_id: identifier of the training data (manifest checksum), stored in checkpoints.
        morph_from: the frozen policy whose scores morphing starts from (``config.morph_epochs``;
            lambda 0 -> 1 over those epochs, paper section 3.4).
        world: data-parallel workers (default: one process). Every rank calls ``fit`` with the
            same arguments; batches must divide by ``world.size``; rank 0 alone writes the
            checkpoint and runs callbacks (see the module docstring).
        stop: asked after every step; when it returns True, ``fit`` checkpoints the position
            inside the epoch and returns (see the module docstring). Single process only.
        clock: what the budget's seconds are read from (None: ``config.budget_clock``'s;
            tests inject a clock of their own).
    """
    if stop is not None and world.size > 1:
        raise ValueError("fit: stop is for single-process runs (world.size == 1)")
    data_batch = getattr(data, "batch_size", None)
    if data_batch is not None and data_batch != config.batch_size:
        raise ValueError(
            f"fit: the data's batch_size ({data_batch}) differs from the training config's "
            f"batch_size ({config.batch_size}); build the data from the config "
            "(GeneratedData.for_training, FixedData(instances, config.batch_size, seed))"
        )
    device = torch.device(config.device)
    policy.to(device)
    optimizer = torch.optim.Adam(
        policy.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    precision = resolve_precision(config.precision, device)
    scaler = precision.grad_scaler()
    result = FitResult(policy=policy, precision=precision.name)
    start_epoch, partial, spent = 0, None, 0.0
    if resume_from is not None:
        payload = load_checkpoint(resume_from, map_location=device)
        check_resumable(payload, policy.config, config, data_id, name=str(resume_from))
        policy.load_state_dict(payload["model_state"])
        if payload["optimizer_state"] is not None:
            optimizer.load_state_dict(payload["optimizer_state"])
        start_epoch = payload["epoch"]
        result.global_step = payload["global_step"]
        result.history = list(payload["history"])
        partial = payload.get("partial_epoch")
        spent = payload.get(TRAIN_SECONDS) or sum(r.get(SECONDS, 0.0) for r in result.history)
    budget = BudgetClock.start(config, spent, clock)
    result.train_seconds = budget.spent
    broadcast_module_(policy, world)
    if not world.is_main:
        callbacks = [c for c in callbacks if getattr(c, "all_ranks", False)]
    if morph_from is not None:
        morph_from.to(device).eval()
        for parameter in morph_from.parameters():
            parameter.requires_grad_(False)
    total_batches = config.epochs * data.batches_per_epoch
    began = time.perf_counter()
    for epoch in range(start_epoch, config.epochs):
        if budget.spent_out():  # resumed after the budget ran out: nothing left to train
            break
        epoch_start = time.perf_counter()
        step_metrics: list[StepMetrics] = []
        first_batch = 0
        if partial is not None:  # resumed inside this epoch
            step_metrics = [StepMetrics(**m) for m in partial["steps"]]
            first_batch, epoch_start = partial["batches"], epoch_start - partial["seconds"]
            partial = None
        for index in range(first_batch, data.batches_per_epoch):
            progress = budget.progress(result.global_step, total_batches)
            morph = None
            if morph_from is not None and config.morph_epochs > 0:
                morph = (morph_from, min(1.0, epoch / config.morph_epochs))
            with budget.step():
                instance = data.batch(epoch, index).to(device)
                metrics = train_step(
                    policy,
                    optimizer,
                    instance,
                    config,
                    progress,
                    derive_seed(config.seed, "rollout", result.global_step),
                    precision=precision,
                    scaler=scaler,
                    morph=morph,
                    world=world,
                )
            budget.agree(world, device)  # one progress on every rank: same tau, mask and end
            result.global_step += 1
            step_metrics.append(metrics)
            for callback in callbacks:
                callback.on_step(result.global_step, metrics)
            if max_steps is not None and result.global_step >= max_steps:
                break
            if budget.spent_out():
                break
            if stop is not None and index + 1 < data.batches_per_epoch and stop():
                if checkpoint_dir is not None:
                    done = {
                        "batches": index + 1,
                        "steps": [dataclasses.asdict(m) for m in step_metrics],
                        "seconds": time.perf_counter() - epoch_start,
                    }
                    result.train_seconds = budget.spent
                    result.last_checkpoint = _save(
                        checkpoint_dir, policy, optimizer, config, result, epoch, data_id, done
                    )
                result.stopped_early = result.stopped_by_request = True
                return result
        record: dict[str, Any] = {
            EPOCH: epoch + 1,
            GLOBAL_STEP: result.global_step,
            TRAIN_BEST_COST: sum(m.best_cost for m in step_metrics) / len(step_metrics),
            TRAIN_MEAN_COST: sum(m.mean_cost for m in step_metrics) / len(step_metrics),
            LOSS: sum(m.loss for m in step_metrics) / len(step_metrics),
            TAU: step_metrics[-1].tau,
            SECONDS: time.perf_counter() - epoch_start,
            TRAIN_SECONDS: budget.spent,
        }
        result.train_seconds = budget.spent
        last = budget.spent_out()  # a budget run ends validated (its time-to-quality point)
        if validation is not None and ((epoch + 1) % config.validation_every == 0 or last):
            decoded = decode(policy, validation, validation_decoding(config))
            record[VALIDATION_COST] = float(decoded.cost.mean())
        result.history.append(record)
        result.epochs_done = epoch + 1
        for callback in callbacks:
            callback.on_epoch(epoch, record)
        if checkpoint_dir is not None and world.is_main:
            path = _save(checkpoint_dir, policy, optimizer, config, result, epoch + 1, data_id)
            result.last_checkpoint = path
            for callback in callbacks:
                callback.on_checkpoint(epoch, path)
        out_of_time = max_seconds is not None and time.perf_counter() - began >= max_seconds
        if max_seconds is not None:
            # Ranks' clocks differ: stop together or the others wait forever in an all-reduce.
            out_of_time = agree_any(out_of_time, world, device)
        out_of_steps = max_steps is not None and result.global_step >= max_steps
        requested = stop is not None and epoch + 1 < config.epochs and stop()
        if budget.spent_out():  # the run's planned end
            break
        if out_of_time or out_of_steps or requested:
            result.stopped_early = epoch + 1 < config.epochs
            result.stopped_by_request = requested
            break
    return result


def _save(
    checkpoint_dir: str | Path,
    policy: LincPolicy,
    optimizer: torch.optim.Optimizer,
    config: TrainConfig,
    result: FitResult,
    epochs_done: int,
    data_id: str | None,
    partial_epoch: dict[str, Any] | None = None,
) -> Path:
    """Write ``checkpoint_dir/latest.pt`` (and its manifest) at the run's current position."""
    payload = build_payload(
        model_config=policy.config,
        train_config=config,
        model_state=policy.state_dict(),
        optimizer_state=optimizer.state_dict(),
        epoch=epochs_done,
        global_step=result.global_step,
        history=result.history,
        data_id=data_id,
        partial_epoch=partial_epoch,
        train_seconds=result.train_seconds,
    )
    return save_checkpoint(Path(checkpoint_dir) / CHECKPOINT_NAME, payload)


def initial_policy(
    model_config: ModelConfig, train_config: TrainConfig, init_seed: int | None = None
) -> LincPolicy:
    """A new policy with the initial weights ``train_config.init`` asks for.

    ``linc``: PyTorch's default initialisation under ``init_seed`` (default: the seed
    ``(seed, "init")``). ``reference``: the reference implementation's initial weights for
    ``torch.manual_seed(seed)`` (``reference_initial_state_dict``), so that the run starts where
    the reference's run with the same seed does.
    """
    if init_seed is None:
        init_seed = derive_seed(train_config.seed, "init")
    torch.manual_seed(init_seed)
    policy = LincPolicy(model_config)
    if train_config.init == "reference":
        state = reference_initial_state_dict(model_config, train_config.seed)
        load_reference_state_dict(policy, state)
    return policy


def policy_from_checkpoint(
    path: str | Path, device: str = "cpu"
) -> tuple[LincPolicy, dict[str, Any]]:
    """Rebuild a policy from a linc checkpoint (its config is inside)."""
    payload = load_checkpoint(path, map_location=device)
    policy = LincPolicy(payload["model_config"]).to(device)
    policy.load_state_dict(payload["model_state"])
    return policy, payload


def warm_start(policy: LincPolicy, source: LincPolicy) -> list[str]:
    """Copy every parameter of ``source`` whose name and shape match into ``policy``.

    The paper warm-starts TSP/CVRP LINC from converged PolyNet weights: the encoder and decoder
    carry over, the LINC scorer starts fresh. Returns the copied names.
    """
    ours = policy.state_dict()
    copied = {
        name: value
        for name, value in source.state_dict().items()
        if name in ours and ours[name].shape == value.shape
    }
    policy.load_state_dict(copied, strict=False)
    return sorted(copied)


__all__ = [
    "BaseCallback",
    "Callback",
    "FitResult",
    "PrintProgress",
    "fit",
    "policy_from_checkpoint",
    "validation_decoding",
    "warm_start",
]
