"""What an extern kernel allocates and frees while it runs (its scratch), measured once by running it.

Inductor's model of a program counts buffers: what each kernel writes and
reads. An extern kernel may also allocate memory for itself and free it
before it returns, and on a training step that can decide the real peak.
On CPU, oneDNN's convolutions reorder their operands into blocked layouts:
a backward convolution on plain (NCHW) tensors allocates about its input
and its output gradient again, and a depthwise backward convolution on
channels-last tensors with a 5x5 or 7x7 kernel allocates about
``channels x kernel area x 1 KB`` for its weight gradient (14.8 MB for a
576-channel 5x5 convolution whose tensors hold 73 KB). Nothing models this;
the kernel's own allocations show it, so this module measures them.

:func:`scratch_bytes` runs the node's operator once on tensors of its
shapes and dtype, on its device, in the layout its program will hand it
(plain or channels-last: Inductor's layout optimisation turns channels-last
on for a program that runs a convolution, ``GraphLowering.decide_layout_opt``),
and returns the peak it allocated above its start less its outputs' bytes
(:func:`reorder.measure.measure`). The figure is a property of the machine's
kernels, not of its load: the same node gives the same bytes on every run.
The tensors are filled with ones (the global random stream is left as it
was) and nothing is kept. Results are cached per signature, so a network's
repeated blocks are run once.

Only :data:`PROBED` operators on CPU tensors are run; a probe that cannot
run (a profiler is already recording, a tensor larger than
:data:`PROBE_LIMIT_BYTES`, the operator fails) counts 0 bytes, Inductor's own
assumption. CUDA kernels are not probed: measuring them would reset the
caller's CUDA peak statistics, and cuDNN's workspaces follow other rules.
"""

from __future__ import annotations

import functools
from typing import Any

from .joint_adapter import _hint, _nbytes

__all__ = ["PROBE_LIMIT_BYTES", "PROBED", "scratch_bytes"]

#: Operators whose scratch is measured: the extern kernels with large workspaces.
PROBED = ("aten::convolution", "aten::convolution_backward")

#: Largest operands a probe allocates (inputs and outputs together); bigger nodes count 0.
PROBE_LIMIT_BYTES = 1 << 30


def is_probed(node) -> bool:
    """Whether ``node`` calls one of the :data:`PROBED` operators."""
    schema = getattr(getattr(node.target, "_schema", None), "name", None)
    return node.op == "call_function" and schema in PROBED


def scratch_bytes(node, channels_last: bool) -> int:
    """Bytes ``node``'s operator allocates and frees while it runs, in the given layout (see the module
    docstring); 0 for an operator not probed or a probe that cannot run (a failed probe is not cached: a later
    compile tries again)."""
    if not is_probed(node):
        return 0
    try:  # under a running profiler ``measure`` refuses: counted 0, not cached
        signature = _signature(node, channels_last)
        return 0 if signature is None else _measured(node.target, signature)
    except Exception:  # noqa: BLE001 - an unknown scratch counts 0, as Inductor counts it
        return 0


class _NotProbed(Exception):
    """A node whose scratch is not measured (a tensor not on CPU, an argument we cannot rebuild)."""


def _signature(node, channels_last: bool) -> tuple | None:
    """The probe's arguments as hashable data: tensors as ``("tensor", shape, dtype, channels_last)``, symbolic
    sizes at their hints; None when a tensor is not on CPU, an argument is symbolic but not a size, or the operands
    exceed :data:`PROBE_LIMIT_BYTES`."""
    import torch

    total = 0

    def encode(arg: Any) -> Any:
        nonlocal total
        if isinstance(arg, torch.fx.Node):
            val = arg.meta.get("val")
            if isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool):
                return _hint(val)
            if not isinstance(val, torch.Tensor):
                raise _NotProbed
            if val.device.type != "cpu":
                raise _NotProbed
            total += _nbytes(val)
            return ("tensor", tuple(_hint(s) for s in val.shape), val.dtype, channels_last and val.dim() == 4)
        if isinstance(arg, (list, tuple)):
            return tuple(encode(a) for a in arg)
        if isinstance(arg, torch.SymInt):
            return _hint(arg)
        if isinstance(arg, (torch.SymFloat, torch.SymBool)):
            raise _NotProbed
        return arg

    try:
        args = tuple(encode(a) for a in node.args)
    except _NotProbed:
        return None
    out = node.meta.get("val")
    outputs = out if isinstance(out, (tuple, list)) else [out]
    total += sum(_nbytes(t) for t in outputs)
    return None if total > PROBE_LIMIT_BYTES else args


@functools.lru_cache(maxsize=4096)
def _measured(target, signature: tuple) -> int:
    """Run ``target`` once on CPU tensors made from ``signature`` and return its peak above its start less its
    outputs' bytes (an error propagates, so that a failed probe is not cached)."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from ..measure import measure

    def make(arg: Any) -> Any:
        if isinstance(arg, tuple) and arg[:1] == ("tensor",):
            _, shape, dtype, channels_last = arg
            t = torch.ones(shape, dtype=dtype, device="cpu")  # never the caller's default device
            return t.to(memory_format=torch.channels_last) if channels_last else t
        if isinstance(arg, tuple):
            return [make(a) for a in arg]
        return arg

    with unset_fake_temporarily(), torch.no_grad():
        args = [make(a) for a in signature]
        kept: list = []
        memory = measure(lambda: kept.append(target(*args)), "cpu")
        out = kept.pop()
        outputs = out if isinstance(out, (tuple, list)) else [out]
        produced = sum(t.untyped_storage().nbytes() for t in outputs if isinstance(t, torch.Tensor))
        return max(0, memory.peak - produced)
