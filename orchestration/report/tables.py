"""The sweeps' tables from their result rows: the paper-shaped ablation table.

A row is a trial's ``{"variant", "seed", "eval_cost", "eval_infeasible", "seconds", ...}``, from
a finished Tune experiment (:func:`result_row`) or from MLflow runs (``linc-report``); nothing
here needs Ray.
"""

from __future__ import annotations

from typing import Any

from linc_core.metrics import (
    EPOCH,
    EVAL_COST,
    EVAL_INFEASIBLE,
    PEAK_RSS_GB,
    TRAIN_BEST_COST,
    VALIDATION_COST,
)
from linc_core.presets import PRESETS
from orchestration.config.platform import dotted_get
from orchestration.failures import one_line


def result_row(result: Any, keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """A trial's row of a sweep's table: its variant, seed, metrics, error and ``keys``."""
    config = result.config or {}
    metrics = result.metrics or {}
    return {
        "variant": config.get("model", {}).get("variant"),
        "seed": config.get("train", {}).get("seed"),
        EVAL_COST: metrics.get(EVAL_COST),
        EVAL_INFEASIBLE: metrics.get(EVAL_INFEASIBLE),
        VALIDATION_COST: metrics.get(VALIDATION_COST),
        TRAIN_BEST_COST: metrics.get(TRAIN_BEST_COST),
        "epochs": metrics.get(EPOCH),
        "seconds": metrics.get("time_total_s"),
        PEAK_RSS_GB: metrics.get(PEAK_RSS_GB),
        "error": None if result.error is None else one_line(result.error),
        "config": {key: dotted_get(config, key) for key in keys},
    }


def aggregate_rows(rows: list[dict[str, Any]], compare_to: str | None) -> list[dict[str, Any]]:
    """Mean over seeds per variant (in preset order) with the gap to ``compare_to`` in percent."""
    by_variant: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_variant.setdefault(row["variant"], []).append(row)
    order = [v for v in PRESETS if v in by_variant]
    table = []
    for variant in order:
        runs = by_variant[variant]
        costs = [r[EVAL_COST] for r in runs if r[EVAL_COST] is not None]
        table.append(
            {
                "variant": variant,
                "label": PRESETS[variant].label,
                "seeds": len(runs),
                "obj": sum(costs) / len(costs) if costs else None,
                "infeasible": sum(r[EVAL_INFEASIBLE] or 0 for r in runs),
                "seconds": sum(r["seconds"] or 0 for r in runs) / len(runs),
            }
        )
    baseline_obj = next((r["obj"] for r in table if r["variant"] == compare_to), None)
    for row in table:
        row["gap_pct"] = (
            100.0 * (row["obj"] - baseline_obj) / baseline_obj
            if row["obj"] is not None and baseline_obj
            else None
        )
    return table


def ablation_table(rows: list[dict[str, Any]], compare_to: str | None) -> str:
    """Markdown shaped like the paper's ablation table: Variant, Obj., Gap vs ``compare_to``,
    Time."""
    gap_title = f"Gap vs {PRESETS[compare_to].label} (%)" if compare_to else "Gap (%)"
    lines = [
        f"| Variant | Obj. | {gap_title} | Infeasible | Seeds | Time (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in aggregate_rows(rows, compare_to):
        obj = f"{row['obj']:.2f}" if row["obj"] is not None else "failed"
        gap = f"{row['gap_pct']:+.2f}" if row["gap_pct"] is not None else "-"
        lines.append(
            f"| {row['label']} | {obj} | {gap} | {row['infeasible']:.0f} | {row['seeds']} "
            f"| {row['seconds']:.0f} |"
        )
    return "\n".join(lines)


__all__ = ["ablation_table", "aggregate_rows", "result_row"]
