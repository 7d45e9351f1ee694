"""What a trial reports to Tune after each epoch: the record with the checkpoint folder
(:class:`TuneReportCallback`), Tune's stop and a full storage as the trial's own exceptions, and
the faults a sweep injects on purpose (``fault.*``: exercising retries, stalls and the memory
monitor)."""

from __future__ import annotations

import errno
import time
from pathlib import Path
from typing import Any

from ray import tune

from linc_core.config import TrainConfig
from linc_core.metrics import EPOCH, PEAK_RSS_GB, TRAIN_SECONDS
from linc_core.train.budget import ends_after
from linc_core.train.loop import BaseCallback
from linc_core.utils.runtime import peak_rss_gb
from orchestration.config.sections import FaultSpec
from orchestration.data.storage import is_out_of_space
from orchestration.experiment.folder import SweepFolder
from orchestration.tracking.writer import RunWriter
from orchestration.trial.preemption import TrialGuard


class InjectedFault(RuntimeError):
    """Raised by ``fault.fail_at_epoch`` to exercise Tune's retry-from-checkpoint path."""


class StoppedByTune(Exception):
    """Tune ended the trial at one of its reports: its scheduler stopped it early, or the sweep
    was stopped. Not an error of the trial: the driver settles its run's status."""

    def __init__(self, epoch: int):
        super().__init__(f"stopped by Tune after epoch {epoch}")
        self.epoch = epoch

    def __reduce__(self) -> tuple:
        return type(self), (self.epoch,)  # pickled whole, as Ray sends it to the driver


class StorageFull(OSError):
    """The trial's storage has no space left for its checkpoint: the message names the folder."""


def report_to_tune(metrics: dict[str, Any], checkpoint_dir: Path, epoch: int) -> None:
    """``tune.report`` with the checkpoint folder; Tune's stop (a ``SystemExit`` raised in the
    training thread at a report) becomes :class:`StoppedByTune`, and a storage out of space
    (Tune's upload says only "Error writing bytes to file") :class:`StorageFull`."""
    checkpoint = tune.Checkpoint.from_directory(str(checkpoint_dir))
    try:
        tune.report(metrics, checkpoint=checkpoint)
    except SystemExit:
        raise StoppedByTune(epoch) from None
    except OSError as err:
        if not is_out_of_space(err):
            raise
        where = SweepFolder.of_trial().uri()
        raise StorageFull(
            errno.ENOSPC,
            f"No space left on device: the checkpoint of epoch {epoch} could not be written to "
            f"{where}; free space there and run the same command again (it resumes from the "
            "newest intact checkpoint)",
        ) from err


class TuneReportCallback(BaseCallback):
    """After each epoch's checkpoint is written, save the tracking journal beside it and report
    the epoch record and the folder to Tune (not once a stop is requested: the process is ending
    and the trainable persists the checkpoint itself).

    The last epoch (``train``'s last, or the one that spends its time budget) is reported by
    the trainable with the final evaluation, so a scheduler deciding on a report (ASHA stops
    every trial at its ``max_t``) never stops a trial between its last epoch and evaluation.
    """

    def __init__(
        self,
        checkpoint_dir: Path,
        writer: RunWriter | None = None,
        fault: FaultSpec | None = None,
        stopping: TrialGuard | None = None,
        train: TrainConfig | None = None,
    ):
        self.checkpoint_dir = checkpoint_dir
        self.writer = writer
        self.fault = fault or FaultSpec()
        self.stopping = stopping
        self.train = train
        self._pending: dict[str, Any] | None = None
        self._held: bytes | None = None

    def on_epoch(self, epoch: int, metrics: dict[str, Any]) -> None:
        self._pending = {k: v for k, v in metrics.items() if isinstance(v, int | float)}

    def on_checkpoint(self, epoch: int, path: Path) -> None:
        if self.stopping is not None and self.stopping.requested():
            return
        if self.writer is not None:
            self.writer.save(self.checkpoint_dir)
        metrics = (self._pending or {EPOCH: epoch + 1}) | {PEAK_RSS_GB: peak_rss_gb()}
        self._pending = None
        if self.train is None or not ends_after(self.train, epoch, metrics.get(TRAIN_SECONDS)):
            report_to_tune(metrics, self.checkpoint_dir, epoch + 1)
        if self.fault.fail_at_epoch is not None and epoch + 1 == self.fault.fail_at_epoch:
            at = self.fault.fail_at_epoch
            raise InjectedFault(f"fault.fail_at_epoch={at}: failing on purpose")
        if self.fault.stall_at_epoch is not None and epoch + 1 == self.fault.stall_at_epoch:
            while True:  # hung, not dead: only the driver's stall watch ends this process
                time.sleep(60)
        if self.fault.memory_spike_gb and epoch == 0:
            self._held = b"x" * int(self.fault.memory_spike_gb * (1 << 30))  # resident pages


__all__ = [
    "InjectedFault",
    "StorageFull",
    "StoppedByTune",
    "TuneReportCallback",
    "report_to_tune",
]
