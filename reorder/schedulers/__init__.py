"""Ordering methods, one module each, and the best-of driver.

Every method maps a :class:`~reorder.graph.Graph` to a topological order
(node ids). ``baseline``, ``lpmf``, ``bfs`` and ``dfs`` reproduce Inductor
2.13's orders exactly; ``refine``, ``exact`` and ``optimal`` (CP-SAT, needs
the ``exact`` extra) are ours and never return an order worse than the one
they start from.
"""

from . import baseline, bfs, dfs, exact, lpmf, optimal, refine  # noqa: F401  (register the methods)
from .base import METHODS, MethodOutcome
from .best import (DEFAULT_METHODS, INDUCTOR_METHODS, QUICK_METHODS, RECHECK_METHODS, ReorderResult, make_method,
                   reorder_for_peak_memory, split_methods)
from .bfs import bfs_order
from .dfs import dfs_order
from .lpmf import lpmf_order

__all__ = [
    "DEFAULT_METHODS", "INDUCTOR_METHODS", "METHODS", "QUICK_METHODS", "RECHECK_METHODS", "MethodOutcome",
    "ReorderResult", "bfs_order", "dfs_order", "lpmf_order", "make_method", "reorder_for_peak_memory", "split_methods",
]
