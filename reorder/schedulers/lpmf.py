"""Least Peak Memory First: Inductor 2.13's ``topological_sort_lpmf``, in O((N + E) log N).

The greedy (Inductor's docstring credits "Buffer memory optimization for video
codec application modeled in Simulink", DAC 2006) keeps the peak so far and the
live bytes, and ``gap = peak - live``. Each ready node ``v`` allocates
``size[v]`` and, once run, frees ``to_free[v]`` (inputs it is the last reader
of, outputs nobody reads). It picks the ready node with the smallest key

    (size if size > gap else 0,  size - to_free,  index)

i.e. among nodes that fit under the current peak, the one that leaves the
least live; if none fits, the smallest.

Inductor scans every ready node at every step: quadratic on wide graphs. Here
the ready nodes sit in a segment tree whose leaves are sorted by
``(size, index)``, each holding ``(size - to_free) * N + index`` (or +inf
when not ready). "Nodes that fit" is a prefix of the leaves, found by
bisection on sizes, so the first case is one prefix-minimum query; the second
is the leftmost ready leaf's size class, one range query. ``to_free`` changes
(a buffer down to its last reader) are point updates. Every step and every
edge costs O(log N).

With ``size_threshold > 0`` and every ready node larger than it, Inductor
switches to a successor-based rule: pick the node whose earliest successor
(by index) comes first, ties to the node that became ready first. That is a
lazy heap keyed by ``(earliest successor, arrival)``.

While only a few nodes are ready (narrow graphs), keeping the tree costs
more than scanning them: the ready set is then a plain set scanned with
Inductor's own key, and moves into the tree only when it grows.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import ClassVar

from ..graph import Graph, Kahn
from .base import Method, option, register, simple

__all__ = ["lpmf_order", "Lpmf"]

# The ready set moves into the segment tree when it grows past TREE_ABOVE
# nodes and back out below TREE_BELOW (hysteresis keeps it from flapping).
TREE_ABOVE = 48
TREE_BELOW = 16


def lpmf_order(graph: Graph, size_threshold: int = 0) -> list[int]:
    """The order of ``topological_sort_lpmf`` as node ids (``size_threshold`` as Inductor's config)."""
    n = graph.num_nodes
    if n == 0:
        return []
    size = graph.alloc_size
    size_free = graph.size_free
    readers = graph.readers
    reads = graph.reads

    outdegree = [len(readers[b]) + graph.is_output[b] for b in range(graph.num_buffers)]
    to_free = [0] * n
    for v in range(n):
        to_free[v] = sum(size_free[b] for b in reads[v] if outdegree[b] == 1)
        to_free[v] += sum(size_free[b] for b in graph.outputs[v] if outdegree[b] == 0)

    live = sum(size_free[b] for b in range(graph.num_buffers) if graph.is_input[b] and graph.freeable[b])
    output_bytes = sum(size_free[b] for b in range(graph.num_buffers) if graph.is_output[b])
    peak = max(live, output_bytes)
    gap = peak - live

    # Segment tree over nodes sorted by (size, index).
    by_size = sorted(range(n), key=lambda v: (size[v], v))
    sorted_sizes = [size[v] for v in by_size]
    leaf = [0] * n
    for pos, v in enumerate(by_size):
        leaf[v] = pos
    width = 1
    while width < n:
        width *= 2
    inf = float("inf")
    tree = [inf] * (2 * width)

    def put(v: int, value) -> None:
        i = leaf[v] + width
        tree[i] = value
        i >>= 1
        while i:
            left, right = tree[2 * i], tree[2 * i + 1]
            best = left if left < right else right
            if tree[i] == best:
                break
            tree[i] = best
            i >>= 1

    def range_min(lo: int, hi: int):
        best = inf
        lo += width
        hi += width
        while lo < hi:
            if lo & 1:
                if tree[lo] < best:
                    best = tree[lo]
                lo += 1
            if hi & 1:
                hi -= 1
                if tree[hi] < best:
                    best = tree[hi]
            lo >>= 1
            hi >>= 1
        return best

    def leftmost_ready() -> int:
        i = 1
        while i < width:
            i = 2 * i if tree[2 * i] < inf else 2 * i + 1
        return i - width

    kahn = Kahn(graph)
    ready: set[int] = set()
    use_tree = False  # while few nodes are ready, a direct scan beats the tree's upkeep
    succ_heap: list[tuple[int, int, int]] = []
    first_succ = [min(graph.succs[v], default=n) for v in range(n)] if size_threshold > 0 else []
    arrivals = 0

    def key(v: int) -> int:
        return (size[v] - to_free[v]) * n + v

    def make_ready(v: int) -> None:
        nonlocal arrivals, use_tree
        ready.add(v)
        if use_tree:
            put(v, key(v))
        elif len(ready) > TREE_ABOVE:
            use_tree = True
            for u in ready:
                put(u, key(u))
        if size_threshold > 0:
            heapq.heappush(succ_heap, (first_succ[v], arrivals, v))
            arrivals += 1

    for v in kahn.initial():
        make_ready(v)

    order: list[int] = []
    while ready:
        smallest = sorted_sizes[leftmost_ready()] if use_tree else min(size[v] for v in ready)
        if size_threshold > 0 and smallest > size_threshold:
            while succ_heap[0][2] not in ready:
                heapq.heappop(succ_heap)
            chosen = heapq.heappop(succ_heap)[2]
        elif not use_tree:
            chosen = min(ready, key=lambda v: (size[v] if size[v] > gap else 0, size[v] - to_free[v], v))
        else:
            fits = bisect_right(sorted_sizes, gap)
            best = range_min(0, fits)
            if best == inf:
                best = range_min(bisect_left(sorted_sizes, smallest), bisect_right(sorted_sizes, smallest))
            chosen = best % n
        ready.discard(chosen)
        if use_tree:
            put(chosen, inf)
            if len(ready) < TREE_BELOW:
                use_tree = False
                for u in ready:
                    put(u, inf)
        order.append(chosen)

        live += size[chosen]
        if live > peak:
            peak = live
        live -= to_free[chosen]
        gap = peak - live

        for s in kahn.done(chosen):
            make_ready(s)
        for b in reads[chosen]:
            outdegree[b] -= 1
            if outdegree[b] == 1:
                for r in readers[b]:
                    to_free[r] += size_free[b]
                    if use_tree and r in ready:
                        put(r, key(r))
    return order


@register
@dataclass(frozen=True)
class Lpmf(Method):
    """Inductor's LPMF greedy, same order, O((N + E) log N)."""

    name: ClassVar[str] = "lpmf"
    size_threshold: int = option(0, int, 0)
    run = simple(lpmf_order)
