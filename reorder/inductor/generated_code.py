"""What a compiled graph's generated code allocates, read from the wrapper's own lines as plain events.

Inductor's Python wrapper (``torch/_inductor/codegen/wrapper.py``) says every
allocation of a compiled graph as a line, and once its memory planning has
run (``memory_plan_reuse``: which dead buffer each new one takes over) the
lines are the code that runs:

* ``AllocateLine``: ``empty_strided``, the storage of one buffer (``allocate``);
* ``ReuseLine``: a buffer takes over a dead one's storage, nothing allocated
  (``reuse``; in-place writes are such lines too, also over a graph input);
* ``FreeIfNotReusedLine`` (unless its storage was taken over) and
  ``FreeLine``: ``del``, the storage goes when its last name does (``free``);
  a ``FreeLine`` of a graph input drops the graph's reference to it (``free``
  with ``input``);
* ``ExternKernelAllocLine``: an extern kernel returns a new tensor
  (``extern``), and ``MultiOutputLine`` the elements of a kernel that returns
  several (``element``); ``ExternKernelOutLine`` and the fallback lines run an
  extern kernel into buffers already allocated (``call``);
* the pool lines of ``slab=True`` (``AllocFromPoolLine`` first and
  ``DeallocFromPoolLine`` last of a pool): the pool's storage (``allocate`` and
  ``free`` of the pool).

On the CPU the C++ backend gathers consecutive kernels into one group and
emits the frees of the buffers that died inside it only when the group is
flushed: those ``del`` lines then stand after the group, so reading the lines
in order gives what the code does, with no rule of ours. Steps are counted as
Inductor counts them for its own pools: one per batch of planning lines.

One kind of line does not stand where its storage changes: a kernel that
returns several tensors returns them in one tuple (``buf11 = kernel(...)``),
and the wrapper takes each out where the element's own node runs
(``buf12 = buf11[0]``, possibly many kernels later) and deletes the tuple
after the last. Every element exists from the call, and one deleted while
the tuple lives (``del buf12`` before ``del buf11``) keeps its storage until
the tuple goes. The reader says so: an element's event follows its kernel's
call, and its free moves to the tuple's ``del`` (on a Mixtral backward an
order that took a weight gradient out late kept a 524,288 B input gradient
deleted before it allocated through the next kernel).

:func:`read_generated` turns the lines into a :class:`GeneratedCode`; two
consumers fold it: the slab (:mod:`~reorder.inductor.slab`: the allocations
it leaves out of its pools, as records over steps) and the budget's check on
the compiled graphs (:mod:`~reorder.inductor.compiled_budget`: the bytes,
through :meth:`GeneratedCode.replay`). What the lines cannot say is what an
extern kernel allocates and frees inside itself (oneDNN's convolutions
reorder their operands): the replay takes it per kernel from the caller
(``scratch``, by the fx node names the kernel was lowered from).

Whether a ``del`` of a graph input returns its storage depends on who else
holds it, which the lines do not say: the replay is told which inputs the
code owns. By Inductor's names (:func:`freed_in_a_step`), the caller holds
parameters and user inputs (``primals_*``, ``arg*``) and random-number
states, and a backward's saved activations and its tangents are dropped for
good (Inductor's own model keeps tangents,
:func:`~reorder.inductor.slab.freed_by_graph`); but a ``primals_*`` input of a
backward can be a copy the forward made (a parameter or the batch laid out
channels-last for a convolution), which only the partition knows
(:func:`~reorder.budget.step_peak.free_values`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from ..sweep import live_bytes, peak_of

__all__ = ["AllocationEvent", "GeneratedCode", "Replay", "freed_in_a_step", "hint_bytes", "is_foreign_call",
           "read_generated", "storage_expr"]

#: Graph inputs the caller holds: a ``del`` in the generated code frees none of their storage.
HELD_BY_CALLER = ("primals_", "arg", "fwd_rng_state", "bwd_rng_state")


def freed_in_a_step(name: str) -> bool:
    """Whether a graph input's ``del`` returns its storage in a training step: a backward's saved activations
    and its tangents (autograd hands both over), not what the caller holds (:data:`HELD_BY_CALLER`)."""
    return not name.startswith(HELD_BY_CALLER)


@dataclass(frozen=True)
class AllocationEvent:
    """One wrapper line's effect on storage, in the order the code runs.

    ``kind``: ``allocate``, ``extern``, ``element``, ``reuse``, ``free`` or
    ``call`` (see the module docstring); ``name``: the buffer (for ``reuse``
    the new name, ``reused`` the old one; for ``element``, ``reused`` is the
    kernel that returned it); ``step``: Inductor's planning step;
    ``nbytes``: the storage's bytes at the size hints, ``expr`` as Inductor's
    expression (sympy), for ``allocate``, ``extern``, ``element`` and a freed
    ``input``; ``input``: the buffer is a graph input; ``origins``: for an
    extern kernel (``extern``, ``call``), the fx nodes it was lowered from;
    ``planning``: the line is one of Inductor's memory-planning lines (a
    ``free`` by ``FreeLine`` is not: it runs after its step's kernels);
    ``node``: Inductor's IR node, for the slab's records (not compared).
    """

    kind: str
    name: str
    step: int
    nbytes: int = 0
    reused: str | None = None
    input: bool = False
    origins: frozenset[str] = frozenset()
    planning: bool = True
    expr: Any = field(default=None, compare=False, repr=False)
    node: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Replay:
    """Bytes a :class:`GeneratedCode` holds as it runs: ``start``, those of the inputs it owns; ``peak`` and
    ``end``, the most it holds and what it holds when it returns, ``start`` included (``peak - start`` is what
    the allocator measures above a call's start); ``peak_event``, the index of the event where the peak is
    reached (-1: at the start)."""

    start: int
    peak: int
    end: int
    peak_event: int


@dataclass(frozen=True)
class GeneratedCode:
    """A compiled graph's allocations, read from its wrapper (:func:`read_generated`).

    ``events`` in running order; ``horizon``: one past the last step;
    ``foreign_steps``: the steps where code other than Inductor's kernels runs
    (extern kernels and fallbacks, which may allocate inside themselves);
    ``inputs``: each graph input's storage bytes at the hints; ``outputs``:
    the buffers it returns (every other name it still holds dies when it
    returns, with or without a ``del`` line; None: not known, nothing dies).
    """

    graph: str
    events: tuple[AllocationEvent, ...]
    horizon: int
    foreign_steps: tuple[int, ...]
    inputs: Mapping[str, int]
    outputs: frozenset[str] | None = None

    def plain(self) -> "GeneratedCode":
        """The same events without Inductor's objects (IR nodes, sympy sizes): what a session keeps."""
        events = tuple(replace(e, node=None, expr=None) for e in self.events)
        return replace(self, events=events, inputs=dict(self.inputs))

    def owned_in_a_step(self) -> list[str]:
        """The inputs whose storage the code returns with its ``del`` in a training step (:func:`freed_in_a_step`):
        what :meth:`replay` counts for a comparison with the allocator's figures of one call."""
        return [name for name in self.inputs if freed_in_a_step(name)]

    def replay(self, owned: Sequence[str] = (), scratch: Mapping[str, int] | None = None) -> Replay:
        """The bytes the code holds, event by event, above what it holds of no input.

        ``owned``: the graph inputs whose storage the step pays for and the
        code holds the last reference to (live from the start, passed on by a
        reuse, gone at the ``del`` of their last name; :meth:`owned_in_a_step`
        by Inductor's names, or the partition's knowledge of which inputs are
        copies the forward made);
        ``scratch``: bytes an extern kernel allocates and frees inside itself,
        by the fx node names it was lowered from, added while it runs, on top
        of what it returns (a kernel that returns several tensors makes all
        of them as it runs: :func:`read_generated` places their events right after its call, and the ``del``
        of one at its tuple's where the tuple still holds it).
        """
        scratch = scratch or {}
        elements: dict[str, list[AllocationEvent]] = {}  # an extern kernel's name -> the elements it returns
        for event in self.events:
            if event.kind == "element" and event.reused is not None:
                elements.setdefault(event.reused, []).append(event)
        held = {name: self.inputs[name] for name in owned if name in self.inputs}  # live name -> its storage's bytes
        start = sum(held.values())
        changes: list[tuple[int, int]] = []  # (1 + event index, bytes): step 0 is the start
        during = [0]
        returned: set[str] = set()
        for k, event in enumerate(self.events, 1):
            made = []
            if event.kind in ("allocate", "extern") or (event.kind == "element" and event.name not in returned):
                made = [event]
            if event.kind == "extern":  # the kernel returns its elements' storage: they exist from here
                made += elements.get(event.name, [])
                returned.update(e.name for e in made)
            for allocated in made:
                held[allocated.name] = allocated.nbytes
                changes.append((k, allocated.nbytes))
            if event.kind == "reuse" and event.reused in held:
                held[event.name] = held.pop(event.reused)
            elif event.kind == "free" and event.name in held:
                changes.append((k, -held.pop(event.name)))
            during.append(sum(scratch.get(origin, 0) for origin in event.origins)
                          if event.kind in ("extern", "call") else 0)
        if self.outputs is not None:  # the return drops every name the code still holds but returns
            changes += [(len(during), -nbytes) for name, nbytes in held.items() if name not in self.outputs]
            during.append(0)
        live = live_bytes(len(during), changes, start)
        peak, step = peak_of(live, during)
        return Replay(start, peak, live[-1], step - 1)


def read_generated(lines: Sequence, graph: str) -> GeneratedCode:
    """A wrapper's planned ``lines`` as a :class:`GeneratedCode` (after Inductor's memory planning, or ours; a
    pool line whose pool is not placed yet is skipped)."""
    from torch._inductor import ir
    from torch._inductor.codegen import memory_planning
    from torch._inductor.codegen import wrapper as codegen
    from torch._inductor.virtualized import V

    foreign = (codegen.ExternKernelAllocLine, codegen.ExternKernelOutLine, codegen.ExternKernelMultiOutLine,
               codegen.IndexPutFallbackLine, codegen.ScatterFallbackLine)

    def sized(node) -> tuple[int, Any]:
        expr = storage_expr(node)
        return hint_bytes(expr), expr

    def origins(node) -> frozenset[str]:
        return frozenset(origin.name for origin in getattr(node, "origins", ()))

    events: list[AllocationEvent] = []
    held_by_tuple: dict[str, str] = {}  # a live name of an element's storage -> the kernel whose tuple holds it
    live_tuples: set[str] = set()  # the multi-output kernels whose tuple is not deleted yet
    deferred: dict[str, list[AllocationEvent]] = {}  # a live tuple -> the frees of elements deleted before it

    def free(event: AllocationEvent) -> None:
        """``event``, a ``del``, where it returns storage: an element's while its tuple lives returns none, so
        it is moved to the tuple's own ``del``, and the tuple's ``del`` brings those with it."""
        kernel = held_by_tuple.pop(event.name, None)
        if kernel in live_tuples:
            deferred.setdefault(kernel, []).append(event)
            return
        events.append(event)
        if event.name in live_tuples:
            live_tuples.discard(event.name)
            events.extend(replace(e, step=event.step, planning=event.planning) for e in deferred.pop(event.name, ()))

    step, foreign_steps, previous_was_planning = 0, set(), False
    for line in lines:
        is_planning = isinstance(line, codegen.MemoryPlanningLine)
        if is_planning and not previous_was_planning:
            step += 1
        previous_was_planning = is_planning
        if isinstance(line, foreign) or (isinstance(line, str) and is_foreign_call(line)):
            foreign_steps.add(step)
        if isinstance(line, (memory_planning.AllocFromPoolLine, memory_planning.DeallocFromPoolLine)):
            pool = getattr(getattr(line.group, "allocation", None), "pool", None)
            if pool is None:
                continue
            if isinstance(line, memory_planning.AllocFromPoolLine) and line.is_first_pool_usage:
                nbytes = hint_bytes(pool.nbytes)
                events.append(AllocationEvent("allocate", pool.name, step, nbytes, expr=pool.nbytes))
            elif isinstance(line, memory_planning.DeallocFromPoolLine) and line.is_last_pool_usage:
                events.append(AllocationEvent("free", pool.name, step))
        elif isinstance(line, codegen.AllocateLine):
            nbytes, expr = sized(line.node)
            events.append(AllocationEvent("allocate", line.node.get_name(), step, nbytes, expr=expr, node=line.node))
        elif isinstance(line, codegen.ExternKernelAllocLine):
            nbytes, expr = sized(line.node)
            events.append(AllocationEvent("extern", line.node.get_name(), step, nbytes, origins=origins(line.node),
                                          expr=expr, node=line.node))
        elif isinstance(line, codegen.MultiOutputLine):
            node = V.graph.get_buffer(line.result_name)
            nbytes, expr = sized(node)
            events.append(AllocationEvent("element", line.result_name, step, nbytes, reused=line.arg_name, expr=expr,
                                          node=node))
            live_tuples.add(line.arg_name)
            held_by_tuple[line.result_name] = line.arg_name
        elif isinstance(line, (codegen.ExternKernelOutLine, codegen.ExternKernelMultiOutLine)):
            events.append(AllocationEvent("call", line.node.get_name(), step, origins=origins(line.node)))
        elif isinstance(line, codegen.ReuseLine):
            events.append(AllocationEvent("reuse", line.reused_as.get_name(), step, reused=line.node.get_name(),
                                          node=line.reused_as))
            if line.node.get_name() in held_by_tuple:  # the new name shares the tuple's element storage
                held_by_tuple[line.reused_as.get_name()] = held_by_tuple.pop(line.node.get_name())
        elif isinstance(line, codegen.FreeIfNotReusedLine):
            if not line.is_reused:
                free(AllocationEvent("free", line.node.get_name(), step, node=line.node))
        elif isinstance(line, codegen.FreeLine):
            is_input = isinstance(line.node, ir.InputBuffer)
            nbytes, expr = sized(line.node) if is_input else (0, None)
            free(AllocationEvent("free", line.node.get_name(), step, nbytes, input=is_input, planning=False,
                                 expr=expr, node=line.node))
    events = _made_by_their_kernel(events)
    inputs = {}
    for name, value in V.graph.graph_inputs.items():
        if isinstance(value, ir.TensorBox):
            inputs[name] = sized(value)[0]
    return GeneratedCode(graph, tuple(events), step + 1, tuple(sorted(foreign_steps)), inputs,
                         frozenset(V.graph.get_output_names()))


def _made_by_their_kernel(events: list[AllocationEvent]) -> list[AllocationEvent]:
    """``events`` with each multi-output element where its storage is made: right after its kernel's call
    (``buf11 = kernel(...)`` returns them all), at its step, not where the wrapper takes it out of the tuple
    (``buf12 = buf11[0]``, which may come many kernels later)."""
    called = {e.name: e for e in events if e.kind == "extern"}
    elements: dict[str, list[AllocationEvent]] = {}
    for e in events:
        if e.kind == "element" and e.reused in called:
            elements.setdefault(e.reused, []).append(replace(e, step=called[e.reused].step))
    ordered = []
    for e in events:
        if not (e.kind == "element" and e.reused in called):
            ordered.append(e)
        if e.kind == "extern":
            ordered += elements.get(e.name, [])
    return ordered


def is_foreign_call(line: str) -> bool:
    """Whether a raw wrapper line may call code other than Inductor's kernels (which allocate nothing)."""
    text = line.strip()
    return bool(text) and "(" in text and not text.startswith(("assert", "del ", "#"))


def hint_bytes(nbytes) -> int:
    """Bytes at the size hints (``optimization_hint``, as Inductor sizes its own pools)."""
    from torch._inductor.virtualized import V

    return int(V.graph.sizevars.optimization_hint(nbytes, fallback=0))


def storage_expr(node):
    """Bytes of ``node``'s storage as Inductor's expression (0 for a multi-output kernel's tuple: its elements
    carry them)."""
    import sympy
    from torch._inductor import ir

    layout = node.maybe_get_output_spec()
    if not isinstance(layout, ir.Layout):
        return sympy.Integer(0)
    return sympy.sympify(layout.storage_size() * node.get_dtype().itemsize)
