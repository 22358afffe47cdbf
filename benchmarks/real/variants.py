"""The real-model benchmark's columns: one :class:`~benchmarks.variants.Variant` per way of compiling the model.

Adding a variant (our slab, our fusion guard) is one more value here; the
run (:mod:`benchmarks.real.run`) and the report read them all alike.
"""

from __future__ import annotations

from reorder.compare import VARIANTS as NAMED

from ..variants import Variant, eager, hooked, stock

__all__ = ["HOOK", "NO_LAYOUT_OPTIMIZATION", "VARIANTS", "Variant"]

#: Our order, with Inductor's own methods compared on every graph (the report's estimates come from its records).
HOOK = hooked("hook", "torch.compile with reorder.inductor.use(memory_budget=None, compare=True)", compare=True,
             **NAMED["hook"])

VARIANTS: tuple[Variant, ...] = (
    eager(),
    stock(),
    HOOK,
    hooked("slab", "torch.compile with reorder.inductor.use(slab=True, memory_budget=None): our order and our pools",
           **NAMED["slab"]),
    hooked("guard", "torch.compile with reorder.inductor.use(fusion_guard=True, memory_budget=None): our order and "
           "our fusion guard", **NAMED["guard"]),
    stock("memory_planning", "torch.compile with Inductor's config.memory_planning=True (its own pools)",
          training=False, memory_planning=True),
)

#: Rerun of stock for the decomposition of a gap: the weights' layout copies disappear with it.
NO_LAYOUT_OPTIMIZATION = stock("stock_no_layout_opt", "stock with config.layout_optimization=False",
                               layout_optimization=False)
