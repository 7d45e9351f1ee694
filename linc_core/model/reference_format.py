"""Load state dicts written by the LINC reference implementation.

The reference names its modules differently; this one table maps its keys onto ours, so that
checkpoints released with the paper can be evaluated and fine-tuned here. Keys of code paths
the reference builds but never runs in any of the twelve variants (``decoder.full_*``: the
unused additive-feature branch) are dropped.

reference key                                        linc key
encoder.embedding_depot / embedding_node             same
encoder.static_residual_proj                         encoder.static_residual
encoder.layers.{i}.Wq / Wk / Wv / W_gate             same
encoder.layers.{i}.multi_head_combine                same
encoder.layers.{i}.add_n_normalization_1.norm        encoder.layers.{i}.norm_attention.norm
encoder.layers.{i}.add_n_normalization_2.norm        encoder.layers.{i}.norm_ff.norm
encoder.layers.{i}.feed_forward.W1 / W2              encoder.layers.{i}.ff_in / ff_out
encoder.depth_key_norm / depth_queries               same
decoder.Wq_first / Wq_last / Wk / Wv                 same
decoder.multi_head_combine / poly_layer_1 / _2       same
decoder.quotient_lite_candidate_scorer.{name}        scorer.{name}
decoder.naive_feature_score_mlp.0 / .2               scorer.mlp_hidden / mlp_out
decoder.full_* (never run by any variant)            dropped
decoder.quotient_lite_candidate_scorer.summary_*     dropped when the config has no summary
                                                     (built, never run, by no_step_summary)

``reference_initial_state_dict`` replays the reference's module construction to give the weights
it starts from for a seed (its runs seed torch once, then build the model).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace

import torch
from torch import Tensor, nn

from linc_core.config import ModelConfig
from linc_core.model.features import node_input_dim
from linc_core.utils.tensor_file import CheckpointError, load_tensor_file

_RENAMES: tuple[tuple[str, str], ...] = (
    (r"^encoder\.static_residual_proj\.", "encoder.static_residual."),
    (r"^(encoder\.layers\.\d+)\.add_n_normalization_1\.", r"\1.norm_attention."),
    (r"^(encoder\.layers\.\d+)\.add_n_normalization_2\.", r"\1.norm_ff."),
    (r"^(encoder\.layers\.\d+)\.feed_forward\.W1\.", r"\1.ff_in."),
    (r"^(encoder\.layers\.\d+)\.feed_forward\.W2\.", r"\1.ff_out."),
    (r"^decoder\.quotient_lite_candidate_scorer\.", "scorer."),
    (r"^decoder\.naive_feature_score_mlp\.0\.", "scorer.mlp_hidden."),
    (r"^decoder\.naive_feature_score_mlp\.2\.", "scorer.mlp_out."),
)
_DROPPED = re.compile(r"^decoder\.full_")
# The reference scorer builds its summary modules even when a variant switches the summary off.
_SUMMARY_KEYS = re.compile(r"^decoder\.quotient_lite_candidate_scorer\.summary_")


def map_reference_keys(
    state_dict: Mapping[str, Tensor], has_summary: bool = True
) -> tuple[dict[str, Tensor], list[str]]:
    """Rename reference keys to linc keys.

    Args:
        has_summary: the target config has a step summary; without one the reference's
            (never run) summary modules are dropped.

    Returns:
        (the renamed state dict, the dropped reference keys).
    """
    mapped: dict[str, Tensor] = {}
    dropped: list[str] = []
    for key, value in state_dict.items():
        if _DROPPED.match(key) or (not has_summary and _SUMMARY_KEYS.match(key)):
            dropped.append(key)
            continue
        new = key
        for pattern, replacement in _RENAMES:
            new = re.sub(pattern, replacement, new)
        mapped[new] = value
    return mapped, dropped


def load_reference_state_dict(model: nn.Module, state_dict: Mapping[str, Tensor]) -> list[str]:
    """Load a reference-format state dict into a ``LincPolicy`` (strict after the mapping).

    Raises:
        ValueError: keys missing on either side after mapping (names both lists).

    Returns:
        The dropped reference keys.
    """
    config = getattr(model, "config", None)
    has_summary = config is None or config.summary != "none"
    mapped, dropped = map_reference_keys(state_dict, has_summary)
    ours = model.state_dict()
    missing = sorted(set(ours) - set(mapped))
    unexpected = sorted(set(mapped) - set(ours))
    if missing or unexpected:
        raise ValueError(
            f"reference state dict does not fit this model: missing {missing}, "
            f"unexpected {unexpected} (check the ModelConfig switches)"
        )
    model.load_state_dict(mapped, strict=True)
    return dropped


_FEATURE_NAMES = {
    "travel_dist_norm": "travel",
    "wait_norm": "wait",
    "tw_slack_ratio": "slack",
    "arrival_time_norm": "arrival",
    "departure_time_norm": "departure",
    "depot_angle_diff_norm": "angle",
    "centroid_angle_diff_norm": "angle",
    "demand_ratio": "demand_ratio",
    "load_after_ratio": "load_after",
    "dist_to_depot_norm": "dist_to_depot",
    "dist_to_start_norm": "dist_to_start",
    "dist_to_centroid_norm": "dist_to_centroid",
    "knn_nearest_dist_norm": "knn_nearest",
    "knn_mean_dist_norm": "knn_mean",
    "knn_min_dist_norm": "knn_min",
}


def _names(params: Mapping[str, object], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = params.get(key)
    if raw is None:
        return default
    unknown = [name for name in raw if name not in _FEATURE_NAMES]  # type: ignore[union-attr]
    if unknown:
        raise ValueError(f"model_params: field '{key}' has unknown feature names {unknown}")
    return tuple(_FEATURE_NAMES[name] for name in raw)  # type: ignore[union-attr]


def config_from_reference_params(
    params: Mapping[str, object], problem: str = "cvrptw"
) -> ModelConfig:
    """The ModelConfig equivalent to a reference checkpoint's ``model_params``.

    Raises:
        ValueError: a switch this project does not implement (named with its value).
    """
    base = ModelConfig.for_problem(problem)  # type: ignore[arg-type]
    scorer_kind = params.get("candidate_scorer_type", "quotient_lite")
    uses_features = bool(params.get("use_candidate_features", scorer_kind != "baseline_additive"))
    if not uses_features or scorer_kind == "baseline_additive":
        scorer = "baseline"
    elif scorer_kind == "quotient_lite":
        scorer = "linc"
    elif scorer_kind == "mlp_score_only":
        scorer = "mlp"
    else:
        raise ValueError(
            f"model_params: field 'candidate_scorer_type' = {scorer_kind!r} unsupported"
        )
    gate_alpha = float(params.get("alpha_attn_gate", 1.0))
    if params.get("use_gated_attention") and gate_alpha != 1.0:
        raise ValueError(
            f"model_params: field 'alpha_attn_gate' = {gate_alpha}: only 1.0 supported"
        )
    if params.get("use_learned_corrector"):
        raise ValueError("model_params: field 'use_learned_corrector' = True: unsupported")
    values: dict[str, object] = {
        "embedding_dim": int(params.get("embedding_dim", base.embedding_dim)),
        "encoder_layers": int(params.get("encoder_layer_num", base.encoder_layers)),
        "num_heads": int(params.get("head_num", base.num_heads)),
        "ff_hidden_dim": int(params.get("ff_hidden_dim", base.ff_hidden_dim)),
        "logit_clip": float(params.get("logit_clipping", base.logit_clip)),
        "z_dim": int(params.get("z_dim", base.z_dim)),
        "poly_hidden_dim": int(params.get("poly_embedding_dim", base.poly_hidden_dim)),
        "gated_attention": bool(params.get("use_gated_attention", False)),
        "gate_mode": str(params.get("gated_attention_scale_mode", base.gate_mode)),
        "gate_init_bias": float(params.get("gated_attention_init_bias", base.gate_init_bias)),
        "depth_mixer": bool(params.get("use_depth_mixer", False)),
        "input_scale": str(params.get("cvrptw_input_scale_mode", "grid")),
        "node_static_features": _names(params, "selected_node_static_feature_names", ()),
        "scorer": scorer,
        "phi_bias": bool(params.get("phi_proj_bias", True)),
    }
    if scorer != "baseline":
        values["candidate_features"] = _names(
            params, "selected_candidate_feature_names", base.candidate_features
        )
        values["centred_features"] = _names(
            params, "relative_candidate_feature_names", base.centred_features
        )
        hidden = params.get("quotient_lite_hidden_dim", params.get("quotient_scorer_hidden_dim"))
        if hidden:
            values["scorer_hidden_dim"] = int(hidden)  # type: ignore[arg-type]
    if scorer == "linc":
        raw = params.get("qlite_feature_centering_mode", "centered") == "raw"
        values["centring"] = "none" if raw else "feasible_mean"
        if params.get("qlite_disable_summary_modulation") or params.get("qlite_force_alpha_one"):
            values["summary"] = "none"
        else:
            mode = params.get("qlite_summary_mode", "partial")
            values["summary"] = {"partial": "partial", "full_mu": "full_mean"}[str(mode)]
    if scorer == "mlp":
        values["summary"] = "none"
        if params.get("mlp_score_feature_mode", "raw") == "centered":
            values["centred_features"] = values["candidate_features"]
            values["depot_row"] = "zero"
        else:
            values["centring"] = "none"
    return replace(base, **values)  # type: ignore[arg-type]


def load_reference_checkpoint(
    path: str, problem: str = "cvrptw", map_location: str = "cpu"
) -> tuple[nn.Module, ModelConfig, dict]:
    """Build a ``LincPolicy`` from a reference trainer checkpoint (``model_params`` and
    ``model_state_dict``) or from a bare reference state dict plus the reference defaults.

    The file is read as tensors and plain data only, as linc's own checkpoints are
    (:func:`linc_core.utils.tensor_file.load_tensor_file`): nothing in it runs.

    Returns:
        (policy, its ModelConfig, the raw checkpoint dict).

    Raises:
        CheckpointError: the file holds anything but tensors and plain data, is no torch file,
            or holds no state dict (names the file).
    """
    from linc_core.model.policy import LincPolicy

    payload = load_tensor_file(path, map_location)
    if not isinstance(payload, Mapping):
        kind = type(payload).__name__
        raise CheckpointError(f"checkpoint {path}: holds a {kind}, not a reference state dict")
    if "model_state_dict" in payload:
        params = payload.get("model_params", {})
        state = payload["model_state_dict"]
    else:
        params, state = {}, payload
    config = config_from_reference_params(params, problem)
    policy = LincPolicy(config)
    load_reference_state_dict(policy, state)
    return policy, config, payload


def reference_initialisation_unsupported(config: ModelConfig) -> str | None:
    """Why ``reference_initial_state_dict`` cannot replay ``config`` (None when it can)."""
    if config.problem != "cvrptw" or config.z_dim <= 0:
        return (
            "it replays the reference CVRPTW model with z-vectors; got problem "
            f"{config.problem!r} with z_dim {config.z_dim}"
        )
    if config.static_feature_mode != "concat":
        return f"static_feature_mode {config.static_feature_mode!r} is not the reference's (concat)"
    return None


def reference_initial_state_dict(config: ModelConfig, seed: int) -> dict[str, Tensor]:
    """The weights the reference implementation starts from for ``config`` after
    ``torch.manual_seed(seed)``, under its key names (load with ``load_reference_state_dict``).

    The reference seeds torch once and then builds its CVRPTW model, every ``nn.Linear``
    drawing its weight and then its bias from the global generator. Replaying that construction
    order (read from its model's ``__init__`` methods, commit cc06fa8) with the same shapes and
    a generator seeded the same way reproduces its initial weights: the starting point of its
    published runs (``reference_cpu_training_curves.json`` uses seed 1234). Modules it builds
    but never runs (``decoder.full_*``, a switched-off summary) are drawn as well, since they
    advance the generator.

    Raises:
        ValueError: ``config`` is not a configuration of the reference CVRPTW LINC model.
    """
    reason = reference_initialisation_unsupported(config)
    if reason is not None:
        raise ValueError(f"reference initialisation: {reason}")
    generator = torch.Generator().manual_seed(seed)
    state: dict[str, Tensor] = {}
    d = config.embedding_dim

    def linear(name: str, fan_in: int, fan_out: int, bias: bool = True) -> None:
        # nn.Linear.reset_parameters: kaiming-uniform weight, then U(+-1/sqrt(fan_in)) bias
        weight = torch.empty(fan_out, fan_in)
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=generator)
        state[f"{name}.weight"] = weight
        if bias:
            bound = 1.0 / math.sqrt(fan_in)
            state[f"{name}.bias"] = nn.init.uniform_(
                torch.empty(fan_out), -bound, bound, generator=generator
            )

    linear("encoder.embedding_depot", 2, d)
    linear("encoder.embedding_node", node_input_dim(config), d)
    for layer in range(config.encoder_layers):
        prefix = f"encoder.layers.{layer}"
        for projection in ("Wq", "Wk", "Wv"):
            linear(f"{prefix}.{projection}", d, d, bias=False)
        linear(f"{prefix}.multi_head_combine", d, d)
        if config.gated_attention:
            linear(f"{prefix}.W_gate", d, config.num_heads)  # drawn, then overwritten
            state[f"{prefix}.W_gate.weight"].zero_()
            state[f"{prefix}.W_gate.bias"].fill_(config.gate_init_bias)
        for norm in ("add_n_normalization_1", "add_n_normalization_2"):
            state[f"{prefix}.{norm}.norm.weight"] = torch.ones(d)
            state[f"{prefix}.{norm}.norm.bias"] = torch.zeros(d)
        linear(f"{prefix}.feed_forward.W1", d, config.ff_hidden_dim)
        linear(f"{prefix}.feed_forward.W2", config.ff_hidden_dim, d)
    if config.depth_mixer:
        state["encoder.depth_key_norm.weight"] = torch.ones(d)
        state["encoder.depth_queries"] = nn.init.normal_(
            torch.empty(config.encoder_layers, d), 0.0, d**-0.5, generator=generator
        )
    linear("decoder.Wq_last", d + 2, d, bias=False)
    linear("decoder.Wk", d, d, bias=False)
    linear("decoder.Wv", d, d, bias=False)
    linear("decoder.multi_head_combine", d, d)
    linear("decoder.poly_layer_1", d + config.z_dim, config.poly_hidden_dim)
    linear("decoder.poly_layer_2", config.poly_hidden_dim, d)
    if config.scorer == "baseline":
        return state
    features = len(config.candidate_features)
    gate_hidden = max(32, d // 2)
    linear("decoder.full_phi_proj", features, d)
    linear("decoder.full_alpha_ctx_proj", d + 2, gate_hidden, bias=False)
    linear("decoder.full_alpha_node_proj", d, gate_hidden)
    linear("decoder.full_alpha_out", gate_hidden, features)
    state["decoder.full_phi_bias_scale"] = torch.tensor(0.1)
    linear("decoder.full_gate_node", d, 1)
    linear("decoder.full_gate_ctx", d + 2, 1)
    state["decoder.full_gate_node.weight"].zero_()
    state["decoder.full_gate_node.bias"].zero_()
    state["decoder.full_gate_ctx.weight"].zero_()
    state["decoder.full_gate_ctx.bias"].fill_(2.0)
    hidden = config.scorer_hidden_dim
    if config.scorer == "mlp":
        linear("decoder.naive_feature_score_mlp.0", d + features, hidden)
        linear("decoder.naive_feature_score_mlp.2", hidden, 1)
        return state
    scorer = "decoder.quotient_lite_candidate_scorer"
    linear(f"{scorer}.full_phi_proj", features, d, bias=config.phi_bias)
    # built whatever the summary switch says (the partial r_t's width when it is off)
    summary_width = 1 + len(config.summary_stats) if config.summary != "none" else 4
    linear(f"{scorer}.summary_input_proj", d + summary_width, 3 * hidden)
    linear(f"{scorer}.summary_to_gamma", hidden, d)
    linear(f"{scorer}.summary_to_beta", hidden, d)
    linear(f"{scorer}.summary_to_alpha", hidden, 1)
    return state
