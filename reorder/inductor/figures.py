"""Inductor's own figures: torch's ``torch/_inductor/memory.py`` functions run on a :class:`Graph`.

This is the reference we are measured against. :func:`torch_reference`
builds light stand-ins for Inductor's scheduler nodes and buffers carrying
exactly the fields those functions read (``mpi_node``, ``mpi_buffer``,
``unmet_dependencies``, ``get_outputs``...), so tests and benchmarks need no
compilation; :func:`inductor_figures` drives the same functions on the real
scheduler nodes inside a compile, for the hook's optional comparison.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ..graph import Graph
from ..schedulers import INDUCTOR_METHODS

__all__ = ["INDUCTOR_METHODS", "TorchReference", "figures_record", "inductor_figures", "torch_reference"]


class _Dep:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class _Buffer:
    __slots__ = ("name", "mpi_buffer")

    def __init__(self, name: str):
        self.name = name
        self.mpi_buffer = None

    def get_name(self) -> str:
        return self.name


class _Node:
    __slots__ = ("name", "outputs", "mpi_node", "unmet_dependencies")

    def __init__(self, name: str):
        self.name = name
        self.outputs: list[_Buffer] = []
        self.mpi_node = None
        self.unmet_dependencies: list[_Dep] = []

    def get_name(self) -> str:
        return self.name

    def get_outputs(self) -> list[_Buffer]:
        return self.outputs

    def get_buffer_names(self):
        return [b.name for b in self.outputs]


@dataclass
class TorchReference:
    """Stand-in scheduler state for one graph, and torch's functions bound to it."""

    graph: Graph
    nodes: list
    name_to_freeable_input_buf: dict
    name_to_buf: dict
    graph_outputs: object

    def estimate(self, order: Sequence[int] | None = None) -> tuple[int, list[int]]:
        """torch's ``estimate_peak_memory`` of ``order`` (node ids; default the graph's own)."""
        from torch._inductor import memory

        nodes = self.nodes if order is None else [self.nodes[v] for v in order]
        return memory.estimate_peak_memory(nodes, self.name_to_freeable_input_buf, self.graph_outputs)

    def estimate_allocfree(self, order: Sequence[int] | None = None) -> int:
        from torch._inductor import memory

        nodes = self.nodes if order is None else [self.nodes[v] for v in order]
        return memory.estimate_peak_memory_allocfree(nodes, self.name_to_freeable_input_buf, self.graph_outputs)[0]

    def method(self, name: str) -> Callable[[], list[int]]:
        """torch's ``topological_sort_<name>``, returning node ids."""
        from torch._inductor import memory

        index = {id(n): i for i, n in enumerate(self.nodes)}
        if name == "lpmf":
            def run():
                return memory.topological_sort_lpmf(
                    self.nodes, self.name_to_freeable_input_buf, self.name_to_buf, self.graph_outputs
                )
        elif name in ("bfs", "dfs"):
            fn = getattr(memory, f"topological_sort_{name}")

            def run():
                return fn(self.nodes)
        else:
            raise ValueError(f"torch has no method {name!r}; it has {INDUCTOR_METHODS}")
        return lambda: [index[id(n)] for n in run()]

    def run_all(self, size_threshold: int = 0) -> dict:
        """Peaks, orders and seconds of baseline and torch's three methods, as ``reorder_for_peak_memory`` runs them."""
        from torch._inductor import config

        result = {"peak": {}, "orders": {}, "seconds": {}}
        t0 = time.perf_counter()
        result["peak"]["baseline"] = self.estimate()[0]
        result["seconds"]["baseline"] = time.perf_counter() - t0
        with config.patch(size_threshold_for_succ_based_strategy=size_threshold):
            for name in INDUCTOR_METHODS:
                t0 = time.perf_counter()
                order = self.method(name)()
                peak = self.estimate(order)[0]
                result["seconds"][name] = time.perf_counter() - t0
                result["peak"][name] = peak
                result["orders"][name] = order
        return result

    def figures(self) -> dict:
        """:meth:`run_all` under the configured LPMF threshold, with the alloc/free model's baseline peak
        (``peak_allocfree_baseline``): every figure Inductor's ``memory.py`` gives for the graph."""
        from torch._inductor import config

        figures = self.run_all(config.size_threshold_for_succ_based_strategy)
        figures["peak_allocfree_baseline"] = self.estimate_allocfree()
        return figures


def torch_reference(graph: Graph) -> TorchReference:
    """Build stand-ins for ``graph`` with torch's own planning-info records."""
    from torch._inductor.memory import (
        FreeableInputBuffer,
        MemoryPlanningInfoForBuffer,
        MemoryPlanningInfoForNode,
    )
    from torch.utils._ordered_set import OrderedSet

    g = graph
    nodes = [_Node(nm) for nm in g.node_names]
    bufs: dict[int, object] = {}
    for b in range(g.num_buffers):
        p = g.producer[b]
        if p is not None:
            buf = _Buffer(g.buffer_names[b])
            nodes[p].outputs.append(buf)
            bufs[b] = buf
    freeable = {}
    for b in range(g.num_buffers):
        if g.is_input[b] and g.freeable[b] and g.readers[b]:
            fb = FreeableInputBuffer(g.buffer_names[b])
            freeable[fb.name] = fb
            bufs[b] = fb
    for b, buf in bufs.items():
        readers = OrderedSet(nodes[r] for r in g.readers[b])
        info = MemoryPlanningInfoForBuffer(
            size_alloc=g.size_alloc[b], size_free=g.size_free[b],
            succ_nodes=readers, succ_nodes_for_ordering=OrderedSet(readers),
        )
        buf.mpi_buffer = info
    for v, node in enumerate(nodes):
        node.mpi_node = MemoryPlanningInfoForNode(
            index=v,
            size=g.alloc_size[v],
            pred_buffers=OrderedSet(bufs[b] for b in g.reads[v] if b in bufs),
            pred_nodes=OrderedSet(nodes[p] for p in g.preds[v]),
            succ_nodes=OrderedSet(nodes[s] for s in g.succs[v]),
        )
        deps = [g.buffer_names[b] for b in g.declared_reads[v]]
        deps += [g.buffer_names[g.outputs[a][0]] for a in g.after[v] if g.outputs[a]]
        node.unmet_dependencies = [_Dep(d) for d in deps]
    name_to_buf = {bufs[b].name: bufs[b] for b in bufs if g.producer[b] is not None}
    outputs = OrderedSet(g.buffer_names[b] for b in range(g.num_buffers) if g.is_output[b])
    return TorchReference(g, nodes, freeable, name_to_buf, outputs)


def inductor_figures(graph: Graph, nodes: list, state) -> dict:
    """Inductor's own peaks, orders (node ids) and seconds for the incoming order and its three methods.

    The real scheduler nodes carry the planning info torch's functions read
    (``state`` is the adapter's :class:`~reorder.inductor.adapter.SchedulerState`),
    so the same :class:`TorchReference` that drives stand-ins in tests drives
    them here, under the user's LPMF threshold.
    """
    reference = TorchReference(graph, nodes, state.freeable, state.name_to_buf, state.graph_outputs)
    return reference.figures()


def figures_record(graph: Graph, figures: dict) -> dict:
    """``figures`` (as :meth:`TorchReference.figures` gives them) in the layout of the figures files: the
    capture folder's ``inductor-figures.json`` and the bundled ``torch-<release>-figures.json``.

    Peaks are keyed ``baseline`` and ``topological_sort_<method>`` as torch names its functions, orders are
    node names, and ``torch_version`` says which release's ``memory.py`` gave them.
    """
    from .releases import installed_version

    return {
        "torch_version": installed_version(),
        "peak": {("baseline" if k == "baseline" else f"topological_sort_{k}"): v for k, v in figures["peak"].items()},
        "peak_allocfree_baseline": figures["peak_allocfree_baseline"],
        "orders": {f"topological_sort_{m}": graph.names_of(figures["orders"][m]) for m in INDUCTOR_METHODS},
    }
