"""The exact method: the minimum peak over every topological order, or an honest "gave up".

:func:`~reorder.schedulers.peak_search.minimum_peak` from the best order found
so far: it asks for an order under that order's peak until the answer is a
proof that none exists, so a finished search is a proof of optimality (or
that the starting order was optimal, when nothing beat it). The number of
sets it sees is small for narrow graphs and for backward passes (their
recomputations and gradient reductions are cut by its dominance rules) and
exponential in the width for wide ones; ``max_states`` stops the search and
the method returns the best order it found, with a note.

States are bitmasks over all nodes, so the memory is about ``max_states``
times ``N / 8`` bytes plus ``N**2 / 16`` for the predecessor masks; graphs
above ``max_nodes`` nodes are skipped (with a note) before anything is
allocated. Both limits are counts, so the answer never depends on the
machine's speed or load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from ..graph import Graph
from ..timeline import estimate_peak_memory, lower_bound
from .base import MethodOutcome, register
from .peak_search import minimum_peak

__all__ = ["Exact"]


@register
@dataclass(frozen=True)
class Exact:
    """The minimum peak over every order (Serenity's set search, asked as "is there an order under
    T?" with dominance rules), with a budget of sets seen."""

    name: ClassVar[str] = "exact"
    max_states: int = 50_000
    max_nodes: int = 5_000

    def run(self, graph: Graph, start: Sequence[int]) -> MethodOutcome:
        start = list(start)
        peak = estimate_peak_memory(graph, start).peak
        if peak <= lower_bound(graph):
            return MethodOutcome(start, optimal=True, note="starting order meets the lower bound")
        if graph.num_nodes > self.max_nodes:
            return MethodOutcome(start, note=f"skipped: {graph.num_nodes} nodes (max_nodes={self.max_nodes})")
        result = minimum_peak(graph, start, self.max_states)
        if not result.proven:
            return MethodOutcome(result.order, note=f"gave up after {result.states} states (max_states={self.max_states})")
        if result.peak == peak:
            return MethodOutcome(start, optimal=True, note=f"starting order is optimal ({result.states} states)")
        return MethodOutcome(result.order, optimal=True, note=f"optimal ({result.states} states)")
