"""Storage lifetimes of an execution order: what the slab must hold, and when.

A *storage* is a region of the slab. Lifetimes are half-open ``[start, end)``
in steps of the order: the storage is written at step ``start`` and its last
use is step ``end - 1``.

* A computed buffer owns a storage from its producer's step to its last
  reader's (its own step if nobody reads it).
* An alias (mutation rename or view) owns nothing: it is a member of its
  chain root's storage, and its readers (already forwarded to the root by the
  graph) keep that storage alive.
* A multi-output parent owns nothing; each child owns its own bytes from the
  *parent's* step, since the parent's kernel writes them.
* Graph outputs, and storages any of whose aliases is a graph output, live to
  the end of the program.
* Freeable graph inputs are planned from step 0 by default, so that the slab
  covers exactly the bytes the estimator counts; ``include_inputs=False``
  leaves them to the caller (as AITemplate does). Non-freeable inputs are the
  caller's always.
* Zero-byte buffers own nothing.

Sizes are rounded up to ``alignment``. With ``alignment=1`` the largest total
live at one step equals :func:`reorder.timeline.estimate_peak_memory`'s peak
(a test checks this on every bundled graph).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import PlanError
from ..graph import Graph

__all__ = ["Storage", "StorageUse", "storage_intervals", "storage_uses", "align"]


def align(size: int, alignment: int) -> int:
    """``size`` rounded up to a multiple of ``alignment``."""
    return -(-size // alignment) * alignment


@dataclass(frozen=True)
class Storage:
    """One region of the slab: ``owner`` buffer id, lifetime ``[start, end)``, aligned ``size``,
    and ``members``: every buffer id whose data lives in it (the owner and its aliases)."""

    owner: int
    start: int
    end: int
    size: int
    members: tuple[int, ...]


@dataclass(frozen=True)
class StorageUse:
    """A storage before any order is chosen: under an order it lives from the step of
    ``writer`` (step 0 if None) to one past the latest step of ``users`` (to the end of the
    program if ``to_end``). ``owner``, ``size`` (aligned) and ``members`` as in :class:`Storage`."""

    owner: int
    writer: int | None
    users: tuple[int, ...]
    to_end: bool
    size: int
    members: tuple[int, ...]


def storage_uses(graph: Graph, alignment: int = 64, include_inputs: bool = True) -> list[StorageUse]:
    """The storages of ``graph`` as functions of the order (see the module docstring), in buffer order."""
    if alignment < 1:
        raise PlanError(f"alignment must be a positive number of bytes, got {alignment}")
    members = graph.members
    uses = []
    for b in range(graph.num_buffers):
        if graph.alias_of[b] is not None or graph.children[b] or graph.size[b] == 0:
            continue
        if graph.is_input[b]:
            if not graph.freeable[b] or not include_inputs:
                continue
            writer = None
        else:
            writer = graph.producer[graph.parent[b]] if graph.parent[b] is not None else graph.producer[b]
        users = graph.readers[b] if graph.is_input[b] else (graph.producer[b], *graph.readers[b])
        to_end = any(graph.is_output[m] for m in members[b])
        uses.append(StorageUse(b, writer, tuple(users), to_end, align(graph.size[b], alignment), members[b]))
    return uses


def storage_intervals(
    graph: Graph, order: Sequence[int], alignment: int = 64, include_inputs: bool = True
) -> list[Storage]:
    """The storages of ``graph`` under ``order`` (node ids), in buffer order."""
    uses = storage_uses(graph, alignment, include_inputs)
    graph.check_order(order)
    n = graph.num_nodes
    step = [0] * n
    for s, v in enumerate(order):
        step[v] = s
    return [
        Storage(u.owner, 0 if u.writer is None else step[u.writer],
                n if u.to_end else max([0] + [step[r] for r in u.users]) + 1, u.size, u.members)
        for u in uses
    ]
