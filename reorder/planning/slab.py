"""The slab plan: every storage at a static offset in one allocation, and its proof.

Layout (AITemplate's): ``[tensors][unique workspace 1]...[unique workspace N][shared workspace]``.
The tensor region is what an offset strategy packed; each node's unique
workspace follows, in node order; the shared workspace, sized for the
largest request, comes last. Every offset is a multiple of ``alignment``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property

from ..errors import PlanError
from .offsets import live_bytes_bound

__all__ = ["PlannedStorages", "SlabPlan"]


@dataclass(frozen=True)
class PlannedStorages:
    """What every plan holds of its storages, whatever places them: the ``strategy`` and ``alignment``, the
    ``order`` of node names, and parallel tuples per storage: ``names`` (owner buffer), ``members`` (all buffer
    names in it), ``starts``/``ends`` (half-open steps)."""

    strategy: str
    alignment: int
    order: tuple[str, ...]
    names: tuple[str, ...]
    members: tuple[tuple[str, ...], ...]
    starts: tuple[int, ...]
    ends: tuple[int, ...]


@dataclass(frozen=True)
class SlabPlan(PlannedStorages):
    """Offsets of every storage, the slab size, and what bounds it.

    Besides the :class:`PlannedStorages`, parallel tuples per storage: ``sizes``
    (aligned bytes) and ``offsets``. ``tensor_bound``: no packing of these
    storages is smaller (the largest total live at one step, or more where
    the exact packer proved it); ``lower_bound`` adds the workspace region:
    no plan with this layout can be smaller. ``status`` and ``nodes``: the
    exact packer's verdict and effort (see
    :class:`~reorder.planning.exact_packing.ExactPacking`); None and 0 for
    the other strategies. ``capped``: the wall-clock safety cap
    (``PlanOptions.max_seconds``) ended the search or the exact packer
    before its count of work was done, so the offsets may depend on the
    machine's speed.
    """

    sizes: tuple[int, ...]
    offsets: tuple[int, ...]
    tensor_bytes: int
    tensor_bound: int
    unique_workspace: dict[str, tuple[int, int]]  # node -> (offset, bytes)
    shared_workspace: tuple[int, int]  # (offset, bytes)
    symbolic_sizes: tuple[str | None, ...] = ()  # the size expressions of symbolic graphs, for reports
    status: str | None = None
    nodes: int = 0
    capped: bool = False

    @classmethod
    def of_intervals(cls, names, starts, ends, sizes, offsets, strategy: str = "manual") -> "SlabPlan":
        """A plan of bare intervals (an offset-packing instance): no order, no workspaces, alignment 1."""
        top = max((o + z for o, z in zip(offsets, sizes)), default=0)
        return cls(strategy, 1, (), tuple(names), tuple((n,) for n in names), tuple(starts), tuple(ends),
                   tuple(sizes), tuple(offsets), top, live_bytes_bound(starts, ends, sizes), {}, (top, 0))

    @property
    def slab_bytes(self) -> int:
        return self.shared_workspace[0] + self.shared_workspace[1]

    @property
    def lower_bound(self) -> int:
        return self.tensor_bound + (self.slab_bytes - self.tensor_bytes)

    @property
    def ratio(self) -> float:
        """Slab over lower bound (1.0 is optimal)."""
        return self.slab_bytes / self.lower_bound if self.lower_bound else 1.0

    @cached_property
    def storage_index(self) -> dict[str, int]:
        """Buffer name -> the storage it lives in (an alias lives in its root's), built once."""
        return {name: k for k, group in enumerate(self.members) for name in group}

    def offset_of(self, buffer: str) -> int:
        """Offset of ``buffer``'s data (an alias shares its root's)."""
        try:
            return self.offsets[self.storage_index[buffer]]
        except KeyError:
            raise PlanError(f"buffer {buffer!r} owns no storage in this plan") from None

    def validate(self) -> None:
        """Prove the plan sound, or raise :class:`PlanError` naming the culprits.

        The contract, exactly: it raises if and only if an offset is negative
        or misaligned, a lifetime is empty, a storage reaches past the tensor
        region, the workspaces are not laid out after it, or two storages of
        positive size that are live at a common step (half-open ``[start,
        end)``) share a byte. Zero-size storages hold no bytes and take no
        part in the overlap check.

        One sweep over lifetimes (frees before allocations at a step) keeps
        the live positive-size storages sorted by offset; they are pairwise
        disjoint, so a new storage overlaps one of them if and only if it
        overlaps a neighbour by offset. O(n log n) plus the list upkeep.
        """
        a = self.alignment
        for k, name in enumerate(self.names):
            o, z = self.offsets[k], self.sizes[k]
            if o < 0 or o % a:
                raise PlanError(f"buffer {name!r}: offset {o} is not a non-negative multiple of the alignment {a}")
            if o + z > self.tensor_bytes:
                raise PlanError(f"buffer {name!r}: [{o}, {o + z}) runs past the tensor region ({self.tensor_bytes} bytes)")
            if self.starts[k] >= self.ends[k]:
                raise PlanError(f"buffer {name!r}: empty lifetime [{self.starts[k]}, {self.ends[k]})")
        positive = [k for k in range(len(self.names)) if self.sizes[k] > 0]
        events = sorted([(self.ends[k], 0, k) for k in positive] + [(self.starts[k], 1, k) for k in positive])
        live: list[tuple[int, int]] = []  # (offset, k), sorted by offset; pairwise disjoint
        for step, kind, k in events:
            key = (self.offsets[k], k)
            if kind == 0:
                live.pop(bisect.bisect_left(live, key))
                continue
            pos = bisect.bisect_left(live, key)
            for j in (pos - 1, pos):
                if 0 <= j < len(live):
                    other = live[j][1]
                    lo = max(self.offsets[k], self.offsets[other])
                    hi = min(self.offsets[k] + self.sizes[k], self.offsets[other] + self.sizes[other])
                    if lo < hi:
                        raise PlanError(
                            f"buffers {self.names[other]!r} and {self.names[k]!r} share bytes [{lo}, {hi}) "
                            f"while both are live at step {step}"
                        )
            live.insert(pos, key)
        end = self.tensor_bytes
        for node, (o, z) in self.unique_workspace.items():
            if o != end or o % a:
                raise PlanError(f"node {node!r}: unique workspace at {o}, expected {end} (aligned to {a})")
            end += z
        if self.shared_workspace[0] != end:
            raise PlanError(f"shared workspace at {self.shared_workspace[0]}, expected {end}")

    def to_json(self) -> dict:
        """The ``plan`` CLI object: order, slab_bytes, lower_bound, strategy, capped, buffers [...]."""
        return {
            "strategy": self.strategy,
            "alignment": self.alignment,
            "order": list(self.order),
            "slab_bytes": self.slab_bytes,
            "lower_bound": self.lower_bound,
            "ratio": self.ratio,
            "tensor_bytes": self.tensor_bytes,
            "capped": self.capped,
            **({"status": self.status, "nodes": self.nodes} if self.status else {}),
            "buffers": [
                {"name": self.names[k], "offset": self.offsets[k], "size": self.sizes[k], "start": self.starts[k],
                 "end": self.ends[k], "aliases": [m for m in self.members[k] if m != self.names[k]],
                 **({"symbolic_size": self.symbolic_sizes[k]} if k < len(self.symbolic_sizes) and self.symbolic_sizes[k] else {})}
                for k in range(len(self.names))
            ],
            "workspace": {
                "unique": {node: {"offset": o, "size": z} for node, (o, z) in self.unique_workspace.items()},
                "shared": {"offset": self.shared_workspace[0], "size": self.shared_workspace[1]},
            },
        }

