"""The poison mode's runtime: what compiled code calls when ``use(slab=True, poison=True)`` generated it.

In the spirit of Inductor's ``track_memory_lifecycle``, but for pools: every
pooled buffer claims its byte range when the wrapper takes it from a pool,
and a claim that overlaps a buffer still live in the same pool raises
:class:`~reorder.errors.SlabCheckError` naming both buffers. When a buffer
dies its bytes are filled with :data:`POISON` (``0xFF`` bytes: NaN in every
float type, -1 in signed integers), so a read after death turns into loud
NaNs rather than plausible stale numbers. Costs a dictionary update per
allocation and a fill per free: a debugging aid, not for production.
"""

from __future__ import annotations

import torch

from ..errors import SlabCheckError

__all__ = ["POISON", "slab_claim", "slab_open", "slab_release"]

#: The byte written over a dead buffer.
POISON = 0xFF

#: Live claims per pool (keyed by the pool's data pointer): buffer name -> (first byte, end byte).
_live: dict[int, dict[str, tuple[int, int]]] = {}


def slab_open(pool: torch.Tensor) -> None:
    """A pool was just allocated: nothing in it is live (forget claims left by an earlier pool at that address)."""
    _live[pool.data_ptr()] = {}


def slab_claim(pool: torch.Tensor, name: str, offset: int, nbytes: int) -> None:
    """``name`` takes bytes ``[offset, offset + nbytes)`` of ``pool``; raise if a live buffer holds any of them."""
    live = _live.setdefault(pool.data_ptr(), {})
    end = offset + nbytes
    if offset < 0 or end > pool.numel():
        raise SlabCheckError(f"slab check: buffer {name!r} at [{offset}, {end}) runs outside its pool "
                             f"of {pool.numel()} bytes")
    for other, (lo, hi) in live.items():
        if lo < end and offset < hi:
            raise SlabCheckError(f"slab check: buffer {name!r} at [{offset}, {end}) overlaps live buffer "
                                 f"{other!r} at [{lo}, {hi}): the slab plan is wrong")
    live[name] = (offset, end)


def slab_release(pool: torch.Tensor, name: str, offset: int, nbytes: int) -> None:
    """``name`` died: poison its bytes and drop its claim."""
    _live.get(pool.data_ptr(), {}).pop(name, None)
    pool[offset:offset + nbytes].fill_(POISON)
