"""The graph's own order: what Inductor runs when it does not reorder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from ..graph import Graph
from .base import Method, MethodOutcome, register

__all__ = ["Baseline"]


@register
@dataclass(frozen=True)
class Baseline(Method):
    """Keep nodes in the order the graph lists them."""

    name: ClassVar[str] = "baseline"

    def run(self, graph: Graph, start: Sequence[int]) -> MethodOutcome:
        return MethodOutcome(list(range(graph.num_nodes)))
