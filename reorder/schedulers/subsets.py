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
beat the one we have; ``max_states`` caps the work and ``max_bytes`` the
bytes the remembered states may hold (counted: :func:`window_state_bytes`
each, every level being kept to read the order back), and the search then
says which stopped it.

Sets are Python ints used as bitmasks over the free nodes, and what each
node allocates and frees comes from the window's
:class:`~reorder.schedulers.node_sets.NodeSets` (shared with the exact
search). Peaks are in Inductor's live-bytes model (:mod:`reorder.timeline`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..graph import Graph
from .node_sets import NodeSets, int_bytes

__all__ = ["WindowResult", "solve_window", "window_state_bytes"]

#: The bytes a window's state holds besides its two sets: its slot in its level's dict and the record
#: of its peak, live bytes, previous set and last node.
WINDOW_STATE_OVERHEAD = 240


def window_state_bytes(width: int) -> int:
    """At most the bytes one state of a ``width``-node window holds: two sets of ``width`` bits (the set and
    its ready nodes) and :data:`WINDOW_STATE_OVERHEAD`."""
    return 2 * int_bytes(width) + WINDOW_STATE_OVERHEAD


@dataclass(frozen=True)
class WindowResult:
    """``order`` (of the free nodes) with window peak ``peak``, or None if nothing beat ``bound``.

    ``stopped_by`` names the budget that stopped the search (``"max_states"`` or
    ``"max_bytes"``), or is empty when it saw every set (:attr:`complete`); a
    stopped search's missing order proves nothing.
    """

    order: list[int] | None
    peak: int | None
    states: int
    stopped_by: str = ""

    @property
    def complete(self) -> bool:
        return not self.stopped_by


def solve_window(
    graph: Graph,
    step: Sequence[int],
    first: int,
    free: Sequence[int],
    live_before: int,
    bound: int,
    max_states: int,
    max_bytes: int | None = None,
) -> WindowResult:
    """Best order of ``free`` given that every node with ``step[v] < first`` already ran, with ``live_before`` bytes live.

    ``step`` is each node's step in an order of which ``free`` is the window
    starting at step ``first`` (``first = 0``: nothing ran yet); every node
    outside the window and after it must run after ``free``. Only orders
    whose peak inside the window is below ``bound`` are returned, within
    ``max_states`` states and (unless None) ``max_bytes`` of states held.
    """
    k = len(free)
    cap, stopped_by = max_states, "max_states"
    if max_bytes is not None and max_bytes // window_state_bytes(k) < cap:
        cap, stopped_by = max_bytes // window_state_bytes(k), "max_bytes"
    sets = NodeSets(graph, free, step, first)
    alloc, pred_mask, succ_free, unread_inputs = sets.alloc, sets.pred_mask, sets.succs, sets.unread_inputs
    full = (1 << k) - 1

    # level: S -> (peak, live, ready, previous S, node index)
    level: dict[int, tuple[int, int, int, int, int]] = {0: (0, live_before, sets.ready_at_start, -1, -1)}
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
                after = during - sets.freed(i, t) - (0 if s else unread_inputs)
                if old is None:
                    new_ready = ready ^ low
                    for j in succ_free[i]:
                        if pred_mask[j] & ~t == 0:
                            new_ready |= 1 << j
                    states += 1
                    if states > cap:
                        return WindowResult(None, None, states, stopped_by)
                else:
                    new_ready = old[2]
                nxt[t] = (new_peak, after, new_ready, s, i)
        if not nxt:
            return WindowResult(None, None, states)
        history.append(nxt)
        level = nxt
    final = level.get(full)
    if final is None:
        return WindowResult(None, None, states)
    order: list[int] = []
    s = full
    for depth in range(k, 0, -1):
        _, _, _, prev, i = history[depth][s]
        order.append(free[i])
        s = prev
    order.reverse()
    return WindowResult(order, final[0], states)
