"""How each column of the report compiles the model: one row per variant.

A variant is a name, the context its compile runs in (``None``: eager, no
compile) and whether it applies to training. Adding a variant (our slab,
our fusion guard) is one more row.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, ContextManager

__all__ = ["VARIANTS", "Variant"]


@dataclass(frozen=True)
class Variant:
    """``compile_context``: what ``torch.compile``'s first call (the compile) runs under; None for eager."""

    name: str
    description: str
    compile_context: Callable[[], ContextManager] | None
    training: bool = True


def _hook(**options) -> Callable[[], ContextManager]:
    def context() -> ContextManager:
        from reorder import inductor

        return inductor.use(**options)

    return context


def _inductor_config(**changes) -> Callable[[], ContextManager]:
    def context() -> ContextManager:
        from torch._inductor import config

        return config.patch(changes)

    return context


VARIANTS: tuple[Variant, ...] = (
    Variant("eager", "no compile", None),
    Variant("stock", "torch.compile, Inductor as configured by default", contextlib.nullcontext),
    Variant("hook", "torch.compile with reorder.inductor.use(compare=True)", _hook(compare=True)),
    Variant("slab", "torch.compile with reorder.inductor.use(slab=True): our order and our pools", _hook(slab=True)),
    Variant("guard", "torch.compile with reorder.inductor.use(fusion_guard=True): our order and our fusion guard",
            _hook(fusion_guard=True)),
    Variant("memory_planning", "torch.compile with Inductor's config.memory_planning=True (its own pools)",
            _inductor_config(memory_planning=True), training=False),
)

#: Rerun of stock for the decomposition of a gap: the weights' layout copies disappear with it.
NO_LAYOUT_OPTIMIZATION = Variant("stock_no_layout_opt", "stock with config.layout_optimization=False",
                                 _inductor_config(layout_optimization=False))
