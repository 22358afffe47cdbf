"""reorder: lower peak memory for compiled PyTorch programs.

Estimate the live bytes of an execution order of an Inductor scheduler graph,
pick the topological order with the lowest peak, and pack every buffer into one
slab at static offsets.
"""

from .errors import CycleError, GraphError, OrderError, PlanError, ReorderError
from .graph import BufferSpec, Graph, InputSpec, NodeSpec, build_graph
from .io import load_graph, save_graph
from .timeline import estimate_peak_memory, estimate_peak_memory_allocfree, lower_bound

__version__ = "0.1.0"

__all__ = [
    "BufferSpec", "CycleError", "Graph", "GraphError", "InputSpec", "NodeSpec", "OrderError",
    "PlanError", "ReorderError", "build_graph", "estimate_peak_memory",
    "estimate_peak_memory_allocfree", "load_graph", "lower_bound", "save_graph",
]
