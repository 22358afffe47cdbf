"""The exact method: the minimum peak over every topological order, or an honest "gave up".

:func:`~reorder.schedulers.peak_search.minimum_peak` from the best order found
so far: it asks for an order under that order's peak until the answer is a
proof that none exists, so a finished search is a proof of optimality (or
that the starting order was optimal, when nothing beat it). The number of
sets it sees is small for narrow graphs and for backward passes (their
recomputations and gradient reductions are cut by its dominance rules) and
exponential in the width for wide ones; ``max_states`` stops the search and
the method returns the best order it found, with a note.

States are bitmasks over all nodes, so each set the search remembers holds
about ``4 N / 8`` bytes (the set, and the ready, wanted and short nodes of its
entry on the stack) and its arrays about ``7 N`` such sets; ``max_bytes``
bounds the two together (counted, see
:class:`~reorder.schedulers.peak_search.PeakSearch`): the search gives up
when its sets would hold more, with a note, and a graph whose arrays alone
would is skipped before anything is built. Graphs above ``max_nodes`` nodes
are skipped too. Every limit is a count, so the answer never depends on the
machine's speed or load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from ..graph import Graph
from ..timeline import estimate_peak_memory, lower_bound
from .base import Method, MethodOutcome, option, register
from .node_sets import STATE_BYTES
from .peak_search import PeakSearch, minimum_peak

__all__ = ["Exact"]


@register
@dataclass(frozen=True)
class Exact(Method):
    """The minimum peak over every order (Serenity's set search, asked as "is there an order under
    T?" with dominance rules), with budgets of sets seen (``max_states``), graph size (``max_nodes``)
    and bytes of node sets held (``max_bytes``)."""

    name: ClassVar[str] = "exact"
    max_states: int = option(50_000, int, 1)
    max_nodes: int = option(5_000, int, 1)
    max_bytes: int = option(STATE_BYTES, int, 1)

    def run(self, graph: Graph, start: Sequence[int]) -> MethodOutcome:
        start = list(start)
        peak = estimate_peak_memory(graph, start).peak
        bound = lower_bound(graph)
        if peak <= bound:
            return MethodOutcome(start, optimal=True, note="starting order meets the lower bound")
        if graph.num_nodes > self.max_nodes:
            return MethodOutcome(start, note=f"skipped: {graph.num_nodes} nodes (max_nodes={self.max_nodes})")
        result = minimum_peak(graph, start, self.max_states, floor=bound, max_bytes=self.max_bytes)
        if result.stopped_by == "max_bytes" and not result.states:
            return MethodOutcome(start, note=f"skipped: its arrays would take {PeakSearch.array_bytes(graph)} bytes "
                                             f"(max_bytes={self.max_bytes})")
        if result.stopped_by == "max_bytes":
            return MethodOutcome(result.order, note=f"gave up after {result.states} states: their node sets reached "
                                                    f"max_bytes={self.max_bytes} ({PeakSearch.state_bytes(graph)} "
                                                    f"bytes a set)")
        if not result.proven:
            return MethodOutcome(result.order, note=f"gave up after {result.states} states (max_states={self.max_states})")
        if result.peak == peak:
            return MethodOutcome(start, optimal=True, note=f"starting order is optimal ({result.states} states)")
        return MethodOutcome(result.order, optimal=True, note=f"optimal ({result.states} states)")
