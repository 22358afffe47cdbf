"""Timing calls fairly: one call with the garbage collected before and the collector paused during; several
in alternation.

torch's side runs on millions of small Python objects (stand-in scheduler
nodes); a collection triggered by them can land inside whichever call comes
next. Pausing the collector times each side's own work.

:func:`alternated_times` calls several steps in rounds, each step once per round with the first rotating, so
that a slow stretch of a shared machine falls on all of them; a step is compared with another by the median of
their ratio in the same round.
"""

from __future__ import annotations

import gc
import time
from typing import Callable, Mapping, TypeVar

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0
    finally:
        gc.enable()


def alternated_times(steps: Mapping[str, Callable[[], object]], rounds: int,
                     before: Callable[[str], object] | None = None) -> dict[str, list[float]]:
    """Seconds of each step per round: ``rounds`` rounds call every step once, the first step of round ``k`` the
    ``k``-th (cyclically); ``before(name)``, untimed, runs before each call (a gradient reset, say)."""
    names = list(steps)
    times: dict[str, list[float]] = {name: [] for name in names}
    for k in range(rounds):
        for name in names[k % len(names):] + names[:k % len(names)]:
            if before is not None:
                before(name)
            t0 = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - t0)
    return times
