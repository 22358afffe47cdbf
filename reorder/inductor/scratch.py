"""What an extern kernel allocates and frees while it runs (its scratch), measured once by running it.

Inductor's model of a program counts buffers: what each kernel writes and
reads. An extern kernel may also allocate memory for itself and free it
before it returns, and on a training step that can decide the real peak.
On CPU, oneDNN's convolutions reorder their operands into blocked layouts:
a backward convolution on plain (NCHW) tensors allocates about its input
and its output gradient again, and a depthwise backward convolution on
channels-last tensors with a 5x5 or 7x7 kernel allocates about
``channels x kernel area x 1 KB`` for its weight gradient (14.8 MB for a
576-channel 5x5 convolution whose tensors hold 73 KB). The CPU's
flash attention (``_scaled_dot_product_flash_attention_for_cpu`` and its
backward) allocates blocks of the attention matrix for each thread (65,664 B
in the backward at ALBERT's benchmark shapes on two threads), so its figure
follows ``torch.get_num_threads()``. A matrix product in bfloat16 or float16
(``mm``, ``addmm``, ``bmm``, ``baddbmm``: what ``torch.autocast`` makes of a
linear layer) runs through oneDNN, which packs its operands into blocked
buffers from the same allocator (370,304 B for a 512x256 by 256x682 bfloat16
``mm``); in float32 the BLAS packs in memory of its own, and the allocator
sees nothing, so only reduced-precision products are run. Nothing models
this; the kernel's own allocations show it, so this module measures them.

:func:`scratch_bytes` runs the node's operator once on tensors of its
shapes and dtype, on its device, in the layout its program will hand it,
and returns the peak it allocated above its start less its outputs' bytes
(:func:`reorder.measure.measure`). Inductor's layout optimisation turns
channels-last on for a program that runs a convolution
(``GraphLowering.decide_layout_opt``): there every 4-D operand is
channels-last. A program without it (a backward that recomputes no
convolution) receives the forward's values channels-last all the same, and
Inductor's lowering then copies a convolution's operands into the stride
orders of its outputs (:func:`_as_lowered`): a depthwise backward asks for
activations laid out N, H, C, W, which oneDNN reorders again. Those copies
are buffers of the program (:func:`lowered_copies` names them), made only of
operands in a fixed layout (the program's inputs, extern kernels' outputs):
pointwise code of the same program is laid out as the kernel asks. The figure
is a property of the machine's kernels, not of its load: the same node gives
the same bytes on every run. The tensors are filled with ones (the global random
stream is left as it was) and nothing is kept. Results are cached per
signature, so a network's repeated blocks are run once.

Only :data:`PROBED` operators on CPU tensors are run; a probe that cannot
run (a profiler is already recording, a tensor larger than
:data:`PROBE_LIMIT_BYTES`, the operator fails) counts 0 bytes, Inductor's own
assumption. CUDA kernels are not probed: measuring them would reset the
caller's CUDA peak statistics, and cuDNN's workspaces follow other rules.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Container
from typing import Any

from .fx_values import nbytes, size_hint
from .rewrites import applies

__all__ = ["PROBE_LIMIT_BYTES", "PROBED", "lowered_copies", "probe_of", "scratch_bytes", "scratch_in_layout"]

#: Operators whose scratch is measured (the extern kernels with large workspaces), each with the rewrite of
#: :data:`~reorder.inductor.rewrites.REWRITES` that switches it.
PROBED = {"aten::convolution": "convolution_scratch", "aten::convolution_backward": "convolution_scratch",
          "aten::_scaled_dot_product_flash_attention_for_cpu": "attention_scratch",
          "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "attention_scratch",
          "aten::mm": "product_scratch", "aten::addmm": "product_scratch", "aten::bmm": "product_scratch",
          "aten::baddbmm": "product_scratch"}

#: The rewrite whose operators allocate scratch only in reduced precision: a float32 product counts 0 unrun.
_REDUCED_PRECISION_ONLY = "product_scratch"

#: Largest operands a probe allocates (inputs and outputs together); bigger nodes count 0.
PROBE_LIMIT_BYTES = 1 << 30


def is_probed(node, model_rewrites: tuple[str, ...] | None = None) -> bool:
    """Whether ``node`` calls one of the :data:`PROBED` operators and its rewrite is on under ``model_rewrites``
    (``HookOptions.model_rewrites``; None: all); a matrix product only in bfloat16 or float16."""
    schema = getattr(getattr(node.target, "_schema", None), "name", None)
    if node.op != "call_function" or schema not in PROBED or not applies(PROBED[schema], model_rewrites):
        return False
    return PROBED[schema] != _REDUCED_PRECISION_ONLY or _in_reduced_precision(node)


def _in_reduced_precision(node) -> bool:
    """Whether ``node``'s value is a tensor of a 16-bit floating dtype (a product's operands share its dtype)."""
    import torch

    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype in (torch.bfloat16, torch.float16)


def scratch_bytes(node, channels_last: bool, channels_last_values: Container = frozenset(),
                  model_rewrites: tuple[str, ...] | None = None) -> int:
    """Bytes ``node``'s operator allocates and frees while it runs, with its operands laid out as Inductor hands
    them to it in the given layout (see the module docstring); 0 for an operator not probed or a probe that cannot
    run (a failed probe is not cached: a later compile tries again). The copies the lowering makes to get there
    are buffers of the program, not scratch (:func:`lowered_copies`).

    ``channels_last_values``: in a program without layout optimisation, the operands (fx nodes) that arrive
    channels-last all the same: values a layout-optimised forward computed, or that the program derives from them
    (the joint graph's strides say contiguous; the runtime's do not)."""
    if not is_probed(node, model_rewrites):
        return 0
    try:  # under a running profiler ``measure`` refuses: counted 0, not cached
        signature = _signature(node, channels_last, channels_last_values)
        if signature is None:
            return 0
        if not channels_last:
            signature, _ = _as_lowered(node.target, signature)
        return _measured_now(node.target, signature)
    except Exception:  # noqa: BLE001 - an unknown scratch counts 0, as Inductor counts it
        return 0


def lowered_copies(node, channels_last_values: Container = frozenset(),
                   model_rewrites: tuple[str, ...] | None = None) -> list[tuple[Any, int]]:
    """The operands (fx nodes) of probed ``node`` that Inductor's lowering requires in another stride order in a
    program without layout optimisation, each with the bytes of its copy (:func:`_as_lowered`); ``[]`` for a node
    not probed or one whose operands cannot be read. Whether the copy is made depends on the program: an operand
    whose layout is still free (pointwise code of the same program) is laid out so instead."""
    if not is_probed(node, model_rewrites):
        return []
    try:
        signature = _signature(node, False, channels_last_values)
        if signature is None:
            return []
        _, copied = _as_lowered(node.target, signature)
    except Exception:  # noqa: BLE001 - operands we cannot read: no copy, as without the probe
        return []
    return [(node.args[i], math.prod(signature[i][1]) * signature[i][2].itemsize) for i in copied]


def probe_of(node, model_rewrites: tuple[str, ...] | None = None) -> tuple | None:
    """``(operator, arguments)`` of a probed fx ``node`` as hashable data (its tensors in the joint graph's
    strides), for :func:`scratch_in_layout` once the compiled kernel's layouts are known; None for a node not
    probed or one that cannot be."""
    if not is_probed(node, model_rewrites):
        return None
    signature = _signature(node, channels_last=False)
    return None if signature is None else (node.target, signature)


def scratch_in_layout(probe: tuple, strides: list[tuple[int, ...]], shapes: list[tuple[int, ...]]) -> int | None:
    """What the kernel of ``probe`` (:func:`probe_of`) allocates and frees while it runs, with its tensor operands
    laid out as the compiled code hands them over (``strides``, in argument order, each of the shape in
    ``shapes``): the layouts are read from the kernel Inductor generated, so no copy of ours is assumed. None
    where the operands do not match the probe's or the probe cannot run (a failed probe is not cached)."""
    target, signature = probe
    tensors = [i for i, arg in enumerate(signature) if _is_tensor(arg)]
    if len(tensors) != len(strides) or any(signature[i][1] != shape for i, shape in zip(tensors, shapes)):
        return None
    args = list(signature)
    for i, laid_out in zip(tensors, strides):
        args[i] = ("tensor", args[i][1], args[i][2], tuple(laid_out))
    try:
        return _measured_now(target, tuple(args))
    except Exception:  # noqa: BLE001 - an unknown scratch is the probe's estimate, never a failed compile
        return None


def _is_tensor(arg: Any) -> bool:
    """Whether a signature's argument is a tensor, ``("tensor", shape, dtype, strides)``."""
    return isinstance(arg, tuple) and arg[:1] == ("tensor",)


class _NotProbed(Exception):
    """A node whose scratch is not measured (a tensor not on CPU, an argument we cannot rebuild)."""


def _signature(node, channels_last: bool, channels_last_values: Container = frozenset()) -> tuple | None:
    """The probe's arguments as hashable data: tensors as ``("tensor", shape, dtype, strides)``, symbolic sizes at
    their hints; None when a tensor is not on CPU, an argument is symbolic but not a size, or the operands exceed
    :data:`PROBE_LIMIT_BYTES`. Under layout optimisation every 4-D operand is channels-last; without it the 4-D
    ``channels_last_values`` are, and the others have the joint graph's strides, before :func:`_as_lowered`."""
    import torch
    from torch._prims_common import make_channels_last_strides_for

    total = 0

    def encode(arg: Any) -> Any:
        nonlocal total
        if isinstance(arg, torch.fx.Node):
            val = arg.meta.get("val")
            if isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool):
                return size_hint(val)
            if not isinstance(val, torch.Tensor):
                raise _NotProbed
            if val.device.type != "cpu":
                raise _NotProbed
            total += nbytes(val)
            shape = tuple(size_hint(s) for s in val.shape)
            if val.dim() == 4 and (channels_last or arg in channels_last_values):
                return ("tensor", shape, val.dtype, tuple(make_channels_last_strides_for(shape)))
            return ("tensor", shape, val.dtype, tuple(size_hint(s) for s in val.stride()))
        if isinstance(arg, (list, tuple)):
            return tuple(encode(a) for a in arg)
        if isinstance(arg, torch.SymInt):
            return size_hint(arg)
        if isinstance(arg, (torch.SymFloat, torch.SymBool)):
            raise _NotProbed
        return arg

    try:
        args = tuple(encode(a) for a in node.args)
    except _NotProbed:
        return None
    out = node.meta.get("val")
    outputs = out if isinstance(out, (tuple, list)) else [out]
    total += sum(nbytes(t) for t in outputs)
    return None if total > PROBE_LIMIT_BYTES else args


@functools.lru_cache(maxsize=4096)
def _as_lowered(target, signature: tuple) -> tuple[tuple, tuple[int, ...]]:
    """The operands as Inductor's lowering hands them to the kernel in a program without layout optimisation, and
    the positions of those it copies to get there (an operand in a fixed layout; see :func:`lowered_copies`).

    ``torch/_inductor/kernel/conv.py`` requires a convolution's input and weight in the stride order of its output,
    and a backward convolution's input and output gradient in the order of its weight gradient, then its output
    gradient and weight in the order of its input gradient; an operand in another order is copied into a new
    buffer. Those orders come from the kernels' fake implementations, so a depthwise weight gradient (one input
    channel: strides like ``(9, 1, 3, 1)``) asks for activations laid out N, H, C, W. An operand whose layout is
    still flexible (pointwise code of the same program) is laid out so rather than copied: which operands are is
    the program's to say (:func:`lowered_copies`)."""
    import torch
    from torch._inductor import ir
    from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily

    args = list(signature)
    copied: set[int] = set()  # operands copied at least once: each copy but the last is fused into the next

    def fake(arg: Any) -> Any:
        if _is_tensor(arg):
            _, shape, dtype, strides = arg
            return torch.empty_strided(shape, strides, dtype=dtype, device="cpu")
        return list(arg) if isinstance(arg, tuple) else arg

    def order_of(*call: Any, output: int) -> list[int]:
        out = target(*[fake(a) for a in call])
        return list(ir.get_stride_order((out[output] if isinstance(out, (tuple, list)) else out).stride()))

    def require(index: int, order: list[int]) -> None:
        _, shape, dtype, strides = args[index]
        if not _follows_order(shape, strides, order):
            laid_out = tuple(int(s) for s in ir.FlexibleLayout.stride_ordered(shape, order))
            args[index] = ("tensor", shape, dtype, laid_out)
            copied.add(index)

    with unset_fake_temporarily(), FakeTensorMode():
        if target is torch.ops.aten.convolution_backward.default:
            grad_out, inp, weight, _bias_sizes, *rest, output_mask = args
            weight_order = order_of(grad_out, inp, weight, None, *rest, (False, True, False), output=1)
            if output_mask[1]:
                require(1, weight_order)
                require(0, weight_order)
            if output_mask[0]:
                input_order = order_of(args[0], args[1], args[2], None, *rest, (True, False, False), output=0)
                require(0, input_order)
                require(2, input_order)
        elif target is torch.ops.aten.convolution.default:
            output_order = order_of(args[0], args[1], None, *args[3:], output=0)
            require(0, output_order)
            require(1, output_order)
    return tuple(args), tuple(sorted(copied))


def _follows_order(shape: tuple[int, ...], strides: tuple[int, ...], order: list[int]) -> bool:
    """Whether ``strides`` rise along the stride ``order`` (dimensions of size 1 aside): Inductor's
    ``Layout.is_stride_ordered``, the test that spares an operand its copy."""
    kept = [i for i, size in enumerate(shape) if size != 1]
    ranks = sorted(order[i] for i in kept)
    by_rank = [0] * len(kept)
    for i in kept:
        by_rank[ranks.index(order[i])] = strides[i]
    return all(left <= right for left, right in zip(by_rank, by_rank[1:]))


def _measured_now(target, signature: tuple) -> int:
    """:func:`_measured` under the running thread count: kernels that allocate per-thread blocks (the CPU's flash
    attention) allocate more on more threads, so a figure measured on one count never answers for another."""
    import torch

    return _measured(target, signature, torch.get_num_threads())


@functools.lru_cache(maxsize=4096)
def _measured(target, signature: tuple, threads: int) -> int:
    """Run ``target`` once on CPU tensors made from ``signature`` and return its peak above its start less its
    outputs' bytes (an error propagates, so that a failed probe is not cached). ``threads``, the thread count it
    runs under, is part of the cache's key (:func:`_measured_now`)."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from ..measure import measure

    def make(arg: Any) -> Any:
        if _is_tensor(arg):
            _, shape, dtype, strides = arg
            extent = 1 + sum((size - 1) * stride for size, stride in zip(shape, strides)) if all(shape) else 0
            base = torch.ones(extent, dtype=dtype, device="cpu")  # never the caller's default device
            return base.as_strided(shape, strides)
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
