"""The ``search`` offset strategy: a portfolio, then a fixed number of randomised skyline restarts.

1. Linear scan, so that there is an answer under any cap.
2. The deterministic skylines (rules "area", "width", "size"), then
   greedy-by-size and the peak stack when their work (overlap checks,
   estimated from the lifetimes) is at most ``greedy_work_limit``.
3. ``restarts`` skyline restarts, or fewer when a slab equals the live-bytes
   bound (then it is optimal). Most restarts perturb the weights of the best
   skyline so far (a local search over placement preferences; equal slabs
   move too, to walk plateaus); the others draw fresh weights, to leave a basin.
4. A gravity compaction (:func:`~reorder.planning.offsets.compact`) of the
   best result, under the same work limit; it never makes it worse.

The smallest slab wins. The effort is a count, so the offsets depend only on
the instance, ``restarts`` and ``seed``: the same on any machine under any
load. ``max_seconds`` is a safety cap, checked between steps: a step is not
started when one as long as the last would end past it (a step in flight
finishes). When the cap ends the search early, the result says so.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from functools import partial
from typing import Callable, Sequence

from .offsets import compact, greedy_by_size, linear_scan, live_bytes_bound, peak_stack, skyline

__all__ = ["GREEDY_WORK_LIMIT", "SearchedOffsets", "greedy_work", "search_offsets"]

#: Share of restarts that perturb the best weights found so far (the rest draw
#: fresh ones), and the spread of the multiplicative noise. A–K geomean with
#: 10 s each: 1.082 with perturbation, 1.095 with fresh draws only.
PERTURB = 0.7
SIGMA = 0.3

#: Greedy-by-size, the peak stack and the compaction run only when their work
#: (overlap checks, :func:`greedy_work`) is at most this: about 6 s each on
#: this project's 2-core machines. Every bundled graph and MiniMalloc
#: instance is far below it (resnet50's trace: 0.4 M); idealloc's PanGu
#: (24 M: about 20 s each) and S_1 (84 M: over a minute each) are above.
GREEDY_WORK_LIMIT = 5_000_000


@dataclass(frozen=True)
class SearchedOffsets:
    """What :func:`search_offsets` found: ``offsets``, their ``slab``, the ``restarts`` run, and ``capped``
    (the ``max_seconds`` cap ended the search before its count of work was done)."""

    offsets: tuple[int, ...]
    slab: int
    restarts: int
    capped: bool


def greedy_work(starts: Sequence[int], ends: Sequence[int]) -> int:
    """About how many overlap checks greedy-by-size makes: n times the mean number live."""
    n = len(starts)
    if not n:
        return 0
    span = max(ends) - min(starts)
    mean_live = sum(e - s for s, e in zip(starts, ends)) / max(span, 1)
    return int(n * max(mean_live, 1) * 2)


def search_offsets(
    starts: Sequence[int],
    ends: Sequence[int],
    sizes: Sequence[int],
    *,
    restarts: int,
    max_seconds: float | None = None,
    seed: int = 0,
    greedy_work_limit: int | None = GREEDY_WORK_LIMIT,
    progress: Callable[[int, int], None] | None = None,
) -> SearchedOffsets:
    """Offsets with the smallest slab found by the portfolio and ``restarts`` random skyline restarts.

    Deterministic for a given ``seed`` unless ``max_seconds`` (a wall-clock
    safety cap) stops it, which ``capped`` reports. ``greedy_work_limit``
    None always runs greedy-by-size, the peak stack and the compaction.
    ``progress(restarts, slab)`` hears of each improvement.
    """
    deadline = None if max_seconds is None else time.perf_counter() + max_seconds
    bound = live_bytes_bound(starts, ends, sizes)
    affordable = greedy_work_limit is None or greedy_work(starts, ends) <= greedy_work_limit
    restarted = 0

    def slab_of(offsets: list[int]) -> int:
        return max((o + z for o, z in zip(offsets, sizes)), default=0)

    best = linear_scan(starts, ends, sizes)  # O(n log n): something to return under any cap
    best_slab = slab_of(best)
    if progress is not None:
        progress(restarted, best_slab)

    def consider(offsets: list[int]) -> int:
        """Keep ``offsets`` if their slab is the smallest yet; return that slab."""
        nonlocal best, best_slab
        slab = slab_of(offsets)
        if slab < best_slab:
            best, best_slab = offsets, slab
            if progress is not None:
                progress(restarted, slab)
        return slab

    def result(capped: bool) -> SearchedOffsets:
        return SearchedOffsets(tuple(best), best_slab, restarted, capped)

    last_step = 0.0  # seconds the last step took

    def timed(run: Callable[[], list[int]]) -> list[int]:
        nonlocal last_step
        t0 = time.perf_counter()
        offsets = run()
        last_step = time.perf_counter() - t0
        return offsets

    def out_of_time() -> bool:
        """Would a step as long as the last end past the cap?"""
        return deadline is not None and time.perf_counter() + last_step > deadline

    portfolio = [partial(skyline, starts, ends, sizes, rule=rule) for rule in ("area", "width", "size")]
    if affordable:
        portfolio += [partial(greedy_by_size, starts, ends, sizes), partial(peak_stack, starts, ends, sizes)]
    for run in portfolio:
        if best_slab <= bound:
            return result(False)
        if out_of_time():
            return result(True)
        consider(timed(run))
    rng = random.Random(seed)
    n = len(sizes)
    span = [e - s for s, e in zip(starts, ends)]
    best_weights: list[float] | None = None
    while best_slab > bound and restarted < restarts:
        if out_of_time():
            return result(True)
        restarted += 1
        if best_weights is not None and rng.random() < PERTURB:
            weights = list(best_weights)
            for i in rng.sample(range(n), max(1, int(n * rng.random() * 0.3))):
                weights[i] *= math.exp(SIGMA * rng.gauss(0.0, 1.0))
        else:
            mix = rng.random()
            weights = [span[i] ** (1 - mix) * (sizes[i] + 1) ** mix * (1 + 0.1 * rng.random()) for i in range(n)]
        previous_best = best_slab
        slab = consider(timed(partial(skyline, starts, ends, sizes, weights=weights)))
        if slab <= previous_best:  # equal slabs move too: plateaus are walked
            best_weights = weights
    if best_slab > bound and affordable:
        if out_of_time():
            return result(True)
        consider(timed(partial(compact, starts, ends, sizes, best)))
    return result(False)
