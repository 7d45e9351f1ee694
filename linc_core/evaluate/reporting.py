"""Reporting: per-instance rows as CSV and Parquet, a paper-shaped markdown table, route plots,
the summary as JSON and each solution as a CVRPLIB-style ``.sol`` file.

Every function returns bytes or text; writing them (atomically) is the caller's job.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from linc_core.evaluate.scoring import EvalRow
from linc_core.instances import Instance
from linc_core.utils.plotting import new_figure, png_bytes


def rows_csv(rows: Sequence[EvalRow]) -> bytes:
    buffer = io.StringIO()
    names = list(EvalRow.__dataclass_fields__)
    writer = csv.DictWriter(buffer, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(asdict(row))
    return buffer.getvalue().encode()


def rows_parquet(rows: Sequence[EvalRow]) -> bytes:
    table = pa.Table.from_pylist([asdict(r) for r in rows])
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def summary_json(record: dict[str, Any]) -> bytes:
    """``record`` as strict JSON: a value that is not a finite number (no BKS: NaN) is ``null``,
    where ``json.dumps`` would write ``NaN``, which JSON readers refuse."""

    def finite(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [finite(v) for v in value]
        return value

    return json.dumps(finite(record), indent=2, allow_nan=False).encode()


def solution_sol(
    solution: Sequence[Sequence[int]],
    row: EvalRow,
    convention: str,
    source: Path | None = None,
) -> bytes:
    """One instance's solution in CVRPLIB's ``.sol`` syntax, for ``linc-solve --verify``.

    ``Route #i: c1 c2 ...`` lines (customer ids, the depot implicit; a TSP tour as one route of
    city ids from 0), then ``Cost`` under ``convention`` when the solution is feasible, the
    ``Instance`` file it solves (absolute) when there is one, and the ``Convention``.
    """
    lines = [f"Route #{i}: {' '.join(map(str, route))}" for i, route in enumerate(solution, 1)]
    if row.feasible:
        lines.append(f"Cost {row.cost:.6f}".rstrip("0").rstrip("."))
    else:
        lines.append(f"# infeasible: {row.error}")
    if source is not None:
        lines.append(f"Instance {source.resolve()}")
    lines += [f"Convention {convention}", f"# {row.method}"]
    return ("\n".join(lines) + "\n").encode()


def format_seconds(seconds: float) -> str:
    """The paper's time style: ``0.9s``, ``6s``, ``2m``, ``1h``."""
    if not math.isfinite(seconds):
        return "--"
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _pct(value: float) -> str:
    return f"{value:.2f}%" if math.isfinite(value) else "--"


def _obj(value: float, convention: str) -> str:
    if not math.isfinite(value):
        return "--"
    return f"{value:.1f}" if convention in ("dimacs", "tsplib", "cvrplib") else f"{value:.3f}"


def markdown_table(
    set_name: str,
    convention: str,
    summaries: Sequence[tuple[str, dict]],
    pyvrp_row: tuple[str, float, float] | None = None,
) -> str:
    """A paper-shaped table: Method | Obj. | Gap | Time (plus Gap vs PyVRP and errors).

    Obj. is the mean cost over feasible instances under ``convention``; Gap is the mean
    per-instance gap to the BKS (aggregate gap in the notes). ``pyvrp_row`` is PyVRP's own
    row: ``(label, mean cost, seconds)``.
    """
    lines = [
        f"**{set_name}** ({convention} costs)",
        "",
        "| Method | Obj. | Gap | Gap vs PyVRP | Time | Errors |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    first = summaries[0][1] if summaries else {}
    if first and math.isfinite(first.get("mean_bks", math.nan)):
        lines.append(f"| BKS | {_obj(first['mean_bks'], convention)} | -- | -- | -- | -- |")
    if pyvrp_row is not None:
        label, mean_cost, seconds = pyvrp_row
        obj, time_text = _obj(mean_cost, convention), format_seconds(seconds)
        lines.append(f"| {label} | {obj} | -- | -- | {time_text} | -- |")
    for method, s in summaries:
        lines.append(
            f"| {method} | {_obj(s['mean_cost'], convention)} | {_pct(s['mean_gap_bks_pct'])} | "
            f"{_pct(s['mean_pyvrp_gap_pct'])} | {format_seconds(s['seconds'])} | "
            f"{s['errors']}/{s['instances']} |"
        )
    for method, s in summaries:
        lines.append("")
        lines.append(
            f"{method}: {s['feasible']}/{s['instances']} feasible; mean gap "
            f"{_pct(s['mean_gap_bks_pct'])}, median {_pct(s['median_gap_bks_pct'])}, aggregate gap "
            f"{_pct(s['aggregate_gap_bks_pct'])} vs BKS "
            f"({s['instances_with_bks']} instances); vs PyVRP mean "
            f"{_pct(s['mean_pyvrp_gap_pct'])}, aggregate "
            f"{_pct(s['aggregate_pyvrp_gap_pct'])} ({s['instances_with_pyvrp']}); "
            f"{s['rollouts']} rollouts, {s['rollouts_per_second']:.0f} rollouts/s."
        )
        families = s.get("family_gaps_bks") or {}
        if families:
            parts = [
                f"{family} {_pct(g['mean_gap_bks_pct'])} ({g['instances']})"
                for family, g in families.items()
            ]
            lines.append(f"{method}, mean gap vs BKS by family: " + ", ".join(parts) + ".")
    return "\n".join(lines) + "\n"


def plot_routes(instance: Instance, solution: Sequence[Sequence[int]], title: str) -> bytes:
    """PNG bytes of one solution: depot square, customers, one colour per route."""
    import matplotlib

    locs = instance.locs[0].detach().cpu().double().numpy()
    figure = new_figure(6, 6)
    axes = figure.add_subplot()
    cmap = matplotlib.colormaps["tab20"]
    for r, route in enumerate(solution):
        path = [0, *route, 0] if instance.has_depot else [*route, route[0]]
        xy = locs[path]
        axes.plot(xy[:, 0], xy[:, 1], "-", color=cmap(r % 20), linewidth=1.2)
    start = 1 if instance.has_depot else 0
    axes.scatter(locs[start:, 0], locs[start:, 1], s=10, color="black", zorder=3)
    if instance.has_depot:
        axes.scatter(locs[:1, 0], locs[:1, 1], s=80, marker="s", color="red", zorder=4)
    axes.set_title(title, fontsize=9)
    axes.set_aspect("equal")
    return png_bytes(figure, tight=False)
