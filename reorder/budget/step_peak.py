"""The estimated peak of a training step under a partition: its forward and backward as scheduler graphs.

A partition (:class:`~reorder.budget.partition.Partition`) makes two
programs, and the step's peak is the higher of their peaks, in bytes above
what was live before the step (parameters and the batch cost nothing):

* the **forward** runs its nodes; the values it saves and its outputs are
  graph outputs, never freed, so they accumulate to its end;
* the **backward** starts with the saved values and the tangents live, frees
  each after its last reader (Inductor's backward deletes its inputs as they
  die, and the autograd engine hands it the tangents), and allocates the
  gradients, which outlive it.

Each program becomes a :class:`~reorder.graph.Graph` at the level of fused
kernels: a pointwise node whose readers can all take it into their kernels
(the ``fusible`` flag) gets no buffer, and its readers read what it read;
anything a matrix product, convolution, attention or any other non-fusible
node reads is materialised, and so are the programs' outputs, and, on the
CPU, a value whose code calls a heavy op that two nodes read where one of
them runs after a node that cannot fuse (a matrix product) that the other
feeds (:func:`_stored_on_reuse`,
Inductor's ``should_realize_on_reuse``; its other rules, more than four
buffers read or a long computation, are not modelled). Views share
their base's storage (aliases), elements of a multi-output node are its
children. Each program's graph is Inductor's model of it (what
``torch/_inductor/memory.py`` estimates); its peak is what Inductor's
generated code allocates for the order judged
(:class:`~reorder.budget.allocation_model.AllocationModel`): a kernel Inductor
generates writes its output into an input that dies there when the sizes
match (in-place update), and a dead buffer's storage goes to a later buffer
of its size (the reuse pool). Storage can be handed on when the program
allocated it, or when it is a donated buffer (a saved value the backward
owns, ``torch._functorch.config.donated_buffer``). An extern kernel's
scratch adds to its step: the node's ``scratch``, or its
``scratch_channels_last`` when the program runs a node that sets
channels-last (a program that runs a convolution is laid out channels-last
by Inductor, a backward that recomputes none is not). In a program that is
not channels-last, the operands a kernel's lowering copies into another
stride order (``copied``) are copied by a node of their own just before it,
where their layout is fixed (:func:`_layout_fixed`): the copy's source can
die there, before the kernel runs.

Each program is judged as the code compiled for it runs: in the order
Inductor lists its nodes (the forward in the joint graph's order, the
backward as Inductor reorders it to mimic the autograd engine,
:func:`autograd_order`: a recomputed node just before its first use), or in
the order the reorder pass puts it in, whichever allocates less (the
``methods``, LPMF, BFS and DFS by default, in Inductor's model:
:func:`judged_peak`). Inductor's own pass and ours keep the listed order
only where no method's order is lower, and ours compares the orders by
what their generated code allocates. A recomputing backward gains most:
in the listed order a recomputed value is held from its first reader to
its last, across the backward's peak, where the pass runs its readers
together (ResNet's backward under Inductor's 0.5 partition: 3,949,016 B
in the listed order, 3,027,184 B as compiled). Fused kernels cannot always
follow an order of the finer nodes here, so the estimate can be below the
compiled code's, as docs/measured.md shows row by row.

A step compiled in several regions (graph breaks) holds what earlier
regions saved. A region that runs several times
a step before its backward (a compile per decoder layer) holds what its
other calls saved while the last one runs, forward and backward; as the
backwards run in reverse, each call's saved values go and its parameters'
gradients stay, so the first call's backward runs beside the other calls'
gradients. Eager code around the compiled region (a loss computed after the
compiled model, the layers a per-layer compile leaves eager) holds memory
of its own, in three phases that :func:`reorder.measure.measure` tells
apart: while the compiled forwards run, between the last forward and the
first backward (when every call's saved values are held), and while the
compiled backwards run. :class:`Held` is all of that, and
:func:`step_total` the one formula that adds it to a region's two programs.

This is a model of fused kernels, not Inductor's scheduler itself; how far it
is from the allocator's real peak is measured on the real-model benchmark
(docs/measured.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..graph import plain_graph
from ..schedulers import INDUCTOR_METHODS, reorder_for_peak_memory
from .allocation_model import AllocationModel
from .partition import Partition
from .step_graph import StepGraph

__all__ = ["ORDER_METHODS", "Held", "StepPeak", "judged_peak", "autograd_order", "donated_values", "free_values",
           "programs_of", "step_peak", "step_total"]

#: The methods whose best order (in Inductor's model) each program is also judged in, the lower peak counting
#: (see the module docstring): Inductor's reorder pass's own.
ORDER_METHODS: tuple[str, ...] = INDUCTOR_METHODS


@dataclass(frozen=True)
class Held:
    """What the step holds beside one compiled region: ``before``, bytes earlier regions saved; ``calls``, how
    many times the region runs a step before its backward (the other calls' saved values are held while the
    last runs); ``outside``, bytes eager code holds outside the compiled graphs ``(while the forwards run,
    between the last forward and the first backward, while the backwards run)``, the last either one amount or
    one per backward call in the order they run, each with what the calls before it output and the step still
    holds (measured: :func:`reorder.measure.outside_held`); ``gradients``, bytes of the parameters' gradients
    one call's backward outputs, which stay while the other calls' backwards run (where the backward's amount
    is one for all calls: measured by call, they are in it, or not, as the step keeps them or not)."""

    before: int = 0
    calls: int = 1
    outside: tuple = (0, 0, 0)
    gradients: int = 0

    def __post_init__(self):
        forward, between, backward = self.outside
        by_call = tuple(backward) if isinstance(backward, (tuple, list)) else backward
        object.__setattr__(self, "outside", (forward, between, by_call))


def step_total(held: Held, saved: int, forward: int, backward: int) -> int:
    """The step's peak from a region's forward and backward peaks (each above what it starts with, the saved
    values included, as :func:`step_peak` judges them) and its saved bytes: the last call's forward beside
    what earlier regions and the other calls saved; every call's saved values held between the phases; a
    call's backward beside the saved values of the calls before it and the gradients of those after it (the
    most at the last call or the first); each with what eager code holds then. Where what is held beside the
    backwards is measured by call (``held.outside[2]`` a tuple, as long as ``held.calls``), each call's backward
    counts its own amount, the gradients of the calls run before it included, beside the saved values of the
    calls still to run; a tuple of another length counts its largest amount beside every call."""
    others = (held.calls - 1) * saved
    during_forward, between, during_backward = held.outside
    if isinstance(during_backward, tuple):
        if len(during_backward) == held.calls:
            backwards = max((held.calls - 1 - k) * saved + beside for k, beside in enumerate(during_backward))
        else:
            backwards = others + max(during_backward)
        backwards += backward
    else:
        backwards = (held.calls - 1) * max(saved, held.gradients) + backward + during_backward
    return held.before + max(others + forward + during_forward, held.calls * saved + between, backwards)


@dataclass(frozen=True)
class StepPeak:
    """Estimated bytes above the step's start: ``peak`` (:func:`step_total`: the higher of the two programs'
    peaks beside what is held, ``held_before``: earlier regions' and the region's other calls' saved values,
    and eager code's bytes), ``forward`` (the forward's peak, saved values accumulating),
    ``backward`` (the backward's, from the saved values and tangents it starts with) and ``saved`` (what the
    forward hands the backward)."""

    peak: int
    forward: int
    backward: int
    saved: int
    held_before: int = 0


def step_peak(graph: StepGraph, partition: Partition, methods: Sequence[str] = ORDER_METHODS,
              held: Held = Held()) -> StepPeak:
    """The step's estimated peak under ``partition``, beside what ``held`` says the step holds (see the module
    docstring)."""
    fw, bw = (judged_peak(program, methods) for program in programs_of(graph, partition))
    saved = partition.saved_bytes
    return StepPeak(step_total(held, saved, fw, bw), fw, bw, saved, held.before + (held.calls - 1) * saved)


def judged_peak(program: AllocationModel, methods: Sequence[str] = ORDER_METHODS) -> int:
    """The peak a program's generated code allocates in the order the reorder pass keeps: the lower of the listed
    order's and, with ``methods``, that of the order they choose in Inductor's model (see the module docstring)."""
    listed = list(range(program.graph.num_nodes))
    peak = program.peak(listed)
    if methods:
        chosen = reorder_for_peak_memory(program.graph, methods, log_level=logging.DEBUG, bound_work=0).order
        if list(chosen) != listed:  # Inductor's pass kept another order: replay it too
            peak = min(peak, program.peak(chosen))
    return peak


def programs_of(graph: StepGraph, partition: Partition) -> tuple[AllocationModel, AllocationModel]:
    """The forward and the backward of ``partition`` as models of the code Inductor will generate for them, each a
    scheduler graph of fused kernels (see the module docstring).

    A primal the step owns (``owned``) is live from the forward's start and freed after its last reader unless
    saved; a saved one is handed to the backward, which frees it after its last reader but never writes into
    it: AOTAutograd donates to the backward only saved values that alias no input or output of the forward.
    """
    free = set(free_values(graph, partition))
    donated = set(donated_values(graph, partition))
    forward_inputs = {v: _Input(0, False, False) if v in free else _Input(graph.bytes[v], True, False)
                      for v in range(graph.num_nodes) if graph.role[v] == "primal"}
    backward_inputs: dict[int, _Input] = {}
    for v in partition.saved:
        s = graph.storage[v]
        backward_inputs[v] = _Input(0, False, False) if v in free else _Input(graph.bytes[s], True, v in donated)
    for v in range(graph.num_nodes):
        if graph.role[v] == "tangent":
            backward_inputs[v] = _Input(graph.bytes[v], True, False)
    forward_outputs = [*graph.forward_outputs, *partition.saved]
    return (_program(graph, f"{graph.name}_forward", partition.forward, forward_inputs, forward_outputs),
            _program(graph, f"{graph.name}_backward", autograd_order(graph, partition.backward), backward_inputs,
                     graph.backward_outputs))


def free_values(graph: StepGraph, partition: Partition) -> list[int]:
    """The programs' inputs that cost the step nothing: primals it does not own, and saved values whose storage
    is one of them (a saved view of a parameter)."""
    free = graph.costs_nothing
    return [v for v in range(graph.num_nodes) if graph.role[v] == "primal" and free[v]] + \
        [v for v in partition.saved if graph.role[v] != "primal" and free[graph.storage[v]]]


def donated_values(graph: StepGraph, partition: Partition) -> list[int]:
    """The saved values the backward owns, so that a kernel may write into them once they die: AOTAutograd
    donates only those that alias no input or output of the forward."""
    returned = {graph.storage[v] for v in graph.forward_outputs}
    return [v for v in partition.saved
            if graph.role[graph.storage[v]] != "primal" and graph.storage[v] not in returned]


def autograd_order(graph: StepGraph, backward: Sequence[int]) -> list[int]:
    """The backward's nodes as Inductor lists them (``reordering_to_mimic_autograd_engine``): from the first node
    that reads a tangent on, each node of the joint order right after what it needs that is not listed yet
    (recomputed forward nodes come just before their first use, not all at the start)."""
    in_backward = set(backward)
    position = {v: k for k, v in enumerate(backward)}
    first = next((k for k, v in enumerate(backward)
                  if any(graph.role[a] == "tangent" for a in graph.args[v])), len(backward))
    listed: set[int] = set()
    order: list[int] = []
    for v in backward[first:]:
        if v in listed:
            continue
        needed, stack = [], [v]
        while stack:
            u = stack.pop()
            if u in listed or u not in in_backward:
                continue
            listed.add(u)
            needed.append(u)
            stack.extend(graph.args[u])
        order.extend(sorted(needed, key=position.__getitem__))
    order.extend(v for v in backward if v not in listed)  # nothing reads a tangent: the joint order
    return order


def _layout_fixed(graph: StepGraph, v: int, inputs: Mapping[int, _Input]) -> bool:
    """Whether value ``v`` reaches a kernel in its program with a layout already fixed, so that Inductor's lowering
    copies it where the kernel asks for another stride order: an input of the program, a view, an element of a
    multi-output node or an extern kernel's output. The program's own pointwise code and reductions are laid
    out as the kernel asks (``FlexibleLayout``), for nothing."""
    return (v in inputs or graph.view_of[v] is not None or graph.element_of[v] is not None
            or not graph.fusible[v])


@dataclass(frozen=True)
class _Input:
    """A program input: its bytes, whether the program frees it, whether a kernel may write into it (donated)."""

    bytes: int
    freeable: bool
    donated: bool


def _program(graph: StepGraph, name: str, runs: Sequence[int], inputs: dict[int, _Input],
             outputs: Sequence[int]) -> AllocationModel:
    """One program: ``runs`` (node ids, in order) reading ``inputs``, keeping ``outputs``, in Inductor's model.

    Inputs of one storage share one buffer, named after the storage's root (a saved view holds its base). Each
    node that gets a buffer writes one, named after it: a view of its base, an element of its multi-output
    node, or a buffer of its bytes. The graph is built from these arrays (:func:`~reorder.graph.plain_graph`):
    the step graph's values hold what :func:`~reorder.graph.build_graph` would check, and a frontier builds
    two programs per candidate.
    """
    in_program = set(runs)
    storage = graph.storage
    kept = {storage[v] for v in outputs if not graph.costs_nothing[storage[v]]}
    needed = _materialised(graph, runs, in_program, kept)
    buffer_of: dict[int, int] = {}  # values with a buffer in this program: its id
    fused_reads: dict[int, tuple[int, ...]] = {}  # values computed inside their readers' kernels: what they read
    buffer_names: list[str] = []
    size: list[int] = []
    producer: list[int | None] = []
    freeable: list[bool] = []
    alias_of: list[int | None] = []
    parent: list[int | None] = []
    input_of: dict[str, int] = {}
    donated: set[str] = set()

    def add_buffer(buffer: str, bytes_: int, made_by: int | None, free: bool, base: int | None = None,
                   whole: int | None = None) -> int:
        buffer_names.append(buffer)
        size.append(bytes_)
        producer.append(made_by)
        freeable.append(free)
        alias_of.append(base)
        parent.append(whole)
        return len(buffer_names) - 1

    for v, given in inputs.items():
        root = storage[v] if storage[v] not in in_program else v
        buffer = graph.node_names[root]
        if buffer not in input_of:
            input_of[buffer] = add_buffer(buffer, given.bytes, None, given.freeable)
        buffer_of[v] = input_of[buffer]
        if given.donated:
            donated.add(buffer)

    channels_last = any(graph.sets_channels_last[v] for v in runs)
    scratch_of = graph.scratch_channels_last if channels_last else graph.scratch
    node_names, declared, generated, scratch = [], [], [], []
    for v in runs:
        reads: list[int] = []
        for a in graph.args[v]:
            if a in buffer_of:
                reads.append(buffer_of[a])
            else:
                reads += fused_reads.get(a, ())
        reads = list(dict.fromkeys(reads))
        base, whole = graph.view_of[v], graph.element_of[v]
        if (base is not None and base not in buffer_of) or (graph.pointwise[v] and base is None and v not in needed):
            fused_reads[v] = tuple(reads)  # fused into its readers (a view of a fused value is fused too)
            continue
        if not channels_last:
            for a, copy_bytes in graph.copied[v]:
                if a in buffer_of and buffer_of[a] in reads and _layout_fixed(graph, a, inputs):
                    copy_name = f"{graph.node_names[a]}_laid_out_for_{graph.node_names[v]}"
                    node_names.append(copy_name)
                    copy = add_buffer(copy_name, copy_bytes, len(node_names) - 1, False)
                    declared.append((buffer_of[a],))
                    generated.append(False)  # a copy into another stride order is never written in place
                    scratch.append(0)
                    reads[reads.index(buffer_of[a])] = copy
        made_by = len(node_names)
        node_names.append(graph.node_names[v])
        if base is not None:
            buffer_of[v] = add_buffer(node_names[-1], 0, made_by, False, base=buffer_of[base])
        elif whole is not None:
            buffer_of[v] = add_buffer(node_names[-1], graph.bytes[v], made_by, False, whole=buffer_of[whole])
        else:
            buffer_of[v] = add_buffer(node_names[-1], graph.bytes[v], made_by, False)
        declared.append(tuple(reads))
        generated.append(graph.fusible[v] and base is None and whole is None)
        scratch.append(scratch_of[v])
    is_output = [False] * len(buffer_names)
    for s in kept:
        if s in buffer_of:
            is_output[buffer_of[s]] = True
    unset = [None] * len(buffer_names)  # every computed buffer costs what its kind implies
    program = plain_graph(name, node_names, buffer_names, size, unset, unset, producer, freeable, is_output,
                          declared, [()] * len(node_names), alias_of, parent)
    return AllocationModel.build(program, generated, donated, scratch, pooled_inputs=True)


def _materialised(graph: StepGraph, runs: Sequence[int], in_program: set[int], kept: set[int]) -> set[int]:
    """Nodes whose value needs a buffer: kept as outputs, stored where two nodes read it
    (:func:`_stored_on_reuse`), or read (through views) by a node that cannot fuse it."""
    needed = set(kept) | _stored_on_reuse(graph, runs, in_program, kept)
    for v in reversed(runs):  # readers come later: a view's need is known before its base's
        if v in needed:
            continue
        for u in graph.users[v]:
            if u in in_program and ((graph.view_of[u] == v and u in needed) or
                                    (graph.view_of[u] != v and not graph.fusible[u])):
                needed.add(v)
                break
    return needed


def _stored_on_reuse(graph: StepGraph, runs: Sequence[int], in_program: set[int], kept: set[int]) -> set[int]:
    """Pointwise nodes whose value Inductor stores in a buffer of its own because two nodes of the program read it
    (directly or through a view) and its code calls a heavy op on the CPU
    (:attr:`~reorder.budget.step_graph.StepGraph.heavy`) or reads more stored values than
    :attr:`~reorder.budget.step_graph.StepGraph.realize_reads` (``StorageBox.should_realize_on_reuse``), where one
    of those readers runs after a node that cannot fuse and that depends on the value, so that they cannot share
    one kernel with it.

    Inductor lowers the program's nodes in order, and a pointwise value not stored by then is computed inside its
    reader, so the reader's code calls what the value's code calls and loads what it loads; a value the program
    keeps, or that a node that cannot fuse it reads, is stored from then on, and its readers' code only loads it. A
    value stored so whose readers all fuse with it into one kernel is never allocated (the ``kernel_local_buffers``
    rule of the compiled code's model), hence the second condition. A recomputing backward stores so, for one, the
    ``tanh`` of a GPT-2 MLP's activation: the activation, which the next layer's recomputed forward reads through a
    matrix product, and the activation's gradient, which runs after it, both read it; and a batch normalisation's
    output, whose code reads five stored values and which the activation after it and, after the convolutions
    that follow, the activation's gradient both read (MobileNetV2's step at 0.397: 1.57 MB its estimate missed)."""
    storage, heavy_code, reused = graph.storage, {}, []
    threshold = graph.realize_reads
    # a pointwise value not stored: the stored values its code loads, up to one more than the threshold (a value
    # that reads more, and every value computed from it, is stored once two nodes read it, whatever else it reads)
    reads: dict[int, set[int]] = {}
    for v in runs:
        if graph.pointwise[v] and graph.view_of[v] is None:
            heavy_code[v] = v not in kept and (graph.heavy[v] or any(heavy_code.get(storage[a], False)
                                                                     for a in graph.args[v]))
            if threshold is not None and v not in kept:
                loaded = reads[v] = set()
                for a in graph.args[v]:
                    inner = reads.get(storage[a])
                    if inner is None:
                        loaded.add(storage[a])
                    else:
                        loaded.update(inner)
                    if len(loaded) > threshold:
                        break
        elif not graph.fusible[v]:
            for a in graph.args[v]:
                heavy_code[storage[a]] = False
                reads.pop(storage[a], None)
        root = storage[v]
        if ((heavy_code.get(root) or len(reads.get(root, ())) > (threshold or 0))
                and sum(u in in_program for u in graph.users[v]) > 1):
            reused.append(root)
            heavy_code[root] = False
            reads.pop(root, None)
    if not reused:
        return set()
    step = {v: t for t, v in enumerate(runs)}
    last_read = {v: max((step[u] for u in graph.users[v] if u in step), default=t) for v, t in step.items()}
    return {v for v in reused if _read_after_a_kernel_it_feeds(graph, runs, step, last_read, v)}


def _read_after_a_kernel_it_feeds(graph: StepGraph, runs: Sequence[int], step: dict[int, int],
                                  last_read: dict[int, int], value: int) -> bool:
    """Whether a node of ``runs`` reads both something computed from ``value`` inside one kernel with it (through
    pointwise nodes and views, not through a reduction, whose value is stored) and something a node that cannot
    fuse made from it: that node runs after the kernel that computes the value and cannot compute it again.
    ``step``: each node's place in ``runs``; ``last_read``: the place of its last reader there (its own if none)."""
    # per node that depends on the value: 1 inside the value's kernel, 2 after a node that cannot fuse read it
    reach: dict[int, int] = {value: 1}
    inside_until = last_read[value]  # no node after the last reader of a node inside the kernel reads one
    for t in range(step[value] + 1, len(runs)):
        if t > inside_until:
            return False
        u = runs[t]
        levels = {reach.get(a, 0) for a in graph.args[u]} - {0}
        if levels == {1, 2}:
            return True
        if 2 in levels or (levels and not graph.fusible[u]):
            reach[u] = 2
        elif levels and not graph.reduction[u]:
            reach[u] = 1
            inside_until = max(inside_until, last_read[u])
    return False
