"""The CVRP training generator: uniform instances of Kool et al. (2019).

Depot and customers uniform in the unit square, demands integers 1..9 and the usual
capacity-by-size table, ``grid_size = 1``. The sampler takes an integer ``seed`` and draws from
its own ``np.random.default_rng(seed)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np
import torch

from linc_core.instances import Instance
from linc_core.problems.base import check_positive

# Kool et al. (2019) capacity per customer count, extended to the larger sizes in common use.
CVRP_CAPACITY_BY_SIZE: Mapping[int, float] = MappingProxyType(
    {
        10: 20.0,
        15: 25.0,
        20: 30.0,
        30: 33.0,
        40: 37.0,
        50: 40.0,
        60: 43.0,
        75: 45.0,
        100: 50.0,
        125: 55.0,
        150: 60.0,
        200: 70.0,
        500: 100.0,
        1000: 150.0,
    }
)


def generate_cvrp(
    batch: int, num_customers: int, seed: int, capacity: float | None = None
) -> Instance:
    """Uniform random CVRP instances (Kool et al. 2019).

    Args:
        batch: number of instances B.
        num_customers: customers per instance n (the depot is extra).
        seed: seed of the instance stream.
        capacity: vehicle capacity. Defaults to ``CVRP_CAPACITY_BY_SIZE[num_customers]``.

    Returns:
        ``Instance(problem="cvrp")``: ``locs`` ``[B, n+1, 2]`` uniform in the unit square with
        the depot at index 0, integer ``demand`` ``[B, n+1]`` in 1..9 (depot 0), ``capacity``
        ``[B]``, ``grid_size`` 1.

    Raises:
        ValueError: ``num_customers`` is not in the table and no ``capacity`` is given.
    """
    check_positive(batch=batch, num_customers=num_customers)
    if capacity is None:
        if num_customers not in CVRP_CAPACITY_BY_SIZE:
            raise ValueError(
                f"generate_cvrp: no standard capacity for num_customers={num_customers}; "
                f"known sizes are {sorted(CVRP_CAPACITY_BY_SIZE)}. Pass capacity= explicitly."
            )
        capacity = CVRP_CAPACITY_BY_SIZE[num_customers]
    if not capacity > 0:
        raise ValueError(f"generate_cvrp: capacity must be > 0, got {capacity}.")
    rng = np.random.default_rng(seed)
    locs = rng.random((batch, num_customers + 1, 2), dtype=np.float32)
    demand = np.zeros((batch, num_customers + 1), dtype=np.float32)
    demand[:, 1:] = rng.integers(1, 10, size=(batch, num_customers))
    return Instance.from_arrays(
        "cvrp",
        torch.from_numpy(locs),
        demand=torch.from_numpy(demand),
        capacity=float(capacity),
        grid_size=1.0,
    )
