"""The one sweep over allocations and frees: bytes live at each step, and the peak.

Every figure of live bytes in the library comes from changes at steps: a
buffer adds its bytes at the step it is allocated and takes them away at the
step it is freed. Inductor's estimate (:mod:`~reorder.timeline`), the fusion
check (:mod:`~reorder.fusion`), the model of the generated code
(:mod:`~reorder.budget.allocation_model`), the replay of the generated
code's events (:mod:`~reorder.inductor.generated_code`), checkpoint segments,
pools and offsets all sum the same way; they differ only in what a step is
and which bytes change there, so they say that and call :func:`live_bytes`
and :func:`peak_of`.
"""

from __future__ import annotations

from itertools import accumulate
from operator import add
from typing import Iterable, Sequence

__all__ = ["live_bytes", "peak_of"]


def live_bytes(steps: int, changes: Iterable[tuple[int, int]], start: int = 0) -> list[int]:
    """Bytes live at each of ``steps`` steps: ``start``, plus every ``(step, change)`` at or before it (a
    change at ``steps`` or later is after the last step and counts nowhere)."""
    delta = [0] * steps
    for step, change in changes:
        if step < steps:
            delta[step] += change
    if steps:
        delta[0] += start
    return list(accumulate(delta))


def peak_of(live: Sequence[int], during: Sequence[int] | None = None) -> tuple[int, int]:
    """``(peak, step)``: the highest of ``live[t]`` (plus ``during[t]``, bytes held only while step ``t`` runs,
    such as a kernel's scratch), never below 0, and the first step that reaches it (0 when nothing is live)."""
    values = live if during is None else list(map(add, live, during))
    peak = max(values, default=0)
    return (peak, values.index(peak)) if peak > 0 else (0, 0)
