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
  figures go into the report, and their orders join our candidates, so
  "never worse than Inductor" holds by construction.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from pathlib import Path
from typing import Callable, Sequence

from ..schedulers import reorder_for_peak_memory
from ..timeline import estimate_peak_memory
from .adapter import freed_tangents, graph_from_scheduler
from .capture import write_capture
from .figures import INDUCTOR_METHODS, inductor_figures

__all__ = ["ReorderPass", "reports"]

log = logging.getLogger("reorder")

#: One dict per graph the pass saw (see :class:`ReorderPass`).
reports: list[dict] = []


def graph_being_compiled() -> str:
    try:
        from functorch.compile import get_graph_being_compiled

        return get_graph_being_compiled()
    except Exception:  # noqa: BLE001 - a name is a nicety
        return "graph"


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """A digest of the package's sources: any change to them changes every pass's ``uuid()``."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parent.parent
    for path in sorted(package.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _custom_scheduler_pass_base():
    from torch._inductor.custom_graph_pass import CustomSchedulerPass

    return CustomSchedulerPass


def inductor_reorder(nodes: list) -> list:
    """Inductor 2.13's own ``reorder_for_peak_memory`` on ``nodes``, as the scheduler calls it."""
    from torch._inductor import memory
    from torch._inductor.virtualized import V
    from torch.utils._ordered_set import OrderedSet

    scheduler = V.graph.scheduler
    return memory.reorder_for_peak_memory(nodes, scheduler.name_to_buf, scheduler.name_to_fused_node,
                                          OrderedSet(V.graph.graph_inputs.keys()),
                                          OrderedSet(V.graph.get_output_names()))


class ReorderPass(_custom_scheduler_pass_base()):
    """Inductor post-fusion pass: the scheduler's nodes in the order with the lowest peak memory.

    Parameters
    ----------
    methods: our method names or specs (default :data:`~reorder.schedulers.DEFAULT_METHODS`).
    compare: also run Inductor's three methods on the real nodes: their peaks go into the
        report and their orders join the candidates.
    capture_dir: write each graph in torch's simulator format, with Inductor's figures.
    previous: a post-fusion pass the user had already set; it runs first, ours on its result.
    inductor_fallback: on a failure of ours, run Inductor's ``reorder_for_peak_memory``
        (set when Inductor's own pass was switched off for ours).
    max_seconds: wall-clock safety cap for our methods (reported when hit).
    slab: the :class:`~reorder.inductor.slab.SlabOptions` the wrapper's code generation runs with
        (None: Inductor's allocation); part of :meth:`uuid` only.

    Each report (in :data:`reports`) has ``graph``, ``nodes``, ``peak``,
    ``method``, ``methods`` (every method's peak), ``lower_bound``,
    ``optimal``, ``seconds`` (conversion and methods), ``notes`` and
    ``estimate_of_incoming_order``; with ``compare``, ``inductor`` (Inductor's
    own peaks: baseline, lpmf, bfs, dfs) and ``inductor_seconds``. A graph
    our pass failed on has ``graph`` and ``fallback`` (the reason) instead.
    """

    def __init__(self, methods: Sequence[str] | None = None, compare: bool = False,
                 capture_dir: str | Path | None = None, previous: Callable | None = None,
                 inductor_fallback: bool = False, max_seconds: float = 60.0, slab=None):
        self.methods = list(methods) if methods is not None else None
        self.compare = compare
        self.capture_dir = Path(capture_dir) if capture_dir is not None else None
        self.previous = previous
        self.inductor_fallback = inductor_fallback
        self.max_seconds = max_seconds
        self.slab = slab

    def uuid(self) -> str:
        """Stable across processes: our sources, the options that change the result, and the previous pass's uuid."""
        previous = self.previous.uuid() if hasattr(self.previous, "uuid") else repr(self.previous)
        return (f"reorder-{source_hash()[:16]}-{self.methods}-compare={self.compare}-cap={self.max_seconds}"
                f"-fallback={self.inductor_fallback}-slab={self.slab}-after={previous}")

    def __call__(self, nodes: list) -> list:
        if self.previous is not None:
            nodes = self.previous(nodes)
        name = graph_being_compiled()
        try:
            return self._reorder(nodes, name)
        except Exception as exc:  # noqa: BLE001 - the user's compile must go on
            reason = f"{type(exc).__name__}: {exc}"
            reports.append({"graph": name, "fallback": reason})
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

    def _reorder(self, nodes: list, name: str) -> list:
        t0 = time.perf_counter()
        graph, state = graph_from_scheduler(nodes, name)
        convert_seconds = time.perf_counter() - t0
        figures = inductor_figures(graph, nodes, state) if self.compare or self.capture_dir else None
        candidates = {f"inductor_{m}": figures["orders"][m] for m in INDUCTOR_METHODS} if figures else None
        result = reorder_for_peak_memory(graph, self.methods, candidates=candidates, max_seconds=self.max_seconds)
        incoming = estimate_peak_memory(graph).peak
        order, tangent_fields = self._order_freeing_tangents(nodes, name, state, graph, result)
        report = {
            "graph": name,
            "nodes": graph.num_nodes,
            "peak": result.peak,
            "method": result.method,
            "methods": result.peaks,
            "lower_bound": result.lower_bound,
            "optimal": result.optimal,
            "seconds": convert_seconds + sum(result.seconds.values()),
            "notes": result.notes,
            "estimate_of_incoming_order": incoming,
        }
        report.update(tangent_fields)
        if figures is not None:
            report["inductor"] = figures["peak"]
            report["inductor_seconds"] = {m: figures["seconds"][m] for m in INDUCTOR_METHODS}
        if self.capture_dir is not None:
            report["captured"] = str(write_capture(self.capture_dir, name, graph, figures))
        reports.append(report)
        log.info("reorder: %s: %d nodes, peak %d -> %d (%s)", name, graph.num_nodes, incoming, report["peak"],
                 report["method"])
        return [nodes[v] for v in order]

    def _order_freeing_tangents(self, nodes: list, name: str, state, graph, result) -> tuple[list[int], dict]:
        """Our order once a backward's tangents count as freed, as they are in a real step.

        Inductor's model never frees tangents (:func:`~reorder.inductor.adapter.freed_tangents`), so
        two orders it rates equal can differ in a real step by the tangent's bytes: the one that
        reads it last holds it longest. When the graph reads tangents, our methods run again on the
        graph with them freeable, from every order found so far, and the order kept is the lowest
        such peak among those whose Inductor-model peak is no higher than stock's choice (the first
        lowest of the incoming order and Inductor's three methods): never worse than stock in either
        model. Returns the order and the report's extra fields (none when nothing changes).
        """
        if not freed_tangents(nodes, state.graph_inputs):
            return result.order, {}
        real_graph, _ = graph_from_scheduler(nodes, name, free_tangents=True)
        real_result = reorder_for_peak_memory(real_graph, self.methods, candidates=result.orders,
                                              max_seconds=self.max_seconds)
        stock = min(("baseline", *INDUCTOR_METHODS), key=lambda m: result.peaks.get(m, float("inf")))
        options = {**{f"tangents_freed_{m}": o for m, o in real_result.orders.items()}, **result.orders}
        scored = []
        for method, candidate in options.items():
            peak = estimate_peak_memory(graph, candidate).peak
            if peak <= result.peaks[stock]:
                scored.append((estimate_peak_memory(real_graph, candidate).peak, peak, method, candidate))
        real_peak, peak, method, order = min(scored, key=lambda s: s[:2])
        return order, {"peak": peak, "method": method, "optimal": result.optimal and peak == result.peak,
                       "peak_tangents_freed": real_peak,
                       "peak_tangents_freed_of_stock_order": estimate_peak_memory(real_graph,
                                                                                  result.orders[stock]).peak}

