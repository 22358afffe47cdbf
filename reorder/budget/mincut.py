"""A minimum s-t cut of a network with integer capacities (Dinic's maximum flow).

The budget partitioner asks, for one price of recomputation, which forward
values to save: a minimum cut of a network whose capacities are bytes and
priced operations (:mod:`reorder.budget.partition`). This module knows
nothing of graphs of tensors: vertices are ``0..n-1``, edges are
``(tail, head, capacity)`` with integer capacities, and the answer is the
source side of a minimum cut.

Dinic's algorithm (1970): breadth-first levels from the source, then blocking
flows along level-increasing paths, until the sink is unreachable; the
vertices still reachable from the source in the residual network are the
source side of a minimum cut, the smallest such side, so the answer does not
depend on how the flow was found. Every loop is iterative (graphs of
thousands of vertices, no recursion limit), and arrays are built once: edge
``k`` and its reverse ``k ^ 1`` sit side by side.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable

__all__ = ["min_cut_source_side"]


def min_cut_source_side(num_vertices: int, edges: Iterable[tuple[int, int, int]], source: int, sink: int
                        ) -> tuple[int, list[bool]]:
    """The value of a minimum ``source``-``sink`` cut and its smallest source side (one flag per vertex).

    ``edges`` are ``(tail, head, capacity)`` with ``capacity >= 0``; parallel
    edges add up. A capacity meant as infinite must exceed the sum of the
    finite ones (the caller knows that sum).
    """
    head: list[int] = []
    residual: list[int] = []
    out: list[list[int]] = [[] for _ in range(num_vertices)]
    for tail, to, capacity in edges:
        if capacity < 0:
            raise ValueError(f"edge {tail}->{to}: capacity {capacity} < 0")
        out[tail].append(len(head))
        head.append(to)
        residual.append(capacity)
        out[to].append(len(head))
        head.append(tail)
        residual.append(0)
    flow = 0
    while True:
        level = _levels(out, head, residual, source, num_vertices)
        if level[sink] < 0:
            break
        flow += _blocking_flow(out, head, residual, level, source, sink)
    reachable = [lv >= 0 for lv in _levels(out, head, residual, source, num_vertices)]
    return flow, reachable


def _levels(out: list[list[int]], head: list[int], residual: list[int], source: int, n: int) -> list[int]:
    """Breadth-first distance from ``source`` along edges with residual capacity (-1: unreachable)."""
    level = [-1] * n
    level[source] = 0
    queue = deque([source])
    while queue:
        u = queue.popleft()
        for k in out[u]:
            if residual[k] and level[head[k]] < 0:
                level[head[k]] = level[u] + 1
                queue.append(head[k])
    return level


def _blocking_flow(out: list[list[int]], head: list[int], residual: list[int], level: list[int], source: int,
                   sink: int) -> int:
    """Push flow along level-increasing paths until none is left (one phase of Dinic's algorithm)."""
    position = [0] * len(out)  # next edge to try at each vertex
    total = 0
    while True:
        path: list[int] = []  # edge ids from the source
        u = source
        while u != sink:
            edges = out[u]
            while position[u] < len(edges):
                k = edges[position[u]]
                if residual[k] and level[head[k]] == level[u] + 1:
                    break
                position[u] += 1
            else:
                if u == source:
                    return total
                level[u] = -1  # dead end for this phase
                u = head[path.pop() ^ 1]
                position[u] += 1
                continue
            path.append(k)
            u = head[k]
        pushed = min(residual[k] for k in path)
        for k in path:
            residual[k] -= pushed
            residual[k ^ 1] += pushed
        total += pushed
