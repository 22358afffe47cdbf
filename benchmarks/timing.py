"""Timing one call fairly: garbage collected before, collector paused during.

torch's side runs on millions of small Python objects (stand-in scheduler
nodes); a collection triggered by them can land inside whichever call comes
next. Pausing the collector times each side's own work.
"""

from __future__ import annotations

import gc
import time
from typing import Callable, TypeVar

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
