"""Live bytes of an execution order, exactly as Inductor 2.13 counts them.

Two models, both from ``torch/_inductor/memory.py`` in torch 2.13:

* :func:`estimate_peak_memory` (Inductor's ``estimate_peak_memory``): one value
  per step, ``live[t] = allocated up to step t - freed after steps before t``,
  with ``num_nodes + 1`` entries (the last one is what stays live after the
  program: graph outputs). Graph outputs are never freed (torch 2.13 skips
  their free; older releases subtracted it at step 0, which we do not copy).
* :func:`estimate_peak_memory_allocfree` (``estimate_peak_memory_allocfree``):
  two values per step, after the node's allocations and after its frees.

A buffer's lifetime is ``[start, end]`` in steps, both inclusive: allocated at
``start`` (its producer's step; 0 for graph inputs) and freed after ``end``
(its last reader's step; its own step if nobody reads it). ``end`` is ``None``
for graph outputs. Both estimators are linear in nodes + edges.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from itertools import chain
from typing import Iterable, Iterator, Sequence

from .graph import Graph
from .sweep import live_bytes, peak_of

__all__ = [
    "Lifetimes",
    "Timeline",
    "AllocFreeTimeline",
    "lifetimes",
    "lifetimes_rebuilt",
    "estimate_peak_memory",
    "timeline_of",
    "estimate_peak_memory_allocfree",
    "lower_bound",
    "resident_bytes",
]


@dataclass(frozen=True)
class Lifetimes:
    """Per-buffer ``start`` and ``end`` steps (inclusive; ``end`` None = never freed)."""

    order: tuple[int, ...]
    step: tuple[int, ...]
    start: tuple[int, ...]
    end: tuple[int | None, ...]


@dataclass(frozen=True)
class Timeline:
    """Result of :func:`estimate_peak_memory`: ``live`` has ``num_nodes + 1`` entries."""

    order: tuple[int, ...]
    peak: int
    peak_step: int
    live: tuple[int, ...]
    lifetimes: Lifetimes


@dataclass(frozen=True)
class AllocFreeTimeline:
    """Result of :func:`estimate_peak_memory_allocfree`: ``(post_alloc, post_free)`` per step."""

    order: tuple[int, ...]
    peak: int
    peak_step: int
    phases: tuple[tuple[int, int], ...]
    lifetimes: Lifetimes


def _default_order(graph: Graph, order: Sequence[int] | None, check: bool = True) -> tuple[int, ...]:
    if order is None:
        return tuple(range(graph.num_nodes))
    order = tuple(order)
    if check:
        graph.check_order(order)
    return order


def lifetimes(graph: Graph, order: Sequence[int] | None = None, check: bool = True) -> Lifetimes:
    """Start and end step of every buffer under ``order`` (default: the graph's own order); ``check=False``
    trusts the caller that ``order`` is valid (a search's move it made valid), which a tenth of its time
    would otherwise check again."""
    order = _default_order(graph, order, check)
    step = [0] * graph.num_nodes
    for s, v in enumerate(order):
        step[v] = s
    start = [0 if p is None else step[p] for p in graph.producer]
    last_read = list(start)  # a buffer nobody reads dies where it is made
    reads = graph.reads
    for s, v in enumerate(order):  # steps rise: each buffer keeps its last reader's
        for b in reads[v]:
            last_read[b] = s
    end = tuple(None if output else last for output, last in zip(graph.is_output, last_read))
    return Lifetimes(order, tuple(step), tuple(start), end)


def lifetimes_rebuilt(graph: Graph, life: Lifetimes, shared: Sequence[int | None]) -> Lifetimes:
    """``graph``'s lifetimes under ``life``'s order, where ``life`` is of another graph with ``graph``'s nodes:
    ``shared[b]`` is the buffer of that graph whose lifetime buffer ``b`` has (the same producer, readers and
    output flag), None where ``b``'s is worked out again (as :func:`lifetimes` does, from its readers). One order
    judged on two such graphs (the allocation model's, and Inductor's estimate it decides its reuses by) places
    its steps once; the order is not checked again against ``graph``."""
    if len(shared) != graph.num_buffers:
        raise ValueError(f"{len(shared)} shared lifetimes for graph {graph.name!r} of {graph.num_buffers} buffers")
    step, start, end = life.step, [0] * graph.num_buffers, [None] * graph.num_buffers
    for b, other in enumerate(shared):
        if other is not None:
            start[b], end[b] = life.start[other], life.end[other]
            continue
        producer = graph.producer[b]
        start[b] = 0 if producer is None else step[producer]
        end[b] = None if graph.is_output[b] else max((step[r] for r in graph.readers[b]), default=start[b])
    return Lifetimes(life.order, step, tuple(start), tuple(end))


def timeline_of(graph: Graph, life: Lifetimes) -> Timeline:
    """Inductor's estimate of ``graph`` (:func:`estimate_peak_memory`) from its lifetimes under an order."""
    live = live_bytes(graph.num_nodes + 1, _changes(graph, life))
    peak, peak_step = peak_of(live)
    return Timeline(life.order, peak, peak_step, tuple(live), life)


def estimate_peak_memory(graph: Graph, order: Sequence[int] | None = None, check: bool = True) -> Timeline:
    """Peak and per-step live bytes of ``order``, Inductor 2.13's ``estimate_peak_memory``.

    ``order`` is a sequence of node ids (default: the graph's own order); it is
    checked to be topological (unless ``check=False``, see :func:`lifetimes`).
    Raises :class:`~reorder.errors.OrderError` if not.
    """
    return timeline_of(graph, lifetimes(graph, order, check))


def _changes(graph: Graph, life: Lifetimes) -> Iterable[tuple[int, int]]:
    """Inductor's estimate as changes of live bytes: each buffer allocated at its start, freed after its end."""
    return chain(zip(life.start, graph.size_alloc),
                 ((end + 1, -freed) for end, freed in zip(life.end, graph.size_free) if end is not None))


def estimate_peak_memory_allocfree(graph: Graph, order: Sequence[int] | None = None) -> AllocFreeTimeline:
    """Peak with alloc and free phases per node, Inductor 2.13's ``estimate_peak_memory_allocfree``."""
    life = lifetimes(graph, order)
    n = graph.num_nodes
    halves = live_bytes(2 * n, _phase_changes(graph, life))  # step t: after its allocations, after its frees
    peak, peak_step = peak_of(halves[0::2])
    phases = tuple(zip(halves[0::2], halves[1::2]))
    return AllocFreeTimeline(life.order, peak, peak_step, phases, life)


def _phase_changes(graph: Graph, life: Lifetimes) -> Iterator[tuple[int, int]]:
    """The allocation-and-free estimate's changes in half steps: step ``t``'s allocations at ``2t``, its frees
    at ``2t + 1``."""
    for b in range(graph.num_buffers):
        yield 2 * life.start[b], graph.size_alloc[b]
        if life.end[b] is not None:
            yield 2 * life.end[b] + 1, -graph.size_free[b]


def resident_bytes(graph: Graph) -> list[int]:
    """Bytes each buffer holds while it is live, for bounds that do not depend on the order.

    Multi-output children hold their own size (the parent's allocation is
    theirs); parents and aliases hold nothing of their own; every other buffer
    holds the smaller of what it allocates and what it frees.
    """
    out = []
    for b in range(graph.num_buffers):
        if graph.parent[b] is not None:
            out.append(graph.size_free[b])
        elif graph.children[b] or graph.alias_of[b] is not None:
            out.append(0)
        else:
            out.append(min(graph.size_alloc[b], graph.size_free[b]))
    return out


#: Work budget of :func:`lower_bound`'s precedence pass: nodes its searches visit (a forward and a
#: backward visit per node a buffer is forced live at, about). Buffers are visited largest first and
#: a partial sum is still a bound, so a budget only weakens the bound on very large graphs, the same
#: way on every machine; the largest bundled graph (1,761 nodes) needs 1.1 million for its full sum.
BOUND_WORK = 2_000_000


def lower_bound(graph: Graph, max_work: int = BOUND_WORK) -> int:
    """A peak no execution order can beat, in the live-bytes model of :func:`estimate_peak_memory`.

    The largest of: all freeable inputs (live at step 0), what stays live
    after the last step (graph outputs; the same for every order), and for
    every node ``v`` the bytes that the precedence constraints force to be
    live during its step in *every* order: the buffers it writes and reads
    (its working set), plus each other buffer produced by an ancestor of
    ``v`` (or a freeable input) that a descendant of ``v`` still reads or
    that is a graph output. Such a buffer was allocated before ``v`` runs and
    is freed after it, whatever the order. The same bound holds for
    :func:`estimate_peak_memory_allocfree` (its peaks are the same).

    ``max_work`` counts the nodes the precedence pass visits (0 skips it).
    Its memory is a few integer arrays over the nodes and buffers, whatever
    the graph's shape: it never holds a set of ancestors per node. A graph
    is immutable, so each ``(graph, max_work)`` is computed once (the
    best-of and the exact method both ask).
    """
    known = _BOUNDS.setdefault(graph, {})
    if max_work not in known:
        forced = _forced_live_bytes(graph, max_work)
        known[max_work] = max(
            _order_free_bound(graph),
            max((w + f for w, f in zip(_working_sets(graph), forced, strict=True)), default=0),
        )
    return known[max_work]


#: :func:`lower_bound`'s results, kept while their graph lives.
_BOUNDS: weakref.WeakKeyDictionary[Graph, dict[int, int]] = weakref.WeakKeyDictionary()


def _forced_live_bytes(graph: Graph, max_work: int) -> list[int]:
    """Per node ``v``: bytes of buffers other than ``v``'s own outputs and reads that are live at
    ``v``'s step in every order (see :func:`lower_bound`), within ``max_work`` node visits.

    For a buffer with producer ``p`` and readers ``R``, those nodes are the descendants of ``p``
    (every node, for a graph input) that are ancestors of a node of ``R`` (every node, for a graph
    output), less ``R``. Node ids are an order that runs, so none of them comes after the last
    reader: a forward search from ``p`` that stops there finds the candidates, and one pass over
    them, latest first, keeps those with a successor that is a reader or was kept (a graph input's
    are found by a backward search from ``R``). Nodes are marked with stamps of the buffer's own in
    one array, so nothing is cleared or kept per buffer, and no edge is scanned but those of
    ``p``, of ``R`` (for an input) and of the nodes visited.
    """
    n = graph.num_nodes
    succs = graph.succs
    resident = resident_bytes(graph)
    forced = [0] * n
    mark = [-1] * n
    work = 0
    for i, b in enumerate(sorted(range(graph.num_buffers), key=lambda b: (-resident[b], b))):
        if not resident[b] or work >= max_work:
            break
        p, readers, output = graph.producer[b], graph.readers[b], graph.is_output[b]
        if not readers and not output:
            continue  # freed at its own step: live at no other node's step
        after_start, before_end = 2 * i, 2 * i + 1  # this buffer's stamps
        candidates: Sequence[int] = range(n)
        if p is not None:
            mark[p] = after_start
            end = n if output else readers[-1]  # readers are in node order
            candidates = _reach([p], succs, mark, after_start, end, max_work - work)
            work += len(candidates)
        for r in readers:
            mark[r] = before_end
        if output:
            live = [v for v in candidates if mark[v] != before_end][:max_work - work]
        elif p is None:
            live = _reach(readers, graph.preds, mark, before_end, n, max_work - work)
        else:
            live = []
            for v in sorted(candidates, reverse=True):  # successors first
                if mark[v] == after_start and any(mark[s] == before_end for s in succs[v]):
                    mark[v] = before_end
                    live.append(v)
        work += len(live)
        for v in live:
            forced[v] += resident[b]
    return forced


def _reach(starts: Sequence[int], edges: Sequence[Sequence[int]], mark: list[int], stamp: int,
           below: int, limit: int) -> list[int]:
    """Up to ``limit`` nodes with ids below ``below`` reachable from ``starts`` along ``edges``
    through such nodes, marked ``stamp`` when found; nodes already marked ``stamp`` (the starts)
    are skipped."""
    found: list[int] = []
    stack = list(starts)
    while stack and len(found) < limit:
        for w in edges[stack.pop()]:
            if w < below and mark[w] != stamp:
                mark[w] = stamp
                found.append(w)
                stack.append(w)
    return found[:limit]


def _working_sets(graph: Graph) -> list[int]:
    """Bytes live during each node's step because it writes or reads them."""
    resident = resident_bytes(graph)
    sets = []
    for v in range(graph.num_nodes):
        outs = graph.outputs[v]
        # A child written together with its parent is already inside the parent's allocation.
        working = sum(
            graph.size_alloc[b] if graph.parent[b] is None else (0 if graph.parent[b] in outs else resident[b])
            for b in outs
        )
        working += sum(resident[b] for b in graph.reads[v] if b not in outs)
        sets.append(working)
    return sets


def _order_free_bound(graph: Graph) -> int:
    """All freeable inputs, and what stays live after the last step: bounds that need no order."""
    inputs = sum(graph.size_alloc[b] for b in range(graph.num_buffers) if graph.is_input[b])
    after_last = sum(graph.size_alloc) - sum(
        graph.size_free[b] for b in range(graph.num_buffers) if not graph.is_output[b]
    )
    return max(inputs, after_last, 0)
