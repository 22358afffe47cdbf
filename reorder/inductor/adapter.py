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

Under dynamic shapes Inductor sizes every buffer at its size hint (one value
per symbol, ``optimization_hint``). The adapter also derives each size as an
expression the way ``memory.py`` derives the number (a buffer's ``numel``
times its dtype's size, a multi-output parent the sum of its children, an
input the numel of the last dependency read of it), checks that the
expressions give Inductor's numbers at the hints byte for byte, and then
builds a symbolic graph with the symbols' ranges from Inductor's
``ShapeEnv`` (:func:`symbolic_sizes`). Where that check fails, or a size
has a symbol with no hint (an unbacked, data-dependent one), the graph keeps
Inductor's numbers only, and says why (:attr:`SchedulerState.not_symbolic`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Collection

from ..errors import GraphError
from ..graph import BufferSpec, Graph, InputSpec, NodeSpec, build_graph
from .generated_code import hint_bytes, storage_expr

__all__ = ["SchedulerState", "SymbolicSizes", "freed_tangents", "fx_graph_cache_hits", "graph_being_compiled",
           "graph_from_scheduler", "input_storage", "scheduler_state", "symbol_ranges", "symbolic_sizes"]


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
    not_symbolic: str | None = None  # why a graph with size symbols was built with Inductor's numbers only


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


def freed_tangents(nodes: list, graph_inputs, owned: Collection[str] = ()) -> dict[str, int]:
    """A backward graph's tangents (name -> bytes), and the inputs named in ``owned``: inputs Inductor's model
    holds, though a real run frees them.

    Inductor counts ``tangents_*`` among the buffers the graph never frees
    (``utils.is_nonfreeable_buffers``). The autograd engine hands the
    gradient of the graph's outputs to the backward, whose ``del`` frees it:
    when the loss is computed outside the compiled graph, that is the
    gradient of the logits, often the largest tensor of the step. The same
    holds for ``primals_*`` inputs of a backward that are copies its forward
    made (a parameter or the batch laid out channels-last for a
    convolution), which a budgeted region knows (``owned``).
    """
    from torch._inductor.virtualized import V

    deps = _freed_deps(nodes, graph_inputs, frozenset(owned))
    return {name: V.graph.get_dep_size_hint(dep) for name, dep in deps.items()}


def _freed_deps(nodes: list, graph_inputs, owned: frozenset[str]) -> dict:
    """Each tangent input's, and each ``owned`` input's, largest dependency (by its size hint): the one
    :func:`freed_tangents` sizes it by."""
    from torch._inductor.dependencies import WeakDep
    from torch._inductor.utils import is_nonfreeable_buffers
    from torch._inductor.virtualized import V

    prefix = f"{V.graph.name}_" if V.graph.name else ""
    deps: dict = {}
    for node in nodes:
        for dep in node.read_writes.reads:
            unprefixed = dep.name.removeprefix(prefix)
            if (dep.name in graph_inputs and (unprefixed.startswith("tangents") or
                                              (unprefixed in owned and is_nonfreeable_buffers(dep)))
                    and not (isinstance(dep, WeakDep) and dep.is_fake)):
                if dep.name not in deps or V.graph.get_dep_size_hint(dep) > V.graph.get_dep_size_hint(deps[dep.name]):
                    deps[dep.name] = dep
    return deps


@dataclass(frozen=True)
class SymbolicSizes:
    """Sizes of a graph with size symbols, as sympy expressions in Inductor's symbols: ``buffers`` (scheduler
    buffer name -> ``(size_alloc, size_free)``), ``inputs`` (freeable input name -> bytes), and the symbols'
    ``hints`` and ``ranges`` (name -> ``(lower, upper or None)``)."""

    buffers: dict
    inputs: dict
    hints: dict[str, int]
    ranges: dict[str, tuple[int, int | None]]


def symbol_ranges(symbols) -> tuple[dict[str, int], dict[str, tuple[int | None, int | None]]] | str:
    """The hints (``optimization_hint``, the values Inductor sizes buffers with) and value ranges (an infinite
    bound as None) of Inductor's ``symbols``; a sentence saying why not where one has no hint (an unbacked,
    data-dependent symbol)."""
    import sympy
    from torch._inductor.virtualized import V

    sizevars = V.graph.sizevars
    shape_env = sizevars.shape_env
    hints, ranges = {}, {}

    def finite(bound) -> int | None:  # sympy.Integer alone: Inductor's int_oo calls itself a finite integer
        return int(bound) if isinstance(bound, (int, sympy.Integer)) else None

    for symbol in sorted(symbols, key=str):
        name = str(symbol)
        if symbol not in shape_env.backed_var_to_val:
            return f"size symbol {name} has no hint (an unbacked, data-dependent size)"
        bounds = shape_env.var_to_range.get(symbol)
        hints[name] = int(sizevars.optimization_hint(symbol))
        ranges[name] = (finite(bounds.lower), finite(bounds.upper)) if bounds is not None else (None, None)
    return hints, ranges


def symbolic_sizes(nodes: list, state: SchedulerState, freeable: dict) -> SymbolicSizes | str | None:
    """Every size Inductor's ``memory.py`` computes at the hints, as an expression (see the module docstring);
    None when no size has a symbol; a sentence saying why the graph keeps Inductor's numbers only.
    ``freeable``: the inputs the graph frees, name -> Inductor's buffer (with its figures), or the bytes at the
    hints of a tangent (or ``owned`` input) that a real run frees (:func:`freed_tangents`)."""
    from torch._inductor.ir import MultiOutput, MultiOutputLayout, NoneLayout
    from torch._inductor.scheduler import OutputNode
    from torch._inductor.utils import get_dtype_size, is_nonfreeable_buffers
    from torch._inductor.virtualized import V

    real_name = state.mutation_real_name
    sizes: dict = {}

    def bytes_of(buf, child: bool = False):
        """``memory.compute_size_for_scheduler_buffer``, symbolically."""
        name = buf.get_name()
        layout = buf.node.layout
        if name in real_name or isinstance(layout, NoneLayout):
            sizes[name] = (0, 0)
            return 0
        if isinstance(layout, MultiOutputLayout):
            total = 0
            for user in buf.users:
                if isinstance(user.node, OutputNode):
                    continue
                for out in user.node.get_outputs():
                    if isinstance(out.node, MultiOutput):
                        total += bytes_of(out, True)
            sizes[name] = (0 if child else total, 0)
            return total
        nbytes = buf.node.get_numel() * get_dtype_size(buf.node.get_dtype())
        sizes[name] = (0 if child else nbytes, nbytes)
        return nbytes

    for buf in state.scheduler.name_to_buf.values():
        if buf.get_name() not in sizes:
            bytes_of(buf)
    inputs = {}
    for node in nodes:  # memory.get_freeable_input_buf: the last dependency read of an input sizes it
        for dep in node.read_writes.reads:
            if dep.name in state.graph_inputs and not is_nonfreeable_buffers(dep):
                inputs[dep.name] = dep.get_numel() * get_dtype_size(V.graph.get_dtype(dep.name))
    for name, dep in _freed_deps(nodes, state.graph_inputs, frozenset(freeable)).items():
        if name in freeable and name not in inputs:
            inputs[name] = dep.get_numel() * get_dtype_size(V.graph.get_dtype(name))
    symbols = set()
    for expr in [*(a for pair in sizes.values() for a in pair), *inputs.values()]:
        symbols |= getattr(expr, "free_symbols", set())
    if not symbols:
        return None
    found = symbol_ranges(symbols)
    if isinstance(found, str):
        return found
    hints, ranges = found
    for name, (alloc, free) in sizes.items():
        if name in state.name_to_buf:
            info = state.name_to_buf[name].mpi_buffer
            if (_at(alloc, hints), _at(free, hints)) != (info.size_alloc, info.size_free):
                return (f"buffer {name}: its size expressions give {_at(alloc, hints)}/{_at(free, hints)} bytes at the "
                        f"hints, Inductor's figures {info.size_alloc}/{info.size_free}")
    for name, buf in freeable.items():
        expected = buf if isinstance(buf, int) else buf.mpi_buffer.size_free  # a freed tangent: its hint bytes
        if _at(inputs.get(name, 0), hints) != expected:
            return f"input {name}: its size expression gives {_at(inputs.get(name, 0), hints)} bytes at the hints, " \
                   f"Inductor's figure {expected}"
    return SymbolicSizes(sizes, inputs, hints, ranges)


def input_storage(graph: Graph) -> dict[str, int | str]:
    """What each input ``graph`` frees returns at its ``del``, by name: its storage's bytes
    (:func:`~reorder.inductor.generated_code.storage_expr`, as the reader of the generated code counts them), read
    from the graph Inductor is compiling, as a size of ``graph`` (a number, or an expression's text in its
    symbols). Inductor's estimate, and so ``graph``, counts the extent the input's last read covers, which can be
    more or less than its storage. An input that is not a tensor, or whose expression ``graph`` cannot evaluate,
    is left out: it keeps the estimate's size."""
    from torch._inductor import ir
    from torch._inductor.virtualized import V

    inputs, found = V.graph.graph_inputs, {}
    for b, name in enumerate(graph.buffer_names):
        value = inputs.get(name)
        if not (graph.is_input[b] and graph.freeable[b] and isinstance(value, ir.TensorBox)):
            continue
        expr = storage_expr(value)
        if not graph.is_symbolic:
            found[name] = hint_bytes(expr)
            continue
        size = _text(expr)
        try:
            graph.input_size(name, size)
        except GraphError:
            continue
        found[name] = size
    return found


def _at(expr, hints: dict[str, int]) -> int:
    """An Inductor size expression's value at ``hints`` (by symbol name)."""
    if isinstance(expr, int):
        return expr
    import sympy

    return int(expr.xreplace({s: sympy.Integer(hints[str(s)]) for s in expr.free_symbols}))


@functools.lru_cache(maxsize=4096)
def _text(expr) -> int | str:
    """A size for a spec: the bytes of a constant, the printed expression otherwise (read by our own parser).
    Remembered by expression: printing one takes sympy most of a millisecond, and a graph's buffers share a few
    sizes, which every conversion of it (the guard's, the pass's, with the tangents freed) prints again."""
    return expr if isinstance(expr, int) else int(expr) if expr.is_number else str(expr)


def graph_from_scheduler(nodes: list, name: str = "graph", scheduler=None, free_tangents: bool = False,
                         owned: Collection[str] = ()) -> tuple[Graph, SchedulerState]:
    """Our :class:`Graph` of Inductor's (fused) scheduler nodes, in their order, and Inductor's state for them.

    ``free_tangents``: also model the graph's tangents, and the inputs named in ``owned``, as freed after their
    last reader (:func:`freed_tangents`); by default the graph is Inductor's model exactly.
    """
    from torch._inductor.dependencies import WeakDep
    from torch._inductor.ir import MultiOutputLayout

    state = scheduler_state(nodes, scheduler)
    tangents = freed_tangents(nodes, state.graph_inputs, owned) if free_tangents else {}
    freeable = {**state.freeable, **tangents}
    try:
        symbolic = symbolic_sizes(nodes, state, freeable)
    except Exception as exc:  # noqa: BLE001 - the graph is still Inductor's at its hints
        symbolic = f"its sizes could not be made expressions ({type(exc).__name__}: {exc})"
    if isinstance(symbolic, str):
        state.not_symbolic, symbolic = symbolic, None
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
            if symbolic:
                alloc, free = symbolic.buffers[b]
                outputs.append(BufferSpec(b, size=0 if renamed or b in parents else _text(free if parent else alloc),
                                          alias_of=alias, parent=parent, size_alloc=_text(alloc), size_free=_text(free)))
                continue
            outputs.append(BufferSpec(
                b, size=0 if renamed or b in parents else max(info.size_alloc, info.size_free),
                alias_of=alias, parent=parent, size_alloc=info.size_alloc, size_free=info.size_free,
            ))
        after = [a for a in dict.fromkeys(after) if a != node.get_name()]
        specs.append(NodeSpec(node.get_name(), outputs, reads=list(dict.fromkeys(reads)), after=after))
    if symbolic:
        inputs = [InputSpec(b, _text(symbolic.inputs.get(b, 0))) for b in freeable]
    else:
        inputs = [InputSpec(b, tangents[b] if b in tangents else fb.mpi_buffer.size_free) for b, fb in freeable.items()]
    outputs = [b for b in state.graph_outputs if b in producer or b in freeable]
    if symbolic:
        return build_graph(specs, inputs, outputs, name=name, size_hints=symbolic.hints,
                           size_ranges=symbolic.ranges), state
    return build_graph(specs, inputs, outputs, name=name), state


