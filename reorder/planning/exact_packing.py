"""Exact offset packing: branch and bound over canonical placements.

Buffers are rectangles with a fixed extent in time (half-open lifetimes) and a
height (their size); each gets an offset so that no two live at a common step
share a byte, and the slab is the highest top. Whether a slab of ``capacity``
bytes suffices is NP-complete (dynamic storage allocation, Garey & Johnson
SR2). :func:`pack_exact` decides it with the search of M. D. Moffitt,
"MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated Machine
Learning", ASPLOS 2023, and minimises the slab by deciding capacities between
the live-bytes bound and a heuristic incumbent.

* **Canonical placements.** Any packing can be lowered until every buffer
  rests on a buffer that overlaps it in time (or on 0) without raising its
  slab. Such a packing is determined by the order of its buffers by offset:
  each sits at its *lowest* offset, the top of the placed buffers that
  overlap it. The search branches on which buffer comes next, and only in
  increasing (lowest offset, rank) order, so every canonical packing is met
  once.
* **Sections.** The maximal sets of buffers live at one step. All buffers of
  a section are stacked, so its floor (the top of its placed buffers) plus
  its unplaced bytes must fit in the capacity. The floor is also at least
  the lowest offset any of its unplaced buffers can still take, and at least
  the last offset placed, since placements come by increasing offset: no
  candidate may go above the capacity minus a section's unplaced bytes.
* **Dominance.** A candidate whose offset is at or above some unplaced
  buffer's lowest top would leave room for that buffer below it: skipped.
  A buffer placed with nothing unplaced above it (no unplaced buffer
  overlaps it) changes nothing for the others; if its subtree fails, so do
  its siblings'.
* **Decomposition.** When no unplaced buffer crosses from one section to the
  next, the two sides are independent problems, solved one after the other;
  the failure of one fails the placement that split them.
* **Restarts.** Searches with three static rankings ("WAT": widest
  lifetime, then largest area, then largest section total; "TAW"; "TWA") take
  turns under node limits that double, as MiniMalloc does.

The effort is counted in placements tried (``nodes``), so results do not
depend on the machine; a wall-clock cap may stop a search too, and the
result says so. The search is iterative (no recursion) over integer arrays.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass
from operator import add
from typing import Sequence

from ..errors import PlanError
from .offsets import live_bytes_bound
from .offset_search import search_offsets

__all__ = ["ExactPacking", "pack_exact"]

#: Default effort: placements tried over all capacities. MiniMalloc's
#: challenging set A-K needs at most about 600,000 at their capacity
#: (about 15 s on this project's machines).
DEFAULT_NODES = 2_000_000

#: Instances whose buffers overlap in more pairs than this are not searched
#: (the overlap lists alone would take hundreds of megabytes); they get the
#: heuristic incumbent.
MAX_OVERLAPPING_PAIRS = 3_000_000

#: Random restarts of the ``search`` strategy that gives the incumbent (a
#: fixed count, so that the incumbent is deterministic; greedy-by-size and
#: the peak stack always run for it, whatever their work).
INCUMBENT_RESTARTS = 20

#: Static rankings tried in turn (see the module docstring).
RANKINGS = ("WAT", "TAW", "TWA")

UNPLACED = -1


@dataclass(frozen=True)
class ExactPacking:
    """What :func:`pack_exact` found and proved.

    ``status``: "optimal" (no smaller slab exists: the slab equals the
    live-bytes bound or every smaller capacity was proven infeasible),
    "feasible" (a packing within the capacity asked, or the smallest found
    when minimising, not proven minimal), "infeasible" (proven: no packing
    fits ``capacity``; ``offsets`` is None) or "unknown" (the effort ran out
    before a packing within ``capacity`` was found; ``offsets`` is None).
    ``lower_bound``: no packing has a smaller slab (the live-bytes bound, or
    one more than the largest capacity proven infeasible). ``nodes``:
    placements tried; ``seconds``: wall time; ``clock_stopped``: the
    wall-clock cap (``max_seconds``) ended the search; ``note`` says why no search ran, if so.
    """

    status: str
    offsets: tuple[int, ...] | None
    slab: int | None
    lower_bound: int
    capacity: int | None
    nodes: int
    seconds: float
    clock_stopped: bool = False
    note: str = ""


class _Sections:
    """Sections (maximal sets of buffers live at one step) and overlaps of the given buffers.

    ``first[i]``/``last[i]``: the half-open run of sections buffer ``i`` is
    live in; ``members[s]``: the buffers of section ``s``; ``overlaps[i]``:
    the buffers live at some step with ``i``. One sweep over lifetimes, ends
    before starts at equal steps; a section closes at the first end after a
    start. ``pairs`` counts overlapping pairs; overlaps are only listed if
    there are at most ``max_pairs`` of them (else ``overlaps`` is None).
    """

    def __init__(self, starts: Sequence[int], ends: Sequence[int], buffers: Sequence[int], max_pairs: int):
        events = sorted([(ends[i], 0, i) for i in buffers] + [(starts[i], 1, i) for i in buffers])
        self.pairs = 0
        live = 0
        for _, is_start, _ in events:
            self.pairs += live if is_start else 0
            live += 1 if is_start else -1
        self.overlaps: list[list[int]] | None = None
        if self.pairs > max_pairs:
            return
        n = max(buffers, default=-1) + 1
        self.first = [0] * n
        self.last = [0] * n
        self.members: list[list[int]] = []
        self.overlaps = [[] for _ in range(n)]
        active: dict[int, None] = {}  # insertion-ordered, so sections list buffers deterministically
        opened = False  # a buffer started since the last section closed
        for _, is_start, i in events:
            if is_start:
                for j in active:
                    self.overlaps[i].append(j)
                    self.overlaps[j].append(i)
                self.first[i] = len(self.members)
                active[i] = None
                opened = True
            else:
                if opened:
                    self.members.append(list(active))
                    opened = False
                self.last[i] = len(self.members)
                del active[i]


class _Piece:
    """Part of the problem searched on its own: sections ``[lo, hi)``, its buffers and their ranks."""

    __slots__ = ("lo", "hi", "buffers", "rank")

    def __init__(self, lo: int, hi: int, buffers: list[int], rank: dict[int, int]):
        self.lo, self.hi, self.buffers, self.rank = lo, hi, buffers, rank


class _Placement:
    """One buffer placed, and what to restore when it is taken back."""

    __slots__ = ("buffer", "raised", "floors", "hatless")

    def __init__(self, buffer: int, raised: list, floors: list, hatless: bool):
        self.buffer, self.raised, self.floors, self.hatless = buffer, raised, floors, hatless


class _Choice:
    """A search node: candidates for the next placement in ``piece``, the one tried now."""

    __slots__ = ("piece", "candidates", "next", "current")

    def __init__(self, piece: _Piece, candidates: list[int]):
        self.piece, self.candidates, self.next, self.current = piece, candidates, 0, None


class _Split:
    """Independent pieces solved one after the other; ``kept`` holds the placements of those solved."""

    __slots__ = ("pieces", "next", "kept")

    def __init__(self, pieces: list[_Piece]):
        self.pieces, self.next, self.kept = pieces, 0, []


class _BranchAndBound:
    """Depth-first search for a canonical packing under a capacity, with one static ranking.

    State, restored exactly on backtracking: ``offset[i]`` (or UNPLACED),
    ``lowest[i]`` (the top of the placed buffers overlapping ``i``),
    ``floor[s]`` (the lowest offset still free for section ``s``),
    ``total[s]`` (bytes of its unplaced buffers), ``unplaced_in[s]`` and
    ``cut[s]`` (unplaced buffers live in both ``s`` and ``s + 1``).
    """

    def __init__(self, sections: _Sections, sizes: Sequence[int], widths: Sequence[int], buffers: list[int],
                 ranking: str):
        self.sections, self.sizes, self.widths, self.ranking = sections, sizes, widths, ranking
        self.buffers = buffers
        count = len(sections.members)
        self.offset = [UNPLACED] * len(sizes)
        self.lowest = [0] * len(sizes)
        self.floor = [0] * count
        self.total = [0] * count
        self.cut = [0] * count
        self.unplaced_in = [set(m) for m in sections.members]
        for i in buffers:
            for s in range(sections.first[i], sections.last[i]):
                self.total[s] += sizes[i]
            for s in range(sections.first[i], sections.last[i] - 1):
                self.cut[s] += 1
        self.nodes = 0

    def piece(self, lo: int, hi: int, buffers: list[int]) -> _Piece:
        """A piece with its buffers ranked by ``ranking`` (largest first, ties by index)."""
        first, last, total, sizes, widths = self.sections.first, self.sections.last, self.total, self.sizes, self.widths
        keys = {
            "W": {i: widths[i] for i in buffers},
            "A": {i: widths[i] * sizes[i] for i in buffers},
            "T": {i: max(total[first[i]:last[i]]) for i in buffers},
        }
        order = sorted(buffers, key=lambda i: tuple(-keys[c][i] for c in self.ranking) + (i,))
        return _Piece(lo, hi, buffers, {i: r for r, i in enumerate(order)})

    def split(self, piece: _Piece, starts: list[int]) -> list[_Piece]:
        """The pieces of ``piece``'s unplaced buffers between section boundaries ``starts`` (sorted)."""
        groups: list[list[int]] = [[] for _ in range(len(starts) + 1)]
        for i in piece.buffers:
            if self.offset[i] == UNPLACED:
                groups[bisect.bisect_right(starts, self.sections.first[i])].append(i)
        bounds = [piece.lo] + starts + [piece.hi]
        return [self.piece(bounds[k], bounds[k + 1], g) for k, g in enumerate(groups) if g]

    def candidates(self, piece: _Piece, last_offset: int, last_rank: int, capacity: int) -> list[int] | None:
        """Buffers that may come next in ``piece``, in order; None when all are placed.

        Canonical: (lowest offset, rank) above the last placed. Dominance:
        below every unplaced buffer's lowest top. Inference: no higher than
        ``capacity`` minus the most unplaced bytes of a section, since every
        later buffer goes at least as high.
        """
        offset, lowest, sizes, rank = self.offset, self.lowest, self.sizes, piece.rank
        unplaced = [i for i in piece.buffers if offset[i] == UNPLACED]
        if not unplaced:
            return None
        tops = map(add, map(lowest.__getitem__, unplaced), map(sizes.__getitem__, unplaced))
        limit = min(min(tops) - 1, capacity - max(self.total[piece.lo:piece.hi]))
        ordered = sorted((lowest[i], rank[i], i) for i in unplaced if lowest[i] <= limit)
        return [i for o, r, i in ordered if o > last_offset or (o == last_offset and r > last_rank)]

    def place(self, i: int, capacity: int) -> tuple[_Placement, bool, list[int]]:
        """Put ``i`` at its lowest offset; return the placement, whether the sections still fit, new piece starts."""
        sections, sizes, offset, lowest = self.sections, self.sizes, self.offset, self.lowest
        floor, total, cut, unplaced_in = self.floor, self.total, self.cut, self.unplaced_in
        at = lowest[i]
        top = at + sizes[i]
        offset[i] = at
        raised = []
        hatless = True
        for j in sections.overlaps[i]:
            if offset[j] == UNPLACED:
                hatless = False
                if lowest[j] < top:
                    raised.append((j, lowest[j]))
                    lowest[j] = top
        lo, hi = sections.first[i], sections.last[i]
        floors = [(s, floor[s]) for s in range(lo, hi)]
        for s in range(lo, hi):
            floor[s] = top
            total[s] -= sizes[i]
            unplaced_in[s].discard(i)
        fits = True
        # A section's floor is the lowest offset its unplaced buffers can still take: it can only have
        # risen in this buffer's sections and where a raised buffer was the lowest.
        changed = set(range(lo, hi))
        first, last = sections.first, sections.last
        for j, old in raised:
            changed.update(s for s in range(first[j], last[j]) if floor[s] == old)
        get = lowest.__getitem__
        for s in changed:
            if unplaced_in[s]:
                low = min(map(get, unplaced_in[s]))
                if floor[s] < low:
                    floors.append((s, floor[s]))
                    floor[s] = low
                    fits = fits and low + total[s] <= capacity
        starts = []
        for s in range(lo, hi - 1):
            cut[s] -= 1
            if not cut[s]:
                starts.append(s + 1)
        return _Placement(i, raised, floors, hatless), fits, starts

    def unplace(self, placement: _Placement) -> None:
        sections, sizes, floor, total, cut = self.sections, self.sizes, self.floor, self.total, self.cut
        i = placement.buffer
        for s, old in reversed(placement.floors):
            floor[s] = old
        for j, old in placement.raised:
            self.lowest[j] = old
        for s in range(sections.first[i], sections.last[i]):
            total[s] += sizes[i]
            self.unplaced_in[s].add(i)
        for s in range(sections.first[i], sections.last[i] - 1):
            cut[s] += 1
        self.offset[i] = UNPLACED

    def expand(self, frame: _Choice, capacity: int, node_limit: int, deadline: float | None) -> _Choice | _Split | str:
        """Place the next candidate of ``frame`` that fits: the child frame, "solved", "failed" or "stopped"."""
        piece = frame.piece
        while frame.next < len(frame.candidates):
            if self.nodes >= node_limit:
                return "stopped"
            self.nodes += 1
            if deadline is not None and not self.nodes % 1024 and time.perf_counter() > deadline:
                return "stopped"
            i = frame.candidates[frame.next]
            frame.next += 1
            at = self.lowest[i]
            placement, fits, starts = self.place(i, capacity)
            if not fits:
                self.unplace(placement)
                if placement.hatless:
                    return "failed"
                continue
            frame.current = placement
            if starts:
                pieces = self.split(piece, starts)
                return _Split(pieces) if pieces else "solved"
            candidates = self.candidates(piece, at, piece.rank[i], capacity)
            return "solved" if candidates is None else _Choice(piece, candidates)
        return "failed"

    def run(self, capacity: int, node_limit: int, deadline: float | None) -> bool | None:
        """True: packed (``offset`` holds it); False: no packing fits ``capacity``; None: out of nodes or time."""
        if any(t > capacity for t in self.total):
            return False
        count = len(self.sections.members)
        boundaries = [s + 1 for s in range(count - 1) if not self.cut[s]]
        stack: list[_Choice | _Split] = [_Split(self.split(_Piece(0, count, self.buffers, {}), boundaries))]
        outcome = None  # what the frame just popped reported: None (nothing), "solved" or "failed"
        solved: list[_Placement] = []  # placements of the subtree just solved, oldest first
        while stack:
            frame = stack[-1]
            if isinstance(frame, _Split):
                if outcome == "failed":
                    for placement in reversed(frame.kept):
                        self.unplace(placement)
                    stack.pop()
                    continue
                frame.kept += solved
                if frame.next == len(frame.pieces):
                    stack.pop()
                    outcome, solved = "solved", frame.kept
                    continue
                piece = frame.pieces[frame.next]
                frame.next += 1
                stack.append(_Choice(piece, self.candidates(piece, -1, -1, capacity)))
                outcome, solved = None, []
                continue
            if outcome == "solved":
                stack.pop()
                solved = [frame.current] + solved
                continue
            if outcome == "failed":
                self.unplace(frame.current)
                if frame.current.hatless:
                    stack.pop()
                    continue
            child = self.expand(frame, capacity, node_limit, deadline)
            if child == "stopped":
                return None
            if isinstance(child, str):
                stack.pop()
                outcome, solved = child, ([frame.current] if child == "solved" else [])
                continue
            stack.append(child)
            outcome, solved = None, []
        return outcome == "solved"


def _decide(sections: _Sections, sizes: Sequence[int], widths: Sequence[int], buffers: list[int], capacity: int,
            nodes: int, deadline: float | None) -> tuple[bool | None, list[int] | None, int]:
    """Does a packing fit ``capacity``? (answer or None, offsets, nodes spent): rankings in turn, limits doubling."""
    spent = 0
    limit = max(len(buffers), 1)
    while spent < nodes:
        limit *= 2
        for ranking in RANKINGS:
            searcher = _BranchAndBound(sections, sizes, widths, buffers, ranking)
            found = searcher.run(capacity, min(limit, nodes - spent), deadline)
            spent += searcher.nodes
            if found is not None:
                return found, (searcher.offset if found else None), spent
            if spent >= nodes or (deadline is not None and time.perf_counter() > deadline):
                return None, None, spent
    return None, None, spent


def _slab(offsets: Sequence[int], sizes: Sequence[int]) -> int:
    return max((o + z for o, z in zip(offsets, sizes)), default=0)


def pack_exact(
    starts: Sequence[int],
    ends: Sequence[int],
    sizes: Sequence[int],
    capacity: int | None = None,
    *,
    nodes: int = DEFAULT_NODES,
    max_seconds: float | None = None,
    incumbent: Sequence[int] | None = None,
) -> ExactPacking:
    """Offsets within ``capacity`` bytes, or proof that none exist; without a capacity, the smallest slab.

    Lifetimes are half-open ``[starts[i], ends[i])``. With ``capacity``, the
    search decides it (status "optimal" when the packing also meets the
    live-bytes bound, "feasible", "infeasible" or "unknown"). Without, it
    minimises: from ``incumbent`` offsets (default: the ``search`` strategy
    with a fixed number of restarts), it decides the live-bytes bound first,
    then halves the gap between the lowest capacity not yet ruled out and the
    best slab, each capacity with half of the nodes left; a capacity proven
    infeasible raises the lower bound. Status "optimal" when the two meet,
    else "feasible".

    ``nodes`` bounds the placements tried (the result depends on it, never on
    the machine); ``max_seconds`` is an optional wall-clock cap, reported in
    ``clock_stopped`` when it ends the search. Instances with more than
    :data:`MAX_OVERLAPPING_PAIRS` overlapping pairs get the incumbent only
    (see ``note``).

    Raises :class:`PlanError` for lists of different lengths, a negative size
    or capacity, or an empty lifetime.

    Reference: M. D. Moffitt, "MiniMalloc: A Lightweight Memory Allocator for
    Hardware-Accelerated Machine Learning", ASPLOS 2023.
    """
    t0 = time.perf_counter()
    deadline = None if max_seconds is None else t0 + max_seconds
    n = len(sizes)
    if not len(starts) == len(ends) == n:
        raise PlanError(f"pack_exact: {len(starts)} starts, {len(ends)} ends and {n} sizes; one each per buffer")
    for i in range(n):
        if sizes[i] < 0 or starts[i] >= ends[i]:
            raise PlanError(f"pack_exact: buffer {i} needs size >= 0 and start < end, got size {sizes[i]}, "
                            f"lifetime [{starts[i]}, {ends[i]})")
    if capacity is not None and capacity < 0:
        raise PlanError(f"pack_exact: capacity={capacity}: must be a non-negative number of bytes")
    if incumbent is not None and len(incumbent) != n:
        raise PlanError(f"pack_exact: {len(incumbent)} incumbent offsets for {n} buffers")
    bound = live_bytes_bound(starts, ends, sizes)

    def result(status: str, offsets: Sequence[int] | None, lower: int, spent: int = 0, note: str = "") -> ExactPacking:
        stopped = deadline is not None and time.perf_counter() > deadline and status not in ("optimal", "infeasible")
        return ExactPacking(status, None if offsets is None else tuple(offsets),
                            None if offsets is None else _slab(offsets, sizes), lower, capacity, spent,
                            time.perf_counter() - t0, stopped, note)

    if capacity is not None and capacity < bound:
        return result("infeasible", None, bound, note=f"{bound} bytes are live at one step")
    if incumbent is None:
        incumbent = search_offsets(starts, ends, sizes, restarts=INCUMBENT_RESTARTS, max_seconds=max_seconds,
                                   greedy_work_limit=None).offsets
    best = list(incumbent)
    best_slab = _slab(best, sizes)
    if best_slab == bound:
        return result("optimal", best, bound)
    if capacity is not None and best_slab <= capacity:
        return result("feasible", best, bound)
    buffers = [i for i in range(n) if sizes[i] > 0]  # empty buffers stay at 0: they overlap nothing
    sections = _Sections(starts, ends, buffers, MAX_OVERLAPPING_PAIRS)
    if sections.overlaps is None:
        note = f"not searched: {sections.pairs} overlapping pairs > {MAX_OVERLAPPING_PAIRS}"
        if capacity is not None:
            return result("unknown", None, bound, note=note)
        return result("feasible", best, bound, note=note)
    widths = [e - s for s, e in zip(starts, ends)]

    def decide(cap: int, budget: int) -> tuple[bool | None, list[int] | None, int]:
        found, offsets, spent = _decide(sections, sizes, widths, buffers, cap, budget, deadline)
        if found:
            offsets = [0 if o == UNPLACED else o for o in offsets]
        return found, offsets, spent

    if capacity is not None:
        found, offsets, spent = decide(capacity, nodes)
        if found:
            return result("optimal" if _slab(offsets, sizes) == bound else "feasible", offsets, bound, spent)
        if found is False:
            return result("infeasible", None, capacity + 1, spent)
        return result("unknown", None, bound, spent)
    lower = bound  # proven: no smaller slab
    untried = bound  # the lowest capacity not yet tried
    spent = 0
    while untried < best_slab and spent < nodes and (deadline is None or time.perf_counter() < deadline):
        probe = bound if untried == bound else (untried + best_slab - 1) // 2
        found, offsets, used = decide(probe, max((nodes - spent) // 2, 1))
        spent += used
        if found:
            best, best_slab = offsets, _slab(offsets, sizes)
        else:
            untried = probe + 1
            if found is False:
                lower = untried
    return result("optimal" if best_slab == lower else "feasible", best, lower, spent)
