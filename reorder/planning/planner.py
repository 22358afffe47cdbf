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
from .exact import DEFAULT_NODES, ExactPacking, pack_exact
from .offsets import STRATEGIES, live_bytes_bound
from .search import search
from .slab import SlabPlan

__all__ = ["plan_memory", "plan_orders", "pack", "exact_packing", "STRATEGY_NAMES"]

STRATEGY_NAMES = tuple(STRATEGIES) + ("search",)

#: The ``search`` strategy's time budget when :func:`pack` is given none.
SEARCH_SECONDS = 1.0


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGY_NAMES:
        raise PlanError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGY_NAMES)}")


def exact_packing(
    starts: Sequence[int],
    ends: Sequence[int],
    sizes: Sequence[int],
    strategy: str = "search",
    capacity: int | None = None,
    nodes: int = DEFAULT_NODES,
    seconds: float | None = None,
) -> ExactPacking:
    """:func:`~reorder.planning.exact.pack_exact` from ``strategy``'s offsets (for ``search``: its own incumbent).

    Every strategy but ``search`` is deterministic, so the result is too.
    """
    check_strategy(strategy)
    incumbent = None if strategy == "search" else STRATEGIES[strategy](starts, ends, sizes)
    return pack_exact(starts, ends, sizes, capacity, nodes=nodes, seconds=seconds, incumbent=incumbent)


def _packing(
    starts: Sequence[int],
    ends: Sequence[int],
    sizes: Sequence[int],
    strategy: str,
    seconds: float | None,
    restarts: int | None,
    progress: Callable[[int, int], None] | None,
    exact: bool,
    nodes: int,
) -> tuple[list[int], ExactPacking | None]:
    """Offsets by ``strategy``, or by the exact packer when ``exact``; with the exact packer's record."""
    check_strategy(strategy)
    if exact:
        found = exact_packing(starts, ends, sizes, strategy, None, nodes, seconds)
        return list(found.offsets), found
    if strategy == "search":
        budget = SEARCH_SECONDS if seconds is None else seconds
        return search(starts, ends, sizes, seconds=budget, max_restarts=restarts, progress=progress), None
    return STRATEGIES[strategy](starts, ends, sizes), None


def pack(
    starts: Sequence[int],
    ends: Sequence[int],
    sizes: Sequence[int],
    strategy: str = "search",
    seconds: float | None = None,
    restarts: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    exact: bool = False,
    nodes: int = DEFAULT_NODES,
) -> list[int]:
    """Offsets for half-open lifetimes and sizes by ``strategy`` (see :mod:`reorder.planning.offsets`).

    ``seconds`` (default 1), ``restarts`` and ``progress`` go to the
    ``search`` strategy (see :func:`~reorder.planning.search.search`).
    ``exact=True`` minimises the slab with
    :func:`~reorder.planning.exact.pack_exact` instead, within ``nodes``
    placements and the wall-clock cap ``seconds`` (default none), starting
    from the ``strategy``'s offsets (for ``search``: its deterministic
    incumbent).
    """
    return _packing(starts, ends, sizes, strategy, seconds, restarts, progress, exact, nodes)[0]


def plan_memory(
    graph: Graph,
    order: Sequence[int] | None = None,
    strategy: str = "search",
    alignment: int = 64,
    include_inputs: bool = True,
    seconds: float | None = None,
    restarts: int | None = None,
    exact: bool = False,
    nodes: int = DEFAULT_NODES,
) -> SlabPlan:
    """A validated :class:`SlabPlan` for ``order`` (node ids; default the graph's own order).

    ``seconds`` (default 0.5) and ``restarts`` bound the ``search`` strategy,
    which stops sooner when it reaches the lower bound. ``exact=True`` packs
    with the exact packer (see :func:`pack`; ``seconds`` is then its
    wall-clock cap, default none); the plan records its status, effort and
    proven lower bound.
    """
    if seconds is None and not exact:
        seconds = 0.5
    order = list(range(graph.num_nodes)) if order is None else list(order)
    storages = storage_intervals(graph, order, alignment, include_inputs)
    starts = [s.start for s in storages]
    ends = [s.end for s in storages]
    sizes = [s.size for s in storages]
    offsets, found = _packing(starts, ends, sizes, strategy, seconds, restarts, None, exact, nodes)
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
        strategy="exact" if exact else strategy,
        alignment=alignment,
        order=tuple(graph.names_of(order)),
        names=tuple(names[s.owner] for s in storages),
        members=tuple(tuple(names[m] for m in s.members) for s in storages),
        starts=tuple(starts),
        ends=tuple(ends),
        sizes=tuple(sizes),
        offsets=tuple(offsets),
        tensor_bytes=tensor_bytes,
        tensor_bound=live_bytes_bound(starts, ends, sizes) if found is None else found.lower_bound,
        unique_workspace=unique,
        shared_workspace=shared,
        symbolic_sizes=tuple(graph.symbolic_size[s.owner] for s in storages),
        status=None if found is None else found.status,
        nodes=0 if found is None else found.nodes,
    )
    plan.validate()
    return plan


def plan_orders(
    graph: Graph,
    orders: Mapping[str, Sequence[int]],
    strategy: str = "search",
    alignment: int = 64,
    include_inputs: bool = True,
    seconds: float | None = None,
    restarts: int | None = None,
    exact: bool = False,
    nodes: int = DEFAULT_NODES,
) -> tuple[str, SlabPlan]:
    """Plan each candidate order, return ``(name, plan)`` of the smallest slab (ties: first given).

    Identical orders are planned once; ``seconds`` (default 2 for the
    ``search`` strategy, none for the exact packer) is shared equally among
    them; ``nodes`` is each order's.
    """
    if seconds is None and not exact:
        seconds = 2.0
    unique_orders: dict[tuple[int, ...], str] = {}
    for name, order in orders.items():
        unique_orders.setdefault(tuple(order), name)
    if not unique_orders:
        raise PlanError("plan_orders needs at least one order")
    share = None if seconds is None else seconds / len(unique_orders)
    best: tuple[str, SlabPlan] | None = None
    for order, name in unique_orders.items():
        plan = plan_memory(graph, order, strategy, alignment, include_inputs, share, restarts, exact, nodes)
        if best is None or plan.slab_bytes < best[1].slab_bytes:
            best = (name, plan)
    return best
