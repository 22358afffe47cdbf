"""The post-fusion pass: reorder Inductor's scheduler nodes for the lowest peak memory.

:class:`ReorderPass` is a ``CustomSchedulerPass`` that Inductor calls after
fusion (``config._post_fusion_custom_pass``). It converts the nodes
(:mod:`~reorder.inductor.adapter`), runs our methods, and returns the nodes
in the chosen order. Its promises to the user whose compile it runs in:

* **Never fail the compile, never worse than stock.** If anything in our pass
  fails, it logs a WARNING on the ``reorder`` logger and falls back to
  Inductor's own ``reorder_for_peak_memory`` on the same nodes (when
  :func:`~reorder.inductor.install` switched Inductor's off), exactly what a
  stock compile would have run.
* **Deterministic.** Every method's effort is a count (states, moves, work
  units); ``max_seconds`` is only a safety cap, reported when hit. A cached
  compile and a fresh one agree, whatever the machine's load.
* **Cheap by default.** Our LPMF/BFS/DFS ports give Inductor's orders node
  for node, so Inductor's own (quadratic) LPMF is not rerun. With
  ``compare=True`` Inductor's three methods run on the real nodes too, their
  figures go into the record, and their orders join our candidates, so
  "never worse than Inductor" holds by construction.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Sequence

from ..budget.allocation_model import AllocationModel, KernelSources
from ..budget.allocation_search import fewer_kernels, lower_allocated_peak
from ..graph import Graph
from ..schedulers import QUICK_METHODS, RECHECK_METHODS, ReorderResult, reorder_for_peak_memory
from ..schedulers.across_sizes import inductor_reference, peaks_at_points
from ..timeline import estimate_peak_memory
from .adapter import freed_tangents, fx_graph_cache_hits, graph_being_compiled, graph_from_scheduler
from .capture import write_capture
from .compiled_budget import budgeted, kernel_sources, model_of_nodes, note_model, owned_copies
from .figures import INDUCTOR_METHODS, inductor_figures
from .releases import hook_base
from .session import FallbackRecord, HookOptions, OrderRecord, Session, SessionBound, source_hash

__all__ = ["OrderChoice", "ReorderPass", "choose_order", "compiling_session"]

log = logging.getLogger("reorder")


def inductor_reorder(nodes: list) -> list:
    """Inductor 2.13's own ``reorder_for_peak_memory`` on ``nodes``, as the scheduler calls it."""
    from torch._inductor import memory
    from torch._inductor.virtualized import V
    from torch.utils._ordered_set import OrderedSet

    scheduler = V.graph.scheduler
    return memory.reorder_for_peak_memory(nodes, scheduler.name_to_buf, scheduler.name_to_fused_node,
                                          OrderedSet(V.graph.graph_inputs.keys()),
                                          OrderedSet(V.graph.get_output_names()))


class ReorderPass(hook_base("CustomSchedulerPass"), SessionBound):
    """Inductor post-fusion pass: the scheduler's nodes in the order with the lowest peak memory.

    Parameters
    ----------
    session: the :class:`~reorder.inductor.session.Session` whose options the
        pass runs with and into which it adds one
        :class:`~reorder.inductor.session.OrderRecord` per graph (or a
        :class:`~reorder.inductor.session.FallbackRecord` with ``stage="order"``).
        The pass holds the session's token, not the session: Inductor deep-copies
        and pickles its configuration, and the session stays out of it (a deep
        copy keeps the token, a pickle drops it: see
        :class:`~reorder.inductor.session.SessionBound`).
    previous: a post-fusion pass the user had already set; it runs first, ours on its result.
    inductor_fallback: on a failure of ours, run Inductor's ``reorder_for_peak_memory``
        (set when Inductor's own pass was switched off for ours).

    It also records the FX graph cache hits since the previous graph.
    """

    def __init__(self, session: Session, previous=None, inductor_fallback: bool = False):
        self.options = session.options
        self.previous = previous
        self.inductor_fallback = inductor_fallback
        self.bind(session)

    def uuid(self) -> str:
        """Stable across processes: our sources, the options that change the result, and the previous pass's uuid."""
        previous = self.previous.uuid() if hasattr(self.previous, "uuid") else repr(self.previous)
        return (f"reorder-{source_hash()[:16]}-{self.options.uuid()}-fallback={self.inductor_fallback}"
                f"-after={previous}")

    def __call__(self, nodes: list) -> list:
        if self.previous is not None:
            nodes = self.previous(nodes)
        name = graph_being_compiled()
        session = self.session
        if session is not None:
            session.note_cache_hits(fx_graph_cache_hits())
        return self._reorder_or_keep(nodes, name, session)

    def _reorder_or_keep(self, nodes: list, name: str, session: Session | None) -> list:
        try:
            record, order = self._reorder(nodes, name, session)
        except Exception as exc:  # noqa: BLE001 - the user's compile must go on
            reason = f"{type(exc).__name__}: {exc}"
            if session is not None:
                session.add(FallbackRecord(name, "order", reason))
            if not self.inductor_fallback:
                log.warning("reorder: keeping Inductor's order for %s: %s", name, reason)
                return nodes
            log.warning("reorder: running Inductor's own reorder_for_peak_memory for %s: %s", name, reason)
            try:
                return inductor_reorder(nodes)
            except Exception as inner:  # noqa: BLE001
                log.warning("reorder: Inductor's pass failed too for %s (%s: %s); keeping the incoming order",
                            name, type(inner).__name__, inner)
                return nodes
        if session is not None:
            session.add(record)
        log.info("reorder: %s: %d nodes, peak %d -> %d (%s)", name, record.nodes,
                 record.estimate_of_incoming_order, record.peak, record.method)
        return [nodes[v] for v in order]

    def _reorder(self, nodes: list, name: str, session: Session | None) -> tuple[OrderRecord, list[int]]:
        """The record and the order kept: among our methods' orders, as a real step runs them (tangents freed),
        and in a budgeted region's graph by what its generated code will allocate
        (:func:`~reorder.inductor.compiled_budget.model_of_nodes`, :func:`choose_order`). A budgeted region's
        graphs are ordered with :data:`~reorder.schedulers.QUICK_METHODS` unless ``options.methods`` names
        methods."""
        options = self.options
        t0 = time.perf_counter()
        graph, state = graph_from_scheduler(nodes, name)
        t_figures = time.perf_counter()
        figures = inductor_figures(graph, nodes, state) if options.compare or options.capture_dir else None
        left_out_seconds = time.perf_counter() - t_figures  # Inductor's own methods are not our time
        candidates = {f"inductor_{m}": figures["orders"][m] for m in INDUCTOR_METHODS} if figures else None
        methods = options.methods
        if methods is None and budgeted(session, name):
            methods = QUICK_METHODS
        real_graph = graph
        owned = owned_copies(session, name, state.graph_inputs)
        if freed_tangents(nodes, state.graph_inputs, owned):
            real_graph, _ = graph_from_scheduler(nodes, name, free_tangents=True, owned=owned)
        allocation = model_of_nodes(session, name, nodes, real_graph, graph)
        sources = kernel_sources(nodes, name) if allocation is not None and allocation.grouped else None
        key = None
        if session is not None and figures is None:
            key = _decision_key(options, methods, state.not_symbolic, graph, real_graph, allocation, sources)
            earlier = session.remembered(key)
            if earlier is not None:
                record, order = earlier
                if allocation is not None:
                    note_model(session, name, allocation, order)
                return dataclasses.replace(record, graph=name, seconds=time.perf_counter() - t0,
                                           replayed=True), list(order)
        result = reorder_for_peak_memory(graph, methods, candidates=candidates, max_seconds=options.max_seconds)
        incoming = estimate_peak_memory(graph)
        choice = None
        if real_graph is not graph or allocation is not None:
            choice = choose_order(graph, real_graph, result, options, allocation, sources)
        t_capture = time.perf_counter()
        captured = write_capture(options.capture_dir, name, graph, figures) if options.capture_dir else None
        left_out_seconds += time.perf_counter() - t_capture  # nor is writing the capture
        order = choice.order if choice else result.order
        if allocation is not None:
            note_model(session, name, allocation, order)
        notes = dict(choice.notes if choice else result.notes)
        if state.not_symbolic:
            notes["sizes"] = f"planned at the size hints only: {state.not_symbolic}"
        record = OrderRecord(
            graph=name,
            nodes=graph.num_nodes,
            peak=choice.peak if choice else result.peak,
            method=choice.method if choice else result.method,
            methods=result.peaks,
            lower_bound=result.lower_bound,
            optimal=choice.optimal if choice else result.optimal,
            seconds=time.perf_counter() - t0 - left_out_seconds,
            estimate_of_incoming_order=incoming.peak,
            held_at_end=incoming.live[-1],
            notes=notes,
            peak_tangents_freed=choice.peak_tangents_freed if real_graph is not graph else None,
            peak_tangents_freed_of_stock_order=(choice.peak_tangents_freed_of_stock_order
                                                if real_graph is not graph else None),
            inductor=figures["peak"] if figures else None,
            inductor_seconds={m: figures["seconds"][m] for m in INDUCTOR_METHODS} if figures else None,
            captured=str(captured) if captured else None,
            peaks_at=sizes_record(graph, result, order),
        )
        if key is not None:
            session.remember(key, (record, tuple(order)))
        return record, order


def _decision_key(options: HookOptions, methods, not_symbolic, graph: Graph, real_graph: Graph,
                  allocation: AllocationModel | None, sources: KernelSources | None) -> tuple:
    """Everything the order our pass keeps for a graph depends on: the options, the methods run, the graph in
    Inductor's model and as a real step runs it, the model of its generated code and its kernels' sources. A
    graph compiled again in a session (a recompile, each layer of a model compiled on its own) has the same key,
    and the pass keeps the order it kept before without searching again (the record says ``replayed``)."""
    return ("order", options.uuid(), None if methods is None else tuple(methods), not_symbolic, graph.content_digest,
            real_graph.content_digest if real_graph is not graph else None,
            allocation.content_digest if allocation is not None else None,
            sources.digest if sources is not None else None)


def compiling_session() -> Session | None:
    """The session of the compile running now, the one way any of our hooks finds it from inside a compile: the
    session our pass in the compile's own Inductor configuration records into. Inductor hands each compile its
    configuration (also a backward compiled lazily in another thread), so concurrent sessions in other threads
    never mix; None when our pass is not in it."""
    from torch._inductor import config

    ours = config._post_fusion_custom_pass
    return ours.session if isinstance(ours, ReorderPass) else None


def sizes_record(graph: Graph, result: ReorderResult, order: Sequence[int]) -> dict[str, dict] | None:
    """For a graph with size symbols: at each evaluation point, its symbol values, the estimated peak of the
    order kept (``peak``) and of Inductor's own (``inductor``); None for a graph of constant sizes."""
    if not result.points:
        return None
    table = peaks_at_points(graph, {"ours": order, "inductor": result.orders[result.reference]},
                            list(result.points.items()))
    return {label: {"point": point, "peak": table[label]["ours"], "inductor": table[label]["inductor"]}
            for label, point in result.points.items()}


@dataclass(frozen=True)
class OrderChoice:
    """The order kept for a graph as a real step runs it (:func:`choose_order`)."""

    order: list[int]
    peak: int
    method: str
    optimal: bool
    peak_tangents_freed: int
    peak_tangents_freed_of_stock_order: int
    notes: dict[str, str] = field(default_factory=dict)


def choose_order(graph: Graph, real_graph: Graph, result: ReorderResult, options: HookOptions = HookOptions(),
                 allocation: AllocationModel | None = None, sources: KernelSources | None = None) -> OrderChoice:
    """Our order for a graph as a real step runs it: its tangents freed, and under a memory budget, what its
    generated code allocates.

    ``graph`` is Inductor's model of the graph and ``result`` our methods on it;
    ``real_graph`` is the same graph with a backward's tangents freeable (same
    node ids; ``graph`` itself for a forward). Inductor's model never frees
    tangents (:func:`~reorder.inductor.adapter.freed_tangents`), so two orders
    it rates equal can differ in a real step by the tangent's bytes: the one
    that reads it last holds it longest. Our methods run again on
    ``real_graph`` (when it differs), from every order found so far (with
    ``options.methods`` and ``options.max_seconds``, as ``result``; by
    default :data:`~reorder.schedulers.RECHECK_METHODS`: only the orders
    count here, and ``result`` searched the same nodes and edges). Among
    the orders whose estimate in Inductor's model is no higher than stock's
    choice (the first lowest of the incoming order and Inductor's three
    methods), never worse than stock in either model, the order kept is the
    lowest by

    1. with an ``allocation`` model of ``real_graph`` (a graph of a region
       compiled under a memory budget,
       :func:`~reorder.inductor.compiled_budget.model_of_nodes`), the peak
       its generated code allocates: in-place updates and the reuse pool make
       orders of one estimate allocate different peaks;
    2. the estimate with the tangents freed;
    3. the estimate in Inductor's model.

    With an ``allocation`` model, nodes are then moved one at a time while
    each move lowers what the generated code allocates and keeps the estimate
    no higher than stock's, from that order and then from the other
    candidates in rank with the replays left (``moved_<m>``, ``m`` the
    start's method,
    :func:`~reorder.budget.allocation_search.lower_allocated_peak`). On the
    CPU, nodes are then moved to gather the generated kernels into fewer of
    the C++ backend's kernel groups, each move allocating no more and keeping
    the estimate no higher than stock's (``<method>_gathered``, with a
    ``"kernels"`` note; :func:`~reorder.budget.allocation_search.fewer_kernels`):
    each group is a source Inductor builds on its own, so the compile takes
    less time for the same peak; with ``sources`` (what each node puts into its
    group's source, :func:`~reorder.inductor.compiled_budget.kernel_sources`), the
    distinct sources are counted first, since a group that repeats another of
    the graph is built once. The
    budget's verdict reads what the kept order's code really allocates
    (:func:`~reorder.inductor.compiled_budget.check_generated`).

    On a graph with size symbols, "no higher" holds at every evaluation point
    of ``result.points``, as the best-of driver asks of its own choice.

    The kept order may be above the lowest estimate ``result`` found (which
    its notes may call optimal). Then it is not optimal, and the notes say so:
    ``"tangents_freed"`` (or ``"allocated"``, when the generated code's peak
    decided) gives both peaks, and every method's note names the order it
    speaks of.
    """
    orders = {}
    if real_graph is not graph:
        methods = RECHECK_METHODS if options.methods is None else options.methods
        real_result = reorder_for_peak_memory(real_graph, methods, candidates=result.orders,
                                              max_seconds=options.max_seconds)
        orders = {f"tangents_freed_{m}": o for m, o in real_result.orders.items()}
    orders.update(result.orders)
    stock = inductor_reference(result.peaks)
    points = list(result.points.items()) or [("hint", {})]
    table = peaks_at_points(graph, orders, points)
    allocated = allocation.peak if allocation is not None else lambda order: 0
    scored = []
    for method, candidate in orders.items():
        if all(peaks[method] <= peaks[stock] for peaks in table.values()):
            scored.append((allocated(candidate), estimate_peak_memory(real_graph, candidate).peak,
                           table[points[0][0]][method], method, candidate))
    scored.sort(key=lambda s: s[:3])
    allocated_peak, real_peak, peak, method, order = scored[0]
    kernels_note = ""
    if allocation is not None:
        graphs_at = [graph.at(point) for _, point in points]  # built once: the search asks for every move kept
        stock_peaks = [table[label][stock] for label, _ in points]

        def no_higher_than_stock(candidate: list[int]) -> bool:
            return all(estimate_peak_memory(at, candidate).peak <= peak for at, peak in zip(graphs_at, stock_peaks))

        starts: dict[tuple[int, ...], str] = {}
        for *_, start_method, candidate in scored:  # best first, each distinct order once
            starts.setdefault(tuple(candidate), start_method)
        models = [allocation.at(point) for _, point in points]
        moved = lower_allocated_peak(models, [list(o) for o in starts], no_higher_than_stock)
        if moved.order != order:
            allocated_peak, order, method = moved.peak, moved.order, f"moved_{list(starts.values())[moved.start]}"
        gathered = fewer_kernels(models, order, no_higher_than_stock, sources=sources)
        if gathered.moves:
            order, method = gathered.order, f"{method}_gathered"
            allocated_peak = allocation.peak(order)
            built, built_before = ((f" of {gathered.sources} distinct source(s)",
                                    f" of {gathered.sources_before}") if sources is not None else ("", ""))
            kernels_note = (f"{gathered.moves} node move(s) gathered the generated kernels into "
                            f"{gathered.kernels} kernel group(s){built}, was {gathered.kernels_before}"
                            f"{built_before}, allocating no more")
        if order != scored[0][-1]:
            real_peak = estimate_peak_memory(real_graph, order).peak
            peak = estimate_peak_memory(graph, order).peak
    stock_real_peak = estimate_peak_memory(real_graph, result.orders[stock]).peak
    notes = dict(result.notes)
    if kernels_note:
        notes["kernels"] = kernels_note
    lowest = f"the order of lowest estimate ({result.method}, {result.peak:,} B)"
    above = ""
    if peak > result.peak:
        notes = {key: f"about {lowest}: {note}" if key in result.peaks and not note.startswith("about ") else note
                 for key, note in notes.items()}
        above = f"; its estimate, {peak:,} B, is {peak - result.peak:,} B above {lowest}, so it is not optimal"
    allocated_by_lowest = allocated(result.order)
    if allocated_peak < allocated_by_lowest:
        notes["allocated"] = (f"kept {method} for what its generated code allocates: {allocated_peak:,} B against "
                              f"{allocated_by_lowest:,} B for {lowest}{above}")
    elif above:
        notes["tangents_freed"] = (f"kept {method} for a real step: {real_peak:,} B with the tangents freed against "
                                   f"{stock_real_peak:,} B for stock's order{above}")
    return OrderChoice(list(order), peak, method, result.optimal and peak == result.peak, real_peak,
                       stock_real_peak, notes)
