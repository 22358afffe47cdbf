"""The optimal method: the minimum-peak order from a constraint solver, with a certificate.

The order is found by OR-Tools CP-SAT over a model whose peak is, for every
topological order, exactly the peak of :mod:`reorder.timeline` (Inductor
2.13's estimators):

* one integer ``step[v]`` per node, all different, ``step[p] < step[v]`` for
  every ordering constraint, each domain cut to ``[#ancestors, n-1-#descendants]``;
* one integer per freed buffer's end: the largest step of its readers
  (readers that run before another reader are dropped), its producer's
  step if nobody reads it;
* the bytes of each buffer as *segments*: ``demand`` bytes live from the step
  its producer runs (0 for graph inputs) through its end (to the horizon
  for graph outputs), each an interval of a cumulative constraint whose
  capacity is the peak, which is minimised.

A segment is exact because live bytes at step ``t`` are ``+size_alloc`` from
the buffer's start and ``-size_free`` after its end: a buffer that allocates
what it frees is one segment; an allocation never freed (a graph output, a
multi-output parent) runs to the horizon; a free that no allocation of the
same step pays for (a multi-output child that a later node splits off its
parent) is a segment from step 0 to its end whose bytes are added to the
capacity. (Pairing such a child with its parent's allocation instead is
also exact but, measured on vgg16_train_1, made CP-SAT's proof slower.)

The two estimators give the same peak for every order: after the allocations
of step ``t`` the alloc/free model holds everything allocated up to ``t`` less
what was freed after earlier steps, which is the net model's ``live[t]``, and
the net model's extra entry (after the last step) allocates nothing. ``model``
picks which one the horizon and the final check follow (``"net"``: steps
``0..n``; ``"allocfree"``: ``0..n-1``), and the returned peak is re-estimated
with it; a peak above the solver's objective (or below it, once proven
minimal) raises, so a wrong model can never be reported as a proof.

Before any solver runs, the exact peak search
(:func:`~reorder.schedulers.peak_search.minimum_peak`, up to ``search_states``
sets) tries to settle the question by itself: on backward graphs its
dominance rules prove in well under a second what CP-SAT could not prove in
minutes. Only when it gives up is the CP-SAT model built, starting from the
best order found so far (a complete solution hint), so it never returns
anything worse. Its effort is CP-SAT's
deterministic time (``effort``), not the wall clock: the same graph gives the
same answer on any machine. One worker by default; with more, CP-SAT's
interleaved search keeps the run deterministic. The answer is
``optimal=True`` when the solver proved it, otherwise the best order found
and the solver's proven bound on the minimum peak (``bound``), so the gap is
certified.

The idea of solving min-peak scheduling exactly with an integer program is
MODeL (Steiner et al., ICML 2023); this is a constraint-programming variant
with a cumulative constraint instead of per-step sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

from ..errors import ReorderError
from ..graph import Graph
from ..timeline import estimate_peak_memory, estimate_peak_memory_allocfree, lower_bound
from .base import Method, MethodOutcome, option, register
from .node_sets import STATE_BYTES
from .peak_search import minimum_peak

__all__ = ["Optimal", "OrderVariables", "Segment", "segments", "cp_model_module"]

MODELS = {"net": estimate_peak_memory, "allocfree": estimate_peak_memory_allocfree}

#: The bytes of node sets the peak search may hold before CP-SAT takes over (``search_bytes``): four
#: times the ``exact`` method's, so that its 1,000,000 sets fit on graphs of up to about 1,250 nodes.
SEARCH_BYTES = 4 * STATE_BYTES


@dataclass(frozen=True)
class Segment:
    """``demand`` bytes live from the step ``start_node`` runs (step 0 if None)
    through the end of ``end_buffer``'s lifetime (to the horizon if None)."""

    start_node: int | None
    end_buffer: int | None
    demand: int


def segments(graph: Graph) -> tuple[list[Segment], int]:
    """The live bytes of every buffer as segments, and the bytes of frees nothing pays for.

    Live bytes at step ``t`` of any order equal the demands of the segments
    covering ``t`` minus the returned constant.
    Buffers that start together (one node's outputs; each graph input on its
    own) pool their allocations: each freed buffer first pays its free from
    its own allocation, then from the pool (a multi-output parent pays the
    children its own node writes); what is left of the pool is never freed,
    and what no pool pays for is the returned constant.
    """
    groups = [[b] for b in range(graph.num_buffers) if graph.is_input[b]]
    starts: list[int | None] = [None] * len(groups)
    for v in range(graph.num_nodes):
        groups.append(list(graph.outputs[v]))
        starts.append(v)
    out: list[Segment] = []
    unpaid = 0
    for start, group in zip(starts, groups):
        pool = 0
        owed: list[tuple[int, int]] = []
        for b in group:
            freed = graph.size_free[b] if not graph.is_output[b] else 0
            own = min(graph.size_alloc[b], freed)
            if own:
                out.append(Segment(start, b, own))
            pool += graph.size_alloc[b] - own
            if freed > own:
                owed.append((b, freed - own))
        for b, rest in owed:
            paid = min(rest, pool)
            if paid:
                out.append(Segment(start, b, paid))
                pool -= paid
            if rest > paid:
                out.append(Segment(None, b, rest - paid))
                unpaid += rest - paid
        if pool:
            out.append(Segment(start, None, pool))
    return out, unpaid


class OrderVariables:
    """CP-SAT variables of an execution order, hinted with one: ``step[v]`` per node (all
    different, after every predecessor, within ``[#ancestors, n-1-#descendants]``), and the last
    step of a set of nodes."""

    def __init__(self, model, graph: Graph, hint: Sequence[int]):
        n = graph.num_nodes
        self.model, self.graph = model, graph
        self.hint = [0] * n
        for s, v in enumerate(hint):
            self.hint[v] = s
        self.step = [
            model.new_int_var(graph.ancestors[v].bit_count(), n - 1 - graph.descendants[v].bit_count(), f"step{v}")
            for v in range(n)
        ]
        model.add_all_different(self.step)
        for v in range(n):
            model.add_hint(self.step[v], self.hint[v])
            for p in graph.preds[v]:
                model.add(self.step[p] < self.step[v])

    def start(self, node: int | None):
        """The step of ``node``; 0 for None (graph inputs)."""
        return 0 if node is None else self.step[node]

    def last(self, nodes: Sequence[int]):
        """The latest step of ``nodes`` (not empty): a new variable, or a step when one node is left
        after dropping those that must run before another of them (a chain of readers)."""
        before_another = 0
        for r in nodes:
            before_another |= self.graph.ancestors[r]
        kept = [r for r in dict.fromkeys(nodes) if not before_another >> r & 1]
        if len(kept) == 1:
            return self.step[kept[0]]
        var = self.model.new_int_var(0, self.graph.num_nodes - 1, "last")
        self.model.add_max_equality(var, [self.step[r] for r in kept])
        self.model.add_hint(var, max(self.hint[r] for r in kept))
        return var

    def hint_of(self, nodes: Sequence[int]) -> int:
        """The hinted value of :meth:`last`."""
        return max(self.hint[r] for r in nodes)

    def order(self, solver) -> list[int]:
        """The order of a solution: nodes sorted by step."""
        return sorted(range(self.graph.num_nodes), key=lambda v: solver.value(self.step[v]))


def cp_model_module():
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise ReorderError(
            "method 'optimal' needs OR-Tools: install the 'exact' extra (pip install 'reorder[exact]')"
        ) from None
    return cp_model


@register
@dataclass(frozen=True)
class Optimal(Method):
    """Minimum-peak order from CP-SAT, warm-started; proven optimal or with a certified bound.

    ``effort``: CP-SAT deterministic time limit (its own work units, one to
    a few wall-clock seconds each, measured here; the answer depends on it,
    not on the machine). ``workers``: search workers (1: one deterministic search;
    more: interleaved, still deterministic). ``model``: ``"net"`` or
    ``"allocfree"``, the estimator the peak is stated in (the peaks agree).
    ``search_states``: the sets the exact peak search may see before CP-SAT
    takes over (0: CP-SAT alone), and as many again to certify a bound if it
    cannot prove the minimum; ``search_bytes``: the bytes of node sets it may hold
    (:data:`SEARCH_BYTES`). ``accept_gap``: stop before CP-SAT when the
    search's certified gap is at most this fraction of its bound (0: only a
    proof stops it).
    """

    name: ClassVar[str] = "optimal"
    effort: float = option(10.0, float, 0, above=True)
    workers: int = option(1, int, 1)
    model: str = option("net", str, choices=tuple(MODELS))
    search_states: int = option(1_000_000, int, 0)
    search_bytes: int = option(SEARCH_BYTES, int, 1)
    accept_gap: float = option(0.0, float, 0)

    def run(self, graph: Graph, start: Sequence[int]) -> MethodOutcome:
        start = list(start)
        estimate = MODELS[self.model]
        start_peak = estimate(graph, start).peak
        bound = lower_bound(graph)
        if start_peak <= bound:
            return MethodOutcome(start, optimal=True, bound=start_peak, note="starting order meets the lower bound")
        if self.search_states > 0:
            searched = minimum_peak(graph, start, self.search_states, self.search_states, bound, self.search_bytes)
            if searched.proven:
                return MethodOutcome(searched.order, optimal=True, bound=searched.peak,
                                     note=f"proven optimal by the peak search ({searched.states} states)")
            start, start_peak, bound = searched.order, searched.peak, max(bound, searched.bound)
            if start_peak - bound <= self.accept_gap * bound:
                return MethodOutcome(start, bound=bound, note=f"bound {bound} certified by the peak search "
                                     f"({searched.states} states), within accept_gap={self.accept_gap:g}")
        cp_model = cp_model_module()
        # The peak's domain starts at the working-set bound: starting it at the precedence bound
        # derailed CP-SAT's search on inception_train_1 (no proof at effort 40, against a proof).
        model, steps, peak = self._build(cp_model, graph, start, start_peak, lower_bound(graph, max_work=0))
        solver = cp_model.CpSolver()
        solver.parameters.max_deterministic_time = float(self.effort)
        solver.parameters.num_workers = int(self.workers)
        solver.parameters.interleave_search = self.workers > 1
        solver.parameters.random_seed = 0
        status = solver.solve(model)
        proven = max(bound, math.ceil(solver.best_objective_bound - 1e-9)) if status != cp_model.UNKNOWN else bound
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return MethodOutcome(start, bound=min(proven, start_peak),
                                 note=f"solver found nothing better ({solver.status_name(status)})")
        order = steps.order(solver)
        found = estimate(graph, order).peak
        # The solver's peak covers the true one (equal once it is proven minimal): else the model is wrong.
        if found > solver.value(peak) or status == cp_model.OPTIMAL and found != solver.value(peak):
            raise ReorderError(
                f"method 'optimal' on {graph.name!r}: the solver's peak {solver.value(peak)} "
                f"disagrees with the estimator's {found}"
            )
        if status == cp_model.OPTIMAL:
            return MethodOutcome(order, optimal=True, bound=found, note="proven optimal")
        return MethodOutcome(order, bound=min(proven, found),
                             note=f"bound {min(proven, found)} after deterministic time {self.effort:g}")

    def _build(self, cp_model, graph: Graph, start: list[int], start_peak: int, floor: int):
        """The CP-SAT model (see the module docstring), hinted with ``start``; ``floor``: a lower bound."""
        n = graph.num_nodes
        horizon = n + 1 if self.model == "net" else n
        model = cp_model.CpModel()
        steps = OrderVariables(model, graph, start)
        segs, unpaid = segments(graph)
        intervals, demands = [], []
        ends: dict[int, object] = {}  # one end per buffer, shared by its segments
        for k, seg in enumerate(segs):
            first = steps.start(seg.start_node)
            first_at = 0 if seg.start_node is None else steps.hint[seg.start_node]
            if seg.end_buffer is None:
                stop, stop_at = horizon, horizon
            else:
                b = seg.end_buffer
                users = graph.readers[b] or ((graph.producer[b],) if graph.producer[b] is not None else ())
                if users and b not in ends:
                    ends[b] = steps.last(users)
                stop = ends[b] + 1 if users else 1
                stop_at = steps.hint_of(users) + 1 if users else 1
            if isinstance(first, int) and isinstance(stop, int):
                intervals.append(model.new_fixed_size_interval_var(first, stop - first, f"seg{k}"))
            else:
                length = model.new_int_var(1, horizon, f"len{k}")
                intervals.append(model.new_interval_var(first, length, stop, f"seg{k}"))
                model.add_hint(length, stop_at - first_at)
            demands.append(seg.demand)
        peak = model.new_int_var(floor, start_peak, "peak")
        model.add_hint(peak, start_peak)
        model.add_cumulative(intervals, demands, peak + unpaid)
        model.minimize(peak)
        return model, steps, peak
