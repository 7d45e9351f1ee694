"""CVRPTW: capacitated depot routes with time windows. The environment (:mod:`.env`), the
envelope generator (:mod:`.envelope` with its config, layout and windows) and the spec every
part of linc reads (:data:`CVRPTW`)."""

from __future__ import annotations

import torch
from torch import Tensor

from linc_core.instances import Instance
from linc_core.instances.solomon import read_solomon
from linc_core.instances.validation import check_loads, check_time_windows
from linc_core.problems.cvrp import demand_ratio
from linc_core.problems.cvrptw.env import (
    CAPACITY_EPS,
    DEPOT_RETURN_EPS,
    FEATURE_EPS,
    UNBOUNDED_DUE,
    CVRPTWEnv,
    CVRPTWState,
)
from linc_core.problems.cvrptw.envelope import ENVELOPE_FAMILIES, generate_cvrptw_envelope
from linc_core.problems.cvrptw.envelope_config import DEFAULT_ENVELOPE_CONFIG, EnvelopeConfig
from linc_core.problems.pyvrp_fleets import vehicle_fleet
from linc_core.problems.spec import FileFormat, ProblemSpec, register_problem
from linc_core.verify.checks import verify_timed


def node_features(instance: Instance, time_scale: Tensor) -> Tensor:
    """``[B, n, 3]`` each customer's demand / capacity, ready and due time / ``time_scale``."""
    windows = instance.time_windows[:, 1:] / time_scale.view(-1, 1, 1)
    return torch.cat([demand_ratio(instance, time_scale), windows], dim=-1)


def check_data(instance: Instance, row: int, source: str) -> None:
    """The loads' checks, then the windows' (each customer servable on a route of its own)."""
    check_loads(instance, row, source)
    check_time_windows(instance, row, source)


def generate(
    batch: int, num_customers: int, seed: int, options: EnvelopeConfig | None = None
) -> Instance:
    """``generate_cvrptw_envelope`` under ``options`` (default: the paper's envelope)."""
    return generate_cvrptw_envelope(batch, num_customers, seed, options or EnvelopeConfig())


CVRPTW = register_problem(
    ProblemSpec(
        name="cvrptw",
        has_depot=True,
        instance_fields=(
            "locs",
            "grid_size",
            "demand",
            "capacity",
            "time_windows",
            "service_time",
            "travel_time_scale",
        ),
        env=CVRPTWEnv,
        consequence_features=CVRPTWEnv.feature_names,
        relative_features=CVRPTWEnv.relative_features,
        summary=(("mean", "travel"), ("mean", "wait"), ("min", "slack")),
        context_scalars=2,  # the remaining load, the elapsed route time
        node_features=node_features,
        node_feature_width=3,
        generate=generate,
        generator_config=DEFAULT_ENVELOPE_CONFIG,
        check_data=check_data,
        verify=verify_timed,
        pyvrp_fleet=vehicle_fleet,
        file_formats={"solomon": FileFormat(".txt", read_solomon, "Solomon")},
        model_defaults={},  # ModelConfig's defaults are the reference's CVRPTW model
    )
)

__all__ = [
    "CAPACITY_EPS",
    "CVRPTW",
    "DEFAULT_ENVELOPE_CONFIG",
    "DEPOT_RETURN_EPS",
    "ENVELOPE_FAMILIES",
    "FEATURE_EPS",
    "UNBOUNDED_DUE",
    "CVRPTWEnv",
    "CVRPTWState",
    "EnvelopeConfig",
    "generate_cvrptw_envelope",
]
