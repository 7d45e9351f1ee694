"""What the verifier returns: violations by kind, and a solution's verdict and cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

VIOLATION_KINDS: tuple[str, ...] = (
    "missing",
    "duplicate",
    "unknown_node",
    "capacity",
    "time_window",
    "depot_due",
    "empty_route",
)


@dataclass(frozen=True)
class Violation:
    """One broken constraint.

    Attributes:
        kind: one of ``VIOLATION_KINDS``.
        route: index of the offending route in the given list (``None`` for ``missing``).
        node: the node concerned (the customer; ``0`` for ``depot_due``; ``None`` for
            ``capacity`` and ``empty_route``).
        detail: a human-readable sentence with the numbers involved.
    """

    kind: str
    route: int | None
    node: int | None
    detail: str


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of a check.

    Attributes:
        cost: total length under the convention (unknown node ids are left out of it).
        violations: every broken constraint found, in route order then ``missing`` last.
        num_routes: routes that visit at least one known node (1 for a TSP tour).
    """

    cost: float
    violations: tuple[Violation, ...]
    num_routes: int

    @property
    def feasible(self) -> bool:
        """True when no constraint is broken."""
        return not self.violations

    def kinds(self) -> tuple[str, ...]:
        """The violation kinds, in order (handy in tests and reports)."""
        return tuple(v.kind for v in self.violations)


__all__ = ["VIOLATION_KINDS", "VerifyResult", "Violation"]
