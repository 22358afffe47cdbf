"""Sizes of the values an FX node carries (``node.meta["val"]``: fake tensors, tuples of them, SymInts).

The joint-graph adapter and the convolution scratch probe both size tensors
whose shapes may be symbolic; both read them here, at the hints Inductor
sizes buffers with (``optimization_hint``; 4096 where a size has no hint, as
Inductor's own fallback for unbacked sizes).
"""

from __future__ import annotations

from typing import Any

__all__ = ["nbytes", "numel", "size_hint", "tensors_of"]


def size_hint(value: Any) -> int:
    """An int, SymInt or size expression at its hint."""
    from torch.fx.experimental.symbolic_shapes import optimization_hint

    return int(optimization_hint(value, fallback=4096))


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
