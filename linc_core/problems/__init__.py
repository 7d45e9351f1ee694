"""Routing problems: one folder per problem (``tsp/``, ``cvrp/``, ``cvrptw/``: environment,
generator and the :class:`~linc_core.problems.spec.ProblemSpec` that registers it), the
registry every consumer reads (:mod:`~linc_core.problems.spec`), the environment protocol, and
what all problems share: the rollout engine, tensor helpers, the dihedral augmentations and the
rollout packing.

Batched environments over ``[B, K, ...]``: B instances x K rollouts. The names below are imported
on first use: ``linc_core.instances`` reads the registry, and the environments read
``linc_core.instances``.
"""

from linc_core.utils.lazy import lazy_exports

_PUBLIC: dict[str, str] = {
    "Instance": "linc_core.instances",
    "truncate_customers": "linc_core.instances",
    "augment_dihedral": "linc_core.problems.augment",
    "dihedral_coordinates": "linc_core.problems.augment",
    "actions_to_routes": "linc_core.problems.base",
    "random_feasible_actions": "linc_core.problems.base",
    "CVRPEnv": "linc_core.problems.cvrp",
    "CVRPState": "linc_core.problems.cvrp",
    "generate_cvrp": "linc_core.problems.cvrp",
    "CVRPTWEnv": "linc_core.problems.cvrptw",
    "CVRPTWState": "linc_core.problems.cvrptw",
    "EnvelopeConfig": "linc_core.problems.cvrptw",
    "generate_cvrptw_envelope": "linc_core.problems.cvrptw",
    "TSPEnv": "linc_core.problems.tsp",
    "TSPState": "linc_core.problems.tsp",
    "generate_tsp": "linc_core.problems.tsp",
    "DecoderContext": "linc_core.problems.protocol",
    "RolloutState": "linc_core.problems.protocol",
    "RoutingEnv": "linc_core.problems.protocol",
    "complete_rollouts": "linc_core.problems.rollout",
    "pomo_starts": "linc_core.problems.rollout",
    "start_rollouts": "linc_core.problems.rollout",
    "CONSEQUENCE_FEATURES": "linc_core.problems.spec",
    "RELATIVE_FEATURES": "linc_core.problems.spec",
    "PROBLEMS": "linc_core.problems.spec",
    "FileFormat": "linc_core.problems.spec",
    "ProblemName": "linc_core.problems.spec",
    "ProblemSpec": "linc_core.problems.spec",
    "make_env": "linc_core.problems.spec",
    "problem_names": "linc_core.problems.spec",
    "problem_spec": "linc_core.problems.spec",
    "register_problem": "linc_core.problems.spec",
    "unregister_problem": "linc_core.problems.spec",
}

__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
