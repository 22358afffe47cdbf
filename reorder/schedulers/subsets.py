"""Exact minimum-peak ordering of a set of nodes by dynamic programming over subsets.

After any set ``S`` of nodes has run, the live bytes ``L(S)`` do not depend on
the order they ran in (every buffer whose readers all ran is freed, every
output of ``S`` was allocated). So the best peak reachable at ``S`` is

    best(S + v) = min over ready v of max(best(S), L(S) + alloc(v))

a shortest-path-like recurrence over the lattice of downward-closed sets
(Serenity, Ahn et al., MLSys 2020). :func:`solve_window` runs it level by
level (``|S| = k``) over the ``free`` nodes of an order, with everything
before them already run: a short window of an order is one move of the
refinement pass (the whole graph is the exact method's, which asks the same
recurrence as a decision question: :mod:`reorder.schedulers.peak_search`). States whose peak
already reaches ``bound`` are pruned, which keeps the search to orders that
beat the one we have; ``max_states`` caps the work, and the search then says
it gave up.

Sets are Python ints used as bitmasks over the free nodes. Peaks are in
Inductor's live-bytes model (:mod:`reorder.timeline`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..graph import Graph

__all__ = ["WindowResult", "solve_window"]


@dataclass(frozen=True)
class WindowResult:
    """``order`` (of the free nodes) with window peak ``peak``, or None if nothing beat ``bound``.

    ``complete`` is False when ``max_states`` stopped the search; then the
    absence of an order proves nothing.
    """

    order: list[int] | None
    peak: int | None
    complete: bool
    states: int


def solve_window(
    graph: Graph,
    step: Sequence[int],
    first: int,
    free: Sequence[int],
    live_before: int,
    bound: int,
    max_states: int,
) -> WindowResult:
    """Best order of ``free`` given that every node with ``step[v] < first`` already ran, with ``live_before`` bytes live.

    ``step`` is each node's step in an order of which ``free`` is the window
    starting at step ``first`` (``first = 0``: nothing ran yet); every node
    outside the window and after it must run after ``free``. Only orders
    whose peak inside the window is below ``bound`` are returned.
    """
    k = len(free)
    bit = {v: 1 << i for i, v in enumerate(free)}
    full = (1 << k) - 1

    pred_mask = [0] * k
    for i, v in enumerate(free):
        for p in graph.preds[v]:
            if p in bit:
                pred_mask[i] |= bit[p]
    succ_free = [[bit[s].bit_length() - 1 for s in graph.succs[v] if s in bit] for v in free]

    # Frees each free node may cause: (bytes, mask of free readers that must have run).
    frees: list[list[tuple[int, int]]] = [[] for _ in range(k)]
    for i, v in enumerate(free):
        for b in graph.reads[v]:
            readers = graph.readers[b]
            if graph.is_output[b] or any(step[r] >= first and r not in bit for r in readers):
                continue
            need = 0
            for r in readers:
                if r in bit:
                    need |= bit[r]
            frees[i].append((graph.size_free[b], need & ~(1 << i)))
        for b in graph.outputs[v]:
            if not graph.is_output[b] and not graph.readers[b]:
                frees[i].append((graph.size_free[b], 0))
    alloc = [graph.alloc_size[v] for v in free]
    # A freeable input nobody reads is freed after the program's first step.
    unread_inputs = 0
    if first == 0:
        unread_inputs = sum(
            graph.size_free[b] for b in range(graph.num_buffers)
            if graph.is_input[b] and not graph.readers[b] and not graph.is_output[b]
        )

    start_ready = 0
    for i in range(k):
        if pred_mask[i] == 0:
            start_ready |= 1 << i
    # level: S -> (peak, live, ready, previous S, node index)
    level: dict[int, tuple[int, int, int, int, int]] = {0: (0, live_before, start_ready, -1, -1)}
    history: list[dict[int, tuple[int, int, int, int, int]]] = [level]
    states = 1
    for _ in range(k):
        nxt: dict[int, tuple[int, int, int, int, int]] = {}
        for s, (peak, live, ready, _, _) in level.items():
            r = ready
            while r:
                low = r & -r
                r ^= low
                i = low.bit_length() - 1
                during = live + alloc[i]
                new_peak = peak if peak > during else during
                if new_peak >= bound:
                    continue
                t = s | low
                old = nxt.get(t)
                if old is not None and old[0] <= new_peak:
                    continue
                after = during if s else during - unread_inputs
                for size, need in frees[i]:
                    if need & ~s == 0:
                        after -= size
                if old is None:
                    new_ready = ready ^ low
                    for j in succ_free[i]:
                        if pred_mask[j] & ~t == 0:
                            new_ready |= 1 << j
                    states += 1
                    if states > max_states:
                        return WindowResult(None, None, False, states)
                else:
                    new_ready = old[2]
                nxt[t] = (new_peak, after, new_ready, s, i)
        if not nxt:
            return WindowResult(None, None, True, states)
        history.append(nxt)
        level = nxt
    final = level.get(full)
    if final is None:
        return WindowResult(None, None, True, states)
    order: list[int] = []
    s = full
    for depth in range(k, 0, -1):
        _, _, _, prev, i = history[depth][s]
        order.append(free[i])
        s = prev
    order.reverse()
    return WindowResult(order, final[0], True, states)
