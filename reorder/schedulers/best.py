"""Best-of: run several methods on one graph and keep the order with the lowest peak.

Like Inductor's ``reorder_for_peak_memory``: the baseline (the graph's own
order) and each method are estimated, one INFO line per method goes to the
``reorder`` logger, and the lowest peak wins (ties go to the earlier method,
so the baseline is kept unless something is strictly better). Methods that
improve an order (``refine``, ``exact``) start from the best order found
before them. On a graph with size symbols, the winner must also hold across
sizes (:mod:`~reorder.schedulers.across_sizes`): never above Inductor's own
order at any evaluation point of the symbols' ranges.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from ..errors import ReorderError
from ..graph import Graph
from ..timeline import BOUND_WORK, estimate_peak_memory, lower_bound
from .across_sizes import INDUCTOR_METHODS, choose_across_sizes, inductor_reference
from .base import METHODS, Method, MethodOutcome

__all__ = ["DEFAULT_METHODS", "INDUCTOR_METHODS", "QUICK_METHODS", "RECHECK_METHODS", "ReorderResult",
           "reorder_for_peak_memory", "make_method", "split_methods"]

log = logging.getLogger("reorder")

#: Inductor's three, then ours. The budgets keep the whole set well under a
#: second on stock graphs of a few hundred nodes (see docs/algorithms.md); the
#: exact search's 50,000 sets take about 1.8 s on the recomputing backwards of a
#: memory budget, where it gives up.
DEFAULT_METHODS: tuple[str, ...] = (*INDUCTOR_METHODS, "refine", "exact")


def _exact_held_to(max_states: int) -> tuple[str, ...]:
    """The defaults with the exact search held to ``max_states`` sets."""
    return tuple(f"exact:max_states={max_states}" if m == "exact" else m for m in DEFAULT_METHODS)


#: The defaults with the exact search held to 10,000 sets, for the graphs of a region compiled under a memory
#: budget. On the recomputing backwards of a budget (about 190 nodes), the search gives up at 50,000 sets with
#: nothing lower than it had at 10,000, and each pass of those 40,000 sets took 1.5 s of the compile; every
#: graph of a budget it finishes on, it finishes within 10,000 (the most: 5,855).
QUICK_METHODS: tuple[str, ...] = _exact_held_to(10_000)

#: The defaults with the exact search held to 1,000 sets, for the hook's passes over a graph that the reorder
#: pass searches in another form with more: the re-run with a backward's tangents freed (the same nodes and
#: edges, from every order the first pass found) and the fusion guard's rank of the graph before fusion (the
#: pass orders the fused graph after it). Neither pass's proof is used, only its order. On the "how people
#: train" rows at 0.4 (:mod:`benchmarks.real.wild`), every such search that saw more than 1,000 sets gave up at
#: 10,000 with nothing lower than its start (0.4 s each, two per whole-model compile), and the ones that found
#: a lower order (the per-layer backwards' rank, 122 sets) finish well within 1,000.
RECHECK_METHODS: tuple[str, ...] = _exact_held_to(1_000)


@dataclass(frozen=True)
class ReorderResult:
    """The chosen order and what every method achieved.

    ``peaks`` and ``seconds`` are keyed by method name and include
    ``"baseline"``, and so does ``orders`` (each method's order, for
    planners that pick among them). ``optimal`` is True when some method
    proved the chosen peak cannot be beaten (or it meets ``lower_bound``).
    ``lower_bound`` is the highest proven bound on the minimum peak: the
    graph's :func:`~reorder.timeline.lower_bound`, a solver's bound, or the
    chosen peak itself once it is proven optimal; so :attr:`gap` is
    certified.

    For a graph with size symbols, ``points`` are the evaluation points
    (label -> symbol values, the hint first), ``peaks_at`` every method's
    peak at each of them (label -> method -> bytes) and ``reference`` the
    method whose order is Inductor's own; the chosen order is never above the
    reference's at any point (``notes["across_sizes"]`` says when a lower
    order at the hint was passed over). All three are empty otherwise.
    """

    order: list[int]
    peak: int
    method: str
    peaks: dict[str, int]
    seconds: dict[str, float]
    lower_bound: int
    optimal: bool
    notes: dict[str, str] = field(default_factory=dict)
    orders: dict[str, list[int]] = field(default_factory=dict)
    points: dict[str, dict[str, int]] = field(default_factory=dict)
    peaks_at: dict[str, dict[str, int]] = field(default_factory=dict)
    reference: str | None = None

    @property
    def gap(self) -> float:
        """How far the chosen peak is above the lower bound, as a fraction of the bound."""
        return (self.peak - self.lower_bound) / self.lower_bound if self.lower_bound else 0.0


def split_methods(text: str) -> list[str]:
    """Method specs from a comma-separated list; an item that is only ``key=value`` is one more option
    of the method before it, so ``optimal:effort=5,workers=2`` reads like ``optimal:effort=5:workers=2``.
    A list that names no method raises :class:`~reorder.errors.ReorderError`."""
    specs: list[str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if ":" not in item and "=" in item:
            if not specs:
                raise ReorderError(f"methods {text!r}: option {item!r} comes before any method")
            specs[-1] += ":" + item
        else:
            specs.append(item)
    if not specs:
        raise ReorderError(f"methods {text!r}: name at least one method; known: {', '.join(sorted(METHODS))}")
    return specs


def make_method(spec: str | Method) -> Method:
    """A method instance from a name (``"lpmf"``), a ``name:key=value:key=value`` string, or an instance.

    Every error is a :class:`~reorder.errors.ReorderError` of one line naming the method, the option and
    what is allowed: an unknown method or option (with the known ones), an item that is not
    ``key=value``, an option given twice, a value of the wrong kind or out of range (checked by the
    method's own dataclass, so ``Exact(max_states=-1)`` says the same).
    """
    if isinstance(spec, Method):
        return spec
    if not isinstance(spec, str):
        raise ReorderError(f"method {spec!r}: expected a method name such as 'lpmf' or 'exact:max_states=10000', "
                           f"or a method instance")
    name, *items = spec.split(":")
    if name not in METHODS:
        raise ReorderError(f"unknown method {name!r}; known: {', '.join(sorted(METHODS))}")
    cls = METHODS[name]
    allowed = cls.allowed()
    values = {}
    for item in filter(None, items):
        key, equals, text = item.partition("=")
        if not key or not equals:
            raise ReorderError(f"method {name!r}: option {item!r} is not key=value")
        if key not in allowed:
            raise ReorderError(f"method {name!r}: unknown option {key!r}; {cls.describe_options()}")
        if key in values:
            raise ReorderError(f"method {name!r}: option {key!r} given twice")
        values[key] = allowed[key].parse(text)
    return cls(**values)


#: Methods not run again at the other evaluation points of a symbolic graph: the searches that prove optima
#: spend their whole budget where many orders tie (at the lower bounds, the constant-sized buffers weigh most:
#: 2.4-2.9 s a point for exact on T5's training backward, against 0.3 s for refine); the others are cheap.
HINT_ONLY = ("baseline", "exact", "optimal")


def _orders_at_other_points(graph: Graph, instances: Sequence[Method], started: float, max_seconds: float | None,
                            notes: dict[str, str], seconds: dict[str, float]) -> dict[str, list[int]]:
    """The methods' orders at every evaluation point of a symbolic graph but the hint, named ``<method>@<point>``:
    more candidates for the choice across sizes (an order that is lowest at the hint may be above Inductor's own
    elsewhere, while one found at another point is as low at the hint and never above it). At each point the
    methods that improve an order start from the best found there so far; :data:`HINT_ONLY` are not run again. Each
    order's seconds go into ``seconds``."""
    found: dict[str, list[int]] = {}
    for label, point in graph.evaluation_points()[1:]:
        at = graph.at(point)
        best = list(range(graph.num_nodes))
        best_peak = estimate_peak_memory(at, best).peak
        for method in instances:
            if method.name in HINT_ONLY:
                continue
            if max_seconds is not None and time.perf_counter() - started > max_seconds:
                notes["safety_cap"] = (f"wall-clock cap of {max_seconds:g} s reached; skipped the methods at "
                                       f"{label} and later evaluation points")
                log.warning("reorder: %s: %s", graph.name, notes["safety_cap"])
                return found
            t0 = time.perf_counter()
            order = list(method.run(at, best).order)
            found[f"{method.name}@{label}"] = order
            seconds[f"{method.name}@{label}"] = time.perf_counter() - t0
            peak = estimate_peak_memory(at, order).peak
            if peak < best_peak:
                best, best_peak = order, peak
    return found


def reorder_for_peak_memory(
    graph: Graph,
    methods: Iterable | None = None,
    *,
    candidates: Mapping[str, Sequence[int]] | None = None,
    max_seconds: float | None = None,
    log_level: int = logging.INFO,
    bound_work: int = BOUND_WORK,
) -> ReorderResult:
    """Run the baseline and ``methods`` (default :data:`DEFAULT_METHODS`), return the lowest-peak order.

    ``methods`` items are names, ``"name:option=value"`` strings or method
    instances (see :data:`reorder.schedulers.METHODS`). ``candidates`` are
    named orders found elsewhere (Inductor's own, say); each is checked and
    estimated after the methods and wins only if strictly lower, so the
    result is never worse than any of them. Every method's effort is a
    deterministic count; ``max_seconds`` is only a safety cap on the wall
    clock: methods not started when it passes are skipped, and the result
    says so in ``notes["safety_cap"]``. On a graph with size symbols the
    methods also run at the other evaluation points (their orders named
    ``<method>@<point>``, ``refine@high`` say), and the order kept is the
    lowest at the hint among all of them never above Inductor's own order at
    any evaluation point
    (:func:`~reorder.schedulers.across_sizes.choose_across_sizes`).
    ``log_level``: of the lines that name the graph and each method's peak (Inductor's own say the same at
    INFO); an estimate inside a larger search (a budget's candidate partitions, a fusion guard's checks, run
    hundreds of times a compile) passes ``logging.DEBUG``.
    ``bound_work``: the work budget of the graph's :func:`~reorder.timeline.lower_bound`, which the result's
    ``lower_bound`` and ``optimal`` rest on (a method that proves its own bound still does); a caller that asks
    only for the order or its peak, many times a compile, passes 0 (the bounds that need no precedence pass),
    which leaves the order as it is (the budget's step model asks for two orders per candidate partition).
    """
    instances = [make_method(m) for m in (DEFAULT_METHODS if methods is None else methods)]
    if not instances:
        raise ReorderError(f"methods: name at least one method; known: {', '.join(sorted(METHODS))}")
    bound = lower_bound(graph, bound_work)
    log.log(log_level, "reordering %s for peak memory -- %d nodes", graph.name, graph.num_nodes)
    started = t0 = time.perf_counter()
    best_order: Sequence[int] = list(range(graph.num_nodes))
    best_peak = estimate_peak_memory(graph, best_order).peak
    best_method = "baseline"
    peaks = {"baseline": best_peak}
    orders = {"baseline": list(best_order)}
    seconds = {"baseline": time.perf_counter() - t0}
    notes: dict[str, str] = {}
    optimal = best_peak <= bound
    log.log(log_level, "baseline peak memory: %d", best_peak)
    for method in instances:
        if method.name == "baseline":
            continue
        if max_seconds is not None and time.perf_counter() - started > max_seconds:
            skipped = [m.name for m in instances[instances.index(method):]]
            notes["safety_cap"] = f"wall-clock cap of {max_seconds:g} s reached; skipped {', '.join(skipped)}"
            log.warning("reorder: %s: %s", graph.name, notes["safety_cap"])
            break
        t0 = time.perf_counter()
        outcome: MethodOutcome = method.run(graph, best_order)
        peak = estimate_peak_memory(graph, outcome.order).peak
        seconds[method.name] = time.perf_counter() - t0
        peaks[method.name] = peak
        orders[method.name] = list(outcome.order)
        if outcome.note:
            notes[method.name] = outcome.note
        log.log(log_level, "%s peak memory: %d%s", method.name, peak, f" ({outcome.note})" if outcome.note else "")
        if peak < best_peak:
            best_order, best_peak, best_method = outcome.order, peak, method.name
        if outcome.bound is not None:
            bound = max(bound, outcome.bound)
        optimal = optimal or outcome.optimal and peak <= best_peak or best_peak <= bound
    for name, order in (candidates or {}).items():
        t0 = time.perf_counter()
        peak = estimate_peak_memory(graph, order).peak  # checks that the order is valid
        seconds[name] = time.perf_counter() - t0
        peaks[name] = peak
        orders[name] = list(order)
        if peak < best_peak:
            best_order, best_peak, best_method = list(order), peak, name
            optimal = best_peak <= bound
    sizes = None
    if graph.symbols:
        elsewhere = _orders_at_other_points(graph, instances, started, max_seconds, notes, seconds)
        for name, order in elsewhere.items():
            orders[name] = order
            peaks[name] = estimate_peak_memory(graph, order).peak
        sizes = choose_across_sizes(graph, orders, list(orders), inductor_reference(peaks))
        if sizes.method != best_method:
            lowest = f"the order of lowest estimate ({best_method}, {best_peak:,} B)"
            notes = {key: f"about {lowest}: {note}" if key in peaks else note for key, note in notes.items()}
            best_order, best_peak, best_method = orders[sizes.method], sizes.peak, sizes.method
            optimal = best_peak <= bound
            notes["across_sizes"] = sizes.note
            log.log(log_level, "%s: %s", graph.name, sizes.note)
    if optimal:
        bound = best_peak
    return ReorderResult(list(best_order), best_peak, best_method, peaks, seconds, bound, optimal, notes, orders,
                         sizes.points if sizes else {}, sizes.peaks_at if sizes else {},
                         sizes.reference if sizes else None)
