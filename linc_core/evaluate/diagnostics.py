"""Mechanism diagnostics of the LINC scorer (paper appendix "Mechanism Diagnostics").

    linc-diagnose --checkpoint runs/x/latest.pt [--benchmark solomon50] [--z 8] --out DIR

The policy decodes the set greedily with ``--z`` z-vectors per instance; at every decision
with at least two feasible actions the scorer's inputs (decoder context h, embeddings E,
consequence table, mask) are captured and three probes run on them:

1. **Common-translation probe.** A shared offset delta is added to every relative (centred)
   feature of every candidate, depot row included, while h, the mask and the summary r_t stay
   fixed. The centred comparator subtracts the feasible mean, so its probabilities cannot move;
   the same affine comparator without centring sees ``delta * sum(v_rel)`` added to every
   score, which the clipping ``C tanh(u / sqrt(d))`` turns into probability drift. Reported:
   mean total-variation distance to delta = 0 and the share of decisions whose top-1 action
   flips, per offset, for both.
2. **Summary modulation over construction progress** (customers served / n, 10 bins): the
   gate alpha, and the local-score share ``S_loc / (S_loc + S_base)`` where ``S_x`` is the mean
   absolute deviation of that score part over the feasible candidates (only differences
   between candidates move a softmax, so the candidate-common part is left out).
3. **Comparator weights by feasible-set size**: the mean of ``v = W_phi^T h~`` per feature,
   grouped by |F|.

Outputs in ``--out``: ``diagnostics.json`` and ``translation_probe.png``,
``modulation.png``, ``comparator_weights.png`` (matplotlib, Agg), all written atomically.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from linc_core.decoding.best_of_k import make_rows
from linc_core.instances import Instance
from linc_core.model.decisions import PolicyChooser
from linc_core.model.feasible_set import feasible_customers, feasible_stats, feature_major
from linc_core.model.policy import LincPolicy
from linc_core.model.sampling import greedy
from linc_core.problems import make_env
from linc_core.problems.protocol import RolloutState
from linc_core.problems.rollout import complete_rollouts, start_rollouts
from linc_core.utils.atomic import write_atomic
from linc_core.utils.plotting import new_figure, png_bytes

DEFAULT_OFFSETS: tuple[float, ...] = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
PROGRESS_BINS = 10
# Upper edges of the feasible-set size groups (|F| <= edge).
SIZE_EDGES: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 10**9)


@dataclass
class Diagnostics:
    """Accumulated probe results.

    Attributes:
        offsets: the translation offsets probed.
        drift_centred, drift_raw: per offset, summed total-variation distance to offset 0.
        flips_centred, flips_raw: per offset, count of top-1 changes.
        decisions: decisions probed.
        alpha_sum, share_sum, progress_count: per progress bin.
        weight_sum, size_count: per |F| group, comparator weights summed ``[groups, P]``.
        features: comparator feature names.
    """

    offsets: tuple[float, ...]
    features: tuple[str, ...]
    drift_centred: np.ndarray = field(init=False)
    drift_raw: np.ndarray = field(init=False)
    flips_centred: np.ndarray = field(init=False)
    flips_raw: np.ndarray = field(init=False)
    decisions: int = 0
    alpha_sum: np.ndarray = field(init=False)
    share_sum: np.ndarray = field(init=False)
    progress_count: np.ndarray = field(init=False)
    weight_sum: np.ndarray = field(init=False)
    size_count: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        m = len(self.offsets)
        self.drift_centred, self.drift_raw = np.zeros(m), np.zeros(m)
        self.flips_centred, self.flips_raw = np.zeros(m), np.zeros(m)
        self.alpha_sum = np.zeros(PROGRESS_BINS)
        self.share_sum = np.zeros(PROGRESS_BINS)
        self.progress_count = np.zeros(PROGRESS_BINS)
        self.weight_sum = np.zeros((len(SIZE_EDGES), len(self.features)))
        self.size_count = np.zeros(len(SIZE_EDGES))

    def as_dict(self) -> dict:
        n = max(self.decisions, 1)
        per_bin = np.maximum(self.progress_count, 1)
        per_size = np.maximum(self.size_count, 1)[:, None]
        labels = _size_labels()
        return {
            "decisions": self.decisions,
            "translation_probe": {
                "offsets": list(self.offsets),
                "tv_drift_centred": (self.drift_centred / n).tolist(),
                "tv_drift_raw": (self.drift_raw / n).tolist(),
                "top1_flip_rate_centred": (self.flips_centred / n).tolist(),
                "top1_flip_rate_raw": (self.flips_raw / n).tolist(),
            },
            "modulation": {
                "progress_bin_centres": ((np.arange(PROGRESS_BINS) + 0.5) / PROGRESS_BINS).tolist(),
                "alpha_mean": _nan_empty(self.alpha_sum / per_bin, self.progress_count),
                "local_share_mean": _nan_empty(self.share_sum / per_bin, self.progress_count),
                "decisions": self.progress_count.astype(int).tolist(),
            },
            "comparator_weights": {
                "features": list(self.features),
                "feasible_set_groups": labels,
                "mean_weight": [
                    _nan_empty(row, np.full(len(row), c))
                    for row, c in zip(self.weight_sum / per_size, self.size_count, strict=True)
                ],
                "decisions": self.size_count.astype(int).tolist(),
            },
        }


def _nan_empty(values: np.ndarray, counts: np.ndarray) -> list[float | None]:
    return [float(v) if c > 0 else None for v, c in zip(values, counts, strict=True)]


def _size_labels() -> list[str]:
    labels, low = [], 1
    for edge in SIZE_EDGES:
        labels.append(
            f"{low}" if edge == low else (f">{low - 1}" if edge > 10**8 else f"{low}-{edge}")
        )
        low = edge + 1
    return labels


class ScorerProbe:
    """A forward hook on ``policy.scorer`` that runs the probes on every captured step."""

    def __init__(self, policy: LincPolicy, offsets: Sequence[float]):
        config = policy.config
        if config.scorer != "linc":
            raise ValueError(
                f"linc-diagnose probes the LINC comparator; this model's scorer is "
                f"{config.scorer!r}"
            )
        self.policy = policy
        self.scorer = policy.scorer
        self.offsets = tuple(float(o) for o in offsets)
        self.result = Diagnostics(self.offsets, tuple(config.candidate_features))
        self.num_visited: Tensor | None = None

    def __call__(self, module: torch.nn.Module, args: tuple, output: Tensor) -> None:
        context, embeddings, table, mask, has_depot = args
        self.observe(context, embeddings, table, mask, has_depot)

    @torch.no_grad()
    def observe(
        self, context: Tensor, embeddings: Tensor, table: Tensor, mask: Tensor, has_depot: bool
    ) -> None:
        """Probe one decoding step.

        Args:
            context: ``[B, K, D]``; embeddings: ``[B, N, D]``; table: ``[B, K, N, F]``;
            mask: ``[B, K, N]``.
        """
        scorer = self.scorer
        dtype = context.dtype
        fm = feature_major(table.to(dtype))  # [B, K, F, N]
        feasible = feasible_customers(mask, has_depot)
        num_customers = mask.shape[-1] - int(has_depot)
        stats = feasible_stats(fm, feasible, num_customers)
        weight, count, ratio = feasible.to(dtype), stats.count, stats.ratio
        choice = mask.sum(-1) > 1  # [B, K] decisions that are not forced
        if not bool(choice.any()):
            return
        comparator, offset, alpha = scorer.comparator(
            context, table, feasible, num_customers, mask.sum(-1), stats
        )
        base = torch.matmul(context, embeddings.transpose(1, 2))  # [B, K, N]
        base = base if alpha is None else alpha * base
        phi = fm.index_select(-2, scorer.feature_index)  # [B, K, P, N]
        relative = scorer.centred_columns.to(dtype).view(1, 1, -1, 1)
        means = stats.means.index_select(-1, scorer.feature_index)  # [B, K, P]

        def probabilities(delta: float, centred: bool) -> Tensor:
            shifted = phi + delta * relative
            if centred:
                shifted = shifted - (means + delta * relative.squeeze(-1)).unsqueeze(-1) * relative
            local = (shifted * comparator.unsqueeze(-1)).sum(-2)
            return self.policy.log_probs(base + local + offset, mask).exp()

        rows = choice
        decisions = int(rows.sum())
        unshifted = {c: probabilities(0.0, c) for c in (True, False)}
        for j, delta in enumerate(self.offsets):
            for centred, drift, flips in (
                (True, self.result.drift_centred, self.result.flips_centred),
                (False, self.result.drift_raw, self.result.flips_raw),
            ):
                p = probabilities(delta, centred)
                tv = 0.5 * (p - unshifted[centred]).abs().sum(-1)
                drift[j] += float(tv[rows].sum())
                flip = p.argmax(-1) != unshifted[centred].argmax(-1)
                flips[j] += float(flip[rows].sum())
        self.result.decisions += decisions

        # modulation over progress
        centred_phi = phi - means.unsqueeze(-1) * relative
        local = (centred_phi * comparator.unsqueeze(-1)).sum(-2)  # [B, K, N]
        spread_local = _feasible_spread(local, weight, count)
        spread_base = _feasible_spread(base, weight, count)
        share = spread_local / (spread_local + spread_base).clamp_min(1e-12)
        if self.num_visited is not None and self.num_visited.shape == choice.shape:
            progress = self.num_visited.to(dtype) / max(num_customers, 1)
        else:  # called outside run_diagnostics: the feasible ratio stands in for progress
            progress = 1.0 - ratio
        bins = (progress * PROGRESS_BINS).long().clamp(0, PROGRESS_BINS - 1)[rows].cpu().numpy()
        alpha_values = (
            alpha.squeeze(-1)[rows] if alpha is not None else torch.ones_like(share[rows])
        )
        np.add.at(self.result.alpha_sum, bins, alpha_values.double().cpu().numpy())
        np.add.at(self.result.share_sum, bins, share[rows].double().cpu().numpy())
        np.add.at(self.result.progress_count, bins, 1)

        # comparator weights by |F|
        size = count.squeeze(-1)[rows].cpu().numpy()
        group = np.searchsorted(np.asarray(SIZE_EDGES), size, side="left")
        np.add.at(self.result.weight_sum, group, comparator[rows].double().cpu().numpy())
        np.add.at(self.result.size_count, group, 1)


def _feasible_spread(scores: Tensor, weight: Tensor, count: Tensor) -> Tensor:
    """``[B, K]`` mean absolute deviation of ``scores`` ``[B, K, N]`` over the feasible set."""
    finite = torch.where(weight > 0, scores, torch.zeros_like(scores))
    mean = finite.sum(-1, keepdim=True) / count.clamp_min(1.0)
    return ((scores - mean).abs() * weight).sum(-1) / count.squeeze(-1).clamp_min(1.0)


@torch.no_grad()
def run_diagnostics(
    policy: LincPolicy,
    instances: Instance,
    *,
    num_z: int = 8,
    seed: int = 0,
    offsets: Sequence[float] = DEFAULT_OFFSETS,
    batch_size: int = 16,
) -> dict:
    """Decode ``instances`` greedily (``num_z`` z per instance, seeded as ``linc_core.decoding``
    seeds them) and probe every decision."""
    policy.eval()
    parameter = next(policy.parameters())
    dtype, device = parameter.dtype, parameter.device
    probe = ScorerProbe(policy, offsets)
    handle = policy.scorer.register_forward_hook(probe)
    try:
        for first in range(0, instances.batch_size, batch_size):
            chunk = instances.select(slice(first, first + batch_size))
            rows = make_rows(chunk, 1, dtype, device)
            z = rows.z(num_z, policy.config.z_dim, seed) if policy.config.z_dim > 0 else None
            env = make_env(rows.instance, num_z)
            chooser = PolicyChooser(
                policy,
                env,
                policy.encode(rows.instance),
                z,
                greedy,
                track_log_likelihood=False,
                skip_forced=False,  # the probes read every rollout's scorer inputs
            )

            def choose(state: RolloutState, step: int, chooser: PolicyChooser = chooser) -> Tensor:
                probe.num_visited = state.num_visited  # the hook reads construction progress
                return chooser(state, step)

            state, _ = start_rollouts(env)
            complete_rollouts(env, choose, state)
    finally:
        handle.remove()
    return probe.result.as_dict()


# ---------------------------------------------------------------------- plots
def plot_translation_probe(result: dict) -> bytes:
    probe = result["translation_probe"]
    figure = new_figure()
    left, right = figure.subplots(1, 2)
    for key, label in (("centred", "centred (LINC)"), ("raw", "raw (no centring)")):
        left.plot(probe["offsets"], probe[f"tv_drift_{key}"], "o-", label=label)
        right.plot(probe["offsets"], probe[f"top1_flip_rate_{key}"], "o-", label=label)
    left.set(xlabel="shared feature offset", ylabel="mean TV distance to offset 0")
    right.set(xlabel="shared feature offset", ylabel="top-1 flip rate")
    left.legend()
    figure.suptitle(f"Common-translation probe ({result['decisions']} decisions)")
    return png_bytes(figure)


def plot_modulation(result: dict) -> bytes:
    mod = result["modulation"]
    figure = new_figure()
    left, right = figure.subplots(1, 2)
    x = mod["progress_bin_centres"]
    nan = [math.nan if v is None else v for v in mod["alpha_mean"]]
    left.plot(x, nan, "o-")
    left.set(xlabel="construction progress (served / n)", ylabel="alpha", ylim=(0, 1))
    share = [math.nan if v is None else v for v in mod["local_share_mean"]]
    right.plot(x, share, "o-", color="tab:orange")
    right.set(xlabel="construction progress (served / n)", ylabel="local-score share", ylim=(0, 1))
    figure.suptitle("Summary modulation over construction progress")
    return png_bytes(figure)


def plot_comparator_weights(result: dict) -> bytes:
    weights = result["comparator_weights"]
    groups = [
        (label, row)
        for label, row, n in zip(
            weights["feasible_set_groups"],
            weights["mean_weight"],
            weights["decisions"],
            strict=True,
        )
        if n > 0
    ]
    figure = new_figure(10.0, 4.0)
    axes = figure.add_subplot()
    features = weights["features"]
    width = 0.8 / max(len(groups), 1)
    for g, (label, row) in enumerate(groups):
        x = np.arange(len(features)) + g * width
        axes.bar(x, row, width=width, label=f"|F| {label}")
    axes.set_xticks(np.arange(len(features)) + 0.4 - width / 2, features)
    axes.set(ylabel="mean comparator weight v")
    axes.axhline(0.0, color="black", linewidth=0.5)
    axes.legend(fontsize=7)
    figure.suptitle("Local comparator weights by feasible-set size")
    return png_bytes(figure)


def write_outputs(result: dict, out: Path) -> list[Path]:
    """``diagnostics.json`` and the three PNGs, atomically; returns the paths."""
    files = {
        "diagnostics.json": json.dumps(result, indent=2).encode(),
        "translation_probe.png": plot_translation_probe(result),
        "modulation.png": plot_modulation(result),
        "comparator_weights.png": plot_comparator_weights(result),
    }
    for name, data in files.items():
        write_atomic(out / name, data)
    return [out / name for name in files]


__all__ = [
    "DEFAULT_OFFSETS",
    "Diagnostics",
    "PROGRESS_BINS",
    "SIZE_EDGES",
    "ScorerProbe",
    "plot_comparator_weights",
    "plot_modulation",
    "plot_translation_probe",
    "run_diagnostics",
    "write_outputs",
]
