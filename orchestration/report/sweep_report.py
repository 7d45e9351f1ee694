"""The report a sweep logs on its parent run as it ends, under ``report/``: the ablation's
statistics and figures (:func:`~orchestration.report.ablation.report_files`) and, for a sweep
evaluated on a benchmark, the main table and its time-to-quality figure
(:func:`~orchestration.report.main_table.main_report_files`).

It is a function of the sweep's runs alone, as ``linc-report`` is: what the gaps are relative to
(``sweep.compare_to``) and what was evaluated (``evaluation.source``) are read from the parent
run's params, as the sweep recorded them when it began (a resumed sweep keeps them: MLflow
params do not change). A store that does not answer costs the report, with a warning naming the
command that rebuilds it, never the sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from linc_core.metrics import GAP_VS_VARIANT_PCT
from orchestration.report.ablation import (
    collect,
    finished_trial_runs,
    report_files,
    run_rows,
    trial_gaps,
)
from orchestration.report.main_table import main_report_files

if TYPE_CHECKING:
    from orchestration.tracking.runs import SweepRuns

logger = logging.getLogger(__name__)

COMPARE_TO = "sweep.compare_to"  # the parent run's params (TrialPlan.params, sweep=...)
EVALUATION_SOURCE = "evaluation.source"
# built from (client, the finished trial runs, the parent run's params)
Build = Callable[[Any, list, Mapping[str, str]], dict[str, bytes]]


def log_sweep_report(runs: SweepRuns) -> None:
    """Log the sweep's report on its parent run (see the module docstring)."""
    log_derived_report(runs, ("ablation report", "ablation"), ablation_files)
    log_derived_report(runs, ("main table", "main"), main_files)


def ablation_files(client: Any, trial_runs: list, params: Mapping[str, str]) -> dict[str, bytes]:
    """The ablation report of ``trial_runs``; each trial run also gets its paired gap to the
    comparison variant of its seed as its ``gap_vs_variant_pct`` metric (tag
    ``gap_vs_variant``: which variant; the evaluation's gaps to strong solutions are
    ``eval_gap_pyvrp_pct`` and, per instance, ``gap_bks_pct``)."""
    data = collect(client, run_rows(trial_runs))
    compare = params.get(COMPARE_TO)
    compare = compare if compare in data.costs else None
    for run_id, gap in trial_gaps(data, compare).items():
        client.log_metric(run_id, GAP_VS_VARIANT_PCT, gap)
        client.set_tag(run_id, "gap_vs_variant", compare)
    return report_files(data, compare)


def main_files(client: Any, trial_runs: list, params: Mapping[str, str]) -> dict[str, bytes]:
    """The main table and time to quality of a sweep evaluated on a benchmark (none else)."""
    if params.get(EVALUATION_SOURCE) != "benchmark":
        return {}
    return main_report_files(client, trial_runs, params.get(COMPARE_TO))


def recorded_compare_to(client: Any, experiment: str, sweep: str) -> str | None:
    """The comparison variant sweep ``sweep`` recorded on its parent run (its newest, when the
    sweep began anew in this store); None when it recorded none."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    parents = client.search_runs(
        [found.experiment_id],
        filter_string=f"tags.sweep = '{sweep}' and tags.kind = 'sweep'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return parents[0].data.params.get(COMPARE_TO) if parents else None


def sweep_names(client: Any, experiment: str) -> list[str]:
    """The names of the sweeps whose parent runs are in experiment ``experiment``, sorted."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    parents = client.search_runs(
        [found.experiment_id], filter_string="tags.kind = 'sweep'", max_results=5000
    )
    return sorted({run.data.tags["sweep"] for run in parents if run.data.tags.get("sweep")})


def log_derived_report(runs: SweepRuns, names: tuple[str, str], build: Build) -> None:
    """Log the files ``build`` returns under ``report/`` of the sweep's parent run. A store that
    does not answer costs the report, with a warning naming the command that rebuilds it
    (``names``: what the report is, its ``linc-report`` subcommand), never the sweep."""
    what, command = names
    parent, tracking = runs.parent, runs.tracking
    client = tracking.client()
    try:
        params = client.get_run(parent.run_id).data.params
        trial_runs = finished_trial_runs(client, tracking.experiment, parent_run_id=parent.run_id)
        files = build(client, trial_runs, params)
    except Exception as err:  # noqa: BLE001 - the report is derived; the runs hold the data
        logger.warning(
            "%s not logged on run %s (%s); rebuild it with: linc-report %s "
            "--tracking-uri %s --experiment %s --out DIR",
            what,
            parent.run_id,
            " ".join(str(err).split())[:200],
            command,
            tracking.shown_uri,
            tracking.experiment,
        )
        return
    for name, content in files.items():
        parent.log_bytes(content, f"report/{name}")


__all__ = [
    "ablation_files",
    "log_derived_report",
    "log_sweep_report",
    "main_files",
    "recorded_compare_to",
    "sweep_names",
]
