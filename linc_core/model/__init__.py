"""The LINC policy: encoder, decoder context with PolyNet z, candidate scorers, rollouts."""

from linc_core.model.policy import LincPolicy, RolloutResult
from linc_core.model.reference_format import (
    load_reference_state_dict,
    map_reference_keys,
    reference_initial_state_dict,
)
from linc_core.model.sampling import BatchRows, row_seeds, sample_z
from linc_core.model.types import Encoded

__all__ = [
    "BatchRows",
    "Encoded",
    "LincPolicy",
    "RolloutResult",
    "load_reference_state_dict",
    "map_reference_keys",
    "reference_initial_state_dict",
    "row_seeds",
    "sample_z",
]
