"""Batched routing environments over ``[B, K, ...]``: TSP, CVRP, CVRPTW."""

from linc_core.instances import truncate_customers
from linc_core.problems.augment import augment_dihedral, dihedral_coordinates
from linc_core.problems.base import actions_to_routes, random_feasible_actions, rollout
from linc_core.problems.cvrp import CVRPEnv, CVRPState
from linc_core.problems.cvrptw import CVRPTWEnv, CVRPTWState
from linc_core.problems.generators import (
    EnvelopeConfig,
    generate_cvrp,
    generate_cvrptw_envelope,
    generate_tsp,
)
from linc_core.problems.tsp import TSPEnv, TSPState

__all__ = [
    "CVRPEnv",
    "CVRPState",
    "CVRPTWEnv",
    "CVRPTWState",
    "EnvelopeConfig",
    "TSPEnv",
    "TSPState",
    "actions_to_routes",
    "augment_dihedral",
    "dihedral_coordinates",
    "generate_cvrp",
    "generate_cvrptw_envelope",
    "generate_tsp",
    "make_env",
    "random_feasible_actions",
    "rollout",
    "truncate_customers",
]


def make_env(instance, num_rollouts: int, **kwargs):  # noqa: ANN001, ANN201
    """The environment of ``instance.problem`` over ``num_rollouts`` rollouts per instance."""
    envs = {"tsp": TSPEnv, "cvrp": CVRPEnv, "cvrptw": CVRPTWEnv}
    return envs[instance.problem](instance, num_rollouts, **kwargs)
