"""Refinement: lower the peak of a given order by local changes, never raising it.

Two kinds of move, both aimed at the steps where live bytes reach the peak:

* **Window re-solve.** Take ``window`` consecutive steps of the order that
  contain a peak step and reorder them exactly
  (:func:`~reorder.schedulers.subsets.solve_window`). Live bytes outside a
  window do not depend on the order inside it, so a window whose own maximum
  drops never raises the peak anywhere else.
* **Sink / hoist.** Move one node across a peak step, anywhere between its
  last predecessor and its first successor: sink a node that allocates
  before the peak but is consumed after it, or hoist one after the peak that
  is the last reader of large buffers. A cheap bound on the change at the
  peak step filters candidates; each survivor is checked with the full
  estimator.

A change is kept only if it lowers ``(peak, number of steps at the peak)``
lexicographically, so the pass terminates and its result is never worse than
its start.

Effort is counted, not timed: each full estimate and candidate scan costs
the graph's size in work units (nodes + buffers + read edges), each window
search its states times its width, and the pass stops once ``max_work`` is
spent (or after ``max_rounds`` improvements). Each window search holds at
most ``max_bytes`` of node sets (counted, :func:`~reorder.schedulers.subsets.window_state_bytes`
a state); a window that reaches it is given up like one that runs out of
states, and the method's note says so. The same graph and options give the
same order on any machine, under any load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from ..graph import Graph
from ..timeline import Timeline, estimate_peak_memory
from .base import Method, MethodOutcome, option, register
from .node_sets import STATE_BYTES
from .subsets import solve_window, window_state_bytes

__all__ = ["Refine", "refine_order"]


class _Budget:
    """Work units left; :meth:`spend` says whether any remain. ``windows_full``: window searches that
    stopped on their byte budget."""

    def __init__(self, units: int):
        self.left = units
        self.windows_full = 0

    def spend(self, units: int) -> bool:
        self.left -= units
        return self.left > 0


def _score(timeline: Timeline) -> tuple[int, int]:
    return timeline.peak, sum(1 for x in timeline.live if x == timeline.peak)


def _live_before(graph: Graph, timeline: Timeline, step: int) -> int:
    """Live bytes after steps ``< step`` ran and freed, before ``step`` allocates."""
    return timeline.live[step] - graph.alloc_size[timeline.order[step]]


def _try_windows(graph: Graph, timeline: Timeline, t: int, window: int, max_states: int, max_bytes: int,
                 budget: _Budget) -> list[int] | None:
    order = list(timeline.order)
    step = timeline.lifetimes.step
    n = len(order)
    w = min(window, n)
    for first in range(max(0, t - w + 1), min(t, n - w) + 1):
        free = order[first:first + w]
        bound = max(timeline.live[first:first + w])
        result = solve_window(graph, step, first, free, _live_before(graph, timeline, first), bound, max_states,
                              max_bytes)
        budget.windows_full += result.stopped_by == "max_bytes"
        if result.order is not None:
            return order[:first] + result.order + order[first + w:]
        if not budget.spend(result.states * w + w):
            return None
    return None


def _last_two_reader_steps(graph: Graph, step: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """Per buffer: its last reader, that reader's step, and the latest step of any other reader (-1: none)."""
    last_reader, last, second = [], [], []
    for readers in graph.readers:
        top = top2 = -1
        who = -1
        for r in readers:
            s = step[r]
            if s > top:
                top2, top, who = top, s, r
            elif s > top2:
                top2 = s
        last_reader.append(who)
        last.append(top)
        second.append(top2)
    return last_reader, last, second


def _try_moves(graph: Graph, timeline: Timeline, t: int, limit: int, budget: _Budget,
               reader_steps: tuple[list[int], list[int], list[int]]) -> list[int] | None:
    order = list(timeline.order)
    step = timeline.lifetimes.step
    n = len(order)
    last_reader, last, second = reader_steps

    def freed_crossing(v: int) -> int:
        """Bytes ``v`` frees as the last reader of buffers whose other readers all run before step ``t``.

        Moving ``v`` across ``t`` moves those frees across ``t`` too; its own
        allocation moves with it. So sinking ``v`` (from before ``t`` to
        after) changes the live bytes at ``t`` by ``freed - alloc``, and
        hoisting it by ``alloc - freed``.
        """
        freed = 0
        for b in graph.reads[v]:
            others = second[b] if last_reader[b] == v else last[b]
            if not graph.is_output[b] and others < t:
                freed += graph.size_free[b]
        return freed

    candidates: list[tuple[int, int, int]] = []
    for i, v in enumerate(order):
        if i < t:
            first_succ = min((step[s] for s in graph.succs[v]), default=n)
            if first_succ > t:
                d = freed_crossing(v) - graph.alloc_size[v]
                if d < 0:
                    candidates.append((d, v, first_succ - 1))
        elif i > t:
            last_pred = max((step[p] for p in graph.preds[v]), default=-1)
            if last_pred < t:
                d = graph.alloc_size[v] - freed_crossing(v)
                if d < 0:
                    candidates.append((d, v, last_pred + 1))
    candidates.sort()
    best_score = _score(timeline)
    best: list[int] | None = None
    cost = _work_unit(graph)
    for _, v, target in candidates[:limit]:
        if not budget.spend(cost):
            break
        # Sink: target is just before the first successor once v is removed;
        # hoist: just after the last predecessor, which removing v leaves in place.
        moved = [u for u in order if u != v]
        moved.insert(target, v)
        candidate = estimate_peak_memory(graph, moved)
        if _score(candidate) < best_score:
            best_score, best = _score(candidate), moved
    return best


def _work_unit(graph: Graph) -> int:
    """What one full pass over the graph costs: nodes, buffers and read edges."""
    return graph.num_nodes + graph.num_buffers + sum(len(r) for r in graph.reads)


def refine_order(
    graph: Graph,
    start: Sequence[int],
    window: int = 8,
    max_states: int = 5_000,
    max_rounds: int = 200,
    move_candidates: int = 16,
    max_work: int = 5_000_000,
    max_bytes: int = STATE_BYTES,
) -> list[int]:
    """A topological order whose peak is at most that of ``start``, within ``max_work`` units of effort
    and ``max_bytes`` of node sets held by each window search."""
    return _refine(graph, start, window, max_states, max_rounds, move_candidates, max_work, max_bytes)[0]


def _refine(graph: Graph, start: Sequence[int], window: int, max_states: int, max_rounds: int,
            move_candidates: int, max_work: int, max_bytes: int) -> tuple[list[int], _Budget]:
    """:func:`refine_order`, and the budget it left (which says how many windows reached ``max_bytes``)."""
    budget = _Budget(max_work)
    unit = _work_unit(graph)
    timeline = estimate_peak_memory(graph, start)
    n = graph.num_nodes
    for _ in range(max_rounds):
        if timeline.live[n] == timeline.peak or not budget.spend(unit):
            break  # what stays live after the last step is the same for every order
        reader_steps = _last_two_reader_steps(graph, timeline.lifetimes.step)
        changed = None
        for t in [s for s in range(n) if timeline.live[s] == timeline.peak]:
            changed = _try_windows(graph, timeline, t, window, max_states, max_bytes, budget)
            if changed is None and budget.spend(unit):
                changed = _try_moves(graph, timeline, t, move_candidates, budget, reader_steps)
            if changed is not None or budget.left <= 0:
                break
        if changed is None:
            break
        new = estimate_peak_memory(graph, changed)
        if _score(new) >= _score(timeline):
            break
        timeline = new
    return list(timeline.order), budget


@register
@dataclass(frozen=True)
class Refine(Method):
    """Local search from the best order so far: exact window re-solves and single-node moves."""

    name: ClassVar[str] = "refine"
    window: int = option(8, int, 1)
    max_states: int = option(5_000, int, 1)
    max_rounds: int = option(200, int, 1)
    move_candidates: int = option(16, int, 0)
    max_work: int = option(5_000_000, int, 1)
    max_bytes: int = option(STATE_BYTES, int, 1)

    def run(self, graph: Graph, start: Sequence[int]) -> MethodOutcome:
        order, budget = _refine(graph, start, **self.__dict__)
        note = ""
        if budget.windows_full:
            note = (f"{budget.windows_full} window searches stopped at max_bytes={self.max_bytes} "
                    f"({window_state_bytes(self.window)} bytes a state)")
        return MethodOutcome(order, note=note)
