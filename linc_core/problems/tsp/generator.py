"""The TSP training generator: uniform cities in the unit square (Kool et al. 2019), ``grid_size``
1, drawn from ``np.random.default_rng(seed)``."""

from __future__ import annotations

import numpy as np
import torch

from linc_core.instances import Instance
from linc_core.problems.base import check_positive


def generate_tsp(batch: int, num_nodes: int, seed: int) -> Instance:
    """Uniform random TSP instances in the unit square (Kool et al. 2019).

    Args:
        batch: number of instances B.
        num_nodes: cities per instance N.
        seed: seed of the instance stream.

    Returns:
        ``Instance(problem="tsp")`` with ``locs`` ``[B, N, 2]`` in ``[0, 1)``, ``grid_size`` 1.
    """
    check_positive(batch=batch, num_nodes=num_nodes)
    rng = np.random.default_rng(seed)
    locs = rng.random((batch, num_nodes, 2), dtype=np.float32)
    return Instance.from_arrays("tsp", torch.from_numpy(locs), grid_size=1.0)
