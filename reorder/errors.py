"""Every exception the library raises on purpose, in one place.

Each message names the operation and the node or buffer at fault, so that a
user who feeds a bad graph file sees what to fix, never a bare ``KeyError``
from deep inside an algorithm.
"""

from __future__ import annotations

__all__ = ["ReorderError", "GraphError", "CycleError", "OrderError", "PlanError", "SlabCheckError"]


class ReorderError(Exception):
    """Base class of every error this library raises deliberately."""


class GraphError(ReorderError, ValueError):
    """A graph description is invalid: unknown names, duplicates, bad sizes, cycles."""


class CycleError(GraphError):
    """The dependencies form a cycle.

    ``cycle`` holds the node names along it, the first name repeated at the end:
    ``['op1', 'op2', 'op1']`` means op1 must run before op2 and op2 before op1.
    """

    def __init__(self, cycle: list[str]):
        self.cycle = cycle
        super().__init__("dependency cycle: " + " -> ".join(cycle))


class OrderError(ReorderError, ValueError):
    """An execution order is not a topological order of its graph."""


class PlanError(ReorderError):
    """A memory plan is invalid: overlapping live buffers, misaligned offsets."""


class SlabCheckError(PlanError):
    """Compiled code with ``poison=True`` found a pooled buffer claiming bytes another live buffer holds."""
