"""Sets of nodes that have run, as bitmasks, and what running one more node does to the live bytes.

Both searches over node sets build on this: the exact peak search over the
whole graph (:mod:`reorder.schedulers.peak_search`) and the window dynamic
program of the refinement pass (:mod:`reorder.schedulers.subsets`). After a
set ``S`` of nodes has run, the live bytes do not depend on the order they ran
in; running ``v`` next allocates ``alloc(v)`` and then frees every buffer whose
readers have now all run (and ``v``'s outputs nobody reads). :class:`NodeSets`
derives, once per graph or window, which buffers each node may free and which
other readers must have run first, as bitmasks over the searched nodes.

Bit ``i`` stands for ``nodes[i]``. A search over the whole graph uses every
node, bit ``i`` for node ``i``. A window of an order uses its own nodes: every
node outside it whose step is before the window's first step has run already,
and every other one runs after the window, so a buffer such a node still
reads is not freed inside the window.
"""

from __future__ import annotations

from typing import Sequence

from ..graph import Graph

__all__ = ["NodeSets", "STATE_BYTES", "bits", "int_bytes"]

#: The bytes of node sets a search holds by default (the ``max_bytes`` of ``exact`` and ``refine``).
#: Each search counts them (sets times :func:`int_bytes` of their width, with its bookkeeping), never
#: measures them, so a search stops at the same set on every machine.
STATE_BYTES = 256 * 2**20


class NodeSets:
    """A graph's nodes (or a window of an order) as bits, with what each node allocates and frees.

    ``alloc[i]``: bytes ``nodes[i]`` allocates at its step. ``pred_mask[i]``:
    its predecessors among the searched nodes. ``succs[i]``: the bits of its
    successors among them. ``frees[i]``: what it may free, as ``(bytes,
    need)`` pairs: the buffer is freed when ``nodes[i]`` runs after every
    reader in ``need`` (its other readers among the searched nodes); a buffer
    that a node after the window still reads is left out. ``unread_inputs``:
    the freeable graph inputs nobody reads, freed after the program's first
    step (0 for a window that does not start the program). ``ready_at_start``:
    the nodes whose predecessors among the searched nodes are none.
    """

    def __init__(self, graph: Graph, nodes: Sequence[int] | None = None, step: Sequence[int] | None = None,
                 first: int = 0):
        """``nodes``: the searched nodes (default: all, bit ``i`` for node ``i``); ``step`` and ``first``:
        for a window, each node's step in the order and the window's first step (nodes outside the window
        with ``step[v] < first`` have run)."""
        self.nodes = list(range(graph.num_nodes)) if nodes is None else list(nodes)
        bit = {v: i for i, v in enumerate(self.nodes)}
        k = len(self.nodes)
        self.alloc = [graph.alloc_size[v] for v in self.nodes]
        self.pred_mask = [0] * k
        self.succs: list[tuple[int, ...]] = []
        for i, v in enumerate(self.nodes):
            for p in graph.preds[v]:
                if p in bit:
                    self.pred_mask[i] |= 1 << bit[p]
            self.succs.append(tuple(bit[s] for s in graph.succs[v] if s in bit))
        self.frees: list[list[tuple[int, int]]] = [[] for _ in range(k)]
        for i, v in enumerate(self.nodes):
            for b in graph.reads[v]:
                if graph.is_output[b]:
                    continue
                need = 0
                for r in graph.readers[b]:
                    if r in bit:
                        need |= 1 << bit[r]
                    elif step is not None and step[r] >= first:
                        break  # read again after the window: not freed inside it
                else:
                    self.frees[i].append((graph.size_free[b], need & ~(1 << i)))
            for b in graph.outputs[v]:
                if not graph.is_output[b] and not graph.readers[b]:
                    self.frees[i].append((graph.size_free[b], 0))
        self.unread_inputs = 0
        if first == 0:
            self.unread_inputs = sum(
                graph.size_free[b] for b in range(graph.num_buffers)
                if graph.is_input[b] and not graph.readers[b] and not graph.is_output[b]
            )
        self.ready_at_start = sum(1 << i for i in range(k) if not self.pred_mask[i])

    def freed(self, i: int, after: int) -> int:
        """The bytes ``nodes[i]`` frees when it runs and ``after`` is the set that has run then (``i`` included)."""
        freed = 0
        for size, need in self.frees[i]:
            if not need & ~after:
                freed += size
        return freed


def int_bytes(width: int) -> int:
    """Bytes of a Python int of ``width`` bits (CPython: a 24-byte header and 30 bits per 4-byte digit)."""
    return 24 + 4 * -(-width // 30)


def bits(mask: int):
    """The set bits of ``mask``, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low
