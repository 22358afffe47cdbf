"""Inductor integration: the only module that touches Inductor's scheduler objects.

* :func:`graph_from_scheduler` converts the scheduler's node list into our
  :class:`~reorder.graph.Graph`, once, at the edge. Sizes and successor sets
  come from Inductor's own planning-info functions in ``torch/_inductor/memory.py``
  so that multi-output layouts, ``NoneLayout`` buffers, mutation renames,
  fake (ordering-only) WeakDeps and freeable inputs follow Inductor exactly.
* :class:`ReorderPass` is a ``CustomSchedulerPass`` that Inductor calls after
  fusion (``config._post_fusion_custom_pass``): it converts, reorders with our
  methods, and returns the nodes in our order. If anything fails it logs a
  warning on the ``reorder`` logger and returns Inductor's nodes unchanged:
  a user's compile never fails because of us.
* :func:`use` (a context manager), :func:`install` and :func:`uninstall`
  switch it on for ``torch.compile``; :data:`reports` receives one dict per
  compiled graph.

Inductor's own ``reorder_for_peak_memory`` runs after the post-fusion pass.
Ours already runs Inductor's three methods on the incoming order and keeps
the best, so by default :func:`use` turns Inductor's pass off to save the
compile time (``keep_inductor_pass=True`` keeps it; it then starts from our
order and can only lower the peak further).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Iterator, Sequence

from .graph import BufferSpec, Graph, InputSpec, NodeSpec, build_graph
from .io import graph_to_simulator
from .schedulers import reorder_for_peak_memory
from .timeline import estimate_peak_memory
from .torch_memory import INDUCTOR_METHODS, TorchReference

__all__ = ["ReorderPass", "graph_from_scheduler", "install", "uninstall", "use", "reports"]

log = logging.getLogger("reorder")

#: One dict per graph our pass reordered (see :class:`ReorderPass`).
reports: list[dict] = []


def _graph_name() -> str:
    try:
        from functorch.compile import get_graph_being_compiled

        return get_graph_being_compiled()
    except Exception:  # noqa: BLE001 - a name is a nicety
        return "graph"


def _prepare(nodes: list):
    """Inductor's own planning info for ``nodes``: (freeable inputs, name_to_buf, graph outputs)."""
    from torch._inductor import memory
    from torch._inductor.virtualized import V
    from torch.utils._ordered_set import OrderedSet

    scheduler = V.graph.scheduler
    graph_inputs = OrderedSet(V.graph.graph_inputs.keys())
    graph_outputs = OrderedSet(V.graph.get_output_names())
    name_to_buf = {buf.get_name(): buf for node in nodes for buf in node.get_outputs()}
    freeable = memory.get_freeable_input_buf(nodes, graph_inputs)
    memory.assign_memory_planning_info_for_scheduler_buffers(nodes, scheduler.name_to_buf)
    memory.assign_memory_planning_info_for_scheduler_nodes(nodes, scheduler.name_to_fused_node, scheduler.name_to_buf,
                                                           freeable)
    return freeable, name_to_buf, graph_outputs, scheduler.mutation_real_name, graph_inputs


def graph_from_scheduler(nodes: list, name: str = "graph") -> tuple[Graph, dict]:
    """Our :class:`Graph` of Inductor's (fused) scheduler nodes, in their order, and Inductor's state for them."""
    from torch._inductor.dependencies import WeakDep
    from torch._inductor.ir import MultiOutputLayout

    freeable, name_to_buf, graph_outputs, real_name, graph_inputs = _prepare(nodes)
    producer = {b: node.get_name() for node in nodes for b in (o.get_name() for o in node.get_outputs())}
    parents = {b for b, buf in name_to_buf.items() if isinstance(getattr(buf.node, "layout", None), MultiOutputLayout)}
    kept_inputs: dict[str, InputSpec] = {}
    specs = []
    for node in nodes:
        reads, after = [], []
        for dep in node.unmet_dependencies:
            if dep.name not in producer:
                continue
            if isinstance(dep, WeakDep) and dep.is_fake:
                after.append(producer[dep.name])
                if dep.name in real_name and real_name[dep.name] in producer:
                    after.append(producer[real_name[dep.name]])
            else:
                reads.append(dep.name)
        for dep in node.read_writes.reads:
            if dep.name in freeable and not (isinstance(dep, WeakDep) and dep.is_fake):
                reads.append(dep.name)
        outputs = []
        for buf in node.get_outputs():
            b = buf.get_name()
            info = buf.mpi_buffer
            alias = real_name.get(b)
            if alias is not None and alias not in producer and alias not in freeable:
                kept_inputs.setdefault(alias, InputSpec(alias, 0, freeable=False))  # a mutated graph input
            if alias is not None:
                reads.append(alias)
            parent = None
            if b not in parents and info.size_alloc == 0 and info.size_free > 0:
                parent = next((r for r in reads if r in parents), None)
            outputs.append(BufferSpec(
                b, size=0 if alias is not None or b in parents else max(info.size_alloc, info.size_free),
                alias_of=alias, parent=parent, size_alloc=info.size_alloc, size_free=info.size_free,
            ))
        after = [a for a in dict.fromkeys(after) if a != node.get_name()]
        specs.append(NodeSpec(node.get_name(), outputs, reads=list(dict.fromkeys(reads)), after=after))
    inputs = [InputSpec(b, fb.mpi_buffer.size_free) for b, fb in freeable.items()] + list(kept_inputs.values())
    outputs = [b for b in graph_outputs if b in producer or b in freeable]
    graph = build_graph(specs, inputs, outputs, name=name)
    state = {"freeable": freeable, "name_to_buf": name_to_buf, "graph_outputs": graph_outputs,
             "graph_inputs": graph_inputs}
    return graph, state


def inductor_figures(graph: Graph, nodes: list, state: dict) -> dict:
    """Inductor's own peaks (and orders, as node names) for the incoming order and its three methods.

    The real scheduler nodes carry the planning info torch's functions read,
    so the same :class:`~reorder.torch_memory.TorchReference` that drives
    stand-in nodes in tests and benchmarks drives them here, under the
    user's LPMF threshold.
    """
    from torch._inductor import config

    reference = TorchReference(graph, nodes, state["freeable"], state["name_to_buf"], state["graph_outputs"])
    figures = reference.run_all(config.size_threshold_for_succ_based_strategy)
    return {
        "peaks": figures["peak"],
        "orders": {m: graph.names_of(order) for m, order in figures["orders"].items()},
        "seconds": {m: figures["seconds"][m] for m in INDUCTOR_METHODS},
        "peak_allocfree_baseline": reference.estimate_allocfree(),
    }


@functools.lru_cache(maxsize=1)
def _source_hash() -> str:
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _custom_scheduler_pass_base():
    from torch._inductor.custom_graph_pass import CustomSchedulerPass

    return CustomSchedulerPass


class ReorderPass(_custom_scheduler_pass_base()):
    """Inductor post-fusion pass: reorder the scheduler's nodes for the lowest peak memory.

    ``methods`` are our method names (default: :data:`~reorder.schedulers.DEFAULT_METHODS`).
    ``compare`` also runs Inductor's own three methods for the report.
    ``capture_dir`` writes each graph in torch's simulator format, with
    Inductor's figures beside it.
    """

    def __init__(self, methods: Sequence[str] | None = None, compare: bool = True, capture_dir: str | Path | None = None):
        self.methods = list(methods) if methods is not None else None
        self.compare = compare
        self.capture_dir = Path(capture_dir) if capture_dir is not None else None

    def uuid(self) -> str:
        """Stable across processes: our sources and options (Inductor keys its FX graph cache on it)."""
        return f"reorder-{_source_hash()[:16]}-{self.methods}"

    def __call__(self, nodes: list) -> list:
        name = _graph_name()
        try:
            return self._reorder(nodes, name)
        except Exception as exc:  # noqa: BLE001 - the user's compile must go on
            log.warning("reorder: keeping Inductor's order for %s: %s: %s", name, type(exc).__name__, exc)
            return nodes

    def _reorder(self, nodes: list, name: str) -> list:
        t0 = time.perf_counter()
        graph, state = graph_from_scheduler(nodes, name)
        convert_seconds = time.perf_counter() - t0
        figures = inductor_figures(graph, nodes, state) if self.compare else None
        result = reorder_for_peak_memory(graph, self.methods)
        ours = estimate_peak_memory(graph).peak
        report = {
            "graph": name,
            "nodes": graph.num_nodes,
            "peak": result.peak,
            "method": result.method,
            "methods": result.peaks,
            "lower_bound": result.lower_bound,
            "optimal": result.optimal,
            "seconds": convert_seconds + sum(result.seconds.values()),
            "estimate_of_incoming_order": ours,
        }
        if figures is not None:
            report["inductor"] = figures["peaks"]
            report["inductor_seconds"] = figures["seconds"]
        reports.append(report)
        if self.capture_dir is not None:
            self._write(graph, name, figures)
        log.info("reorder: %s: %d nodes, peak %d -> %d (%s)", name, graph.num_nodes, ours, result.peak, result.method)
        return [nodes[v] for v in result.order]

    def _write(self, graph: Graph, name: str, figures: dict | None) -> None:
        self.capture_dir.mkdir(parents=True, exist_ok=True)
        stem = name.replace("/", "_")
        (self.capture_dir / f"{stem}.json").write_text(json.dumps(graph_to_simulator(graph), indent=1) + "\n")
        if figures is None:
            return
        index = self.capture_dir / "inductor-figures.json"
        data = json.loads(index.read_text()) if index.exists() else {}
        data[stem] = {
            "peak": {("baseline" if k == "baseline" else f"topological_sort_{k}"): v for k, v in figures["peaks"].items()},
            "peak_allocfree_baseline": figures["peak_allocfree_baseline"],
            "orders": {f"topological_sort_{k}": v for k, v in figures["orders"].items()},
        }
        index.write_text(json.dumps(data, indent=1) + "\n")


_installed: list[tuple] = []


def install(methods: Sequence[str] | None = None, keep_inductor_pass: bool = False, compare: bool = True,
            capture_dir: str | Path | None = None) -> ReorderPass:
    """Make every later ``torch.compile`` use our pass, until :func:`uninstall`."""
    from torch._inductor import config

    reorder_pass = ReorderPass(methods, compare, capture_dir)
    _installed.append((config._post_fusion_custom_pass, config.reorder_for_peak_memory))
    config._post_fusion_custom_pass = reorder_pass
    config.reorder_for_peak_memory = keep_inductor_pass
    return reorder_pass


def uninstall() -> None:
    """Restore the configuration that the last :func:`install` replaced."""
    from torch._inductor import config

    if not _installed:
        return
    config._post_fusion_custom_pass, config.reorder_for_peak_memory = _installed.pop()


@contextlib.contextmanager
def use(methods: Sequence[str] | None = None, keep_inductor_pass: bool = False, compare: bool = True,
        capture_dir: str | Path | None = None) -> Iterator[ReorderPass]:
    """Within the block, every ``torch.compile`` uses our pass; the previous config comes back on exit."""
    reorder_pass = install(methods, keep_inductor_pass, compare, capture_dir)
    try:
        yield reorder_pass
    finally:
        uninstall()
