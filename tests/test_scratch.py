"""Extern kernels' scratch, measured by running them: what the step's estimate adds while a convolution runs."""

import torch
from torch import nn
from torch._functorch.partitioners import min_cut_rematerialization_partition

from reorder.inductor import scratch
from reorder.inductor.joint_adapter import step_graph_from_joint
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


def direct_scratch(node, channels_last: bool) -> int:
    """The node's operator run by hand on ones in the layout asked: its peak above the start less its outputs."""
    def make(arg):
        if isinstance(arg, torch.fx.Node):
            t = torch.ones(arg.meta["val"].shape)
            return t.to(memory_format=torch.channels_last) if channels_last else t
        return arg

    args = [make(a) for a in node.args]
    kept = []
    peak = measure(lambda: kept.append(node.target(*args)), "cpu").peak
    outputs = kept[0] if isinstance(kept[0], (tuple, list)) else [kept[0]]
    return max(0, peak - sum(t.untyped_storage().nbytes() for t in outputs if t is not None))


def test_a_convolutions_scratch_is_what_running_it_allocates_beyond_its_outputs_in_each_layout():
    gm, graph = joint_of_a_cnn()
    backward = [n for n in gm.graph.nodes if n.target is aten.convolution_backward.default]
    assert len(backward) == 2 and any(graph.scratch[graph.index[n.name]] for n in backward)
    for node in backward:
        v = graph.index[node.name]
        assert graph.scratch[v] == direct_scratch(node, channels_last=False)
        assert graph.scratch_channels_last[v] == direct_scratch(node, channels_last=True)
    # on CPU Inductor lays out a program that runs a convolution channels-last
    convolutions = {n.name for n in gm.graph.nodes if n.target is aten.convolution.default}
    assert {graph.node_names[v] for v in range(graph.num_nodes) if graph.sets_channels_last[v]} == convolutions
    others = [v for v in range(graph.num_nodes) if graph.node_names[v] not in convolutions | {n.name for n in backward}]
    assert all(graph.scratch[v] == 0 == graph.scratch_channels_last[v] for v in others)


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
