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

from linc_core.metrics import TRAIN_BEST_COST
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


# Fourteen colours apart from each other and from the reference's black: tab10 (tab20 pairs
# near-identical shades), then four dark ones drawn dashed as well (the paper's 14 variants).
DISTINCT_COLOURS = (
    *(f"tab:{name}" for name in ("blue", "orange", "green", "red", "purple", "brown", "pink")),
    *("tab:gray", "tab:olive", "tab:cyan", "#000075", "#800000", "#469990", "#b8860b"),
)


def _colours(count: int) -> list[tuple[Any, str]]:
    """(colour, line style) per series: :data:`DISTINCT_COLOURS` (solid, the last four
    dashed), then the same again dotted past fourteen."""
    return [
        (DISTINCT_COLOURS[i % 14], "-" if i < 10 else "--" if i < 14 else ":") for i in range(count)
    ]


def _integer_epochs(axes: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))


def training_curves(
    histories: Mapping[str, Mapping[Any, Sequence[tuple[int, float]]]],
    metric: str = TRAIN_BEST_COST,
    reference: str | None = None,
) -> Chart:
    """One line per variant: the mean over seeds of ``metric`` per epoch (thick; with several
    seeds each seed as a thin line of the same colour), each variant in its own colour; the
    ``reference`` variant in black, thicker, drawn on top of the others.

    Args:
        histories: ``{variant: {seed: [(epoch, value), ...]}}`` (MLflow metric histories).
        metric: the metric's name (the y label).
        reference: the variant the ablation compares to (drawn in black), if any.

    Returns:
        The chart; ``values`` maps each variant's label to its plotted mean curve
        ``[(epoch, mean), ...]`` (epochs every seed reached).
    """
    figure = new_figure(11.0, 5.0)
    axes = figure.add_subplot()
    order = [v for v in PRESETS if v in histories] + sorted(set(histories) - set(PRESETS))
    styles = iter(_colours(len(order)))
    several = any(len(seeds) > 1 for seeds in histories.values())
    plotted: dict[str, Any] = {}
    for variant in order:
        colour, style = ("black", "-") if variant == reference else next(styles)
        on_top = {"zorder": 4} if variant == reference else {}
        seeds = histories[variant]
        for points in seeds.values():
            if len(seeds) > 1:
                epochs, values = zip(*sorted(points), strict=True)
                axes.plot(epochs, values, color=colour, linestyle=style, linewidth=0.6, alpha=0.35)
        shared = set.intersection(*(set(e for e, _ in p) for p in seeds.values()))
        epochs = sorted(shared)
        means = [float(np.mean([dict(p)[e] for p in seeds.values()])) for e in epochs]
        label = _label(variant, reference)
        width = 2.6 if variant == reference else 1.8
        (line,) = axes.plot(
            epochs, means, color=colour, linestyle=style, linewidth=width, label=label, **on_top
        )
        drawn = zip(line.get_xdata(), line.get_ydata(), strict=True)
        plotted[label] = [(int(epoch), float(value)) for epoch, value in drawn]
    _integer_epochs(axes)
    axes.set_xlabel("epoch")
    seeds_note = " (mean over seeds; thin lines: single seeds)" if several else ""
    axes.set_ylabel(f"{metric}{seeds_note}")
    axes.set_title(f"Training curves: {metric} per epoch")
    if order:
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
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
    metric: str = TRAIN_BEST_COST,
    columns: int = 4,
) -> Chart:
    """The paper's appendix figure: one panel per variant, ``compare_to``'s training curve
    (black) against the variant's (blue), each the mean over seeds with a band from the lowest
    to the highest seed; one y scale for every panel, a legend, labelled axes.

    Returns:
        The chart; ``values`` maps each variant's label to ``{"variant": [(epoch, mean)],
        "reference": [(epoch, mean)]}`` as drawn.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    others = [v for v in PRESETS if v in histories and v != compare_to]
    others += sorted(set(histories) - set(PRESETS) - {compare_to})
    rows = max(1, math.ceil(len(others) / columns))
    figure = new_figure(3.4 * columns, 2.8 * rows + 1.0)
    reference = _band(histories[compare_to]) if compare_to in histories else None
    several = any(len(seeds) > 1 for seeds in histories.values())
    bands = [b for b in [reference, *(_band(histories[v]) for v in others)] if b is not None]
    low = min((min(b[2]) for b in bands if b[0]), default=0.0)
    high = max((max(b[3]) for b in bands if b[0]), default=1.0)
    margin = 0.04 * (high - low or 1.0)
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
            epochs, mean, lows, highs = band
            if several:
                axes.fill_between(epochs, lows, highs, color=colour, alpha=0.15, linewidth=0)
            (line,) = axes.plot(epochs, mean, color=colour, linewidth=1.4)
            drawn[key] = [
                (int(e), float(v)) for e, v in zip(line.get_xdata(), line.get_ydata(), strict=True)
            ]
        axes.set_ylim(low - margin, high + margin)
        _integer_epochs(axes)
        axes.set_title(_label(variant, None), fontsize=9)
        axes.tick_params(labelsize=8)
        if index % columns == 0:
            axes.set_ylabel(metric, fontsize=8)
        if index >= len(others) - columns:
            axes.set_xlabel("epoch", fontsize=8)
        plotted[_label(variant, None)] = drawn
    handles = [
        Line2D([], [], color="black", linewidth=1.4, label=_label(compare_to, compare_to)),
        Line2D([], [], color="tab:blue", linewidth=1.4, label="the panel's variant"),
    ]
    if several:
        handles.append(Patch(color="grey", alpha=0.3, label="lowest to highest seed"))
    figure.legend(handles=handles, loc="upper right", fontsize=9, ncol=len(handles))
    seeds_note = "mean over seeds" if several else "one seed"
    figure.suptitle(f"{metric} per epoch, each variant against the reference ({seeds_note})")
    return Chart(png_bytes(figure), plotted)


def _label(variant: str, compare_to: str | None) -> str:
    label = PRESETS[variant].label if variant in PRESETS else variant
    return f"{label} (reference)" if variant == compare_to else label


__all__ = ["Chart", "ablation_chart", "pairwise_curves", "training_curves"]
