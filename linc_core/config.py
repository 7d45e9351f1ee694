"""Typed, validated configuration of the model and of training.

Every switch the paper ablates is a typed field here; the named variants that set them are
data in :mod:`linc_core.presets`. Model and training code read fields, never preset names.

Where the paper and the reference implementation differ, the paper's method is followed with
the reference's constants (shared/spec/linc-reference.md sections 3-5); the differences met so
far are noted on the field they concern.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from linc_core.problems.spec import (
    CONSEQUENCE_FEATURES,
    PARTIAL_SUMMARY,
    RELATIVE_FEATURES,
    ProblemName,
    problem_spec,
)
from linc_core.utils.typed import check_fields, require

NODE_STATIC_FEATURES = ("knn_nearest", "knn_mean", "knn_min")


# At most 1.8 billion weights (the paper's: 1.4 million): a config read from a file anyone may
# have written builds its model first (embedding_dim=10**6 asked for 4 TB).
MAX_MODEL_SIZES = {"embedding_dim": 2048, "encoder_layers": 32, "num_heads": 64, "z_dim": 256}
MAX_MODEL_SIZES |= {"knn_k": 1000} | dict.fromkeys(("ff_hidden_dim", "poly_hidden_dim"), 8192)
MAX_MODEL_SIZES["scorer_hidden_dim"] = 8192


@dataclass(frozen=True)
class ModelConfig:
    """Architecture switches. Defaults are the reference's CVRPTW full LINC model.

    Attributes:
        problem: a registered problem (:mod:`linc_core.problems.spec`): whose node inputs,
            decoder context and consequence table the model reads.
        embedding_dim, encoder_layers, num_heads, ff_hidden_dim: POMO encoder sizes.
        logit_clip: C in ``C * tanh(u / sqrt(d))``.
        input_scale: ``grid`` (LINC: divide coordinates and times by the grid size) or
            ``horizon`` (PolyNet/POMO: divide times by the depot due, coordinates by
            due / alpha).
        node_static_features: kNN statistics of each node added to its inputs.
        static_feature_mode: how those statistics enter: appended to the node inputs
            (``concat``) or added through a linear residual (``residual``, the CVRP reference).
        knn_k: neighbours for the kNN statistics (``min(k, n - 1)`` is used).
        gated_attention: GateAttn (per-head gate on the attention output). Deviation: the
            paper mixes ``(1 - lambda_gate) o + lambda_gate g o`` (appendix, GateAttn); the
            reference fixes lambda_gate = 1 (fully gated, ``alpha_attn_gate``), and so do we.
        gate_mode: ``centered_sigmoid`` (``2 * sigmoid``) or ``sigmoid``.
        gate_init_bias: gate bias at initialisation (weight starts at 0).
        depth_mixer: Depth Mixer over earlier layer outputs. Deviation: the paper mixes the
            normalised outputs ``sum_m omega_m Norm(v_m)``; the reference (and we) weight by
            ``<Norm(v_m), q_l>`` but mix the raw outputs ``sum_m omega_m v_m``.
        z_dim: PolyNet z bits (0 = no z residual, as POMO).
        poly_hidden_dim: hidden width of the z residual MLP.
        scorer: ``baseline`` (``<h, E_j>``), ``linc`` (shared linear comparator) or ``mlp``
            (``<h, E_j> + MLP([h; phi_j])``).
        candidate_features: the consequence features the scorer reads (subset, table order).
        centred_features: features centred over the feasible customers (the reference keeps
            only those also in ``candidate_features``; so do we).
        centring: ``feasible_mean`` (subtract the feasible-customer mean) or ``none`` (raw).
        depot_row: after centring, the depot's row is ``centred`` (0 - mean, reference LINC)
            or ``zero`` (the centred-MLP ablation).
        summary: ``partial`` (r_t of the paper), ``full_mean`` (|F|/n and the mean of every
            feature) or ``none`` (gamma = beta = 0, alpha = 1). Deviation: on an empty F the
            paper's rho_t is 0; the reference floors |F| at 1 (rho = 1/n), and so do we (only
            the depot is feasible then, so the policy is the same).
        scorer_hidden_dim: width of the summary MLP (LINC) or the candidate MLP (mlp scorer).
            Deviation: the paper's MLP_gamma, MLP_beta and MLP_alpha (eq. 6) share one first
            layer here, as in the reference: ``s = GELU(W_s [h; r_t])`` split in three.
        phi_bias: bias of the linear projection ``W_phi``.
    """

    problem: ProblemName = "cvrptw"
    embedding_dim: int = 128
    encoder_layers: int = 6
    num_heads: int = 8
    ff_hidden_dim: int = 512
    logit_clip: float = 10.0
    input_scale: Literal["grid", "horizon"] = "grid"
    node_static_features: tuple[str, ...] = NODE_STATIC_FEATURES
    static_feature_mode: Literal["concat", "residual"] = "concat"
    knn_k: int = 5
    gated_attention: bool = True
    gate_mode: Literal["centered_sigmoid", "sigmoid"] = "centered_sigmoid"
    gate_init_bias: float = 2.0
    depth_mixer: bool = True
    z_dim: int = 16
    poly_hidden_dim: int = 256
    scorer: Literal["baseline", "linc", "mlp"] = "linc"
    candidate_features: tuple[str, ...] = CONSEQUENCE_FEATURES["cvrptw"]
    centred_features: tuple[str, ...] = RELATIVE_FEATURES["cvrptw"]
    centring: Literal["feasible_mean", "none"] = "feasible_mean"
    depot_row: Literal["centred", "zero"] = "centred"
    summary: Literal["partial", "full_mean", "none"] = "partial"
    scorer_hidden_dim: int = 128
    phi_bias: bool = True

    def __post_init__(self) -> None:
        check_fields(self)
        for name in ("embedding_dim", "encoder_layers", "num_heads", "ff_hidden_dim", "knn_k"):
            require(getattr(self, name) >= 1, name, getattr(self, name), ">= 1")
        for name, most in MAX_MODEL_SIZES.items():
            value = getattr(self, name)
            require(value <= most, name, value, f"at most {most} (MAX_MODEL_SIZES: 1.8B weights)")
        require(
            self.embedding_dim % self.num_heads == 0,
            "embedding_dim",
            self.embedding_dim,
            f"a multiple of num_heads ({self.num_heads})",
        )
        require(
            0 < self.logit_clip < math.inf, "logit_clip", self.logit_clip, "a finite number > 0"
        )
        require(
            math.isfinite(self.gate_init_bias),
            "gate_init_bias",
            self.gate_init_bias,
            "a finite number",
        )
        require(self.z_dim >= 0, "z_dim", self.z_dim, ">= 0")
        require(self.scorer_hidden_dim >= 1, "scorer_hidden_dim", self.scorer_hidden_dim, ">= 1")
        known = CONSEQUENCE_FEATURES[self.problem]
        for key in ("candidate_features", "centred_features"):
            for name in getattr(self, key):
                require(name in known, key, name, f"a {self.problem} feature {known}")
        for name in self.node_static_features:
            require(
                name in NODE_STATIC_FEATURES,
                "node_static_features",
                name,
                f"one of {NODE_STATIC_FEATURES}",
            )
        if self.scorer != "baseline":
            require(
                bool(self.candidate_features),
                "candidate_features",
                self.candidate_features,
                "at least one feature for a feature scorer",
            )
        if self.scorer == "mlp":
            require(
                self.summary == "none",
                "summary",
                self.summary,
                "none with the mlp scorer (it has no summary path)",
            )

    # ------------------------------------------------------------------ derived
    @property
    def uses_candidate_features(self) -> bool:
        return self.scorer != "baseline"

    @property
    def effective_centred(self) -> tuple[str, ...]:
        """Selected features that are centred (empty when centring is off)."""
        if self.centring == "none":
            return ()
        return tuple(f for f in self.candidate_features if f in self.centred_features)

    @property
    def summary_stats(self) -> tuple[tuple[str, str], ...]:
        """The (statistic, feature) pairs of r_t after the feasible ratio."""
        if self.summary == "full_mean":
            return tuple(("mean", f) for f in self.candidate_features)
        if self.summary == "partial":  # the problem's own r_t (its spec's ``summary``)
            return PARTIAL_SUMMARY[self.problem]
        return ()

    @classmethod
    def for_problem(cls, problem: ProblemName, **overrides: Any) -> ModelConfig:
        """The reference defaults of ``problem``'s LINC model (its spec's ``model_defaults``
        over this class's defaults, the CVRPTW model's), then ``overrides``.

        CVRP and TSP follow the reference's warm-started models: PolyNet encoder (no GateAttn,
        no Depth Mixer), scorer width 64; CVRP adds the kNN-mean node statistic as a residual.
        """
        base: dict[str, Any] = {"problem": problem, **problem_spec(problem).model_defaults}
        base.update(overrides)
        return cls(**base)


@dataclass(frozen=True)
class TrainConfig:
    """REINFORCE over z-vector rollouts. Defaults: the reference's CVRPTW training (section 4).

    Attributes:
        num_rollouts: K rollouts per instance (one distinct z each, or one start each).
        batch_size: instances per gradient step.
        instances_per_epoch: fresh instances per epoch (or the fixed set's size).
        epochs: training length; with ``batches_per_epoch`` it fixes the schedules' progress
            (an upper bound under ``budget_minutes``).
        budget_minutes: train for this many minutes of training steps (validation and
            checkpoints not counted) instead of to ``epochs``: the schedules (the tau anneal,
            the best-only start) then follow the fraction of the budget spent,
            and the seconds spent are kept in checkpoints, so a resumed run keeps its budget
            (``linc_core.train.budget``); None: the epochs define progress.
        budget_clock: what a budget's minutes count: ``wall`` (seconds on the wall clock:
            a machine of one's own, a GPU) or ``cpu`` (CPU seconds of the training process,
            ``time.process_time``: on cores shared with other work every run still gets the
            same compute; CPU runs only, a GPU's work is not CPU time).
        learning_rate, weight_decay: Adam.
        max_grad_norm: gradient clipping (0 = off, the reference).
        advantage: ``group_mean`` or ``soft_top1`` (matched soft top-1 of the paper).
        tau_start, tau_end, tau_anneal_ratio: geometric tau anneal over the first
            ``tau_anneal_ratio`` of training progress, constant after; tau is in raw cost units.
        normalise_advantage: divide by the whole batch's std (+1e-6).
        rollout_mask: ``dense`` or ``best_only`` (only each instance's best rollout keeps its
            log-probability) from ``best_only_start_ratio`` of progress on.
        best_only_start_ratio: the fraction of training after which ``best_only`` applies
            (dense credit before it).
        multi_start: POMO starts (rollout k starts at customer k) instead of z vectors.
        replay_chunk: the gradient pass recomputes the decisions of at most this many rollouts
            per instance at once and accumulates their gradients (0: all at once); peak
            memory grows with it, the loss and gradient do not change
            (``linc_core.model.replay``).
        precision: the forward passes' autocast: ``auto`` (the faster measured: fp32, on CUDA
            too), ``fp32``, ``bf16`` (CPU or CUDA) or ``fp16`` (CUDA, with a gradient scaler); see
            ``linc_core.train.precision``.
        compile: run the rollouts' decision step and the replay's forward and backward pass
            under ``torch.compile`` (``linc_core.utils.compiling``: inductor on CPU, CUDA graphs
            for the decisions on CUDA), validation decoding too. The same losses up to float
            rounding; the compile time is paid once per shape and process (docs/how-to/gpu.md,
            Compiled steps, gives both and why the default is eager).
        device: ``cpu``, ``cuda``, ``cuda:1`` ...
        seed: every random stream of a run derives from it.
        init: initial weights: ``linc`` (PyTorch's defaults drawn under a seed derived from
            ``seed``) or ``reference`` (the reference implementation's own initialisation for
            ``seed``, replayed: a run then starts where the reference's run with that seed
            starts; CVRPTW LINC models only).
        morph_epochs: score morphing from a frozen policy's scores, lambda 0 -> 1 over this many
            epochs (0 = off; needs the frozen policy's checkpoint, ``--morph-from``).
        validation_size, validation_every: size of the fixed seeded validation set and how
            often (epochs) it is decoded greedily per z.
    """

    num_rollouts: int = 128
    batch_size: int = 128
    instances_per_epoch: int = 6400
    epochs: int = 12000
    budget_minutes: float | None = None
    budget_clock: Literal["wall", "cpu"] = "wall"
    learning_rate: float = 1e-4
    weight_decay: float = 1e-6
    max_grad_norm: float = 0.0
    advantage: Literal["group_mean", "soft_top1"] = "soft_top1"
    tau_start: float = 4.0
    tau_end: float = 0.25
    tau_anneal_ratio: float = 1.0 / 300.0
    normalise_advantage: bool = True
    rollout_mask: Literal["dense", "best_only"] = "best_only"
    best_only_start_ratio: float = 0.25
    multi_start: bool = False
    replay_chunk: int = 2
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    compile: bool = False
    device: str = "cpu"
    seed: int = 1234
    init: Literal["linc", "reference"] = "linc"
    morph_epochs: int = 0
    validation_size: int = 64
    validation_every: int = 1

    def __post_init__(self) -> None:
        check_fields(self)
        for name in ("num_rollouts", "batch_size", "instances_per_epoch", "epochs"):
            require(getattr(self, name) >= 1, name, getattr(self, name), ">= 1")
        require(
            self.budget_minutes is None or 0 < self.budget_minutes < math.inf,
            "budget_minutes",
            self.budget_minutes,
            "a finite number > 0 (or null: no budget)",
        )
        require(
            self.budget_clock == "wall" or self.device == "cpu",
            "budget_clock",
            self.budget_clock,
            "wall for a CUDA run (a GPU's work is not CPU time)",
        )
        # inf passes every bound below and fails an epoch in (an inf step makes NaN weights)
        for name in ("learning_rate", "weight_decay", "max_grad_norm", "tau_start"):
            value = getattr(self, name)
            require(math.isfinite(value), name, value, "a finite number")
        require(self.learning_rate > 0, "learning_rate", self.learning_rate, "> 0")
        require(self.weight_decay >= 0, "weight_decay", self.weight_decay, ">= 0")
        require(self.max_grad_norm >= 0, "max_grad_norm", self.max_grad_norm, ">= 0")
        require(
            0 < self.tau_end <= self.tau_start,
            "tau_end",
            self.tau_end,
            f"in (0, tau_start = {self.tau_start}]",
        )
        require(
            0 < self.tau_anneal_ratio <= 1, "tau_anneal_ratio", self.tau_anneal_ratio, "in (0, 1]"
        )
        require(
            0 <= self.best_only_start_ratio <= 1,
            "best_only_start_ratio",
            self.best_only_start_ratio,
            "in [0, 1]",
        )
        require(
            self.num_rollouts >= 2 or self.advantage == "group_mean",
            "num_rollouts",
            self.num_rollouts,
            ">= 2 for the soft top-1 advantage",
        )
        require(self.morph_epochs >= 0, "morph_epochs", self.morph_epochs, ">= 0")
        require(self.replay_chunk >= 0, "replay_chunk", self.replay_chunk, ">= 0")
        require(self.validation_size >= 0, "validation_size", self.validation_size, ">= 0")
        require(self.validation_every >= 1, "validation_every", self.validation_every, ">= 1")
        require(
            self.device == "cpu" or self.device.startswith("cuda"),
            "device",
            self.device,
            "cpu or cuda[:N]",
        )
        require(
            self.precision != "fp16" or self.device.startswith("cuda"),
            "precision",
            self.precision,
            f"fp32, bf16 or auto on device {self.device} (fp16 needs CUDA)",
        )

    @property
    def batches_per_epoch(self) -> int:
        return max(1, self.instances_per_epoch // self.batch_size)


def unused_fields(config: ModelConfig | TrainConfig) -> frozenset[str]:
    """Fields whose values the model or the training never read under the other switches
    (a run logs the rest: the settings that were in effect).

    Model: the feature scorers' settings under the dot-product scorer; the summary's under no
    summary (and under the mlp scorer, which has none); the depot row outside the mlp scorer
    (the only one that zeroes it); the centred features without centring; the gate's without
    GateAttn; the z residual's without z; the kNN statistics' without any. Training: the
    temperature schedule under group-mean credit, the best-only start under dense credit.
    """
    unused: set[str] = set()
    if isinstance(config, ModelConfig):
        if config.scorer == "baseline":
            unused |= {"candidate_features", "centred_features", "centring", "depot_row"}
            unused |= {"summary", "scorer_hidden_dim", "phi_bias"}
        if config.scorer == "mlp":
            unused |= {"summary", "phi_bias"}
        if config.scorer == "linc":
            unused.add("depot_row")
            if config.summary == "none":
                unused.add("scorer_hidden_dim")
        if config.centring == "none":
            unused.add("centred_features")
        if not config.gated_attention:
            unused |= {"gate_mode", "gate_init_bias"}
        if config.z_dim == 0:
            unused.add("poly_hidden_dim")
        if not config.node_static_features:
            unused |= {"knn_k", "static_feature_mode"}
    else:
        if config.advantage == "group_mean":
            unused |= {"tau_start", "tau_end", "tau_anneal_ratio"}
        if config.rollout_mask == "dense":
            unused.add("best_only_start_ratio")
    return frozenset(unused)


def config_differences(a: object, b: object) -> dict[str, tuple[Any, Any]]:
    """Fields whose values differ between two dataclass instances of the same type."""
    return {
        f.name: (getattr(a, f.name), getattr(b, f.name))
        for f in fields(a)  # type: ignore[arg-type]
        if getattr(a, f.name) != getattr(b, f.name)
    }


def to_dict(config: object) -> dict[str, Any]:
    """The dataclass's fields as a plain dict (tuples stay tuples; JSON writes them as lists)."""
    return dataclasses.asdict(config)  # type: ignore[call-overload]


__all__ = [
    "NODE_STATIC_FEATURES",
    "PARTIAL_SUMMARY",
    "CONSEQUENCE_FEATURES",
    "MAX_MODEL_SIZES",
    "ModelConfig",
    "ProblemName",
    "TrainConfig",
    "config_differences",
    "replace",
    "to_dict",
    "unused_fields",
]
