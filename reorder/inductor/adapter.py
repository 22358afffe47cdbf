"""Inductor's scheduler nodes -> our :class:`~reorder.graph.Graph`, once, at the edge.

Sizes and successor sets come from Inductor's own planning-info functions in
``torch/_inductor/memory.py``, so multi-output layouts, ``NoneLayout``
buffers, mutation renames, fake (ordering-only) WeakDeps and freeable inputs
follow Inductor exactly:

* a rename of a buffer some node produces is an alias of it (its readers keep
  the real buffer alive, as Inductor forwards them);
* a rename of a *graph input* is not: Inductor forwards readers only among
  scheduler buffers, so a mutated freeable input dies after its last direct
  reader, and the rename is a zero-cost buffer of its own;
* a fake WeakDep is an ordering-only edge (to the renamed buffer's producer
  too).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..graph import BufferSpec, Graph, InputSpec, NodeSpec, build_graph

__all__ = ["SchedulerState", "freed_tangents", "fx_graph_cache_hits", "graph_being_compiled", "graph_from_scheduler",
           "scheduler_state"]


def graph_being_compiled() -> str:
    """The name AOTAutograd gives the graph being compiled (``model__0_forward_1``), or ``"graph"``."""
    try:
        from functorch.compile import get_graph_being_compiled

        return get_graph_being_compiled()
    except Exception:  # noqa: BLE001 - a name is a nicety
        return "graph"


def fx_graph_cache_hits() -> int:
    """Inductor's running count of FX graph cache hits in this process (each hit skips every scheduler pass)."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["fxgraph_cache_hit"]


@dataclass
class SchedulerState:
    """What Inductor's own memory functions need besides the nodes, from the graph being compiled."""

    freeable: dict  # name -> FreeableInputBuffer
    name_to_buf: dict  # name -> SchedulerBuffer, for the nodes given
    graph_inputs: object  # OrderedSet of names
    graph_outputs: object  # OrderedSet of names
    mutation_real_name: dict
    scheduler: object


def scheduler_state(nodes: list, scheduler=None) -> SchedulerState:
    """Inductor's planning info for ``nodes``, assigned on the nodes as its own pass does.

    ``scheduler`` defaults to the graph's; pass it while the scheduler is
    still being built (during fusion ``V.graph.scheduler`` is not yet set).
    """
    from torch._inductor import memory
    from torch._inductor.virtualized import V
    from torch.utils._ordered_set import OrderedSet

    scheduler = scheduler if scheduler is not None else V.graph.scheduler
    graph_inputs = OrderedSet(V.graph.graph_inputs.keys())
    graph_outputs = OrderedSet(V.graph.get_output_names())
    name_to_buf = {buf.get_name(): buf for node in nodes for buf in node.get_outputs()}
    freeable = memory.get_freeable_input_buf(nodes, graph_inputs)
    memory.assign_memory_planning_info_for_scheduler_buffers(nodes, scheduler.name_to_buf)
    memory.assign_memory_planning_info_for_scheduler_nodes(nodes, scheduler.name_to_fused_node, scheduler.name_to_buf,
                                                           freeable)
    return SchedulerState(freeable, name_to_buf, graph_inputs, graph_outputs, scheduler.mutation_real_name, scheduler)


def freed_tangents(nodes: list, graph_inputs) -> dict[str, int]:
    """A backward graph's tangents (name -> bytes): inputs Inductor's model holds, though a real run frees them.

    Inductor counts ``tangents_*`` among the buffers the graph never frees
    (``utils.is_nonfreeable_buffers``). The autograd engine hands the
    gradient of the graph's outputs to the backward, whose ``del`` frees it:
    when the loss is computed outside the compiled graph, that is the
    gradient of the logits, often the largest tensor of the step.
    """
    from torch._inductor.dependencies import WeakDep
    from torch._inductor.virtualized import V

    prefix = f"{V.graph.name}_" if V.graph.name else ""
    sizes = {}
    for node in nodes:
        for dep in node.read_writes.reads:
            if (dep.name in graph_inputs and dep.name.removeprefix(prefix).startswith("tangents")
                    and not (isinstance(dep, WeakDep) and dep.is_fake)):
                sizes[dep.name] = max(sizes.get(dep.name, 0), V.graph.get_dep_size_hint(dep))
    return sizes


def graph_from_scheduler(nodes: list, name: str = "graph", scheduler=None, free_tangents: bool = False
                         ) -> tuple[Graph, SchedulerState]:
    """Our :class:`Graph` of Inductor's (fused) scheduler nodes, in their order, and Inductor's state for them.

    ``free_tangents``: also model the graph's tangents as freed after their last reader
    (:func:`freed_tangents`); by default the graph is Inductor's model exactly.
    """
    from torch._inductor.dependencies import WeakDep
    from torch._inductor.ir import MultiOutputLayout

    state = scheduler_state(nodes, scheduler)
    tangents = freed_tangents(nodes, state.graph_inputs) if free_tangents else {}
    freeable = {**state.freeable, **tangents}
    real_name = state.mutation_real_name
    producer = {b: node.get_name() for node in nodes for b in (o.get_name() for o in node.get_outputs())}
    parents = {b for b, buf in state.name_to_buf.items()
               if isinstance(getattr(buf.node, "layout", None), MultiOutputLayout)}
    specs = []
    for node in nodes:
        reads, after = [], []
        for dep in node.unmet_dependencies:
            if dep.name not in producer:
                continue
            if isinstance(dep, WeakDep) and dep.is_fake:
                after.append(producer[dep.name])
                if dep.name in real_name and real_name[dep.name] in producer:
                    after.append(producer[real_name[dep.name]])
            else:
                reads.append(dep.name)
        for dep in node.read_writes.reads:
            if dep.name in freeable and not (isinstance(dep, WeakDep) and dep.is_fake):
                reads.append(dep.name)
        outputs = []
        for buf in node.get_outputs():
            b = buf.get_name()
            info = buf.mpi_buffer
            alias = real_name.get(b)
            if alias not in producer:
                alias = None  # a renamed graph input: Inductor does not forward its readers
            if alias is not None:
                reads.append(alias)
            parent = None
            if b not in parents and info.size_alloc == 0 and info.size_free > 0:
                parent = next((r for r in reads if r in parents), None)
            renamed = b in real_name
            outputs.append(BufferSpec(
                b, size=0 if renamed or b in parents else max(info.size_alloc, info.size_free),
                alias_of=alias, parent=parent, size_alloc=info.size_alloc, size_free=info.size_free,
            ))
        after = [a for a in dict.fromkeys(after) if a != node.get_name()]
        specs.append(NodeSpec(node.get_name(), outputs, reads=list(dict.fromkeys(reads)), after=after))
    inputs = [InputSpec(b, tangents[b] if b in tangents else fb.mpi_buffer.size_free) for b, fb in freeable.items()]
    outputs = [b for b in state.graph_outputs if b in producer or b in freeable]
    return build_graph(specs, inputs, outputs, name=name), state
