"""The paper's main table from a sweep's runs: method x benchmark, Obj., gap to BKS, time, and
each LINC-vs-baseline gap paired by seed and instance with its bootstrap interval.

``collect_main`` reads every finished trial run of a sweep back from MLflow: per decoding of its
final evaluation (``evaluation.decoding`` and ``evaluation.also``, the files
``evaluation_rows.csv`` and ``evaluation_rows_sgbs.csv``) its per-instance rows (cost, best-known
value, PyVRP's cost, seconds, feasibility), and the budget it trained under (device, minutes,
epochs). ``main_table`` prints, per benchmark:

- one row per method (a variant and a decoding: ``PolyNet sampling z=800 x8``): Obj. (mean
  cost over seeds and instances, the set's cost convention), Gap (mean per-instance gap to the
  best-known value, over seeds and instances), Time (the set's decoding seconds, mean over
  seeds), infeasible solutions (verifier-refused, never averaged) and seeds; the BKS and
  PyVRP rows from the same instances;
- per decoding and baseline, ``compare_to`` (Full LINC) against the baseline: the mean paired
  difference of the per-instance gaps (baseline minus LINC, in points: positive when LINC is
  closer to the best-known values), its paired bootstrap 95% interval (seeds and instances
  resampled, ``orchestration.report.statistics.variant_statistics``) and the ordering it
  resolves: ``LINC better``, ``LINC worse`` or ``not resolved`` (the interval holds 0);

and a caption stating the budget: device, training minutes per trial, epochs reached per
model, training instances, the evaluation's samples per instance.
"""

from __future__ import annotations

import ast
import csv
import io
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from linc_core.metrics import EPOCH
from linc_core.presets import PRESETS
from orchestration.report.ablation import EVALUATION_ROWS, artifact_name
from orchestration.report.statistics import VariantStatistics, variant_statistics

# {set: {decoding: {variant: {seed: {instance: row}}}}}, a row the CSV's fields as floats/str
Results = dict[str, dict[str, dict[str, dict[int, dict[str, dict[str, Any]]]]]]


@dataclass
class MainData:
    """A sweep's evaluations as the main table reads them.

    Attributes:
        results: ``{set: {decoding: {variant: {seed: {instance: row}}}}}``; a row has
            ``cost``, ``bks``, ``gap_bks_pct``, ``pyvrp_cost``, ``seconds`` (floats; NaN where
            missing), ``feasible`` (bool) and ``method`` (the rows' label).
        budget: ``{variant: [per-trial params and metrics]}``: ``device``, ``threads``,
            ``minutes``, ``epochs``, ``instances_per_epoch``, ``pyvrp_seconds``.
    """

    results: Results = field(default_factory=dict)
    budget: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _number(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


def parse_rows(csv_text: str) -> dict[str, dict[str, Any]]:
    """``{instance: row}`` of an ``evaluation_rows.csv`` (every row, infeasible ones too)."""
    rows = {}
    for row in csv.DictReader(io.StringIO(csv_text)):
        numbers = ("cost", "bks", "gap_bks_pct", "pyvrp_cost", "seconds")
        parsed: dict[str, Any] = {key: _number(row.get(key)) for key in numbers}
        parsed["feasible"] = row.get("feasible") == "True"
        parsed["method"] = row.get("method", "")
        rows[row["instance"]] = parsed
    return rows


def decodings_of(params: Mapping[str, str]) -> tuple[str, ...]:
    """A trial run's decodings, its ``eval_cost``'s first (``evaluation.decoding``/``.also``)."""
    also = ast.literal_eval(params.get("evaluation.also", "()") or "()")
    return (params.get("evaluation.decoding", "sampling"), *also)


def collect_main(client: Any, runs: Sequence[Any]) -> MainData:
    """Read each finished trial run's evaluation rows and budget (an ``MlflowClient``'s runs)."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    data = MainData()
    for run in runs:
        tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
        variant, seed, eval_set = tags.get("variant"), int(tags.get("seed")), tags.get("eval_set")
        if not variant or not eval_set:
            continue
        decodings = decodings_of(params)
        for decoding in decodings:
            name = artifact_name(EVALUATION_ROWS, decoding, decoding == decodings[0])
            path = client.download_artifacts(run.info.run_id, name)
            with open(path, encoding="utf-8") as handle:
                rows = parse_rows(handle.read())
            by_variant = data.results.setdefault(eval_set, {}).setdefault(decoding, {})
            by_variant.setdefault(variant, {})[seed] = rows
        data.budget.setdefault(variant, []).append(
            {
                "device": params.get("train.device", "?"),
                "threads": params.get("resources.torch_threads"),
                "minutes": _number(params.get("train.budget_minutes")),
                "clock": params.get("train.budget_clock", "wall"),
                "epochs": metrics.get(EPOCH, math.nan),
                "instances_per_epoch": _number(params.get("train.instances_per_epoch")),
                "pyvrp_seconds": _number(params.get("evaluation.pyvrp_seconds")),
                "samples": (params.get("evaluation.rollouts"), params.get("evaluation.augment")),
            }
        )
    return data


def _label(variant: str) -> str:
    return PRESETS[variant].label if variant in PRESETS else variant


def _ordered(variants: Mapping[str, Any]) -> list[str]:
    return [v for v in PRESETS if v in variants] + sorted(set(variants) - set(PRESETS))


@dataclass(frozen=True)
class MethodRow:
    """One line of the table: a method's means over seeds and instances on one set."""

    method: str
    obj: float
    gap: float
    seconds: float
    infeasible: int
    seeds: int


def method_row(by_seed: Mapping[int, Mapping[str, Mapping[str, Any]]]) -> MethodRow:
    """Means over every feasible (seed, instance); time the mean over seeds of the set's
    decoding seconds; infeasible the count over seeds."""
    feasible = [r for rows in by_seed.values() for r in rows.values() if r["feasible"]]
    gaps = [r["gap_bks_pct"] for r in feasible if math.isfinite(r["gap_bks_pct"])]
    seconds = [
        sum(r["seconds"] for r in rows.values() if math.isfinite(r["seconds"]))
        for rows in by_seed.values()
    ]
    first = next(iter(next(iter(by_seed.values())).values()))
    return MethodRow(
        method=first["method"],
        obj=float(np.mean([r["cost"] for r in feasible])) if feasible else math.nan,
        gap=float(np.mean(gaps)) if gaps else math.nan,
        seconds=float(np.mean(seconds)),
        infeasible=sum(1 for rows in by_seed.values() for r in rows.values() if not r["feasible"]),
        seeds=len(by_seed),
    )


def reference_rows(
    by_decoding: Mapping[str, Mapping[str, Mapping[int, Mapping[str, Mapping[str, Any]]]]],
) -> tuple[dict[str, float], dict[str, float]]:
    """``({instance: bks}, {instance: pyvrp cost})`` over every row of the set."""
    bks: dict[str, float] = {}
    pyvrp: dict[str, float] = {}
    for by_variant in by_decoding.values():
        for by_seed in by_variant.values():
            for rows in by_seed.values():
                for name, row in rows.items():
                    if math.isfinite(row["bks"]):
                        bks[name] = row["bks"]
                    if math.isfinite(row["pyvrp_cost"]):
                        pyvrp[name] = row["pyvrp_cost"]
    return bks, pyvrp


def paired_gaps(
    by_variant: Mapping[str, Mapping[int, Mapping[str, Mapping[str, Any]]]], compare_to: str
) -> list[VariantStatistics]:
    """Each baseline against ``compare_to``: the statistics of ``gap(baseline) - gap(LINC)``
    over the (seed, instance) pairs both solved feasibly with a best-known value (the
    baseline's ``diff``, ``diff_interval`` and ``resolved``: ``worse`` means the baseline's gaps
    are larger, LINC better)."""
    gaps = {
        variant: {
            seed: {
                name: row["gap_bks_pct"]
                for name, row in rows.items()
                if row["feasible"] and math.isfinite(row["gap_bks_pct"])
            }
            for seed, rows in by_seed.items()
        }
        for variant, by_seed in by_variant.items()
    }
    order = [compare_to] + [v for v in _ordered(gaps) if v != compare_to]
    with np.errstate(divide="ignore", invalid="ignore"):  # its ratio of gaps is not used
        stats = variant_statistics({v: gaps[v] for v in order}, compare_to)
    return [row for row in stats if row.variant != compare_to and row.diff is not None]


def _ordering(stats: VariantStatistics, ours: str) -> str:
    if stats.resolved == "worse":  # the baseline's gaps larger: ours better
        return f"{ours} better (resolved)"
    if stats.resolved == "better":
        return f"{ours} worse (resolved)"
    return "not resolved"


def _cell(value: float, digits: int = 2, sign: bool = False) -> str:
    if not math.isfinite(value):
        return "-"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


# How a caption names a budget's clock (``TrainConfig.budget_clock``): "60 CPU-min".
CLOCK_WORDS = {"wall": "", "cpu": "CPU-"}


def budget_caption(data: MainData) -> str:
    """Device, minutes per trial, epochs per model (mean, min-max over seeds), training
    instances, and the evaluation's samples: what the table's numbers cost."""
    trials = [t for runs in data.budget.values() for t in runs]
    if not trials:
        return ""
    devices = sorted({f"{t['device']} ({t['threads']} thread(s))" for t in trials})
    minutes = sorted({t["minutes"] for t in trials if math.isfinite(t["minutes"])})
    per_model = []
    for variant in _ordered(data.budget):
        epochs = [t["epochs"] for t in data.budget[variant] if math.isfinite(t["epochs"])]
        size = data.budget[variant][0]["instances_per_epoch"]
        if epochs:
            span = f"{min(epochs):.0f}-{max(epochs):.0f}" if len(set(epochs)) > 1 else ""
            per_model.append(
                f"{_label(variant)} {np.mean(epochs):.0f} epochs{f' ({span})' if span else ''}"
                f", about {np.mean(epochs) * size:,.0f} instances"
            )
    rollouts, augment = trials[0]["samples"]
    clocks = sorted({CLOCK_WORDS.get(t.get("clock", "wall"), "") for t in trials})
    budget = f"{', '.join(f'{m:g}' for m in minutes)} {'/'.join(clocks)}min" if minutes else ""
    budget = budget or "epochs, no time budget"
    return (
        f"Budget: {', '.join(devices)}, {budget} of training per trial; "
        + "; ".join(per_model)
        + f". Evaluation: sampling z={rollouts} x{augment} per instance, SGBS beam 4 x "
        "expansion 4 from min(z, 128) greedy z-rollouts; POMO decodes every start instead of z. "
        "Time: wall seconds to decode the set's instances one after another on the trial's "
        "device and threads (mean over seeds; on shared cores it includes their waits), and "
        "PyVRP's time limit per instance times the instances. "
        "Every solution verified by linc's verifier."
    )


def set_table(eval_set: str, data: MainData, compare_to: str | None) -> str:
    """Markdown of one benchmark: the methods and the paired comparisons (module docstring)."""
    by_decoding = data.results[eval_set]
    bks, pyvrp = reference_rows(by_decoding)
    lines = [
        f"**{eval_set}**",
        "",
        "| Method | Obj. | Gap (%) | Time (s) | Infeasible | Seeds |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    if bks:
        lines.append(f"| BKS | {np.mean(list(bks.values())):.2f} | 0.00 | - | - | - |")
    if pyvrp:
        seconds = [t["pyvrp_seconds"] for runs in data.budget.values() for t in runs]
        per = seconds[0] if seconds else math.nan
        shared = [n for n in pyvrp if n in bks]
        gap = np.mean([100 * (pyvrp[n] - bks[n]) / bks[n] for n in shared]) if shared else math.nan
        lines.append(
            f"| PyVRP ({per:g} s) | {np.mean(list(pyvrp.values())):.2f} | {_cell(gap)} "
            f"| {per * len(pyvrp):.0f} | - | - |"
        )
    comparisons = []
    for decoding, by_variant in by_decoding.items():
        for variant in _ordered(by_variant):
            row = method_row(by_variant[variant])
            lines.append(
                f"| {row.method} | {_cell(row.obj)} | {_cell(row.gap)} | {row.seconds:.1f} "
                f"| {row.infeasible} | {row.seeds} |"
            )
        if compare_to in by_variant:
            for stats in paired_gaps(by_variant, compare_to):
                comparisons.append((decoding, stats))
    if comparisons:
        ours = _label(compare_to or "")
        lines += [
            "",
            f"| {ours} vs | Decoding | Gap difference (points) | 95% CI (paired bootstrap) "
            "| Ordering | Seeds x instances |",
            "|---|---|---:|---:|---|---:|",
        ]
        for decoding, stats in comparisons:
            interval = stats.diff_interval
            ci = "-" if interval is None else f"[{interval.low:+.2f}, {interval.high:+.2f}]"
            diff = _cell(stats.diff if stats.diff is not None else math.nan, sign=True)
            paired = f"{len(stats.paired_seeds)} x {stats.paired_instances}"
            lines.append(
                f"| {_label(stats.variant)} | {decoding} | {diff} "
                f"| {ci} | {_ordering(stats, ours)} | {paired} |"
            )
        lines += [
            "",
            f"Gap difference: the baseline's per-instance gap to BKS minus {ours}'s, mean over "
            "the (seed, instance) pairs both solved feasibly (positive: "
            f"{ours} closer to BKS); the interval resamples seeds and instances (paired "
            "bootstrap, 10,000 replicates); resolved: it excludes 0.",
        ]
    return "\n".join(lines)


def main_table(data: MainData, compare_to: str | None = "full_linc") -> str:
    """The main table of every benchmark the runs were evaluated on, then the budget."""
    tables = [set_table(eval_set, data, compare_to) for eval_set in sorted(data.results)]
    return "\n\n".join([*tables, budget_caption(data)]).strip()


def main_report_files(
    client: Any,
    runs: Sequence[Any],
    compare_to: str | None,
    peers: Mapping[str, Sequence[tuple[float, float]]] | None = None,
) -> dict[str, bytes]:
    """``main_table.md``, ``time_to_quality.png`` and ``.json`` (the gap each model reached at
    the budget) of a sweep's finished trial ``runs``: what the sweep logs on its parent run
    and ``linc-report main --out`` writes; ``peers``: external curves ``{label: [(train
    seconds, gap %)]}`` drawn beside them (``bench.bench_quality``'s rl4co PolyNet). The
    validation sets' PyVRP reference takes at most 1 s per instance (the evaluation's budget
    when smaller)."""
    import json

    from orchestration.report.time_to_quality import quality_curves, time_to_quality_chart

    data = collect_main(client, runs)
    files = {"main_table.md": (main_table(data, compare_to) + "\n").encode()}
    seconds = [t["pyvrp_seconds"] for trials in data.budget.values() for t in trials]
    budget = min([1.0, *[s for s in seconds if math.isfinite(s) and s > 0]])
    curves = quality_curves(client, runs, budget)
    if curves:
        chart = time_to_quality_chart(curves, peers)
        files["time_to_quality.png"] = chart.png
        reached = {label: {"minutes": m, "gap_pct": g} for label, (m, g) in chart.values.items()}
        files["time_to_quality.json"] = json.dumps(reached, indent=2).encode()
    return files


__all__ = [
    "MainData",
    "main_report_files",
    "MethodRow",
    "budget_caption",
    "collect_main",
    "decodings_of",
    "main_table",
    "method_row",
    "paired_gaps",
    "parse_rows",
    "reference_rows",
    "set_table",
]
