"""The sweep's figures: the ablation chart and the training curves of every variant.

Pure functions from rows to PNG bytes (matplotlib on the Agg canvas,
:mod:`linc_core.utils.plotting`); nothing here reads MLflow or Ray. Each returns a
:class:`Chart`: the PNG and the values it plots, read back from the drawn artists, so a test
(or a caption) can check the picture says what the table says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from linc_core.presets import PRESETS
from linc_core.utils.plotting import new_figure, png_bytes
from orchestration.report.tables import aggregate_rows

# The reference row's colour and every other bar's (matplotlib's default cycle, first two).
REFERENCE_COLOUR, VARIANT_COLOUR = "tab:orange", "tab:blue"


@dataclass(frozen=True)
class Chart:
    """A figure as PNG bytes and the values it plots, by label."""

    png: bytes
    values: dict[str, Any]


def ablation_chart(
    rows: Sequence[Mapping[str, Any]],
    compare_to: str,
    *,
    gaps: Mapping[str, float | None] | None = None,
    intervals: Mapping[str, tuple[float, float]] | None = None,
) -> Chart:
    """Horizontal bars: each variant's gap to ``compare_to`` in percent (mean over seeds, the
    table's Gap column), in the table's row order; the reference row is drawn in its own colour
    and labelled as such. A variant without a cost (every seed failed) gets no bar.

    Args:
        rows: trial rows (``variant``, ``eval_cost``, ...: ``orchestration.report.tables``).
        compare_to: the reference variant (its gap is 0 by definition).
        gaps: ``{variant: gap}`` to plot instead of the table's (the paired gaps of
            ``orchestration.report.statistics``).
        intervals: ``{variant: (low, high)}`` 95% intervals of the gaps, drawn as error bars.

    Returns:
        The chart; ``values`` maps each variant's label to the plotted gap (None: no bar) and
        ``intervals`` to the drawn ``(low, high)`` by label.
    """
    table = aggregate_rows(list(rows), compare_to)
    labels = [_label(row["variant"], compare_to) for row in table]
    gaps_by_variant = {row["variant"]: row["gap_pct"] for row in table} | dict(gaps or {})
    gaps = [gaps_by_variant.get(row["variant"]) for row in table]
    figure = new_figure(8.0, 0.45 * len(table) + 1.5)
    axes = figure.add_subplot()
    y = np.arange(len(table))[::-1]  # the table's first row on top
    colours = [REFERENCE_COLOUR if r["variant"] == compare_to else VARIANT_COLOUR for r in table]
    bars = axes.barh(y, [0.0 if g is None else g for g in gaps], color=colours)
    drawn_intervals: dict[str, tuple[float, float]] = {}
    for position, row, gap, label in zip(y, table, gaps, labels, strict=True):
        interval = (intervals or {}).get(row["variant"])
        if interval is None or gap is None:
            continue
        low, high = interval
        axes.errorbar(
            gap, position, xerr=[[gap - low], [high - gap]], fmt="none", ecolor="black", capsize=3
        )
        drawn_intervals[label] = (float(low), float(high))
    for bar, gap, label in zip(bars, gaps, labels, strict=True):
        if gap is None:
            bar.set_visible(False)
        else:
            width = bar.get_width()
            # the number sits past the whisker, where there is one
            low, high = drawn_intervals.get(label, (width, width))
            axes.annotate(
                f"{gap:+.2f}",
                (high if width >= 0 else low, bar.get_y() + bar.get_height() / 2),
                xytext=(3 if width >= 0 else -3, 0),
                textcoords="offset points",
                ha="left" if width >= 0 else "right",
                va="center",
                fontsize=8,
            )
    axes.set_yticks(y, labels)
    for position, row, tick in zip(y, table, axes.get_yticklabels(), strict=True):
        if row["variant"] == compare_to:  # its bar has no length: mark the whole row
            axes.axhspan(position - 0.45, position + 0.45, color=REFERENCE_COLOUR, alpha=0.2)
            tick.set_fontweight("bold")
    axes.axvline(0.0, color="black", linewidth=0.8)
    reference = PRESETS[compare_to].label if compare_to in PRESETS else compare_to
    what = "\nwhiskers: 95% paired bootstrap interval" if intervals else ""
    axes.set_xlabel(f"gap to {reference} (%), mean over seeds; lower is better{what}")
    axes.margins(x=0.12)
    axes.set_title("Ablation: final evaluation cost relative to the reference")
    plotted: dict[str, Any] = {
        label: (float(bar.get_width()) if bar.get_visible() else None)
        for label, bar in zip(labels, bars, strict=True)
    }
    if drawn_intervals:
        plotted["intervals"] = drawn_intervals
    return Chart(png_bytes(figure), plotted)


def training_curves(
    histories: Mapping[str, Mapping[Any, Sequence[tuple[int, float]]]],
    metric: str = "train_best_cost",
    reference: str | None = None,
) -> Chart:
    """One line per variant: the mean over seeds of ``metric`` per epoch (thick), each seed as
    a thin line of the same colour; the ``reference`` variant in black.

    Args:
        histories: ``{variant: {seed: [(epoch, value), ...]}}`` (MLflow metric histories).
        metric: the metric's name (the y label).
        reference: the variant the ablation compares to (drawn in black), if any.

    Returns:
        The chart; ``values`` maps each variant's label to its plotted mean curve
        ``[(epoch, mean), ...]`` (epochs every seed reached).
    """
    import matplotlib

    figure = new_figure(11.0, 5.0)
    axes = figure.add_subplot()
    order = [v for v in PRESETS if v in histories] + sorted(set(histories) - set(PRESETS))
    palette = matplotlib.colormaps["tab20" if len(order) > 10 else "tab10"]
    plotted: dict[str, Any] = {}
    for index, variant in enumerate(order):
        colour = "black" if variant == reference else palette(index % palette.N)
        seeds = histories[variant]
        for points in seeds.values():
            if len(seeds) > 1:
                epochs, values = zip(*sorted(points), strict=True)
                axes.plot(epochs, values, color=colour, linewidth=0.6, alpha=0.35)
        shared = set.intersection(*(set(e for e, _ in p) for p in seeds.values()))
        epochs = sorted(shared)
        means = [float(np.mean([dict(p)[e] for p in seeds.values()])) for e in epochs]
        label = _label(variant, reference)
        (line,) = axes.plot(epochs, means, color=colour, linewidth=1.8, label=label)
        drawn = zip(line.get_xdata(), line.get_ydata(), strict=True)
        plotted[label] = [(int(epoch), float(value)) for epoch, value in drawn]
    axes.set_xlabel("epoch")
    axes.set_ylabel(f"{metric} (mean over seeds; thin lines: single seeds)")
    axes.set_title("Training curves")
    if order:
        axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return Chart(png_bytes(figure), plotted)


def _band(
    seeds: Mapping[Any, Sequence[tuple[int, float]]],
) -> tuple[list[int], list[float], list[float], list[float]]:
    """(epochs every seed reached, mean, min, max over seeds) of one variant's curves."""
    shared = sorted(set.intersection(*(set(e for e, _ in p) for p in seeds.values())))
    values = np.asarray([[dict(p)[e] for e in shared] for p in seeds.values()], dtype=float)
    return shared, values.mean(0).tolist(), values.min(0).tolist(), values.max(0).tolist()


def pairwise_curves(
    histories: Mapping[str, Mapping[Any, Sequence[tuple[int, float]]]],
    compare_to: str,
    metric: str = "train_best_cost",
    columns: int = 4,
) -> Chart:
    """The paper's appendix figure: one panel per variant, ``compare_to``'s training curve (black)
    against the variant's (colour), each the mean over seeds with a band from the lowest to the
    highest seed.

    Returns:
        The chart; ``values`` maps each variant's label to ``{"variant": [(epoch, mean)],
        "reference": [(epoch, mean)]}`` as drawn.
    """
    others = [v for v in PRESETS if v in histories and v != compare_to]
    others += sorted(set(histories) - set(PRESETS) - {compare_to})
    rows = max(1, math.ceil(len(others) / columns))
    figure = new_figure(3.2 * columns, 2.6 * rows + 0.6)
    reference = _band(histories[compare_to]) if compare_to in histories else None
    plotted: dict[str, Any] = {}
    for index, variant in enumerate(others):
        axes = figure.add_subplot(rows, columns, index + 1)
        drawn: dict[str, Any] = {}
        for key, band, colour in (
            ("reference", reference, "black"),
            ("variant", _band(histories[variant]), "tab:blue"),
        ):
            if band is None:
                continue
            epochs, mean, low, high = band
            axes.fill_between(epochs, low, high, color=colour, alpha=0.15, linewidth=0)
            (line,) = axes.plot(epochs, mean, color=colour, linewidth=1.2)
            drawn[key] = [
                (int(e), float(v)) for e, v in zip(line.get_xdata(), line.get_ydata(), strict=True)
            ]
        label = _label(variant, None)
        axes.set_title(f"{label} (blue) vs {_label(compare_to, None)}", fontsize=7)
        axes.tick_params(labelsize=6)
        plotted[label] = drawn
    figure.suptitle(f"{metric} per epoch: mean over seeds, band from lowest to highest seed")
    return Chart(png_bytes(figure), plotted)


def _label(variant: str, compare_to: str | None) -> str:
    label = PRESETS[variant].label if variant in PRESETS else variant
    return f"{label} (reference)" if variant == compare_to else label


__all__ = ["Chart", "ablation_chart", "pairwise_curves", "training_curves"]
