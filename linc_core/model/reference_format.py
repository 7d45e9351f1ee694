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

from torch import Tensor, nn

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
