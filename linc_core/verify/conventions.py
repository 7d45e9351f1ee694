"""Distance conventions of the verifier: how an edge is measured (``exact``, ``dimacs``,
``tsplib``, ``cvrplib``), which set uses which, and the tolerance of every comparison."""

from __future__ import annotations

import numpy as np

from linc_core.problems.spec import problem_names, problem_spec

CONVENTIONS: tuple[str, ...] = ("exact", "dimacs", "tsplib", "cvrplib")
RELATIVE_TOLERANCE = 1e-9

# Benchmark family -> distance convention. Keys are lower case; see `convention_for`.
_CONVENTION_BY_NAME: dict[str, str] = {
    "solomon": "dimacs",
    "solomon100": "dimacs",
    "homberger": "dimacs",
    "homberger200": "dimacs",
    "gehring_homberger": "dimacs",
    "dimacs": "dimacs",
    "tsplib": "tsplib",
    "cvrplib": "cvrplib",
    "cvrplib_x": "cvrplib",
    "x": "cvrplib",
    "setx": "cvrplib",
    "xml100": "cvrplib",
    "cvrpxml100": "cvrplib",
    "synthetic": "exact",
    "exact": "exact",
}


def exceeds(value: float, limit: float) -> bool:
    """``value > limit`` beyond the documented relative tolerance (``inf`` limits never bind)."""
    if not np.isfinite(limit):
        return False
    return value > limit + RELATIVE_TOLERANCE * max(1.0, abs(limit))


def edge_lengths(locs: np.ndarray, convention: str) -> np.ndarray:
    """Pairwise edge lengths under a distance convention.

    Args:
        locs: ``[N, 2]`` coordinates (any real dtype; computed in float64).
        convention: one of ``CONVENTIONS``.

    Returns:
        ``[N, N]`` float64 matrix of edge lengths (zero diagonal).
    """
    if convention not in CONVENTIONS:
        raise ValueError(
            f"Unknown distance convention {convention!r}; expected one of {CONVENTIONS}."
        )
    points = np.asarray(locs, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"locs must have shape [N, 2], got {points.shape}.")
    delta = points[:, None, :] - points[None, :, :]
    euclid = np.sqrt(np.einsum("ijk,ijk->ij", delta, delta))
    if convention == "exact":
        return euclid
    if convention == "dimacs":
        # Plain floor on 10 d, the way the DIMACS / CVRPLIB evaluators do it. With integer
        # coordinates d is either an integer (exact in IEEE sqrt) or irrational, so no distance
        # sits on a tenth boundary where binary rounding could matter.
        return np.floor(10.0 * euclid) / 10.0
    # tsplib / cvrplib: nint(d) = int(d + 0.5); d >= 0, so floor is the same as int().
    return np.floor(euclid + 0.5)


def convention_for(benchmark_or_problem: str) -> str:
    """The distance convention a benchmark's best-known values are stated in.

    ``solomon*`` / ``homberger*`` -> ``dimacs``; ``tsplib`` -> ``tsplib``; ``cvrplib``, ``x``,
    ``cvrplib_x``, ``xml100`` -> ``cvrplib``; ``synthetic`` -> ``exact``; a bare problem name
    (``tsp``, ``cvrp``, ``cvrptw``, any registered one) -> its spec's ``cost_convention``
    (``exact`` for the built-in ones). Case-insensitive; a convention name maps to itself.

    Raises:
        ValueError: for a name it does not know (a silent default would mis-score a benchmark).
    """
    key = benchmark_or_problem.strip().lower().replace("-", "_").replace(" ", "_")
    if key in _CONVENTION_BY_NAME:
        return _CONVENTION_BY_NAME[key]
    if key in problem_names():
        return problem_spec(key).cost_convention
    for prefix in ("solomon", "homberger"):
        if key.startswith(prefix):
            return "dimacs"
    if key.startswith("xml"):
        return "cvrplib"
    raise ValueError(
        f"No distance convention known for {benchmark_or_problem!r}; "
        f"known names: {sorted([*_CONVENTION_BY_NAME, *problem_names()])}."
    )


__all__ = ["CONVENTIONS", "RELATIVE_TOLERANCE", "convention_for", "edge_lengths", "exceeds"]
