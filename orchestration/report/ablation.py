"""The ablation report: what a sweep's runs resolve, as tables and figures, from MLflow.

``collect`` reads a sweep's finished trial runs back from the tracking store: each run's
per-instance evaluation costs (its ``evaluation_rows.csv`` artifact) and its training curve
(``train_best_cost`` per epoch). ``report_files`` turns them into what ``linc-ablation`` logs on
the sweep's parent run and ``linc-report ablation --out`` writes:

- ``ablation_statistics.md`` / ``.csv``: per variant the mean cost over seeds with its 95%
  interval over seeds, the gap to the comparison variant paired by seed and instance with its
  paired bootstrap 95% interval, and whether the sign of that gap is resolved
  (``orchestration.report.statistics``);
- ``ablation_chart.png``: the gaps with their intervals, the comparison row marked;
- ``training_curves.png``: every variant's curve (mean over seeds, thin lines per seed);
- ``pairwise_curves.png``: the paper's appendix figure: one panel per variant, the comparison
  variant's curve against it, each with its band over seeds (min to max).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from linc_core.metrics import (
    EPOCH,
    EVAL_COST,
    EVAL_INFEASIBLE,
    NUM_PARAMETERS,
    TRAIN_BEST_COST,
    TRAIN_SECONDS,
    VALIDATION_COST,
)
from linc_core.presets import PRESETS
from linc_core.utils.files import FileRefusedError, is_plain_name, read_regular_file
from linc_core.utils.typed import ConfigError
from orchestration.report.figures import Chart, ablation_chart, pairwise_curves, training_curves
from orchestration.report.statistics import (
    Interval,
    VariantStatistics,
    paired_gap_pct,
    variant_statistics,
)

EVALUATION_ROWS = "evaluation_rows.csv"
EVALUATION_SUMMARY = "evaluation_summary.json"

logger = logging.getLogger(__name__)


def artifact_name(name: str, decoding: str, first: bool) -> str:
    """A trial's evaluation file of one decoding: ``evaluation_rows.csv`` for its ``first``
    (the one ``eval_cost`` reports), ``evaluation_rows_sgbs.csv`` for SGBS as a further one."""
    if first:
        return name
    stem, suffix = name.rsplit(".", 1)
    return f"{stem}_{decoding}.{suffix}"


CURVE_METRIC = TRAIN_BEST_COST

History = list[tuple[int, float]]


@dataclass
class AblationData:
    """A sweep's results as the report reads them.

    Attributes:
        rows: one per finished trial run: ``variant``, ``seed``, ``eval_cost``,
            ``eval_infeasible``, ``seconds``, ``run_id`` (as ``linc-report`` builds them).
        costs: ``{variant: {seed: {instance: cost}}}`` of the feasible evaluated instances.
        histories: ``{variant: {seed: [(epoch, train_best_cost), ...]}}``.
        validation: the same of ``validation_cost`` (empty where runs did not validate).
    """

    rows: list[dict[str, Any]]
    costs: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    histories: dict[str, dict[int, History]] = field(default_factory=dict)
    validation: dict[str, dict[int, History]] = field(default_factory=dict)


def finished_trial_runs(
    client: Any, experiment: str, *, sweep: str | None = None, parent_run_id: str | None = None
) -> list[Any]:
    """Finished trial runs (not sweep parents) of the MLflow experiment named ``experiment``,
    optionally of one sweep (its ``sweep`` tag) or under one parent run.

    Raises:
        LookupError: no experiment of that name in the client's store.
    """
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise LookupError(f"no MLflow experiment {experiment!r} at {client.tracking_uri}")
    query = "attributes.status = 'FINISHED' and tags.variant != ''"
    if sweep:
        query += f" and tags.sweep = '{sweep}'"
    if parent_run_id:
        query += f" and tags.`mlflow.parentRunId` = '{parent_run_id}'"
    runs = client.search_runs([found.experiment_id], filter_string=query, max_results=5000)
    return [run for run in runs if _plain_tags(run)]


def _plain_tags(run: Any) -> bool:
    """Whether a run's variant, seed and evaluation set are a trial's (a name, a whole number, a
    set's name or folder): whoever can write the store can tag a run, and a tag holding escape
    codes or a table row would reach the terminal and every report's Markdown."""
    tags = run.data.tags
    plain = is_plain_name(tags.get("variant")) and str(tags.get("seed")).lstrip("-").isdigit()
    shown_set = str(tags.get("eval_set", ""))
    if plain and shown_set.isprintable() and "|" not in shown_set:
        return True
    shown = {k: tags.get(k) for k in ("variant", "seed", "eval_set")}
    logger.warning("run %s left out: its tags are no trial's (%s)", run.info.run_id, ascii(shown))
    return False


def run_rows(runs: Sequence[Any]) -> list[dict[str, Any]]:
    """One row per run: its id, variant, seed, sweep, evaluation set and results."""
    rows = []
    for run in runs:
        metrics, tags = run.data.metrics, run.data.tags
        rows.append(
            {
                "run_id": run.info.run_id,
                "variant": tags.get("variant"),
                "seed": tags.get("seed"),
                "sweep": tags.get("sweep"),
                "eval_set": tags.get("eval_set"),
                EVAL_COST: metrics.get(EVAL_COST),
                EVAL_INFEASIBLE: metrics.get(EVAL_INFEASIBLE),
                "epochs": metrics.get(EPOCH),
                "parameters": metrics.get(NUM_PARAMETERS),
                # the run's wall time (Ray's start-up, validation and evaluation included)
                "seconds": (run.info.end_time - run.info.start_time) / 1000.0
                if run.info.end_time
                else None,
                # the training clock the budget counts, what the sweep's console shows
                TRAIN_SECONDS: metrics.get(TRAIN_SECONDS),
            }
        )
    return rows


def evaluation_costs(csv_text: str) -> dict[str, float]:
    """``{instance: cost}`` of the feasible rows of an ``evaluation_rows.csv``."""
    costs = {}
    for row in csv.DictReader(io.StringIO(csv_text)):
        cost = float(row["cost"]) if row.get("cost") not in (None, "", "nan") else math.nan
        if row.get("feasible") == "True" and math.isfinite(cost):
            costs[row["instance"]] = cost
    return costs


def collect(client: Any, rows: Sequence[Mapping[str, Any]]) -> AblationData:
    """Per-instance costs and training curves of the trial runs ``rows`` (each with a
    ``run_id``), read through an ``MlflowClient``. A run without an ``evaluation_rows.csv``
    contributes its curve only: its variant gets no paired gap."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    data = AblationData([dict(r) for r in rows])
    for row in data.rows:
        variant, seed = row["variant"], int(row["seed"])
        try:
            path = client.download_artifacts(row["run_id"], EVALUATION_ROWS)
        except Exception:  # noqa: BLE001 - a run logged without per-instance rows (older runs)
            path = None
        if path is not None:
            with open(path, encoding="utf-8") as handle:
                data.costs.setdefault(variant, {})[seed] = evaluation_costs(handle.read())
        history = client.get_metric_history(row["run_id"], CURVE_METRIC)
        points = sorted((int(m.step), float(m.value)) for m in history)
        data.histories.setdefault(variant, {})[seed] = points
        checked = client.get_metric_history(row["run_id"], VALIDATION_COST)
        if checked:
            validation = sorted((int(m.step), float(m.value)) for m in checked)
            data.validation.setdefault(variant, {})[seed] = validation
    return data


def _ordered(costs: Mapping[str, Any]) -> dict[str, Any]:
    order = [v for v in PRESETS if v in costs] + sorted(set(costs) - set(PRESETS))
    return {v: costs[v] for v in order}


def _interval(value: Interval | None, digits: int = 2) -> str:
    return "-" if value is None else f"[{value.low:+.{digits}f}, {value.high:+.{digits}f}]"


def statistics(data: AblationData, compare_to: str | None) -> list[VariantStatistics]:
    return variant_statistics(_ordered(data.costs), compare_to)


def statistics_markdown(stats: Sequence[VariantStatistics], compare_to: str | None) -> str:
    """The statistics table and one line saying what its intervals cover."""
    title = PRESETS[compare_to].label if compare_to in PRESETS else str(compare_to)
    lines = [
        f"| Variant | Obj. | 95% CI (seeds) | Gap vs {title} (%) | 95% CI (paired bootstrap) "
        "| Sign | Seeds |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for row in stats:
        label = PRESETS[row.variant].label if row.variant in PRESETS else row.variant
        obj_ci = (
            "-"
            if row.obj_interval is None
            else f"[{row.obj_interval.low:.2f}, {row.obj_interval.high:.2f}]"
        )
        gap = "-" if row.gap_pct is None else f"{row.gap_pct:+.2f}"
        sign = "reference" if row.variant == compare_to else (row.resolved or "-")
        lines.append(
            f"| {label} | {row.obj:.2f} | {obj_ci} | {gap} | {_interval(row.gap_interval)} "
            f"| {sign} | {len(row.seeds)} |"
        )
    seeds = max((len(r.seeds) for r in stats), default=0)
    instances = max((r.instances for r in stats), default=0)
    lines.append("")
    lines.append(
        f"{seeds} seed(s) x {instances} instances. Obj.: mean cost over seeds and instances, its "
        "interval a Student t interval over the seeds' means. Gap: mean paired difference to "
        f"{title} in percent of its cost, paired by seed and instance, with a paired bootstrap "
        "interval (seeds and instances resampled); 'not resolved': the interval contains 0"
        + (
            " (one seed: the interval covers instances only, not training seeds)."
            if seeds == 1
            else "."
        )
    )
    return "\n".join(lines)


def statistics_csv(stats: Sequence[VariantStatistics]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        ["variant", "seeds", "instances", "obj", "obj_low", "obj_high", "diff", "diff_low",
         "diff_high", "gap_pct", "gap_low", "gap_high", "resolved"]
    )  # fmt: skip

    def parts(interval: Interval | None) -> list[Any]:
        return ["", ""] if interval is None else [interval.low, interval.high]

    for row in stats:
        writer.writerow(
            [row.variant, len(row.seeds), row.instances, row.obj, *parts(row.obj_interval)]
            + ["" if row.diff is None else row.diff, *parts(row.diff_interval)]
            + ["" if row.gap_pct is None else row.gap_pct, *parts(row.gap_interval)]
            + [row.resolved or ""]
        )
    return buffer.getvalue().encode()


def trial_gaps(data: AblationData, compare_to: str | None) -> dict[str, float]:
    """``{run_id: gap_pct}``: each trial's paired gap to the ``compare_to`` trial of the same
    seed, over the instances both evaluated
    (:func:`~orchestration.report.statistics.paired_gap_pct`); the comparison's own trials get 0."""
    gaps: dict[str, float] = {}
    reference = data.costs.get(compare_to or "", {})
    for row in data.rows:
        seed = int(row["seed"])
        ours = data.costs.get(row["variant"], {}).get(seed)
        theirs = reference.get(seed)
        if ours is None or theirs is None:
            continue
        gap = paired_gap_pct(ours, theirs)
        if gap is not None:
            gaps[row["run_id"]] = gap
    return gaps


def report_charts(
    data: AblationData, compare_to: str | None, stats: Sequence[VariantStatistics] | None = None
) -> dict[str, Chart]:
    """``{file name: Chart}`` of the report's figures (module docstring); ``stats`` as
    :func:`statistics` returns them, computed when not given."""
    if stats is None:
        stats = statistics(data, compare_to)
    charts: dict[str, Chart] = {
        "training_curves.png": training_curves(data.histories, reference=compare_to)
    }
    if data.validation:
        charts["validation_curves.png"] = training_curves(
            data.validation, metric=VALIDATION_COST, reference=compare_to
        )
    if compare_to is not None and compare_to in data.costs:
        intervals = {
            row.variant: (row.gap_interval.low, row.gap_interval.high)
            for row in stats
            if row.gap_interval is not None
        }
        gaps = {row.variant: row.gap_pct for row in stats}
        charts["ablation_chart.png"] = ablation_chart(
            data.rows, compare_to, gaps=gaps, intervals=intervals
        )
        charts["pairwise_curves.png"] = pairwise_curves(data.histories, compare_to)
    return charts


def report_files(data: AblationData, compare_to: str | None) -> dict[str, bytes]:
    """``{file name: bytes}`` of the report (module docstring)."""
    stats = statistics(data, compare_to)
    files = {
        "ablation_statistics.md": (statistics_markdown(stats, compare_to) + "\n").encode(),
        "ablation_statistics.csv": statistics_csv(stats),
    }
    charts = report_charts(data, compare_to, stats)
    return files | {name: chart.png for name, chart in charts.items()}


# A reference-curves file holds a few variants' per-epoch scores: some KB. No valid one nears it.
MAX_REFERENCE_CURVES_BYTES = 16 * 1024 * 1024


def read_reference_curves(path: Path) -> dict[str, list[float]]:
    """``{variant: score_by_epoch}`` of a reference-curves file (``{"runs": {variant:
    {"score_by_epoch": [positive numbers]}}}``); :class:`ConfigError` naming the file and the
    field that is missing, malformed or of the wrong shape."""
    where = f"--reference-curves {path}"  # linc-report's flag: the one reader of such files
    try:  # a regular file of at most 16 MiB: a named pipe would hang, /dev/zero fill memory
        loaded = json.loads(read_regular_file(path, MAX_REFERENCE_CURVES_BYTES, source=where))
    except FileRefusedError as err:
        raise ConfigError(f"{where}: {err.value}: {err.problem}") from None
    except OSError as err:
        raise ConfigError(f"{where}: cannot read it ({err.strerror or err})") from None
    except ValueError as err:  # not JSON (cut short, another format), or not UTF-8
        raise ConfigError(f"{where}: not JSON ({' '.join(str(err).split())})") from None
    runs = loaded.get("runs") if isinstance(loaded, dict) else None
    if not isinstance(runs, dict):
        raise ConfigError(f'{where}: "runs": expected an object of variants, got {_kind(runs)}')
    curves = {}
    for variant, curve in runs.items():
        field = f'"runs"."{variant}"."score_by_epoch"'
        scores = curve.get("score_by_epoch") if isinstance(curve, dict) else None
        if not isinstance(scores, list):
            raise ConfigError(f"{where}: {field}: expected a list of scores, got {_kind(scores)}")
        for epoch, score in enumerate(scores):
            number = isinstance(score, int | float) and not isinstance(score, bool)
            if not (number and 0 < score < math.inf):  # a gap divides by it
                raise ConfigError(f"{where}: {field}[{epoch}]: expected > 0, got {score!r}")
        curves[str(variant)] = [float(v) for v in scores]
    return curves


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def reference_curve_check(
    histories: dict[str, dict[int, list[tuple[int, float]]]], path: Path, seed: int
) -> str:
    """Markdown: each variant of a reference-curves file (:func:`read_reference_curves`, the
    reference implementation's published curves) against the sweep's ``seed`` run of that
    variant: the last shared epoch's scores and the largest relative deviation over the shared
    epochs."""
    lines = [
        f"| Variant (seed {seed}) | Epoch | Ours | Reference | Difference (%) | "
        "Largest deviation over epochs (%) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for variant, scores in read_reference_curves(path).items():
        ours = dict(histories.get(variant, {}).get(seed, []))
        reference = {e + 1: v for e, v in enumerate(scores)}
        shared = sorted(set(ours) & set(reference))
        if not shared:
            lines.append(f"| {variant} | - | - | - | - | no run of seed {seed} |")
            continue
        deviation = [100.0 * (ours[e] - reference[e]) / reference[e] for e in shared]
        last = shared[-1]
        lines.append(
            f"| {variant} | {last} | {ours[last]:.2f} | {reference[last]:.2f} | "
            f"{deviation[-1]:+.2f} | {max(deviation, key=abs):+.2f} |"
        )
    return "\n".join(lines)


__all__ = [
    "EVALUATION_ROWS",
    "EVALUATION_SUMMARY",
    "AblationData",
    "artifact_name",
    "collect",
    "evaluation_costs",
    "finished_trial_runs",
    "read_reference_curves",
    "reference_curve_check",
    "report_charts",
    "report_files",
    "run_rows",
    "statistics",
    "statistics_csv",
    "statistics_markdown",
    "trial_gaps",
]
