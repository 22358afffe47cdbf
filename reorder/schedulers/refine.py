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
its start. ``max_rounds`` and ``seconds`` bound the effort.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar, Sequence

from ..graph import Graph
from ..timeline import Timeline, estimate_peak_memory
from .base import MethodOutcome, register
from .subsets import solve_window

__all__ = ["Refine", "refine_order"]


def _score(timeline: Timeline) -> tuple[int, int]:
    return timeline.peak, sum(1 for x in timeline.live if x == timeline.peak)


def _live_before(graph: Graph, timeline: Timeline, step: int) -> int:
    """Live bytes after steps ``< step`` ran and freed, before ``step`` allocates."""
    return timeline.live[step] - graph.alloc_size[timeline.order[step]]


def _try_windows(graph: Graph, timeline: Timeline, t: int, window: int, max_states: int) -> list[int] | None:
    order = list(timeline.order)
    n = len(order)
    w = min(window, n)
    for first in range(max(0, t - w + 1), min(t, n - w) + 1):
        free = order[first:first + w]
        done = [False] * graph.num_nodes
        for v in order[:first]:
            done[v] = True
        bound = max(timeline.live[first:first + w])
        result = solve_window(graph, done, free, _live_before(graph, timeline, first), bound, max_states)
        if result.order is not None:
            return order[:first] + result.order + order[first + w:]
    return None


def _freed_before(graph: Graph, step: Sequence[int], v: int, t: int) -> int:
    """Bytes ``v`` frees as the last reader, counting only buffers whose other readers all run before step ``t``.

    Moving ``v`` across ``t`` moves those frees across ``t`` too; its own
    allocation moves with it. So sinking ``v`` (from before ``t`` to after)
    changes the live bytes at ``t`` by ``freed - alloc``, and hoisting it by
    ``alloc - freed``.
    """
    freed = 0
    for b in graph.reads[v]:
        if not graph.is_output[b] and all(step[r] < t for r in graph.readers[b] if r != v):
            freed += graph.size_free[b]
    return freed


def _try_moves(graph: Graph, timeline: Timeline, t: int, limit: int) -> list[int] | None:
    order = list(timeline.order)
    step = timeline.lifetimes.step
    n = len(order)
    candidates: list[tuple[int, int, int]] = []
    for i, v in enumerate(order):
        if i < t:
            first_succ = min((step[s] for s in graph.succs[v]), default=n)
            if first_succ > t:
                d = _freed_before(graph, step, v, t) - graph.alloc_size[v]
                if d < 0:
                    candidates.append((d, v, first_succ - 1))
        elif i > t:
            last_pred = max((step[p] for p in graph.preds[v]), default=-1)
            if last_pred < t:
                d = graph.alloc_size[v] - _freed_before(graph, step, v, t)
                if d < 0:
                    candidates.append((d, v, last_pred + 1))
    candidates.sort()
    best_score = _score(timeline)
    best: list[int] | None = None
    for _, v, target in candidates[:limit]:
        # Sink: target is just before the first successor once v is removed;
        # hoist: just after the last predecessor, which removing v leaves in place.
        moved = [u for u in order if u != v]
        moved.insert(target, v)
        candidate = estimate_peak_memory(graph, moved)
        if _score(candidate) < best_score:
            best_score, best = _score(candidate), moved
    return best


def refine_order(
    graph: Graph,
    start: Sequence[int],
    window: int = 8,
    max_states: int = 5_000,
    max_rounds: int = 200,
    move_candidates: int = 16,
    seconds: float = 2.0,
) -> list[int]:
    """A topological order whose peak is at most that of ``start``."""
    timeline = estimate_peak_memory(graph, start)
    deadline = time.perf_counter() + seconds
    n = graph.num_nodes
    for _ in range(max_rounds):
        if time.perf_counter() > deadline or timeline.live[n] == timeline.peak:
            break  # what stays live after the last step is the same for every order
        changed = None
        for t in [s for s in range(n) if timeline.live[s] == timeline.peak]:
            changed = _try_windows(graph, timeline, t, window, max_states)
            if changed is None:
                changed = _try_moves(graph, timeline, t, move_candidates)
            if changed is not None:
                break
        if changed is None:
            break
        new = estimate_peak_memory(graph, changed)
        if _score(new) >= _score(timeline):
            break
        timeline = new
    return list(timeline.order)


@register
@dataclass(frozen=True)
class Refine:
    """Local search from the best order so far: exact window re-solves and single-node moves."""

    name: ClassVar[str] = "refine"
    window: int = 8
    max_states: int = 5_000
    max_rounds: int = 200
    move_candidates: int = 16
    seconds: float = 2.0

    def run(self, graph: Graph, start: Sequence[int]) -> MethodOutcome:
        return MethodOutcome(refine_order(graph, start, **self.__dict__))
