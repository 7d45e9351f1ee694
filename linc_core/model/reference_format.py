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
decoder.full_* (never run by any variant)            dropped
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

import torch
from torch import Tensor, nn

from linc_core.config import ModelConfig

_RENAMES: tuple[tuple[str, str], ...] = (
    (r"^encoder\.static_residual_proj\.", "encoder.static_residual."),
    (r"^(encoder\.layers\.\d+)\.add_n_normalization_1\.", r"\1.norm_attention."),
    (r"^(encoder\.layers\.\d+)\.add_n_normalization_2\.", r"\1.norm_ff."),
    (r"^(encoder\.layers\.\d+)\.feed_forward\.W1\.", r"\1.ff_in."),
    (r"^(encoder\.layers\.\d+)\.feed_forward\.W2\.", r"\1.ff_out."),
    (r"^decoder\.quotient_lite_candidate_scorer\.", "scorer."),
)
_DROPPED = re.compile(r"^decoder\.full_")


def map_reference_keys(state_dict: Mapping[str, Tensor]) -> tuple[dict[str, Tensor], list[str]]:
    """Rename reference keys to linc keys.

    Returns:
        (the renamed state dict, the dropped reference keys).
    """
    mapped: dict[str, Tensor] = {}
    dropped: list[str] = []
    for key, value in state_dict.items():
        if _DROPPED.match(key):
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
    mapped, dropped = map_reference_keys(state_dict)
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

    Returns:
        (policy, its ModelConfig, the raw checkpoint dict).
    """
    from linc_core.model.policy import LincPolicy

    payload = torch.load(path, map_location=map_location, weights_only=False)
    if "model_state_dict" in payload:
        params = payload.get("model_params", {})
        state = payload["model_state_dict"]
    else:
        params, state = {}, payload
    config = config_from_reference_params(params, problem)
    policy = LincPolicy(config)
    load_reference_state_dict(policy, state)
    return policy, config, payload
