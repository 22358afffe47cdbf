"""Extern kernels' scratch, measured by running them: what the step's estimate adds while a convolution runs."""

import pytest
import torch
from torch import nn
from torch._functorch.aot_autograd import aot_function, make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition

from reorder.inductor import scratch
from reorder.inductor.joint_adapter import step_graph_from_joint
from reorder.inductor.rewrites import applies
from reorder.inductor.scratch import scratch_bytes
from reorder.measure import measure
from test_budget_inductor import run, step_of

aten = torch.ops.aten


def joint_of_a_cnn():
    """AOTAutograd's joint graph of a depthwise and a pointwise convolution's training step, and its step graph."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 16, 5, padding=2, groups=16), nn.ReLU(), nn.Conv2d(16, 8, 1))
    captured = []

    def capture(gm, joint_inputs, **kwargs):
        captured.append((gm, step_graph_from_joint(gm, kwargs["num_fwd_outputs"],
                                                   kwargs["static_lifetime_input_indices"])))
        return min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)

    run(step_of(model, capture), model, torch.randn(4, 16, 24, 24))
    return captured[0]


def encoded(t: torch.Tensor) -> tuple:
    return ("tensor", tuple(t.shape), t.dtype, t.stride())


def direct_scratch(node, channels_last: bool, forward_values=frozenset()) -> int:
    """The node's operator run by hand on ones: its peak above the start less its outputs. Channels-last: every
    4-D operand channels-last. Plain: the ``forward_values`` channels-last (a layout-optimised forward hands them
    over so), the rest in the joint graph's strides, then laid out as Inductor's lowering does (checked against
    Inductor in the test below); the copies it makes are buffers of the program, not counted here."""
    def make(arg):
        if isinstance(arg, torch.fx.Node):
            val = arg.meta["val"]
            if val.dim() == 4 and (channels_last or arg in forward_values):
                return torch.ones(val.shape, dtype=val.dtype).to(memory_format=torch.channels_last)
            return torch.empty_strided(val.shape, val.stride(), dtype=val.dtype).fill_(1)
        return arg

    args = [make(a) for a in node.args]
    if not channels_last:
        lowered, _ = scratch._as_lowered(node.target, tuple(
            encoded(a) if isinstance(a, torch.Tensor) else tuple(a) if isinstance(a, list) else a for a in args))
        args = [torch.empty_strided(a.shape, low[3], dtype=a.dtype).fill_(1) if isinstance(a, torch.Tensor) else a
                for a, low in zip(args, lowered)]
    kept = []
    peak = measure(lambda: kept.append(node.target(*args)), "cpu").peak
    outputs = kept[0] if isinstance(kept[0], (tuple, list)) else [kept[0]]
    return max(0, peak - sum(t.untyped_storage().nbytes() for t in outputs if t is not None))


def test_a_convolutions_scratch_is_what_running_it_allocates_beyond_its_outputs_in_each_layout():
    gm, graph = joint_of_a_cnn()
    backward = [n for n in gm.graph.nodes if n.target is aten.convolution_backward.default]
    assert len(backward) == 2 and any(graph.scratch[graph.index[n.name]] for n in backward)
    assert any(n.name == "relu" for n in backward[0].all_input_nodes + backward[1].all_input_nodes)
    for node in backward:
        v = graph.index[node.name]
        # the forward's relu is the one operand a layout-optimised forward hands over (channels-last)
        from_forward = {n for n in node.all_input_nodes if n.name == "relu"}
        assert graph.scratch[v] == direct_scratch(node, channels_last=False, forward_values=from_forward)
        assert graph.scratch_channels_last[v] == direct_scratch(node, channels_last=True)
        # these operands already follow the orders the lowering asks for: a plain program copies none of them
        assert graph.copied[v] == ()
    # on CPU Inductor lays out a program that runs a convolution channels-last (torch 2.15: or its backward)
    convolutions = {n.name for n in gm.graph.nodes if n.target is aten.convolution.default}
    laid_out = convolutions | ({n.name for n in backward} if applies("backward_layout_optimisation", None) else set())
    assert {graph.node_names[v] for v in range(graph.num_nodes) if graph.sets_channels_last[v]} == laid_out
    others = [v for v in range(graph.num_nodes) if graph.node_names[v] not in convolutions | {n.name for n in backward}]
    assert all(graph.scratch[v] == 0 == graph.scratch_channels_last[v] and not graph.copied[v] for v in others)


def strides_handed_to_the_kernel(fn, *args) -> list:
    """Compile ``fn`` with Inductor (no layout optimisation), run it under the profiler, and return the strides
    of every tensor its convolution (forward or backward) was called with."""
    from reorder.measure import _walk

    compiled = torch.compile(fn)
    compiled(*args)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        compiled(*args)
    calls = [e for e in _walk(prof.profiler.kineto_results.experimental_event_tree())
             if e.name in ("aten::convolution", "aten::convolution_backward")]
    assert len(calls) == 1
    return [tuple(i.strides) for i in calls[0].extra_fields.inputs if hasattr(i, "strides") and i.sizes]


def test_a_plain_programs_operands_are_laid_out_and_copied_as_inductor_lowers_them(config_patch, fresh_compiles):
    """A depthwise backward convolution on a channels-last input in a program without layout optimisation:
    Inductor copies the input into the N, H, C, W order of the weight gradient and the output gradient into a new
    buffer; a dense convolution's operands already follow its orders and are handed over as they are."""
    config_patch(torch._inductor.config, layout_optimization=False)
    backward = aten.convolution_backward.default
    flags = ([0], [2, 2], [0, 0], [1, 1], False, [0, 0])

    x = torch.randn(8, 48, 16, 16).to(memory_format=torch.channels_last)
    grad, weight = torch.randn(8, 48, 7, 7), torch.randn(48, 1, 3, 3)
    handed = strides_handed_to_the_kernel(
        lambda g, x, w: backward(g, x, w, *flags, 48, [True, True, False])[:2], grad, x, weight)
    lowered, copied = scratch._as_lowered(backward, (encoded(grad), encoded(x), encoded(weight),
                                                     *map(tuple, flags[:4]), False, (0, 0), 48, (True, True, False)))
    assert [a[3] for a in lowered[:3]] == handed == [grad.stride(), (12288, 16, 768, 1), weight.stride()]
    assert copied == (0, 1)  # the output gradient (a graph input here) into the weight gradient's order and back

    x, grad, weight = torch.randn(4, 8, 12, 12), torch.randn(4, 16, 10, 10), torch.randn(16, 8, 3, 3)
    handed = strides_handed_to_the_kernel(
        lambda g, x, w: backward(g, x, w, [0], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, False])[:2],
        grad, x, weight)
    lowered, copied = scratch._as_lowered(backward, (encoded(grad), encoded(x), encoded(weight), (0,), (1, 1),
                                                     (0, 0), (1, 1), False, (0, 0), 1, (True, True, False)))
    assert [a[3] for a in lowered[:3]] == handed == [grad.stride(), x.stride(), weight.stride()] and copied == ()

    forward = aten.convolution.default
    x, weight = torch.randn(4, 12, 8, 8).transpose(2, 3), torch.randn(6, 12, 3, 3)
    handed = strides_handed_to_the_kernel(lambda x, w: forward(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
                                          x, weight)
    lowered, copied = scratch._as_lowered(forward, (encoded(x), encoded(weight), None, (1, 1), (1, 1), (1, 1), False,
                                                    (0, 0), 1))
    assert [a[3] for a in lowered[:2]] == handed == [x.contiguous().stride(), weight.stride()]
    assert copied == (0,)  # the transposed input is copied into the output's order


def test_probing_leaves_the_random_stream_alone_and_counts_nothing_under_a_running_profiler():
    gm, _ = joint_of_a_cnn()
    node = next(n for n in gm.graph.nodes if n.target is aten.convolution_backward.default)
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    scratch._measured.cache_clear()
    assert scratch_bytes(node, channels_last=False) > 0  # oneDNN reorders plain operands into blocked layouts
    assert torch.equal(torch.rand(4), expected)
    scratch._measured.cache_clear()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert scratch_bytes(node, channels_last=False) == 0
    assert scratch_bytes(node, channels_last=False) > 0  # the skipped probe was not cached as 0


def test_a_probe_that_fails_counts_nothing_and_is_tried_again(monkeypatch):
    gm, _ = joint_of_a_cnn()
    node = next(n for n in gm.graph.nodes if n.target is aten.convolution_backward.default)
    scratch._measured.cache_clear()

    def failing(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr("reorder.measure.measure", failing)
    assert scratch_bytes(node, channels_last=False) == 0
    monkeypatch.undo()
    assert scratch_bytes(node, channels_last=False) > 0


def test_a_compiled_kernels_scratch_is_measured_in_the_layout_its_operands_arrive_in():
    """Once Inductor has lowered a convolution's backward, its operands' strides are known: the scratch is the
    kernel run by hand on ones in exactly those strides (no copy of ours assumed), whatever the joint graph's
    strides said; operands of another shape than the probe's are not measured."""
    gm, _ = joint_of_a_cnn()
    node = next(n for n in gm.graph.nodes if n.target is aten.convolution_backward.default)
    probe = scratch.probe_of(node)
    assert probe is not None and probe[0] is aten.convolution_backward.default
    tensors = [a.meta["val"] for a in node.args if isinstance(a, torch.fx.Node)]
    shapes = [tuple(t.shape) for t in tensors]
    for layout in (torch.contiguous_format, torch.channels_last):
        operands = [torch.ones(t.shape).contiguous(memory_format=layout) for t in tensors]
        args = [operands.pop(0) if isinstance(a, torch.fx.Node) else a for a in node.args]
        kept = []
        peak = measure(lambda: kept.append(node.target(*args)), "cpu").peak
        produced = sum(t.untyped_storage().nbytes() for t in kept[0] if t is not None)
        strides = [a.stride() for a in args if isinstance(a, torch.Tensor)]
        assert scratch.scratch_in_layout(probe, strides, shapes) == max(0, peak - produced)
    assert scratch.scratch_in_layout(probe, strides, [(1, *shapes[0][1:]), *shapes[1:]]) is None
    assert scratch.probe_of(next(n for n in gm.graph.nodes if n.op == "placeholder")) is None


def test_the_flash_attention_backwards_scratch_is_what_running_it_allocates():
    """The CPU's flash attention allocates per-thread blocks of the attention matrix inside its kernels: the step
    graph of an attention layer's training step counts them on its forward and backward nodes, as running the
    operators by hand measures them, and with the rewrite switched off, counts nothing."""
    torch.manual_seed(0)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(32, 96)

        def forward(self, x):
            q, k, v = self.qkv(x).view(4, 64, 3, 2, 16).permute(2, 0, 3, 1, 4)
            return nn.functional.scaled_dot_product_attention(q, k, v)

    model = Attention()
    captured = []

    def capture(gm, joint_inputs, **kwargs):
        captured.append((gm, step_graph_from_joint(gm, kwargs["num_fwd_outputs"],
                                                   kwargs["static_lifetime_input_indices"]),
                         step_graph_from_joint(gm, kwargs["num_fwd_outputs"],
                                               kwargs["static_lifetime_input_indices"],
                                               model_rewrites=("convolution_scratch",))))
        return min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)

    run(step_of(model, capture), model, torch.randn(4, 64, 32))
    ((gm, graph, without),) = captured
    flash = (aten._scaled_dot_product_flash_attention_for_cpu.default,
             aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
    attention = [n for n in gm.graph.nodes if n.target in flash]
    assert len(attention) == 2, [n.target for n in gm.graph.nodes]
    for node in attention:
        v = graph.index[node.name]
        assert graph.scratch[v] == direct_scratch(node, channels_last=False) > 0
        assert without.scratch[without.index[node.name]] == 0


def test_a_reduced_precision_products_scratch_is_what_running_it_allocates():
    """Under ``torch.autocast`` a linear layer's products run in bfloat16, and oneDNN packs their operands in
    buffers of the allocator while they run: the step graph counts that on each product (forward ``addmm``/``mm``
    and the backward's ``mm``s) as running it by hand measures it, and at least one is above 0. The same step in
    float32 counts nothing (its BLAS packs outside the allocator, so its products are not run), nor does the
    bfloat16 step with the rewrite switched off."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
    names = [n for n, _ in model.named_parameters()]
    captured = []

    def capture(gm, joint_inputs, **kwargs):
        args = kwargs["num_fwd_outputs"], kwargs["static_lifetime_input_indices"]
        captured.append((gm, step_graph_from_joint(gm, *args),
                         step_graph_from_joint(gm, *args, model_rewrites=("convolution_scratch",))))
        return min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)

    for precision in (torch.bfloat16, torch.float32):
        def loss(x, *params):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision is torch.bfloat16):
                return torch.func.functional_call(model, dict(zip(names, params)), (x,)).float().sum()

        step = aot_function(loss, lambda gm, _: make_boxed_func(gm), lambda gm, _: make_boxed_func(gm),
                            partition_fn=capture)
        run(step, model, torch.randn(512, 256))
    products = (aten.mm.default, aten.addmm.default)
    (reduced, graph, without), (full, full_graph, _) = captured
    nodes = [n for n in reduced.graph.nodes if n.target in products]
    assert len(nodes) >= 5 and all(n.meta["val"].dtype is torch.bfloat16 for n in nodes)
    scratch._measured.cache_clear()
    direct = {node.name: direct_scratch(node, channels_last=False) for node in nodes}
    if not any(direct.values()):  # a CPU without oneDNN's bfloat16 path: its products allocate nothing more
        pytest.skip("this CPU's bfloat16 matrix products allocate nothing beside their outputs")
    for node in nodes:
        assert graph.scratch[graph.index[node.name]] == direct[node.name]
        assert without.scratch[without.index[node.name]] == 0
    float_nodes = [n for n in full.graph.nodes if n.target in products]
    assert len(float_nodes) == len(nodes) and not any(scratch.is_probed(n) for n in float_nodes)
    assert all(full_graph.scratch[full_graph.index[n.name]] == 0 for n in float_nodes)


def test_a_probe_measured_on_one_thread_count_never_answers_for_another():
    """The CPU's flash attention allocates blocks per thread (on torch 2.13, 10,496 B on one thread and 20,992 B on
    two at these shapes): a figure cached under one ``torch.get_num_threads()`` must not be handed out under
    another. Each count's figure, read through the cache in turns, is the one a fresh probe measures."""
    operand = ("tensor", (4, 2, 64, 16), torch.float32, (2048, 1024, 16, 1))
    probe = (aten._scaled_dot_product_flash_attention_for_cpu.default, (operand,) * 3)
    layouts = ([operand[3]] * 3, [operand[1]] * 3)
    threads = torch.get_num_threads()
    fresh, read = {}, []
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            scratch._measured.cache_clear()
            fresh[count] = scratch.scratch_in_layout(probe, *layouts)
        scratch._measured.cache_clear()
        for count in (1, 2, 1, 2):  # the second pass reads the cache
            torch.set_num_threads(count)
            read.append((count, scratch.scratch_in_layout(probe, *layouts)))
    finally:
        torch.set_num_threads(threads)
    assert fresh[1] > 0 and all(figure == fresh[count] for count, figure in read), (fresh, read)


@pytest.mark.slow
def test_a_plain_backward_copies_a_saved_operand_into_the_kernels_order_and_frees_it_before_the_kernel(
        fresh_compiles):
    """A depthwise convolution's backward in a program without layout optimisation (stock's backward recomputes
    no convolution) asks for its saved, channels-last input in the N, H, C, W order: Inductor copies it, and the
    saved value dies at the copy, before the kernel runs; its output gradient, computed by the program's own
    pointwise code, is laid out so for nothing. The step's estimate is then what the compiled graphs allocate
    and what the allocator measured (to its 8-byte events); counting each copy as the kernel's scratch beside its
    source, it said 11,540,704 B for 9,967,840 B (an EfficientNet backward: 15.48 MB for 13.69 MB, which ranked a
    partition that measured 14.31 MB below it). Torch 2.15 lays out a backward that runs a convolution's backward
    channels-last (``backward_layout_optimisation``): no copy, the kernel's channels-last scratch, and the estimate
    is the compiled graphs' there too (6,483,232 B; 9,967,840 B with the rule off)."""
    from reorder import inductor as hook

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 48, 1), nn.ReLU(), nn.Conv2d(48, 48, 5, padding=2, groups=48), nn.ReLU(),
                          nn.Conv2d(48, 8, 1))
    x = torch.randn(8, 16, 32, 32)
    compiled = torch.compile(model)

    def step():
        compiled(x).square().mean().backward()

    with hook.use(memory_budget=1.0) as session:
        step()
    model.zero_grad(set_to_none=True)
    step()
    model.zero_grad(set_to_none=True)
    peak = measure(step, "cpu").peak
    (record,) = session.partitions
    assert record.source == "inductor" and record.compiled_peak is not None
    assert record.peak == record.compiled_peak  # the estimate of the step is the model of its compiled code
    assert 0 <= peak - record.compiled_peak <= 8, (peak, record)
