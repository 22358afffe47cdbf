"""Slab code generation: the wrapper's intermediate buffers as views of pools at the offsets we plan.

Inductor's ``memory_planning`` (``torch/_inductor/codegen/memory_planning.py``)
turns the wrapper's allocation, reuse and free lines into pool lines
(``AllocFromPoolLine``, ``DeallocFromPoolLine``) and places every buffer
group with its own greedy tree. :class:`SlabPlanner` keeps Inductor's passes
that read the lines (removed buffers dropped, in-place reuse groups, live
ranges counted in batches of planning lines, in the order the scheduler
emitted, which is ours) and replaces only the placement:

1. **What goes in pools.** Every buffer group the wrapper allocates itself
   (an ``AllocateLine`` and the ``ReuseLine`` renames of it), except groups
   holding a graph output: those (a forward graph's saved activations and
   outputs, a backward graph's gradients) stay individual allocations, so
   they are freed whenever their user drops them. Extern kernels' outputs,
   views and multi-output children are not allocated by such lines and stay
   as they are.
2. **Lifetimes.** Inductor's live ranges: a group is live from the batch of
   its first planning line to the batch of its last, half-open (a group
   freed in a batch may share bytes with one allocated in the same batch: no
   kernel runs in between). A group with no free line lives to the end.
3. **Pools over time.** Groups whose lifetimes chain together form one pool,
   created at its first allocation and deleted at its last free, so no pool
   holds memory while nothing in it is live. Two layouts are planned, one
   chaining lifetimes that merely touch (fewer pools, so fewer allocator
   calls) and one not; the lower replayed peak wins, then fewer allocations. Offsets come from our
   deterministic search (:func:`reorder.planning.offset_search.search_offsets`
   with a restart budget), and each pool's plan is proved by
   :meth:`~reorder.planning.SlabPlan.validate` before a line is emitted.
4. **Not above stock in the replay.** A pool holds its largest size over its whole
   lifetime, while the allocations next to it come and go; so the planner
   replays everything the wrapper allocates and frees (pools, individual
   buffers, extern kernels' outputs, inputs whose ``del`` returns memory)
   against the same buffers allocated one by one (:func:`plan_pools`). Groups
   leave the pools while the pooled replay peaks higher, or while a pool
   holds idle bytes at a step where an extern kernel runs (its scratch would
   land on them).

A graph we cannot plan (a buffer whose size is symbolic, as under
``dynamic=True``; the C++ wrapper; anything unexpected) keeps Inductor's
normal allocation, with a WARNING naming the graph and the reason.

With ``poison=True`` the generated code also calls
:mod:`~reorder.inductor.slab_check`: every pooled buffer claims its bytes
when allocated (a claim overlapping a live buffer raises, naming both) and
fills them with a poison pattern when it dies, so a wrong plan fails loudly
instead of computing silently wrong numbers.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Sequence

from ..planning import SlabPlan, align
from ..planning.offset_search import search_offsets

__all__ = ["ALIGNMENT", "PACK_RESTARTS", "SlabOptions", "install_codegen", "plans", "uninstall_codegen"]

log = logging.getLogger("reorder")

#: Inductor's pool alignment (``memory_planning._align``): every offset and size is a multiple of it.
ALIGNMENT = 64

#: Restarts of the offset search per pool: the work budget that decides the offsets.
PACK_RESTARTS = 32

#: Safety cap (seconds) on one pool's search; at the default restarts it is never reached on graphs we know.
PACK_SECONDS_CAP = 30.0

#: One dict per graph the slab code generation saw: ``graph``, and either ``pools`` (bytes per
#: pool), ``pooled``/``individual`` (buffer groups), ``pool_bytes`` (their sum), ``bound`` (the
#: largest live bytes of the pooled groups: pools never coexist, so no layout of them is smaller
#: than this), ``worst_ratio`` (the largest pool's slab over its own live-bytes bound),
#: ``estimated_peak`` and ``stock_estimated_peak`` (the replayed peaks), or ``fallback`` (the reason).
plans: list[dict] = []


class SlabFallback(Exception):
    """This graph keeps Inductor's normal allocation; the message says why."""


@dataclasses.dataclass(frozen=True)
class SlabOptions:
    """What :func:`install_codegen` was asked for: the graph's name comes from ``name()``."""

    poison: bool = False


def _memory_planning():
    """Inductor's memory-planning classes, imported late (this module loads without Inductor)."""
    from torch._inductor.codegen import memory_planning

    return memory_planning


def _planner_class():
    mp = _memory_planning()

    @dataclasses.dataclass(eq=False)
    class SlabPool(mp.AllocationPool):
        """One pool of our plan: ``nbytes`` of uint8, created at its first allocation, deleted at its last free."""

        nbytes: int = 0
        poison: bool = False

        def codegen_create(self, wrapper, code):
            import torch

            code.writeline(wrapper.make_allocation(self.name, device=self.device, dtype=torch.uint8,
                                                   shape=(self.nbytes,), stride=(1,)))
            if self.poison:
                code.writeline(f"slab_open({self.name})")

    @dataclasses.dataclass
    class SlabAllocLine(mp.AllocFromPoolLine):
        poison: bool = False

        def codegen(self, code):
            super().codegen(code)
            if self.poison:
                allocation = self.group.allocation
                code.writeline(f"slab_claim({allocation.pool.name}, {self.node.get_name()!r}, "
                               f"{allocation.offset}, {allocation.size_hint})")

    @dataclasses.dataclass
    class SlabFreeLine(mp.DeallocFromPoolLine):
        poison: bool = False

        def codegen(self, code):
            if self.poison:
                allocation = self.group.allocation
                code.writeline(f"slab_release({allocation.pool.name}, {self.group.names[0]!r}, "
                               f"{allocation.offset}, {allocation.size_hint})")
            super().codegen(code)

    class SlabPlanner(mp.MemoryPlanner):
        """Inductor's ``MemoryPlanner`` with our placement (see the module docstring)."""

        def __init__(self, wrapper, poison: bool, graph: str):
            super().__init__(wrapper)
            self.poison = poison
            self.graph = graph
            self.individual_timesteps: list[tuple[int, int, int]] = []  # (begin, end, bytes) of unpooled buffers
            self.last_timestep = 0
            self.foreign_steps: set[int] = set()  # timesteps where code other than Inductor's kernels runs

        def plan(self, lines: list) -> list:
            lines = [*lines]
            self.drop_removed_buffers(lines)
            self.convert_to_pool_lines(lines)
            self.compute_live_ranges(lines)
            self.individual_lifetimes(lines)
            self.allocate_groups()
            self.mark_first_last_usage(lines)
            return lines

        def convert_to_pool_lines(self, lines: list) -> None:
            """Inductor's conversion, for the groups we pool; reuse lines are copied, never mutated."""
            wrapper_mod = mp
            name_to_group = self.compute_buffer_groups(lines)
            comm = {line.node.get_name() for line in lines
                    if isinstance(line, wrapper_mod.AllocateLine) and line.comm_buffer}
            pooled = {n: g for n, g in name_to_group.items() if not g.is_output and not comm.intersection(g.names)}
            self.buffer_groups = [*{id(g): g for g in pooled.values()}.values()]
            for group in self.buffer_groups:
                nbytes = group.sym_nbytes()
                if not isinstance(nbytes, int) and not getattr(nbytes, "is_number", False):
                    raise SlabFallback(f"buffer {group.names[0]} has a symbolic size {nbytes}")
            for i, line in enumerate(lines):
                if isinstance(line, wrapper_mod.AllocateLine) and line.node.get_name() in pooled:
                    lines[i] = SlabAllocLine(self.wrapper, pooled[line.node.get_name()], poison=self.poison)
                elif isinstance(line, wrapper_mod.FreeIfNotReusedLine) and line.node.get_name() in pooled:
                    if line.is_reused:
                        raise SlabFallback(f"free line of {line.node.get_name()} was already planned for reuse")
                    lines[i] = SlabFreeLine(self.wrapper, pooled[line.node.get_name()], poison=self.poison)
                elif isinstance(line, wrapper_mod.ReuseLine) and line.node.get_name() in pooled:
                    lines[i] = dataclasses.replace(line, delete_old=False)

        def individual_lifetimes(self, lines: list) -> None:
            """Timesteps of everything else the wrapper allocates or frees, counted as Inductor counts them.

            That is: buffers allocated one by one (graph outputs, unpooled
            groups), extern kernels' outputs (``ExternKernelAllocLine``, with
            the ``MultiOutputLine`` children of a multi-output kernel), the
            buffers that reuse them, and graph inputs the wrapper frees part-way
            through (a backward's saved activations): live from the start to
            their ``del``. The replay sets our pools against all of it.
            """
            from torch._inductor import ir
            from torch._inductor.codegen import wrapper as wrapper_mod
            from torch._inductor.virtualized import V

            def freed_by_graph(name: str) -> bool:
                """Inductor's own rule (``utils.is_nonfreeable_buffers``): parameters, user inputs and tangents
                (``primals_*``, ``arg*``, ``tangents_*``) are held by the caller; a backward's saved
                activations are dropped for good by their ``del``."""
                from torch._inductor.dependencies import StarDep
                from torch._inductor.utils import is_nonfreeable_buffers

                return not is_nonfreeable_buffers(StarDep(name))

            def storage_bytes(node) -> int:
                layout = node.maybe_get_output_spec()
                if not isinstance(layout, ir.Layout):
                    return 0  # a multi-output kernel's tuple: its children carry the bytes
                return int(V.graph.sizevars.optimization_hint(
                    layout.storage_size() * node.get_dtype().itemsize, fallback=0))

            foreign = (wrapper_mod.ExternKernelAllocLine, wrapper_mod.ExternKernelOutLine,
                       wrapper_mod.ExternKernelMultiOutLine, wrapper_mod.IndexPutFallbackLine,
                       wrapper_mod.ScatterFallbackLine)
            timestep, first, last, nbytes = 0, {}, {}, {}
            previous_was_planning = False
            for line in lines:
                is_planning = isinstance(line, mp.MemoryPlanningLine)
                if is_planning and not previous_was_planning:
                    timestep += 1
                previous_was_planning = is_planning
                if isinstance(line, foreign) or (isinstance(line, str) and is_foreign_call(line)):
                    self.foreign_steps.add(timestep)
                if isinstance(line, (mp.AllocateLine, wrapper_mod.ExternKernelAllocLine)):
                    name = line.node.get_name()
                    first[name], nbytes[name] = timestep, storage_bytes(line.node)
                elif isinstance(line, wrapper_mod.MultiOutputLine):
                    name = line.result_name
                    first[name], nbytes[name] = timestep, storage_bytes(V.graph.get_buffer(name))
                elif isinstance(line, mp.ReuseLine) and line.node.get_name() in first:
                    root = line.node.get_name()
                    first[line.reused_as.get_name()] = first.pop(root)
                    nbytes[line.reused_as.get_name()] = nbytes.pop(root)
                elif isinstance(line, mp.FreeIfNotReusedLine) and line.node.get_name() in first:
                    last[line.node.get_name()] = timestep
                elif isinstance(line, wrapper_mod.FreeLine) and isinstance(line.node, ir.InputBuffer):
                    if freed_by_graph(line.node.get_name()):  # after this timestep's kernels ran
                        self.individual_timesteps.append((0, timestep + 1, storage_bytes(line.node)))
                elif isinstance(line, wrapper_mod.FreeLine) and line.node.get_name() in first:
                    last[line.node.get_name()] = timestep + 1
            self.last_timestep = timestep + 1
            for name, begin in first.items():
                if nbytes[name]:
                    self.individual_timesteps.append((begin, max(last.get(name, self.last_timestep), begin + 1),
                                                      nbytes[name]))

        def allocate_groups(self) -> None:
            import sympy

            groups = self.buffer_groups
            for group in groups:
                group.make_allocation()
            starts, ends, sizes = [], [], []
            for group in groups:
                begin, end = group.live_range.begin, group.live_range.end
                starts.append(begin)
                ends.append(end if end > begin else self.last_timestep)
                sizes.append(align(group.allocation.size_hint, ALIGNMENT))
            devices = [str(g.node.get_device()) for g in groups]
            names = [g.names[0] for g in groups]
            nbytes = [g.allocation.size_hint for g in groups]
            layouts = [plan_pools(starts, ends, sizes, devices, self.individual_timesteps, self.last_timestep, names,
                                  nbytes, touching, sorted(self.foreign_steps)) for touching in (True, False)]
            pools = min(layouts, key=lambda p: (p.estimated_peak, len(p.pools) + len(p.individual)))
            for k, pool_plan in enumerate(pools.pools):
                members = pool_plan.members
                device = groups[members[0]].node.get_device()
                pool = SlabPool(device, mp.TemporalSplit([]), can_expand=False, nbytes=pool_plan.plan.slab_bytes,
                                poison=self.poison)
                pool.name = f"pool{k}"
                pool.names_to_del.append(pool.name)
                for i, offset in zip(members, pool_plan.plan.offsets):
                    groups[i].allocation.mark_allocated()
                    groups[i].allocation.finalize(pool, sympy.Integer(offset))
                pool_plan.pool = pool
            self.pool_plans = pools
            # the groups left to individual allocation get Inductor's pools of one, as memory_pool="none" would
            for i in pools.individual:
                allocation = groups[i].allocation
                allocation.mark_allocated()
                pool = SlabPool(allocation.device, mp.TemporalSplit([]), can_expand=False, nbytes=allocation.size_hint,
                                poison=self.poison)
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

    return SlabPlanner


@dataclasses.dataclass
class PoolPlan:
    """One pool: ``members`` (indices into the planned groups) and its validated plan (offsets in member order)."""

    members: list[int]
    plan: SlabPlan
    pool: object = None


@dataclasses.dataclass
class PoolLayout:
    """Pools over time, the groups left individual, and the replayed peaks (bytes) of both layouts."""

    pools: list[PoolPlan]
    individual: list[int]
    estimated_peak: int
    stock_estimated_peak: int

    @property
    def pool_bytes(self) -> int:
        return sum(p.plan.slab_bytes for p in self.pools)


def chained_components(members: Sequence[int], starts: Sequence[int], ends: Sequence[int],
                       touching: bool = False) -> list[list[int]]:
    """``members`` split where no lifetime crosses: each part's lifetimes chain together (half-open).

    ``touching=True`` also chains a lifetime that begins where another ends
    (one pool, one allocation, for a buffer freed and the next allocated).
    """
    parts: list[list[int]] = []
    reach = None
    for i in sorted(members, key=lambda i: (starts[i], i)):
        if reach is None or starts[i] > reach or (starts[i] == reach and not touching):
            parts.append([])
            reach = ends[i]
        parts[-1].append(i)
        reach = max(reach, ends[i])
    return parts


def pack_pool(members: list[int], starts, ends, sizes, names: Sequence[str]) -> SlabPlan:
    """Offsets of one pool's groups by our search within :data:`PACK_RESTARTS`, validated."""
    s = [starts[i] for i in members]
    e = [ends[i] for i in members]
    z = [sizes[i] for i in members]
    offsets = search_offsets(s, e, z, restarts=PACK_RESTARTS, max_seconds=PACK_SECONDS_CAP).offsets
    plan = dataclasses.replace(SlabPlan.of_intervals([names[i] for i in members], s, e, z, offsets, "search"),
                               alignment=ALIGNMENT)
    plan.validate()
    return plan


def _replayed_peak(horizon: int, individual: Sequence[tuple[int, int, int]], pools: Sequence[tuple[int, int, int]]
                   ) -> tuple[int, int]:
    """Highest total of ``(begin, end, bytes)`` allocations live (half-open) at a timestep, and that timestep."""
    delta = [0] * (horizon + 2)
    for begin, end, nbytes in (*individual, *pools):
        delta[begin] += nbytes
        delta[min(end, horizon + 1)] -= nbytes
    live = best = at = 0
    for t, d in enumerate(delta):
        live += d
        if live > best:
            best, at = live, t
    return best, at


def is_foreign_call(line: str) -> bool:
    """Whether a raw wrapper line may call code other than Inductor's kernels (which allocate nothing)."""
    text = line.strip()
    return bool(text) and "(" in text and not text.startswith(("assert", "del ", "#"))


def _pooled_excess(step: int, pools: Sequence[PoolPlan], starts: Sequence[int], ends: Sequence[int],
                   sizes: Sequence[int]) -> int:
    """Bytes the pools live at ``step`` hold beyond their members live at ``step`` (aligned sizes)."""
    excess = 0
    for pool in pools:
        members = pool.members
        if min(starts[i] for i in members) <= step < max(ends[i] for i in members):
            excess += pool.plan.slab_bytes - sum(sizes[i] for i in members if starts[i] <= step < ends[i])
    return excess


def plan_pools(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int], devices: Sequence[str],
               outside: Sequence[tuple[int, int, int]], horizon: int, names: Sequence[str] | None = None,
               nbytes: Sequence[int] | None = None, touching: bool = False,
               foreign_steps: Sequence[int] = ()) -> PoolLayout:
    """Pools over time for groups with half-open lifetimes and aligned sizes, never peaking above stock.

    ``outside``: ``(begin, end, bytes)`` of the allocations that stay
    individual whatever we do (graph outputs, extern kernels' outputs, inputs
    freed part-way). ``nbytes``: what each group asks the allocator for on
    its own (default: its aligned size). The replayed stock peak is every
    group allocated one by one. Two rules, and groups leave the pools until
    both hold:

    * the pooled layout's replayed peak is no higher than stock's;
    * at each of ``foreign_steps`` (timesteps where an extern kernel or
      fallback runs, which may allocate scratch memory the replay cannot
      see), the pools hold no byte beyond their members live there, so
      whatever that code allocates lands on top of no more than stock holds
      at the same moment.

    The group leaving is the largest one not live at the violating step (the
    bytes held for nothing), else the largest of the largest pool live there.
    With no pool left it is stock allocation, so this ends.
    ``touching`` goes to :func:`chained_components`.
    """
    n = len(sizes)
    names = names if names is not None else [str(i) for i in range(n)]
    nbytes = nbytes if nbytes is not None else sizes
    singles = [(starts[i], ends[i], nbytes[i]) for i in range(n)]
    stock, _ = _replayed_peak(horizon, outside, singles)
    pooled = [i for i in range(n) if sizes[i] > 0]
    individual = [i for i in range(n) if sizes[i] <= 0]
    packed: dict[tuple[int, ...], SlabPlan] = {}
    while True:
        pools = []
        for device in sorted({devices[i] for i in pooled}):
            on_device = [i for i in pooled if devices[i] == device]
            for part in chained_components(on_device, starts, ends, touching):
                key = tuple(part)
                if key not in packed:
                    packed[key] = pack_pool(part, starts, ends, sizes, names)
                pools.append(PoolPlan(part, packed[key]))
        spans = [(min(starts[i] for i in p.members), max(ends[i] for i in p.members), p.plan.slab_bytes)
                 for p in pools]
        peak, at = _replayed_peak(horizon, [*outside, *(singles[i] for i in individual)], spans)
        if peak <= stock:
            at = next((t for t in foreign_steps if _pooled_excess(t, pools, starts, ends, sizes) > 0), None)
        if at is None or not pools:
            return PoolLayout(pools, individual, peak, stock)
        live = [k for k, (b, e, _) in enumerate(spans) if b <= at < e]
        idle = [i for k in live for i in pools[k].members if not starts[i] <= at < ends[i]]
        if idle:
            leaving = max(idle, key=lambda i: (sizes[i], -i))
        else:
            worst = max(live or range(len(pools)), key=lambda k: (spans[k][2], -k))
            leaving = max(pools[worst].members, key=lambda i: (sizes[i], -i))
        pooled.remove(leaving)
        individual.append(leaving)


def graph_name() -> str:
    from .reorder_pass import graph_being_compiled

    return graph_being_compiled()


def _patched_ir_passes(previous, options: SlabOptions):
    """``run_wrapper_ir_passes`` that plans pools with :class:`SlabPlanner`, or runs ``previous`` on a fallback."""

    def run_wrapper_ir_passes(self, is_inference: bool):
        from torch._inductor.virtualized import V

        name = graph_name()
        try:
            if getattr(V.graph, "cpp_wrapper", False):
                raise SlabFallback("the C++ wrapper is not covered (Python wrapper only)")
            planner = _planner_class()(self, options.poison, name)
            lines = planner.plan(self.lines)
        except Exception as exc:  # noqa: BLE001 - the user's compile must go on
            reason = str(exc) if isinstance(exc, SlabFallback) else f"{type(exc).__name__}: {exc}"
            plans.append({"graph": name, "fallback": reason})
            log.warning("reorder: slab off for %s, Inductor's normal allocation instead: %s", name, reason)
            return previous(self, is_inference)
        layout = planner.pool_plans
        if options.poison:
            self.imports.writeline("from reorder.inductor.slab_check import slab_claim, slab_open, slab_release")
        self.lines = lines
        plans.append({
            "graph": name,
            "pools": [p.plan.slab_bytes for p in layout.pools],
            "pooled": sum(len(p.members) for p in layout.pools),
            "individual": len(layout.individual),
            "pool_bytes": layout.pool_bytes,
            "bound": max((p.plan.tensor_bound for p in layout.pools), default=0),
            "worst_ratio": max((p.plan.ratio for p in layout.pools), default=1.0),
            "estimated_peak": layout.estimated_peak,
            "stock_estimated_peak": layout.stock_estimated_peak,
        })
        log.info("reorder: %s: %d pools, %d bytes (bound %d), %d groups left individual", name,
                 len(layout.pools), layout.pool_bytes, plans[-1]["bound"], len(layout.individual))

    run_wrapper_ir_passes.__wrapped__ = previous
    return run_wrapper_ir_passes


def install_codegen(options: SlabOptions) -> object:
    """Patch ``PythonWrapperCodegen.run_wrapper_ir_passes``; return what it replaced, for :func:`uninstall_codegen`."""
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    saved = vars(PythonWrapperCodegen)["run_wrapper_ir_passes"]
    PythonWrapperCodegen.run_wrapper_ir_passes = _patched_ir_passes(saved, options)
    return saved


def uninstall_codegen(saved: object) -> None:
    """Put back exactly the ``run_wrapper_ir_passes`` that :func:`install_codegen` replaced."""
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    PythonWrapperCodegen.run_wrapper_ir_passes = saved

