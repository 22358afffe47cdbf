"""The exact method: the minimum peak over every topological order, or an honest "gave up".

One :func:`~reorder.schedulers.subsets.solve_window` over the whole graph,
bounded by the peak of the best order found so far: if the search finishes,
its order is optimal (or the starting order was, when nothing beat it). The
number of states is the number of downward-closed node sets whose peak stays
under the bound: small for narrow graphs (chains, backward passes of a few
branches), exponential in the width for wide ones; ``max_states`` stops the
search and the method returns its starting order with a note.

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
from .subsets import solve_window

__all__ = ["Exact"]


@register
@dataclass(frozen=True)
class Exact:
    """Dynamic programming over sets of scheduled nodes (Serenity, MLSys 2020), with a state budget."""

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
        live_before = sum(graph.size_alloc[b] for b in range(graph.num_buffers) if graph.is_input[b])
        result = solve_window(
            graph, [0] * graph.num_nodes, 0, list(range(graph.num_nodes)), live_before, peak, self.max_states
        )
        if not result.complete:
            return MethodOutcome(start, note=f"gave up after {result.states} states (max_states={self.max_states})")
        if result.order is None:
            return MethodOutcome(start, optimal=True, note=f"starting order is optimal ({result.states} states)")
        return MethodOutcome(result.order, optimal=True, note=f"optimal ({result.states} states)")
