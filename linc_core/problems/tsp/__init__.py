"""TSP: one closed tour over every city. The environment (:mod:`.env`), the uniform generator
(:mod:`.generator`) and the spec every part of linc reads (:data:`TSP`)."""

from __future__ import annotations

from typing import Any

from linc_core.instances import Instance
from linc_core.instances.vrplib_files import read_tsplib
from linc_core.problems.pyvrp_fleets import tour_fleet
from linc_core.problems.spec import FileFormat, ProblemSpec, register_problem
from linc_core.problems.tsp.env import TSPEnv, TSPState
from linc_core.problems.tsp.generator import generate_tsp
from linc_core.verify.checks import verify_tour


def generate(batch: int, num_customers: int, seed: int, options: Any = None) -> Instance:
    """``generate_tsp`` (no options): ``num_customers`` cities."""
    return generate_tsp(batch, num_customers, seed)


TSP = register_problem(
    ProblemSpec(
        name="tsp",
        has_depot=False,
        instance_fields=("locs", "grid_size"),
        env=TSPEnv,
        consequence_features=TSPEnv.feature_names,
        relative_features=TSPEnv.relative_features,
        summary=(("mean", "travel"), ("mean", "dist_to_start"), ("mean", "dist_to_centroid")),
        context_scalars=0,
        first_node_query=True,
        generate=generate,
        verify=verify_tour,
        pyvrp_fleet=tour_fleet,
        file_formats={"tsplib": FileFormat(".tsp", read_tsplib, "TSPLIB")},
        # The reference's warm-started TSP model: PolyNet encoder, scorer width 64.
        model_defaults={
            "candidate_features": ("travel", "angle"),
            "centred_features": TSPEnv.relative_features,
            "node_static_features": (),
            "gated_attention": False,
            "depth_mixer": False,
            "scorer_hidden_dim": 64,
        },
    )
)

__all__ = ["TSP", "TSPEnv", "TSPState", "generate_tsp"]
