"""Depth-first order: Inductor 2.13's ``topological_sort_dfs``, without recursion.

Nodes are visited in ascending ``(size_with_reads, index)``, where
``size_with_reads`` is what the node allocates plus the bytes of every buffer
it keeps alive; visiting a node first visits the producers of the buffers it
*declared* it reads (Inductor walks ``unmet_dependencies``, not the reads
forwarded through mutation renames) in the same ascending order, then emits
it. Inductor recurses and dies on chains a few thousand deep; this walks an
explicit stack and handles any depth. O(N log N + E log E).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..graph import Graph
from .base import Method, register, simple

__all__ = ["dfs_order", "Dfs"]


def dfs_order(graph: Graph) -> list[int]:
    """The order of ``topological_sort_dfs`` as node ids."""
    n = graph.num_nodes
    size_free = graph.size_free
    key = [(graph.alloc_size[v] + sum(size_free[b] for b in graph.reads[v]), v) for v in range(n)]
    deps: list[list[int]] = []
    for v in range(n):
        producers = [graph.producer[b] for b in graph.declared_reads[v] if graph.producer[b] is not None]
        producers += graph.after[v]
        deps.append(sorted(set(producers), key=key.__getitem__))
    seen = [False] * n
    order: list[int] = []
    for first in sorted(range(n), key=key.__getitem__):
        if seen[first]:
            continue
        seen[first] = True
        stack = [(first, iter(deps[first]))]
        while stack:
            v, pending = stack[-1]
            for d in pending:
                if not seen[d]:
                    seen[d] = True
                    stack.append((d, iter(deps[d])))
                    break
            else:
                stack.pop()
                order.append(v)
    return order


@register
@dataclass(frozen=True)
class Dfs(Method):
    """Inductor's DFS: smallest working set first, producers before consumers."""

    name: ClassVar[str] = "dfs"
    run = simple(dfs_order)
