"""reorder: lower peak memory for compiled PyTorch programs.

Estimate the live bytes of an execution order of an Inductor scheduler graph,
pick the topological order with the lowest peak, and pack every buffer into one
slab at static offsets::

    import reorder
    graph = reorder.load_graph("graph.json")
    result = reorder.reorder_for_peak_memory(graph)
    plan = reorder.plan_memory(graph, result.order)

The Inductor hook is :mod:`reorder.inductor`, the slab runtime :mod:`reorder.runtime`, and
:mod:`reorder.measure` measures what a call really allocates.
"""

from .errors import CycleError, GraphError, OrderError, PlanError, ReorderError
from .graph import BufferSpec, Graph, InputSpec, NodeSpec, build_graph
from .io import load_graph, save_graph
from .planning import SlabPlan, plan_memory, plan_orders
from .schedulers import ReorderResult, reorder_for_peak_memory
from .timeline import estimate_peak_memory, estimate_peak_memory_allocfree, lower_bound

__version__ = "0.1.0"

__all__ = [
    "BufferSpec", "CycleError", "Graph", "GraphError", "InputSpec", "NodeSpec", "OrderError",
    "PlanError", "ReorderError", "ReorderResult", "SlabPlan", "build_graph", "estimate_peak_memory",
    "estimate_peak_memory_allocfree", "load_graph", "lower_bound", "plan_memory", "plan_orders",
    "reorder_for_peak_memory", "save_graph",
]
