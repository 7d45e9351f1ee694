"""What an ablation resolves: per-variant means with intervals and paired differences.

Input: the per-instance evaluation costs of every trial, ``costs[variant][seed]`` a mapping
instance name -> cost (every variant evaluates the same instances with the same decoding seed,
``orchestration.trial.evaluation``). Output, per variant (``variant_statistics``):

- ``obj``: the mean cost over seeds and instances, and a 95% interval of it over seeds (Student t
  on the per-seed means; none with one seed): how far the training seed moves the variant;
- ``diff``: the mean paired difference to the comparison variant (``compare_to``, Full LINC),
  ``mean_{s,i} (c_variant[s, i] - c_compare[s, i])`` over the seeds and instances both have, and
  its paired bootstrap 95% interval: each of ``replicates`` resamples draws the seeds and the
  instances with replacement (one draw of instances shared by every drawn seed, so an instance's
  difficulty stays paired across seeds) and takes the mean of the drawn differences; the
  percentile interval (2.5, 97.5). With one seed this is the paper's bootstrap over instances
  (appendix, paired over test instances under fixed checkpoints);
- ``gap_pct``: ``100 diff / obj(compare_to)``, with the interval of that ratio from the same
  resamples;
- ``resolved``: ``better`` / ``worse`` when the interval excludes 0, else ``not resolved``.

Everything is deterministic for a given ``seed`` of the bootstrap; instance and seed order do not
matter (keys are sorted).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

# Two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom (then the normal's).
_T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
REPLICATES = 10_000
BOOTSTRAP_SEED = 20261124

Costs = Mapping[str, Mapping[int, Mapping[str, float]]]


def t_quantile(dof: int) -> float:
    """The 97.5% quantile of Student's t with ``dof`` degrees of freedom (``dof >= 1``)."""
    return _T_975[dof - 1] if dof <= len(_T_975) else 1.959964


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class VariantStatistics:
    """One variant's row (see the module docstring). Intervals are None where they cannot be
    computed (one seed for ``obj_interval``; no comparison for the rest)."""

    variant: str
    seeds: tuple[int, ...]
    instances: int
    obj: float
    obj_interval: Interval | None
    diff: float | None
    diff_interval: Interval | None
    gap_pct: float | None
    gap_interval: Interval | None
    resolved: str | None
    # what the comparison with ``compare_to`` paired: the seeds both have, and the instances
    # every one of those seeds evaluated in both (empty / 0 without a comparison)
    paired_seeds: tuple[int, ...] = ()
    paired_instances: int = 0


def seed_interval(per_seed_means: list[float]) -> Interval | None:
    """95% t-interval of the mean of the per-seed means (None for fewer than two seeds)."""
    n = len(per_seed_means)
    if n < 2:
        return None
    values = np.asarray(per_seed_means, dtype=np.float64)
    half = t_quantile(n - 1) * values.std(ddof=1) / math.sqrt(n)
    return Interval(float(values.mean() - half), float(values.mean() + half))


def paired_bootstrap(
    differences: np.ndarray,
    baseline: np.ndarray,
    *,
    replicates: int = REPLICATES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[Interval, Interval]:
    """Percentile intervals of the mean difference and of ``100 mean(diff) / mean(baseline)``.

    Args:
        differences: ``[S, I]`` paired differences (seed x instance).
        baseline: ``[S, I]`` the comparison variant's costs (for the relative gap).

    Returns:
        (interval of the mean difference, interval of the gap in percent).
    """
    s, i = differences.shape
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, s, size=(replicates, s))  # [R, S]
    instances = rng.integers(0, i, size=(replicates, i))  # [R, I]
    # the mean over the drawn (seed, instance) grid of each replicate
    drawn = differences[seeds[:, :, None], instances[:, None, :]]  # [R, S, I]
    drawn_base = baseline[seeds[:, :, None], instances[:, None, :]]
    mean_diff = drawn.mean(axis=(1, 2))
    gap = 100.0 * mean_diff / drawn_base.mean(axis=(1, 2))
    low, high = np.percentile(mean_diff, [2.5, 97.5])
    gap_low, gap_high = np.percentile(gap, [2.5, 97.5])
    return Interval(float(low), float(high)), Interval(float(gap_low), float(gap_high))


def _grid(
    costs: Mapping[int, Mapping[str, float]], seeds: list[int], names: list[str]
) -> np.ndarray:
    return np.asarray([[costs[s][n] for n in names] for s in seeds], dtype=np.float64)


def paired_gap_pct(ours: Mapping[str, float], theirs: Mapping[str, float]) -> float | None:
    """``100 mean_i (ours[i] - theirs[i]) / mean_i theirs[i]`` over the instances both have
    (None: none shared): one seed's gap, as :func:`variant_statistics` takes it over seeds."""
    shared = sorted(set(ours) & set(theirs))
    if not shared:
        return None
    a = np.asarray([ours[n] for n in shared], dtype=np.float64)
    b = np.asarray([theirs[n] for n in shared], dtype=np.float64)
    return float(100.0 * (a - b).mean() / b.mean())


def variant_statistics(
    costs: Costs,
    compare_to: str | None,
    *,
    replicates: int = REPLICATES,
    seed: int = BOOTSTRAP_SEED,
) -> list[VariantStatistics]:
    """One ``VariantStatistics`` per variant of ``costs`` (in the mapping's order).

    A variant's mean uses its own seeds and the instances all of them evaluated; its comparison
    uses the seeds and instances it shares with ``compare_to``.
    """
    rows = []
    reference = costs.get(compare_to) if compare_to is not None else None
    for variant, by_seed in costs.items():
        seeds = sorted(by_seed)
        names = sorted(set.intersection(*(set(by_seed[s]) for s in seeds))) if seeds else []
        grid = _grid(by_seed, seeds, names)
        per_seed = grid.mean(axis=1).tolist()
        diff = diff_interval = gap = gap_interval = resolved = None
        shared_seeds, shared = [], []
        if reference is not None and variant != compare_to:
            shared_seeds = sorted(set(seeds) & set(reference))
            shared = (
                sorted(
                    set.intersection(*(set(by_seed[s]) & set(reference[s]) for s in shared_seeds))
                )
                if shared_seeds
                else []
            )
            if shared:
                ours = _grid(by_seed, shared_seeds, shared)
                theirs = _grid(reference, shared_seeds, shared)
                differences = ours - theirs
                diff = float(differences.mean())
                gap = 100.0 * diff / float(theirs.mean())
                diff_interval, gap_interval = paired_bootstrap(
                    differences, theirs, replicates=replicates, seed=seed
                )
                resolved = (
                    ("worse" if diff_interval.low > 0 else "better")
                    if diff_interval.excludes_zero()
                    else "not resolved"
                )
        elif variant == compare_to:
            diff, gap = 0.0, 0.0
        rows.append(
            VariantStatistics(
                variant=variant,
                seeds=tuple(seeds),
                instances=len(names),
                obj=float(np.mean(per_seed)) if per_seed else math.nan,
                obj_interval=seed_interval(per_seed),
                diff=diff,
                diff_interval=diff_interval,
                gap_pct=gap,
                gap_interval=gap_interval,
                resolved=resolved,
                paired_seeds=tuple(shared_seeds) if shared else (),
                paired_instances=len(shared),
            )
        )
    return rows


__all__ = [
    "BOOTSTRAP_SEED",
    "REPLICATES",
    "paired_gap_pct",
    "Interval",
    "VariantStatistics",
    "paired_bootstrap",
    "seed_interval",
    "t_quantile",
    "variant_statistics",
]
