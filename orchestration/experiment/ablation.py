"""The ablation sweep: every variant x seed as one Tune experiment, then the paper-shaped
table and the report on the sweep's parent run."""

from __future__ import annotations

import dataclasses
import json
import time

from ray import tune

from linc_core.metrics import SWEEP_SECONDS
from orchestration.config.platform import PlatformConfig
from orchestration.experiment.sweep import Sweep, SweepResult, result_row
from orchestration.report.ablation import log_ablation_report
from orchestration.report.main_table import log_main_report
from orchestration.report.tables import ablation_table


def run_ablation(config: PlatformConfig) -> SweepResult:
    """The ablation: every variant x seed as one Tune experiment, then the paper-shaped table.

    Raises:
        SweepError: one line (:mod:`orchestration.failures`), e.g. ``TrialFailed`` when trials
            failed after their retries (their table is still logged to the parent run).
    """
    spec = config.ablation
    param_space = config.with_values(
        **{
            "model.variant": tune.grid_search(list(spec.variants)),
            "train.seed": tune.grid_search(list(spec.seeds)),
        }
    )
    started = time.perf_counter()
    with Sweep(
        config, {"kind": "ablation"} | dataclasses.asdict(spec), resume=spec.resume
    ) as sweep:
        rows = [result_row(r) for r in sweep.fit(param_space)]
        table = ablation_table(rows, compare_to=spec.compare_to)
        runs = sweep.runs
        sweep.finish_with(
            texts={"ablation_table.md": table, "ablation_rows.json": json.dumps(rows, indent=2)},
            metrics={SWEEP_SECONDS: time.perf_counter() - started},
            report=lambda: _report(config, runs, spec.compare_to),
            description=(
                f"Ablation {spec.name}: {len(spec.variants)} variants x {len(spec.seeds)} "
                f"seed(s), gaps relative to {spec.compare_to}. The statistics with intervals "
                f"are in report/.\n\n{table}"
            ),
        )
    return sweep.result(rows, table)


def _report(config: PlatformConfig, runs, compare_to: str) -> None:
    """The ablation's statistics and figures; a sweep evaluated on a benchmark (the main
    table's, ``preset=main-cpu``) also gets the main table and the time-to-quality figure."""
    log_ablation_report(runs.parent, runs.tracking, compare_to)
    if config.run.evaluation.source == "benchmark":
        log_main_report(runs.parent, runs.tracking, compare_to)


__all__ = ["run_ablation"]
