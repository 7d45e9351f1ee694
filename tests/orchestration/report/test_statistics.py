"""Ablation statistics: intervals with known answers, paired differences, sign resolution."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestration.report.statistics import (
    paired_bootstrap,
    seed_interval,
    t_quantile,
    variant_statistics,
)

INSTANCES = [f"I{i:02d}" for i in range(56)]


def costs_for(values: np.ndarray, seeds: tuple[int, ...]) -> dict[int, dict[str, float]]:
    """``values`` ``[S, I]`` as ``{seed: {instance: cost}}``."""
    return {
        s: dict(zip(INSTANCES, row.tolist(), strict=True))
        for s, row in zip(seeds, values, strict=True)
    }


def test_a_constant_paired_shift_gives_a_zero_width_interval_at_the_shift() -> None:
    rng = np.random.default_rng(0)
    seeds = (1234, 42, 2026)
    full = 700 + 100 * rng.random((3, 56))
    costs = {"full_linc": costs_for(full, seeds), "baseline": costs_for(full + 12.5, seeds)}
    rows = {r.variant: r for r in variant_statistics(costs, "full_linc", replicates=2000)}
    baseline = rows["baseline"]
    assert baseline.diff == pytest.approx(12.5, abs=1e-9)
    assert baseline.diff_interval.low == pytest.approx(12.5, abs=1e-9)
    assert baseline.diff_interval.high == pytest.approx(12.5, abs=1e-9)
    assert baseline.resolved == "worse"
    assert baseline.gap_pct == pytest.approx(100 * 12.5 / full.mean())
    assert rows["full_linc"].diff == 0.0 and rows["full_linc"].resolved is None


def test_swapped_labels_flip_the_sign_of_the_difference_and_its_interval() -> None:
    rng = np.random.default_rng(1)
    seeds = (1, 2)
    a = 800 + 50 * rng.standard_normal((2, 56))
    b = a + 3.0 + 10 * rng.standard_normal((2, 56))
    forward = {"full_linc": costs_for(a, seeds), "group_mean": costs_for(b, seeds)}
    swapped = {"full_linc": costs_for(b, seeds), "group_mean": costs_for(a, seeds)}
    one = variant_statistics(forward, "full_linc", replicates=3000)[1]
    two = variant_statistics(swapped, "full_linc", replicates=3000)[1]
    assert two.diff == pytest.approx(-one.diff, abs=1e-9)
    # the same resamples: the interval of the negated differences is the negated interval
    assert two.diff_interval.low == pytest.approx(-one.diff_interval.high, abs=1e-9)
    assert two.diff_interval.high == pytest.approx(-one.diff_interval.low, abs=1e-9)


def test_seed_interval_is_the_student_t_interval() -> None:
    interval = seed_interval([1.0, 2.0, 3.0])  # mean 2, sd 1, t(0.975, 2) = 4.303
    half = 4.303 / math.sqrt(3)
    assert interval.low == pytest.approx(2 - half) and interval.high == pytest.approx(2 + half)
    assert seed_interval([5.0]) is None
    assert t_quantile(2) == 4.303 and t_quantile(1000) == pytest.approx(1.96, abs=1e-3)


def test_bootstrap_interval_of_iid_differences_has_the_normal_width() -> None:
    """400 iid N(2, 5^2) differences, one seed: the 95% interval of the mean is about
    2 +- 1.96 * 5 / 20 (within 10% in width) and contains the sample mean."""
    rng = np.random.default_rng(2)
    differences = 2.0 + 5.0 * rng.standard_normal((1, 400))
    baseline = np.full((1, 400), 100.0)
    diff, gap = paired_bootstrap(differences, baseline, replicates=20_000)
    width = diff.high - diff.low
    assert width == pytest.approx(2 * 1.96 * 5.0 / 20.0, rel=0.1)
    assert diff.low < differences.mean() < diff.high
    # a constant baseline of 100: the gap in percent is the difference itself
    assert gap.low == pytest.approx(diff.low) and gap.high == pytest.approx(diff.high)


def test_noise_around_zero_is_not_resolved() -> None:
    rng = np.random.default_rng(3)
    seeds = (1, 2, 3)
    full = 750 + 40 * rng.standard_normal((3, 56))
    noisy = full + 20 * rng.standard_normal((3, 56))
    noisy -= (noisy - full).mean()  # mean difference exactly 0
    rows = variant_statistics(
        {"full_linc": costs_for(full, seeds), "raw_linear": costs_for(noisy, seeds)},
        "full_linc",
        replicates=2000,
    )
    assert rows[1].resolved == "not resolved"
    assert rows[1].diff_interval.low < 0 < rows[1].diff_interval.high


def test_a_comparison_says_which_seeds_and_instances_it_paired() -> None:
    # Full LINC has seed 1 only (its other trials still running), the baseline seeds 1-3, and
    # the baseline's seed 1 lacks two instances: the comparison pairs 1 seed x 54 instances,
    # while the baseline's own mean keeps its 3 seeds
    rng = np.random.default_rng(3)
    full = costs_for(700 + 100 * rng.random((1, 56)), (1,))
    baseline = costs_for(700 + 100 * rng.random((3, 56)), (1, 2, 3))
    del baseline[1]["I00"], baseline[1]["I01"]
    rows = {
        r.variant: r
        for r in variant_statistics(
            {"full_linc": full, "polynet": baseline}, "full_linc", replicates=500
        )
    }
    theirs = rows["polynet"]
    assert (theirs.seeds, theirs.instances) == ((1, 2, 3), 54)
    assert (theirs.paired_seeds, theirs.paired_instances) == ((1,), 54)
    names = INSTANCES[2:]
    expected = np.mean([baseline[1][n] - full[1][n] for n in names])
    assert theirs.diff == pytest.approx(expected, abs=1e-9)
    assert (rows["full_linc"].paired_seeds, rows["full_linc"].paired_instances) == ((), 0)
    # no seed in common: no comparison, nothing paired
    apart = variant_statistics(
        {"full_linc": full, "pomo": costs_for(700 + rng.random((2, 56)), (2, 3))},
        "full_linc",
        replicates=500,
    )[1]
    assert apart.diff is None and (apart.paired_seeds, apart.paired_instances) == ((), 0)
