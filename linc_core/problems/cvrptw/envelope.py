"""The CVRPTW envelope generator (paper appendix "Data Generation Details"; constants from
``linc-reference.md`` section 2).

Per instance it draws a latent (hard slice, scale S, horizon, service, alpha, spatial, width and
phase mixtures), lays customers out as a cluster / uniform / corridor / outlier mixture around a
depot at (S/2, S/2), and derives windows from the feasible bounds. The same
``(batch, size, seed, config)`` always gives the same tensors. The method, and every choice
where the reference is silent or differs, with the evidence for it, are in
``docs/envelope-generator.md``.
"""

from __future__ import annotations

from typing import Literal, overload

import numpy as np

from linc_core.instances import Instance
from linc_core.problems.base import check_positive
from linc_core.problems.cvrptw.envelope_config import (
    DEFAULT_ENVELOPE_CONFIG,
    EnvelopeConfig,
)
from linc_core.problems.cvrptw.envelope_layout import sample_latents, sample_layout
from linc_core.problems.cvrptw.envelope_windows import assemble, sample_time_windows

# Family labels returned with the latents; index = code in ``latents["family_code"]``.
ENVELOPE_FAMILIES: tuple[str, ...] = (
    "cluster-heavy",
    "uniform-heavy",
    "corridor-heavy",
    "mixed-envelope",
)


@overload
def generate_cvrptw_envelope(
    batch: int,
    num_customers: int,
    seed: int,
    config: EnvelopeConfig = ...,
    *,
    return_latents: Literal[False] = ...,
) -> Instance: ...


@overload
def generate_cvrptw_envelope(
    batch: int,
    num_customers: int,
    seed: int,
    config: EnvelopeConfig = ...,
    *,
    return_latents: Literal[True],
) -> tuple[Instance, dict[str, np.ndarray]]: ...


def generate_cvrptw_envelope(
    batch: int,
    num_customers: int,
    seed: int,
    config: EnvelopeConfig = DEFAULT_ENVELOPE_CONFIG,
    *,
    return_latents: bool = False,
) -> Instance | tuple[Instance, dict[str, np.ndarray]]:
    """Sample CVRPTW instances from the LINC envelope distribution.

    Args:
        batch: number of instances B.
        num_customers: customers per instance n (the depot is extra).
        seed: seed of the instance stream (``np.random.default_rng(seed)``).
        config: the generator's constants.
        return_latents: also return the per-instance latents and per-node labels.

    Returns:
        ``Instance(problem="cvrptw")`` with float32 CPU tensors. ``locs`` is ``[B, n+1, 2]``
        in ``[0, S]`` with the depot at ``(S/2, S/2)`` first. ``demand`` is ``[B, n+1]``
        (integers, depot 0), ``capacity`` is ``[B]``. ``time_windows`` is ``[B, n+1, 2]``
        with the depot at ``[0, H]``. ``service_time`` is ``[B, n+1]`` (customers s, depot 0).
        ``travel_time_scale`` is ``[B]`` alpha and ``grid_size`` is ``[B]`` S.

        With ``return_latents=True``, also a dict of numpy arrays. Per instance ``[B]``:
        ``is_hard``, ``family`` (str), ``family_code``, ``grid_size``, ``horizon``,
        ``horizon_ratio``, ``service_time``, ``service_ratio``, ``travel_time_scale``,
        ``cluster_count``, ``sigma_cluster``, ``sigma_phase``, ``corridor_halfwidth``,
        ``outlier_ratio``, ``constrained_ratio``, ``route_density``, ``capacity_noise``,
        ``w_min_ratio``, ``w_min``, ``cluster_bias``, ``corridor_bias``,
        ``float32_nudged`` (number of customers nudged). Mixture weights:
        ``space_weights`` ``[B, 4]``, ``width_weights`` ``[B, 3]``, ``phase_weights``
        ``[B, 4]``, ``beta_a`` and ``beta_b`` ``[B, 3]``. Per customer ``[B, n]``:
        ``component`` (0 cluster, 1 uniform, 2 corridor, 3 outlier), ``constrained`` (bool)
        and ``width_component`` (0 narrow, 1 medium, 2 loose, -1 unconstrained).
    """
    check_positive(batch=batch, num_customers=num_customers)
    rng = np.random.default_rng(seed)
    latents = sample_latents(rng, batch, config)
    unit_xy, component, node_cluster_phase = sample_layout(rng, latents, num_customers, config)

    d_low, d_high = config.demand_range
    demand = rng.integers(d_low, d_high + 1, size=(batch, num_customers))
    mean_demand = demand.mean(axis=1)
    capacity = np.maximum(
        demand.max(axis=1) + 1.0,
        latents["route_density"] * mean_demand * latents["capacity_noise"],
    )

    ready, due, constrained, width_component = sample_time_windows(
        rng, latents, unit_xy, node_cluster_phase, config
    )
    instance, nudged = assemble(latents, unit_xy, demand, capacity, ready, due)
    if not return_latents:
        return instance

    latents["float32_nudged"] = nudged
    latents["component"] = component
    latents["constrained"] = constrained
    latents["width_component"] = width_component
    latents["family_code"] = family_codes(latents["space_weights"], config)
    latents["family"] = np.asarray(ENVELOPE_FAMILIES)[latents["family_code"]]
    latents.pop("cluster_centres_padded")
    latents.pop("cluster_phases_padded")
    return instance, latents


def family_codes(space_weights: np.ndarray, cfg: EnvelopeConfig) -> np.ndarray:
    """Index into ``ENVELOPE_FAMILIES`` (linc's own rule, ``docs/envelope-generator.md``)."""
    main = space_weights[:, :3]
    dominant = main.argmax(axis=1)
    share = main.max(axis=1)
    return np.where(share >= cfg.family_dominant_share, dominant, 3).astype(np.int8)
