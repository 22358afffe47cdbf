"""What Inductor's generated code allocates for an order: storage handed from dead buffers to new ones.

Inductor's estimate (``torch/_inductor/memory.py``, :func:`~reorder.timeline.estimate_peak_memory`)
counts every buffer from its producer to its last reader. The code Inductor
generates allocates less, in two ways (``torch/_inductor/codegen/wrapper.py``
and ``Scheduler.decide_inplace_update``, torch 2.13):

* **in place**: a kernel Inductor generates writes its output into a buffer
  it reads and is the last reader of, when the output needs between 95% and
  100% of that buffer's storage; the output allocates nothing;
* **reuse pool**: a buffer that dies goes into a pool keyed by its storage
  size (and dtype and device, which bytes stand for here); a later allocation
  of that size takes the most recently pooled one, and between the free and
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

Only buffers the program allocated, and donated inputs (saved values the
backward owns), can be handed on; views and multi-output parents cannot.
A kernel's scratch (what an extern kernel allocates and frees while it
runs) adds to the bytes live during its step and nothing after it.
:func:`wrapper_peak` replays an order under these rules and returns the peak
of the bytes allocated: the allocator's view of the program, which
:func:`~reorder.budget.step_peak.step_peak` uses for each program of a step.
"""

from __future__ import annotations

from typing import Sequence

from ..graph import Graph
from ..timeline import estimate_peak_memory

__all__ = ["release_steps", "wrapper_peak"]


def wrapper_peak(graph: Graph, order: Sequence[int], generated: Sequence[bool], reusable: Sequence[bool],
                 scratch: Sequence[int] | None = None, decided_by: Graph | None = None,
                 grouped: Sequence[bool] | None = None) -> int:
    """The peak bytes the generated code allocates when it runs ``order`` (see the module docstring).

    ``generated[v]``: Inductor generates node ``v``'s kernel (extern kernels
    such as matrix products never write in place); ``reusable[b]``: buffer
    ``b``'s storage may be handed to another buffer once ``b`` dies;
    ``scratch[v]``: bytes node ``v``'s kernel allocates and frees while it runs (none by default);
    ``decided_by``: the same nodes and buffers as Inductor's estimate sees them, when ``graph`` counts them
    otherwise (parameters at zero bytes, tangents freed): the wrapper decides its reuses by Inductor's own
    estimate, so a reuse it refuses, or takes, must be the one refused or taken here (default: ``graph``);
    ``grouped[v]``: node ``v`` joins the C++ backend's kernel group (a generated kernel or a no-op on CPU;
    an extern kernel flushes it); None: every node frees its dead buffers right after it (Triton).
    """
    estimate = estimate_peak_memory(graph, order)
    life = estimate.lifetimes
    judged = estimate if decided_by is None else estimate_peak_memory(decided_by, order)
    n = graph.num_nodes
    released = release_steps(order, grouped)
    estimated = list(judged.live[:n])  # Inductor's estimate during each step, with the storage reuses hold
    allocates = list(graph.size_alloc)
    frees = [0 if graph.is_output[b] else graph.size_free[b] for b in range(graph.num_buffers)]
    handed = [False] * graph.num_buffers  # its storage went on to another buffer
    pool: dict[int, list[int]] = {}  # storage size -> buffers that died, most recent last
    dying: list[list[int]] = [[] for _ in range(n)]
    for b in range(graph.num_buffers):
        if life.end[b] is not None and reusable[b] and not graph.is_output[b]:
            dying[released[life.end[b]]].append(b)
    for step, v in enumerate(order):
        for b in graph.outputs[v]:
            size = graph.size_alloc[b]
            if graph.alias_of[b] is not None or graph.parent[b] is not None or graph.children[b] or not size:
                continue
            taken = None
            if generated[v]:
                taken = next((x for x in graph.reads[v] if reusable[x] and not handed[x] and life.end[x] == step
                              and not graph.is_output[x] and 0.95 * graph.size_free[x] <= size <= graph.size_free[x]),
                             None)
            if taken is None and pool.get(size):
                held = range(released[life.end[pool[size][-1]]] + 1, step)  # steps its storage would be held through
                if not held or size + max(estimated[t] for t in held) <= judged.peak:
                    taken = pool[size].pop()
                    for t in held:
                        estimated[t] += size
            if taken is not None:  # b lives in taken's storage: nothing allocated, taken's storage freed when b dies
                handed[taken] = True
                allocates[b] = 0
                frees[b] = 0 if graph.is_output[b] else frees[taken]
                frees[taken] = 0
        for x in dying[step]:
            if not handed[x]:
                pool.setdefault(graph.size_free[x], []).append(x)
    delta = [0] * (n + 2)
    for b in range(graph.num_buffers):
        delta[life.start[b]] += allocates[b]
        if life.end[b] is not None:
            delta[released[life.end[b]] + 1] -= frees[b]
    peak = live = 0
    for t in range(n + 1):
        live += delta[t]
        peak = max(peak, live + (scratch[order[t]] if scratch is not None and t < n else 0))
    return peak


def release_steps(order: Sequence[int], grouped: Sequence[bool] | None) -> list[int]:
    """Per step of ``order``, the step after which the buffers that die there are freed: itself, or with
    ``grouped`` (see :func:`wrapper_peak`) the last step of the run of grouped nodes it is in."""
    n = len(order)
    released = list(range(n))
    if grouped is not None:
        for t in range(n - 2, -1, -1):
            if grouped[order[t]] and grouped[order[t + 1]]:
                released[t] = released[t + 1]
    return released
