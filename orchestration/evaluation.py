"""Final evaluation of a trial's policy: decode, verify every solution, log rows and a route plot.

The decoding itself is ``linc_core.decode`` (z-sampling with the dihedral augmentation, as the
paper's ablation protocol evaluates); every solution is re-scored by the independent verifier, and
an infeasible one is kept as a row with its violations, never dropped.
"""

from __future__ import annotations

import csv
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from linc_core.decode import DecodeConfig, decode
from linc_core.instances import Instance
from linc_core.model import LincPolicy
from linc_core.seeding import derive_seed
from linc_core.verify import verify_instance
from orchestration.config import DataSpec

ROW_FIELDS = ("instance", "cost", "feasible", "violations", "routes")


@dataclass
class Evaluation:
    """Per-instance rows of one evaluation set and the solutions behind them."""

    set_name: str
    rows: list[dict[str, Any]]
    solutions: list[list[list[int]]] = field(default_factory=list)
    instances: Instance | None = None

    def metrics(self) -> dict[str, float]:
        costs = [row["cost"] for row in self.rows]
        return {
            "eval_cost": sum(costs) / len(costs),
            "eval_infeasible": float(sum(not row["feasible"] for row in self.rows)),
        }


def evaluate_policy(
    policy: LincPolicy, instances: Instance, data: DataSpec, set_name: str
) -> Evaluation:
    """Decode ``instances`` ([B] instances) with the configured budget; verify each solution."""
    method = "multistart" if policy.config.z_dim == 0 else data.eval_decoding
    config = DecodeConfig(
        method=method,
        num_z=data.eval_rollouts,
        augment=data.eval_augment,
        seed=derive_seed(data.seed, "final-evaluation"),
    )
    result = decode(policy, instances, config)
    names = instances.names
    rows = []
    for index, routes in enumerate(result.routes):
        check = verify_instance(instances, index, routes, convention="exact")
        rows.append(
            {
                "instance": names[index] if names else str(index),
                "cost": float(check.cost),
                "feasible": check.feasible,
                "violations": ";".join(v.kind for v in check.violations),
                "routes": " | ".join(" ".join(map(str, route)) for route in routes),
            }
        )
    return Evaluation(set_name, rows, [list(map(list, r)) for r in result.routes], instances)


def write_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    """Atomically write ``rows`` as CSV."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=ROW_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
    return path


def log_evaluation(mlflow: Any, evaluation: Evaluation, folder: Path) -> None:
    """Log the rows (CSV), the mean cost and a route plot of the first instance to MLflow."""
    rows_path = write_rows(evaluation.rows, folder / "evaluation_rows.csv")
    mlflow.log_artifact(str(rows_path))
    mlflow.log_metrics(evaluation.metrics())
    mlflow.set_tag("eval_set", evaluation.set_name)
    if evaluation.instances is not None and evaluation.solutions:
        from linc_core.evaluate import plot_routes

        plot = plot_routes(
            evaluation.instances,
            0,
            evaluation.solutions[0],
            folder / "routes.png",
            title=f"{evaluation.rows[0]['instance']}: {evaluation.rows[0]['cost']:.2f}",
        )
        mlflow.log_artifact(str(plot))


__all__ = ["Evaluation", "evaluate_policy", "log_evaluation", "write_rows"]
