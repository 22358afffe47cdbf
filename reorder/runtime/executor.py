"""Run a captured program inside one planned slab.

One ``torch.empty(slab_bytes, dtype=torch.uint8, device=...)`` holds every
intermediate tensor: each fresh buffer is a view of the slab at its planned
offset, with the dtype, shape and strides the trace recorded. Nodes run in the
planned order; an aten op that has an ``out=`` overload writes straight into
its views, any other op computes a temporary that is copied into them (and
freed at once). Views and in-place ops act on slab tensors, so they alias
the slab like they aliased their inputs in eager mode. Results are cloned out
of the slab (``copy_outputs=True``, the default), because the next call
reuses it.

``verify=True`` turns on the :class:`~reorder.runtime.verifier.LifecycleVerifier`.

The program is the forward pass only, run under ``no_grad``: a trace for
training is refused (:func:`refuse_training`).
"""

from __future__ import annotations

import contextlib
import functools
import operator
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch.utils._pytree import tree_map, tree_unflatten

from ..errors import ReorderError
from ..planning import DEFAULT_MAX_SECONDS, DEFAULT_RESTARTS, PlanOptions, SlabPlan, plan_orders
from ..schedulers import reorder_for_peak_memory
from .capture import Captured, capture, check_call
from .meter import AllocationMeter
from .verifier import LifecycleVerifier

__all__ = ["SlabModule", "refuse_training", "slab_module", "out_variant"]


@functools.lru_cache(maxsize=None)
def out_variant(op: torch._ops.OpOverload) -> tuple[Any, tuple[str, ...]] | None:
    """The overload of ``op`` that writes into ``out=`` tensors, and their argument names, if any.

    It is the overload of the same packet whose non-out arguments are
    ``op``'s arguments and which has one out argument per tensor return
    (``aten.max.dim`` -> ``aten.max.dim_max(..., max=, max_values=)``).
    """
    wanted = [(a.name, str(a.type)) for a in op._schema.arguments]
    if not op._schema.returns or any(r.alias_info is not None for r in op._schema.returns):
        return None
    packet = op.overloadpacket
    for name in packet.overloads():
        candidate = getattr(packet, name)
        args = candidate._schema.arguments
        outs = [a.name for a in args if a.is_out]
        rest = [(a.name, str(a.type)) for a in args if not a.is_out]
        if outs and rest == wanted and len(outs) == len(op._schema.returns):
            return candidate, tuple(outs)
    return None


@dataclass
class CallStats:
    """What the last call did outside the slab: bytes of output copies, ops that had no ``out=`` overload.

    (Temporaries are measured independently, by :meth:`SlabModule.measure`.)
    """

    output_bytes: int = 0
    ops_without_out: tuple[str, ...] = ()


class SlabModule:
    """A module's program that runs in one planned slab. Build it with :func:`slab_module`."""

    def __init__(self, module: torch.nn.Module, captured: Captured, plan: SlabPlan, device: torch.device,
                 order_method: str, copy_outputs: bool = True, verify: bool = False):
        self.module = module
        self.captured = captured
        self.plan = plan
        self.order_method = order_method
        self.device = torch.device(device)
        self.copy_outputs = copy_outputs
        self.verify = verify
        self.slab = torch.empty(plan.slab_bytes, dtype=torch.uint8, device=self.device)
        self.last_call = CallStats()
        graph = captured.graph
        self._order = [graph.node_id(name) for name in plan.order]
        self._fx_nodes = {n.name: n for n in captured.gm.graph.nodes}
        self._placeholders = [n for n in captured.gm.graph.nodes if n.op == "placeholder"]
        self._output = next(n for n in captured.gm.graph.nodes if n.op == "output")
        self._views = {name: self._view(name) for name in plan.names}
        self._meter: AllocationMeter | None = None

    def _view(self, name: str) -> torch.Tensor:
        meta = self.captured.fresh[name]
        offset = self.plan.offset_of(name)
        typed = self.slab[offset:offset + meta.nbytes].view(meta.dtype)
        # as_strided's offset counts from the start of the slab's storage, not of this slice.
        return typed.as_strided(meta.shape, meta.stride, typed.storage_offset() + meta.storage_offset)

    def _target(self, slot: str | None) -> torch.Tensor | None:
        """Where a fresh output goes: its slab view, or an empty tensor for a zero-byte one."""
        if slot is None or slot not in self.captured.fresh:
            return None
        if slot in self._views:
            return self._views[slot]
        meta = self.captured.fresh[slot]
        return torch.empty_strided(meta.shape, meta.stride, dtype=meta.dtype, device=self.device)

    def measure(self, *inputs: torch.Tensor) -> dict:
        """Run once under an :class:`AllocationMeter` and report what the call allocated besides the slab.

        Output copies are made after the metered region (eager allocates its
        outputs too); ``temporary_bytes`` are op temporaries copied into the
        slab and dropped at once, ``largest_temporary_bytes`` the most alive at
        one time.
        """
        known = {self.slab.untyped_storage().data_ptr()}
        state = [*self.module.parameters(), *self.module.buffers(), *inputs]
        known |= {t.untyped_storage().data_ptr() for t in state}
        meter = AllocationMeter(known=known)
        self._meter = meter
        try:
            self(*inputs)
        finally:
            self._meter = None
        return {
            "slab_bytes": self.plan.slab_bytes,
            "lower_bound": self.plan.lower_bound,
            "temporary_bytes": meter.total_bytes,
            "largest_temporary_bytes": meter.largest_bytes,
            "temporaries": [(a.op, a.nbytes) for a in meter.allocations],
            "output_copy_bytes": self.last_call.output_bytes,
        }

    def __call__(self, *inputs: torch.Tensor):
        cap = self.captured
        if len(inputs) != cap.num_inputs:
            raise ReorderError(f"{cap.graph.name}: expected {cap.num_inputs} inputs, got {len(inputs)}")
        state = {**dict(self.module.named_parameters()), **dict(self.module.named_buffers())}
        missing = [k for k in cap.state_keys if k not in state]
        if missing:
            raise ReorderError(f"{cap.graph.name}: the module no longer has {missing[0]!r}; trace it again")
        values = [state[k] for k in cap.state_keys] + list(inputs)
        check_call(cap, values)
        env: dict[str, Any] = {p.name: v for p, v in zip(self._placeholders, values)}
        stats = CallStats()
        no_out: list[str] = []
        verifier = LifecycleVerifier(self.plan, self.slab) if self.verify else None
        graph = cap.graph
        meter = self._meter
        with torch.no_grad(), (meter if meter is not None else contextlib.nullcontext()):
            for step, v in enumerate(self._order):
                node = self._fx_nodes[graph.node_names[v]]
                if verifier is not None:
                    verifier.before(step, graph.node_names[v], [graph.buffer_names[b] for b in graph.declared_reads[v]])
                env[node.name] = self._run(node, env, no_out)
                if verifier is not None:
                    verifier.after(step)
            flat = [env[a.name] if isinstance(a, torch.fx.Node) else a for a in self._output.args[0]]
        if self.copy_outputs:
            flat = [t.clone() if isinstance(t, torch.Tensor) else t for t in flat]
            stats.output_bytes = sum(t.untyped_storage().nbytes() for t in flat if isinstance(t, torch.Tensor))
        result = tree_unflatten(flat, cap.output_spec)
        stats.ops_without_out = tuple(dict.fromkeys(no_out))
        self.last_call = stats
        return result

    def _run(self, node: torch.fx.Node, env: dict, no_out: list[str]):
        args = tree_map(lambda a: env[a.name] if isinstance(a, torch.fx.Node) else a, node.args)
        kwargs = tree_map(lambda a: env[a.name] if isinstance(a, torch.fx.Node) else a, node.kwargs)
        if node.target is operator.getitem:
            return args[0][args[1]]
        slots = self.captured.outputs_of[node.name]
        targets = [self._target(s) for s in slots]
        if not any(t is not None for t in targets):
            return node.target(*args, **kwargs)  # views, in-place ops, empty results
        variant = out_variant(node.target)
        if variant is not None and all(t is not None for t in targets):
            op, names = variant
            result = op(*args, **kwargs, **dict(zip(names, targets)))
            return tuple(targets) if isinstance(result, (tuple, list)) else targets[0]
        no_out.append(str(node.target))
        result = node.target(*args, **kwargs)
        produced = list(result) if isinstance(result, (tuple, list)) else [result]
        for k, target in enumerate(targets):
            if target is not None:
                target.copy_(produced[k])
                produced[k] = target  # the temporary is dropped here
        return tuple(produced) if len(targets) > 1 or isinstance(node.meta.get("val"), (tuple, list)) else produced[0]


def refuse_training(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor]) -> None:
    """Raise :class:`ReorderError` when the call is a training step: the slab program has no backward.

    A trace is taken for training when grad mode is on and an input requires
    grad, or the module is in training mode with a parameter that requires
    grad. (An eval-mode module with grad mode on is traced for inference: its
    results carry no ``grad_fn``, as under ``torch.no_grad()``.) The slab program runs under ``no_grad``
    (its intermediates are views of one reused slab), so its results would
    have no ``grad_fn`` and ``backward()`` would fail far from the cause.
    """
    if not torch.is_grad_enabled():
        return
    reason = next((f"input #{k} requires grad" for k, x in enumerate(example_inputs)
                   if isinstance(x, torch.Tensor) and x.requires_grad), None)
    if reason is None and module.training:
        reason = next((f"{type(module).__name__} is in training mode and its parameter {name!r} requires grad"
                       for name, p in module.named_parameters() if p.requires_grad), None)
    if reason is not None:
        raise ReorderError(
            f"slab_module runs the forward program only (no backward), but {reason}; for inference call "
            f"module.eval() or trace under torch.no_grad(); to train in a slab, compile the step under "
            f"reorder.inductor.use(slab=True)"
        )


def slab_module(
    module: torch.nn.Module,
    *example_inputs: torch.Tensor,
    device: torch.device | str | None = None,
    methods: Sequence[str] | None = None,
    strategy: str = "search",
    alignment: int = 64,
    seconds: float | None = DEFAULT_MAX_SECONDS,
    restarts: int = DEFAULT_RESTARTS,
    copy_outputs: bool = True,
    verify: bool = False,
) -> SlabModule:
    """Trace ``module``, reorder and plan its program, and return it running in one slab.

    The returned callable gives the module's results; its ``plan``
    (:class:`~reorder.planning.SlabPlan`) has ``slab_bytes`` and
    ``lower_bound``. ``device`` defaults to the example inputs' device.
    ``methods`` are the reordering methods (default: all); each method's
    order is planned and the smallest slab kept; ``restarts`` is the slab
    search's effort and ``seconds`` its safety cap (see
    :class:`~reorder.planning.PlanOptions`).

    The program runs forward only: tracing a training step (see
    :func:`refuse_training`) raises :class:`~reorder.errors.ReorderError`;
    ``reorder.inductor.use(slab=True)`` plans the slab of a compiled
    training step, forward and backward.
    """
    refuse_training(module, example_inputs)
    if device is None:
        device = example_inputs[0].device if example_inputs else torch.device("cpu")
    captured = capture(module, *example_inputs)
    result = reorder_for_peak_memory(captured.graph, methods)
    options = PlanOptions(strategy=strategy, alignment=alignment, include_inputs=False, restarts=restarts,
                          max_seconds=seconds)
    method, plan = plan_orders(captured.graph, result.orders, options)
    return SlabModule(module, captured, plan, torch.device(device), method, copy_outputs, verify)
