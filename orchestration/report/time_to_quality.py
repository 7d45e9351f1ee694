"""Time to quality: each model's validation gap against the seconds it trained (its budget's
clock, ``train.budget_clock``: wall seconds, or CPU seconds where trials share cores).

A trial validates every ``validation_every`` epochs on a fixed generated set (``validation.seed``,
``validation.size``: the same instances for every model of a seed) and logs ``validation_cost``
and ``train_seconds`` (the budget's clock: training steps only) with the epoch as the step.
:func:`quality_curves` joins the two by epoch and turns the cost into a gap to PyVRP's solutions
of the same validation instances (regenerated from the run's params, solved once per instance
and budget and cached: ``linc_core.evaluate.pyvrp_cache``): ``100 (validation_cost -
mean PyVRP cost) / mean PyVRP cost``. :func:`time_to_quality_chart` draws, per model, the mean
over seeds on a common time grid with a band from the lowest to the highest seed; an external
peer (rl4co's PolyNet, ``bench``) can be added as one more curve.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from linc_core.metrics import TRAIN_SECONDS, VALIDATION_COST
from linc_core.presets import PRESETS
from linc_core.utils.plotting import new_figure, png_bytes
from orchestration.report.figures import Chart

Curve = list[tuple[float, float]]  # (training seconds, gap %)


def validation_reference(params: Mapping[str, str], pyvrp_seconds: float) -> float | None:
    """Mean PyVRP cost (exact convention) of a run's validation set, regenerated from its
    params (``data.problem``, ``data.num_customers``, ``validation.size``/``.seed``); None
    without a generated validation set."""
    from dataclasses import replace

    from linc_core.evaluate.pyvrp_cache import pyvrp_costs
    from linc_core.train.data import generate

    if params.get("validation.source") != "generated":
        return None
    size, seed = int(params["validation.size"]), int(params["validation.seed"])
    batch = generate(params["data.problem"], size, int(params["data.num_customers"]), seed)
    names = tuple(f"validation-{seed}-{i:04d}" for i in range(size))
    batch = replace(batch, names=names)
    singles = [batch.select([i]) for i in range(size)]
    costs = pyvrp_costs(singles, "exact", pyvrp_seconds)
    return float(np.mean(list(costs.values()))) if len(costs) == size else None


def quality_curves(
    client: Any, runs: Sequence[Any], pyvrp_seconds: float = 1.0
) -> dict[str, dict[int, Curve]]:
    """``{variant: {seed: [(train_seconds, gap %), ...]}}`` of the finished trial ``runs``
    that validated (module docstring)."""
    curves: dict[str, dict[int, Curve]] = {}
    for run in runs:
        tags, params = run.data.tags, run.data.params
        validation = client.get_metric_history(run.info.run_id, VALIDATION_COST)
        clock = {
            int(m.step): float(m.value)
            for m in client.get_metric_history(run.info.run_id, TRAIN_SECONDS)
        }
        if not validation or not clock:
            continue
        reference = validation_reference(params, pyvrp_seconds)
        if reference is None:
            continue
        points = sorted(
            (clock[int(m.step)], 100.0 * (float(m.value) - reference) / reference)
            for m in validation
            if int(m.step) in clock
        )
        curves.setdefault(tags["variant"], {})[int(tags["seed"])] = points
    return curves


def band(
    seeds: Mapping[int, Curve], points: int = 60
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(seconds, mean, low, high)`` over seeds on a common grid from the earliest validation
    to the latest: each seed's gap at a time is its last validation at or before it (none
    before its first), the mean and band over the seeds that have one."""
    start = min(curve[0][0] for curve in seeds.values())
    end = max(curve[-1][0] for curve in seeds.values())
    grid = np.linspace(start, end, points) if end > start else np.asarray([end])
    values = np.full((len(seeds), len(grid)), np.nan)
    for row, curve in enumerate(seeds.values()):
        times = np.asarray([t for t, _ in curve])
        gaps = np.asarray([g for _, g in curve])
        index = np.searchsorted(times, grid, side="right") - 1
        values[row] = np.where(index >= 0, gaps[np.clip(index, 0, len(gaps) - 1)], np.nan)
    return grid, np.nanmean(values, 0), np.nanmin(values, 0), np.nanmax(values, 0)


def gap_axis_scale(gaps: Sequence[float]) -> str:
    """``"log"`` when every finite gap is positive, else ``"linear"``. An untrained policy's gap
    is some hundreds of percent and a trained one's tens: on a linear axis the end of training,
    where the models differ by a few points, is a flat line at the bottom."""
    finite = [g for g in gaps if math.isfinite(g)]
    return "log" if finite and min(finite) > 0 else "linear"


def time_to_quality_chart(
    curves: Mapping[str, Mapping[int, Curve]], peers: Mapping[str, Curve] | None = None
) -> Chart:
    """Validation gap (%) against training minutes: per model the mean over seeds and its
    band (lowest to highest seed), ``peers`` (``{label: curve}``: an external model trained for
    the same minutes on the same machine) dashed. ``values``: per label the last point drawn
    ``(minutes, gap)``: the gap each reached at the budget."""
    figure = new_figure(8.0, 4.5)
    axes = figure.add_subplot()
    reached: dict[str, tuple[float, float]] = {}
    drawn: list[float] = []
    order = [v for v in PRESETS if v in curves] + sorted(set(curves) - set(PRESETS))
    for variant in order:
        label = PRESETS[variant].label if variant in PRESETS else variant
        grid, mean, low, high = band(curves[variant])
        (line,) = axes.plot(
            grid / 60.0, mean, linewidth=1.8, label=f"{label} ({len(curves[variant])} seeds)"
        )
        axes.fill_between(grid / 60.0, low, high, color=line.get_color(), alpha=0.2)
        drawn += [*low.tolist(), *high.tolist()]
        reached[label] = (float(grid[-1] / 60.0), float(mean[-1]))
    for label, curve in (peers or {}).items():
        minutes = [t / 60.0 for t, _ in curve]
        axes.plot(minutes, [g for _, g in curve], linestyle="--", color="black", label=label)
        reached[label] = (minutes[-1], curve[-1][1])
        drawn += [g for _, g in curve]
    scale = gap_axis_scale(drawn)
    axes.set_yscale(scale)
    if scale == "log":
        from matplotlib.ticker import FuncFormatter  # drawn only here, as figures.py does

        axes.grid(True, which="both", axis="y", alpha=0.3)
        plain = FuncFormatter(lambda value, _: f"{value:g}")  # 20, not 2 x 10^1
        axes.yaxis.set_major_formatter(plain)
        axes.yaxis.set_minor_formatter(plain)
    axes.set_xlabel("training time (minutes of the budget's clock: steps only)")
    axes.set_ylabel(f"validation gap to PyVRP (%){', log scale' if scale == 'log' else ''}")
    axes.set_title("Time to quality (mean over seeds; band: lowest to highest seed)")
    if reached:
        axes.legend(fontsize=8)
    finite = {k: v for k, v in reached.items() if math.isfinite(v[1])}
    return Chart(png_bytes(figure), finite)


__all__ = [
    "Curve",
    "band",
    "gap_axis_scale",
    "quality_curves",
    "time_to_quality_chart",
    "validation_reference",
]
