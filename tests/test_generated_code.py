"""What the generated code allocates, read from Inductor's wrapper lines, against the allocator's own figures.

For each compiled graph of a training step (a transformer block and a residual CNN, forward and backward, CPU),
the replay of the events :mod:`reorder.inductor.generated_code` read from its wrapper must equal the peak and the
end the allocator measured for that graph's call, to the byte. The one thing the lines cannot say is what an
extern kernel allocates and frees inside itself: oneDNN's convolutions reorder their operands. Here it is
measured for each convolution of the CNN by running the operator alone, in the channels-last layout the compiled
code runs it in (Inductor's layout optimisation), and named in the replay by kernel.
"""

import pytest
import torch

from reorder import inductor as hook
from reorder.inductor.compiled_budget import owned_inputs, region_of
from reorder.inductor.generated_code import AllocationEvent as Event, GeneratedCode, freed_in_a_step
from reorder.measure import measure


def test_what_a_del_returns_follows_who_holds_the_input():
    assert freed_in_a_step("tangents_1") and freed_in_a_step("getitem_3") and freed_in_a_step("relu")
    assert not freed_in_a_step("primals_2") and not freed_in_a_step("arg0_1") and not freed_in_a_step("fwd_rng_state_0")


def test_an_extern_kernel_makes_the_elements_it_returns_as_it_runs_beside_its_scratch():
    """``buf0 = convolution_backward(...)`` returns a tuple; the wrapper frees ``buf9`` (dead at the kernel) before
    the lines that name the tuple's elements: the kernel ran with ``buf9``, its elements and its scratch live."""
    code = GeneratedCode("g", (
        Event("allocate", "buf9", 1, 50),
        Event("extern", "buf0", 1, 0, origins=frozenset({"convolution_backward"})),
        Event("free", "buf9", 1),
        Event("element", "buf1", 1, 100, reused="buf0"), Event("element", "buf2", 1, 10, reused="buf0"),
        Event("free", "buf0", 1), Event("free", "buf1", 2),
    ), 3, (1,), {})
    assert code.replay().peak == 160 and code.replay().end == 10
    replay = code.replay(scratch={"convolution_backward": 1000})
    assert (replay.peak, replay.peak_event) == (1160, 1)



@torch.library.custom_op("reorder_test::two_outputs", mutates_args=())
def two_outputs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An extern kernel that returns two tensors in one tuple (Inductor's fallback and ``MultiOutput`` lines)."""
    return x * 2, x * 3


@two_outputs.register_fake
def _(x):
    return torch.empty_like(x), torch.empty_like(x)


def uses_its_second_output_last(x):
    a, b = two_outputs(x)
    c = torch.mm(a, a)
    d = torch.mm(c, c).relu()
    return torch.mm(d, d) + b


def take_the_second_element_out_late(nodes: list) -> list:
    """A user's post-fusion pass: the second element's extraction moved to just before its reader, as an order
    that weighs allocations may place it (the generated code then keeps the whole tuple until there)."""
    from torch._inductor import ir

    late = next(n for n in nodes if isinstance(n.node, ir.MultiOutput) and n.node.indices[-1][1] == 1)
    rest = [n for n in nodes if n is not late]
    readers = {user.node.get_name() for buf in late.get_outputs() for user in buf.users if user.node is not None}
    first = next(i for i, n in enumerate(rest) if n.get_name() in readers)
    return rest[:first] + [late] + rest[first:]


@pytest.mark.slow
@pytest.mark.parametrize("options", [{"memory_budget": 1.0}, {"slab": True}])
def test_an_element_taken_out_of_its_tuple_late_lives_from_its_kernels_call_to_the_tuples_del(options,
                                                                                               fresh_compiles):
    """``buf0 = two_outputs(x)`` returns both tensors at once; ``buf1 = buf0[0]`` is taken out, read and deleted,
    and ``buf2 = buf0[1]`` only two matrix products later, after which ``del buf0``. Both elements hold storage
    from the call and ``buf1``'s ``del`` frees nothing until the tuple's: four 16 KiB matrices at once
    (``buf1``, ``buf2``, and the two products), the allocator's peak of the call. The reader puts each element at
    its kernel's call and its free at the tuple's; the replay of the code and the slab's records (which chose its
    pools against three) then agree with the allocator."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    x = torch.randn(64, 64)
    expected = torch.compile(uses_its_second_output_last)(x)
    torch._dynamo.reset()
    with config.patch(_post_fusion_custom_pass=take_the_second_element_out_late), hook.use(**options) as session:
        compiled = torch.compile(uses_its_second_output_last)
        got, (source,) = run_and_get_code(compiled, x)
        call = measure(lambda: compiled(x), "cpu").compiled_calls[0]
    assert torch.equal(got, expected)
    lines = [line.strip() for line in source[source.index("def call"):].splitlines()]
    second = next(k for k, line in enumerate(lines) if line.endswith("[1]"))
    tuple_name = lines[second].split(" = ")[1].split("[")[0]
    assert "mm(" in " ".join(lines[lines.index(f"del {tuple_name}") - 20:second])  # taken out late, as asked
    assert call.peak - call.live_at_start == 4 * 64 * 64 * 4
    (graph,) = [g.graph for g in session.graphs] or [s.graph for s in session.slabs]
    code = session.generated_code(graph)
    replay = code.replay(code.owned_in_a_step())
    assert replay.peak - replay.start == call.peak - call.live_at_start
    if options.get("slab"):
        (slab,) = session.slabs
        assert slab.estimated_peak == call.peak - call.live_at_start
    kinds = [(e.kind, e.reused) for e in code.events]
    call_at = kinds.index(("extern", None))
    assert kinds[call_at + 1:call_at + 3] == [("element", tuple_name)] * 2  # made by the call
    frees = [e.name for e in code.events if e.kind == "free"]
    (first,) = [line.split(" = ")[0] for line in lines if line.endswith(f" = {tuple_name}[0]")]
    assert f"del {first}" in lines[:second]  # deleted before the second is taken out
    assert frees.index(tuple_name) < frees.index(first)  # freed with the tuple, not at its own del


def test_what_the_code_still_holds_but_does_not_return_dies_when_it_returns():
    """The C++ backend frees a last kernel group's dead buffers at the flush, which at the end of a graph may
    write no ``del``: ``buf1`` is then freed by the return, not kept (the allocator measured the residual CNN's
    forward 32,768 B lower at its end than a replay that kept it)."""
    events = (Event("allocate", "buf0", 1, 100), Event("allocate", "buf1", 1, 40), Event("allocate", "buf2", 2, 7))
    assert GeneratedCode("g", events, 3, (), {}, frozenset({"buf0", "buf2"})).replay().end == 107
    assert GeneratedCode("g", events, 3, (), {}).replay().end == 147  # outputs not known: nothing dies
    owned = GeneratedCode("g", events, 3, (), {"tangents_1": 5}, frozenset({"buf0"}))
    replay = owned.replay(["tangents_1"])
    assert (replay.start, replay.peak, replay.end, replay.peak_event) == (5, 152, 100, 2)


class ResidualCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return torch.relu(x + self.conv2(torch.relu(self.norm(self.conv1(x)))))


class SlicedProduct(torch.nn.Module):
    """The sine of a slice of a product: the backward gets the sine's derivative (``cos``, 32 of the product's 128
    columns: 32,768 B of storage) and reads it as part of the product's whole gradient, so Inductor's estimate,
    which sizes an input by its last read, counts it 131,072 B."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 128, bias=False)

    def forward(self, x):
        return torch.sin(self.proj(x)[:, :32]) * 3


def sliced_product():
    torch.manual_seed(0)
    return SlicedProduct(), torch.randn(256, 64)


def transformer_block():
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0), torch.randn(8, 32, 64)


def residual_cnn():
    torch.manual_seed(0)
    return ResidualCNN(), torch.randn(4, 8, 16, 16)


def inside(op, *args) -> int:
    """What ``op(*args)`` allocates and frees inside itself: its peak above its start less what it returns."""
    kept = []
    with torch.no_grad():
        peak = measure(lambda: kept.append(op(*args)), "cpu").peak
    out = kept.pop()
    return peak - sum(t.untyped_storage().nbytes() for t in (out if isinstance(out, tuple) else (out,))
                      if isinstance(t, torch.Tensor))


def convolution_scratch() -> dict[str, int]:
    """The CNN's convolutions' own scratch, forward and backward, channels-last as its compiled code runs them
    (the backward of ``conv2`` returns all three gradients, that of ``conv1`` no input gradient), by the names of
    the joint graph's nodes the kernels are lowered from."""
    cl = torch.channels_last
    x, w = torch.ones(4, 8, 16, 16).to(memory_format=cl), torch.ones(8, 8, 3, 3).to(memory_format=cl)
    b = torch.ones(8)
    forward = inside(torch.ops.aten.convolution, x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    backward = [inside(torch.ops.aten.convolution_backward, x, x, w, [8], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                       mask) for mask in ([True, True, True], [False, True, True])]
    return {"convolution": forward, "convolution_1": forward, "convolution_backward": backward[0],
            "convolution_backward_1": backward[1]}


@pytest.mark.slow
@pytest.mark.parametrize("make, scratch", [(transformer_block, dict), (residual_cnn, convolution_scratch),
                                           (sliced_product, dict)])
def test_the_replay_of_each_compiled_graph_is_the_allocators_peak_of_its_call_and_the_models_promise(make, scratch,
                                                                                                 fresh_compiles):
    """Each compiled graph of a budgeted region, three ways: the allocator's measured call, the replay of its
    generated code's events, and the model of that code our pass ordered it by before it existed (its in-place
    writes read from Inductor's scheduler, the channels-last copies its backward frees): all three agree to the
    byte."""
    model, x = make()
    with hook.use(memory_budget=1.0) as session:  # our code generation reads every graph it compiles
        compiled = torch.compile(model)
        compiled(x).sum().backward()
    model.zero_grad(set_to_none=True)
    step = measure(lambda: compiled(x).sum().backward(), "cpu")
    calls = {"forward": [c for c in step.compiled_calls if not c.name.endswith("(backward)")],
             "backward": [c for c in step.compiled_calls if c.name.endswith("(backward)")]}
    (partition,) = session.partitions
    region = region_of(partition.graph)[0]
    plan = session.region_plan(region)
    for kind in ("forward", "backward"):
        (call,) = calls[kind]
        (name,) = [g.graph for g in session.graphs if g.graph.startswith(f"{region}_{kind}_")]
        code = session.generated_code(name)
        replay = code.replay(owned_inputs(plan, kind, code), scratch())  # the inputs the budget counts
        assert replay.peak - replay.start == call.peak - call.live_at_start, (kind, replay, call)
        assert replay.end - replay.start == call.live_at_end - call.live_at_start, (kind, replay, call)
        # the budget's own check, its kernels' scratch measured in the layouts Inductor compiled them with
        assert plan.modelled[kind] == plan.peaks[kind] == replay.peak, (kind, plan.modelled, plan.peaks)
    assert partition.modelled_peak == partition.compiled_peak is not None
