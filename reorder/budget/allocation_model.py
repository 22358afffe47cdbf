"""The model of what Inductor's generated code allocates for an order, before the code exists.

Inductor's estimate (``torch/_inductor/memory.py``, :func:`~reorder.timeline.estimate_peak_memory`)
counts every buffer from its producer to its last reader. The code Inductor
generates allocates less, in three ways (``torch/_inductor/codegen/wrapper.py``
and ``Scheduler.decide_inplace_update``, torch 2.13):

* **in place**: a kernel Inductor generates writes its output into a buffer
  it reads and is the last reader of, when the output needs between 95% and
  100% of that buffer's storage; the output allocates nothing;
* **reuse pool**: a buffer that dies goes into a pool keyed by its storage
  size, dtype, device, alignment and stream (``buffer_reuse_key``; its bytes
  alone where the model is not told the keys); a later allocation of the same key takes the
  most recently pooled one, and between the free and
  the reuse the storage stays allocated. Inductor takes a reuse when the
  allocation comes right after the free, or when holding the storage
  between them keeps its own estimate (``memory.py``'s live bytes per node,
  :func:`~reorder.timeline.estimate_peak_memory` here) at or under that
  estimate's peak, and then counts the held storage in its estimate
  (``AllocateLine.should_reuse_buffer``, ``EfficientPeakEstimate``); a
  refused reuse goes back to the pool and the new buffer is allocated.

* **kernel groups** (CPU): Inductor's C++ backend gathers consecutive
  kernels it generates into one kernel group and frees the buffers that died
  in it only when the group is flushed (``Scheduler._codegen``: before the
  next extern kernel, or at the end; ``CppScheduling.flush``), so those
  buffers stay allocated through the whole group and go into the pool only
  after it. Triton frees after every kernel.
* **multi-output kernels**: an extern kernel that returns several tensors
  returns them in one tuple, which the wrapper names (``buf11 = ...``) and
  takes each element out of where the element's own node runs
  (``buf12 = buf11[0]``), deleting the tuple after its last element is taken
  out. The tuple holds every element's storage until then, so an element
  is freed at the later of its own last reader and its kernel's last
  element taken out; Inductor's estimate frees it at its own last reader.
  On a Mixtral backward, an order that took a weight gradient out of its
  tuple late kept the input gradient taken out before it 524,288 B longer
  than the estimate's timeline said.
* **inputs' storage**: an input the program frees (a backward's saved
  value, a tangent) returns its whole storage at its ``del``, where
  Inductor's estimate counts the extent its last read covers. Built from
  scheduler nodes, the model is told each such input's storage
  (``input_bytes``, read from the graph Inductor compiles). A saved value
  whose last reader loads it as part of a wider gradient (a slice's
  ``sin`` backward into its 256 by 128 input) was counted 131,072 B for
  its 32,768 B; a Mixtral backward's saved expert outputs, views of
  storage twice their extent, 524,288 B for 1,048,576 B: the model put
  its kept order 790,528 B below what its code allocates.

Only buffers the program allocated, and donated inputs (saved values the
backward owns), can be handed on; views and multi-output kernels' tuples cannot,
and their elements only where the compiled graph says the wrapper pools them
(a CPU attention's gradients: pooling none, the model put an order of a
decoder's backward under autocast at 0.4 at 3,249,920 B, where its code
allocates 3,348,096 B; pooling them, it is the code's peak to the byte, and
the order chosen on it allocates 3,171,072 B). A
donated input hands its storage on only in place: the wrapper frees a graph
input with a plain ``del`` that never enters the pool
(``PythonWrapperCodegen.codegen_free``).
A kernel's scratch (what an extern kernel allocates and frees while it
runs) adds to the bytes live during its step and nothing after it.
:class:`AllocationModel` is one graph with what these rules need to know
(which kernels Inductor generates, which buffers may hand on their storage,
each node's scratch, the estimate the wrapper decides its reuses by, the
kernel groups); :meth:`AllocationModel.peak` replays an order under them and
returns the peak of the bytes allocated, the allocator's view of the
program. It is built from a step's program before Inductor lowers anything
(:func:`~reorder.budget.step_peak.programs_of`, which ranks partitions) and
from Inductor's scheduler nodes before its code is generated
(:func:`~reorder.inductor.compiled_budget.compiled_model`, which orders a
budgeted graph). Once the code exists, its own events
(:mod:`~reorder.inductor.generated_code`) say what it allocates, and the
model's peak for the order kept is recorded beside theirs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from typing import Collection, Iterable, Mapping, NamedTuple, Sequence

from ..graph import Graph
from ..sweep import live_bytes, peak_of
from ..timeline import Lifetimes, estimate_peak_memory, lifetimes, lifetimes_rebuilt, timeline_of

__all__ = ["AllocationModel", "KernelSources", "SourcesWithInsertion", "kernel_count", "release_steps",
           "storage_handed_on"]


@dataclass(frozen=True)
class AllocationModel:
    """What the generated code of ``graph`` allocates for any order of its nodes (see the module docstring).

    ``generated[v]``: Inductor generates node ``v``'s kernel (extern kernels
    such as matrix products never write in place); ``reusable[b]``: buffer
    ``b``'s storage may be handed to another buffer once ``b`` dies
    (:func:`storage_handed_on`); ``scratch[v]``: bytes node ``v``'s kernel allocates and frees while it runs,
    its workspace included (none by default); ``decided_by``: the same nodes and buffers as Inductor's estimate
    sees them, when ``graph`` counts them otherwise (parameters at zero bytes, tangents freed): the wrapper
    decides its reuses by Inductor's own estimate, so a reuse it refuses, or takes, must be the one refused or
    taken here (default: ``graph``); ``grouped[v]``: node ``v`` joins the C++ backend's kernel group (a
    generated kernel or a no-op on CPU; an extern kernel flushes it); None: every node frees its dead buffers
    right after it (Triton); ``writable[b]``: the buffers that node making buffer ``b`` may write ``b`` into, where
    Inductor has said so (its scheduler's ``NodeUser.can_inplace``: the kernel reads the buffer at the index it
    writes, so a layout change rules it out; each fused member decides for its own outputs), in the order of
    the member's reads: Inductor writes ``b`` into the first that dies there; None: any buffer a
    generated kernel reads; ``local``: buffers a
    fused kernel makes and uses up inside itself, which Inductor never allocates
    (``Kernel.remove_kernel_local_buffers``), unless one is the first choice of an output it keeps, which is
    written into it: then the local buffer is allocated all the same, and the output takes no dead buffer's
    storage in place (the decoder's backward compiled per layer, at 0.4: a fused kernel's first member's output,
    read only by the second, held 1,396,736 B the model said it reused); ``pooled_inputs``: donated inputs that
    die go into the reuse pool too. The generated code never pools them (its ``del`` of a graph input), but the
    step's programs, which rank partitions before Inductor lowers anything, rank with them pooled: ranked
    without it, ALBERT-MLM's step at 0.974 chose a partition that measured 42.11 MB, above 1.0's 41.08 MB; the
    benchmark's rows are measured with it. ``reuse_key[b]``: what the wrapper pools buffer ``b``'s storage by,
    where Inductor has said so (``buffer_reuse_key``: its device, dtype, storage size, alignment and stream; a
    dead buffer's storage goes only to a buffer of the same key); None (or a None entry): its bytes alone, among
    the buffers without a key.
    Under ``torch.autocast`` a bfloat16 buffer and a float32 one of as many bytes have two keys: pooled by their
    bytes, the backward of a decoder at 0.4 was modelled 1,095,680 B below what its code allocates, and with the
    keys it is the code's peak to the byte. ``view_of[b]``: the buffer whose storage buffer ``b`` is a view into,
    where Inductor made it so (a ``cat`` on CPU is a ``ConcatKernel`` whose inputs are written straight into
    slices of its output, ``NonOwningLayout``): the view allocates nothing, frees nothing, and neither takes nor
    gives storage through the pool (the wrapper's ``# alias`` line, and a plain ``del``), while the storage it
    views is allocated when its first view is made (``codegen_allocation`` of the viewed buffer) and freed when
    the last of them dies. Inductor's estimate counts each view as a buffer of its own; the decoder's backward
    under ``dynamic=True`` at 0.4, where every rotary embedding's ``cat`` makes two views, was modelled 262,144 B
    above what its code allocates, and the reuses the model gave the views held storage in the estimate the
    wrapper decides by, which refused a reuse the code took.

    ``unaligned``: the buffers Inductor takes as not aligned before any code exists
    (``V.graph.unaligned_buffers``: on the CPU every graph input, and a fallback kernel's output where it reads one
    or may not be aligned), and ``unaligned_key[b]``: what buffer ``b`` is pooled by once it is unaligned too, as
    it is when its kernel writes it in place into an unaligned buffer (``KernelArgs.make_inplace`` adds it to the
    set while the code is generated; the wrapper reads the keys only when it plans its reuses, after that, so the
    key it pools the dead buffer by carries the flag). Only a buffer that dies is pooled by it: an output written
    in place asks the pool for nothing. A backward that writes an output into a donated saved value pools that
    output apart from the aligned buffers of its size, which never take its storage: without the flag the model
    put an order of ALBERT-MLM's backward at 1.0 at 41,080,704 B, 262,144 B above its code, and kept another that
    measured 41.08 MB where that one measures 40.82 MB. Not followed: an output whose first choice is a local
    buffer (allocated all the same, see ``local``) that its own kernel wrote in place into an unaligned one; the
    model takes that output as aligned.
    """

    graph: Graph
    generated: tuple[bool, ...]
    reusable: tuple[bool, ...]
    scratch: tuple[int, ...] | None = None
    decided_by: Graph | None = None
    grouped: tuple[bool, ...] | None = None
    writable: tuple[tuple[int, ...], ...] | None = None
    local: frozenset[int] = frozenset()
    pooled_inputs: bool = False
    reuse_key: tuple[tuple | None, ...] | None = None
    view_of: tuple[int | None, ...] | None = None
    hinted: AllocationModel | None = None
    unaligned: frozenset[int] = frozenset()
    unaligned_key: tuple[tuple | None, ...] | None = None

    @classmethod
    def build(cls, graph: Graph, generated: Sequence[bool], donated: Collection[str] = frozenset(),
              scratch: Sequence[int] | None = None, decided_by: Graph | None = None,
              grouped: Sequence[bool] | None = None, free_inputs: Collection[str] = frozenset(),
              writable: Mapping[str, Collection[str]] | None = None, local: Collection[str] = (),
              pooled_inputs: bool = False, reuse_keys: Mapping[str, tuple] | None = None,
              views: Mapping[str, str] | None = None, unaligned: Collection[str] = (),
              unaligned_keys: Mapping[str, tuple] | None = None,
              input_bytes: Mapping[str, int | str] | None = None,
              pooled_elements: Collection[str] = ()) -> AllocationModel:
        """The model of ``graph`` with the inputs named in ``free_inputs`` at zero bytes (they live before the
        program and after it), the inputs named in ``donated`` free to hand on their storage once they die, each
        node's workspace added to its ``scratch``, and ``writable``, ``local``, ``reuse_keys``, ``views`` (view
        -> the buffer it views, :attr:`view_of`), ``unaligned`` and ``unaligned_keys`` (:attr:`unaligned_key`)
        given by buffer names; ``input_bytes``: the storage each input the program frees returns, by name, where
        the graph counts Inductor's estimate of it (:meth:`~reorder.graph.Graph.with_input_bytes`; ``decided_by``
        then keeps the estimate's sizes, which the wrapper decides its reuses by); ``pooled_elements``: the
        multi-output kernels' elements whose storage the wrapper pools once they die (:func:`storage_handed_on`:
        the step's programs, whose kernels Inductor has not lowered yet, name none)."""
        if input_bytes:
            stored = graph.with_input_bytes(input_bytes)
            if stored is not graph and decided_by is None:
                decided_by = graph.with_free_inputs(free_inputs)
            graph = stored
        graph = graph.with_free_inputs(free_inputs)
        during = tuple(w + (scratch[v] if scratch is not None else 0) for v, w in enumerate(graph.workspace))
        index = graph.buffer_index
        into = None if writable is None else tuple(tuple(index[x] for x in writable.get(name, ()) if x in index)
                                                   for name in graph.buffer_names)
        keys = None if reuse_keys is None else tuple(reuse_keys.get(name) for name in graph.buffer_names)
        keys_unaligned = None if unaligned_keys is None else tuple(unaligned_keys.get(name)
                                                                   for name in graph.buffer_names)
        view_of = None
        if views and any(name in index and views[name] in index for name in views):
            view_of = tuple(index.get(views[name]) if name in views else None for name in graph.buffer_names)
        return cls(graph, tuple(generated), storage_handed_on(graph, donated, pooled_elements),
                   during if any(during) else None,
                   decided_by, tuple(grouped) if grouped is not None else None, into,
                   frozenset(index[b] for b in local if b in index), pooled_inputs, keys, view_of,
                   unaligned=frozenset(index[b] for b in unaligned if b in index), unaligned_key=keys_unaligned)

    def at(self, point: Mapping[str, int]) -> AllocationModel:
        """This model with a symbolic graph's sizes at ``point`` (:meth:`~reorder.graph.Graph.at`); each kernel's
        scratch stays as measured. A model of constant sizes is its own value."""
        if not self.graph.is_symbolic:
            return self
        decided_by = self.decided_by.at(point) if self.decided_by is not None else None
        return dataclasses.replace(self, graph=self.graph.at(point), decided_by=decided_by,
                                   hinted=self.hinted or self)

    def peak(self, order: Sequence[int], check: bool = True) -> int:
        """The peak bytes the generated code allocates when it runs ``order`` (``check=False``: trust that it is
        valid, :func:`~reorder.timeline.lifetimes`)."""
        return peak_of(*self.live(order, check))[0]

    def kernels(self, order: Sequence[int]) -> int | None:
        """The C++ kernels the generated code of ``order`` builds: one per kernel group, a run of consecutive
        grouped nodes with at least one kernel Inductor generates (a run of no-ops builds nothing; an extern
        kernel ends the run). Inductor builds a kernel group as one source, compiled on its own, so a compile's
        seconds beyond our stages grow with this count; two groups of the same source (repeated layers) are
        built once, which this count does not know (:class:`KernelSources` counts the distinct ones). None
        without kernel groups (Triton)."""
        if self.grouped is None:
            return None
        return kernel_count("".join(self.kinds[v] for v in order))

    @cached_property
    def kinds(self) -> str:
        """Per node, a letter: ``E`` an extern kernel (it ends a kernel group), ``G`` a kernel Inductor generates
        into the group, ``N`` a no-op in the group; empty without kernel groups."""
        if self.grouped is None:
            return ""
        return "".join("E" if not grouped else "G" if generated else "N"
                       for grouped, generated in zip(self.grouped, self.generated))

    def live(self, order: Sequence[int], check: bool = True) -> tuple[list[int], list[int]]:
        """Per step of ``order`` (and one after the last): the bytes allocated, and the bytes held only while the
        step runs (its kernel's scratch). At a point of a symbolic graph's sizes (:meth:`at`), storage is handed
        on as the model at the size hints decides: Inductor decides its in-place writes and reuses once, at the
        hints, and its code makes them at every size."""
        released, handed, start, end = self._replayed(order, check)
        rules, is_output = self._rules, self.graph.is_output
        allocates, frees = list(rules.allocates), list(rules.frees)
        for b, taken in handed:  # b lives in taken's storage: nothing allocated, freed when b dies
            allocates[b] = 0
            frees[b] = 0 if is_output[b] else frees[taken]
            frees[taken] = 0
        live = live_bytes(self.graph.num_nodes + 1, _changes(start, end, released, allocates, frees))
        during = [self.scratch[v] for v in order] + [0] if self.scratch is not None else None
        return live, during

    def reuses(self, order: Sequence[int]) -> dict[str, str]:
        """The storage the generated code of ``order`` hands on: each buffer that lives in a dead buffer's storage
        (its kernel writes it there in place, or the reuse pool gives it), with that buffer, by name, as the
        wrapper's reuse lines name them (``ReuseLine``)."""
        _, handed, _, _ = self._replayed(order, True)
        names = self.graph.buffer_names
        return {names[b]: names[taken] for b, taken in handed}

    def _replayed(self, order: Sequence[int], check: bool
                  ) -> tuple[list[int], list[tuple[int, int]], Sequence[int], Sequence[int | None]]:
        """The steps that release each step's dead buffers, then what :meth:`_handed_on` says for ``order`` (the
        model at the hints' answer where this one is at another point of the sizes)."""
        life = lifetimes(self.graph, order, check)
        released = release_steps(order, self.grouped)
        if self.hinted is None:
            return (released, *self._handed_on(order, life, released, check))
        return (released, *self.hinted._handed_on_again(order, life, released))

    def _handed_on_again(self, order: Sequence[int], life: Lifetimes, released: Sequence[int]
                         ) -> tuple[list[tuple[int, int]], Sequence[int], Sequence[int | None]]:
        """:meth:`_handed_on`, kept for the last order asked: the models at a symbolic graph's points ask their
        model at the hints for one order after another."""
        key = tuple(order)
        if self._last_handed_on[0] != key:
            self._last_handed_on[:] = [key, self._handed_on(order, life, released, False)]
        return self._last_handed_on[1]

    @cached_property
    def _last_handed_on(self) -> list:
        return [None, None]

    def _handed_on(self, order: Sequence[int], life: Lifetimes, released: Sequence[int], check: bool
                   ) -> tuple[list[tuple[int, int]], Sequence[int], Sequence[int | None]]:
        """Which dead buffers' storage in-place writes and the reuse pool hand to which new buffers (see the
        module docstring): the pairs (new buffer, the dead one whose storage it takes) in the order they are
        decided, and per buffer the steps its storage is allocated and dies at (its lifetime's, but for storage
        that views are made into: :attr:`view_of`); ``life``: the lifetimes of ``order`` on :attr:`graph`."""
        graph, rules, local = self.graph, self._rules, self.local
        if self.decided_by is None:  # Inductor's estimate, which the wrapper decides its reuses by
            judged = timeline_of(graph, life)
        elif self._lifetime_source is None:
            judged = estimate_peak_memory(self.decided_by, order, check)
        else:
            judged = timeline_of(self.decided_by, lifetimes_rebuilt(self.decided_by, life, self._lifetime_source))
        end = life.end
        start, ends, early = life.start, end, {}
        if rules.viewed:  # storage viewed into is allocated with its first view, freed with its last
            start, ends = list(start), list(end)
            for t, (views, entry) in rules.viewed.items():
                first = min(start[t], *(start[x] for x in views))
                if first < start[t]:
                    start[t] = first
                    if entry is not None:  # it takes storage where it is allocated
                        early.setdefault(first, []).append(entry)
                ends[t] = None if any(end[x] is None for x in (t, *views)) else max(end[x] for x in (t, *views))
        if rules.elements:  # a multi-output kernel's tuple holds its elements until its last is taken out
            ends = list(ends)
            for b, kernel in rules.elements:
                if ends[b] is not None:
                    ends[b] = None if end[kernel] is None else max(ends[b], end[kernel])
        estimated = list(judged.live[:graph.num_nodes])  # Inductor's estimate per step, with the reuses' holds
        judged_peak = judged.peak
        pairs: list[tuple[int, int]] = []
        handed = [False] * graph.num_buffers  # its storage went on to another buffer
        pool: dict[int, list[int]] = {}  # storage size -> buffers that died, most recent last
        dying: list[list[int]] = [[] for _ in range(graph.num_nodes)]
        for b in rules.pooled:
            if end[b] is not None:
                dying[released[end[b]]].append(b)
        pooled_by, pooled_unaligned_by = rules.pooled_by, rules.pooled_unaligned_by
        unaligned = set(self.unaligned) if pooled_unaligned_by is not None else None
        for step, v in enumerate(order):
            for b, size, key, writes_into in chain(early.get(step, ()), rules.placed[v]) if early else rules.placed[v]:
                if start[b] != step:
                    continue  # allocated earlier, with a view into it
                taken = None
                for x in writes_into:  # the first that dies here; a local one is kept for it, allocated anew
                    if end[x] == step and not handed[x]:
                        taken = None if x in local else x
                        break
                if taken is not None and unaligned is not None and taken in unaligned:
                    unaligned.add(b)  # written in place into unaligned storage: unaligned too
                waiting = pool.get(key) if taken is None else None
                if waiting:
                    first_held = released[end[waiting[-1]]] + 1  # steps first_held .. step - 1 would hold it
                    if first_held >= step or size + max(estimated[first_held:step]) <= judged_peak:
                        taken = waiting.pop()
                        for t in range(first_held, step):
                            estimated[t] += size
                if taken is not None:
                    handed[taken] = True
                    pairs.append((b, taken))
            for x in dying[step]:
                if not handed[x]:
                    pool.setdefault(pooled_unaligned_by[x] if unaligned and x in unaligned else pooled_by[x],
                                    []).append(x)
        return pairs, start, ends

    @cached_property
    def content_digest(self) -> str:
        """A digest of everything the model says (its graphs' :attr:`~reorder.graph.Graph.content_digest` and its
        rules): two models with the same digest allocate the same for every order."""
        content = (self.graph.content_digest, self.decided_by.content_digest if self.decided_by is not None else None,
                   self.generated, self.reusable, self.scratch, self.grouped,
                   self.writable,
                   tuple(sorted(self.local)), self.pooled_inputs, self.reuse_key, self.view_of,
                   self.hinted.content_digest if self.hinted is not None else None,
                   tuple(sorted(self.unaligned)), self.unaligned_key)
        return hashlib.sha256(repr(content).encode()).hexdigest()

    @cached_property
    def _lifetime_source(self) -> tuple[int | None, ...] | None:
        """Per buffer of ``decided_by``, the buffer of :attr:`graph` of its name whose lifetime it has under any
        order (the same producer, readers and output flag), None where its own differs (an input the estimate
        sees unread); None where the two graphs' nodes or ordering constraints differ. :meth:`live` then places
        an order's steps once for both graphs. A backward's tangents (and the owned copies the model frees) are
        absent from the graph of Inductor's estimate, so there every buffer shares the model's lifetime."""
        graph, judging = self.graph, self.decided_by
        if judging is None:
            return None
        if (judging.node_names, judging.preds) != (graph.node_names, graph.preds):
            return None
        index = graph.buffer_index

        def shared(b: int) -> int | None:
            other = index.get(judging.buffer_names[b])
            if other is None or (graph.producer[other], graph.is_output[other], graph.readers[other]) != \
                    (judging.producer[b], judging.is_output[b], judging.readers[b]):
                return None
            return other

        return tuple(shared(b) for b in range(judging.num_buffers))

    @cached_property
    def _rules(self) -> _Rules:
        """What :meth:`_handed_on` needs that no order changes, worked out once per model."""
        graph, reusable = self.graph, self.reusable
        keys = self.reuse_key or (None,) * graph.num_buffers
        view_of = self.view_of or (None,) * graph.num_buffers
        local = self.local | {b for b, viewed in enumerate(view_of) if viewed is not None}  # no storage of its own
        allocates = tuple(0 if b in local else size for b, size in enumerate(graph.size_alloc))
        frees = tuple(0 if graph.is_output[b] or b in local else graph.size_free[b] for b in range(graph.num_buffers))
        pooled = tuple(b for b in range(graph.num_buffers)
                       if reusable[b] and not graph.is_output[b] and b not in local
                       and (self.pooled_inputs or not graph.is_input[b]))  # an input's free is a plain ``del``
        placed = []
        for v, outputs in enumerate(graph.outputs):
            mine = []
            for k, b in enumerate(outputs):
                size = graph.size_alloc[b]
                if (graph.alias_of[b] is not None or graph.parent[b] is not None or graph.children[b] or not size
                        or b in local):
                    continue
                writes_into: tuple[int, ...] = ()
                if self.generated[v]:
                    if self.writable is None:  # any buffer the kernel reads, but a local one (it has no storage)
                        choices = [x for x in graph.reads[v] if x not in local]
                    else:  # Inductor's, in its order; a member may write into an earlier member's output
                        readable = {*graph.reads[v], *outputs[:k]}
                        choices = [x for x in self.writable[b] if x in readable]
                    writes_into = tuple(x for x in choices if reusable[x] and not graph.is_output[x]
                                        and 0.95 * graph.size_free[x] <= size <= graph.size_free[x])
                mine.append((b, size, size if keys[b] is None else keys[b], writes_into))
            placed.append(tuple(mine))
        pooled_by = tuple(graph.size_free[b] if keys[b] is None else keys[b] for b in range(graph.num_buffers))
        pooled_unaligned_by = None
        if self.unaligned_key is not None:
            pooled_unaligned_by = tuple(pooled_by[b] if key is None else key
                                        for b, key in enumerate(self.unaligned_key))
        views_into: dict[int, list[int]] = {}
        for b, viewed in enumerate(view_of):
            if viewed is not None:
                views_into.setdefault(viewed, []).append(b)
        entry_of = {entry[0]: entry for entries in placed for entry in entries}
        viewed = {t: (tuple(views), entry_of.get(t)) for t, views in views_into.items()}
        elements = tuple((b, graph.parent[b]) for b in range(graph.num_buffers)
                         if graph.parent[b] is not None and frees[b])
        return _Rules(allocates, frees, pooled, tuple(placed), pooled_by, pooled_unaligned_by, viewed, elements)


class _Rules(NamedTuple):
    """An :class:`AllocationModel`'s rules as arrays: each buffer's bytes allocated and freed before any storage
    is handed on, the buffers that go into the reuse pool when they die, per node the outputs that may take a
    dead buffer's storage (its size, the key of the pool it takes from, and the buffers its kernel may write it
    into in place, first choice first), per buffer the key of the pool it goes into when it dies (its
    :attr:`AllocationModel.reuse_key`, else the bytes it frees) and the key once an in-place write made it
    unaligned (:attr:`AllocationModel.unaligned_key`; None without them), and per buffer that views are made into
    (its :attr:`AllocationModel.view_of`) the views and its own entry among the placed ones (None: never placed),
    and each multi-output element that frees storage with its kernel's buffer (the tuple that holds it)."""

    allocates: tuple[int, ...]
    frees: tuple[int, ...]
    pooled: tuple[int, ...]
    placed: tuple[tuple[tuple[int, int, object, tuple[int, ...]], ...], ...]
    pooled_by: tuple
    pooled_unaligned_by: tuple | None
    viewed: dict[int, tuple[tuple[int, ...], tuple[int, int, object, tuple[int, ...]] | None]]
    elements: tuple[tuple[int, int], ...]


def storage_handed_on(graph: Graph, donated: Collection[str] = frozenset(),
                      elements: Collection[str] = frozenset()) -> tuple[bool, ...]:
    """Per buffer: its storage may go on to another buffer once it dies. Only a buffer the program allocated, or
    an input named in ``donated`` (a saved value the backward owns), can hand it on; views and multi-output
    parents cannot, nor can a multi-output kernel's elements but those named in ``elements``: the wrapper pools
    an element's storage unless its kernel returns an input as an output (``FreeIfNotReusedLine.plan`` asks the
    element's ``get_inputs_that_alias_output``), which only the compiled graph's nodes tell."""
    return tuple(not graph.children[b] and graph.alias_of[b] is None
                 and (graph.parent[b] is None or graph.buffer_names[b] in elements)
                 and (not graph.is_input[b] or graph.buffer_names[b] in donated) for b in range(graph.num_buffers))


def _changes(start: Sequence[int], end: Sequence[int | None], released: Sequence[int], allocates: Sequence[int],
             frees: Sequence[int]) -> Iterable[tuple[int, int]]:
    """The model's changes of allocated bytes: each buffer's allocation at its ``start``, its free after the
    step that releases the dead buffers of its ``end``."""
    return chain(zip(start, allocates),
                 ((released[last] + 1, -freed) for last, freed in zip(end, frees) if last is not None))


#: A kernel group in a string of :attr:`AllocationModel.kinds`: a run of grouped nodes with a generated kernel.
_KERNEL_GROUP = re.compile(r"N*G[GN]*")


def kernel_count(letters: str) -> int:
    """The kernel groups of an order (:meth:`AllocationModel.kernels`), ``letters`` its nodes' kinds in order."""
    return len(_KERNEL_GROUP.findall(letters))


class KernelSources:
    """What each node puts into the source of its C++ kernel group, so that the sources an order builds can be
    counted: Inductor defines a group's source once per graph and reuses it for every other group that generates
    the same source (``CppScheduling.define_kernel`` finds it in the wrapper's ``src_to_kernel``), and the
    repeated layers of a model make such groups. Two groups are one source here when their generated members,
    in order, have the same code and name their buffers alike (each buffer numbered where the group first names
    it).

    ``code[v]``: node ``v``'s code with its buffers' names left out (None where it is not known: every group
    holding that node is then a source of its own); ``names[v]``: the buffers it names, in the order its code
    names them; ``digest``: a digest of both in full (two with the same digest count every order alike)."""

    def __init__(self, code: Sequence[str | None], names: Sequence[Sequence[str]]):
        ids: dict[str, int] = {}
        self.code = tuple(None if text is None else ids.setdefault(text, len(ids)) for text in code)
        self.names = tuple(tuple(used) for used in names)
        self.digest = hashlib.sha256(repr((tuple(code), self.names)).encode()).hexdigest()  # what it says, in full
        self._keys: dict[tuple[int, ...], tuple] = {}  # a group's members -> its source

    def count(self, letters: str, order: Sequence[int]) -> int:
        """The distinct sources of the kernel groups of ``order``, ``letters`` its nodes' kinds in order (as
        :func:`kernel_count` takes them)."""
        return len({self.key(tuple(order[group.start():group.end()]), letters[group.start():group.end()])
                    for group in _KERNEL_GROUP.finditer(letters)})

    def key(self, members: tuple[int, ...], letters: str) -> tuple:
        """The source of one kernel group: ``members``, its nodes in order, ``letters`` their kinds (remembered by
        the members alone: a node is always asked about with the same kind, as an order's nodes are)."""
        key = self._keys.get(members)
        if key is None:
            key = self._keys[members] = self._source(members, letters)
        return key

    def insertions(self, letters: str, order: Sequence[int]) -> SourcesWithInsertion:
        """What :meth:`count` counts for ``order`` with one node put in at any place, each worked out from the
        kernel groups beside that place (:class:`SourcesWithInsertion`)."""
        return SourcesWithInsertion(self, letters, order)

    def _source(self, members: tuple[int, ...], letters: str) -> tuple:
        generated = [v for v, letter in zip(members, letters) if letter == "G"]
        if any(self.code[v] is None for v in generated):
            return ("unknown", members)
        numbered: dict[str, int] = {}
        return tuple((self.code[v], tuple(numbered.setdefault(name, len(numbered)) for name in self.names[v]))
                     for v in generated)


class SourcesWithInsertion:
    """What :meth:`KernelSources.count` counts for one order with one node put in at a place (:meth:`count`), for
    a search that tries one node at many places: putting a node in
    changes at most the groups beside the place (a kernel Inductor generates, or a no-op, joins the run of
    grouped nodes on either side of it, both where there is one on each side; an extern kernel cuts the run it
    lands in), so each place costs a pass over those groups, where counting the new order costs a pass over
    the order.

    A kernel group is a run of grouped nodes (``G`` or ``N``) between extern kernels (``E``) with a kernel
    Inductor generates in it (:func:`kernel_count`)."""

    def __init__(self, sources: KernelSources, letters: str, order: Sequence[int]):
        self.sources, self.letters, self.order = sources, letters, tuple(order)
        # per place of a grouped node (G or N): where its run of grouped nodes starts and ends
        self.run_start, self.run_end = [0] * len(letters), [0] * len(letters)
        self.groups: dict[tuple, int] = {}  # each source: how many of the order's groups build it
        t = 0
        while t < len(letters):
            if letters[t] == "E":
                t += 1
                continue
            start = t
            while t < len(letters) and letters[t] != "E":
                t += 1
            self.run_start[start:t] = [start] * (t - start)
            self.run_end[start:t] = [t] * (t - start)
            key = self._source(start, t)
            if key is not None:
                self.groups[key] = self.groups.get(key, 0) + 1

    def count(self, place: int, node: int, kind: str) -> int:
        """The distinct sources with ``node`` (of kind ``kind``: ``E``, ``G`` or ``N``) put in before the order's
        ``place``-th node (at the end for ``place`` = its length): what :meth:`KernelSources.count` counts for
        that order."""
        letters = self.letters
        left = place > 0 and letters[place - 1] != "E"  # a run of grouped nodes ends just before the place
        right = place < len(letters) and letters[place] != "E"  # one starts just after it
        start = self.run_start[place - 1] if left else place
        end = self.run_end[place] if right else place
        if kind == "E":
            if not (left and right):
                return len(self.groups)  # beside a run, or between two extern kernels: no group changes
            gone, made = [self._source(start, end)], [self._source(start, place), self._source(place, end)]
        else:
            gone = [self._source(start, end)] if start < end else []
            made = [self._source(start, end, (place, node, kind))]
        change: dict[tuple, int] = {}
        for key, step in [*((key, -1) for key in gone), *((key, 1) for key in made)]:
            if key is not None:
                change[key] = change.get(key, 0) + step
        groups = self.groups
        return len(groups) + sum((groups.get(key, 0) + step > 0) - (groups.get(key, 0) > 0)
                                 for key, step in change.items())

    def _source(self, start: int, end: int, inserted: tuple[int, int, str] | None = None) -> tuple | None:
        """The source of the run of the order's places ``start`` to ``end`` (with ``inserted``, ``(place, node,
        kind)``, put in), None where it holds no generated kernel (no group)."""
        members, letters = self.order[start:end], self.letters[start:end]
        if inserted is not None:
            place, node, kind = inserted
            members = (*members[:place - start], node, *members[place - start:])
            letters = letters[:place - start] + kind + letters[place - start:]
        return self.sources.key(members, letters) if "G" in letters else None


def release_steps(order: Sequence[int], grouped: Sequence[bool] | None) -> list[int]:
    """Per step of ``order``, the step after which the buffers that die there are freed: itself, or with
    ``grouped`` (see :class:`AllocationModel`) the last step of the run of grouped nodes it is in."""
    n = len(order)
    released = list(range(n))
    if grouped is not None:
        for t in range(n - 2, -1, -1):
            if grouped[order[t]] and grouped[order[t + 1]]:
                released[t] = released[t + 1]
    return released
