"""Offset strategies: give each storage an address so that no two live at once overlap.

Every strategy takes three equal-length lists, ``starts``, ``ends`` (half-open
lifetimes ``[start, end)`` in steps) and ``sizes`` (bytes, already aligned),
and returns one offset per storage. The slab is ``max(offset + size)``; no
strategy can beat the largest total size live at one step
(:func:`live_bytes_bound`).

* ``naive``: no reuse, storages back to back. The slab is the sum of sizes.
* ``linear_scan``: simulate a best-fit allocator over time: at each step free
  what ended, then place what starts (largest first) in the smallest free
  hole, else on top. O(n log n + n * holes).
* ``greedy_by_size``: Pisarchyk & Lee 2020, as in AITemplate's
  memory_planning pass: largest first, each in the smallest gap between
  already-placed storages that overlap it in time, else above them.
  O(n * k), k the storages overlapping a lifetime (found by time buckets).
* ``greedy_by_breadth``: Pisarchyk & Lee's other order: steps by the bytes
  live at them, widest first; at each, its storages largest first, placed as
  in greedy_by_size.
* ``peak_stack``: ours. Stack the storages live at the busiest step first,
  longest-lived lowest, so that step has no hole and what the short-lived
  ones leave free before and after it lies in one piece on top; then place
  the rest as greedy_by_size does. O(n * k).
* ``skyline``: ours. Time positions are fixed, so this is strip packing with
  fixed x: keep the skyline (the top of placed storages over time), fill its
  lowest valley with the unplaced storage that spans most of it without
  leaving it, and raise the valley to its lower neighbour when none fits.
  Storages land on what is below them, so no holes are left except where
  nothing fits.
* ``search`` (:mod:`reorder.planning.offset_search`): a portfolio of the
  above and a fixed number of randomised skylines; the best valid result wins.
"""

from __future__ import annotations

import bisect
import heapq
from typing import Callable, Sequence

from ..errors import PlanError
from ..sweep import live_bytes, peak_of

__all__ = ["STRATEGIES", "busiest_step", "live_bytes_bound", "naive", "linear_scan", "greedy_by_size", "greedy_by_breadth",
           "peak_stack", "skyline"]

Offsets = list[int]


def busiest_step(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int]) -> tuple[int, int]:
    """``(step, bytes)``: the first step with the largest total size live, and that total (0, 0 when empty)."""
    steps = sorted({*starts, *ends})  # the steps where something changes, in order
    index = {t: k for k, t in enumerate(steps)}
    changes = ((index[t], sign * z) for s, e, z in zip(starts, ends, sizes) for t, sign in ((s, 1), (e, -1)))
    best, k = peak_of(live_bytes(len(steps), changes))
    return (steps[k] if best else min(starts, default=0)), best


def live_bytes_bound(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int]) -> int:
    """The largest total size live at one step: no slab can be smaller."""
    return busiest_step(starts, ends, sizes)[1]


def naive(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int]) -> Offsets:
    offsets, top = [], 0
    for z in sizes:
        offsets.append(top)
        top += z
    return offsets


def linear_scan(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int]) -> Offsets:
    n = len(sizes)
    offsets = [0] * n
    starting: dict[int, list[int]] = {}
    ending: dict[int, list[int]] = {}
    for i in range(n):
        starting.setdefault(starts[i], []).append(i)
        ending.setdefault(ends[i], []).append(i)
    holes: list[tuple[int, int]] = []  # (offset, size), sorted, coalesced
    top = 0
    for t in sorted(set(starting) | set(ending)):
        for i in ending.get(t, ()):
            o, z = offsets[i], sizes[i]
            k = bisect.bisect(holes, (o, z))
            if k and holes[k - 1][0] + holes[k - 1][1] == o:
                k -= 1
                o, z = holes[k][0], z + holes[k][1]
                del holes[k]
            if k < len(holes) and o + z == holes[k][0]:
                z += holes[k][1]
                del holes[k]
            if o + z == top:
                top = o
            else:
                holes.insert(k, (o, z))
        for i in sorted(starting.get(t, ()), key=lambda i: (-sizes[i], i)):
            need = sizes[i]
            fit = min((k for k in range(len(holes)) if holes[k][1] >= need), key=lambda k: holes[k][1], default=None)
            if fit is None:
                if holes and holes[-1][0] + holes[-1][1] == top:
                    top = holes.pop()[0]
                offsets[i] = top
                top += need
            else:
                o, z = holes[fit]
                offsets[i] = o
                if z == need:
                    del holes[fit]
                else:
                    holes[fit] = (o + need, z - need)
    return offsets


class _Placer:
    """Best-fit placement against already-placed storages, found through time buckets."""

    def __init__(
        self, starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int], buckets: int = 512, lowest: bool = False
    ):
        self.lowest = lowest  # take the lowest gap that fits, not the smallest
        self.starts, self.ends, self.sizes = starts, ends, sizes
        self.offsets = [0] * len(sizes)
        self.first = min(starts, default=0)
        span = max(ends, default=1) - self.first
        self.width = max(1, -(-span // buckets))
        self.buckets: list[list[int]] = [[] for _ in range(buckets + 1)]
        self.stamp = [-1] * len(sizes)
        self.queries = 0

    def _range(self, i: int) -> range:
        return range((self.starts[i] - self.first) // self.width, (self.ends[i] - 1 - self.first) // self.width + 1)

    def place(self, i: int) -> None:
        s, e, z = self.starts[i], self.ends[i], self.sizes[i]
        self.queries += 1
        q = self.queries
        busy = []
        for b in self._range(i):
            for j in self.buckets[b]:
                if self.stamp[j] != q and self.starts[j] < e and self.ends[j] > s:
                    self.stamp[j] = q
                    busy.append((self.offsets[j], self.offsets[j] + self.sizes[j]))
        busy.sort()
        top = 0
        best = best_gap = None
        for lo, hi in busy:
            gap = lo - top
            if gap >= z and (best_gap is None or gap < best_gap):
                best, best_gap = top, gap
                if self.lowest:
                    break
            top = max(top, hi)
        self.offsets[i] = top if best is None else best
        for b in self._range(i):
            self.buckets[b].append(i)


def greedy_by_size(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int]) -> Offsets:
    placer = _Placer(starts, ends, sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], starts[i] - ends[i], i)):
        placer.place(i)
    return placer.offsets


def peak_stack(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int]) -> Offsets:
    """Stack the storages live at the busiest step, longest-lived lowest; then greedy-by-size for the rest.

    The stack leaves no hole at the busiest step, so the slab is at the bound
    there. Long lifetimes at the bottom put the room that short-lived
    storages free before and after that step at the top, in one piece, where
    the others fit. On idealloc's S_1 trace (28,526 storages) this reaches
    1.0010 of the bound (1.0007 compacted), where greedy-by-size and skyline
    restarts stay near 1.0015.
    """
    step, _ = busiest_step(starts, ends, sizes)
    placer = _Placer(starts, ends, sizes)
    at_peak = [starts[i] <= step < ends[i] for i in range(len(sizes))]
    for i in sorted(range(len(sizes)), key=lambda i: (not at_peak[i], starts[i] - ends[i] if at_peak[i] else 0,
                                                      -sizes[i], starts[i] - ends[i], i)):
        placer.place(i)
    return placer.offsets


def compact(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int], offsets: Sequence[int]) -> Offsets:
    """Gravity: re-place storages from the lowest offset up, each in the lowest gap that fits.

    No storage moves up: those re-placed before it only moved down, so its
    old place is still free. The slab therefore never grows, and holes that
    the first placement left below a storage are filled.
    """
    placer = _Placer(starts, ends, sizes, lowest=True)
    for i in sorted(range(len(sizes)), key=lambda i: (offsets[i], i)):
        placer.place(i)
    return placer.offsets


def greedy_by_breadth(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int]) -> Offsets:
    n = len(sizes)
    times = sorted(set(starts))
    by_step: dict[int, list[int]] = {}
    breadth: dict[int, int] = {}
    order_by_start = sorted(range(n), key=lambda i: starts[i])
    live: list[tuple[int, int]] = []  # (end, i)
    k = 0
    for t in times:
        while k < n and starts[order_by_start[k]] <= t:
            i = order_by_start[k]
            heapq.heappush(live, (ends[i], i))
            k += 1
        while live and live[0][0] <= t:
            heapq.heappop(live)
        by_step[t] = [i for _, i in live]
        breadth[t] = sum(sizes[i] for _, i in live)
    placer = _Placer(starts, ends, sizes)
    placed = [False] * n
    for t in sorted(times, key=lambda t: (-breadth[t], t)):
        for i in sorted(by_step[t], key=lambda i: (-sizes[i], i)):
            if not placed[i]:
                placed[i] = True
                placer.place(i)
    return placer.offsets


SKYLINE_RULES = ("width", "area", "size")


def skyline(
    starts: Sequence[int],
    ends: Sequence[int],
    sizes: Sequence[int],
    rule: str = "width",
    weights: Sequence[float] | None = None,
) -> Offsets:
    """Fill the skyline's lowest valley with the best storage that fits inside it.

    ``rule`` says which storage is best: the widest lifetime ("width"), the
    largest lifetime x size ("area") or the largest ("size"); ties go to the
    other quantities, then the lower index. Explicit ``weights`` (higher is
    placed first where it fits; the search's restarts) override the rule.
    """
    n = len(sizes)
    if n == 0:
        return []
    times = sorted(set(starts) | set(ends))
    index = {t: k for k, t in enumerate(times)}
    s = [index[x] for x in starts]
    e = [index[x] for x in ends]
    if weights is not None:
        weight = [(w, -i) for i, w in enumerate(weights)]
    elif rule == "width":
        weight = [(e[i] - s[i], sizes[i], -i) for i in range(n)]
    elif rule == "area":
        weight = [((e[i] - s[i]) * sizes[i], -i) for i in range(n)]
    elif rule == "size":
        weight = [(sizes[i], e[i] - s[i], -i) for i in range(n)]
    else:
        raise PlanError(f"unknown skyline rule {rule!r}; use one of {SKYLINE_RULES}")
    order = sorted(range(n), key=lambda i: (s[i], i))
    order_starts = [s[i] for i in order]
    skip = list(range(n + 1))  # union-find: next unplaced position in ``order``

    def next_unplaced(p: int) -> int:
        root = p
        while skip[root] != root:
            root = skip[root]
        while skip[p] != root:
            skip[p], p = root, skip[p]
        return root

    # The skyline: segments keyed by their first step, as a doubly linked list,
    # and a heap of (height, first step) whose stale entries are skipped.
    height = {0: 0}
    seg_end = {0: len(times) - 1}
    seg_prev: dict[int, int | None] = {0: None}
    heap = [(0, 0)]

    def set_segment(x0: int, x1: int, h: int, prev: int | None) -> None:
        height[x0], seg_end[x0], seg_prev[x0] = h, x1, prev
        if x1 in seg_prev:
            seg_prev[x1] = x0
        heapq.heappush(heap, (h, x0))

    def merge_right(x0: int) -> None:
        """Merge the segment at ``x0`` with its right neighbour if they are level."""
        x1 = seg_end[x0]
        if x1 in height and height[x1] == height[x0]:
            seg_end[x0] = seg_end.pop(x1)
            del height[x1], seg_prev[x1]
            if seg_end[x0] in seg_prev:
                seg_prev[seg_end[x0]] = x0

    offsets = [0] * n
    remaining = n
    while remaining:
        h, x0 = heapq.heappop(heap)
        if height.get(x0) != h:
            continue
        x1 = seg_end[x0]
        best = None
        p = next_unplaced(bisect.bisect_left(order_starts, x0))
        while p < n and order_starts[p] < x1:
            i = order[p]
            if e[i] <= x1 and (best is None or weight[i] > weight[order[best]]):
                best = p
            p = next_unplaced(p + 1)
        prev = seg_prev[x0]
        if best is None:
            # Nothing fits: raise the valley to its lower neighbour and merge.
            right = height.get(x1)
            left = height[prev] if prev is not None else None
            new_h = min(x for x in (left, right) if x is not None)
            height[x0] = new_h
            merge_right(x0)
            if prev is not None and height[prev] == new_h:
                merge_right(prev)
                x0 = prev
            heapq.heappush(heap, (height[x0], x0))
            continue
        i = order[best]
        skip[best] = best + 1
        remaining -= 1
        offsets[i] = h
        a, b = s[i], e[i]
        if a > x0:
            set_segment(x0, a, h, prev)
            set_segment(a, b, h + sizes[i], x0)
        else:
            set_segment(a, b, h + sizes[i], prev)
        if b < x1:
            set_segment(b, x1, h, a)
        if b in height:
            merge_right(a)
        if seg_prev[a] is not None:
            merge_right(seg_prev[a])
    return offsets


STRATEGIES: dict[str, Callable[..., Offsets]] = {
    "naive": naive,
    "linear_scan": linear_scan,
    "greedy_by_size": greedy_by_size,
    "greedy_by_breadth": greedy_by_breadth,
    "peak_stack": peak_stack,
    "skyline": skyline,
}
