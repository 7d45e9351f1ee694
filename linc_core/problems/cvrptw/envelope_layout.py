"""Envelope generator, first half: per-instance latents and customer positions.

Latents: hard slice, scale S, horizon and service ratios, alpha, the space / width / phase
mixtures, Beta width parameters, cluster centres and phases, the corridor. Positions: a
cluster / uniform / corridor / outlier mixture on the unit square (scaled by S later).
Method and design choices: ``docs/envelope-generator.md``.
"""

from __future__ import annotations

import math

import numpy as np

from linc_core.problems.cvrptw.envelope_config import (
    CLUSTER,
    CORRIDOR,
    DEPOT_UNIT,
    LOOSE,
    MEDIUM,
    NARROW,
    OUTLIER,
    UNIFORM,
    EnvelopeConfig,
    Range,
)


def uniform(rng: np.random.Generator, size: int | tuple[int, ...], low, high) -> np.ndarray:
    """U(low, high) with array-valued bounds broadcast against ``size``."""
    return low + (np.asarray(high) - low) * rng.random(size)


def _easy_or_hard(
    rng: np.random.Generator, is_hard: np.ndarray, easy: Range, hard: Range
) -> np.ndarray:
    """One uniform draw per instance from the easy or the hard range."""
    low = np.where(is_hard, hard[0], easy[0])
    high = np.where(is_hard, hard[1], easy[1])
    return uniform(rng, is_hard.shape, low, high)


def sample_latents(
    rng: np.random.Generator, batch: int, cfg: EnvelopeConfig
) -> dict[str, np.ndarray]:
    """Per-instance latent variables (all arrays have leading dim B)."""
    is_hard = rng.random(batch) < cfg.hard_probability
    grid = _easy_or_hard(rng, is_hard, cfg.grid_size_range, cfg.hard_grid_size_range)
    horizon_ratio = _easy_or_hard(
        rng, is_hard, cfg.horizon_ratio_range, cfg.hard_horizon_ratio_range
    )
    service_ratio = _easy_or_hard(
        rng, is_hard, cfg.service_ratio_range, cfg.hard_service_ratio_range
    )
    alpha = _easy_or_hard(
        rng, is_hard, cfg.travel_time_scale_range, cfg.hard_travel_time_scale_range
    )
    k_low, k_high = cfg.cluster_count_range
    cluster_count = rng.integers(k_low, k_high + 1, size=batch)
    sigma_cluster = uniform(rng, batch, *cfg.sigma_cluster_range)
    sigma_phase = uniform(rng, batch, *cfg.sigma_phase_range)
    corridor_halfwidth = uniform(rng, batch, *cfg.corridor_halfwidth_range)
    outlier_ratio = _easy_or_hard(
        rng, is_hard, cfg.outlier_ratio_range, cfg.hard_outlier_ratio_range
    )
    constrained_ratio = _easy_or_hard(
        rng, is_hard, cfg.constrained_ratio_range, cfg.hard_constrained_ratio_range
    )
    route_density = uniform(rng, batch, *cfg.route_density_range)
    capacity_noise = uniform(rng, batch, *cfg.capacity_noise_range)
    w_min_ratio = _easy_or_hard(rng, is_hard, cfg.w_min_ratio_range, cfg.hard_w_min_ratio_range)
    cluster_bias = np.where(is_hard, uniform(rng, batch, *cfg.hard_cluster_bias_range), 0.0)
    corridor_bias = np.where(is_hard, uniform(rng, batch, *cfg.hard_corridor_bias_range), 0.0)

    # Space mixture (cluster, uniform, corridor, outlier).
    base = rng.dirichlet(cfg.space_dirichlet, size=batch)
    w_lo, w_hi = cfg.outlier_weight_bounds
    outlier_target = np.clip(outlier_ratio, w_lo, w_hi)
    outlier_w = np.clip(
        cfg.outlier_base_mix * base[:, 3] + (1.0 - cfg.outlier_base_mix) * outlier_target,
        w_lo,
        w_hi,
    )
    main = base[:, :3].copy()
    uniform_scale = uniform(rng, batch, *cfg.hard_uniform_scale_range)
    main[:, 0] *= 1.0 + cluster_bias
    main[:, 1] *= np.where(is_hard, uniform_scale, 1.0)
    main[:, 2] *= 1.0 + corridor_bias
    main *= ((1.0 - outlier_w) / main.sum(axis=1))[:, None]
    space_weights = np.concatenate([main, outlier_w[:, None]], axis=1)
    space_weights /= space_weights.sum(axis=1, keepdims=True)

    # Width mixture (narrow, medium, loose).
    easy_width = rng.dirichlet(cfg.width_dirichlet, size=batch)
    loose = uniform(rng, batch, *cfg.hard_loose_weight_range)
    extra = np.maximum(0.0, 1.0 - loose - cfg.hard_narrow_base - cfg.hard_medium_base)
    split = rng.random(batch)
    hard_width = np.stack(
        [cfg.hard_narrow_base + extra * split, cfg.hard_medium_base + extra * (1.0 - split), loose],
        axis=1,
    )
    width_weights = np.where(is_hard[:, None], hard_width, easy_width)
    width_weights /= width_weights.sum(axis=1, keepdims=True)

    # Phase mixture (cluster, radial, angular, random).
    phase_weights = rng.dirichlet(cfg.phase_dirichlet, size=batch)
    random_w = uniform(rng, batch, *cfg.hard_random_phase_weight_range)
    structured = phase_weights[:, :3] * np.asarray(cfg.hard_phase_structure_scale)
    structured *= ((1.0 - random_w) / structured.sum(axis=1))[:, None]
    hard_phase = np.concatenate([structured, random_w[:, None]], axis=1)
    phase_weights = np.where(is_hard[:, None], hard_phase, phase_weights)
    phase_weights /= phase_weights.sum(axis=1, keepdims=True)

    # Beta width parameters, one (a, b) per width component and instance.
    beta_a = np.empty((batch, 3))
    beta_b = np.empty((batch, 3))
    for r in (NARROW, MEDIUM, LOOSE):
        beta_a[:, r] = _easy_or_hard(rng, is_hard, cfg.beta_a_ranges[r], cfg.hard_beta_a_ranges[r])
        beta_b[:, r] = _easy_or_hard(rng, is_hard, cfg.beta_b_ranges[r], cfg.hard_beta_b_ranges[r])

    # Cluster centres and phases, padded to the largest K; inactive slots are never picked.
    k_max = k_high
    centres = uniform(rng, (batch, k_max, 2), *cfg.cluster_centre_range)
    active = np.arange(k_max)[None, :] < cluster_count[:, None]
    phases = np.where(active, uniform(rng, (batch, k_max), *cfg.cluster_phase_range), np.inf)
    phases.sort(axis=1)
    corridor_angle = uniform(rng, batch, 0.0, 2.0 * math.pi)
    corridor_centre = uniform(rng, (batch, 2), *cfg.corridor_centre_range)
    corridor_length = uniform(rng, batch, *cfg.corridor_length_range)

    return {
        "is_hard": is_hard,
        "grid_size": grid,
        "horizon_ratio": horizon_ratio,
        "horizon": horizon_ratio * grid,
        "service_ratio": service_ratio,
        "service_time": service_ratio * grid,
        "travel_time_scale": alpha,
        "cluster_count": cluster_count,
        "sigma_cluster": sigma_cluster,
        "sigma_phase": sigma_phase,
        "corridor_halfwidth": corridor_halfwidth,
        "outlier_ratio": outlier_ratio,
        "constrained_ratio": constrained_ratio,
        "route_density": route_density,
        "capacity_noise": capacity_noise,
        "w_min_ratio": w_min_ratio,
        "w_min": w_min_ratio * grid,
        "cluster_bias": cluster_bias,
        "corridor_bias": corridor_bias,
        "space_weights": space_weights,
        "width_weights": width_weights,
        "phase_weights": phase_weights,
        "beta_a": beta_a,
        "beta_b": beta_b,
        "cluster_centres": np.where(active[..., None], centres, np.nan),
        "cluster_centres_padded": centres,
        "cluster_phases_padded": phases,
        "corridor_angle": corridor_angle,
        "corridor_centre": corridor_centre,
        "corridor_length": corridor_length,
    }


def pick_component(rng: np.random.Generator, weights: np.ndarray, size: int) -> np.ndarray:
    """Categorical draw per node from per-instance weights.

    Args:
        weights: ``[B, C]`` rows summing to 1.
        size: nodes per instance n.

    Returns:
        ``[B, n]`` int8 component indices.
    """
    cumulative = np.cumsum(weights[:, :-1], axis=1)
    u = rng.random((weights.shape[0], size))
    picked = np.zeros(u.shape, dtype=np.int8)
    for c in range(cumulative.shape[1]):
        picked += u >= cumulative[:, c : c + 1]
    return picked


def sample_layout(
    rng: np.random.Generator, lat: dict[str, np.ndarray], n: int, cfg: EnvelopeConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Customer positions on the unit square.

    Returns:
        ``unit_xy`` ``[B, n, 2]`` in ``[0, 1]``, ``component`` ``[B, n]`` int8 and the
        cluster phase of each customer ``[B, n]`` (NaN for customers outside a cluster).
    """
    batch = lat["is_hard"].shape[0]
    component = pick_component(rng, lat["space_weights"], n)
    flat_component = component.reshape(-1)
    xy = np.empty((batch * n, 2))
    node_cluster_phase = np.full(batch * n, np.nan)

    # Cluster: truncated Gaussian around a uniformly chosen active centre.
    idx = np.flatnonzero(flat_component == CLUSTER)
    inst = idx // n
    k_max = lat["cluster_centres_padded"].shape[1]
    count = lat["cluster_count"][inst]
    # min() guards the (measure-zero) case where u * K rounds up to K.
    cluster_id = np.minimum((rng.random(idx.size) * count).astype(np.int64), count - 1)
    slot = inst * k_max + cluster_id
    centre = lat["cluster_centres_padded"].reshape(-1, 2)[slot]
    sigma = lat["sigma_cluster"][inst][:, None]
    node_cluster_phase[idx] = lat["cluster_phases_padded"].reshape(-1)[slot]
    points = centre + sigma * rng.standard_normal((idx.size, 2))
    todo = np.flatnonzero(_outside_unit_square(points))
    tries = 1
    while todo.size and tries < cfg.max_resample_tries:
        points[todo] = centre[todo] + sigma[todo] * rng.standard_normal((todo.size, 2))
        todo = todo[_outside_unit_square(points[todo])]
        tries += 1
    np.clip(points, 0.0, 1.0, out=points)
    xy[idx] = points

    # Uniform.
    idx = np.flatnonzero(flat_component == UNIFORM)
    xy[idx] = rng.random((idx.size, 2))

    # Corridor: a band along a random direction through the corridor centre.
    idx = np.flatnonzero(flat_component == CORRIDOR)
    inst = idx // n
    angle = lat["corridor_angle"][inst]
    along = (rng.random(idx.size) - 0.5) * lat["corridor_length"][inst]
    across = rng.standard_normal(idx.size) * lat["corridor_halfwidth"][inst]
    cos, sin = np.cos(angle), np.sin(angle)
    points = lat["corridor_centre"][inst].copy()
    points[:, 0] += along * cos - across * sin
    points[:, 1] += along * sin + across * cos
    np.clip(points, 0.0, 1.0, out=points)
    xy[idx] = points

    # Outlier: far from the depot and from every active cluster centre.
    idx = np.flatnonzero(flat_component == OUTLIER)
    xy[idx] = _sample_outliers(rng, lat, idx // n, cfg)

    return xy.reshape(batch, n, 2), component, node_cluster_phase.reshape(batch, n)


def _outside_unit_square(points: np.ndarray) -> np.ndarray:
    return ((points < 0.0) | (points > 1.0)).any(axis=1)


def _sample_outliers(
    rng: np.random.Generator, lat: dict[str, np.ndarray], inst: np.ndarray, cfg: EnvelopeConfig
) -> np.ndarray:
    """Uniform points kept at ``outlier_min_distance`` from the depot and the active centres.

    Each outlier takes the first accepted of at most ``max_resample_tries`` i.i.d. uniform
    tries, else its last try. Tries come in chunks that double each round, so a hopeless
    instance (centres covering the square) costs a few rounds, not hundreds.

    Args:
        inst: ``[m]`` instance index of each outlier.

    Returns:
        ``[m, 2]`` points in the unit square.
    """
    m = inst.size
    out = np.empty((m, 2))
    # Inactive centre slots (NaN) are moved far away so they never reject a point.
    centres = np.nan_to_num(lat["cluster_centres"], nan=1e6)
    anchors = np.concatenate([np.full((centres.shape[0], 1, 2), DEPOT_UNIT), centres], axis=1)
    min_sq = cfg.outlier_min_distance**2
    todo = np.arange(m)
    tried, chunk = 0, 1
    while todo.size:
        chunk = min(chunk, cfg.max_resample_tries - tried)
        tries = rng.random((todo.size, chunk, 2))
        near = anchors[inst[todo]]  # [t, 1 + K, 2]
        # One pass per anchor on [t, chunk] arrays: reductions over a tiny trailing axis
        # are several times slower in numpy.
        ok = np.ones((todo.size, chunk), dtype=bool)
        for k in range(near.shape[1]):
            dx = tries[:, :, 0] - near[:, k, 0:1]
            dy = tries[:, :, 1] - near[:, k, 1:2]
            ok &= dx * dx + dy * dy >= min_sq
        found = ok.any(axis=1)
        first = ok.argmax(axis=1)
        rows = np.flatnonzero(found)
        out[todo[rows]] = tries[rows, first[rows]]
        tried += chunk
        if tried >= cfg.max_resample_tries:
            rows = np.flatnonzero(~found)
            out[todo[rows]] = tries[rows, -1]
            break
        todo = todo[~found]
        chunk *= 2
    return out
