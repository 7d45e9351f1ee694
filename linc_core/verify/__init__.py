"""An independent numpy checker for routing solutions (CVRPTW, CVRP, TSP).

This module deliberately shares no code with the torch environments: it recomputes costs,
loads and schedules from scratch in numpy float64, so that a bug in an environment cannot
hide itself by being repeated here. It may read fields off an :class:`~linc_core.instances.
Instance`, nothing more.

Route format:

- CVRP / CVRPTW: ``routes`` is a list of routes; each route is a list of customer ids
  ``1..N-1``. The depot (node 0) is implicit at both ends and must not appear inside a route.
- TSP: ``routes`` is a single tour, ``[[c0, c1, ..., c_{N-1}]]`` over city ids ``0..N-1``,
  closed back to its first city. A flat list of ints is accepted as the tour too.

Distance conventions (``CONVENTIONS``):

- ``exact``: float Euclidean distance (synthetic instances, neural-model evaluation).
- ``dimacs``: each edge truncated down to one decimal, ``floor(10 d) / 10``; the same value is
  the travel time (Solomon / Homberger distance-only best-known solutions).
- ``tsplib`` / ``cvrplib``: nearest integer per edge, ``int(d + 0.5)`` (TSPLIB ``nint``;
  CVRPLIB Set X and XML100 use the same rule).

Schedule (CVRPTW): every route leaves the depot at time 0. At customer ``k``,
``arrival = departure_prev + length x travel_time_scale``; arriving after the due time is a
``time_window`` violation (arriving early means waiting: ``start = max(arrival, ready)``);
``departure = start + service``. Arriving back at the depot after the depot's due time is a
``depot_due`` violation.

Tolerance: a quantity ``x`` exceeds a limit ``L`` only when ``x > L + 1e-9 * max(1, |L|)``
(``RELATIVE_TOLERANCE``). This absorbs float summation noise (e.g. ten edges truncated to one
decimal rarely sum to an exact decimal in binary) without hiding any real violation, which on
the benchmark data is always at least 1e-4 of a time unit.

The checker never raises on an infeasible solution: it collects :class:`Violation` records.
It raises ``ValueError`` only when the call itself is malformed (unknown convention, missing
capacity for a CVRP check, several tours for a TSP, ...).

Modules: ``conventions`` (distances and tolerance), ``results`` (violations, verdicts),
``checks`` (the checks themselves); the names below are the verifier's API.
"""

from linc_core.verify.checks import verify_instance, verify_routes
from linc_core.verify.conventions import (
    CONVENTIONS,
    RELATIVE_TOLERANCE,
    convention_for,
    edge_lengths,
)
from linc_core.verify.results import VIOLATION_KINDS, VerifyResult, Violation

__all__ = [
    "CONVENTIONS",
    "RELATIVE_TOLERANCE",
    "VIOLATION_KINDS",
    "VerifyResult",
    "Violation",
    "convention_for",
    "edge_lengths",
    "verify_instance",
    "verify_routes",
]
