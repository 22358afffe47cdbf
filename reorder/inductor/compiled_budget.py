"""A memory budget checked on the graphs Inductor compiled, as their generated code allocates.

The partitioner (:mod:`~reorder.inductor.partitioner`) chooses before
Inductor lowers anything, with the step model of
:mod:`reorder.budget.step_peak`: fused kernels as it predicts them, in the
order Inductor lists them. The graphs that run are Inductor's own, after its
fusion and our reorder pass, and they can hold more than the model says (a
recomputed value fused into an early kernel and held to a late one) or less
(an order the reorder pass found). So once Inductor has generated a budgeted
region's forward and its backward, what each allocates is read from its own
wrapper lines (:mod:`~reorder.inductor.generated_code`: allocations, reuses,
in-place writes, frees, extern kernels' outputs, in the order they run; the
C++ backend's kernel groups included, since their frees stand where the
group is flushed) and replayed (:func:`check_generated`), with

* the inputs that cost the step nothing (parameters, the batch and saved
  views of them, :func:`~reorder.budget.step_peak.free_values`) left out,
  and every other input (saved values, tangents) live from the start until
  the ``del`` that returns it;
* an extern kernel's scratch as the partitioner's probe measured it for the
  joint graph's node it was lowered from (:mod:`~reorder.inductor.scratch`:
  oneDNN's convolutions), added while it runs: the one thing the lines
  cannot say.

The region's compiled peak is what earlier regions hold plus the higher of
the two, and its :class:`~reorder.inductor.session.PartitionRecord` is
amended: ``compiled_peak``, and ``feasible`` only if that fits the budget
too. A budget the plan met and the compiled graphs do not gets a WARNING.
This checks the partition; it does not change it (the forward is compiled
before the backward exists, so no other partition can be made by then).

Before code exists, the reorder pass needs a model of what the code will
allocate for each order it weighs (:class:`CompiledReplay`, over the
scheduler graph: a kernel Inductor generates writes into an input that
dies there, dead storage goes to a later buffer of its size as the wrapper
decides by Inductor's own estimate, the C++ backend frees a kernel group's
dead buffers when it flushes): it keeps, among its orders no higher than
stock's estimate, the one whose code allocates least, and moves nodes
while that falls (:func:`~reorder.inductor.reorder_pass.choose_order`).
The check above then reads what that order's code really allocates.

Only the first region of a step is checked: a later one (after a graph
break) takes activations of the earlier ones as inputs named as parameters
are (``primals_*``), which would count as free (the 20 MB logits GPT-2's
loss region receives).

A region's graphs are found by the name AOTAutograd gives them: the joint
graph ``model__0_joint_0`` partitioned into ``model__0_forward_1`` and
``model__0_backward_3`` share the prefix ``model__0``. Graphs the FX graph
cache serves run no code generation of ours, and their region keeps
``compiled_peak`` None. The check never fails the compile.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..budget.allocation_search import lower_allocated_peak
from ..budget.wrapper_reuse import wrapper_peak
from ..graph import Graph
from .generated_code import GeneratedCode
from .rewrites import applies
from .session import PartitionRecord, Session

__all__ = ["CompiledReplay", "RegionPlan", "allocated_peak", "check_generated", "compiled_replay", "expect_region",
           "generated_kernels", "origin_names", "owned_inputs", "region_of", "replay_of_nodes"]

log = logging.getLogger("reorder")


@dataclass
class RegionPlan:
    """What the check of one region needs from its partition: its record (as added to the session), the inputs
    that cost nothing, the saved values the backward owns, the scratch of the nodes that have any in each graph
    (``"forward"`` and ``"backward"``: node name -> bytes), and the replayed peak of each graph compiled so far."""

    record: PartitionRecord
    free_inputs: frozenset[str]
    donated_inputs: frozenset[str]
    scratch: dict[str, dict[str, int]] = field(default_factory=dict)
    peaks: dict[str, int] = field(default_factory=dict)


def region_of(graph_name: str) -> tuple[str, str] | None:
    """``("model__0", "backward")`` for ``"model__0_backward_3"``: the region and which of its graphs; None for
    a name AOTAutograd did not give."""
    parts = graph_name.rsplit("_", 2)
    if len(parts) != 3 or parts[1] not in ("joint", "forward", "backward") or not parts[2].isdigit():
        return None
    return parts[0], parts[1]


def expect_region(session: Session, joint_name: str, plan: RegionPlan) -> None:
    """Remember ``plan`` for the forward and backward that the joint graph ``joint_name`` is partitioned into."""
    region = region_of(joint_name)
    if region is not None:
        session.plan_region(region[0], plan)


def allocated_peak(graph: Graph, order: Sequence[int], generated: Sequence[bool], free_inputs: frozenset[str],
                   donated_inputs: frozenset[str], scratch: Sequence[int] | None = None,
                   decided_by: Graph | None = None, grouped: Sequence[bool] | None = None) -> int:
    """The peak bytes a compiled graph's generated code allocates above its start, running ``order``.

    ``generated[v]``: Inductor generates node ``v``'s kernel (extern kernels
    never write in place). Inputs in ``free_inputs`` count nothing; inputs in
    ``donated_inputs`` may be written in place once they die, and so may every
    buffer the graph produces, but a multi-output parent or a mutation's alias.
    ``scratch[v]``: what node ``v``'s kernel allocates and frees beyond Inductor's workspace. ``decided_by``:
    the graph as Inductor's estimate counts it, by which the wrapper decides its reuses; ``grouped[v]``: node
    ``v`` joins the C++ backend's kernel group (:func:`kernel_groups`;
    :func:`~reorder.budget.wrapper_reuse.wrapper_peak`).
    """
    allocated, reusable, during = _as_allocated(graph, free_inputs, donated_inputs, scratch)
    return wrapper_peak(allocated, order, generated, reusable, during, decided_by, grouped)


def _as_allocated(graph: Graph, free_inputs: frozenset[str], donated_inputs: frozenset[str],
                  scratch: Sequence[int] | None) -> tuple[Graph, list[bool], list[int]]:
    """What :func:`allocated_peak` replays: the graph with ``free_inputs`` at zero bytes, per buffer whether its
    storage can be handed on, per node its workspace and scratch."""
    graph = graph.with_free_inputs(free_inputs)
    reusable = [not graph.children[b] and graph.alias_of[b] is None and
                (not graph.is_input[b] or graph.buffer_names[b] in donated_inputs)
                for b in range(graph.num_buffers)]
    during = [w + (scratch[v] if scratch is not None else 0) for v, w in enumerate(graph.workspace)]
    return graph, reusable, during


def generated_kernels(nodes: list) -> list[bool]:
    """Per scheduler node: Inductor generates its kernel (not an extern call, not a no-op)."""
    from torch._inductor.scheduler import ExternKernelSchedulerNode, NopKernelSchedulerNode

    return [not isinstance(node, (ExternKernelSchedulerNode, NopKernelSchedulerNode)) for node in nodes]


def kernel_groups(nodes: list) -> list[bool] | None:
    """Per scheduler node: it joins the kernel group Inductor's C++ backend gathers (a kernel it generates on
    the CPU, or a no-op), whose dead buffers are freed only when an extern kernel or the end flushes it; None
    for a graph off the CPU (Triton frees after each kernel)."""
    devices = {node.get_device().type for node in nodes if node.get_device() is not None}
    if devices != {"cpu"}:
        return None
    return [not (node.is_extern() or node.is_template()) for node in nodes]


def origin_names(nodes: list) -> list[frozenset[str]]:
    """Per scheduler node: the names of the fx nodes it was lowered from (its fused members' too); none for an
    element of a multi-output kernel, which runs nothing (its kernel's node has the origins)."""
    from torch._inductor.ir import MultiOutput

    return [frozenset(origin.name for member in node.get_nodes() if not isinstance(member.node, MultiOutput)
                      for origin in getattr(member.node, "origins", ())) for node in nodes]


@dataclass(frozen=True)
class CompiledReplay:
    """What one compiled graph of a budgeted region allocates for any order of its scheduler nodes: ``plan``
    (the region's), ``kind`` (``"forward"`` or ``"backward"``), ``generated`` (per node: Inductor generates its
    kernel), ``scratch`` (per node: its extern kernel's scratch as the partitioner's probe measured it) and
    ``decided_by`` (the graph as Inductor's estimate counts it, whose figures the wrapper's reuses follow) and
    ``grouped`` (per node: it joins the C++ backend's kernel group, :func:`kernel_groups`)."""

    plan: RegionPlan
    kind: str
    generated: tuple[bool, ...]
    scratch: tuple[int, ...] | None
    decided_by: Graph | None = None
    grouped: tuple[bool, ...] | None = None

    @property
    def donated_inputs(self) -> frozenset[str]:
        """The inputs a kernel may write into once they die: the saved values the backward owns."""
        return self.plan.donated_inputs if self.kind == "backward" else frozenset()

    def peak(self, graph: Graph, order: Sequence[int]) -> int:
        """The peak the generated code allocates running ``order`` (:func:`allocated_peak`)."""
        return allocated_peak(graph, order, self.generated, self.plan.free_inputs, self.donated_inputs, self.scratch,
                              self.decided_by, self.grouped)

    def lower(self, graph: Graph, order: Sequence[int], allowed: Callable[[list[int]], bool]) -> tuple[list[int], int]:
        """``order`` moved node by node while what the generated code allocates falls and ``allowed`` holds
        (:func:`~reorder.budget.allocation_search.lower_allocated_peak`): the order and its peak."""
        allocated, reusable, during = _as_allocated(graph, self.plan.free_inputs, self.donated_inputs, self.scratch)
        return lower_allocated_peak(allocated, order, self.generated, reusable, during, allowed,
                                    decided_by=self.decided_by, grouped=self.grouped)


def compiled_replay(session: Session | None, graph_name: str, generated: Sequence[bool],
                    origins: Sequence[frozenset[str]] = (), decided_by: Graph | None = None,
                    grouped: Sequence[bool] | None = None) -> CompiledReplay | None:
    """The replay of ``graph_name`` if it is the forward or backward of a budgeted region (see the module
    docstring), else None; ``origins``: per node, the fx nodes it was lowered from, for their scratch;
    ``decided_by``: the graph as Inductor's estimate counts it; ``grouped``: :func:`kernel_groups`."""
    planned = _planned_graph(session, graph_name)
    return None if planned is None else _replay(*planned, generated, origins, decided_by, grouped)


def _replay(plan: RegionPlan, kind: str, generated: Sequence[bool], origins: Sequence[frozenset[str]],
            decided_by: Graph | None, grouped: Sequence[bool] | None) -> CompiledReplay:
    """The replay of the ``kind`` graph of the region ``plan`` is for (arguments as in :func:`compiled_replay`)."""
    measured = plan.scratch.get(kind, {})
    scratch = tuple(0 if made else sum(measured.get(name, 0) for name in names)  # extern kernels' scratch only
                    for made, names in zip(generated, origins)) if origins else None
    return CompiledReplay(plan, kind, tuple(generated), scratch, decided_by,
                          tuple(grouped) if grouped is not None else None)


def _planned_graph(session: Session | None, graph_name: str) -> tuple[RegionPlan, str] | None:
    """The plan of the budgeted region ``graph_name`` is the forward or backward of, and which of the two; None
    for any other graph."""
    region = region_of(graph_name)
    if session is None or region is None or region[1] == "joint":
        return None
    plan = session.region_plan(region[0])
    return None if plan is None else (plan, region[1])


def check_generated(session: Session | None, graph_name: str, code: GeneratedCode) -> None:
    """If ``graph_name`` is the forward or backward of a budgeted region: what its generated ``code`` allocates
    (:meth:`~reorder.inductor.generated_code.GeneratedCode.replay`, the inputs that cost the step something
    counted from the start, extern kernels' scratch from the partitioner's probe); once both graphs are read,
    the region's record is amended (see the module docstring). Never raises: an error is a WARNING and the
    record stays as the partitioner made it."""
    planned = _planned_graph(session, graph_name)
    if planned is None:
        return
    plan, kind = planned
    try:
        plan.peaks[kind] = code.replay(owned_inputs(plan, kind, code), plan.scratch.get(kind, {})).peak
        if len(plan.peaks) == 2:
            amend(session, plan)
    except Exception as exc:  # noqa: BLE001 - the user's compile must go on
        log.warning("reorder: could not check the memory budget on the compiled %s: %s: %s", graph_name,
                    type(exc).__name__, exc)


def owned_inputs(plan: RegionPlan, kind: str, code: GeneratedCode) -> list[str]:
    """The inputs of a region's ``kind`` graph that the step pays for and the graph frees: none of a forward's
    (the caller's parameters and batch); a backward's saved values and tangents, and the parameters or batch
    the forward copied (laid out channels-last for a convolution), all but :attr:`RegionPlan.free_inputs`."""
    if kind != "backward":
        return []
    return [name for name in code.inputs if name not in plan.free_inputs]


def amend(session: Session, plan: RegionPlan) -> None:
    """The region's record with its compiled peak (what earlier regions hold, plus the higher of its two
    graphs') and a verdict that holds only if that fits too; a WARNING where the plan met the budget and the
    compiled graphs do not."""
    record = plan.record
    compiled = record.held_before + max(plan.peaks.values())
    amended = dataclasses.replace(record, compiled_peak=compiled,
                                  feasible=record.peak <= record.budget_bytes and compiled <= record.budget_bytes)
    session.replace(record, amended)
    plan.record = amended
    if record.feasible and not amended.feasible:
        log.warning("reorder: %s: memory budget %s B is met by the partition's estimate (%s B) but not by the "
                    "graphs Inductor compiled from it (%s B)", region_of(record.graph)[0],
                    f"{record.budget_bytes:,}", f"{record.peak:,}", f"{compiled:,}")


def replay_of_nodes(session: Session | None, graph_name: str, nodes: list,
                    decided_by: Graph | None = None) -> CompiledReplay | None:
    """:func:`compiled_replay` for the scheduler ``nodes`` our reorder pass orders (``decided_by``: their graph
    as Inductor's estimate counts it); None where there is none, or where it cannot be set up (a WARNING says
    why: the order is then chosen on the estimates alone, and the region keeps the partitioner's verdict).
    A graph of no budgeted region reads nothing of its nodes."""
    planned = _planned_graph(session, graph_name)
    if planned is None:
        return None
    try:
        grouped = kernel_groups(nodes) if applies("kernel_groups", session.options.model_rewrites) else None
        return _replay(*planned, generated_kernels(nodes), origin_names(nodes), decided_by, grouped)
    except Exception as exc:  # noqa: BLE001 - the user's compile must go on
        log.warning("reorder: could not replay the compiled %s for its memory budget: %s: %s", graph_name,
                    type(exc).__name__, exc)
        return None
