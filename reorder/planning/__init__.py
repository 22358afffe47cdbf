"""Slab offset planning: storage lifetimes of an order, offset strategies, the validated plan, pools over time."""

from .instances import load_instance
from .exact import ExactPacking, pack_exact
from .intervals import Storage, StorageUse, align, storage_intervals, storage_uses
from .offsets import STRATEGIES, live_bytes_bound
from .pools import BufferGroup, GroupKind, Pool, PoolLayout, choose_layout, plan_pools
from .planner import STRATEGY_NAMES, exact_packing, pack, plan_memory, plan_orders
from .slab import SlabPlan

__all__ = [
    "ExactPacking", "STRATEGIES", "STRATEGY_NAMES", "SlabPlan", "Storage", "StorageUse", "align", "exact_packing",
    "live_bytes_bound", "load_instance", "pack", "pack_exact", "plan_memory", "plan_orders", "storage_intervals",
    "storage_uses",
    # pools over time (reorder.planning.pools)
    "BufferGroup", "GroupKind", "Pool", "PoolLayout", "choose_layout", "plan_pools",
]
