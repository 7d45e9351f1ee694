"""The LINC policy: encoder, decoder context with PolyNet z, candidate scorers, rollouts."""

from linc_core.model.policy import LincPolicy, RolloutResult, sample_from_log_probs, sample_z
from linc_core.model.reference_format import (
    load_reference_state_dict,
    map_reference_keys,
    reference_initial_state_dict,
)

__all__ = [
    "LincPolicy",
    "RolloutResult",
    "load_reference_state_dict",
    "map_reference_keys",
    "reference_initial_state_dict",
    "sample_from_log_probs",
    "sample_z",
]
