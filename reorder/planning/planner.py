"""Planning a graph: storages of an order, packed by a strategy, workspaces appended, validated.

:func:`plan_memory` plans one order; :func:`plan_orders` plans several
candidate orders (for example every reordering method's) and keeps the
smallest slab, since the order with the lowest live-bytes peak does not
always pack best. :func:`pack` and :func:`plan_intervals` pack bare
lifetimes (an offset-packing instance). Each takes one
:class:`~reorder.planning.options.PlanOptions`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Mapping, Sequence

from ..errors import PlanError
from ..graph import Graph
from ..sizes import align_expression
from .exact_packing import ExactPacking, pack_exact
from .intervals import Storage, align, storage_intervals
from .offset_search import search_offsets
from .offsets import STRATEGIES, live_bytes_bound
from .options import PlanOptions
from .slab import SlabPlan
from .symbolic import StackedPlan, check_nonnegative, choose_stacking

__all__ = ["pack", "plan_intervals", "plan_memory", "plan_orders", "solve_packing"]

DEFAULT_OPTIONS = PlanOptions()


@dataclasses.dataclass(frozen=True)
class _Packing:
    """Offsets from one packing, whether the safety cap cut it short, and the exact packer's record if it ran."""

    offsets: list[int]
    capped: bool
    exact: ExactPacking | None


def _deadline(options: PlanOptions) -> float | None:
    return None if options.max_seconds is None else time.perf_counter() + options.max_seconds


def _seconds_left(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.perf_counter(), 0.0)


def _exact(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int], options: PlanOptions,
           capacity: int | None, deadline: float | None) -> ExactPacking:
    strategy = options.strategy
    incumbent = None if strategy == "search" else STRATEGIES[strategy](starts, ends, sizes)
    return pack_exact(starts, ends, sizes, capacity, nodes=options.nodes, max_seconds=_seconds_left(deadline),
                      incumbent=incumbent)


def solve_packing(
    starts: Sequence[int],
    ends: Sequence[int],
    sizes: Sequence[int],
    capacity: int | None = None,
    options: PlanOptions = DEFAULT_OPTIONS,
) -> ExactPacking:
    """The exact packer (:func:`~reorder.planning.exact_packing.pack_exact`) under ``options``.

    It decides ``capacity``, or without one minimises the slab, from
    ``options.strategy``'s offsets.

    For ``search`` the exact packer makes its own deterministic incumbent;
    every other strategy is deterministic, so the result is too (unless
    ``options.max_seconds`` stops it, which ``clock_stopped`` reports).
    ``options.nodes`` bounds its effort.
    """
    return _exact(starts, ends, sizes, options, capacity, _deadline(options))


def _pack(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int], options: PlanOptions,
          deadline: float | None, progress: Callable[[int, int], None] | None) -> _Packing:
    """Offsets by ``options.strategy``, or by the exact packer when ``options.exact``."""
    if options.exact:
        found = _exact(starts, ends, sizes, options, None, deadline)
        return _Packing(list(found.offsets), found.clock_stopped, found)
    if options.strategy == "search":
        searched = search_offsets(starts, ends, sizes, restarts=options.restarts,
                                  max_seconds=_seconds_left(deadline), progress=progress)
        return _Packing(list(searched.offsets), searched.capped, None)
    return _Packing(STRATEGIES[options.strategy](starts, ends, sizes), False, None)


def pack(
    starts: Sequence[int],
    ends: Sequence[int],
    sizes: Sequence[int],
    options: PlanOptions = DEFAULT_OPTIONS,
    progress: Callable[[int, int], None] | None = None,
) -> list[int]:
    """Offsets for half-open lifetimes and sizes (already aligned) by ``options``.

    ``options.strategy`` (see :mod:`reorder.planning.offsets`); for
    ``search`` its ``restarts`` and ``progress(restarts, slab)`` (see
    :func:`~reorder.planning.offset_search.search_offsets`).
    ``options.exact`` minimises the slab with the exact packer instead,
    within ``options.nodes`` placements, from the strategy's offsets (for
    ``search``: the exact packer's own deterministic incumbent).
    :func:`plan_intervals` gives the same offsets as a validated plan that
    also says whether ``options.max_seconds`` cut the work short.
    """
    return _pack(starts, ends, sizes, options, _deadline(options), progress).offsets


def _with_packing(plan: SlabPlan, packing: _Packing) -> SlabPlan:
    """``plan`` with what the packing adds: the cap, and the exact packer's verdict, effort and proven bound."""
    found = packing.exact
    if found is None:
        return dataclasses.replace(plan, capped=packing.capped)
    return dataclasses.replace(plan, strategy="exact", tensor_bound=found.lower_bound, status=found.status,
                               nodes=found.nodes, capped=packing.capped)


def plan_intervals(
    names: Sequence[str],
    starts: Sequence[int],
    ends: Sequence[int],
    sizes: Sequence[int],
    options: PlanOptions = DEFAULT_OPTIONS,
    progress: Callable[[int, int], None] | None = None,
) -> SlabPlan:
    """A validated :class:`SlabPlan` of bare lifetimes and sizes (one ``name`` each), packed as :func:`pack` does.

    Sizes are taken as given (``options.alignment`` and
    ``options.include_inputs`` concern graphs only); no order, no workspaces.
    """
    packing = _pack(starts, ends, sizes, options, _deadline(options), progress)
    plan = SlabPlan.of_intervals(names, starts, ends, sizes, packing.offsets, options.strategy)
    plan = _with_packing(plan, packing)
    plan.validate()
    return plan


def _stacked_plan(graph: Graph, order: Sequence[int], storages: list[Storage], options: PlanOptions,
                  deadline: float | None) -> StackedPlan:
    """Stack ``storages`` (of ``order``) of a symbolic graph for every point of its symbols' ranges
    (:mod:`~reorder.planning.symbolic`), append the workspaces as expressions, validate."""
    if options.exact or options.strategy != "search":
        raise PlanError(f"a symbolic graph is planned by stacking from the search strategy at each evaluation "
                        f"point; strategy={options.strategy!r}{' with exact' if options.exact else ''} is for "
                        f"graphs of constant sizes (plan it at a point instead)")
    e, a, names = graph.size_exprs, options.alignment, graph.buffer_names
    starts = [s.start for s in storages]
    ends = [s.end for s in storages]
    sizes = [align_expression(e.size[s.owner], a) for s in storages]
    check_nonnegative([names[s.owner] for s in storages], sizes, graph.size_ranges)
    stacking = choose_stacking(starts, ends, sizes, graph.evaluation_points(), options.restarts,
                               _seconds_left(deadline), what=lambda k: f"buffer {names[storages[k].owner]!r}")
    unique = tuple((graph.node_names[v], align_expression(z, a)) for v, z in enumerate(e.unique_workspace) if z != 0)
    workspaces = [z for z in e.workspace if z != 0]
    shared = 0 if not workspaces else align_expression(workspaces[0] if len(workspaces) == 1 else ("Max", *workspaces), a)
    plan = StackedPlan("search", a, tuple(graph.names_of(order)), tuple(names[s.owner] for s in storages),
                       tuple(tuple(names[m] for m in s.members) for s in storages), tuple(starts), tuple(ends),
                       tuple(sizes), stacking, unique, shared, dict(graph.size_hints), dict(graph.size_ranges),
                       tuple(graph.symbolic_size[s.owner] for s in storages))
    plan.validate()
    return plan


def _plan_storages(graph: Graph, order: Sequence[int], storages: list[Storage], options: PlanOptions,
                   deadline: float | None, symbolic: bool = False) -> SlabPlan | StackedPlan:
    """Pack ``storages`` (of ``order``), append the workspaces, validate (stacked, for every point of the
    symbols' ranges, with ``symbolic`` on a symbolic graph)."""
    if symbolic and graph.is_symbolic:
        return _stacked_plan(graph, order, storages, options, deadline)
    starts = [s.start for s in storages]
    ends = [s.end for s in storages]
    sizes = [s.size for s in storages]
    packing = _pack(starts, ends, sizes, options, deadline, None)
    offsets = packing.offsets
    tensor_bytes = max((o + z for o, z in zip(offsets, sizes)), default=0)
    top = tensor_bytes
    unique = {}
    for v in range(graph.num_nodes):
        if graph.unique_workspace[v]:
            unique[graph.node_names[v]] = (top, align(graph.unique_workspace[v], options.alignment))
            top += unique[graph.node_names[v]][1]
    shared = (top, align(max(graph.workspace, default=0), options.alignment))
    names = graph.buffer_names
    plan = SlabPlan(
        strategy=options.strategy,
        alignment=options.alignment,
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
    plan = _with_packing(plan, packing)
    plan.validate()
    return plan


def plan_memory(graph: Graph, order: Sequence[int] | None = None, options: PlanOptions = DEFAULT_OPTIONS,
                symbolic: bool = False) -> SlabPlan | StackedPlan:
    """A validated :class:`SlabPlan` for ``order`` (node ids; default the graph's own order).

    The ``search`` strategy runs ``options.restarts`` restarts, or stops
    sooner when it reaches the lower bound. With ``options.exact`` the plan
    records the exact packer's status, effort and proven lower bound.
    ``capped`` says whether ``options.max_seconds`` cut the work short.

    A symbolic graph is planned at its hints, unless ``symbolic``: then the
    plan is a :class:`~reorder.planning.symbolic.StackedPlan`, whose offsets
    are expressions valid at every point of the symbols' ranges (the search
    runs ``options.restarts`` at each evaluation point).
    """
    order = list(range(graph.num_nodes)) if order is None else list(order)
    storages = storage_intervals(graph, order, options.alignment, options.include_inputs)
    return _plan_storages(graph, order, storages, options, _deadline(options), symbolic)


def plan_orders(
    graph: Graph, orders: Mapping[str, Sequence[int]], options: PlanOptions = DEFAULT_OPTIONS, symbolic: bool = False
) -> tuple[str, SlabPlan | StackedPlan]:
    """Plan each candidate order, return ``(name, plan)`` of the smallest slab (ties: first given).

    Identical orders are planned once. Orders are planned from the lowest
    live-bytes bound up, and one whose bound cannot beat the best slab so far
    is not planned: the answer is the one planning every order gives, for
    less work. ``options.restarts`` and ``options.nodes`` are each order's;
    ``options.max_seconds`` caps the whole call, and the plan is ``capped``
    if the cap cut any order's packing short. With ``symbolic`` (see
    :func:`plan_memory`) the plans are stacked and ranked by their tensor
    region at the hint.
    """
    deadline = _deadline(options)
    unique_orders: dict[tuple[int, ...], str] = {}
    for name, order in orders.items():
        unique_orders.setdefault(tuple(order), name)
    if not unique_orders:
        raise PlanError("plan_orders needs at least one order")
    candidates = []
    for index, (order, name) in enumerate(unique_orders.items()):
        storages = storage_intervals(graph, order, options.alignment, options.include_inputs)
        bound = live_bytes_bound([s.start for s in storages], [s.end for s in storages], [s.size for s in storages])
        candidates.append((bound, index, name, order, storages))
    candidates.sort(key=lambda c: c[:2])
    best: tuple[int, int, str, SlabPlan] | None = None  # (tensor bytes, index, name, plan)
    capped = False
    for bound, index, name, order, storages in candidates:
        # The workspace region does not depend on the order, so tensor bytes rank the slabs.
        if best is not None and (bound, index) > best[:2]:
            continue
        plan = _plan_storages(graph, order, storages, options, deadline, symbolic)
        capped = capped or plan.capped
        tensor_bytes = plan.at_hint.tensor_bytes if isinstance(plan, StackedPlan) else plan.tensor_bytes
        if best is None or (tensor_bytes, index) < best[:2]:
            best = (tensor_bytes, index, name, plan)
    if isinstance(best[3], StackedPlan):
        return best[2], best[3]
    return best[2], dataclasses.replace(best[3], capped=capped)
