"""Scoring: decode, verify every solution, gaps against the BKS and PyVRP, summaries.

Every solution goes through ``verify.verify_instance`` under the set's convention: an
infeasible one is an error row (its violations spelled out), never dropped. Gaps:
``gap = 100 (cost - bks) / bks`` per instance; ``mean_gap`` is their mean and
``aggregate_gap = 100 (sum cost - sum bks) / sum bks`` over the instances that have both.
The same against PyVRP costs (:func:`linc_core.evaluate.pyvrp_cache.pyvrp_costs`). Beside the
mean, the median gap and, on Solomon-style names, the mean gap of each family (C1 ... RC2): a
mean over 56 instances can move with one or two collapsed instances while most improve.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from linc_core.decoding import DecodeConfig, decode
from linc_core.instances import Instance
from linc_core.instances.benchmarks import instance_family
from linc_core.verify import verify_instance

if TYPE_CHECKING:  # benchmark_sets reads files; scoring needs only the type
    from linc_core.evaluate.benchmark_sets import BenchmarkSet


@dataclass
class EvalRow:
    """One instance's result. ``error`` is set when the file was unreadable or the solution
    broke a constraint; its cost is then not counted in any mean or gap."""

    instance: str
    method: str
    n_customers: int | None
    feasible: bool
    cost: float
    cost_exact: float
    num_routes: int
    bks: float
    gap_bks_pct: float
    pyvrp_cost: float
    pyvrp_gap_pct: float
    seconds: float
    error: str = ""


def _gap(cost: float, base: float) -> float:
    if not (math.isfinite(cost) and math.isfinite(base)) or base == 0:
        return math.nan
    return 100.0 * (cost - base) / base


def score_solutions(
    instances: Sequence[Instance],
    solutions: Sequence[Sequence[Sequence[int]]],
    *,
    convention: str,
    method: str,
    bks: Mapping[str, float] | None = None,
    pyvrp: Mapping[str, float] | None = None,
    seconds: Sequence[float] | None = None,
) -> list[EvalRow]:
    """Verify one solution per B = 1 instance and build its report row.

    Args:
        instances: the instances as read (float64 recommended for exact re-scoring).
        solutions: verifier-format solutions (``verify.verify_routes``), one per instance.
        convention: cost convention of the set (also used for the time-window check).
        bks, pyvrp: best-known / PyVRP cost per instance name.
        seconds: decoding time attributed to each instance.
    """
    rows = []
    for i, (instance, solution) in enumerate(zip(instances, solutions, strict=True)):
        name = instance.names[0] if instance.names else f"row{i}"
        checked = verify_instance(instance, 0, solution, convention=convention)
        exact = verify_instance(instance, 0, solution, convention="exact")
        error = ""
        if not checked.feasible:
            details = "; ".join(f"{v.kind}: {v.detail}" for v in checked.violations[:5])
            extra = len(checked.violations) - 5
            error = f"infeasible ({details}{f'; +{extra} more' if extra > 0 else ''})"
        cost = checked.cost if checked.feasible else math.nan
        best_known = float((bks or {}).get(name, math.nan))
        pyvrp_cost = float((pyvrp or {}).get(name, math.nan))
        rows.append(
            EvalRow(
                instance=name,
                method=method,
                n_customers=instance.num_customers,
                feasible=checked.feasible,
                cost=cost,
                cost_exact=exact.cost if checked.feasible else math.nan,
                num_routes=checked.num_routes,
                bks=best_known,
                gap_bks_pct=_gap(cost, best_known),
                pyvrp_cost=pyvrp_cost,
                pyvrp_gap_pct=_gap(cost, pyvrp_cost),
                seconds=float(seconds[i]) if seconds is not None else math.nan,
                error=error,
            )
        )
    return rows


def error_rows(errors: Sequence[tuple[str, str]], method: str) -> list[EvalRow]:
    """Rows for files that could not be read (named by file)."""
    nan = math.nan
    return [
        EvalRow(
            name, method, None, False, nan, nan, 0, nan, nan, nan, nan, nan, f"unreadable: {msg}"
        )
        for name, msg in errors
    ]


def family_gaps(rows: Sequence[EvalRow]) -> dict[str, dict[str, float]]:
    """``{family: {"mean_gap_bks_pct", "instances"}}`` over feasible rows with a BKS, families
    in name order; empty when no row has a Solomon-style name."""
    gaps: dict[str, list[float]] = {}
    for row in rows:
        family = instance_family(row.instance)
        if family is not None and row.feasible and math.isfinite(row.bks):
            gaps.setdefault(family, []).append(row.gap_bks_pct)
    return {
        family: {"mean_gap_bks_pct": float(np.mean(values)), "instances": len(values)}
        for family, values in sorted(gaps.items())
    }


def summarize(rows: Sequence[EvalRow], seconds: float, rollouts: int = 0) -> dict:
    """Means, medians and aggregate gaps over the feasible rows (errors counted, not averaged),
    and the mean gap of each Solomon family (:func:`family_gaps`)."""
    ok = [r for r in rows if r.feasible]

    def gaps(attr: str, base: str) -> tuple[float, float, float, int]:
        have = [r for r in ok if math.isfinite(getattr(r, base))]
        if not have:
            return math.nan, math.nan, math.nan, 0
        values = [getattr(r, attr) for r in have]
        total = sum(getattr(r, base) for r in have)
        aggregate = _gap(sum(r.cost for r in have), total)
        return float(np.mean(values)), float(np.median(values)), aggregate, len(have)

    mean_gap, median_gap, aggregate_gap, with_bks = gaps("gap_bks_pct", "bks")
    pyvrp_gap, _, pyvrp_aggregate, with_pyvrp = gaps("pyvrp_gap_pct", "pyvrp_cost")
    pyvrp_known = [r.pyvrp_cost for r in ok if math.isfinite(r.pyvrp_cost)]
    known = [r.bks for r in ok if math.isfinite(r.bks)]
    return {
        "instances": len(rows),
        "feasible": len(ok),
        "errors": len(rows) - len(ok),
        "mean_cost": float(np.mean([r.cost for r in ok])) if ok else math.nan,
        "mean_cost_exact": float(np.mean([r.cost_exact for r in ok])) if ok else math.nan,
        "mean_bks": float(np.mean(known)) if known else math.nan,
        "mean_gap_bks_pct": mean_gap,
        "median_gap_bks_pct": median_gap,
        "aggregate_gap_bks_pct": aggregate_gap,
        "family_gaps_bks": family_gaps(rows),
        "instances_with_bks": with_bks,
        "mean_pyvrp_cost": float(np.mean(pyvrp_known)) if pyvrp_known else math.nan,
        "mean_pyvrp_gap_pct": pyvrp_gap,
        "aggregate_pyvrp_gap_pct": pyvrp_aggregate,
        "instances_with_pyvrp": with_pyvrp,
        "seconds": seconds,
        "rollouts": rollouts,
        "rollouts_per_second": rollouts / seconds if seconds > 0 else math.nan,
    }


@dataclass
class Evaluation:
    """Rows and summary of one evaluated method on one set; ``solutions`` by instance name."""

    rows: list[EvalRow]
    summary: dict
    solutions: dict[str, list[list[int]]]


def evaluate_policy(
    policy: torch.nn.Module,
    instances: Instance | Sequence[Instance],
    config: DecodeConfig,
    *,
    convention: str = "exact",
    bks: Mapping[str, float] | Sequence[float] | None = None,
    pyvrp: Mapping[str, float] | None = None,
    method: str | None = None,
    progress: Callable[[int], None] | None = None,
    deadline: float | None = None,
) -> Evaluation:
    """Decode, verify and score instances: the library entry point of evaluation.

    Args:
        policy: a ``LincPolicy``.
        instances: a batch (any size) or a list of batches; instances of different sizes are
            decoded in separate groups. Unnamed rows are called ``row0``, ``row1``, ...
        config: decoding method and budget.
        convention: cost convention of the scores and gaps.
        bks: best-known cost by instance name, or one per instance in order.
        pyvrp: PyVRP cost by instance name.
        progress: called with rollouts completed (drives a progress bar).
        deadline: an instant of ``time.monotonic()`` past which decoding stops, raising
            ``linc_core.decoding.DeadlineExceeded`` (see ``decode``).
    """
    singles = _as_singles(instances)
    names = [s.names[0] for s in singles]
    if bks is not None and not isinstance(bks, Mapping):
        values = list(bks)
        if len(values) != len(singles):
            raise ValueError(f"bks: {len(values)} values for {len(singles)} instances")
        bks = dict(zip(names, (float(v) for v in values), strict=True))
    label = method or f"LINC {config.label}"
    solutions: list[list[list[int]] | None] = [None] * len(singles)
    seconds = [0.0] * len(singles)
    total_seconds, rollouts = 0.0, 0
    for size in sorted({s.num_nodes for s in singles}):
        members = [i for i, s in enumerate(singles) if s.num_nodes == size]
        batch = Instance.concat([singles[i] for i in members])
        result = decode(policy, batch, config, progress=progress, deadline=deadline)
        total_seconds += result.seconds
        rollouts += result.rollouts
        for j, i in enumerate(members):
            solutions[i] = result.routes[j]
            seconds[i] = result.seconds / len(members)
    rows = score_solutions(
        singles,
        solutions,
        convention=convention,
        method=label,
        bks=bks,
        pyvrp=pyvrp,
        seconds=seconds,
    )
    return Evaluation(
        rows,
        summarize(rows, total_seconds, rollouts),
        dict(zip(names, solutions, strict=True)),
    )


def planned_rollouts(
    config: DecodeConfig, instances: Instance | Sequence[Instance], z_dim: int
) -> int | None:
    """Rollouts ``evaluate_policy`` will decode on ``instances`` (a progress bar's total);
    None for SGBS, whose simulations depend on the search."""
    if config.method == "sgbs":
        return None
    singles = _as_singles(instances)
    if config.method == "multistart":
        starts = config.num_starts
        per_copy = sum(
            i.num_customers if starts is None else min(starts, i.num_customers) for i in singles
        )
        return per_copy * config.augment
    per_copy = 1 if config.method == "greedy" and z_dim == 0 else config.num_z
    return per_copy * config.augment * len(singles)


def _as_singles(instances: Instance | Sequence[Instance]) -> list[Instance]:
    batches = [instances] if isinstance(instances, Instance) else list(instances)
    singles, counter = [], 0
    for batch in batches:
        for b in range(batch.batch_size):
            single = batch.select([b])
            if single.names is None:
                single = replace(single, names=(f"row{counter}",))
            singles.append(single)
            counter += 1
    return singles


def evaluate_set(
    policy: torch.nn.Module,
    benchmark: BenchmarkSet,
    config: DecodeConfig,
    *,
    method: str,
    pyvrp: Mapping[str, float] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Evaluation:
    """:func:`evaluate_policy` over a benchmark set: its instances in its convention, gaps to
    its best-known values (and ``pyvrp``), its unreadable files as error rows of ``method``,
    and the summary over both (``linc-eval`` and a trial's final evaluation)."""
    evaluation = Evaluation([], summarize([], 0.0), {})
    if benchmark.instances:
        evaluation = evaluate_policy(
            policy,
            benchmark.instances,
            config,
            convention=benchmark.convention,
            bks=benchmark.bks,
            pyvrp=pyvrp,
            method=method,
            progress=progress,
        )
    if not benchmark.errors:
        return evaluation
    rows = evaluation.rows + error_rows(benchmark.errors, method)
    summary = summarize(rows, evaluation.summary["seconds"], evaluation.summary["rollouts"])
    return Evaluation(rows, summary, evaluation.solutions)
