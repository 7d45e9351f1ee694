"""Seeded instance samplers: uniform TSP/CVRP and the CVRPTW envelope generator.

Every sampler takes an integer ``seed``, draws from its own ``np.random.default_rng(seed)``
and returns an :class:`~linc_core.instances.Instance` of float32 CPU tensors. The same
``(batch, size, seed, config)`` always gives the same tensors; derive distinct seeds for
shards and splits with :func:`linc_core.utils.seeding.derive_seed`.

Modules, one job each:

- :mod:`~linc_core.problems.generators.uniform`: ``generate_tsp``, ``generate_cvrp``
  (Kool et al. 2019);
- :mod:`~linc_core.problems.generators.envelope`: ``generate_cvrptw_envelope``, built from
  :mod:`~.envelope_config` (``EnvelopeConfig``), :mod:`~.envelope_layout` (latents, positions)
  and :mod:`~.envelope_windows` (time windows, assembly). Design log:
  ``docs/envelope-generator.md``.
"""

from linc_core.problems.generators.envelope import ENVELOPE_FAMILIES, generate_cvrptw_envelope
from linc_core.problems.generators.envelope_config import DEFAULT_ENVELOPE_CONFIG, EnvelopeConfig
from linc_core.problems.generators.uniform import (
    CVRP_CAPACITY_BY_SIZE,
    generate_cvrp,
    generate_tsp,
)

__all__ = [
    "CVRP_CAPACITY_BY_SIZE",
    "DEFAULT_ENVELOPE_CONFIG",
    "ENVELOPE_FAMILIES",
    "EnvelopeConfig",
    "generate_cvrp",
    "generate_cvrptw_envelope",
    "generate_tsp",
]
