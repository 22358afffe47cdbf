"""The slab runtime: real programs in one planned allocation, equal to eager, and the verifier."""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from benchmarks.zoo import make
from reorder import PlanError, ReorderError
from reorder.planning import PlanOptions, plan_memory
from reorder.schedulers import METHODS, make_method
from reorder.runtime import capture, slab_module
from reorder.runtime.executor import SlabModule, out_variant


@pytest.mark.parametrize("name", ["inception", "resnet", "transformer", "densenet"])
def test_models_run_in_the_slab_equal_to_eager(name):
    model, inputs = make(name)
    model.eval()
    with torch.no_grad():
        expected = model(*inputs)
    run = slab_module(model, *inputs, seconds=600, restarts=20)
    for _ in range(3):  # the slab is reused across calls
        assert torch.equal(run(*inputs), expected)
    assert run.plan.slab_bytes == run.plan.lower_bound
    run.plan.validate()


@pytest.mark.parametrize("name, temporaries", [("inception", 0), ("resnet", 0), ("transformer", 16384)])
def test_measured_allocation_is_the_slab(name, temporaries):
    """Every storage an aten op creates during the call is recorded; only ops without out= make any."""
    model, inputs = make(name)
    model.eval()
    run = slab_module(model, *inputs, seconds=600, restarts=20)
    measured = run.measure(*inputs)
    assert measured["slab_bytes"] == run.slab.untyped_storage().nbytes()
    assert measured["largest_temporary_bytes"] == temporaries
    if temporaries:
        assert {op for op, _ in measured["temporaries"]} <= {"aten._scaled_dot_product_flash_attention_for_cpu.default"}


def test_new_inputs_and_output_structure():
    model, (x,) = make("resnet")
    model.eval()
    run = slab_module(model, x, seconds=600, restarts=20)
    other = torch.randn_like(x)
    with torch.no_grad():
        assert torch.equal(run(other), model(other))
    with pytest.raises(ReorderError, match="expected 1 inputs, got 2"):
        run(x, x)

    class TwoHeads(nn.Module):
        def forward(self, x):
            y = torch.relu(x).clone()
            y.mul_(2)  # an in-place op: its readers must follow it, earlier readers precede it
            return torch.max(y, 1), y.chunk(2, 1)[1] + x[:, :3]

    x = torch.randn(4, 6)
    run = slab_module(TwoHeads(), x, verify=True)
    got, expected = run(x), TwoHeads()(x)
    assert type(got[0]) is type(expected[0])  # torch.return_types.max, as eager returns
    assert torch.equal(got[0].values, expected[0].values) and torch.equal(got[1], expected[1])


def test_calls_must_match_the_traced_inputs():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
    x = torch.randn(2, 4)
    run = slab_module(model, x)
    with torch.no_grad():
        assert torch.equal(run(x), model(x))
    for bad, message in [
        (torch.randn(6, 4), r"input #0 has shape \(6, 4\), but the program was traced with \(2, 4\)"),
        (torch.randn(4, 2).t(), r"input #0 has strides \(1, 2\), but the program was traced with \(4, 1\)"),
        (torch.randn(2, 4, dtype=torch.float64), r"input #0 has dtype torch.float64, but .* torch.float32"),
    ]:
        with pytest.raises(ReorderError, match=message):
            run(bad)
    with pytest.raises(ReorderError, match="expected 1 inputs, got 0"):
        run()
    model[0].weight.data = torch.randn(8, 3)
    with pytest.raises(ReorderError, match=r"parameter or buffer '0.weight' has shape \(8, 3\)"):
        run(x)


def test_a_training_step_is_refused_at_trace_time():
    """The slab program has no backward: tracing for training says so, instead of a bare autograd error later."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    x = torch.randn(2, 4)
    with pytest.raises(ReorderError, match=r"^slab_module runs the forward program only \(no backward\), but "
                                           r"Sequential is in training mode and its parameter '0.weight' requires "
                                           r"grad; .* reorder.inductor.use\(slab=True\)$"):
        slab_module(model.train(), x)
    with pytest.raises(ReorderError, match=r"but input #0 requires grad; for inference call module.eval\(\)"):
        slab_module(model.eval(), x.clone().requires_grad_())
    # Forward only is fine: in eval mode, under no_grad (dropout's training-mode draws), or with frozen parameters.
    with torch.no_grad():
        expected = model.train()(x)
        assert torch.equal(slab_module(model, x)(x), expected)
    model.requires_grad_(False)
    assert torch.equal(slab_module(model, x)(x), expected)
    assert torch.equal(slab_module(model.eval(), x)(x), expected)


class TwoDropouts(nn.Module):
    """Two independent random branches: any order that swaps them draws their masks in the other order."""

    def __init__(self):
        super().__init__()
        self.big = nn.Linear(16, 64)
        self.small = nn.Linear(16, 4)
        self.noise = nn.Dropout(0.5)

    def forward(self, x):
        a = self.noise(self.big(x)).sum(1, keepdim=True)
        b = self.noise(self.small(x) * 3).sum(1, keepdim=True)
        c = torch.rand_like(x).sum(1, keepdim=True)
        return a - b + c


@pytest.mark.parametrize("method", sorted(METHODS))
def test_random_ops_keep_program_order_under_every_method(method):
    model = TwoDropouts().train()
    x = torch.randn(8, 16)
    captured = capture(model, x)
    graph = captured.graph
    order = make_method(method).run(graph, list(range(graph.num_nodes))).order
    run = SlabModule(model, captured, plan_memory(graph, order, PlanOptions(include_inputs=False)), x.device, method)
    torch.manual_seed(0)
    with torch.no_grad():
        expected = model(x)
    torch.manual_seed(0)
    assert torch.equal(run(x), expected)


def test_capture_models_views_and_mutations():
    class M(nn.Module):
        def forward(self, x):
            a = x.exp()
            b = a.view(-1)
            a.add_(1)
            return b.sum() + a.mean()

    graph = capture(M(), torch.randn(3, 4)).graph
    kinds = {graph.buffer_names[b]: graph.alias_kind[b] for b in range(graph.num_buffers) if graph.alias_of[b] is not None}
    assert kinds == {"view": "view", "add_": "mutation"}
    add_ = graph.node_index["add_"]
    assert graph.node_index["view"] in graph.after[add_]  # write after read
    assert add_ in graph.after[graph.node_index["mean"]]  # read after write


def test_out_variants():
    assert out_variant(torch.ops.aten.addmm.default)[1] == ("out",)
    assert out_variant(torch.ops.aten.max.dim)[1] == ("max", "max_values")
    assert out_variant(torch.ops.aten.view.default) is None  # a view writes nothing


def test_verifier_catches_a_plan_that_shares_live_bytes():
    model, inputs = make("inception")
    model.eval()
    run = slab_module(model, *inputs, seconds=600, restarts=20, verify=True)
    plan = run.plan
    # Break it: give the storage live longest the offset of another storage live at the same time.
    k = max(range(len(plan.names)), key=lambda i: plan.ends[i] - plan.starts[i])
    j = next(i for i in range(len(plan.names)) if i != k and plan.starts[i] > plan.starts[k]
             and plan.starts[i] < plan.ends[k] - 1 and plan.sizes[i] <= plan.sizes[k])
    offsets = list(plan.offsets)
    offsets[j] = offsets[k]
    broken = dataclasses.replace(plan, offsets=tuple(offsets))
    with pytest.raises(PlanError, match="share bytes"):
        broken.validate()
    run.plan = broken
    run._views = {name: run._view(name) for name in broken.names}
    with pytest.raises(PlanError) as err:
        run(*inputs)
    message = str(err.value)
    assert "overwrote at step" in message and repr(plan.names[j]) in message
    assert "reads buffer" in message and message.startswith("node '")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_slab_and_max_memory_allocated():
    model, inputs = make("resnet")
    model = model.eval().cuda()
    inputs = tuple(x.cuda() for x in inputs)
    run = slab_module(model, *inputs, seconds=600, restarts=20)
    with torch.no_grad():
        expected = model(*inputs)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    got = run(*inputs)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    torch.testing.assert_close(got, expected)
    assert extra <= 0.05 * run.plan.slab_bytes + run.last_call.output_bytes + (1 << 20)


OPS = ["relu", "exp", "neg", "sigmoid", "add", "mul", "sub", "maximum", "inplace_add", "inplace_relu", "views",
       "transposes", "cat_chunk", "sort", "center"]


class RandomProgram(nn.Module):
    """A straight-line program over (4, 8) tensors: each step reads earlier values, appends one."""

    def __init__(self, steps):
        super().__init__()
        self.steps = steps

    def forward(self, x):
        values = [x]
        for op, i, j in self.steps:
            a, b = values[i % len(values)], values[j % len(values)]
            if op in ("relu", "exp", "neg", "sigmoid"):
                y = getattr(torch, op)(a.clamp(-3, 3) if op == "exp" else a)
            elif op in ("add", "mul", "sub", "maximum"):
                y = getattr(torch, op)(a, b)
            elif op == "inplace_add":
                y = a.clone()
                y.add_(b)
            elif op == "inplace_relu":
                y = a * 2
                y.relu_()
            elif op == "views":
                y = a.view(8, 4).view(2, 16).view(4, 8)
            elif op == "transposes":
                y = a.t().t()
            elif op == "cat_chunk":
                y = torch.cat([a, b], 1).chunk(2, 1)[1]
            elif op == "sort":
                values_, indices = torch.sort(a, dim=1)
                y = values_ + indices.float()
            else:
                y = a - a.mean(1, keepdim=True)
            values.append(y)
        return values[-1], values[len(values) // 2]


@settings(max_examples=40)
@given(steps=st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=12))
def test_random_programs_run_in_the_slab_like_eager(steps):
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    program = RandomProgram(steps)
    expected = program(x)
    run = slab_module(program, x, seconds=600, restarts=5, verify=True)
    for _ in range(2):
        got = run(x)
        for g, e in zip(got, expected, strict=True):
            assert torch.equal(g, e)
    run.plan.validate()
