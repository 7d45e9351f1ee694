"""CVRP: capacitated depot routes. The environment (:mod:`.env`), the uniform generator
(:mod:`.generator`) and the spec every part of linc reads (:data:`CVRP`)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from linc_core.instances import Instance
from linc_core.instances.validation import check_loads
from linc_core.instances.vrplib_files import read_cvrplib
from linc_core.problems.cvrp.env import CVRPEnv, CVRPState
from linc_core.problems.cvrp.generator import CVRP_CAPACITY_BY_SIZE, generate_cvrp
from linc_core.problems.pyvrp_fleets import vehicle_fleet
from linc_core.problems.spec import FileFormat, ProblemSpec, register_problem
from linc_core.verify.checks import verify_capacitated


def demand_ratio(instance: Instance, time_scale: Tensor) -> Tensor:
    """``[B, n, 1]`` each customer's demand / capacity (the encoder's input after x, y)."""
    return (instance.demand[:, 1:] / instance.capacity.unsqueeze(-1)).unsqueeze(-1)


def generate(batch: int, num_customers: int, seed: int, options: Any = None) -> Instance:
    """``generate_cvrp`` (no options: the capacity of Kool et al. for the size)."""
    return generate_cvrp(batch, num_customers, seed)


CVRP = register_problem(
    ProblemSpec(
        name="cvrp",
        has_depot=True,
        instance_fields=("locs", "grid_size", "demand", "capacity"),
        env=CVRPEnv,
        consequence_features=CVRPEnv.feature_names,
        relative_features=CVRPEnv.relative_features,
        summary=(("mean", "travel"), ("mean", "demand_ratio"), ("min", "load_after")),
        context_scalars=1,  # the remaining load
        node_features=demand_ratio,
        node_feature_width=1,
        generate=generate,
        check_data=check_loads,
        verify=verify_capacitated,
        pyvrp_fleet=vehicle_fleet,
        file_formats={"cvrplib": FileFormat(".vrp", read_cvrplib, "CVRPLIB")},
        generated_sizes=tuple(sorted(CVRP_CAPACITY_BY_SIZE)),
        # The reference's warm-started CVRP model: PolyNet encoder (no GateAttn, no Depth
        # Mixer), scorer width 64, the kNN-mean node statistic as a residual.
        model_defaults={
            "candidate_features": ("travel", "demand_ratio", "dist_to_depot", "angle"),
            "centred_features": CVRPEnv.relative_features,
            "node_static_features": ("knn_mean",),
            "static_feature_mode": "residual",
            "gated_attention": False,
            "depth_mixer": False,
            "scorer_hidden_dim": 64,
        },
    )
)

__all__ = ["CVRP", "CVRPEnv", "CVRPState", "CVRP_CAPACITY_BY_SIZE", "demand_ratio", "generate_cvrp"]
