"""How to plan a slab, as one value: the strategy, the layout, and the effort of the search.

:class:`PlanOptions` is what :func:`~reorder.planning.plan_memory`,
:func:`~reorder.planning.plan_orders`, :func:`~reorder.planning.pack` and the
CLI take. It is checked once, when it is made, so a bad option fails before
any work starts, with one line naming the option, its value and what is
allowed.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PlanError
from .exact_packing import DEFAULT_NODES
from .offsets import STRATEGIES

__all__ = ["DEFAULT_MAX_SECONDS", "DEFAULT_RESTARTS", "PlanOptions", "STRATEGY_NAMES"]

STRATEGY_NAMES = tuple(STRATEGIES) + ("search",)

#: The ``search`` strategy's random restarts per order. The bundled graphs and
#: the captured zoo graphs need at most 627 (densenet_train_1's DFS order;
#: resnet18_train_1 297) to pack their best order at the live-bytes bound,
#: where the search stops.
DEFAULT_RESTARTS = 1000

#: Safety cap on the wall-clock seconds of one planning call; reached only on
#: instances of tens of thousands of buffers (idealloc's traces), and
#: reported by the plan when it is.
DEFAULT_MAX_SECONDS = 60.0


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class PlanOptions:
    """Options of one planning call.

    ``strategy``: one of :data:`STRATEGY_NAMES` (see
    :mod:`reorder.planning.offsets`). ``alignment``: every offset and size is
    a multiple of it (a power of two, in bytes). ``include_inputs``: plan the
    freeable graph inputs too (False leaves them to the caller).
    ``restarts``: random skyline restarts of the ``search`` strategy per
    order, its effort: the plan depends on it, never on the machine (the
    exact packer's own incumbent has a fixed count,
    :data:`~reorder.planning.exact_packing.INCUMBENT_RESTARTS`).
    ``max_seconds``: a wall-clock safety cap on the whole call (None: none);
    when it stops the search or the exact packer, the plan's ``capped`` says
    so. ``exact``: minimise the slab with the exact packer
    (:func:`~reorder.planning.exact_packing.pack_exact`), starting from the
    strategy's offsets, within ``nodes`` placements.
    """

    strategy: str = "search"
    alignment: int = 64
    include_inputs: bool = True
    restarts: int = DEFAULT_RESTARTS
    max_seconds: float | None = DEFAULT_MAX_SECONDS
    exact: bool = False
    nodes: int = DEFAULT_NODES

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGY_NAMES:
            raise PlanError(f"strategy={self.strategy!r} is unknown; known: {', '.join(STRATEGY_NAMES)}")
        if not _is_int(self.alignment) or self.alignment < 1 or self.alignment & (self.alignment - 1):
            raise PlanError(f"alignment={self.alignment!r}: must be a power of two (1, 2, 4, ..., 64, ...)")
        for name in ("include_inputs", "exact"):
            if not isinstance(getattr(self, name), bool):
                raise PlanError(f"{name}={getattr(self, name)!r}: must be True or False")
        if not _is_int(self.restarts) or self.restarts < 1:
            raise PlanError(f"restarts={self.restarts!r}: must be a positive integer")
        seconds = self.max_seconds
        if seconds is not None and not (isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
                                        and seconds > 0):  # NaN fails the comparison too
            raise PlanError(f"max_seconds={seconds!r}: must be a positive number of seconds, or None for no cap")
        if not _is_int(self.nodes) or self.nodes < 1:
            raise PlanError(f"nodes={self.nodes!r}: must be a positive integer")
