"""Breadth-first order: Inductor 2.13's ``topological_sort_bfs``, same ties.

Among the ready nodes, run the one whose predecessors ran earliest: the
priority of a node is the sorted tuple of its predecessors' steps, compared
lexicographically, ties broken by the node's original index. It is FIFO in
spirit, so buffers die young. O((N + E) log N) comparisons of short tuples.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import ClassVar

from ..graph import Graph, Kahn
from .base import Method, register, simple

__all__ = ["bfs_order", "Bfs"]


def bfs_order(graph: Graph) -> list[int]:
    """The order of ``topological_sort_bfs`` as node ids."""
    preds = graph.preds
    kahn = Kahn(graph)
    step = [-1] * graph.num_nodes
    ready = [((), v) for v in kahn.initial()]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, v = heapq.heappop(ready)
        step[v] = len(order)
        order.append(v)
        for s in kahn.done(v):
            heapq.heappush(ready, (tuple(sorted({step[p] for p in preds[s]})), s))
    return order


@register
@dataclass(frozen=True)
class Bfs(Method):
    """Inductor's BFS: earliest-predecessors first."""

    name: ClassVar[str] = "bfs"
    run = simple(bfs_order)
