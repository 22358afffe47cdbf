"""The real-memory meter: the allocator's own events, to the byte on programs whose allocations are known."""

import os

import pytest
import torch

from reorder import ReorderError
from reorder.measure import measure, phase_bytes, without_kineto_markers


def test_peak_and_end_are_the_arithmetic_of_known_allocations():
    def program():
        a = torch.empty(1000, dtype=torch.uint8)        # 1,000
        b = torch.empty(300, dtype=torch.float32)       # 1,200 -> 2,200 live
        c = torch.empty(10, 10, dtype=torch.float64)    # 800   -> 3,000 live (peak)
        del a                                            #       -> 2,000
        d = torch.empty(250, dtype=torch.int32)         # 1,000 -> 3,000 live (peak again)
        del c                                            #       -> 2,200
        return b, d

    m = measure(program, "cpu")
    assert (m.peak, m.end, m.allocations, m.frees) == (3000, 2200, 4, 2)
    assert [live for _, live in m.curve] == [1000, 2200, 3000, 2000, 3000, 2200]
    assert m.phases == {} and m.held_at_backward is None and m.cuda is None
    assert m.peak_composition == {"outside compiled": 3000}  # b, c, d live at the first peak... a freed later


def test_a_call_measures_the_same_whatever_allocated_the_memory_it_frees():
    """The profiler reports the free of memory allocated before the call only if an earlier profile saw it
    allocated (and then with that profile's size, even for an address since reused): counted, the same call
    would measure 4,000 bytes after one history and nothing after the other."""
    held = {}

    def program():
        held.pop("old")                              # frees memory allocated before the call
        return torch.empty(1000, dtype=torch.int32)  # 4,000

    held["old"] = torch.empty(16384, dtype=torch.uint8)            # allocated unprofiled
    unprofiled = measure(program, "cpu")
    measure(lambda: held.setdefault("old", torch.empty(16384, dtype=torch.uint8)), "cpu")  # allocated profiled
    profiled = measure(program, "cpu")
    assert (unprofiled.peak, unprofiled.end, unprofiled.frees) == (profiled.peak, profiled.end, profiled.frees) \
        == (4000, 4000, 0)
    assert profiled.peak_composition == {"outside compiled": 4000}


def test_a_training_step_is_split_into_phases_and_the_forward_hands_backward_what_it_saved():
    n = 4096
    w = torch.randn(n, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)

    def forward():
        a = w.sin()        # saves w (an input: no allocation)
        b = a.exp()        # saves its result
        return b.sum()     # a is dropped on return; b and the loss stay

    def step():
        forward().backward()
        opt.step()
        opt.zero_grad()

    m = measure(step, "cpu")
    assert set(m.phases) == {"forward", "backward", "optimizer"}
    assert m.phases["forward"].peak == 2 * 4 * n + 4  # a, b and the loss
    assert m.held_at_backward == 4 * n + 4 + 4        # b (saved by exp), the loss, backward's seed gradient
    assert m.phases["forward"].end <= m.phases["backward"].start <= m.phases["optimizer"].start
    assert m.peak >= m.phases["backward"].peak > m.held_at_backward
    assert m.end == 0  # zero_grad(set_to_none) freed the gradient; everything else died
    # at the peak (inside backward) only the loss and backward's seed remain of the forward's allocations
    assert m.peak_composition == {"outside compiled forward": 4 + 4, "outside compiled backward": m.peak - 8}


def test_peak_composition_tells_an_operators_scratch_from_its_result():
    x = torch.randn(64, 64)
    m = measure(lambda: torch.linalg.solve(x, x), "cpu")  # LU factors, pivots...: the operator's own scratch
    assert sum(m.peak_composition.values()) == m.peak
    assert m.peak_composition["outside compiled"] == 64 * 64 * 4  # the result, live when the scratch peaks
    assert m.peak_composition["outside compiled (operator temporaries)"] == m.peak - 64 * 64 * 4 > 0


def test_compiled_graph_calls_are_regions_of_their_own():
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    compiled = torch.compile(model)
    x = torch.randn(16, 32)
    with torch.no_grad():
        compiled(x)
        m = measure(lambda: compiled(x), "cpu")
    assert len(m.compiled_calls) == 1
    call = m.compiled_calls[0]
    assert call.name.startswith("CompiledFxGraph ") and call.peak == m.peak
    assert sum(m.peak_composition.values()) == m.peak and m.peak_composition.get("compiled", 0) > 0
    assert m.end == 16 * 8 * 4  # the output, dropped after the measurement
    torch._dynamo.reset()


def test_what_eager_code_holds_beside_compiled_calls_is_counted_in_each_phase():
    """A compiled ``sin(2x)`` with an eager ``exp`` and sum after it: no eager byte is live while the compiled
    forward runs; between it and the compiled backward, eager code holds ``z`` (256 KiB, held by the step's
    local), the gradient it hands the backward (256 KiB) and two scalars (the loss and its gradient); while the
    compiled backward runs, the same but the gradient, which the backward frees: its input, which the region's
    estimate counts as a tangent."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: (x * 2).sin())
    x = torch.randn(256, 256, requires_grad=True)

    def step():
        x.grad = None
        z = compiled(x).exp()
        z.sum().backward()

    step()
    m = measure(step, "cpu")
    assert m.outside_by_phase == {"forward": 0, "between": 2 * 256 * 256 * 4 + 8, "backward": 256 * 256 * 4 + 8}
    with torch.no_grad():
        assert measure(lambda: compiled(x), "cpu").outside_by_phase == {}  # no backward: no phases
    torch._dynamo.reset()


def test_each_backward_call_of_a_region_run_many_times_is_held_beside_what_the_calls_before_it_left():
    """Three layers compiled on their own (one region, three calls a step): beside each backward call, eager
    code holds the sum's gradient (64 x 256 floats, and the loss), and the step keeps each earlier call's weight
    gradient (256 x 256 floats) as the layers' ``.grad``; freed as soon as it is accumulated (as FSDP frees a
    gradient once reduce-scattered), none is held. The gradient a call hands the next is that call's input,
    which it frees: its estimate counts it. The phase counts the most eager code held beside any call."""
    class Layer(torch.nn.Module):  # a module of torch.nn itself would run eagerly under its own compile
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(256, 256))

        def forward(self, x):
            return torch.relu(x @ self.weight)

    torch._dynamo.reset()
    layers = torch.nn.ModuleList(Layer() for _ in range(3))
    for layer in layers:
        layer.compile()
    x = torch.randn(64, 256, requires_grad=True)

    def step():
        x.grad = None
        y = x
        for layer in layers:
            layer.weight.grad = None
            y = layer(y)
        y.sum().backward()

    step()
    eager, gradient = 64 * 256 * 4 + 8, 256 * 256 * 4
    kept = measure(step, "cpu").outside_by_phase
    assert kept["backward"] == eager and kept["backward calls"] == (eager, eager + gradient, eager + 2 * gradient)
    hooks = [layer.weight.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))
             for layer in layers]
    step()
    m = measure(step, "cpu")
    assert m.outside_by_phase["backward calls"] == (eager,) * 3 and m.outside_by_region == (m.outside_by_phase,)
    assert phase_bytes(m.outside_by_phase) == (0, m.outside_by_phase["between"], (eager,) * 3)
    for hook in hooks:
        hook.remove()
    torch._dynamo.reset()


def test_an_output_the_step_keeps_is_held_beside_its_region():
    """A compiled ``sin(2x)`` whose output ``y`` the step keeps in a variable through the backward: the region's
    estimate holds what it saved from its forward to its backward and none of its outputs, so ``y`` (256 KiB)
    counts in both later phases, beside the eager ``3y`` then the gradient the eager code hands the backward
    (256 KiB each, one at a time; the gradient is the backward's input, freed by it) and the loss's scalars
    (20 B between, 8 B through the backward). Without the outputs, 256 KiB less in each."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: (x * 2).sin())
    x = torch.randn(256, 256, requires_grad=True)

    def step():
        x.grad = None
        y = compiled(x)
        (y * 3).sum().backward()
        return y.shape

    step()
    m = measure(step, "cpu")
    size = 256 * 256 * 4
    assert m.outside_by_phase == {"forward": 0, "between": 2 * size + 20, "backward": size + 8}
    assert m.outside_by_region == (m.outside_by_phase,)
    torch._dynamo.reset()


def test_what_later_regions_hold_beside_an_earlier_one_is_counted_for_it():
    """Two compiled regions, ``sin(2x)`` then ``sin``, and an eager sum: between the first region's forward and
    its backward the second runs both ways, so beside the first the step holds the first's output ``y``, which
    the second saved (256 KiB, freed by the second's backward: the first's estimate holds only what the first
    saved), ``z`` (the second's output), the gradient the sum hands the second, the gradient the second hands
    the first (which the first's backward then frees; 256 KiB each) and two scalars. Beside the second, what
    the second's estimate leaves out: ``z``, which the step's local keeps through both backwards, its output
    and no saved value, the gradient the sum hands it (between) and the two scalars: what the whole step's
    phases count, eager code and the outputs kept beside every region."""
    torch._dynamo.reset()
    teacher = torch.compile(lambda x: x * 3)  # run without grad: a call no backward pairs with, in no region
    first = torch.compile(lambda x: (x * 2).sin())
    second = torch.compile(lambda y: y.sin())
    x = torch.randn(256, 256, requires_grad=True)

    def step():
        x.grad = None
        with torch.no_grad():
            teacher(x)
        z = second(first(x))
        z.sum().backward()

    step()
    m = measure(step, "cpu")
    size = 256 * 256 * 4
    assert m.outside_by_region == ({"forward": 0, "between": 4 * size + 8, "backward": size + 8},
                                   {"forward": 0, "between": 2 * size + 8, "backward": size + 8})
    assert m.outside_by_phase == m.outside_by_region[1]
    # each call's role: the teacher's is no region's, and the forward calls a budget counts are the two others
    assert [c.role for c in m.compiled_calls] == [None, "forward", "forward", "backward", "backward"]
    assert len(m.forward_calls) == 2
    torch._dynamo.reset()


def test_an_earlier_regions_output_the_step_keeps_is_held_beside_a_later_region():
    """``y = first(x)`` kept in a variable, then ``second(y).sum().backward()``: beside the second region the
    step holds ``y`` (256 KiB) after the second's forward and through its backward, an output of the first that
    no call frees (the step's variable keeps it), beside the gradient the sum hands the second and the scalars:
    without the earlier region's outputs, 256 KiB less in each. Beside the first, ``y`` is its own output kept,
    and the second's output and gradients are a later region's; the step's phases count what beside the last
    region is counted."""
    torch._dynamo.reset()
    first = torch.compile(lambda x: (x * 2).sin())
    second = torch.compile(lambda y: y.sin())
    x = torch.randn(256, 256, requires_grad=True)

    def step():
        x.grad = None
        y = first(x)
        second(y).sum().backward()
        return y.shape

    step()
    m = measure(step, "cpu")
    size = 256 * 256 * 4
    assert m.outside_by_region == ({"forward": 0, "between": 3 * size + 8, "backward": size + 8},
                                   {"forward": 0, "between": 2 * size + 12, "backward": size + 8})
    assert m.outside_by_phase == m.outside_by_region[1]
    torch._dynamo.reset()


def test_measure_prints_nothing(capfd):
    """Kineto's USDT profiler_start/profiler_stop lines (written to descriptor 2 by C++) are dropped."""
    measure(lambda: torch.empty(10), "cpu")
    measure(lambda: torch.empty(10), "cpu")  # Kineto is initialised by then: its log level no longer matters
    assert capfd.readouterr() == ("", "")


def test_only_kineto_lines_are_dropped_from_stderr(capfd):
    with without_kineto_markers():
        os.write(2, b"USDT:2026-01-01 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\nkept\n")
        os.write(2, b"USDT: profiler_stop\nalso kept, no newline")
    os.write(2, b"\nafter\n")
    assert capfd.readouterr().err == "kept\nalso kept, no newline\nafter\n"


def test_profilers_do_not_nest():
    with torch.profiler.profile():
        with pytest.raises(ReorderError, match="already running"):
            measure(lambda: None, "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_events_agree_with_max_memory_allocated():
    def program():
        a = torch.empty(1 << 20, device="cuda")
        b = torch.empty(1 << 18, device="cuda")
        del a
        return b

    m = measure(program, "cuda")
    assert m.peak == m.cuda["max_memory_allocated"] == (1 << 22) + (1 << 20)
    assert m.end == 1 << 20
