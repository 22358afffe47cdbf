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
``k`` and its reverse ``k ^ 1`` sit side by side. A :class:`Network` keeps
them for cuts of other capacities (the partitioner cuts one network at many
prices), and each phase's breadth-first search stops once it reaches the
sink: a blocking flow only climbs one level at a time, so what lies at or
beyond the sink's level carries none of it.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable, Sequence

__all__ = ["Network", "min_cut_source_side"]


def min_cut_source_side(num_vertices: int, edges: Iterable[tuple[int, int, int]], source: int, sink: int
                        ) -> tuple[int, list[bool]]:
    """The value of a minimum ``source``-``sink`` cut and its smallest source side (one flag per vertex).

    ``edges`` are ``(tail, head, capacity)`` with ``capacity >= 0``; parallel
    edges add up. A capacity meant as infinite must exceed the sum of the
    finite ones (the caller knows that sum).
    """
    carrying = [edge for edge in edges if edge[2]]  # an edge of none never carries flow, nor does its reverse
    return Network(num_vertices, [(tail, to) for tail, to, _ in carrying]).min_cut(
        [capacity for _, _, capacity in carrying], source, sink)


class Network:
    """A network's vertices ``0..num_vertices-1`` and arcs ``(tail, head)``, built once; each
    :meth:`min_cut` gives the arcs' capacities (a network cut at many prices is built once)."""

    def __init__(self, num_vertices: int, arcs: Iterable[tuple[int, int]]):
        self.num_vertices = num_vertices
        self.head: list[int] = []  # arc k's head; arc k ^ 1 is its reverse
        self.out: list[list[int]] = [[] for _ in range(num_vertices)]
        for tail, to in arcs:
            self.out[tail].append(len(self.head))
            self.head.append(to)
            self.out[to].append(len(self.head))
            self.head.append(tail)

    def min_cut(self, capacities: Sequence[int], source: int, sink: int) -> tuple[int, list[bool]]:
        """The value of a minimum ``source``-``sink`` cut with arc ``k`` of capacity ``capacities[k]``
        (see :func:`min_cut_source_side`), and its smallest source side."""
        flow, residual = self._max_flow(capacities, source, sink)
        return flow, [lv >= 0 for lv in _levels(self.out, self.head, residual, source, self.num_vertices)]

    def min_cut_sink_side(self, capacities: Sequence[int], source: int, sink: int) -> tuple[int, list[bool]]:
        """The value of the same cut and its smallest *sink* side: the vertices that can still reach the sink in
        the residual network (every maximum flow leaves the same ones, as networkx's ``minimum_cut`` reports
        them)."""
        flow, residual = self._max_flow(capacities, source, sink)
        out, head = self.out, self.head
        reaches = [False] * self.num_vertices
        reaches[sink] = True
        queue = deque([sink])
        while queue:
            w = queue.popleft()
            for k in out[w]:  # arc k ^ 1 runs from head[k] to w
                u = head[k]
                if residual[k ^ 1] and not reaches[u]:
                    reaches[u] = True
                    queue.append(u)
        return flow, reaches

    def _max_flow(self, capacities: Sequence[int], source: int, sink: int) -> tuple[int, list[int]]:
        """A maximum flow's value and the residual capacity it leaves on every arc and reverse arc."""
        if len(capacities) * 2 != len(self.head):
            raise ValueError(f"{len(capacities)} capacities for {len(self.head) // 2} arcs")
        negative = next((k for k, c in enumerate(capacities) if c < 0), None)
        if negative is not None:
            raise ValueError(f"edge {self.head[2 * negative + 1]}->{self.head[2 * negative]}: capacity "
                             f"{capacities[negative]} < 0")
        out, head, n = self.out, self.head, self.num_vertices
        residual = [0] * len(head)
        residual[0::2] = capacities
        flow = 0
        while True:
            level = _levels(out, head, residual, source, n, sink)
            if level[sink] < 0:
                return flow, residual
            flow += _blocking_flow(out, head, residual, level, source, sink)


def _levels(out: list[list[int]], head: list[int], residual: list[int], source: int, n: int,
            stop_at: int | None = None) -> list[int]:
    """Breadth-first distance from ``source`` along edges with residual capacity (-1: unreachable).

    With ``stop_at``, the search ends once that vertex has its distance: every vertex nearer the source has
    its own by then, and a blocking flow only follows edges one level up, so the vertices left at -1 lie on
    no path it uses."""
    level = [-1] * n
    level[source] = 0
    queue = deque([source])
    while queue:
        u = queue.popleft()
        up = level[u] + 1
        for k in out[u]:
            v = head[k]
            if residual[k] and level[v] < 0:
                level[v] = up
                if v == stop_at:
                    return level
                queue.append(v)
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
            edges, i, up = out[u], position[u], level[u] + 1
            for i in range(i, len(edges)):
                k = edges[i]
                if residual[k] and level[head[k]] == up:
                    position[u] = i
                    break
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
