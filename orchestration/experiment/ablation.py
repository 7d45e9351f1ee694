"""The ablation sweep: every variant x seed as one Tune experiment, then the paper-shaped
table and the report on the sweep's parent run."""

from __future__ import annotations

import dataclasses
import json
import time

from ray import tune

from linc_core.metrics import SWEEP_SECONDS
from orchestration.config.platform import PlatformConfig
from orchestration.experiment.runner import SweepResult, result_row, run_experiment, sweep_result
from orchestration.report.ablation import log_ablation_report
from orchestration.report.tables import ablation_table


def run_ablation(config: PlatformConfig) -> SweepResult:
    """The ablation: every variant x seed as one Tune experiment, then the paper-shaped table."""
    spec = config.ablation
    param_space = config.with_values(
        **{
            "model.variant": tune.grid_search(list(spec.variants)),
            "train.seed": tune.grid_search(list(spec.seeds)),
        }
    )
    started = time.perf_counter()
    sweep = {"kind": "ablation"} | dataclasses.asdict(spec)
    experiment = run_experiment(config, sweep, param_space, resume=spec.resume)
    results, parent = experiment.results, experiment.parent
    rows = [result_row(r) for r in results]
    table = ablation_table(rows, compare_to=spec.compare_to)
    parent.log_text(table, "ablation_table.md")
    parent.log_text(json.dumps(rows, indent=2), "ablation_rows.json")
    parent.log_metric(SWEEP_SECONDS, time.perf_counter() - started)
    failed = bool(results.errors)
    described = (
        f"Ablation {spec.name}: {len(spec.variants)} variants x {len(spec.seeds)} seed(s), "
        f"gaps relative to {spec.compare_to}. The statistics with intervals are in report/.\n\n"
        f"{table}"
    )
    registered = experiment.finish(
        failed=failed,
        report=lambda: log_ablation_report(parent, experiment.tracking, spec.compare_to),
        description=described,
    )
    if failed:
        raise RuntimeError(
            f"{spec.name}: {len(results.errors)} trial(s) failed; "
            f"first: {results.errors[0]}\n{table}"
        )
    result = sweep_result(spec.name, experiment, rows, table)
    return dataclasses.replace(result, registered=registered)


__all__ = ["run_ablation"]
