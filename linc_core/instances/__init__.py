"""Routing instances: the `Instance` batch type, its data checks and the benchmark file readers.

Modules, one job each:

- :mod:`~linc_core.instances.batch`: ``Instance`` (+ ``InstanceError``) and operations on
  whole instances (``truncate_customers``); which fields a problem uses, and its own
  ``extras``, its spec says (:mod:`linc_core.problems.spec`);
- :mod:`~linc_core.instances.validation`: ``validate_instance``, run by every reader;
- :mod:`~linc_core.instances.reading`: what the readers share (default dtype, grid sizes);
- :mod:`~linc_core.instances.solomon`: ``read_solomon``, ``read_solomon_folder``;
- :mod:`~linc_core.instances.vrplib_files`: ``read_tsplib``, ``read_cvrplib``,
  ``read_solution``, ``read_tsp_tour``.
"""

from linc_core.instances.batch import (
    TENSOR_FIELDS,
    Instance,
    InstanceError,
    truncate_customers,
)
from linc_core.instances.reading import DEFAULT_READER_DTYPE
from linc_core.instances.solomon import SOLOMON_GRID_SIZES, read_solomon, read_solomon_folder
from linc_core.instances.validation import validate_instance
from linc_core.instances.vrplib_files import (
    CVRPLIB_GRID_SIZES,
    read_cvrplib,
    read_solution,
    read_tsp_tour,
    read_tsplib,
)

__all__ = [
    "CVRPLIB_GRID_SIZES",
    "DEFAULT_READER_DTYPE",
    "SOLOMON_GRID_SIZES",
    "TENSOR_FIELDS",
    "Instance",
    "InstanceError",
    "read_cvrplib",
    "read_solomon",
    "read_solomon_folder",
    "read_solution",
    "read_tsp_tour",
    "read_tsplib",
    "truncate_customers",
    "validate_instance",
]
