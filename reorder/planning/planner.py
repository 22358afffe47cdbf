"""Planning a graph: storages of an order, packed by a strategy, workspaces appended, validated.

:func:`plan_memory` plans one order; :func:`plan_orders` plans several
candidate orders (for example every reordering method's) and keeps the
smallest slab, since the order with the lowest live-bytes peak does not
always pack best.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from ..errors import PlanError
from ..graph import Graph
from .intervals import align, storage_intervals
from .offsets import STRATEGIES, live_bytes_bound
from .search import search
from .slab import SlabPlan

__all__ = ["plan_memory", "plan_orders", "pack", "STRATEGY_NAMES"]

STRATEGY_NAMES = tuple(STRATEGIES) + ("search",)


def pack(
    starts: Sequence[int],
    ends: Sequence[int],
    sizes: Sequence[int],
    strategy: str = "search",
    seconds: float = 1.0,
    restarts: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[int]:
    """Offsets for half-open lifetimes and sizes by ``strategy`` (see :mod:`reorder.planning.offsets`).

    ``seconds``, ``restarts`` and ``progress`` go to the ``search`` strategy
    (see :func:`~reorder.planning.search.search`).
    """
    if strategy == "search":
        return search(starts, ends, sizes, seconds=seconds, max_restarts=restarts, progress=progress)
    try:
        return STRATEGIES[strategy](starts, ends, sizes)
    except KeyError:
        raise PlanError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGY_NAMES)}") from None


def plan_memory(
    graph: Graph,
    order: Sequence[int] | None = None,
    strategy: str = "search",
    alignment: int = 64,
    include_inputs: bool = True,
    seconds: float = 0.5,
    restarts: int | None = None,
) -> SlabPlan:
    """A validated :class:`SlabPlan` for ``order`` (node ids; default the graph's own order).

    ``seconds`` and ``restarts`` bound the ``search`` strategy, which stops
    sooner when it reaches the lower bound.
    """
    order = list(range(graph.num_nodes)) if order is None else list(order)
    storages = storage_intervals(graph, order, alignment, include_inputs)
    starts = [s.start for s in storages]
    ends = [s.end for s in storages]
    sizes = [s.size for s in storages]
    offsets = pack(starts, ends, sizes, strategy, seconds, restarts)
    tensor_bytes = max((o + z for o, z in zip(offsets, sizes)), default=0)
    top = tensor_bytes
    unique = {}
    for v in range(graph.num_nodes):
        if graph.unique_workspace[v]:
            unique[graph.node_names[v]] = (top, align(graph.unique_workspace[v], alignment))
            top += unique[graph.node_names[v]][1]
    shared = (top, align(max(graph.workspace, default=0), alignment))
    names = graph.buffer_names
    plan = SlabPlan(
        strategy=strategy,
        alignment=alignment,
        order=tuple(graph.names_of(order)),
        names=tuple(names[s.owner] for s in storages),
        members=tuple(tuple(names[m] for m in s.members) for s in storages),
        starts=tuple(starts),
        ends=tuple(ends),
        sizes=tuple(sizes),
        offsets=tuple(offsets),
        tensor_bytes=tensor_bytes,
        tensor_bound=live_bytes_bound(starts, ends, sizes),
        unique_workspace=unique,
        shared_workspace=shared,
        symbolic_sizes=tuple(graph.symbolic_size[s.owner] for s in storages),
    )
    plan.validate()
    return plan


def plan_orders(
    graph: Graph,
    orders: Mapping[str, Sequence[int]],
    strategy: str = "search",
    alignment: int = 64,
    include_inputs: bool = True,
    seconds: float = 2.0,
    restarts: int | None = None,
) -> tuple[str, SlabPlan]:
    """Plan each candidate order, return ``(name, plan)`` of the smallest slab (ties: first given).

    Identical orders are planned once; ``seconds`` is shared equally among them.
    """
    unique_orders: dict[tuple[int, ...], str] = {}
    for name, order in orders.items():
        unique_orders.setdefault(tuple(order), name)
    if not unique_orders:
        raise PlanError("plan_orders needs at least one order")
    share = seconds / len(unique_orders)
    best: tuple[str, SlabPlan] | None = None
    for order, name in unique_orders.items():
        plan = plan_memory(graph, order, strategy, alignment, include_inputs, share, restarts)
        if best is None or plan.slab_bytes < best[1].slab_bytes:
            best = (name, plan)
    return best
