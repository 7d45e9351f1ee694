"""Final evaluation of a trial's policy, logged to its MLflow run.

Decoding, verification and scoring are ``linc_core.evaluate.evaluate_policy`` (every solution
re-checked by the independent verifier; an infeasible one is an error row, never dropped); this
module decodes the plan's evaluation set with each of its decodings (``EvaluationSource.decodings``:
the first gives ``eval_cost``, each further one its metrics and files under its name, e.g.
``eval_cost_sgbs`` and ``evaluation_rows_sgbs.csv``) and logs the rows, the summary and a route
plot as artifacts of the trial's run.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from linc_core.decoding import DecodeConfig
from linc_core.evaluate import (
    Evaluation,
    evaluate_set,
    planned_rollouts,
    plot_routes,
    pyvrp_costs,
    rows_csv,
    summary_json,
)
from linc_core.evaluate.benchmark_sets import BenchmarkSet
from linc_core.metrics import (
    EVAL_COST,
    EVAL_GAP_BKS_PCT,
    EVAL_GAP_PYVRP_PCT,
    EVAL_INFEASIBLE,
    EVAL_SECONDS,
    per_decoding,
)
from linc_core.model import LincPolicy
from linc_core.presets import PRESETS
from linc_core.runs.memory import chunk_under_limit
from linc_core.runs.plan import EvaluationSource
from linc_core.utils.atomic import write_atomic
from linc_core.utils.progress import Progress
from linc_core.utils.runtime import release_free_heap
from orchestration.report.ablation import EVALUATION_ROWS, EVALUATION_SUMMARY, artifact_name


def decode_config(
    policy: LincPolicy,
    source: EvaluationSource,
    compiled: bool = False,
    decoding: str | None = None,
) -> DecodeConfig:
    """The final-evaluation budget of ``decoding`` (default: the source's first) for
    ``policy`` (``DecodeConfig.for_evaluation``); ``compiled``: the run's ``train.compile``,
    which the evaluation follows."""
    return DecodeConfig.for_evaluation(
        decoding or source.decoding,
        source.rollouts,
        source.augment,
        source.seed,
        policy.config.z_dim,
        compiled,
    )


def evaluate_trial(
    policy: LincPolicy,
    evaluated: BenchmarkSet,
    source: EvaluationSource,
    label: str = "",
    compiled: bool = False,
    variant: str = "",
    reserved_bytes: int = 0,
) -> dict[str, Evaluation]:
    """Decode the set's instances (``[1]`` each) with each of the source's decodings, costs
    in the set's convention, gaps to its best-known values and to PyVRP (when
    ``source.pyvrp_seconds``). Unreadable files of the set are error rows of every decoding.

    A long evaluation prints a progress line every 30 s (``label`` names the trial): the
    driver's console shows the trial's last epoch, then nothing until it finishes. The rows'
    method is the ``variant``'s label and the decoding (``PolyNet sampling z=800 x8``).

    A policy on the CPU given the memory its trial reserved (``reserved_bytes``) decodes in
    chunks that fit in what its process has left of it
    (``linc_core.runs.memory.chunk_under_limit``, as ``linc-eval`` in a container; the rows do
    not depend on the chunk; each summary's ``decode`` records the one used), and gives its
    free heap back after each decoding.
    """
    pyvrp = None
    if source.pyvrp_seconds > 0 and evaluated.instances:  # the gap's reference, cached
        pyvrp = pyvrp_costs(evaluated.instances, evaluated.convention, source.pyvrp_seconds)
    name = PRESETS[variant].label if variant in PRESETS else (variant or "policy")
    sized = reserved_bytes > 0 and next(policy.parameters()).device.type == "cpu"
    results = {}
    for decoding in source.decodings:
        config = decode_config(policy, source, compiled, decoding)
        if sized:
            config = _within_reservation(config, evaluated, policy, reserved_bytes, label)
        method = f"{name} {config.label}"
        total = planned_rollouts(config, evaluated.instances, policy.config.z_dim)
        desc = f"{label} evaluation ({config.label})".strip()
        with Progress(total, desc, "rollout", stream=sys.stdout, interval=30.0) as progress:
            results[decoding] = evaluate_set(
                policy, evaluated, config, method=method, pyvrp=pyvrp, progress=progress.update
            )
        results[decoding].summary["decode"] = asdict(config)  # as linc-eval's summary.json
        if sized:
            release_free_heap()  # the next decoding starts from the live tensors only
    return results


def _within_reservation(
    config: DecodeConfig, evaluated: BenchmarkSet, policy: LincPolicy, reserved: int, label: str
) -> DecodeConfig:
    """``config`` with a smaller chunk where its own would not fit in what the trial's
    process has left of its reservation (said in one line)."""
    width, z_dim = policy.config.embedding_dim, policy.config.z_dim
    chunk = chunk_under_limit(config, evaluated.instances, reserved, width=width, z_dim=z_dim)
    if chunk is None:
        return config
    reserved_mib = reserved / 2**20
    print(
        f"{label} evaluation ({config.label}): decoding at most {chunk} rollouts at a time "
        f"within the {reserved_mib:,.0f} MiB the trial reserved (cluster.memory_per_trial_gb, "
        "else its estimate)".strip(),
        flush=True,
    )
    return replace(config, max_rollouts_per_chunk=chunk)


def evaluation_metrics(evaluation: Evaluation) -> dict[str, float]:
    """``eval_cost`` (mean cost over feasible solutions), ``eval_infeasible`` (count),
    ``eval_seconds`` and, where the instances have them, ``eval_gap_bks_pct`` and
    ``eval_gap_pyvrp_pct`` (mean gaps to the best-known values and to PyVRP)."""
    summary = evaluation.summary
    mean = summary["mean_cost"]
    metrics = {
        EVAL_COST: float(mean) if math.isfinite(mean) else math.inf,
        EVAL_INFEASIBLE: float(summary["errors"]),
        EVAL_SECONDS: float(summary["seconds"]),
    }
    gaps = ((EVAL_GAP_BKS_PCT, "mean_gap_bks_pct"), (EVAL_GAP_PYVRP_PCT, "mean_pyvrp_gap_pct"))
    for metric, key in gaps:
        if math.isfinite(summary[key]):
            metrics[metric] = float(summary[key])
    return metrics


def log_evaluation(
    mlflow: Any,
    evaluations: dict[str, Evaluation],
    evaluated: BenchmarkSet,
    source: EvaluationSource,
    folder: Path,
) -> dict[str, float]:
    """Log each decoding's rows (CSV), summary (JSON) and metrics (a further decoding's named
    for it) and a route plot of the first instance; returns the metrics logged."""
    folder.mkdir(parents=True, exist_ok=True)
    logged: dict[str, float] = {}
    for decoding, evaluation in evaluations.items():
        first = decoding == source.decoding
        for name, content in (
            (EVALUATION_ROWS, rows_csv(evaluation.rows)),
            (EVALUATION_SUMMARY, summary_json(evaluation.summary)),
        ):
            path = folder / artifact_name(name, decoding, first)
            write_atomic(path, content)
            mlflow.log_artifact(str(path))
        for key, value in evaluation_metrics(evaluation).items():
            logged[key if first else per_decoding(key, decoding)] = value
    mlflow.log_metrics(logged)
    mlflow.set_tag("eval_set", evaluated.name)
    evaluation = evaluations[source.decoding]
    row = evaluation.rows[0] if evaluation.rows else None
    solution = evaluation.solutions.get(row.instance) if row else None
    if row is not None and solution:
        instance = next(i for i in evaluated.instances if i.names[0] == row.instance)
        plot_path = folder / "routes.png"
        title = f"{evaluated.name} {row.instance}: {row.cost:.2f}"
        write_atomic(plot_path, plot_routes(instance, solution, title))
        mlflow.log_artifact(str(plot_path))
    return logged


__all__ = [
    "decode_config",
    "evaluate_trial",
    "evaluation_metrics",
    "log_evaluation",
]
