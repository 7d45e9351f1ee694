"""Training: credit assignment, one REINFORCE step, data sources, checkpoints, the fit loop."""

from linc_core.train.data import FixedData, GeneratedData, ShardedTrainingData, TrainingData
from linc_core.train.loop import (
    BaseCallback,
    Callback,
    FitResult,
    PrintProgress,
    fit,
    initial_policy,
    policy_from_checkpoint,
    validation_decoding,
)
from linc_core.train.step import StepMetrics, train_step

__all__ = [
    "BaseCallback",
    "Callback",
    "FitResult",
    "FixedData",
    "GeneratedData",
    "PrintProgress",
    "ShardedTrainingData",
    "StepMetrics",
    "TrainingData",
    "fit",
    "initial_policy",
    "policy_from_checkpoint",
    "train_step",
    "validation_decoding",
]
