"""Batched routing environments over ``[B, K, ...]``: TSP, CVRP, CVRPTW, and the rollout engine."""

from linc_core.instances import Instance, truncate_customers
from linc_core.problems.augment import augment_dihedral, dihedral_coordinates
from linc_core.problems.base import actions_to_routes, random_feasible_actions
from linc_core.problems.cvrp import CVRPEnv, CVRPState
from linc_core.problems.cvrptw import CVRPTWEnv, CVRPTWState
from linc_core.problems.generators import (
    EnvelopeConfig,
    generate_cvrp,
    generate_cvrptw_envelope,
    generate_tsp,
)
from linc_core.problems.protocol import (
    CONSEQUENCE_FEATURES,
    RELATIVE_FEATURES,
    DecoderContext,
    RolloutState,
    RoutingEnv,
)
from linc_core.problems.rollout import complete_rollouts, pomo_starts, start_rollouts
from linc_core.problems.tsp import TSPEnv, TSPState

__all__ = [
    "CONSEQUENCE_FEATURES",
    "RELATIVE_FEATURES",
    "CVRPEnv",
    "CVRPState",
    "CVRPTWEnv",
    "CVRPTWState",
    "DecoderContext",
    "EnvelopeConfig",
    "RolloutState",
    "RoutingEnv",
    "TSPEnv",
    "TSPState",
    "actions_to_routes",
    "augment_dihedral",
    "complete_rollouts",
    "dihedral_coordinates",
    "generate_cvrp",
    "generate_cvrptw_envelope",
    "generate_tsp",
    "make_env",
    "pomo_starts",
    "random_feasible_actions",
    "start_rollouts",
    "truncate_customers",
]

ENVIRONMENTS: dict[str, type] = {"tsp": TSPEnv, "cvrp": CVRPEnv, "cvrptw": CVRPTWEnv}


def make_env(instance: Instance, num_rollouts: int, **kwargs: bool) -> RoutingEnv:
    """The environment of ``instance.problem`` over ``num_rollouts`` rollouts per instance.

    Args:
        kwargs: environment options (``enforce_depot_return`` for CVRPTW).
    """
    return ENVIRONMENTS[instance.problem](instance, num_rollouts, **kwargs)
