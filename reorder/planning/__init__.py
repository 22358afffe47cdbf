"""Slab offset planning: storage lifetimes of an order, offset strategies, the validated plan, pools over time."""

from .instances import load_instance
from .exact_packing import ExactPacking, pack_exact
from .intervals import Storage, StorageUse, align, storage_intervals, storage_uses
from .offset_search import SearchedOffsets, search_offsets
from .offsets import STRATEGIES, live_bytes_bound
from .options import DEFAULT_MAX_SECONDS, DEFAULT_RESTARTS, STRATEGY_NAMES, PlanOptions
from .pools import BufferGroup, GroupKind, Pool, PoolLayout, choose_layout, plan_pools
from .planner import pack, plan_intervals, plan_memory, plan_orders, solve_packing
from .slab import SlabPlan

__all__ = [
    "DEFAULT_MAX_SECONDS", "DEFAULT_RESTARTS", "ExactPacking", "PlanOptions", "STRATEGIES", "STRATEGY_NAMES",
    "SearchedOffsets", "SlabPlan", "Storage", "StorageUse", "align", "live_bytes_bound", "load_instance", "pack",
    "pack_exact", "plan_intervals", "plan_memory", "plan_orders", "search_offsets", "solve_packing",
    "storage_intervals", "storage_uses",
    # pools over time (reorder.planning.pools)
    "BufferGroup", "GroupKind", "Pool", "PoolLayout", "choose_layout", "plan_pools",
]
