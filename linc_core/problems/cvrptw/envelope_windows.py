"""Envelope generator, second half: time windows, assembly into an `Instance`, and the
float32 feasibility repair.

Windows come from the feasible bounds ``L = alpha d`` and ``U = H - alpha d - s``: a
constrained customer's window is centred at ``L + p (U - L)`` (p the phase) with a
Beta-mixture width, an unconstrained one gets a (near-)full window ``[0, H - s]``. Method and
design choices: ``docs/envelope-generator.md``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from linc_core.instances import Instance
from linc_core.problems.cvrptw.envelope_config import DEPOT_UNIT, EnvelopeConfig
from linc_core.problems.cvrptw.envelope_layout import pick_component, uniform


def sample_time_windows(
    rng: np.random.Generator,
    lat: dict[str, np.ndarray],
    unit_xy: np.ndarray,
    node_cluster_phase: np.ndarray,
    cfg: EnvelopeConfig,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Customer windows from the feasible bounds, phases and the width mixture.

    Cheap quantities are computed densely over ``[B, n]`` with per-instance latents
    broadcast, then chosen by ``np.where``. This is faster than gathering latents onto
    subsets. Only the Beta draw (the single expensive sampler) runs on the constrained
    subset.

    Args:
        unit_xy: ``[B, n, 2]`` positions on the unit square.
        node_cluster_phase: ``[B, n]`` phase of each customer's cluster (NaN if none).

    Returns:
        ``ready``, ``due`` ``[B, n]`` float64; ``constrained`` ``[B, n]`` bool;
        ``width_component`` ``[B, n]`` int8 (-1 for unconstrained customers).
    """
    batch, n, _ = unit_xy.shape
    full_due = (lat["horizon"] - lat["service_time"])[:, None]
    constrained = rng.random((batch, n)) < lat["constrained_ratio"][:, None]

    # Unconstrained: the full window [0, H - s], or a nearly full one.
    full = rng.random((batch, n)) < cfg.unconstrained_full_probability
    free_start = np.where(
        full, 0.0, uniform(rng, (batch, n), *cfg.unconstrained_start_fraction_range)
    )
    free_end = np.where(full, 1.0, uniform(rng, (batch, n), *cfg.unconstrained_end_fraction_range))
    np.maximum(free_end, free_start, out=free_end)

    # Constrained: centre at the phase between the feasible bounds L = alpha d and
    # U = H - alpha d - s, Beta-mixture width.
    dx = unit_xy[..., 0] - DEPOT_UNIT
    dy = unit_xy[..., 1] - DEPOT_UNIT
    unit_dist = np.sqrt(dx * dx + dy * dy)
    lower = (lat["travel_time_scale"] * lat["grid_size"])[:, None] * unit_dist
    upper = full_due - lower
    span = np.maximum(upper - lower, 0.0)

    w = lat["phase_weights"].T[:, :, None]  # [4, B, 1]: one broadcastable row per phase kind
    # One random phase per customer serves both as the random component and as the
    # "cluster" phase of customers outside any cluster (docs/envelope-generator.md).
    random_phase = rng.random((batch, n))
    cluster_phase = np.where(np.isnan(node_cluster_phase), random_phase, node_cluster_phase)
    phase = w[0] * cluster_phase
    phase += w[1] * (unit_dist * (1.0 / math.sqrt(2.0)))
    phase += w[2] * ((_atan2(dy, dx) + math.pi) * (0.5 / math.pi))
    phase += w[3] * random_phase
    phase += lat["sigma_phase"][:, None] * rng.standard_normal((batch, n))
    np.clip(phase, 0.0, 1.0, out=phase)
    centre = lower + phase * span

    width_component = pick_component(rng, lat["width_weights"], n)
    idx = np.flatnonzero(constrained)
    pair = (idx // n) * 3 + width_component.reshape(-1)[idx]
    omega = np.zeros((batch, n))
    omega.reshape(-1)[idx] = rng.beta(
        lat["beta_a"].reshape(-1)[pair], lat["beta_b"].reshape(-1)[pair]
    )
    half = 0.5 * np.maximum(lat["w_min"][:, None], omega * span)
    start = np.maximum(lower, centre - half)
    end = np.minimum(upper, centre + half)
    crossed = end < start
    if crossed.any():
        pinned = np.clip(centre, lower, upper)
        start = np.where(crossed, pinned, start)
        end = np.where(crossed, pinned, end)

    ready = np.where(constrained, start, free_start * full_due)
    due = np.where(constrained, end, free_end * full_due)
    width_component[~constrained] = -1
    return ready, due, constrained, width_component


def _atan2(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Elementwise atan2. torch's vectorised float32 kernel is several times faster than
    numpy's here, and the result feeds a phase blurred by noise of std >= 0.02, so float32
    (about 1e-7 rad) is ample."""
    out = torch.atan2(
        torch.from_numpy(y.astype(np.float32)), torch.from_numpy(x.astype(np.float32))
    )
    return out.numpy().astype(np.float64)


def assemble(
    lat: dict[str, np.ndarray],
    unit_xy: np.ndarray,
    demand: np.ndarray,
    capacity: np.ndarray,
    ready: np.ndarray,
    due: np.ndarray,
) -> tuple[Instance, np.ndarray]:
    """Scale to S, put the depot first, convert once to float32 and enforce feasibility there.

    Returns:
        The instance and ``[B]`` counts of customers whose window was nudged.
    """
    batch, n, _ = unit_xy.shape
    grid = lat["grid_size"]
    horizon = lat["horizon"]
    locs = np.empty((batch, n + 1, 2), dtype=np.float32)
    locs[:, 0, :] = (DEPOT_UNIT * grid)[:, None]
    locs[:, 1:, :] = unit_xy * grid[:, None, None]
    windows = np.zeros((batch, n + 1, 2), dtype=np.float32)
    windows[:, 0, 1] = horizon
    windows[:, 1:, 0] = ready
    windows[:, 1:, 1] = due
    service = np.zeros((batch, n + 1), dtype=np.float32)
    service[:, 1:] = lat["service_time"][:, None]
    alpha = lat["travel_time_scale"].astype(np.float32)
    nudged = nudge_float32_feasible(locs, windows, service, alpha)
    demand32 = np.zeros((batch, n + 1), dtype=np.float32)
    demand32[:, 1:] = demand
    instance = Instance(
        problem="cvrptw",
        locs=torch.from_numpy(locs),
        demand=torch.from_numpy(demand32),
        capacity=torch.from_numpy(capacity.astype(np.float32)),
        time_windows=torch.from_numpy(windows),
        service_time=torch.from_numpy(service),
        travel_time_scale=torch.from_numpy(alpha),
        grid_size=torch.from_numpy(grid.astype(np.float32)),
    )
    return instance, nudged


def _single_customer_violations(
    locs: np.ndarray, windows: np.ndarray, service: np.ndarray, alpha: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float32 check that each customer can be served alone from the depot.

    The check is written the way an environment evaluates it: arrival
    ``max(alpha d, ready) <= due`` and ``(arrival + service) + alpha d <= H``.

    Returns:
        ``bad`` ``[B, n]`` bool, ``travel`` and ``arrival`` ``[B, n]`` float32.
    """
    delta = locs[:, 1:, :] - locs[:, :1, :]
    travel = alpha[:, None] * np.sqrt((delta * delta).sum(axis=-1))
    arrival = np.maximum(travel, windows[:, 1:, 0])
    back = arrival + service[:, 1:] + travel
    bad = (arrival > windows[:, 1:, 1]) | (back > windows[:, :1, 1])
    return bad, travel, arrival


def nudge_float32_feasible(
    locs: np.ndarray, windows: np.ndarray, service: np.ndarray, alpha: np.ndarray
) -> np.ndarray:
    """Repair, in place, customers that float32 rounding made infeasible.

    A failing customer gets ``ready = min(ready, H - s - alpha d)`` and then
    ``due = max(due, arrival)``. The float32 recheck can still fail by one rounding step, so
    ``ready`` is lowered by one ulp per round until it passes. The config check keeps
    ``alpha d`` well below ``H - s - alpha d``, so this ends within a few rounds.

    Args:
        locs: ``[B, n+1, 2]`` float32, depot first.
        windows: ``[B, n+1, 2]`` float32, modified in place.
        service: ``[B, n+1]`` float32.
        alpha: ``[B]`` float32.

    Returns:
        ``[B]`` number of customers changed per instance.
    """
    bad, travel, _ = _single_customer_violations(locs, windows, service, alpha)
    nudged = bad.sum(axis=1)
    ready = windows[:, 1:, 0]  # views: writes go to ``windows``
    due = windows[:, 1:, 1]
    latest = windows[:, :1, 1] - service[:, 1:] - travel
    for _ in range(16):
        if not bad.any():
            return nudged
        ready[bad] = np.maximum(np.minimum(ready[bad], latest[bad]), np.float32(0.0))
        due[bad] = np.maximum(due[bad], np.maximum(travel[bad], ready[bad]))
        latest[bad] = np.nextafter(latest[bad], np.float32(-np.inf))
        bad, _, _ = _single_customer_violations(locs, windows, service, alpha)
    raise RuntimeError(
        "generate_cvrptw_envelope: could not make every customer float32-feasible; "
        "check the EnvelopeConfig horizon and travel-time ranges."
    )
