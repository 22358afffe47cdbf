"""Sizes of the values an FX node carries (``node.meta["val"]``: fake tensors, tuples of them, SymInts).

The joint-graph adapter and the convolution scratch probe both size tensors
whose shapes may be symbolic; both read them here, at the hints Inductor
sizes buffers with (``optimization_hint``; 4096 where a size has no hint, as
Inductor's own fallback for unbacked sizes). Within :func:`sizes_scaled`,
every size symbol stands at a multiple of its hint instead: the budget
judges partitions of a graph compiled with dynamic shapes at larger sizes
too (:mod:`~reorder.budget.frontier`).
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Any, Iterator

__all__ = ["nbytes", "numel", "size_hint", "sizes_scaled", "tensors_of"]

_scale: contextvars.ContextVar[int] = contextvars.ContextVar("reorder_size_scale", default=1)


@contextmanager
def sizes_scaled(factor: int) -> Iterator[None]:
    """Within it, :func:`size_hint` gives a symbolic size with each of its backed size symbols at ``factor``
    times its hint (a size with an unbacked symbol, or one torch cannot evaluate so, stays at its hint)."""
    token = _scale.set(factor)
    try:
        yield
    finally:
        _scale.reset(token)


def size_hint(value: Any) -> int:
    """An int, SymInt or size expression at its hint (see :func:`sizes_scaled`)."""
    from torch.fx.experimental.symbolic_shapes import optimization_hint

    factor = _scale.get()
    if factor != 1:
        scaled = _scaled_hint(value, factor)
        if scaled is not None:
            return scaled
    return int(optimization_hint(value, fallback=4096))


def _scaled_hint(value: Any, factor: int) -> int | None:
    import torch

    if not isinstance(value, torch.SymInt):
        return None
    node = value.node
    hints = shape_env_hints(node.shape_env)
    symbols = node.expr.free_symbols
    if not symbols or any(s not in hints for s in symbols):
        return None
    try:
        return int(node.expr.xreplace({s: int(hints[s]) * factor for s in symbols}))
    except (TypeError, ValueError):
        return None


def shape_env_hints(shape_env) -> dict:
    """A shape environment's hint of each symbol (``backed_var_to_val`` where a release has it)."""
    return getattr(shape_env, "backed_var_to_val", None) or getattr(shape_env, "var_to_val", {})


def tensors_of(value: Any) -> list:
    """The tensors in ``value``: itself, or those of a (nested) tuple or list, in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_of(v)]
    return []


def nbytes(value: Any) -> int:
    """Bytes of a tensor at the size hints (0 for anything else)."""
    import torch

    return size_hint(value.numel()) * value.dtype.itemsize if isinstance(value, torch.Tensor) else 0


def numel(value: Any) -> int:
    """Elements of every tensor in ``value``, at the size hints."""
    return sum(size_hint(t.numel()) for t in tensors_of(value))
