"""Does fusing two nodes raise the peak? The decision behind the fusion guard.

The model of a fusion follows what Inductor 2.13 does with two scheduler
nodes it fuses:

* the fused node writes the union of their outputs and reads the union of
  their reads, less what it writes itself;
* it runs where the later of the two runs (the current list is re-sorted and
  topologically fixed after each round): the nodes between the two that the
  later one depends on run before it, the other nodes between them after it,
  each group in its current relative order;
* a buffer that one of them writes and only the fused node reads is never
  materialised, as Inductor's codegen removes it
  (``Scheduler.can_buffer_be_removed_through_fusion``): not a graph output,
  not a mutation rename or renamed, not part of a multi-output buffer.

:func:`fused_graph` applies that model to whole groups of nodes and returns
the fused :class:`~reorder.graph.Graph`: the full re-estimate, used as the
reference. :func:`fusion_peak` answers the same question for one candidate
without rebuilding anything: before the window between the two nodes and
after it the live-bytes curve does not change (every buffer whose lifetime
changes starts and ends inside the window), so it recomputes only the
window's steps from the current curve. Its cost is linear in the window: the
nodes between the two, their reads and outputs and those buffers' readers;
the peak outside the window comes from prefix and suffix maxima that
:class:`PeakProfile` computes once per node list (linear in the graph).
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass
from typing import Sequence

from .errors import GraphError
from .graph import Graph, plain_graph
from .sweep import live_bytes
from .timeline import Timeline, estimate_peak_memory

__all__ = [
    "CONFIRM_METHODS", "FusionCheck", "PeakProfile", "fused_graph", "fusion_groups", "fusion_peak", "ranked_order",
    "removable_buffers", "reordered_fusion_peak", "should_block", "window_order",
]


def removable_buffers(graph: Graph) -> tuple[bool, ...]:
    """Buffers Inductor drops when every reader is fused with the producer (see the module docstring)."""
    if all(a is None for a in graph.alias_of) and all(p is None for p in graph.parent):
        # no alias and no multi-output buffer (every fused list the guard builds): each buffer is its own storage
        return tuple(p is not None and not out and bool(readers) and alloc == free for p, out, readers, alloc, free
                     in zip(graph.producer, graph.is_output, graph.readers, graph.size_alloc, graph.size_free))
    return tuple(
        graph.producer[b] is not None
        and not graph.is_output[b]
        and bool(graph.readers[b])
        and graph.alias_of[b] is None
        and graph.members[b] == (b,)
        and graph.parent[b] is None
        and not graph.children[b]
        and graph.size_alloc[b] == graph.size_free[b]
        for b in range(graph.num_buffers)
    )


def fused_graph(graph: Graph, groups: Sequence[Sequence[int]], name: str | None = None,
                removable: Sequence[bool] | None = None) -> Graph:
    """The graph with each group of ``graph``'s nodes fused into one node, the groups run in the order given.

    The groups split the nodes: each node in exactly one, none empty (else :class:`~reorder.errors.GraphError`).

    Each buffer keeps its ``size_alloc``/``size_free``; reads stay forwarded
    to alias roots as in ``graph`` (so aliases need no links here); a buffer
    produced and read only inside one group is dropped when
    :func:`removable_buffers` allows. Node ``i`` of the result is group ``i``,
    named after its members joined by ``+``. The same graph :func:`~reorder.graph.build_graph`
    makes of those specs, assembled from ``graph``'s checked arrays
    (:func:`~reorder.graph.plain_graph`): the fusion guard makes one per fusion
    it allows; ``removable``: :func:`removable_buffers` of ``graph``, where the caller keeps it. Linear in nodes +
    edges.
    """
    if removable is None:
        removable = removable_buffers(graph)
    group_of = [-1] * graph.num_nodes
    for g, members in enumerate(groups):
        for v in members:
            if group_of[v] != -1:
                raise GraphError(f"fused_graph: node {graph.node_names[v]!r} is in two groups")
            group_of[v] = g
    if -1 in group_of or not all(groups):
        raise GraphError("fused_graph: the groups must cover every node once, none of them empty")
    node_names = ["+".join(graph.node_names[v] for v in members) for members in groups]
    # the fused graph's buffers, as ids of ``graph``'s: inputs, then each group's outputs
    kept = [b for b in range(graph.num_buffers) if graph.is_input[b]]
    for g, members in enumerate(groups):
        for v in members:
            kept.extend(b for b in graph.outputs[v]
                        if not (removable[b] and all(group_of[r] == g for r in graph.readers[b])))
    new_id = {b: i for i, b in enumerate(kept)}
    producer_group = [-1 if p is None else group_of[p] for p in graph.producer]
    reads, after_of = graph.reads, graph.after
    declared_reads, after = [], []
    for g, members in enumerate(groups):
        declared_reads.append(tuple(dict.fromkeys(
            new_id[b] for v in members for b in reads[v] if producer_group[b] != g)))
        after.append(tuple(dict.fromkeys(
            group_of[p] for v in members for p in after_of[v] if group_of[p] != g)))
    producer = [None if graph.is_input[b] else producer_group[b] for b in kept]
    return plain_graph(name or graph.name, node_names, [graph.buffer_names[b] for b in kept],
                       [graph.size[b] for b in kept], [graph.size_alloc[b] for b in kept],
                       [graph.size_free[b] for b in kept], producer, [graph.freeable[b] for b in kept],
                       [graph.is_output[b] for b in kept], declared_reads, after)


def window_order(graph: Graph, lo: int, hi: int) -> list[int] | None:
    """Where the nodes from ``lo`` to ``hi`` run once ``lo`` and ``hi`` are fused (``lo`` stands for the fused node).

    The nodes between them that the later one depends on come first, then
    the fused node, then the rest, each in its current order. None when a
    node between them both descends from ``lo`` and feeds ``hi`` (the fusion
    would make a cycle). Linear in the window's nodes and edges.
    """
    width = hi - lo + 1
    feeds = [False] * width
    feeds[-1] = True
    for v in range(hi - 1, lo, -1):
        feeds[v - lo] = any(lo < s <= hi and feeds[s - lo] for s in graph.succs[v])
    descends = [False] * width
    descends[0] = True
    for v in range(lo + 1, hi):
        descends[v - lo] = any(lo <= p < v and descends[p - lo] for p in graph.preds[v])
        if descends[v - lo] and feeds[v - lo]:
            return None
    between = range(lo + 1, hi)
    return [v for v in between if feeds[v - lo]] + [lo] + [v for v in between if not feeds[v - lo]]


def fusion_groups(graph: Graph, first: int, second: int) -> list[list[int]] | None:
    """The node groups, in running order, of ``graph`` (in its own order) with ``first`` and ``second`` fused."""
    lo, hi = min(first, second), max(first, second)
    window = window_order(graph, lo, hi)
    if window is None:
        return None
    groups = [[v] for v in range(lo)]
    groups += [[lo, hi] if v == lo else [v] for v in window]
    groups += [[v] for v in range(hi + 1, graph.num_nodes)]
    return groups


def ranked_order(graph: Graph, groups: Sequence[Sequence[int]], rank: Sequence[int]) -> list[int]:
    """An order to run ``groups`` of ``graph``'s nodes in, each group fused into one node: group indexes.

    Of the groups whose predecessors have run, the one whose latest member
    has the lowest ``rank`` runs first (ties: lower index). With ``rank`` a
    good order of the unfused graph, this keeps that order and runs each
    fused node where its last member ran. Kahn's algorithm over the groups
    with a heap, O((n + e) log n), without building the fused graph.
    """
    group_of = [0] * graph.num_nodes
    for g, members in enumerate(groups):
        for v in members:
            group_of[v] = g
    waiting = [0] * len(groups)
    succs: list[list[int]] = [[] for _ in groups]
    for g, members in enumerate(groups):
        preds = {group_of[p] for v in members for p in graph.preds[v]} - {g}
        waiting[g] = len(preds)
        for p in preds:
            succs[p].append(g)
    key = [max(rank[v] for v in members) for members in groups]
    ready = [(key[g], g) for g in range(len(groups)) if waiting[g] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, g = heapq.heappop(ready)
        order.append(g)
        for s in succs[g]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, (key[s], s))
    return order


@dataclass(frozen=True)
class PeakProfile:
    """A node list's live-bytes curve with the maxima a candidate needs outside its window.

    ``timeline`` is :func:`~reorder.timeline.estimate_peak_memory` of the
    graph in its own order; ``before[t]`` is the highest live value at steps
    ``< t`` and ``after[t]`` the highest at steps ``> t`` (0 where none);
    ``ending[t]`` the buffers freed after step ``t`` (a window must see those
    with no reader in it too, such as an input nobody reads).
    """

    graph: Graph
    timeline: Timeline
    before: tuple[int, ...]
    after: tuple[int, ...]
    removable: tuple[bool, ...]
    ending: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, graph: Graph) -> "PeakProfile":
        timeline = estimate_peak_memory(graph)
        live = timeline.live
        before = [0] * len(live)
        for t in range(1, len(live)):
            before[t] = max(before[t - 1], live[t - 1])
        after = [0] * len(live)
        for t in range(len(live) - 2, -1, -1):
            after[t] = max(after[t + 1], live[t + 1])
        ending = [[] for _ in live]
        for b, end in enumerate(timeline.lifetimes.end):
            if end is not None and 0 <= end < len(live):
                ending[end].append(b)
        return cls(graph, timeline, tuple(before), tuple(after), removable_buffers(graph),
                   tuple(map(tuple, ending)))


@dataclass(frozen=True)
class FusionCheck:
    """One candidate: the peak now, the peak with the two nodes fused, and the work it took (window steps)."""

    peak: int
    fused_peak: int
    work: int

    @property
    def rise(self) -> int:
        return self.fused_peak - self.peak


def fusion_peak(profile: PeakProfile, first: int, second: int) -> FusionCheck | None:
    """The peak of ``profile.graph`` (in its own order) with nodes ``first`` and ``second`` fused.

    Returns None when the fusion would create a cycle (a node between them
    depends on the earlier one and feeds the later one): Inductor never
    makes such a fusion. Exactly :func:`fused_graph` followed by
    :func:`~reorder.timeline.estimate_peak_memory`, computed over the
    window between the two nodes only.
    """
    graph, live = profile.graph, profile.timeline.live
    lo, hi = min(first, second), max(first, second)
    if lo == hi:
        raise ValueError(f"cannot fuse node {graph.node_names[lo]!r} with itself")
    window = window_order(graph, lo, hi)
    if window is None:
        return None
    width = hi - lo + 1
    new_step = {v: lo + i for i, v in enumerate(window)}
    new_step[hi] = new_step[lo]
    # Buffers whose lifetime may change: the window's outputs and reads.
    touched = dict.fromkeys(b for v in range(lo, hi + 1)
                            for b in (*graph.outputs[v], *graph.reads[v], *profile.ending[v]))
    work = width + len(touched)
    steps = hi - lo  # the window has one step fewer after the fusion
    changes: list[tuple[int, int]] = []
    old = profile.timeline.lifetimes
    carried = live[lo] - graph.alloc_size[lo]  # live entering step lo, before its allocations
    for b in touched:
        start, end = old.start[b], old.end[b]
        if start < lo or graph.producer[b] is None:
            if end is None or end >= lo:
                carried -= graph.size_alloc[b]  # re-added below with its new lifetime
            else:
                continue
        readers = graph.readers[b]
        work += len(readers)
        p = graph.producer[b]
        if (p == lo or p == hi) and profile.removable[b] and all(r in (lo, hi) for r in readers):
            continue  # consumed only inside the fused node: never materialised
        new_start = new_step[p] - lo if p is not None and lo <= p <= hi else -1
        if end is None or end > hi:
            new_end = None  # alive past the window
        else:
            # A buffer with no reader at all dies at its own step: its producer's, or step 0 for an input
            # (whichever node runs there); with a reader, at its last reader's.
            unread = max(new_start, 0)
            new_end = max((new_step[r] - lo for r in readers if lo <= r <= hi), default=unread)
            new_end = max(new_end, new_start)
        changes.append((max(new_start, 0), graph.size_alloc[b]))
        if new_end is not None:
            changes.append((new_end + 1, -graph.size_free[b]))
    window_peak = max(live_bytes(steps, changes, carried))
    fused = max(profile.before[lo], window_peak, profile.after[hi])
    return FusionCheck(profile.timeline.peak, fused, work)


#: The methods that confirm a rise before a fusion is blocked: the reorder pass's own, less ``exact``
#: (its state budget is the expensive part, and ``refine`` already recovers what reordering can).
CONFIRM_METHODS: tuple[str, ...] = ("lpmf", "bfs", "dfs", "refine")


def reordered_fusion_peak(graph: Graph, first: int, second: int, best_peak: int,
                          methods: Sequence[str] = CONFIRM_METHODS) -> FusionCheck | None:
    """The rise a fusion causes once both graphs are reordered: the check that confirms a block.

    :func:`fusion_peak` judges the current order, but the reorder pass runs
    after fusion and may find an order of the fused graph that avoids the
    rise; blocking then costs a kernel for nothing. This is the lowest peak
    our ``methods`` find for ``graph`` with ``first`` and ``second`` fused,
    against ``best_peak`` (theirs for ``graph`` itself, computed once per node
    list by the caller). None when the fusion would make a cycle.
    """
    from .schedulers import reorder_for_peak_memory

    groups = fusion_groups(graph, first, second)
    if groups is None:
        return None
    fused = fused_graph(graph, groups)
    peak = reorder_for_peak_memory(fused, methods, log_level=logging.DEBUG, bound_work=0).peak
    return FusionCheck(best_peak, peak, len(methods) * (fused.num_nodes + fused.num_edges))


def should_block(check: FusionCheck, slack_bytes: int = 0, slack_fraction: float = 0.0,
                 ceiling: int | None = None) -> bool:
    """Block a fusion when it raises the peak by more than both slacks (bytes, and fraction of the peak), or,
    given a ``ceiling``, when it raises the peak at all above the ceiling: fusions that are each within the
    slack can otherwise add up, each judged against the peak the ones before it raised."""
    if check.rise > max(slack_bytes, slack_fraction * check.peak):
        return True
    return ceiling is not None and check.rise > 0 and check.fused_peak > ceiling
