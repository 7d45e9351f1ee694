"""Training: credit assignment, one REINFORCE step, data sources, checkpoints, the fit loop."""

from linc_core.train.data import FixedData, GeneratedData, ShardedTrainingData, TrainingData
from linc_core.train.loop import (
    BaseCallback,
    Callback,
    FitResult,
    PrintProgress,
    evaluate_best_of_k,
    fit,
    initial_policy,
    policy_from_checkpoint,
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
    "evaluate_best_of_k",
    "fit",
    "initial_policy",
    "policy_from_checkpoint",
    "train_step",
]
