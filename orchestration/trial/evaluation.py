"""Final evaluation of a trial's policy, logged to its MLflow run.

Decoding, verification and scoring are ``linc_core.evaluate.evaluate_policy`` (every solution
re-checked by the independent verifier; an infeasible one is an error row, never dropped); this
module decodes with the budget of the plan's evaluation source and logs the rows, the summary
and a route plot as artifacts of the trial's run.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from linc_core.decoding import DecodeConfig
from linc_core.evaluate import (
    Evaluation,
    evaluate_policy,
    planned_rollouts,
    plot_routes,
    pyvrp_costs,
    rows_csv,
    summary_json,
)
from linc_core.instances import Instance
from linc_core.metrics import EVAL_COST, EVAL_GAP_PYVRP_PCT, EVAL_INFEASIBLE
from linc_core.model import LincPolicy
from linc_core.runs.plan import EvaluationSource
from linc_core.utils.atomic import write_atomic
from linc_core.utils.progress import Progress


def decode_config(
    policy: LincPolicy, source: EvaluationSource, compiled: bool = False
) -> DecodeConfig:
    """The final-evaluation budget: z-sampling (or POMO starts for a model without z);
    ``compiled``: the run's ``train.compile``, which the evaluation follows."""
    method = "multistart" if policy.config.z_dim == 0 else source.decoding
    return DecodeConfig(
        method=method,
        num_z=source.rollouts,
        augment=source.augment,
        seed=source.seed,
        compile=compiled,
    )


def evaluate_trial(
    policy: LincPolicy,
    instances: Instance,
    source: EvaluationSource,
    label: str = "",
    compiled: bool = False,
) -> Evaluation:
    """Decode ``instances`` (``[B]``) with the source's budget; exact Euclidean costs.

    A long evaluation prints a progress line every 30 s (``label`` names the trial): the
    driver's console shows the trial's last epoch, then nothing until it finishes.
    """
    config = decode_config(policy, source, compiled)
    pyvrp = None
    if source.pyvrp_seconds > 0:  # the reference each run's gap is measured against
        singles = [instances.select([i]) for i in range(instances.batch_size)]
        pyvrp = pyvrp_costs(singles, "exact", source.pyvrp_seconds)
    total = planned_rollouts(config, instances, policy.config.z_dim)
    desc = f"{label} evaluation ({config.label})".strip()
    with Progress(total, desc, "rollout", stream=sys.stdout, interval=30.0) as progress:
        return evaluate_policy(
            policy, instances, config, convention="exact", pyvrp=pyvrp, progress=progress.update
        )


def evaluation_metrics(evaluation: Evaluation) -> dict[str, float]:
    """``eval_cost`` (mean exact cost over feasible solutions), ``eval_infeasible`` (count)
    and, where the instances have a PyVRP reference, ``eval_gap_pyvrp_pct`` (mean gap to it)."""
    mean = evaluation.summary["mean_cost"]
    metrics = {
        EVAL_COST: float(mean) if math.isfinite(mean) else math.inf,
        EVAL_INFEASIBLE: float(evaluation.summary["errors"]),
    }
    gap = evaluation.summary["mean_pyvrp_gap_pct"]
    if math.isfinite(gap):
        metrics[EVAL_GAP_PYVRP_PCT] = float(gap)
    return metrics


def log_evaluation(
    mlflow: Any, evaluation: Evaluation, instances: Instance, set_name: str, folder: Path
) -> None:
    """Log rows (CSV), summary (JSON), metrics and a route plot of the first instance."""
    folder.mkdir(parents=True, exist_ok=True)
    rows_path = folder / "evaluation_rows.csv"
    write_atomic(rows_path, rows_csv(evaluation.rows))
    summary_path = folder / "evaluation_summary.json"
    write_atomic(summary_path, summary_json(evaluation.summary))
    mlflow.log_artifact(str(rows_path))
    mlflow.log_artifact(str(summary_path))
    mlflow.log_metrics(evaluation_metrics(evaluation))
    mlflow.set_tag("eval_set", set_name)
    first = evaluation.rows[0]
    solution = evaluation.solutions.get(first.instance)
    if solution:
        plot_path = folder / "routes.png"
        title = f"{set_name} {first.instance}: {first.cost_exact:.2f}"
        write_atomic(plot_path, plot_routes(instances.select([0]), solution, title))
        mlflow.log_artifact(str(plot_path))


__all__ = ["decode_config", "evaluate_trial", "evaluation_metrics", "log_evaluation"]
