"""Pools over time: which of a compiled program's buffer groups share an allocation, and at which offsets.

The input is one :class:`BufferGroup` per allocation the program makes (a
buffer and the buffers that reuse its memory in place), with its bytes, its
half-open live range in planning steps and its :class:`GroupKind`; the
output is a :class:`PoolLayout`. Nothing here knows Inductor:
:mod:`reorder.inductor.slab` reads the groups off the wrapper's lines and
writes the layout back as pool lines.

1. **What goes in pools.** Only :attr:`GroupKind.POOLED` groups. The others
   (graph outputs, extern kernels' outputs, inputs the program frees
   part-way) are allocated as the program allocates them whatever we do;
   they count in the replay below.
2. **Pools over time.** On each device, pooled groups whose live ranges
   chain together form one pool (:func:`chained_components`), created at its
   first allocation and deleted at its last free, so no pool holds memory
   while nothing in it is live. With ``touching`` a range that begins where
   another ends chains too (fewer pools, so fewer allocator calls).
3. **Offsets** come from our deterministic search
   (:func:`reorder.planning.offset_search.search_offsets` with :data:`PACK_RESTARTS`
   restarts) and each pool's :class:`~reorder.planning.SlabPlan` is
   validated before it is used.
4. **Not above stock in the replay.** A pool holds its largest size over its
   whole lifetime, while the allocations next to it come and go; so every
   allocation (pools, groups left individual, the other kinds) is replayed
   against the same groups allocated one by one. Groups leave the pools
   while the pooled replay peaks higher, or while a pool holds idle bytes at
   a *foreign step* (one where code other than the compiled kernels runs,
   such as an extern kernel, which may allocate scratch the replay cannot
   see: it must land on no more than stock holds at that moment).

:func:`choose_layout` plans with and without ``touching`` and keeps the
lower replayed peak, then the fewer allocations.

**Sizes that are expressions** (a program compiled with dynamic shapes): a
group's ``expr`` is its bytes as an expression in size symbols, with the
symbols' ``hints`` and ``ranges`` given to the planner. A pool of such
groups is a :class:`~reorder.planning.symbolic.StackedPlan`: its offsets and
its size are expressions, disjoint for every value of the symbols (proven,
see that module), evaluated by the program when it allocates the pool. The
replay and the foreign-step rule then hold at every evaluation point of the
symbols' ranges (:func:`~reorder.sizes.evaluation_points`: the hint, the
lower bounds, twice and four times the hint and a point well above it): a
group leaves the pools while either fails at any of them.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..errors import PlanError
from ..sizes import (Expr, SymbolRange, align_expression, evaluate_bytes, evaluation_points, size_interval,
                     size_symbols)
from ..sweep import live_bytes, peak_of
from .offset_search import search_offsets
from .slab import SlabPlan
from .symbolic import StackedPlan, check_nonnegative, choose_stacking

__all__ = ["ALIGNMENT", "PACK_RESTARTS", "BufferGroup", "GroupKind", "Pool", "PoolLayout", "PoolPlanner",
           "chained_components", "choose_layout", "plan_pools", "replayed_peak"]

#: Inductor's pool alignment (``memory_planning._align``): every pooled size and offset is a multiple of it.
ALIGNMENT = 64

#: Restarts of the offset search per pool: the work budget that decides the offsets.
PACK_RESTARTS = 32

#: Greedy-by-size and the peak stack run on a pool whose overlap checks are at most this many: 25M checks
#: is the 30 s the pools' search was allowed before its effort became a count, so pools come out as before.
PACK_GREEDY_WORK = 25_000_000

#: Safety cap (seconds) on one pool's search; at the default restarts it is never reached on graphs we know.
PACK_SECONDS_CAP = 30.0


class GroupKind(enum.Enum):
    """Who allocates a group's memory."""

    #: the program allocates it from the pools we plan, or on its own if it leaves them
    POOLED = "pooled"
    #: allocated on its own whatever we do (a graph output, freed whenever its user drops it; a comm buffer)
    INDIVIDUAL = "individual"
    #: an extern kernel's output (or a child of a multi-output one): the kernel allocates it
    EXTERN = "extern"
    #: a graph input the program frees part-way (a backward's saved activation): live from step 0 to its ``del``
    FREED_INPUT = "freed_input"


@dataclass(frozen=True)
class BufferGroup:
    """One allocation of the program: a buffer and every buffer that reuses its memory in place.

    ``name``: the first buffer's. ``nbytes``: what it asks the allocator for
    on its own. ``size``: its bytes in a pool (``nbytes`` rounded up to
    :data:`ALIGNMENT`). ``begin``/``end``: its live range in planning steps,
    half-open: allocated at step ``begin``, its bytes free for a group
    allocated at step ``end`` (no kernel runs between a free and an
    allocation of the same step). ``device``: groups on different devices
    never share a pool. ``expr``: ``nbytes`` as an expression in size
    symbols, or None when it is a constant; ``nbytes`` and ``size`` are then
    its value and aligned value at the hints.

    Invariants (checked): ``0 <= begin < end``, ``0 <= nbytes <= size``.
    """

    name: str
    nbytes: int
    size: int
    begin: int
    end: int
    device: str
    kind: GroupKind
    expr: Expr | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.begin < self.end:
            raise PlanError(f"buffer group {self.name!r}: live range [{self.begin}, {self.end}) is empty or negative")
        if not 0 <= self.nbytes <= self.size:
            raise PlanError(f"buffer group {self.name!r}: nbytes {self.nbytes} must lie in [0, size={self.size}]")

    def live_at(self, step: int) -> bool:
        return self.begin <= step < self.end

    @property
    def aligned_expr(self) -> Expr:
        """Its bytes in a pool as an expression (an int when constant)."""
        return self.size if self.expr is None else align_expression(self.expr, ALIGNMENT)

    def nbytes_at(self, point: dict[str, int]) -> int:
        return self.nbytes if self.expr is None or not point else evaluate_bytes(self.expr, point, self.name)

    def size_at(self, point: dict[str, int]) -> int:
        return self.size if self.expr is None or not point else evaluate_bytes(self.aligned_expr, point, self.name)


@dataclass(frozen=True)
class Pool:
    """One pool: a single allocation of ``plan.slab_bytes`` on ``device`` holding ``members``.

    ``members``: indices of the groups planned, in the plan's storage order
    (``plan.offsets[k]`` is ``members[k]``'s offset). The pool is created at
    ``begin`` (its first member's allocation) and deleted at ``end`` (its
    last member's free). Invariants: the members' live ranges chain (their
    union is ``[begin, end)`` without a gap), all are on ``device``, and
    ``plan`` is validated: no two members live at a common step share a byte
    (a :class:`~reorder.planning.symbolic.StackedPlan` where a member's size
    is an expression: at every value of the symbols).
    """

    device: str
    members: tuple[int, ...]
    plan: SlabPlan | StackedPlan

    @property
    def begin(self) -> int:
        return min(self.plan.starts)

    @property
    def end(self) -> int:
        return max(self.plan.ends)

    @property
    def nbytes(self) -> int:
        """Its bytes at the hints."""
        return self.plan.slab_bytes

    def nbytes_at(self, point: dict[str, int]) -> int:
        if isinstance(self.plan, SlabPlan) or not point:
            return self.plan.slab_bytes
        return self.plan.at(point).slab_bytes


@dataclass(frozen=True)
class PoolLayout:
    """Pools over time, the pooled groups left to their own allocation, and the replayed peaks (bytes).

    ``individual``: indices of :attr:`GroupKind.POOLED` groups allocated one
    by one after all (zero-byte groups and groups whose size expression may
    be negative in the symbols' ranges, then those that left the pools, in
    the order they left). ``estimated_peak``: the largest total the program
    allocates at one step with this layout; ``stock_estimated_peak``: the same
    with every group allocated one by one (both at the hints). ``touching``:
    whether ranges that merely touch were chained. ``peaks_at``: where sizes
    are expressions, both replayed peaks at every evaluation point (label ->
    ``(estimated, stock)``), with ``points`` the symbol values there.
    Invariants (:meth:`validate`): every pooled group is in exactly one pool
    or in ``individual``, and ``estimated_peak <= stock_estimated_peak`` (at
    every evaluation point).
    """

    pools: tuple[Pool, ...]
    individual: tuple[int, ...]
    estimated_peak: int
    stock_estimated_peak: int
    touching: bool
    peaks_at: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    points: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)

    @property
    def pool_bytes(self) -> int:
        return sum(p.nbytes for p in self.pools)

    @property
    def allocations(self) -> int:
        """Allocator calls of the pooled groups: one per pool, one per group left individual."""
        return len(self.pools) + len(self.individual)

    @property
    def bound(self) -> int:
        """The largest live bytes of one pool's members: pools never coexist, so no layout of them is smaller."""
        return max((p.plan.tensor_bound for p in self.pools), default=0)

    @property
    def worst_ratio(self) -> float:
        """The largest pool's slab over its own live-bytes bound (1.0: every pool is optimal)."""
        return max((p.plan.ratio for p in self.pools), default=1.0)

    def validate(self, groups: Sequence[BufferGroup]) -> None:
        """Check the invariants above and each pool's against ``groups``, or raise :class:`PlanError`."""
        placed = [i for p in self.pools for i in p.members] + list(self.individual)
        pooled = [i for i, g in enumerate(groups) if g.kind is GroupKind.POOLED]
        if sorted(placed) != pooled:
            raise PlanError(f"pool layout: groups {sorted(placed)} placed, expected each pooled group once: {pooled}")
        starts, ends = [g.begin for g in groups], [g.end for g in groups]
        for p in self.pools:
            members = [groups[i] for i in p.members]
            if not members:
                raise PlanError("pool layout: a pool without members")
            if any(g.device != p.device for g in members):
                raise PlanError(f"pool of {members[0].name!r}: members on devices other than {p.device}")
            sizes = [g.aligned_expr if isinstance(p.plan, StackedPlan) else g.size for g in members]
            expected = ([g.begin for g in members], [g.end for g in members], sizes)
            if (list(p.plan.starts), list(p.plan.ends), list(p.plan.sizes)) != expected:
                raise PlanError(f"pool of {members[0].name!r}: its plan does not hold its members' ranges and sizes")
            if len(chained_components(p.members, starts, ends, self.touching)) != 1:
                raise PlanError(f"pool of {members[0].name!r}: its members' live ranges leave a gap")
            p.plan.validate()
        for label, (peak, stock) in {"hint": (self.estimated_peak, self.stock_estimated_peak),
                                     **self.peaks_at}.items():
            if peak > stock:
                raise PlanError(f"pool layout: replayed peak {peak} above stock's {stock} at {label}")

    @property
    def worst_ratio_at(self) -> dict[str, float]:
        """Where sizes are expressions: the largest pool's slab over its own live-bytes bound at each point."""
        ratios: dict[str, float] = {}
        for p in self.pools:
            for label, ratio in (p.plan.ratios.items() if isinstance(p.plan, StackedPlan) else ()):
                ratios[label] = max(ratios.get(label, 1.0), ratio)
        return ratios


def chained_components(members: Iterable[int], starts: Sequence[int], ends: Sequence[int],
                       touching: bool = False) -> list[list[int]]:
    """``members`` split where no live range crosses: each part's ranges chain together (half-open).

    ``touching=True`` also chains a range that begins where another ends
    (one pool, one allocation, for a buffer freed and the next allocated).
    Parts and their members are in order of ``(start, index)``.
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


def replayed_peak(horizon: int, allocations: Iterable[tuple[int, int, int]]) -> tuple[int, int]:
    """The highest total of ``(begin, end, bytes)`` allocations live (half-open, ``end <= horizon``) at one
    step, and the first step where it is reached (0 if nothing is ever live)."""
    changes = ((step, sign * nbytes) for begin, end, nbytes in allocations for step, sign in ((begin, 1), (end, -1)))
    return peak_of(live_bytes(horizon + 1, changes))


class PoolPlanner:
    """Plans :class:`PoolLayout` for ``groups`` (see the module docstring); one planner per layout.

    ``horizon``: the step after the last (no range ends later).
    ``foreign_steps``: steps where code other than the compiled kernels runs.
    ``hints`` and ``ranges``: the size symbols' values and ranges, where a
    group's size is an expression. The arrays are indexed by group (and by
    evaluation point), built once.
    """

    def __init__(self, groups: Sequence[BufferGroup], horizon: int, foreign_steps: Iterable[int] = (),
                 touching: bool = False, hints: dict[str, int] | None = None,
                 ranges: dict[str, SymbolRange] | None = None):
        self.groups = tuple(groups)
        self.horizon = horizon
        self.foreign_steps = sorted(set(foreign_steps))
        self.touching = touching
        self.hints, self.ranges = dict(hints or {}), dict(ranges or {})
        symbols = set().union(*(size_symbols(g.expr) for g in self.groups if g.expr is not None))
        self.points = evaluation_points(self.hints, self.ranges, symbols) if symbols else [("hint", {})]
        self.starts = [g.begin for g in self.groups]
        self.ends = [g.end for g in self.groups]
        self.nbytes = [[g.nbytes_at(point) for g in self.groups] for _, point in self.points]
        self.sizes_at = [[g.size_at(point) for g in self.groups] for _, point in self.points]
        self.sizes = self.sizes_at[0]
        candidates = [i for i, g in enumerate(self.groups) if g.kind is GroupKind.POOLED]
        self.pooled = [i for i in candidates if self.poolable(self.groups[i])]
        self.individual = [i for i in candidates if not self.poolable(self.groups[i])]
        self.packed: dict[tuple[int, ...], SlabPlan | StackedPlan] = {}  # a pool's members -> its plan, packed once
        self.pool_bytes: dict[tuple[int, ...], list[int]] = {}  # a pool's members -> its bytes at each point

    def poolable(self, group: BufferGroup) -> bool:
        """Whether a group can share a pool: it holds bytes (a positive size, or one that is an expression), and
        an expression is proven non-negative over the symbols' ranges (what stacking needs)."""
        if group.expr is None:
            return group.size > 0
        return size_interval(group.aligned_expr, self.ranges)[0] >= 0

    def plan(self) -> PoolLayout:
        """Groups leave the pools until the replay and the foreign-step rule both hold at every point."""
        self.check_horizon()
        stock = [replayed_peak(self.horizon, (self.span(i, q) for i in range(len(self.groups))))[0]
                 for q in range(len(self.points))]
        while True:
            pools = self.form_pools()
            peaks = [self.replay(pools, q) for q in range(len(self.points))]
            violation = next(((q, step) for q, (peak, step) in enumerate(peaks) if peak > stock[q]), None)
            if violation is None:
                violation = next(((q, step) for q in range(len(self.points))
                                  if (step := self.foreign_step_with_idle_bytes(pools, q)) is not None), None)
            if violation is None or not pools:
                symbolic = len(self.points) > 1
                peaks_at = {label: (peak[0], st) for (label, _), peak, st in zip(self.points, peaks, stock, strict=True)}
                return PoolLayout(tuple(pools), tuple(self.individual), peaks[0][0], stock[0], self.touching,
                                  peaks_at if symbolic else {},
                                  {label: dict(point) for label, point in self.points} if symbolic else {})
            leaving = self.leaving_group(pools, *violation)
            self.pooled.remove(leaving)
            self.individual.append(leaving)

    def check_horizon(self) -> None:
        for g in self.groups:
            if g.end > self.horizon:
                raise PlanError(f"buffer group {g.name!r}: live range [{g.begin}, {g.end}) ends after the horizon "
                                f"{self.horizon}")

    def span(self, i: int, q: int = 0) -> tuple[int, int, int]:
        """Group ``i`` allocated on its own at evaluation point ``q``: ``(begin, end, bytes)``."""
        return self.starts[i], self.ends[i], self.nbytes[q][i]

    def form_pools(self) -> list[Pool]:
        """The pooled groups in pools: per device (sorted), one pool per chain of live ranges."""
        pools = []
        for device in sorted({self.groups[i].device for i in self.pooled}):
            on_device = [i for i in self.pooled if self.groups[i].device == device]
            for part in chained_components(on_device, self.starts, self.ends, self.touching):
                members = tuple(part)
                if members not in self.packed:
                    self.packed[members] = self.pack(members)
                pool = Pool(device, members, self.packed[members])
                if members not in self.pool_bytes:
                    self.pool_bytes[members] = [pool.nbytes_at(point) for _, point in self.points]
                pools.append(pool)
        return pools

    def pack(self, members: Sequence[int]) -> SlabPlan | StackedPlan:
        """Offsets of one pool's groups by our search within :data:`PACK_RESTARTS` (at each evaluation point, and
        stacked, where a member's size is an expression), validated."""
        s = [self.starts[i] for i in members]
        e = [self.ends[i] for i in members]
        names = [self.groups[i].name for i in members]
        if any(self.groups[i].expr is not None for i in members):
            sizes = tuple(self.groups[i].aligned_expr for i in members)
            check_nonnegative(names, sizes, self.ranges, "buffer group")
            stacking = choose_stacking(s, e, sizes, self.points, PACK_RESTARTS, PACK_SECONDS_CAP, PACK_GREEDY_WORK,
                                       what=lambda k: names[k])
            plan = StackedPlan("search", ALIGNMENT, (), tuple(names), tuple((n,) for n in names), tuple(s), tuple(e),
                               sizes, stacking, (), 0, self.hints, self.ranges)
            plan.validate()
            return plan
        z = [self.sizes[i] for i in members]
        found = search_offsets(s, e, z, restarts=PACK_RESTARTS, max_seconds=PACK_SECONDS_CAP,
                               greedy_work_limit=PACK_GREEDY_WORK)
        plan = dataclasses.replace(SlabPlan.of_intervals(names, s, e, z, found.offsets, "search"),
                                   alignment=ALIGNMENT, capped=found.capped)
        plan.validate()
        return plan

    def replay(self, pools: Sequence[Pool], q: int = 0) -> tuple[int, int]:
        """The replayed peak at evaluation point ``q`` with ``pools`` (and every other group on its own), and
        its step."""
        pooled = set(self.pooled)
        unpooled = [i for i in range(len(self.groups)) if i not in pooled]
        return replayed_peak(self.horizon, [*(self.span(i, q) for i in unpooled),
                                            *((p.begin, p.end, self.pool_bytes[p.members][q]) for p in pools)])

    def foreign_step_with_idle_bytes(self, pools: Sequence[Pool], q: int = 0) -> int | None:
        """The first foreign step where the pools live hold bytes beyond their members live there (at point
        ``q``)."""
        return next((step for step in self.foreign_steps if self.idle_bytes(step, pools, q) > 0), None)

    def idle_bytes(self, step: int, pools: Sequence[Pool], q: int = 0) -> int:
        """Bytes the pools live at ``step`` hold beyond their members live at ``step`` (pooled sizes, at point
        ``q``)."""
        idle = 0
        sizes = self.sizes_at[q]
        for p in pools:
            if p.begin <= step < p.end:
                idle += self.pool_bytes[p.members][q] - sum(sizes[i] for i in p.members
                                                            if self.groups[i].live_at(step))
        return idle

    def leaving_group(self, pools: Sequence[Pool], q: int, step: int) -> int:
        """The group to allocate on its own: the largest (at point ``q``) not live at ``step`` in a pool live
        there (the bytes held for nothing), else the largest of the largest pool live there (or of all pools)."""
        sizes = self.sizes_at[q]
        live = [k for k, p in enumerate(pools) if p.begin <= step < p.end]
        idle = [i for k in live for i in pools[k].members if not self.groups[i].live_at(step)]
        if idle:
            return max(idle, key=lambda i: (sizes[i], -i))
        worst = max(live or range(len(pools)), key=lambda k: (self.pool_bytes[pools[k].members][q], -k))
        return max(pools[worst].members, key=lambda i: (sizes[i], -i))


def plan_pools(groups: Sequence[BufferGroup], horizon: int, foreign_steps: Iterable[int] = (),
               touching: bool = False, hints: dict[str, int] | None = None,
               ranges: dict[str, SymbolRange] | None = None) -> PoolLayout:
    """Pools over time for ``groups`` that never peak above stock in the replay (see the module docstring).

    ``horizon``: the step after the program's last (no live range ends
    later). ``foreign_steps``: steps where an extern kernel or fallback runs.
    ``touching``: whether ranges that merely touch share a pool
    (:func:`chained_components`). ``hints`` and ``ranges``: the size
    symbols' (see :class:`PoolPlanner`). Raises :class:`PlanError` if a range
    ends after ``horizon`` or a pool's offsets fail validation.
    """
    return PoolPlanner(groups, horizon, foreign_steps, touching, hints, ranges).plan()


def choose_layout(groups: Sequence[BufferGroup], horizon: int, foreign_steps: Iterable[int] = (),
                  hints: dict[str, int] | None = None, ranges: dict[str, SymbolRange] | None = None) -> PoolLayout:
    """:func:`plan_pools` chaining touching ranges and not: the lower replayed peak relative to stock at its worst
    point (the only point, for constant sizes), then the lower at the hints, then the fewer allocations (the
    touching layout on a tie)."""
    foreign_steps = tuple(foreign_steps)
    layouts = [plan_pools(groups, horizon, foreign_steps, touching, hints, ranges) for touching in (True, False)]

    def worst_ratio(layout: PoolLayout) -> float:
        peaks = layout.peaks_at.values() or [(layout.estimated_peak, layout.stock_estimated_peak)]
        return max(peak / stock if stock else 1.0 for peak, stock in peaks)

    return min(layouts, key=lambda layout: (worst_ratio(layout), layout.estimated_peak, layout.allocations))
