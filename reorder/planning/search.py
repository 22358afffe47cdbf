"""The ``search`` offset strategy: a portfolio, then randomised restarts, within a time budget.

1. Linear scan, so that there is an answer however short the budget.
2. The deterministic skylines (rules "area", "width", "size") while time remains,
   and greedy-by-size and the peak stack when their estimated cost fits the budget.
3. Skyline restarts until the budget is spent or a slab equals the live-bytes
   bound (then it is optimal). Most restarts perturb the weights of the best
   skyline so far (a local search over placement preferences; equal slabs
   move too, to walk plateaus); the others draw fresh weights, to leave a basin.
4. A gravity compaction (:func:`~reorder.planning.offsets.compact`) of the
   best result, if it fits the budget; it never makes it worse.

The smallest slab wins. Results depend on the seed and, through the number
of restarts, on the budget and the machine's speed; ``max_restarts`` makes
them deterministic.
"""

from __future__ import annotations

import math
import random
import time
from typing import Callable, Sequence

from .offsets import compact, greedy_by_size, linear_scan, live_bytes_bound, peak_stack, skyline

__all__ = ["search"]

#: Share of restarts that perturb the best weights found so far (the rest draw
#: fresh ones), and the spread of the multiplicative noise. A–K geomean with
#: 10 s each: 1.082 with perturbation, 1.095 with fresh draws only.
PERTURB = 0.7
SIGMA = 0.3

#: seconds per unit of greedy-by-size work (one overlap check), measured on
#: this project's 2-core machines; used only to skip it when it cannot finish.
GREEDY_SECONDS_PER_CHECK = 1.2e-6


def _greedy_work(starts: Sequence[int], ends: Sequence[int]) -> int:
    """About how many overlap checks greedy-by-size makes: n times the mean number live."""
    n = len(starts)
    if not n:
        return 0
    span = max(ends) - min(starts)
    mean_live = sum(e - s for s, e in zip(starts, ends)) / max(span, 1)
    return int(n * max(mean_live, 1) * 2)


def search(
    starts: Sequence[int],
    ends: Sequence[int],
    sizes: Sequence[int],
    seconds: float = 1.0,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    max_restarts: int | None = None,
) -> list[int]:
    """Offsets with the smallest slab found within ``seconds`` (and ``max_restarts`` random restarts).

    With ``max_restarts`` and enough ``seconds`` the result is deterministic
    (for a given ``seed``); ``progress(restarts, slab)`` hears of each improvement.
    """
    deadline = time.perf_counter() + seconds
    bound = live_bytes_bound(starts, ends, sizes)
    best: list[int] | None = None
    best_slab = None
    restarts = 0

    def consider(offsets: list[int]) -> int:
        """Keep ``offsets`` if their slab is the smallest yet; return that slab."""
        nonlocal best, best_slab
        slab = max((o + z for o, z in zip(offsets, sizes)), default=0)
        if best_slab is None or slab < best_slab:
            best, best_slab = offsets, slab
            if progress is not None:
                progress(restarts, slab)
        return slab

    def affordable() -> bool:
        return _greedy_work(starts, ends) * GREEDY_SECONDS_PER_CHECK < deadline - time.perf_counter()

    consider(linear_scan(starts, ends, sizes))  # O(n log n): something to return, however short the budget
    last_run = 0.0  # seconds the previous skyline took: do not start one that cannot finish

    def timed_skyline(**kwargs) -> list[int]:
        nonlocal last_run
        t0 = time.perf_counter()
        offsets = skyline(starts, ends, sizes, **kwargs)
        last_run = time.perf_counter() - t0
        return offsets

    for rule in ("area", "width", "size"):
        if best_slab <= bound or time.perf_counter() + last_run > deadline:
            return best
        consider(timed_skyline(rule=rule))
    for greedy in (greedy_by_size, peak_stack):
        if best_slab > bound and affordable():
            consider(greedy(starts, ends, sizes))
    rng = random.Random(seed)
    n = len(sizes)
    span = [e - s for s, e in zip(starts, ends)]
    best_weights: list[float] | None = None
    while best_slab > bound and time.perf_counter() + last_run < deadline:
        if max_restarts is not None and restarts >= max_restarts:
            break
        restarts += 1
        if best_weights is not None and rng.random() < PERTURB:
            weights = list(best_weights)
            for i in rng.sample(range(n), max(1, int(n * rng.random() * 0.3))):
                weights[i] *= math.exp(SIGMA * rng.gauss(0.0, 1.0))
        else:
            mix = rng.random()
            weights = [span[i] ** (1 - mix) * (sizes[i] + 1) ** mix * (1 + 0.1 * rng.random()) for i in range(n)]
        previous_best = best_slab
        if consider(timed_skyline(weights=weights)) <= previous_best:  # equal slabs move too: plateaus are walked
            best_weights = weights
    if best_slab > bound and affordable():
        consider(compact(starts, ends, sizes, best))
    return best
