"""Slab code generation: the wrapper's intermediate buffers as views of pools at the offsets we plan.

Inductor's ``memory_planning`` (``torch/_inductor/codegen/memory_planning.py``)
turns the wrapper's allocation, reuse and free lines into pool lines
(``AllocFromPoolLine``, ``DeallocFromPoolLine``) and places every buffer
group with its own greedy tree. :class:`SlabPlanner` keeps Inductor's passes
that read the lines (removed buffers dropped, in-place reuse groups, live
ranges counted in batches of planning lines, in the order the scheduler
emitted, which is ours) and replaces only the placement, which
:mod:`reorder.planning.pools` plans on plain records. This module is the
translation both ways:

* **Lines to records.** One :class:`~reorder.planning.pools.BufferGroup`
  per allocation the wrapper makes, in steps counted as Inductor counts
  them (one per batch of planning lines). Pooled: every group the wrapper
  allocates itself (an ``AllocateLine`` and the ``ReuseLine`` renames of
  it) except groups holding a graph output (a forward graph's saved
  activations and outputs, a backward graph's gradients: they stay
  individual allocations, freed whenever their user drops them) or a comm
  buffer; their ranges are Inductor's live ranges, half-open (a group with
  no free line lives to the end). Individual: those graph outputs and comm
  buffers. Extern: extern kernels' outputs (``ExternKernelAllocLine``, with
  the ``MultiOutputLine`` children of a multi-output kernel) and the
  buffers that reuse them. Freed inputs: graph inputs the wrapper frees
  part-way (a backward's saved activations), live from the start to their
  ``del``. The steps where an extern kernel, a fallback or any other call
  runs are the foreign steps.
* **Layout to lines.** Each pool of the chosen
  :class:`~reorder.planning.pools.PoolLayout` becomes a :class:`SlabPool`
  (``pool0``, ``pool1``, ...: created by its first allocation line,
  deleted by its last free line) and its members views at their offsets;
  a group left individual gets a pool of its own, as Inductor's
  ``memory_pool="none"`` would give it.

**Dynamic shapes.** Where sizes are expressions in size symbols (a graph
compiled with ``dynamic=True``, ``mark_dynamic``, or made dynamic after a
recompile), each group's record carries its bytes as an expression and the
planner the symbols' hints and ranges from Inductor's ``ShapeEnv``; a pool
of such groups is stacked (:mod:`reorder.planning.symbolic`): its offsets
and its size are expressions, disjoint for every value of the symbols. The
wrapper evaluates them when the pool is created: one line per member that
sits on others (``pool0_at3 = max(pool0_at1 + align(256*s27*s77), ...)``),
then the pool's ``empty_strided`` of the top's expression; every member's
``alloc_from_pool`` takes its offset's name.

A graph we cannot plan (a buffer whose size has an unbacked, data-dependent
symbol, such as one after ``nonzero`` or ``.item()``; the C++ wrapper;
anything unexpected) keeps Inductor's normal allocation, with a WARNING
naming the graph and the reason and a
:class:`~reorder.inductor.session.FallbackRecord` in the session.

With ``poison=True`` the generated code also calls
:mod:`~reorder.inductor.slab_check`: every pooled buffer claims its bytes
when allocated (a claim overlapping a live buffer raises, naming both) and
fills them with a poison pattern when it dies, so a wrong plan fails loudly
instead of computing silently wrong numbers.
"""

from __future__ import annotations

import dataclasses
import logging

import sympy
import torch
from torch._inductor.codegen import memory_planning
from torch._inductor.codegen import wrapper as wrapper_codegen
from torch._inductor.dependencies import StarDep
from torch._inductor.utils import is_nonfreeable_buffers
from torch._inductor.virtualized import V

from ..errors import GraphError
from ..planning import align
from ..planning.pools import ALIGNMENT, PACK_SECONDS_CAP, BufferGroup, GroupKind, PoolLayout, choose_layout
from ..planning.symbolic import StackedPlan, stack
from ..sizes import size_expression
from .adapter import symbol_ranges
from .generated_code import hint_bytes, read_generated
from .reorder_pass import graph_being_compiled
from .session import FallbackRecord, Session, SlabRecord, sized

__all__ = ["SlabPlanner", "freed_by_graph", "plan_slab", "slab_record"]

log = logging.getLogger("reorder")

class SlabFallback(Exception):
    """This graph keeps Inductor's normal allocation; the message says why."""


@dataclasses.dataclass(eq=False)
class SlabPool(memory_planning.AllocationPool):
    """One pool of our plan: ``nbytes`` of uint8 (an int, or an expression in size symbols), created at its first
    allocation, deleted at its last free. ``offsets``: the lines naming a stacked pool's offsets, ``(name,
    expression)`` in stacking order, written just before the pool is allocated."""

    nbytes: int | sympy.Expr = 0
    poison: bool = False
    offsets: list = dataclasses.field(default_factory=list)

    def codegen_create(self, wrapper, code):
        for name, expression in self.offsets:
            code.writeline(f"{name} = {wrapper_codegen.pexpr(expression)}")
        code.writeline(wrapper.make_allocation(self.name, device=self.device, dtype=torch.uint8,
                                               shape=(self.nbytes,), stride=(1,)))
        if self.poison:
            code.writeline(f"slab_open({self.name})")


@dataclasses.dataclass
class SlabAllocLine(memory_planning.AllocFromPoolLine):
    """A buffer taken from its pool; with ``poison``, it claims its bytes (:func:`~.slab_check.slab_claim`)."""

    poison: bool = False

    def codegen(self, code):
        super().codegen(code)
        if self.poison:
            allocation = self.group.allocation
            code.writeline(f"slab_claim({allocation.pool.name}, {self.node.get_name()!r}, "
                           f"{wrapper_codegen.pexpr(allocation.offset)}, "
                           f"{wrapper_codegen.pexpr(allocation.symbolic_size)})")


@dataclasses.dataclass
class SlabFreeLine(memory_planning.DeallocFromPoolLine):
    """A buffer's end; with ``poison``, its bytes are poisoned (:func:`~.slab_check.slab_release`)."""

    poison: bool = False

    def codegen(self, code):
        if self.poison:
            allocation = self.group.allocation
            code.writeline(f"slab_release({allocation.pool.name}, {self.group.names[0]!r}, "
                           f"{wrapper_codegen.pexpr(allocation.offset)}, "
                           f"{wrapper_codegen.pexpr(allocation.symbolic_size)})")
        super().codegen(code)


def freed_by_graph(name: str) -> bool:
    """Inductor's own rule (``utils.is_nonfreeable_buffers``): parameters, user inputs and tangents
    (``primals_*``, ``arg*``, ``tangents_*``) are held by the caller; a backward's saved activations are
    dropped for good by their ``del``."""
    return not is_nonfreeable_buffers(StarDep(name))


def our_expr(nbytes: sympy.Expr, name: str):
    """An Inductor size expression as our parsed expression (None for a constant): read through its printed form
    by our own parser, as a graph file's sizes are."""
    if not nbytes.free_symbols:
        return None
    try:
        return size_expression(str(nbytes), f"buffer {name}")
    except GraphError as exc:
        raise SlabFallback(f"buffer {name}: its size {nbytes} is outside our size grammar ({exc})") from None





@dataclasses.dataclass
class SlabPlanner(memory_planning.MemoryPlanner):
    """Inductor's ``MemoryPlanner`` with our placement (see the module docstring).

    After :meth:`plan`, ``layout`` is the chosen
    :class:`~reorder.planning.pools.PoolLayout`; its group indices below
    ``len(buffer_groups)`` are ``buffer_groups`` in order.
    """

    poison: bool = False
    layout: PoolLayout | None = None

    symbols: set = dataclasses.field(default_factory=set)
    hints: dict = dataclasses.field(default_factory=dict)
    ranges: dict = dataclasses.field(default_factory=dict)

    def plan(self, lines: list) -> list:
        lines = [*lines]
        self.drop_removed_buffers(lines)
        self.convert_to_pool_lines(lines)
        self.compute_live_ranges(lines)
        unpooled, horizon, foreign_steps = self.read_unpooled(lines)
        groups = [*self.pooled_records(horizon), *unpooled]
        self.read_symbols()
        self.layout = choose_layout(groups, horizon, foreign_steps, self.hints, self.ranges)
        self.place(self.layout)
        self.mark_first_last_usage(lines)
        return lines

    def group(self, name: str, node, nbytes: sympy.Expr, begin: int, end: int, kind: GroupKind) -> BufferGroup:
        """The record of one allocation: its bytes at the hints, aligned, and as our expression where they have
        size symbols (noted, for :meth:`read_symbols`)."""
        hint = hint_bytes(nbytes)
        self.symbols |= nbytes.free_symbols
        return BufferGroup(name, hint, align(hint, ALIGNMENT), begin, end, str(node.get_device()), kind,
                           our_expr(nbytes, name))

    def read_symbols(self) -> None:
        """The hints and ranges of the size symbols the groups' sizes use; a graph whose sizes have an unbacked
        (data-dependent) symbol falls back, naming it."""
        found = symbol_ranges(self.symbols) if self.symbols else ({}, {})
        if isinstance(found, str):
            raise SlabFallback(found)
        self.hints, self.ranges = found

    def convert_to_pool_lines(self, lines: list) -> None:
        """Inductor's conversion, for the groups we pool; reuse lines are copied, never mutated."""
        name_to_group = self.compute_buffer_groups(lines)
        comm = {line.node.get_name() for line in lines
                if isinstance(line, wrapper_codegen.AllocateLine) and line.comm_buffer}
        pooled = {n: g for n, g in name_to_group.items() if not g.is_output and not comm.intersection(g.names)}
        self.buffer_groups = [*{id(g): g for g in pooled.values()}.values()]
        for i, line in enumerate(lines):
            if isinstance(line, wrapper_codegen.AllocateLine) and line.node.get_name() in pooled:
                lines[i] = SlabAllocLine(self.wrapper, pooled[line.node.get_name()], poison=self.poison)
            elif isinstance(line, wrapper_codegen.FreeIfNotReusedLine) and line.node.get_name() in pooled:
                if line.is_reused:
                    raise SlabFallback(f"free line of {line.node.get_name()} was already planned for reuse")
                lines[i] = SlabFreeLine(self.wrapper, pooled[line.node.get_name()], poison=self.poison)
            elif isinstance(line, wrapper_codegen.ReuseLine) and line.node.get_name() in pooled:
                lines[i] = dataclasses.replace(line, delete_old=False)

    def read_unpooled(self, lines: list) -> tuple[list[BufferGroup], int, list[int]]:
        """Everything else the wrapper allocates or frees, in Inductor's steps; the horizon; the foreign steps.

        Runs after :meth:`convert_to_pool_lines`, so the pooled groups' lines
        are pool lines here (without pools yet: the reader skips them) and only
        the others are read, through the one reader of the generated code
        (:func:`~reorder.inductor.generated_code.read_generated`). A graph
        input counts where Inductor's own model frees it (:func:`freed_by_graph`).
        """
        code = read_generated(lines, graph_being_compiled())
        records = []
        opened: dict[str, tuple[str, object, sympy.Expr, int, GroupKind]] = {}  # live name -> (name, node, bytes, begin, kind)
        closed: dict[str, int] = {}  # live name -> end
        for event in code.events:
            if event.kind in ("allocate", "extern", "element") and event.node is not None:
                kind = GroupKind.INDIVIDUAL if event.kind == "allocate" else GroupKind.EXTERN
                opened[event.name] = (event.name, event.node, event.expr, event.step, kind)
            elif event.kind == "reuse" and event.reused in opened:
                opened[event.name] = opened.pop(event.reused)
            elif event.kind == "free" and event.input:
                if freed_by_graph(event.name):  # after this step's kernels ran
                    records.append(self.group(event.name, event.node, event.expr, 0, event.step + 1,
                                              GroupKind.FREED_INPUT))
            elif event.kind == "free" and event.name in opened:
                closed[event.name] = event.step if event.planning else event.step + 1
        horizon = code.horizon
        for live_name, (name, node, nbytes, begin, kind) in opened.items():
            if nbytes != 0:
                end = max(closed.get(live_name, horizon), begin + 1)
                records.append(self.group(name, node, nbytes, begin, end, kind))
        return records, horizon, list(code.foreign_steps)

    def pooled_records(self, horizon: int) -> list[BufferGroup]:
        """One record per group we pool, in ``buffer_groups`` order: Inductor's live range, half-open (a group
        never freed lives to ``horizon``), its bytes (:meth:`group`)."""
        records = []
        for group in self.buffer_groups:
            group.make_allocation()
            begin, end = group.live_range.begin, group.live_range.end
            records.append(self.group(group.names[0], group.node, sympy.sympify(group.sym_nbytes()), begin,
                                      end if end > begin else horizon, GroupKind.POOLED))
        return records

    def place(self, layout: PoolLayout) -> None:
        """Each pool of ``layout`` as a :class:`SlabPool` holding its members at their offsets (named
        expressions, for a stacked pool: :meth:`stacked_offsets`); each group left individual in a pool of its
        own."""
        groups = self.buffer_groups
        for k, planned in enumerate(layout.pools):
            pool = SlabPool(groups[planned.members[0]].node.get_device(), memory_planning.TemporalSplit([]),
                            can_expand=False, nbytes=planned.nbytes, poison=self.poison)
            pool.name = f"pool{k}"
            pool.names_to_del.append(pool.name)
            if isinstance(planned.plan, StackedPlan):
                offsets, pool.nbytes, pool.offsets = stacked_offsets(pool.name, planned.plan,
                                                                     [groups[i] for i in planned.members])
            else:
                offsets = [sympy.Integer(offset) for offset in planned.plan.offsets]
            for i, offset in zip(planned.members, offsets, strict=True):
                groups[i].allocation.mark_allocated()
                groups[i].allocation.finalize(pool, offset)
        for i in layout.individual:
            allocation = groups[i].allocation
            allocation.mark_allocated()
            pool = SlabPool(allocation.device, memory_planning.TemporalSplit([]), can_expand=False,
                            nbytes=allocation.size_hint if allocation.symbolic_size.is_number
                            else allocation.symbolic_size, poison=self.poison)
            pool.name = f"{groups[i].names[0]}_storage"
            pool.names_to_del.append(pool.name)
            allocation.finalize(pool, sympy.Integer(0))

    def mark_first_last_usage(self, lines: list) -> None:
        """A pool is created by its first allocation line and deleted by its last free line."""
        seen = set()
        for line in lines:
            if isinstance(line, SlabAllocLine) and id(line.group.allocation.pool) not in seen:
                line.is_first_pool_usage = True
                seen.add(id(line.group.allocation.pool))
        end = {}
        for group in self.buffer_groups:
            pool = group.allocation.pool
            end[id(pool)] = max(end.get(id(pool), 0), group.live_range.end)
        seen = set()
        for line in reversed(lines):
            if isinstance(line, SlabFreeLine) and id(line.group.allocation.pool) not in seen:
                pool = line.group.allocation.pool
                line.is_last_pool_usage = end[id(pool)] <= line.timestep
                seen.add(id(pool))


def stacked_offsets(pool: str, plan: StackedPlan, members: list) -> tuple[list, sympy.Expr, list]:
    """A stacked pool's offsets in Inductor's terms: each member's offset (a name, ``<pool>_at<k>``, where it sits
    on others; 0 where it sits on nothing), the pool's size, and the lines that define the names, in stacking
    order. Sizes are Inductor's own expressions of the members' bytes, rounded up by its ``align``, the rounding
    the plan's sizes make (a multiple of :data:`~reorder.planning.pools.ALIGNMENT`)."""
    from torch._inductor.utils import align as inductor_align
    from torch.utils._sympy.functions import Max

    definitions = []

    def bind(k: int, offset: sympy.Expr) -> sympy.Expr:
        name = sympy.Symbol(f"{pool}_at{k}", integer=True, nonnegative=True)
        definitions.append((name, offset))
        return name

    sizes = [inductor_align(sympy.sympify(group.sym_nbytes())) for group in members]
    offsets, top = stack(plan.stacking, sizes, sympy.Integer(0), Max, bind)
    return offsets, top, definitions


def slab_record(graph: str, layout: PoolLayout) -> SlabRecord:
    """What the session records of one graph's layout."""
    ratios = layout.worst_ratio_at
    peaks_at = {label: {"point": layout.points[label], "estimated_peak": peak, "stock_estimated_peak": stock,
                        "worst_ratio": ratios.get(label, 1.0)}
                for label, (peak, stock) in layout.peaks_at.items()} or None
    return SlabRecord(graph=graph, pools=sized(p.nbytes for p in layout.pools),
                      pooled=sum(len(p.members) for p in layout.pools), individual=len(layout.individual),
                      pool_bytes=layout.pool_bytes, bound=layout.bound, worst_ratio=layout.worst_ratio,
                      estimated_peak=layout.estimated_peak, stock_estimated_peak=layout.stock_estimated_peak,
                      capped=any(p.plan.capped for p in layout.pools), peaks_at=peaks_at,
                      stacked=sum(isinstance(p.plan, StackedPlan) for p in layout.pools))


def plan_slab(wrapper, previous, is_inference: bool, session: Session) -> None:
    """``run_wrapper_ir_passes`` with our pools for ``session`` (the compiling one, which asked for the slab);
    Inductor's own on a fallback (recorded, with a WARNING naming the graph and the reason)."""
    name = graph_being_compiled()
    poison = session.options.poison
    try:
        if getattr(V.graph, "cpp_wrapper", False):
            raise SlabFallback("the C++ wrapper is not covered (Python wrapper only)")
        planner = SlabPlanner(wrapper, poison=poison)
        lines = planner.plan(wrapper.lines)
    except Exception as exc:  # noqa: BLE001 - the user's compile must go on
        reason = str(exc) if isinstance(exc, SlabFallback) else f"{type(exc).__name__}: {exc}"
        session.add(FallbackRecord(name, "slab", reason))
        log.warning("reorder: slab off for %s, Inductor's normal allocation instead: %s", name, reason)
        return previous(wrapper, is_inference)
    if poison:
        wrapper.imports.writeline("from reorder.inductor.slab_check import slab_claim, slab_open, slab_release")
    wrapper.lines = lines
    record = slab_record(name, planner.layout)
    session.add(record)
    if record.capped:
        log.warning("reorder: %s: a pool's offset search hit its %g s safety cap; its offsets depend on this "
                    "machine's speed", name, PACK_SECONDS_CAP)
    log.info("reorder: %s: %d pools, %d bytes (bound %d), %d groups left individual", name,
             len(record.pools), record.pool_bytes, record.bound, record.individual)
