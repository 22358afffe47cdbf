"""The lifecycle verifier: catch a plan that makes a node read memory someone else reused.

Debug mode of the slab runtime. It keeps, for every byte range of the slab,
the storage that wrote it last:

* when a node runs, each storage it writes takes ownership of its range;
  any other storage whose bytes it covers is marked *clobbered* (by whom, at
  which step);
* before a node runs, every buffer it reads must be live in the plan at this
  step and not clobbered: otherwise :class:`~reorder.errors.PlanError` names
  the node, the buffer, and the storage that overwrote it;
* when a storage's lifetime ends, its bytes are filled with a poison value
  (0xFF bytes: NaN for floats), so a read the plan did not foresee shows up
  in the results too.
"""

from __future__ import annotations

import torch

from ..errors import PlanError
from ..planning import SlabPlan

__all__ = ["LifecycleVerifier", "POISON"]

POISON = 0xFF


class LifecycleVerifier:
    def __init__(self, plan: SlabPlan, slab: torch.Tensor):
        self.plan = plan
        self.slab = slab
        self.written: set[int] = set()  # storages whose producer has run and that are not released
        self.clobbered = {}  # storage -> (storage that overwrote it, step)
        self.ending = {}  # last step -> storages released after it (graph outputs never are)
        for k in range(len(plan.names)):
            if plan.ends[k] < len(plan.order):
                self.ending.setdefault(plan.ends[k] - 1, []).append(k)
        self.writers = {}
        for k, name in enumerate(plan.names):
            self.writers.setdefault(plan.starts[k], []).append(k)

    def _range(self, k: int) -> tuple[int, int]:
        return self.plan.offsets[k], self.plan.offsets[k] + self.plan.sizes[k]

    def before(self, step: int, node: str, reads: list[str]) -> None:
        """Every buffer ``node`` reads must be live in the plan and still hold its own bytes."""
        for buffer in reads:
            k = self.plan.storage_index.get(buffer)
            if k is None:
                continue  # an input the caller owns
            if not self.plan.starts[k] <= step < self.plan.ends[k]:
                raise PlanError(
                    f"node {node!r} (step {step}) reads buffer {buffer!r}, which the plan keeps only for steps "
                    f"[{self.plan.starts[k]}, {self.plan.ends[k]})"
                )
            if k in self.clobbered:
                other, when = self.clobbered[k]
                lo, hi = self._range(k)
                raise PlanError(
                    f"node {node!r} (step {step}) reads buffer {buffer!r} at bytes [{lo}, {hi}), which "
                    f"{self.plan.names[other]!r} overwrote at step {when}: the plan gives live buffers the same memory"
                )

    def after(self, step: int) -> None:
        """The node at ``step`` ran: its outputs own their bytes now; storages whose life ended are poisoned."""
        for k in self.writers.get(step, ()):
            lo, hi = self._range(k)
            for j in self.written:
                if j == k or j in self.clobbered:
                    continue
                jlo, jhi = self._range(j)
                if jlo < hi and lo < jhi and self.plan.ends[j] > step:
                    self.clobbered[j] = (k, step)
            self.written.add(k)
            self.clobbered.pop(k, None)
        for k in self.ending.get(step, ()):
            lo, hi = self._range(k)
            self.slab[lo:hi].fill_(POISON)
            self.written.discard(k)
