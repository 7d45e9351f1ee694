"""Typed, validated configuration: model, training, and the named ablation presets.

Every switch the paper ablates is a typed field here; a preset (``PRESETS``) is nothing but
data: a set of field overrides applied to the problem's defaults. Model and training code read
fields, never preset names.

Where the paper and the reference implementation differ, the paper's method is followed with
the reference's constants (shared/spec/linc-reference.md sections 3-5); the differences met so
far are noted on the field they concern.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from linc_core.problems.protocol import CONSEQUENCE_FEATURES, RELATIVE_FEATURES

ProblemName = Literal["cvrptw", "cvrp", "tsp"]

# The partial step summary r_t: (statistic over the feasible customers, feature) after |F|/n.
PARTIAL_SUMMARY: dict[str, tuple[tuple[str, str], ...]] = {
    "cvrptw": (("mean", "travel"), ("mean", "wait"), ("min", "slack")),
    "cvrp": (("mean", "travel"), ("mean", "demand_ratio"), ("min", "load_after")),
    "tsp": (("mean", "travel"), ("mean", "dist_to_start"), ("mean", "dist_to_centroid")),
}
NODE_STATIC_FEATURES = ("knn_nearest", "knn_mean", "knn_min")


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


@dataclass(frozen=True)
class ModelConfig:
    """Architecture switches. Defaults are the reference's CVRPTW full LINC model.

    Attributes:
        problem: which environment's node inputs and consequence table the model reads.
        embedding_dim, encoder_layers, num_heads, ff_hidden_dim: POMO encoder sizes.
        logit_clip: C in ``C * tanh(u / sqrt(d))``.
        input_scale: ``grid`` (LINC: divide coordinates and times by the grid size) or
            ``horizon`` (PolyNet/POMO: divide times by the depot due, coordinates by
            due / alpha).
        node_static_features: kNN statistics appended to the node inputs (``concat``) or added
            through a linear residual (``residual``, the CVRP reference).
        knn_k: neighbours for the kNN statistics (``min(k, n - 1)`` is used).
        gated_attention: GateAttn (per-head gate on the attention output).
        gate_mode: ``centered_sigmoid`` (``2 * sigmoid``) or ``sigmoid``.
        gate_init_bias: gate bias at initialisation (weight starts at 0).
        depth_mixer: Depth Mixer over earlier layer outputs.
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
            feature) or ``none`` (gamma = beta = 0, alpha = 1).
        scorer_hidden_dim: width of the summary MLP (LINC) or the candidate MLP (mlp scorer).
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
        _check(self.problem in CONSEQUENCE_FEATURES, f"problem: unknown {self.problem!r}")
        for name in ("embedding_dim", "encoder_layers", "num_heads", "ff_hidden_dim"):
            _check(getattr(self, name) >= 1, f"{name}: expected >= 1, got {getattr(self, name)}")
        _check(
            self.embedding_dim % self.num_heads == 0,
            f"embedding_dim {self.embedding_dim} must be divisible by num_heads {self.num_heads}",
        )
        _check(self.logit_clip > 0, f"logit_clip: expected > 0, got {self.logit_clip}")
        _check(self.z_dim >= 0, f"z_dim: expected >= 0, got {self.z_dim}")
        _check(self.knn_k >= 1, f"knn_k: expected >= 1, got {self.knn_k}")
        _check(self.scorer_hidden_dim >= 1, "scorer_hidden_dim: expected >= 1")
        for key, allowed in (
            ("input_scale", ("grid", "horizon")),
            ("static_feature_mode", ("concat", "residual")),
            ("gate_mode", ("centered_sigmoid", "sigmoid")),
            ("scorer", ("baseline", "linc", "mlp")),
            ("centring", ("feasible_mean", "none")),
            ("depot_row", ("centred", "zero")),
            ("summary", ("partial", "full_mean", "none")),
        ):
            value = getattr(self, key)
            _check(value in allowed, f"{key}: expected one of {allowed}, got {value!r}")
        known = CONSEQUENCE_FEATURES[self.problem]
        for key in ("candidate_features", "centred_features"):
            for name in getattr(self, key):
                _check(name in known, f"{key}: {name!r} is not a {self.problem} feature {known}")
        for name in self.node_static_features:
            _check(name in NODE_STATIC_FEATURES, f"node_static_features: unknown {name!r}")
        if self.scorer != "baseline":
            _check(bool(self.candidate_features), "candidate_features: empty for a feature scorer")
        if self.scorer == "mlp":
            _check(self.summary == "none", "summary: the mlp scorer has no summary path; use none")

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
        if self.summary == "partial":
            return PARTIAL_SUMMARY[self.problem]
        return ()

    @classmethod
    def for_problem(cls, problem: ProblemName, **overrides: Any) -> ModelConfig:
        """Reference defaults of each problem's LINC model, then ``overrides``.

        CVRP and TSP follow the reference's warm-started models: PolyNet encoder (no GateAttn,
        no Depth Mixer), scorer width 64; CVRP adds the kNN-mean node statistic as a residual.
        """
        base: dict[str, Any] = {"problem": problem}
        if problem == "cvrp":
            base.update(
                candidate_features=("travel", "demand_ratio", "dist_to_depot", "angle"),
                centred_features=RELATIVE_FEATURES["cvrp"],
                node_static_features=("knn_mean",),
                static_feature_mode="residual",
                gated_attention=False,
                depth_mixer=False,
                scorer_hidden_dim=64,
            )
        elif problem == "tsp":
            base.update(
                candidate_features=("travel", "angle"),
                centred_features=RELATIVE_FEATURES["tsp"],
                node_static_features=(),
                gated_attention=False,
                depth_mixer=False,
                scorer_hidden_dim=64,
            )
        base.update(overrides)
        return cls(**base)


@dataclass(frozen=True)
class TrainConfig:
    """REINFORCE over z-vector rollouts. Defaults: the reference's CVRPTW training (section 4).

    Attributes:
        num_rollouts: K rollouts per instance (one distinct z each, or one start each).
        batch_size: instances per gradient step.
        instances_per_epoch: fresh instances per epoch (or the fixed set's size).
        epochs: training length; with ``batches_per_epoch`` it fixes the schedules' progress.
        learning_rate, weight_decay: Adam.
        max_grad_norm: gradient clipping (0 = off, the reference).
        advantage: ``group_mean`` or ``soft_top1`` (matched soft top-1 of the paper).
        tau_start, tau_end, tau_anneal_ratio: geometric tau anneal over the first
            ``tau_anneal_ratio`` of training progress, constant after; tau is in raw cost units.
        normalize_advantage: divide by the whole batch's std (+1e-6).
        rollout_mask: ``dense`` or ``best_only`` (only each instance's best rollout keeps its
            log-probability) from ``best_only_start_ratio`` of progress on.
        multi_start: POMO starts (rollout k starts at customer k) instead of z vectors.
        replay_chunk: the gradient pass recomputes the decisions of at most this many rollouts
            per instance at once and accumulates their gradients (0: all at once); peak
            memory grows with it, the loss and gradient do not change
            (``linc_core.model.replay``).
        amp: mixed precision; honoured only on CUDA.
        device: ``cpu``, ``cuda``, ``cuda:1`` ...
        seed: every random stream of a run derives from it.
        init: initial weights: ``linc`` (PyTorch's defaults drawn under a seed derived from
            ``seed``) or ``reference`` (the reference implementation's own initialisation for
            ``seed``, replayed: a run then starts where the reference's run with that seed
            starts; CVRPTW LINC models only).
        morph_epochs: score morphing from a frozen policy's scores, lambda 0 -> 1 over this many
            epochs (0 = off; needs a reference checkpoint).
        validation_size, validation_every: size of the fixed seeded validation set and how
            often (epochs) it is decoded greedily per z.
    """

    num_rollouts: int = 128
    batch_size: int = 128
    instances_per_epoch: int = 6400
    epochs: int = 12000
    learning_rate: float = 1e-4
    weight_decay: float = 1e-6
    max_grad_norm: float = 0.0
    advantage: Literal["group_mean", "soft_top1"] = "soft_top1"
    tau_start: float = 4.0
    tau_end: float = 0.25
    tau_anneal_ratio: float = 1.0 / 300.0
    normalize_advantage: bool = True
    rollout_mask: Literal["dense", "best_only"] = "best_only"
    best_only_start_ratio: float = 0.25
    multi_start: bool = False
    replay_chunk: int = 2
    amp: bool = True
    device: str = "cpu"
    seed: int = 1234
    init: Literal["linc", "reference"] = "linc"
    morph_epochs: int = 0
    validation_size: int = 64
    validation_every: int = 1

    def __post_init__(self) -> None:
        for name in ("num_rollouts", "batch_size", "instances_per_epoch", "epochs"):
            _check(getattr(self, name) >= 1, f"{name}: expected >= 1, got {getattr(self, name)}")
        _check(self.learning_rate > 0, f"learning_rate: expected > 0, got {self.learning_rate}")
        _check(self.weight_decay >= 0, f"weight_decay: expected >= 0, got {self.weight_decay}")
        _check(self.max_grad_norm >= 0, f"max_grad_norm: expected >= 0, got {self.max_grad_norm}")
        _check(
            self.advantage in ("group_mean", "soft_top1"),
            f"advantage: expected group_mean or soft_top1, got {self.advantage!r}",
        )
        _check(
            self.rollout_mask in ("dense", "best_only"),
            f"rollout_mask: expected dense or best_only, got {self.rollout_mask!r}",
        )
        _check(
            0 < self.tau_end <= self.tau_start and math.isfinite(self.tau_start),
            f"tau: expected 0 < tau_end <= tau_start < inf, got {self.tau_start}, {self.tau_end}",
        )
        _check(0 < self.tau_anneal_ratio <= 1, "tau_anneal_ratio: expected in (0, 1]")
        _check(0 <= self.best_only_start_ratio <= 1, "best_only_start_ratio: expected in [0, 1]")
        _check(
            self.num_rollouts >= 2 or self.advantage == "group_mean",
            "num_rollouts: the soft top-1 advantage needs at least 2 rollouts per instance",
        )
        _check(
            self.init in ("linc", "reference"),
            f"init: expected linc or reference, got {self.init!r}",
        )
        _check(self.morph_epochs >= 0, "morph_epochs: expected >= 0")
        _check(self.replay_chunk >= 0, f"replay_chunk: expected >= 0, got {self.replay_chunk}")
        _check(self.validation_size >= 0, "validation_size: expected >= 0")
        _check(self.validation_every >= 1, "validation_every: expected >= 1")
        _check(self.device == "cpu" or self.device.startswith("cuda"), f"device: {self.device!r}")

    @property
    def batches_per_epoch(self) -> int:
        return max(1, self.instances_per_epoch // self.batch_size)


@dataclass(frozen=True)
class Preset:
    """A named variant: overrides of the problem's ModelConfig and of TrainConfig."""

    name: str
    label: str
    model: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)


_LINC_FEATURES_OFF = {"scorer": "baseline"}
# PolyNet as the benchmark tables run it: plain POMO encoder, horizon scaling, z-vectors,
# hard top-1 credit (group mean, best rollout only); POMO drops z for multi-start.
_POLYNET_MODEL = {
    "scorer": "baseline",
    "gated_attention": False,
    "depth_mixer": False,
    "node_static_features": (),
    "input_scale": "horizon",
}
_POLYNET_TRAIN = {
    "advantage": "group_mean",
    "normalize_advantage": False,
    "best_only_start_ratio": 0.0,
}
# The twelve variants of the paper's full ablation table (reference section 5), then the two
# baselines of the benchmark tables. Each differs from full_linc in exactly the listed fields.
PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "baseline",
            "Baseline",
            model={"scorer": "baseline", "gated_attention": False, "depth_mixer": False},
            train={
                "advantage": "group_mean",
                "rollout_mask": "dense",
                "best_only_start_ratio": 0.0,
            },
        ),
        Preset("full_linc", "Full LINC"),
        Preset("no_local", "w/o local consequence interface", model=dict(_LINC_FEATURES_OFF)),
        Preset(
            "naive_mlp",
            "Naive feature injection",
            model={"scorer": "mlp", "centring": "none", "summary": "none"},
        ),
        Preset("no_gateattn", "w/o GateAttn", model={"gated_attention": False}),
        Preset("no_depth_mixer", "w/o Depth Mixer", model={"depth_mixer": False}),
        Preset(
            "no_soft_top1",
            "w/o soft top-1 (hard top-1)",
            train={"advantage": "group_mean", "best_only_start_ratio": 0.0},
        ),
        Preset(
            "group_mean",
            "group mean",
            train={
                "advantage": "group_mean",
                "rollout_mask": "dense",
                "best_only_start_ratio": 0.0,
            },
        ),
        Preset(
            "centered_mlp",
            "Centered MLP scoring",
            model={
                "scorer": "mlp",
                "centred_features": CONSEQUENCE_FEATURES["cvrptw"],
                "depot_row": "zero",
                "summary": "none",
            },
        ),
        Preset("raw_linear", "Raw linear scoring", model={"centring": "none"}),
        Preset("no_step_summary", "w/o step summary", model={"summary": "none"}),
        Preset("full_mu_summary", "Full mean summary", model={"summary": "full_mean"}),
        Preset("polynet", "PolyNet", model=dict(_POLYNET_MODEL), train=dict(_POLYNET_TRAIN)),
        Preset(
            "pomo",
            "POMO",
            model=_POLYNET_MODEL | {"z_dim": 0},
            train=_POLYNET_TRAIN | {"rollout_mask": "dense", "multi_start": True},
        ),
    )
}
ABLATION_VARIANTS: tuple[str, ...] = tuple(list(PRESETS)[:12])


def preset_configs(
    name: str, problem: ProblemName = "cvrptw", **train_overrides: Any
) -> tuple[ModelConfig, TrainConfig]:
    """The ModelConfig and TrainConfig of preset ``name`` for ``problem``.

    Feature names in a preset are CVRPTW's; for another problem a preset that names features
    uses that problem's full feature list instead (only the centred-MLP variant does).
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    preset = PRESETS[name]
    model_overrides = dict(preset.model)
    if problem != "cvrptw" and "centred_features" in model_overrides:
        model_overrides["centred_features"] = CONSEQUENCE_FEATURES[problem]
    model = ModelConfig.for_problem(problem, **model_overrides)
    train = TrainConfig(**{**preset.train, **train_overrides})
    return model, train


def variant_configs(
    name: str,
    problem: ProblemName = "cvrptw",
    *,
    train: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
) -> tuple[ModelConfig, TrainConfig]:
    """Preset ``name`` under a protocol's settings: ``train`` / ``model`` apply to every variant,
    but never over a switch the variant itself sets.

    A variant is defined by its switches: the ablation protocol's ``best_only_start_ratio: 0.15``
    must not undo ``no_soft_top1``'s best-only-from-step-0, and a smaller encoder for CPUs must
    not re-enable GateAttn in ``no_gateattn``. (``preset_configs`` lets overrides win instead.)
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    preset = PRESETS[name]
    protocol_train = {k: v for k, v in (train or {}).items() if k not in preset.train}
    model_config, train_config = preset_configs(name, problem, **protocol_train)
    protocol_model = {
        k: tuple(v) if isinstance(v, list) else v
        for k, v in (model or {}).items()
        if k not in preset.model
    }
    if protocol_model:
        model_config = replace(model_config, **protocol_model)
    return model_config, train_config


def config_differences(a: object, b: object) -> dict[str, tuple[Any, Any]]:
    """Fields whose values differ between two dataclass instances of the same type."""
    return {
        f.name: (getattr(a, f.name), getattr(b, f.name))
        for f in fields(a)  # type: ignore[arg-type]
        if getattr(a, f.name) != getattr(b, f.name)
    }


def to_dict(config: object) -> dict[str, Any]:
    """A JSON-friendly dict (tuples become lists)."""
    return dataclasses.asdict(config)  # type: ignore[call-overload]


def from_dict(cls: type, data: dict[str, Any]) -> Any:
    """Rebuild a config, rejecting unknown keys with a clear message."""
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown keys {unknown}; known: {sorted(known)}")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return cls(**values)


__all__ = [
    "ABLATION_VARIANTS",
    "PRESETS",
    "ModelConfig",
    "Preset",
    "TrainConfig",
    "config_differences",
    "from_dict",
    "preset_configs",
    "replace",
    "to_dict",
    "variant_configs",
]
