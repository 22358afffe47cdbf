"""Joint order and offsets: the smallest slab over every order and every packing, for small graphs.

The order with the lowest peak of live bytes need not pack into the smallest
slab: a packing leaves holes, and another order's lifetimes may fit together
better (the goal of MODeL, ICML 2023, and ROAM, which minimise the arena
rather than the peak). :func:`joint_optimum` solves both at once with
OR-Tools CP-SAT:

* the order's variables of :class:`~reorder.schedulers.optimal.OrderVariables`
  (a step per node, all different, after its predecessors);
* per storage of :func:`~reorder.planning.storage_uses`: a time interval from
  its writer's step to one past its last user's (to the end for graph
  outputs) and a space interval ``[offset, offset + size)``;
* no two storages overlap in both (``NoOverlap2D``), the slab covers every
  space interval, and a redundant cumulative constraint (sizes live at once
  fit in the slab) gives the solver its bound; the slab is minimised.

It starts from the minimum-peak order (the default pass, then the
``optimal`` method with the same effort) packed by the exact packer, so the
answer is never above that slab, and it reports whether the joint optimum is
below it or the two coincide. Effort is CP-SAT's deterministic time; the
result is the tensor region of the slab (workspaces come after it, the same
for every order). The model grows with the square of the storages, so it is
for graphs of tens of nodes (``max_nodes``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ReorderError
from .graph import Graph
from .planning import PlanOptions, SlabPlan, plan_memory, storage_intervals, storage_uses
from .schedulers import DEFAULT_METHODS, reorder_for_peak_memory
from .schedulers.optimal import OrderVariables, cp_model_module

__all__ = ["JointOptimum", "joint_optimum"]


@dataclass(frozen=True)
class JointOptimum:
    """The smallest slab found over orders and offsets, and the minimum-peak order's slab.

    ``slab`` (tensor bytes) with ``order`` and ``offsets`` (per storage, in
    :func:`~reorder.planning.storage_intervals` order); ``bound``: proven that
    no order and packing is smaller; ``proven``: ``slab == bound``.
    ``min_peak_slab``: the minimum-peak order ``min_peak_order`` packed by the
    exact packer (``min_peak_slab_proven`` when that packing is optimal).
    """

    order: list[int]
    offsets: list[int]
    slab: int
    bound: int
    proven: bool
    min_peak_order: list[int]
    min_peak: int
    min_peak_slab: int
    min_peak_slab_proven: bool

    @property
    def verdict(self) -> str:
        """``"below"`` (the joint slab beats the minimum-peak order's), ``"coincide"`` (proven equal),
        or ``"not below"`` (nothing smaller found, not proven)."""
        if self.slab < self.min_peak_slab:
            return "below"
        return "coincide" if self.proven else "not below"


def joint_optimum(graph: Graph, effort: float = 10.0, workers: int = 1, alignment: int = 64,
                  max_nodes: int = 60) -> JointOptimum:
    """Minimise the slab over orders and offsets together (see the module docstring).

    Raises :class:`~reorder.errors.ReorderError` for graphs above ``max_nodes``
    nodes, or without OR-Tools (the ``exact`` extra).
    """
    if graph.num_nodes > max_nodes:
        raise ReorderError(f"joint order and offsets: {graph.name!r} has {graph.num_nodes} nodes "
                           f"(max_nodes={max_nodes})")
    cp_model = cp_model_module()
    best = reorder_for_peak_memory(graph, [*DEFAULT_METHODS, f"optimal:effort={effort}:workers={workers}"])
    start = plan_memory(graph, best.order, PlanOptions(alignment=alignment, exact=True))
    uses = storage_uses(graph, alignment)
    n = graph.num_nodes
    model = cp_model.CpModel()
    steps = OrderVariables(model, graph, best.order)
    slab = model.new_int_var(0, start.tensor_bytes, "slab")
    model.add_hint(slab, start.tensor_bytes)
    times, spaces, offsets = [], [], []
    for k, (use, offset_at) in enumerate(zip(uses, start.offsets)):
        first = steps.start(use.writer)
        stop = n if use.to_end else (steps.last(use.users) + 1 if use.users else 1)
        if isinstance(first, int) and isinstance(stop, int):
            times.append(model.new_fixed_size_interval_var(first, stop - first, f"time{k}"))
        else:
            length = model.new_int_var(1, n, f"length{k}")
            times.append(model.new_interval_var(first, length, stop, f"time{k}"))
            first_at = 0 if use.writer is None else steps.hint[use.writer]
            stop_at = n if use.to_end else (steps.hint_of(use.users) + 1 if use.users else 1)
            model.add_hint(length, stop_at - first_at)
        offset = model.new_int_var(0, max(0, start.tensor_bytes - use.size), f"offset{k}")
        model.add_hint(offset, offset_at)
        model.add(offset + use.size <= slab)
        spaces.append(model.new_fixed_size_interval_var(offset, use.size, f"space{k}"))
        offsets.append(offset)
    model.add_no_overlap_2d(times, spaces)
    model.add_cumulative(times, [u.size for u in uses], slab)
    model.minimize(slab)
    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = float(effort)
    solver.parameters.num_workers = int(workers)
    solver.parameters.interleave_search = workers > 1
    solver.parameters.random_seed = 0
    status = solver.solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        order, placed = steps.order(solver), [solver.value(o) for o in offsets]
    else:
        order, placed = list(best.order), list(start.offsets)
    storages = storage_intervals(graph, order, alignment)
    plan = SlabPlan.of_intervals([graph.buffer_names[s.owner] for s in storages], [s.start for s in storages],
                                 [s.end for s in storages], [s.size for s in storages], placed, "joint")
    plan.validate()
    found = plan.tensor_bytes
    if status == cp_model.OPTIMAL:
        bound = found
    elif status == cp_model.FEASIBLE:
        bound = min(found, int(-(-solver.best_objective_bound // 1)))
    else:
        bound = 0
    return JointOptimum(order, placed, found, bound, found == bound, list(best.order), best.peak,
                        start.tensor_bytes, start.status == "optimal")
