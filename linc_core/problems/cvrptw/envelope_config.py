"""The CVRPTW envelope generator's constants: :class:`EnvelopeConfig`, validated on creation.

Defaults are the reference's (``linc-reference.md`` section 2). The method and the design
choices are in ``docs/envelope-generator.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

# Spatial components, in the order of the space-mixture weights.
CLUSTER, UNIFORM, CORRIDOR, OUTLIER = 0, 1, 2, 3
# Width components, in the order of the width-mixture weights.
NARROW, MEDIUM, LOOSE = 0, 1, 2
DEPOT_UNIT = 0.5  # depot at the centre of the unit square, i.e. (S/2, S/2)
_MAX_CLUSTERS_CAP = 64  # sanity bound on cluster_count_range (arrays are [B, max K])

Range = tuple[float, float]
BetaRanges = tuple[Range, Range, Range]


def _check_range(name: str, value: object) -> None:
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not all(isinstance(v, int | float) for v in value)
        or not all(math.isfinite(v) for v in value)
    ):
        raise ValueError(f"EnvelopeConfig.{name} = {value!r}: expected a finite (low, high) pair.")
    if value[0] > value[1]:
        raise ValueError(f"EnvelopeConfig.{name} = {value!r}: low > high.")


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"EnvelopeConfig.{name} = {value!r}: must lie in [0, 1].")


@dataclass(frozen=True)
class EnvelopeConfig:
    """Every constant of the CVRPTW envelope generator; defaults are the reference's.

    Ranges are ``(low, high)`` and draw uniformly unless noted. Fields named ``hard_*``
    replace the easy value on the hard slice. Distances are in units of S (the unit square),
    times in units of S unless stated.

    Attributes:
        hard_probability: share of instances on the hard slice.
        grid_size_range: spatial scale S.
        horizon_ratio_range: H / S (the depot window is ``[0, H]``).
        service_ratio_range: service time / S (same for every customer).
        travel_time_scale_range: alpha, travel time = distance x alpha.
        cluster_count_range: number of clusters K, integers, both ends inclusive.
        sigma_cluster_range: std of a cluster's Gaussian.
        sigma_phase_range: std of the phase noise.
        corridor_halfwidth_range: std of the offset across the corridor.
        outlier_ratio_range: target outlier share.
        constrained_ratio_range: probability that a customer has a constrained window.
        route_density_range: target customers per route (capacity = density x mean demand).
        capacity_noise_range: multiplicative capacity noise.
        w_min_ratio_range: minimum constrained window width / S.
        hard_cluster_bias_range, hard_corridor_bias_range: hard slice multiplies the cluster
            and corridor weights by ``1 + bias`` (easy: bias 0).
        hard_uniform_scale_range: hard slice multiplies the uniform weight by this.
        space_dirichlet: Dirichlet concentration of (cluster, uniform, corridor, outlier).
        outlier_base_mix: outlier weight = clip(mix x base + (1 - mix) x clip(ratio)).
        outlier_weight_bounds: both clips of the outlier weight.
        width_dirichlet: easy Dirichlet concentration of (narrow, medium, loose).
        hard_loose_weight_range: hard loose width weight.
        hard_narrow_base, hard_medium_base: hard narrow/medium base weights; the remainder
            ``max(0, 1 - loose - narrow_base - medium_base)`` is split between them by U(0,1).
        phase_dirichlet: Dirichlet concentration of (cluster, radial, angular, random) phases.
        hard_random_phase_weight_range: hard slice random-phase weight.
        hard_phase_structure_scale: hard multipliers of the (cluster, radial, angular) weights.
        beta_a_ranges, beta_b_ranges: easy Beta(a, b) ranges for (narrow, medium, loose).
        hard_beta_a_ranges, hard_beta_b_ranges: the same on the hard slice.
        cluster_centre_range: each coordinate of a cluster centre.
        cluster_phase_range: cluster phases (sorted over the active clusters).
        corridor_centre_range: each coordinate of the corridor centre.
        corridor_length_range: corridor length.
        outlier_min_distance: outliers keep at least this distance from the depot and every
            cluster centre.
        max_resample_tries: at most this many tries for a cluster point inside the square and
            for an outlier placement.
        demand_range: customer demand, integers, both ends inclusive.
        unconstrained_full_probability: an unconstrained customer gets ``[0, H - s]``.
        unconstrained_start_fraction_range, unconstrained_end_fraction_range: otherwise its
            window is ``[f_start, f_end] x (H - s)``.
        family_dominant_share: linc's family rule (``docs/envelope-generator.md``).
    """

    hard_probability: float = 0.25
    grid_size_range: Range = (80.0, 250.0)
    hard_grid_size_range: Range = (120.0, 250.0)
    horizon_ratio_range: Range = (10.0, 28.0)
    hard_horizon_ratio_range: Range = (10.0, 18.0)
    service_ratio_range: Range = (0.06, 0.14)
    hard_service_ratio_range: Range = (0.08, 0.14)
    travel_time_scale_range: Range = (0.9, 1.2)
    hard_travel_time_scale_range: Range = (1.0, 1.2)
    cluster_count_range: tuple[int, int] = (2, 8)
    sigma_cluster_range: Range = (0.03, 0.12)
    sigma_phase_range: Range = (0.02, 0.10)
    corridor_halfwidth_range: Range = (0.015, 0.06)
    outlier_ratio_range: Range = (0.02, 0.20)
    hard_outlier_ratio_range: Range = (0.10, 0.30)
    constrained_ratio_range: Range = (0.25, 0.90)
    hard_constrained_ratio_range: Range = (0.70, 0.95)
    route_density_range: Range = (8.0, 24.0)
    capacity_noise_range: Range = (0.85, 1.15)
    w_min_ratio_range: Range = (0.02, 0.08)
    hard_w_min_ratio_range: Range = (0.02, 0.06)
    hard_cluster_bias_range: Range = (0.20, 0.45)
    hard_corridor_bias_range: Range = (0.20, 0.45)
    hard_uniform_scale_range: Range = (0.60, 0.85)
    space_dirichlet: tuple[float, float, float, float] = (1.2, 1.2, 0.8, 0.5)
    outlier_base_mix: float = 0.45
    outlier_weight_bounds: Range = (0.02, 0.75)
    width_dirichlet: tuple[float, float, float] = (1.0, 1.0, 1.0)
    hard_loose_weight_range: Range = (0.0, 0.10)
    hard_narrow_base: float = 0.45
    hard_medium_base: float = 0.20
    phase_dirichlet: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
    hard_random_phase_weight_range: Range = (0.05, 0.18)
    hard_phase_structure_scale: tuple[float, float, float] = (1.15, 1.10, 1.10)
    beta_a_ranges: BetaRanges = ((1.5, 3.0), (2.5, 5.0), (4.0, 8.0))
    beta_b_ranges: BetaRanges = ((10.0, 18.0), (4.0, 8.0), (1.5, 4.0))
    hard_beta_a_ranges: BetaRanges = ((1.2, 2.5), (2.0, 4.0), (2.5, 4.5))
    hard_beta_b_ranges: BetaRanges = ((13.0, 22.0), (6.0, 10.0), (4.0, 8.0))
    cluster_centre_range: Range = (0.10, 0.90)
    cluster_phase_range: Range = (0.1, 0.9)
    corridor_centre_range: Range = (0.15, 0.85)
    corridor_length_range: Range = (0.55, 1.20)
    outlier_min_distance: float = 0.28
    max_resample_tries: int = 256
    demand_range: tuple[int, int] = (1, 10)
    unconstrained_full_probability: float = 0.5
    unconstrained_start_fraction_range: Range = (0.0, 0.08)
    unconstrained_end_fraction_range: Range = (0.90, 1.0)
    family_dominant_share: float = 0.5

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_range") or f.name.endswith("_bounds"):
                _check_range(f.name, value)
            elif f.name.endswith("_ranges"):
                if len(value) != 3:
                    raise ValueError(f"EnvelopeConfig.{f.name}: expected 3 ranges, got {value!r}.")
                for i, item in enumerate(value):
                    _check_range(f"{f.name}[{i}]", item)
                    if item[0] <= 0:
                        raise ValueError(
                            f"EnvelopeConfig.{f.name}[{i}] = {item!r}: Beta parameters must be > 0."
                        )
        for name in (
            "hard_probability",
            "outlier_base_mix",
            "unconstrained_full_probability",
            "family_dominant_share",
            "hard_narrow_base",
            "hard_medium_base",
        ):
            _check_probability(name, getattr(self, name))
        for name in (
            "constrained_ratio_range",
            "hard_constrained_ratio_range",
            "outlier_weight_bounds",
            "hard_loose_weight_range",
            "hard_random_phase_weight_range",
            "unconstrained_start_fraction_range",
            "unconstrained_end_fraction_range",
        ):
            for end in getattr(self, name):
                _check_probability(name, end)
        for name in ("space_dirichlet", "width_dirichlet", "phase_dirichlet"):
            if any(not a > 0 for a in getattr(self, name)):
                raise ValueError(
                    f"EnvelopeConfig.{name} = {getattr(self, name)!r}: concentrations must be > 0."
                )
        if any(not m > 0 for m in self.hard_phase_structure_scale):
            raise ValueError(
                f"EnvelopeConfig.hard_phase_structure_scale = {self.hard_phase_structure_scale!r}:"
                " multipliers must be > 0."
            )
        positive_low = (
            "grid_size_range",
            "hard_grid_size_range",
            "horizon_ratio_range",
            "hard_horizon_ratio_range",
            "travel_time_scale_range",
            "hard_travel_time_scale_range",
            "route_density_range",
            "capacity_noise_range",
            "w_min_ratio_range",
            "hard_w_min_ratio_range",
            "hard_uniform_scale_range",
        )
        for name in positive_low:
            if not getattr(self, name)[0] > 0:
                raise ValueError(f"EnvelopeConfig.{name} = {getattr(self, name)!r}: must be > 0.")
        nonnegative_low = (
            "service_ratio_range",
            "hard_service_ratio_range",
            "sigma_cluster_range",
            "sigma_phase_range",
            "corridor_halfwidth_range",
            "outlier_ratio_range",
            "hard_outlier_ratio_range",
            "hard_cluster_bias_range",
            "hard_corridor_bias_range",
            "corridor_length_range",
        )
        for name in nonnegative_low:
            if getattr(self, name)[0] < 0:
                raise ValueError(f"EnvelopeConfig.{name} = {getattr(self, name)!r}: must be >= 0.")
        k_low, k_high = self.cluster_count_range
        if not 1 <= k_low <= k_high <= _MAX_CLUSTERS_CAP:
            raise ValueError(
                f"EnvelopeConfig.cluster_count_range = {self.cluster_count_range!r}: need "
                f"1 <= low <= high <= {_MAX_CLUSTERS_CAP}."
            )
        d_low, _ = self.demand_range
        if d_low < 1:
            raise ValueError(f"EnvelopeConfig.demand_range = {self.demand_range!r}: need low >= 1.")
        if self.max_resample_tries < 1:
            raise ValueError(
                f"EnvelopeConfig.max_resample_tries = {self.max_resample_tries}: must be >= 1."
            )
        if self.outlier_min_distance < 0:
            raise ValueError(
                f"EnvelopeConfig.outlier_min_distance = {self.outlier_min_distance}: must be >= 0."
            )
        for name in ("cluster_centre_range", "cluster_phase_range", "corridor_centre_range"):
            low, high = getattr(self, name)
            if low < 0 or high > 1:
                raise ValueError(f"EnvelopeConfig.{name} = {(low, high)!r}: must lie in [0, 1].")
        self._check_feasible_envelope()

    def _check_feasible_envelope(self) -> None:
        """Reject constants under which some customer could not be served alone.

        The worst customer sits in a corner of the square, at sqrt(1/2) x S from the depot.
        Constrained windows need ``U - L = H - 2 alpha d - s > 0``. Near-full windows need
        their start to stay below ``U``, i.e. ``f_start (H - s) <= H - s - alpha d``.
        """
        far = math.sqrt(0.5)
        alpha = max(self.travel_time_scale_range[1], self.hard_travel_time_scale_range[1])
        service = max(self.service_ratio_range[1], self.hard_service_ratio_range[1])
        horizon = min(self.horizon_ratio_range[0], self.hard_horizon_ratio_range[0])
        full_due = horizon - service
        if not horizon - 2.0 * alpha * far - service > 0:
            raise ValueError(
                "EnvelopeConfig: the horizon is too short for the farthest customer "
                f"(H/S >= {horizon}, alpha <= {alpha}, service/S <= {service}): "
                "need H/S > 2 alpha sqrt(1/2) + service/S."
            )
        if not (1.0 - self.unconstrained_start_fraction_range[1]) * full_due > alpha * far:
            raise ValueError(
                "EnvelopeConfig.unconstrained_start_fraction_range: a near-full window could "
                "open too late to return to the depot in time."
            )


DEFAULT_ENVELOPE_CONFIG = EnvelopeConfig()
