"""The time-to-quality figure: the band over seeds by hand, the axis that keeps the end of
training readable, and the gap each curve reached at the budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestration.report.time_to_quality import band, gap_axis_scale, time_to_quality_chart
from tests.conftest import PNG_MAGIC


def test_the_band_is_each_seeds_last_validation_at_or_before_each_time() -> None:
    # seed 1 validates at 0, 60, 120 s; seed 2 at 30 and 120 s
    seeds = {1: [(0.0, 300.0), (60.0, 50.0), (120.0, 20.0)], 2: [(30.0, 200.0), (120.0, 30.0)]}
    grid, mean, low, high = band(seeds, points=5)  # 0, 30, 60, 90, 120 s
    assert grid.tolist() == [0.0, 30.0, 60.0, 90.0, 120.0]
    # at 0 s only seed 1 has a validation; then both (seed 2 holds 200 until 120 s)
    assert mean.tolist() == [300.0, 250.0, 125.0, 125.0, 25.0]
    assert low.tolist() == [300.0, 200.0, 50.0, 50.0, 20.0]
    assert high.tolist() == [300.0, 300.0, 200.0, 200.0, 30.0]


def test_positive_gaps_get_a_log_axis_and_a_negative_or_no_gap_a_linear_one() -> None:
    assert gap_axis_scale([325.0, 40.0, 19.5]) == "log"
    assert gap_axis_scale([325.0, math.nan, 19.5]) == "log"  # a seed without a validation yet
    assert gap_axis_scale([12.0, -0.4]) == "linear"  # a model better than the reference
    assert gap_axis_scale([0.0, 5.0]) == "linear"
    assert gap_axis_scale([]) == "linear"


def test_the_chart_reports_the_gap_each_model_and_peer_reached_at_the_budget() -> None:
    curves = {
        "full_linc": {1: [(0.0, 150.0), (3600.0, 20.0)], 2: [(0.0, 170.0), (3590.0, 24.0)]},
        "polynet": {1: [(0.0, 160.0), (3600.0, 26.0)]},
    }
    peer = {"rl4co PolyNet": [(0.0, 325.0), (1800.0, 40.0), (3600.0, 27.4)]}
    chart = time_to_quality_chart(curves, peer)
    assert chart.png.startswith(PNG_MAGIC)
    # Full LINC's mean over its seeds at the grid's end (seed 2 holds its last, 24): (20+24)/2
    assert chart.values["Full LINC"] == pytest.approx((60.0, 22.0))
    assert chart.values["PolyNet"] == pytest.approx((60.0, 26.0))
    assert chart.values["rl4co PolyNet"] == pytest.approx((60.0, 27.4))
    assert np.isfinite(list(chart.values.values())).all()
