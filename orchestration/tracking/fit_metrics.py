"""``fit``'s epoch records as MLflow metrics: which ones, and the callback that logs
them through a run writer."""

from __future__ import annotations

from typing import Any

from linc_core.metrics import EPOCH, EPOCH_METRICS
from linc_core.train.loop import BaseCallback


class MLflowCallback(BaseCallback):
    """Log each epoch's metrics of ``fit`` to the active MLflow run (step = 1-based epoch).

    ``mlflow_module``: what to log through, a trial's ``orchestration.tracking.writer.RunWriter``
    (defaults to the ``mlflow`` module and its active run).
    """

    def __init__(self, mlflow_module: Any = None, metrics: tuple[str, ...] = EPOCH_METRICS):
        if mlflow_module is None:
            import mlflow as mlflow_module
        self._mlflow = mlflow_module
        self._metrics = metrics

    def on_epoch(self, epoch: int, metrics: dict[str, Any]) -> None:
        values = {
            name: float(metrics[name])
            for name in self._metrics
            if name in metrics and metrics[name] is not None
        }
        if values:
            self._mlflow.log_metrics(values, step=int(metrics.get(EPOCH, epoch + 1)))


__all__ = ["MLflowCallback"]
