"""The ablation sweep: every variant x seed as one Tune experiment, then the paper-shaped
table and the report on the sweep's parent run."""

from __future__ import annotations

import dataclasses
import json
import time

from ray import tune

from linc_core.metrics import SWEEP_SECONDS
from orchestration.config.platform import PlatformConfig
from orchestration.experiment.sweep import Sweep, SweepResult
from orchestration.report.sweep_report import log_sweep_report
from orchestration.report.tables import ablation_table, result_row


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
        rows = [result_row(r) for r in sweep.run_trials(param_space)]
        table = ablation_table(rows, compare_to=spec.compare_to)
        sweep.finish_with(
            texts={"ablation_table.md": table, "ablation_rows.json": json.dumps(rows, indent=2)},
            metrics={SWEEP_SECONDS: time.perf_counter() - started},
            report=log_sweep_report,  # the report from the runs: see its module
            description=(
                f"Ablation {spec.name}: {len(spec.variants)} variants x {len(spec.seeds)} "
                f"seed(s), gaps relative to {spec.compare_to}. The statistics with intervals "
                f"are in report/.\n\n{table}"
            ),
        )
    return sweep.result(rows, table)


__all__ = ["run_ablation"]
