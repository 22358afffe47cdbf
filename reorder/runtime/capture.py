"""Capture an ``nn.Module`` as aten operations and build its :class:`~reorder.graph.Graph`.

``make_fx`` traces ``torch.func.functional_call(module, state, args)`` with
fake tensors, so shapes, dtypes, strides and storage sizes come without real
memory, and parameters and buffers become inputs bound at call time. Each
aten call is one graph node:

* an output the op's schema marks as an alias of an argument (``Tensor(a)``:
  views such as ``view``, ``t``, ``split``) is a *view* of that argument's
  buffer; one written in place (``Tensor(a!)``: ``relu_``, ``add_``) is a
  *mutation* rename of it; both cost nothing and share its storage;
* every other tensor output is a fresh buffer of its storage's bytes;
* ``getitem`` on a tuple result is a view of the element.

In-place writes also order the program: a mutating node runs after every
earlier reader of the storage it writes, and every later reader runs after
it (ordering-only edges, as Inductor's WeakDeps). Operations whose order is
observable, random ones (tagged ``nondeterministic_seeded``: dropout,
``rand``, ``bernoulli``...) and those with side effects, are chained in
program order by ordering-only edges, so that every reordering draws the
same random numbers as eager mode under the same seed.

Placeholders (parameters, buffers, user inputs) are non-freeable inputs:
the caller owns them and they stay out of the slab.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.node import has_side_effect
from torch.utils._pytree import tree_flatten

from ..errors import ReorderError
from ..graph import BufferSpec, Graph, InputSpec, NodeSpec, build_graph

__all__ = ["Captured", "TensorMeta", "capture", "check_call", "order_is_observable"]


@dataclass(frozen=True)
class TensorMeta:
    """What the runtime needs to make a view of a fresh output in the slab."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    dtype: torch.dtype
    nbytes: int


@dataclass
class Captured:
    """A traced program: the fx graph, our Graph of it, and per-buffer tensor metadata.

    ``outputs_of[fx_node_name]`` lists the buffer name of each element of the
    node's result, in result order (None where the element is not a tensor); ``fresh`` maps fresh buffers to their metadata;
    ``state_keys`` are the module's parameters and buffers bound to the first
    placeholders, in order, followed by one placeholder per user input;
    ``signature`` has, per placeholder, its label and the tensor it was
    traced with (shape, strides, dtype, device): the slab plan holds only
    for calls that match it.
    """

    gm: torch.fx.GraphModule
    graph: Graph
    fresh: dict[str, TensorMeta]
    outputs_of: dict[str, list[str]]
    state_keys: list[str]
    num_inputs: int
    output_spec: Any = field(default=None)
    signature: tuple[tuple[str, tuple[int, ...], tuple[int, ...], torch.dtype, torch.device], ...] = ()


def _tensor_values(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _meta(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype, t.untyped_storage().nbytes())


def _alias_sources(op: torch._ops.OpOverload, node: torch.fx.Node) -> list[tuple[torch.fx.Node | None, bool]]:
    """For each return of ``op``: (the fx argument it aliases or None, whether it is written in place)."""
    schema = op._schema
    by_set: dict[str, tuple[Any, bool]] = {}
    for k, arg in enumerate(schema.arguments):
        if arg.alias_info is None:
            continue
        if arg.kwarg_only:
            value = node.kwargs.get(arg.name)
        else:
            value = node.args[k] if k < len(node.args) else node.kwargs.get(arg.name)
        for s in arg.alias_info.before_set:
            by_set[s] = (value, arg.alias_info.is_write)
    out = []
    for ret in schema.returns:
        if ret.alias_info is None:
            out.append((None, False))
            continue
        if ret.alias_info.before_set:
            source = next((by_set[s] for s in ret.alias_info.before_set if s in by_set), (None, False))
        else:  # Tensor(a)[]: the set is on the element type; the argument says so by its wildcard after-set
            source = next(iter(by_set.values()), (None, False))
        value, written = source
        out.append((value if isinstance(value, torch.fx.Node) else None, written or ret.alias_info.is_write))
    return out


def order_is_observable(target) -> bool:
    """An op whose runs must keep their program order: it draws random numbers or has side effects."""
    if isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags:
        return True
    return has_side_effect(target)


def capture(module: torch.nn.Module, *example_inputs: torch.Tensor) -> Captured:
    """Trace ``module`` on ``example_inputs`` (fake tensors: no real memory) and build its graph."""
    state = {**dict(module.named_parameters()), **dict(module.named_buffers())}

    output_spec = []

    def program(state, *args):
        flat, spec = tree_flatten(torch.func.functional_call(module, state, args))
        output_spec.append(spec)  # the module's own result structure (named tuples included)
        return flat

    with torch.no_grad():
        gm = make_fx(program, tracing_mode="fake")(state, *example_inputs)

    inputs: list[InputSpec] = []
    nodes: list[NodeSpec] = []
    fresh: dict[str, TensorMeta] = {}
    outputs_of: dict[str, list[str]] = {}
    storage_root: dict[str, str] = {}  # buffer -> the buffer that owns its storage
    readers_since_write: dict[str, list[str]] = {}
    last_writer: dict[str, str] = {}
    graph_outputs: list[str] = []
    last_observable: str | None = None  # the previous random or side-effecting node

    def buffers_in(args) -> list[str]:
        flat, _ = tree_flatten(args)
        names = [b for a in flat if isinstance(a, torch.fx.Node) for b in outputs_of.get(a.name, []) if b]
        return list(dict.fromkeys(names))

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                inputs.append(InputSpec(node.name, val.untyped_storage().nbytes(), freeable=False))
                outputs_of[node.name] = [node.name]
                storage_root[node.name] = node.name
            else:
                outputs_of[node.name] = []
            continue
        if node.op == "output":
            graph_outputs = buffers_in(node.args)
            continue
        if node.op != "call_function":
            raise ReorderError(f"capture: unsupported fx node {node.op} {node.name!r} (target {node.target})")
        val = node.meta.get("val")
        reads = buffers_in((node.args, node.kwargs))
        outs: list[BufferSpec] = []
        if node.target is operator.getitem:
            source, index = node.args
            element = outputs_of[source.name][index] if isinstance(source, torch.fx.Node) else None
            if element is not None and isinstance(val, torch.Tensor):
                outs.append(BufferSpec(node.name, 0, alias_of=element, alias_kind="view"))
                reads = [element]
        elif isinstance(node.target, torch._ops.OpOverload):
            values = val if isinstance(val, (tuple, list)) else [val]
            sources = _alias_sources(node.target, node)
            if len(sources) == 1 and isinstance(val, (tuple, list)):
                sources = sources * len(values)  # Tensor(a)[]: every element aliases the argument
            slots: list[str | None] = []
            for k, value in enumerate(values):
                if not isinstance(value, torch.Tensor):
                    slots.append(None)
                    continue
                name = node.name if len(values) == 1 else f"{node.name}.{k}"
                base, written = sources[k] if k < len(sources) else (None, False)
                if base is not None and base.name in outputs_of and outputs_of[base.name]:
                    outs.append(BufferSpec(name, 0, alias_of=outputs_of[base.name][0],
                                           alias_kind="mutation" if written else "view"))
                else:
                    outs.append(BufferSpec(name, value.untyped_storage().nbytes()))
                    fresh[name] = _meta(value)
                slots.append(name)
        else:
            raise ReorderError(f"capture: {node.name!r} calls {node.target}, which is not an aten operation")

        after: list[str] = []
        written_roots = set()
        for out in outs:
            root = storage_root[out.alias_of] if out.alias_of else out.name
            storage_root[out.name] = root
            if out.alias_kind == "mutation" and out.alias_of:
                written_roots.add(root)
        for r in reads:
            root = storage_root[r]
            if root in last_writer and last_writer[root] != node.name:
                after.append(last_writer[root])
        for root in written_roots:
            after.extend(x for x in readers_since_write.get(root, []) if x != node.name)
            readers_since_write[root] = []
            last_writer[root] = node.name
        for r in reads:
            readers_since_write.setdefault(storage_root[r], []).append(node.name)
        if order_is_observable(node.target):
            if last_observable is not None:
                after.append(last_observable)
            last_observable = node.name
        outputs_of[node.name] = slots if isinstance(node.target, torch._ops.OpOverload) else [o.name for o in outs]
        nodes.append(NodeSpec(node.name, outputs=outs, reads=reads, after=list(dict.fromkeys(after))))

    graph = build_graph(nodes, inputs, graph_outputs, name=type(module).__name__)
    state_keys = list(state)
    labels = [f"parameter or buffer {k!r}" for k in state_keys] + [f"input #{i}" for i in range(len(example_inputs))]
    values = [state[k] for k in state_keys] + list(example_inputs)
    signature = tuple(_signature(label, v) for label, v in zip(labels, values))
    return Captured(gm, graph, fresh, outputs_of, state_keys, len(example_inputs), output_spec[-1], signature)


def _signature(label: str, value) -> tuple:
    if not isinstance(value, torch.Tensor):
        raise ReorderError(f"capture: {label} is a {type(value).__name__}; only tensors can be traced")
    return (label, tuple(value.shape), tuple(value.stride()), value.dtype, value.device)


def check_call(captured: Captured, values: list) -> None:
    """Raise :class:`ReorderError` unless ``values`` (state, then inputs) match what was traced.

    The plan's offsets, sizes and the kernels' strides were fixed for those
    shapes, strides, dtypes and devices; anything else would compute into
    the wrong bytes. Trace again (``slab_module(module, *new_inputs)``) for
    new shapes.
    """
    for (label, shape, stride, dtype, device), value in zip(captured.signature, values):
        if not isinstance(value, torch.Tensor):
            raise ReorderError(f"{captured.graph.name}: {label} must be a tensor, got {type(value).__name__}")
        for what, traced, given in (("shape", shape, tuple(value.shape)), ("strides", stride, tuple(value.stride())),
                                    ("dtype", dtype, value.dtype), ("device", device, value.device)):
            if traced != given:
                raise ReorderError(
                    f"{captured.graph.name}: {label} has {what} {given}, but the program was traced with {traced}; "
                    f"trace again for new inputs: slab_module(module, *inputs)"
                )
