"""Measure what a call really allocates: every storage an aten op creates.

:class:`AllocationMeter` is a ``TorchDispatchMode``: after each aten op it
looks at the op's tensor results, and any whose storage is neither the slab
nor one of the tensors the call was given (inputs, parameters) is a new
allocation. In the slab runtime, ops with ``out=`` overloads create none;
the others create a temporary that the runtime copies into the slab and
drops at once. So the bytes a call holds at any moment are the slab plus at
most the largest single-op temporary, which is what the meter reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["AllocationMeter", "Allocation"]


@dataclass
class Allocation:
    op: str
    nbytes: int


@dataclass
class AllocationMeter(TorchDispatchMode):
    """Records allocations made by aten ops outside the ``known`` storages (by data pointer)."""

    known: set = field(default_factory=set)
    allocations: list = field(default_factory=list)

    def __post_init__(self):
        super().__init__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        flat, _ = tree_flatten(result)
        for t in flat:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                if storage.nbytes() and storage.data_ptr() not in self.known:
                    self.known.add(storage.data_ptr())
                    self.allocations.append(Allocation(str(func), storage.nbytes()))
        return result

    @property
    def total_bytes(self) -> int:
        return sum(a.nbytes for a in self.allocations)

    @property
    def largest_bytes(self) -> int:
        return max((a.nbytes for a in self.allocations), default=0)
