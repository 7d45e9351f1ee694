"""The sweep's figures: the ablation chart and the training curves of every variant.

Pure functions from rows to PNG bytes (matplotlib on the Agg canvas, :mod:`linc_core.plotting`);
nothing here reads MLflow or Ray. Each returns a :class:`Chart`: the PNG and the values it
plots, read back from the drawn artists, so a test (or a caption) can check the picture says
what the table says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from linc_core.plotting import new_figure, png_bytes
from linc_core.presets import PRESETS
from orchestration.tables import aggregate_rows

# The reference row's colour and every other bar's (matplotlib's default cycle, first two).
REFERENCE_COLOUR, VARIANT_COLOUR = "tab:orange", "tab:blue"


@dataclass(frozen=True)
class Chart:
    """A figure as PNG bytes and the values it plots, by label."""

    png: bytes
    values: dict[str, Any]


def ablation_chart(rows: Sequence[Mapping[str, Any]], compare_to: str) -> Chart:
    """Horizontal bars: each variant's gap to ``compare_to`` in percent (mean over seeds, the
    table's Gap column), in the table's row order; the reference row is drawn in its own colour
    and labelled as such. A variant without a cost (every seed failed) gets no bar.

    Args:
        rows: trial rows (``variant``, ``eval_cost``, ...: ``orchestration.tables``).
        compare_to: the reference variant (its gap is 0 by definition).

    Returns:
        The chart; ``values`` maps each variant's label to the plotted gap (None: no bar).
    """
    table = aggregate_rows(list(rows), compare_to)
    labels = [_label(row["variant"], compare_to) for row in table]
    gaps = [row["gap_pct"] for row in table]
    figure = new_figure(8.0, 0.45 * len(table) + 1.5)
    axes = figure.add_subplot()
    y = np.arange(len(table))[::-1]  # the table's first row on top
    colours = [REFERENCE_COLOUR if r["variant"] == compare_to else VARIANT_COLOUR for r in table]
    bars = axes.barh(y, [0.0 if g is None else g for g in gaps], color=colours)
    for bar, gap in zip(bars, gaps, strict=True):
        if gap is None:
            bar.set_visible(False)
        else:
            width = bar.get_width()
            axes.annotate(
                f"{gap:+.2f}",
                (width, bar.get_y() + bar.get_height() / 2),
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
    axes.set_xlabel(f"gap to {reference} (%), mean over seeds; lower is better")
    axes.set_title("Ablation: final evaluation cost relative to the reference")
    plotted = {
        label: (float(bar.get_width()) if bar.get_visible() else None)
        for label, bar in zip(labels, bars, strict=True)
    }
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


def _label(variant: str, compare_to: str | None) -> str:
    label = PRESETS[variant].label if variant in PRESETS else variant
    return f"{label} (reference)" if variant == compare_to else label


__all__ = ["Chart", "ablation_chart", "training_curves"]
