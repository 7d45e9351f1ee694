"""The ablation variants as data: named presets of typed switches, and how they are applied.

A preset (``PRESETS``) is nothing but a set of field overrides applied to the problem's default
``ModelConfig`` and to ``TrainConfig``; model and training code read fields, never preset names.
``ABLATION_VARIANTS`` is the paper's ablation table, the one list every sweep and test refers to
(by name ``paper`` in the sweeps' YAML, see :mod:`linc_core.runs.protocols`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from linc_core.config import CONSEQUENCE_FEATURES, ModelConfig, ProblemName, TrainConfig
from linc_core.utils.typed import ConfigError, build, check_keys, did_you_mean


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
    "normalise_advantage": False,
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
# The paper's full ablation table, in its row order: the one list of the ablation's variants.
ABLATION_VARIANTS: tuple[str, ...] = (
    "baseline",
    "full_linc",
    "no_local",
    "naive_mlp",
    "no_gateattn",
    "no_depth_mixer",
    "no_soft_top1",
    "group_mean",
    "centered_mlp",
    "raw_linear",
    "no_step_summary",
    "full_mu_summary",
)


def register_preset(preset: Preset) -> Preset:
    """Add ``preset`` to ``PRESETS`` (a new ablation variant, from a notebook or a module of
    yours), after checking that its switches are fields of the configs and that they build.

    A sweep's trials run in other processes: a variant they train must be registered there too
    (put it in ``PRESETS`` above, or in a module every trial imports).

    Raises:
        ConfigError: the name is taken by another preset, or a switch is unknown or refused
            (named as ``model.KEY`` / ``train.KEY``).
    """
    taken = PRESETS.get(preset.name)
    if taken is not None and taken != preset:
        raise ConfigError(f"preset {preset.name!r}: the name is taken ({taken.label!r})")
    check_keys(ModelConfig, preset.model, "model", required=False, exclude=("problem",))
    check_keys(TrainConfig, preset.train, "train", required=False)
    base = dataclasses.asdict(ModelConfig.for_problem("cvrptw"))
    build(ModelConfig, base | _preset_model(preset, "cvrptw"), "model")
    build(TrainConfig, dict(preset.train), "train")
    PRESETS[preset.name] = preset
    return preset


def variant_of(model: ModelConfig, train: TrainConfig) -> Preset | None:
    """The preset whose switches ``model`` and ``train`` carry (a checkpoint's configs), or None
    when none does.

    A switch is a field some preset sets; sizes (``embedding_dim``, ``epochs``...) and the
    training budget are not switches, so a small CPU model of ``polynet`` is still PolyNet.
    Where presets coincide for a problem (CVRP's and TSP's LINC has neither GateAttn nor the
    Depth Mixer, so ``no_gateattn`` is ``full_linc`` there) the one setting fewest switches
    names it.
    """
    model_switches = sorted({key for p in PRESETS.values() for key in p.model} - {"problem"})
    train_switches = sorted({key for p in PRESETS.values() for key in p.train})
    matches = []
    for preset in PRESETS.values():
        try:
            preset_model, preset_train = preset_configs(preset.name, model.problem)
        except ConfigError:  # a preset that names another problem's features
            continue
        if all(getattr(model, k) == getattr(preset_model, k) for k in model_switches) and all(
            getattr(train, k) == getattr(preset_train, k) for k in train_switches
        ):
            matches.append(preset)
    if not matches:
        return None
    return min(matches, key=lambda p: len(p.model) + len(p.train))


def preset_named(name: str) -> Preset:
    """``PRESETS[name]``; an unknown name is a :class:`~linc_core.utils.typed.ConfigError`."""
    if name not in PRESETS:
        hint = did_you_mean(str(name), PRESETS)
        raise ConfigError(f"model.variant: expected one of {sorted(PRESETS)}, got {name!r}{hint}")
    return PRESETS[name]


def _preset_model(preset: Preset, problem: ProblemName) -> dict[str, Any]:
    """The preset's ModelConfig overrides for ``problem``.

    Feature names in a preset are CVRPTW's; for another problem a preset that names features
    uses that problem's full feature list instead (only the centred-MLP variant does).
    """
    overrides = dict(preset.model)
    if problem != "cvrptw" and "centred_features" in overrides:
        overrides["centred_features"] = CONSEQUENCE_FEATURES[problem]
    return overrides


def preset_configs(
    name: str, problem: ProblemName = "cvrptw", **train_overrides: Any
) -> tuple[ModelConfig, TrainConfig]:
    """The ModelConfig and TrainConfig of preset ``name`` for ``problem``; ``train_overrides``
    win over the preset's own training switches (see ``variant_configs`` for the other way)."""
    preset = preset_named(name)
    model = ModelConfig.for_problem(problem, **_preset_model(preset, problem))
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
    not re-enable GateAttn in ``no_gateattn``.

    Raises:
        ConfigError: an unknown preset or key, or a value the configs refuse, named as
            ``model.variant``, ``model.overrides.KEY`` or ``train.KEY``.
    """
    preset = preset_named(name)
    train, model = dict(train or {}), dict(model or {})
    check_keys(TrainConfig, train, "train", required=False)
    check_keys(ModelConfig, model, "model.overrides", required=False, exclude=("problem",))
    base = ModelConfig.for_problem(problem, **_preset_model(preset, problem))
    protocol_model = {k: v for k, v in model.items() if k not in preset.model}
    model_config = build(ModelConfig, dataclasses.asdict(base) | protocol_model, "model.overrides")
    protocol_train = {k: v for k, v in train.items() if k not in preset.train}
    train_config = build(TrainConfig, protocol_train | preset.train, "train")
    z_vectors = 2**model_config.z_dim
    if model_config.z_dim > 0 and not train_config.multi_start:  # one distinct z a rollout
        k = train_config.num_rollouts
        expected = f"at most 2^{model_config.z_dim} = {z_vectors}, the model's distinct z-vectors"
        if k > z_vectors:
            raise ConfigError(f"train.num_rollouts: expected {expected}, got {k}")
    return model_config, train_config


__all__ = [
    "ABLATION_VARIANTS",
    "PRESETS",
    "Preset",
    "preset_configs",
    "preset_named",
    "register_preset",
    "variant_configs",
    "variant_of",
]
