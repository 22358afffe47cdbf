"""AOTAutograd's joint forward-backward fx graph -> our :class:`~reorder.budget.step_graph.StepGraph`, once, at the edge.

Roles come from Inductor's own ``classify_nodes`` (``torch/_functorch/partitioners.py``):
nodes the forward's outputs need, nodes in the tangents' closure, and the
rest, which the backward needs but may run in either graph. What may be
recomputed follows Inductor's rules for its partitioner: never a random op
(its numbers must not change; unless a ``torch.utils.checkpoint`` policy
marks it for recomputation, which Inductor then replays with the saved
random state), a collective, an effectful or impure op, a mutation, a
custom (non-aten) operator or a higher-order op, nor a node a policy marks
``MUST_SAVE`` (Inductor marks collectives, effectful outputs and the sources
of backward mutations so too); a node marked
``MUST_RECOMPUTE``/``PREFER_RECOMPUTE`` may not be saved.

What Inductor will make of the graph, where it changes memory: its op lists
(``get_default_op_list``) say which nodes fuse (pointwise ops and
reductions get no buffer when every reader can take them into its kernel),
graph inputs a convolution reads are copied to channels-last
(:func:`_layout_copies`), a program that runs a convolution is laid out
channels-last (``sets_channels_last``; under torch 2.15 a program that runs a
convolution's backward too), and a backward ``add(mm(a, b), c)``
becomes one ``addmm`` (:func:`_backward_addmm`). Convolutions' scratch, in
either layout, is measured by running them once
(:func:`~reorder.inductor.scratch.scratch_bytes`), and the operands their
lowering copies into another stride order in a program that is not
channels-last are named with the copies' bytes
(:func:`~reorder.inductor.scratch.lowered_copies`). The cost of recomputing a
node is its floating-point operations where torch's flop counter knows the
op (matrix products, convolutions, attention), else one per element it
writes. Sizes are evaluated at their hints.
"""

from __future__ import annotations

import operator
from typing import Any

from ..budget.step_graph import StepGraph, StepNodeSpec, build_step_graph
from .fx_values import nbytes, numel, size_hint
from .rewrites import applies
from .scratch import lowered_copies, scratch_bytes

__all__ = ["draws_nothing", "inputs_not_channels_last", "parameter_gradient_bytes", "recompute_policy", "saved_names",
           "step_graph_from_joint"]

#: Views Inductor lowers as views though their schemas declare no alias.
_VIEW_TARGETS = ("aten::_unsafe_view",)

#: The ops whose call makes a value's code heavy on the CPU, by the names Inductor's lowering calls them (the
#: aten op of each name lowers to it): a pointwise value whose code calls one is stored once two nodes read it
#: (``torch/_inductor/ir.py``: ``StorageBox.should_realize_on_reuse``, the same list in 2.13, 2.14 and 2.15).
HEAVY_OPS = frozenset({"exp", "log", "log10", "log1p", "log2", "sigmoid", "tanh"})


def recompute_policy(node) -> Any:
    """The node's ``torch.utils.checkpoint`` policy (``node.meta["recompute"]``), or None."""
    return node.meta.get("recompute")


def _is_view(node) -> bool:
    import torch

    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target._schema.name in _VIEW_TARGETS:
        return True
    returns = target._schema.returns
    return bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write


def _flops(node) -> int | None:
    """Floating-point operations of ``node`` by torch's flop formulas (None where torch has none for it)."""
    import torch
    from torch.utils import flop_counter

    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return None

    def shape(x: Any) -> Any:
        if isinstance(x, torch.fx.Node):
            x = x.meta.get("val")
        if isinstance(x, torch.Tensor):
            return torch.Size(size_hint(s) for s in x.shape)
        if isinstance(x, (list, tuple)):
            return type(x)(shape(y) for y in x)
        return x

    args, kwargs = shape(list(node.args)), {k: shape(v) for k, v in node.kwargs.items()}
    packet = target.overloadpacket
    if packet in flop_counter.flop_registry:
        return int(flop_counter.flop_registry[packet](*args, out_val=shape(node.meta.get("val")), **kwargs))
    aten = torch.ops.aten
    if packet is aten._scaled_dot_product_flash_attention_for_cpu:
        return int(flop_counter.sdpa_flop_count(args[0], args[1], args[2]))
    if packet is aten._scaled_dot_product_flash_attention_for_cpu_backward:
        return int(flop_counter.sdpa_backward_flop_count(args[0], args[1], args[2], args[3]))
    return None


def _is_heavy(node) -> bool:
    """Whether ``node`` calls an op of :data:`HEAVY_OPS` on the CPU (the rule is Inductor's on the CPU only)."""
    import torch

    val = node.meta.get("val")
    return (isinstance(node.target, torch._ops.OpOverload) and node.target._opname in HEAVY_OPS
            and isinstance(val, torch.Tensor) and val.device.type == "cpu")


def draws_nothing(node) -> bool:
    """Whether ``node`` is an op tagged as seeded (``nondeterministic_seeded``) whose only randomness is a dropout
    it is told not to apply: an attention with ``dropout_p`` 0 (its default) draws nothing, so recomputing it
    gives the same values, as Inductor's partitioner assumes when it recomputes one."""
    import torch

    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or torch.Tag.nondeterministic_seeded not in target.tags:
        return False
    arguments = target._schema.arguments
    names = [a.name for a in arguments]
    if "dropout_p" not in names:
        return False
    at = names.index("dropout_p")
    if at < len(node.args):
        value = node.args[at]
    else:
        value = node.kwargs.get("dropout_p", arguments[at].default_value)
    return isinstance(value, (int, float)) and value == 0


def _recomputable(node, op_types) -> bool:
    import torch
    from torch._functorch._aot_autograd.utils import is_with_effects
    from torch._functorch.partitioners import _must_be_in_forward, is_non_builtin_to_include
    from torch.utils.checkpoint import CheckpointPolicy

    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    if isinstance(node.meta.get("val"), (torch.SymFloat, torch.SymBool)):
        return True  # arithmetic on sizes (a batch norm's 1 / (n - 1)): never saved, so recomputed, as Inductor does
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target.namespace not in ("aten", "prims"):
        return False  # collectives, higher-order, custom or Python ops: effects we cannot replay
    seeded = torch.Tag.nondeterministic_seeded in target.tags
    drawless = draws_nothing(node)  # fx calls it impure for its tag alone
    random = op_types.is_random(node) or (seeded and not drawless)
    replayed = recompute_policy(node) in (CheckpointPolicy.MUST_RECOMPUTE, CheckpointPolicy.PREFER_RECOMPUTE)
    if random:  # fx calls random ops impure too: their own rule
        return replayed and not target._schema.is_mutable
    return not (is_with_effects(node) or (node.is_impure() and not drawless) or target._schema.is_mutable
                or is_non_builtin_to_include(node) or _must_be_in_forward(node)
                or (recompute_policy(node) == CheckpointPolicy.MUST_SAVE and not _is_view(node)))


def step_graph_from_joint(joint_module, num_fwd_outputs: int, static_lifetime_input_indices=None,
                          name: str = "step", inputs_are_activations: bool = False,
                          model_rewrites: tuple[str, ...] | None = None) -> StepGraph:
    """Our :class:`StepGraph` of AOTAutograd's joint graph (as Inductor's partitioner sees it, after its dead code
    elimination and common subexpressions).

    ``inputs_are_activations``: the graph's inputs that are not parameters or buffers (not in
    ``static_lifetime_input_indices``) come from an earlier compiled region of the same step, so the step owns
    them; otherwise they are the caller's batch, live before the step. ``model_rewrites``: the Inductor rewrites
    the model mirrors (:mod:`~reorder.inductor.rewrites`; None: all), each applied here in their list's order.
    """
    import torch
    from torch._functorch.partitioners import (_extract_fwd_bwd_outputs, _is_bwd_seed_offset, _is_primal,
                                               _is_tangent, classify_nodes, get_default_op_list)
    from torch.utils.checkpoint import CheckpointPolicy


    info = classify_nodes(joint_module, list(static_lifetime_input_indices or ()), num_fwd_outputs)
    forward_outputs, backward_outputs, _, _ = _extract_fwd_bwd_outputs(joint_module, num_fwd_outputs=num_fwd_outputs)
    op_types = get_default_op_list()
    channels_last = applies("layout_optimisation", model_rewrites) and _layout_optimised(joint_module)
    owned = _layout_copies(joint_module) if channels_last and applies("layout_copies", model_rewrites) else set()
    addmm = _backward_addmm(joint_module, info) if applies("backward_addmm", model_rewrites) else {}
    # a layout-optimised forward hands its values (and what a plain backward derives from them) over channels-last
    from_forward = frozenset()
    if channels_last:
        from_forward = frozenset(n for n in joint_module.graph.nodes
                                 if n.op == "call_function" and n not in info.tangents_closure)
    if inputs_are_activations:
        static = set(static_lifetime_input_indices or ())
        primals = [n for n in joint_module.graph.nodes if n.op == "placeholder" and _is_primal(n)]
        owned |= {n for k, n in enumerate(primals) if k not in static}
    heavy_on_reuse = applies("heavy_on_reuse", model_rewrites)
    # the nodes whose program Inductor lays out channels-last (torch 2.15 counts a convolution's backward too)
    laid_out_by = {torch.ops.aten.convolution.default}
    if applies("backward_layout_optimisation", model_rewrites):
        laid_out_by.add(torch.ops.aten.convolution_backward.default)
    specs = []
    for node in joint_module.graph.nodes:
        if node.op == "output" or node in addmm.values():
            continue
        val = node.meta.get("val")
        product = addmm.get(node)
        args = [a.name for a in ((*product.all_input_nodes, *node.all_input_nodes) if product else node.all_input_nodes)
                if a is not product]
        if node.op == "placeholder":
            tangent = _is_tangent(node) or _is_bwd_seed_offset(node) or not _is_primal(node)
            specs.append(StepNodeSpec(node.name, "tangent" if tangent else "primal", bytes=nbytes(val),
                                      owned=node in owned, size_symbol=isinstance(val, torch.SymInt)))
            continue
        if node.op != "call_function":  # get_attr: constants the module holds
            specs.append(StepNodeSpec(node.name, "primal"))
            continue
        if node in info.tangents_closure:
            role = "backward"
        elif info.is_required_fw(node):
            role = "forward"
        else:
            role = "either"
        parent = node.args[0] if node.target is operator.getitem else None
        view = _is_view(node) or (parent is not None and _is_view(parent))
        tuple_valued = isinstance(val, (tuple, list))
        pointwise = (op_types.is_fusible(node) and not view and parent is None and isinstance(val, torch.Tensor)
                     and product is None)
        flops = _flops(product) + numel(val) if product is not None else _flops(node)
        policy = recompute_policy(node)
        scratch = scratch_bytes(node, channels_last=False, channels_last_values=from_forward,
                                model_rewrites=model_rewrites)
        specs.append(StepNodeSpec(
            node.name, role, args,
            bytes=0 if view or tuple_valued else nbytes(val),
            view_of=(parent.name if parent is not None else node.all_input_nodes[0].name)
            if view and node.all_input_nodes else None,
            element_of=parent.name if parent is not None and not view else None,
            pointwise=pointwise,
            fusible=(op_types.is_fusible(node) or node.target is operator.getitem) and product is None,
            heavy=heavy_on_reuse and _is_heavy(node),
            reduction=isinstance(node.target, torch._ops.OpOverload) and torch.Tag.reduction in node.target.tags,
            recomputable=_recomputable(node, op_types),
            saveable=not tuple_valued and not isinstance(val, torch.SymFloat) and policy != CheckpointPolicy.MUST_RECOMPUTE,
            cost=0 if view or parent is not None else (flops if flops is not None else numel(val)),
            available_to_backward=info.is_required_bw(node) and node not in info.tangents_closure,
            size_symbol=isinstance(val, torch.SymInt),
            scratch=scratch,
            scratch_channels_last=scratch_bytes(node, channels_last=True, model_rewrites=model_rewrites)
            if channels_last else scratch,
            sets_channels_last=channels_last and node.target in laid_out_by,
            copied=[(a.name, b) for a, b in lowered_copies(node, from_forward, model_rewrites)
                    if isinstance(a, torch.fx.Node)],
        ))
    return build_step_graph(specs, [o.name for o in forward_outputs if isinstance(o, torch.fx.Node)],
                            [o.name for o in backward_outputs if isinstance(o, torch.fx.Node)], name=name,
                            realize_reads=_realize_reads_threshold() if applies("reads_on_reuse", model_rewrites)
                            else None)


def _realize_reads_threshold() -> int | None:
    """Inductor's ``config.realize_reads_threshold`` as this process has it: a pointwise value whose code reads more
    buffers is stored once two nodes read it (``StorageBox.should_realize_on_reuse``); None where it is not a whole
    number (a torch without it)."""
    from torch._inductor import config

    threshold = getattr(config, "realize_reads_threshold", None)
    return threshold if isinstance(threshold, int) and not isinstance(threshold, bool) and threshold >= 0 else None


def parameter_gradient_bytes(joint_module, num_fwd_outputs: int, static_lifetime_input_indices=None) -> int:
    """Bytes of the gradients the joint graph's backward outputs for its parameters (the primals in
    ``static_lifetime_input_indices``), at the size hints: they outlive the backward, so a region run several
    times a step runs each earlier call's backward beside the later calls' (an activation's gradient is the
    next backward's input instead, and goes)."""
    from torch._functorch.partitioners import _extract_fwd_bwd_outputs

    _, gradients, _, _ = _extract_fwd_bwd_outputs(joint_module, num_fwd_outputs=num_fwd_outputs)
    static = set(static_lifetime_input_indices or ())
    return sum(nbytes(node.meta.get("val")) for k, node in enumerate(gradients)
               if k in static and node is not None and hasattr(node, "meta"))


def _layout_optimised(joint_module) -> bool:
    """Whether Inductor lays out a program of this step that runs a convolution in channels-last: its layout
    optimisation (``GraphLowering.decide_layout_opt``) applies to the joint graph, as it does on CPU whenever
    oneDNN is available and the graph has a convolution. A graph without convolutions is taken as plain (with
    ``config.force_layout_optimization`` Inductor would lay it out channels-last all the same; scratch is only
    measured for convolutions)."""
    import torch
    from torch._inductor.graph import GraphLowering

    return (any(n.target is torch.ops.aten.convolution.default for n in joint_module.graph.nodes)
            and GraphLowering.decide_layout_opt(joint_module, is_inference=False))


def _layout_copies(joint_module) -> set:
    """Graph inputs Inductor copies into channels-last before a convolution reads them (as input or weight), in a
    step whose layout is optimised (:func:`_layout_optimised`)."""
    import torch

    convolutions = [n for n in joint_module.graph.nodes if n.target is torch.ops.aten.convolution.default]
    return {arg for conv in convolutions for arg in conv.args[:2]
            if isinstance(arg, torch.fx.Node) and _input_not_channels_last(arg)}


def inputs_not_channels_last(joint_module) -> frozenset[str]:
    """The joint graph's four-dimensional tensor inputs that are not laid out channels-last (the batch of an image
    model, convolution weights): with Inductor's layout optimisation, one saved for the backward reaches it as a
    channels-last copy its forward made (see :func:`~reorder.inductor.compiled_budget.handed_channels_last`)."""
    return frozenset(n.name for n in joint_module.graph.nodes if _input_not_channels_last(n))


def _input_not_channels_last(node) -> bool:
    """Whether ``node`` is a graph input holding a four-dimensional tensor not laid out channels-last."""
    import torch

    val = node.meta.get("val")
    return (node.op == "placeholder" and isinstance(val, torch.Tensor) and val.dim() == 4
            and not val.is_contiguous(memory_format=torch.channels_last))


def _backward_addmm(joint_module, info) -> dict:
    """Backward additions Inductor turns into one ``addmm`` with the matrix product they add (its post-grad
    pattern ``add(mm(a, b), c)``, ``fx_passes/post_grad.py``): addition -> product. The product then runs where
    the addition runs, so what it reads lives until then (a tied weight's gradient, added to the embedding's at
    the end of the backward, keeps its whole input alive that long). Of two products, the one folded is the
    addition's second argument: Inductor registers the pattern ``add(c, mm(a, b))`` first, so it matches
    first; the other product runs where it stands (a shared layer's weight gradient, one product per use)."""
    import torch
    from torch._prims_common import is_expandable_to

    aten = torch.ops.aten
    pairs = {}
    for node in joint_module.graph.nodes:
        if node.target is not aten.add.Tensor or node not in info.tangents_closure or node.kwargs:
            continue
        for product, other in ((node.args[1], node.args[0]), (node.args[0], node.args[1])):
            if (isinstance(product, torch.fx.Node) and product.target is aten.mm.default and len(product.users) == 1
                    and product in info.tangents_closure and isinstance(other, torch.fx.Node)
                    and isinstance(other.meta.get("val"), torch.Tensor)
                    and other.meta["val"].dtype == product.meta["val"].dtype
                    and is_expandable_to(other.meta["val"].shape, product.meta["val"].shape)):
                pairs[node] = product
                break
    return pairs


def saved_names(forward_module, num_fwd_outputs: int, joint_module=None) -> list[str]:
    """The names of the tensors a partitioned forward saves for the backward (its outputs after the first
    ``num_fwd_outputs``; symbolic sizes left out). With ``joint_module``, only the joint graph's own nodes: a
    node the partitioner added (the random-number state ``run_and_save_rng_state`` saves for a checkpointed
    region) may carry the name of another joint node (``getitem_4``), and is left out."""
    import torch

    joint = {} if joint_module is None else {n.name: n for n in joint_module.graph.nodes}
    output = next(iter(forward_module.graph.find_nodes(op="output")))
    values = output.args[0][num_fwd_outputs:]
    return [v.name for v in values if isinstance(v, torch.fx.Node) and isinstance(v.meta.get("val"), torch.Tensor)
            and (joint_module is None or _same_node(v, joint.get(v.name)))]


def _same_node(made, joint) -> bool:
    """Whether ``made``, a node of a graph the partitioner made, is the joint graph's node ``joint`` (same op
    and target, its inputs of the same names), not another node under the same name."""
    return (joint is not None and made.op == joint.op and made.target == joint.target
            and [a.name for a in made.all_input_nodes] == [a.name for a in joint.all_input_nodes])
