"""Every metric linc records, named once: what it means, which way is better, who logs it.

Code refers to a metric by its constant here (``metrics.TRAIN_BEST_COST``), never by a string
literal, and the groups below (what ``fit`` records per epoch, what a trial's evaluation logs,
what the sweep's parent run carries, the columns of the MLflow runs view) are read from this
table. A new metric is one entry here plus the line that computes it.

Costs are route lengths (exact Euclidean distance unless a convention is named); gaps are
percentages ``100 (cost - reference) / reference``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Record = Literal["epoch", "evaluation", "trial", "sweep", "report"]


@dataclass(frozen=True)
class Metric:
    """One recorded quantity.

    Attributes:
        name: its MLflow key.
        meaning: one sentence (shown in docs and on MLflow pages).
        better: ``lower``, ``higher`` or ``None`` (a count or a position, not a score).
        record: where it is recorded: ``epoch`` (each epoch of ``fit``, step = epoch),
            ``evaluation`` (a trial's final benchmark evaluation), ``trial`` (once per trial
            run), ``sweep`` (the sweep's parent run), ``report`` (written back by the report).
    """

    name: str
    meaning: str
    better: Literal["lower", "higher"] | None
    record: Record


EPOCH = "epoch"
GLOBAL_STEP = "global_step"
SECONDS = "seconds"
TRAIN_SECONDS = "train_seconds"
TRAIN_BEST_COST = "train_best_cost"
TRAIN_MEAN_COST = "train_mean_cost"
LOSS = "loss"
TAU = "tau"
VALIDATION_COST = "validation_cost"
EVAL_COST = "eval_cost"
EVAL_INFEASIBLE = "eval_infeasible"
EVAL_GAP_PYVRP_PCT = "eval_gap_pyvrp_pct"
EVAL_GAP_BKS_PCT = "eval_gap_bks_pct"
EVAL_SECONDS = "eval_seconds"
GAP_VS_VARIANT_PCT = "gap_vs_variant_pct"
NUM_PARAMETERS = "num_parameters"
PEAK_RSS_GB = "peak_rss_gb"
HEAP_TRIMS = "heap_trims"
SWEEP_SECONDS = "sweep_seconds"
BEST_EVAL_COST = "best_eval_cost"
TRIALS = "trials"
TRIALS_FINISHED = "trials_finished"
TRIALS_FAILED = "trials_failed"

METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric(EPOCH, "epochs trained so far (1-based)", None, "epoch"),
        Metric(GLOBAL_STEP, "optimiser steps taken so far", None, "epoch"),
        Metric(SECONDS, "wall time of the epoch, in seconds", "lower", "epoch"),
        Metric(
            TRAIN_SECONDS,
            "training seconds spent so far, steps only (a time budget's clock: validation and "
            "checkpoints not counted)",
            None,
            "epoch",
        ),
        Metric(
            TRAIN_BEST_COST,
            "mean over the epoch's batches of each instance's best rollout cost",
            "lower",
            "epoch",
        ),
        Metric(TRAIN_MEAN_COST, "mean rollout cost over the epoch's batches", "lower", "epoch"),
        Metric(LOSS, "mean REINFORCE loss over the epoch's steps", None, "epoch"),
        Metric(TAU, "the soft top-1 temperature at the epoch's last step", None, "epoch"),
        Metric(
            VALIDATION_COST,
            "mean best-of-K cost on the fixed validation instances",
            "lower",
            "epoch",
        ),
        Metric(
            EVAL_COST,
            "mean exact cost of the final policy's feasible solutions on the evaluation set",
            "lower",
            "evaluation",
        ),
        Metric(
            EVAL_INFEASIBLE,
            "evaluation instances whose solution the verifier refused",
            "lower",
            "evaluation",
        ),
        Metric(
            EVAL_GAP_PYVRP_PCT,
            "mean gap of the evaluation costs to PyVRP's solutions of the same instances",
            "lower",
            "evaluation",
        ),
        Metric(
            EVAL_GAP_BKS_PCT,
            "mean gap of the evaluation costs to the set's best-known values (where it has them)",
            "lower",
            "evaluation",
        ),
        Metric(EVAL_SECONDS, "wall time of the final evaluation's decoding", "lower", "evaluation"),
        Metric(
            GAP_VS_VARIANT_PCT,
            "gap of the trial's eval_cost to the compared variant's (the ablation table's column)",
            "lower",
            "report",
        ),
        Metric(NUM_PARAMETERS, "trainable parameters of the policy", None, "trial"),
        Metric(PEAK_RSS_GB, "peak resident memory of the trial's process, in GB", "lower", "trial"),
        Metric(
            HEAP_TRIMS,
            "training steps after which the trial's process gave its free heap back to stay "
            "within the memory it reserved (cluster.memory_per_trial_gb or the estimate); "
            "a data-parallel trial's workers', summed",
            None,
            "trial",
        ),
        Metric(SWEEP_SECONDS, "wall time of the whole sweep, in seconds", "lower", "sweep"),
        Metric(BEST_EVAL_COST, "the lowest eval_cost among the sweep's trials", "lower", "sweep"),
        Metric(TRIALS, "trials in the sweep", None, "sweep"),
        Metric(TRIALS_FINISHED, "trials that finished", None, "sweep"),
        Metric(TRIALS_FAILED, "trials that failed for good", None, "sweep"),
    )
}


def recorded(record: Record) -> tuple[str, ...]:
    """The names of the metrics recorded in ``record``, in table order."""
    return tuple(name for name, metric in METRICS.items() if metric.record == record)


# What fit records per epoch and a trial logs per epoch (the fit record also carries
# global_step, which MLflow's step already is).
EPOCH_METRICS: tuple[str, ...] = tuple(m for m in recorded("epoch") if m != GLOBAL_STEP)
# The columns of the MLflow runs view that linc's sweeps save on their experiment.
RUNS_TABLE_METRICS: tuple[str, ...] = (
    EVAL_COST,
    GAP_VS_VARIANT_PCT,
    EVAL_GAP_PYVRP_PCT,
    EVAL_INFEASIBLE,
    TRAIN_BEST_COST,
    VALIDATION_COST,
    EPOCH,
    PEAK_RSS_GB,
)


def per_decoding(name: str, decoding: str) -> str:
    """The name of an evaluation metric of a further decoding of the same set
    (``eval_cost_sgbs``: ``data.eval_also``); the first decoding's is ``name`` itself."""
    return f"{name}_{decoding}"


# What the console's progress lines show of a running trial.
PROGRESS_METRICS: tuple[str, ...] = (TRAIN_BEST_COST, VALIDATION_COST)


__all__ = [
    "EPOCH_METRICS",
    "METRICS",
    "PROGRESS_METRICS",
    "RUNS_TABLE_METRICS",
    "Metric",
    "per_decoding",
    "recorded",
]
