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
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..errors import PlanError
from .offset_search import search_offsets
from .slab import SlabPlan

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
    never share a pool.

    Invariants (checked): ``0 <= begin < end``, ``0 <= nbytes <= size``.
    """

    name: str
    nbytes: int
    size: int
    begin: int
    end: int
    device: str
    kind: GroupKind

    def __post_init__(self) -> None:
        if not 0 <= self.begin < self.end:
            raise PlanError(f"buffer group {self.name!r}: live range [{self.begin}, {self.end}) is empty or negative")
        if not 0 <= self.nbytes <= self.size:
            raise PlanError(f"buffer group {self.name!r}: nbytes {self.nbytes} must lie in [0, size={self.size}]")

    def live_at(self, step: int) -> bool:
        return self.begin <= step < self.end


@dataclass(frozen=True)
class Pool:
    """One pool: a single allocation of ``plan.slab_bytes`` on ``device`` holding ``members``.

    ``members``: indices of the groups planned, in the plan's storage order
    (``plan.offsets[k]`` is ``members[k]``'s offset). The pool is created at
    ``begin`` (its first member's allocation) and deleted at ``end`` (its
    last member's free). Invariants: the members' live ranges chain (their
    union is ``[begin, end)`` without a gap), all are on ``device``, and
    ``plan`` is validated: no two members live at a common step share a byte.
    """

    device: str
    members: tuple[int, ...]
    plan: SlabPlan

    @property
    def begin(self) -> int:
        return min(self.plan.starts)

    @property
    def end(self) -> int:
        return max(self.plan.ends)

    @property
    def nbytes(self) -> int:
        return self.plan.slab_bytes


@dataclass(frozen=True)
class PoolLayout:
    """Pools over time, the pooled groups left to their own allocation, and the replayed peaks (bytes).

    ``individual``: indices of :attr:`GroupKind.POOLED` groups allocated one
    by one after all (zero-byte groups, then those that left the pools, in
    the order they left). ``estimated_peak``: the largest total the program
    allocates at one step with this layout; ``stock_estimated_peak``: the same
    with every group allocated one by one. ``touching``: whether ranges that
    merely touch were chained. Invariants (:meth:`validate`): every pooled
    group is in exactly one pool or in ``individual``, and
    ``estimated_peak <= stock_estimated_peak``.
    """

    pools: tuple[Pool, ...]
    individual: tuple[int, ...]
    estimated_peak: int
    stock_estimated_peak: int
    touching: bool

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
            expected = ([g.begin for g in members], [g.end for g in members], [g.size for g in members])
            if (list(p.plan.starts), list(p.plan.ends), list(p.plan.sizes)) != expected:
                raise PlanError(f"pool of {members[0].name!r}: its plan does not hold its members' ranges and sizes")
            if len(chained_components(p.members, starts, ends, self.touching)) != 1:
                raise PlanError(f"pool of {members[0].name!r}: its members' live ranges leave a gap")
            p.plan.validate()
        if self.estimated_peak > self.stock_estimated_peak:
            raise PlanError(f"pool layout: replayed peak {self.estimated_peak} above stock's "
                            f"{self.stock_estimated_peak}")


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
    delta = [0] * (horizon + 1)
    for begin, end, nbytes in allocations:
        delta[begin] += nbytes
        delta[end] -= nbytes
    live = best = at = 0
    for step, change in enumerate(delta):
        live += change
        if live > best:
            best, at = live, step
    return best, at


class PoolPlanner:
    """Plans :class:`PoolLayout` for ``groups`` (see the module docstring); one planner per layout.

    ``horizon``: the step after the last (no range ends later).
    ``foreign_steps``: steps where code other than the compiled kernels runs.
    The arrays are indexed by group, built once.
    """

    def __init__(self, groups: Sequence[BufferGroup], horizon: int, foreign_steps: Iterable[int] = (),
                 touching: bool = False):
        self.groups = tuple(groups)
        self.horizon = horizon
        self.foreign_steps = sorted(set(foreign_steps))
        self.touching = touching
        self.starts = [g.begin for g in self.groups]
        self.ends = [g.end for g in self.groups]
        self.sizes = [g.size for g in self.groups]
        candidates = [i for i, g in enumerate(self.groups) if g.kind is GroupKind.POOLED]
        self.pooled = [i for i in candidates if self.sizes[i] > 0]
        self.individual = [i for i in candidates if self.sizes[i] <= 0]
        self.packed: dict[tuple[int, ...], SlabPlan] = {}  # a pool's members -> their plan, packed once

    def plan(self) -> PoolLayout:
        """Groups leave the pools until the replay and the foreign-step rule both hold."""
        self.check_horizon()
        stock, _ = replayed_peak(self.horizon, (self.span(i) for i in range(len(self.groups))))
        while True:
            pools = self.form_pools()
            peak, step = self.replay(pools)
            if peak <= stock:
                step = self.foreign_step_with_idle_bytes(pools)
            if step is None or not pools:
                return PoolLayout(tuple(pools), tuple(self.individual), peak, stock, self.touching)
            leaving = self.leaving_group(pools, step)
            self.pooled.remove(leaving)
            self.individual.append(leaving)

    def check_horizon(self) -> None:
        for g in self.groups:
            if g.end > self.horizon:
                raise PlanError(f"buffer group {g.name!r}: live range [{g.begin}, {g.end}) ends after the horizon "
                                f"{self.horizon}")

    def span(self, i: int) -> tuple[int, int, int]:
        """Group ``i`` allocated on its own: ``(begin, end, bytes)``."""
        g = self.groups[i]
        return g.begin, g.end, g.nbytes

    def form_pools(self) -> list[Pool]:
        """The pooled groups in pools: per device (sorted), one pool per chain of live ranges."""
        pools = []
        for device in sorted({self.groups[i].device for i in self.pooled}):
            on_device = [i for i in self.pooled if self.groups[i].device == device]
            for part in chained_components(on_device, self.starts, self.ends, self.touching):
                members = tuple(part)
                if members not in self.packed:
                    self.packed[members] = self.pack(members)
                pools.append(Pool(device, members, self.packed[members]))
        return pools

    def pack(self, members: Sequence[int]) -> SlabPlan:
        """Offsets of one pool's groups by our search within :data:`PACK_RESTARTS`, validated."""
        s = [self.starts[i] for i in members]
        e = [self.ends[i] for i in members]
        z = [self.sizes[i] for i in members]
        found = search_offsets(s, e, z, restarts=PACK_RESTARTS, max_seconds=PACK_SECONDS_CAP,
                               greedy_work_limit=PACK_GREEDY_WORK)
        plan = dataclasses.replace(SlabPlan.of_intervals([self.groups[i].name for i in members], s, e, z,
                                                         found.offsets, "search"),
                                   alignment=ALIGNMENT, capped=found.capped)
        plan.validate()
        return plan

    def replay(self, pools: Sequence[Pool]) -> tuple[int, int]:
        """The replayed peak with ``pools`` (and every other group on its own), and its step."""
        pooled = set(self.pooled)
        unpooled = [i for i in range(len(self.groups)) if i not in pooled]
        return replayed_peak(self.horizon, [*(self.span(i) for i in unpooled),
                                            *((p.begin, p.end, p.nbytes) for p in pools)])

    def foreign_step_with_idle_bytes(self, pools: Sequence[Pool]) -> int | None:
        """The first foreign step where the pools live hold bytes beyond their members live there."""
        return next((step for step in self.foreign_steps if self.idle_bytes(step, pools) > 0), None)

    def idle_bytes(self, step: int, pools: Sequence[Pool]) -> int:
        """Bytes the pools live at ``step`` hold beyond their members live at ``step`` (pooled sizes)."""
        idle = 0
        for p in pools:
            if p.begin <= step < p.end:
                idle += p.nbytes - sum(self.sizes[i] for i in p.members if self.groups[i].live_at(step))
        return idle

    def leaving_group(self, pools: Sequence[Pool], step: int) -> int:
        """The group to allocate on its own: the largest one not live at ``step`` in a pool live there (the
        bytes held for nothing), else the largest of the largest pool live there (or of all pools)."""
        live = [k for k, p in enumerate(pools) if p.begin <= step < p.end]
        idle = [i for k in live for i in pools[k].members if not self.groups[i].live_at(step)]
        if idle:
            return max(idle, key=lambda i: (self.sizes[i], -i))
        worst = max(live or range(len(pools)), key=lambda k: (pools[k].nbytes, -k))
        return max(pools[worst].members, key=lambda i: (self.sizes[i], -i))


def plan_pools(groups: Sequence[BufferGroup], horizon: int, foreign_steps: Iterable[int] = (),
               touching: bool = False) -> PoolLayout:
    """Pools over time for ``groups`` that never peak above stock in the replay (see the module docstring).

    ``horizon``: the step after the program's last (no live range ends
    later). ``foreign_steps``: steps where an extern kernel or fallback runs.
    ``touching``: whether ranges that merely touch share a pool
    (:func:`chained_components`). Raises :class:`PlanError` if a range ends
    after ``horizon`` or a pool's offsets fail validation.
    """
    return PoolPlanner(groups, horizon, foreign_steps, touching).plan()


def choose_layout(groups: Sequence[BufferGroup], horizon: int, foreign_steps: Iterable[int] = ()) -> PoolLayout:
    """:func:`plan_pools` chaining touching ranges and not: the lower replayed peak, then the fewer allocations
    (the touching layout on a tie)."""
    foreign_steps = tuple(foreign_steps)
    layouts = [plan_pools(groups, horizon, foreign_steps, touching) for touching in (True, False)]
    return min(layouts, key=lambda layout: (layout.estimated_peak, layout.allocations))
