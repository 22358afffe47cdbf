"""The memory budget on the compiled graphs: the record amended from what their generated code allocates (hand-built
allocation events), and the model of that code that orders a budgeted graph before the code exists (hand-built
scheduler graphs); the real compiles are in test_budget_inductor.py and test_generated_code.py."""

import dataclasses
import logging
import random
from unittest.mock import patch

import pytest
import torch
from helpers import allocated_peak

from reorder.graph import BufferSpec, InputSpec, NodeSpec, build_graph
from reorder.inductor import PartitionRecord
from reorder.budget.allocation_model import AllocationModel, KernelSources, kernel_count, release_steps
from reorder.budget.allocation_search import fewer_kernels, lower_allocated_peak
from reorder.inductor.compiled_budget import (RegionPlan, check_generated, compiled_model, expect_region,
                                              generated_kernels, handed_differently, kernel_groups, kernel_sources,
                                              model_of_nodes, note_model, region_of)
from reorder.inductor.generated_code import AllocationEvent as Event, GeneratedCode
from reorder.inductor.reorder_pass import choose_order
from reorder.inductor.session import HookOptions, Session
from reorder.schedulers import reorder_for_peak_memory
from reorder.timeline import estimate_peak_memory


def backward(name: str = "model__0_backward_3"):
    """A backward as Inductor schedules it: an extern kernel reads the tangent and a parameter (600 B out), then
    a generated kernel reads it and a saved value (400 B) that dies there, writing 400 B."""
    return build_graph(
        [NodeSpec("mm", [BufferSpec("mm", 600)], reads=["tangents_1", "primals_1"]),
         NodeSpec("mul", [BufferSpec("mul", 400)], reads=["saved", "mm"])],
        [InputSpec("primals_1", 1000), InputSpec("saved", 400), InputSpec("tangents_1", 100)], ["mul"], name=name)


GENERATED = [False, True]


def test_region_names_are_aotautograds():
    assert region_of("model__0_joint_0") == ("model__0", "joint")
    assert region_of("model__12_backward_37") == ("model__12", "backward")
    assert region_of("graph") is None and region_of("model__0_inference_0") is None


def test_free_inputs_cost_nothing_and_donated_ones_take_a_kernels_output():
    g = backward()
    # mm's step: saved 400 + tangent 100 + mm 600; mul's: saved 400 + mm 600, mul in saved's storage
    assert AllocationModel.build(g, GENERATED, frozenset({"saved"}), free_inputs=frozenset({"primals_1"})).peak([0, 1]) == 1100
    # not donated: mul allocates its own 400 B beside the saved value
    assert AllocationModel.build(g, GENERATED, frozenset(), free_inputs=frozenset({"primals_1"})).peak([0, 1]) == 1400
    # an extern kernel never writes in place
    assert AllocationModel.build(g, [False, False], frozenset({"saved"}), free_inputs=frozenset({"primals_1"})).peak([0, 1]) == 1400
    # the parameter counted: live until mm, its last reader
    assert AllocationModel.build(g, GENERATED, frozenset({"saved"}), free_inputs=frozenset()).peak([0, 1]) == 2100


def test_a_donated_input_that_dies_is_deleted_not_pooled():
    """``saved`` (donated, 400 B) dies at ``mm``, an extern kernel, which cannot write into it; ``mul`` needs
    400 B two steps later, after ``gap``, an extern kernel with 500 B of scratch. The wrapper frees a graph input
    with a plain ``del`` (``codegen_free``), so the pool never offers its storage to ``mul``: at ``gap``,
    mm + g + its scratch (1,200 B); were it pooled, its storage would be held through ``gap`` (1,600 B)."""
    g = build_graph(
        [NodeSpec("mm", [BufferSpec("mm", 600)], reads=["tangents_1", "saved"]),
         NodeSpec("gap", [BufferSpec("g", 100)], reads=["mm"]),
         NodeSpec("mul", [BufferSpec("mul", 400)], reads=["mm", "g"])],
        [InputSpec("saved", 400), InputSpec("tangents_1", 100)], ["mul"])
    model = AllocationModel.build(g, [False, False, True], frozenset({"saved"}), scratch=[0, 500, 0])
    assert model.peak([0, 1, 2]) == 1200


def test_a_dead_buffers_storage_goes_only_to_a_buffer_of_its_reuse_key():
    """``a`` (400 B) dies at ``b``; ``d`` (400 B) comes two steps later, after ``c``, an extern kernel with 3,000 B
    of scratch. Inductor's estimate peaks at ``e`` (2,000 B), so holding ``a``'s storage through ``c`` for ``d``
    keeps the estimate under its peak and the wrapper takes that reuse where the pool offers it: pooled by bytes,
    or with ``a`` and ``d`` of one key, the held 400 B are live beside ``c``'s scratch (3,600 B). Where their keys
    differ (float32 against bfloat16, as many bytes), the pool does not offer it: ``a``'s storage is freed after
    ``b`` and ``d`` allocates its own (3,200 B at ``c``)."""
    g = build_graph(
        [NodeSpec("a", [BufferSpec("a", 400)], reads=["x"]),
         NodeSpec("b", [BufferSpec("b", 100)], reads=["a"]),
         NodeSpec("c", [BufferSpec("c", 100)], reads=["b"]),
         NodeSpec("d", [BufferSpec("d", 400)], reads=["c"]),
         NodeSpec("e", [BufferSpec("e", 2000)], reads=["d"])],
        [InputSpec("x", 100, freeable=False)], ["e"])
    generated, scratch, order = [False] * 5, [0, 0, 3000, 0, 0], [0, 1, 2, 3, 4]
    f32, bf16 = ("cpu", "torch.float32", "100"), ("cpu", "torch.bfloat16", "200")
    def peak(keys):
        return AllocationModel.build(g, generated, scratch=scratch, reuse_keys=keys).peak(order)
    assert peak(None) == peak({}) == 3600
    assert peak({"a": f32, "d": f32}) == 3600
    assert peak({"a": f32, "d": bf16}) == 3200


def forward(name: str = "model__0_forward_1"):
    return build_graph([NodeSpec("relu", [BufferSpec("relu", 300)], reads=["primals_1"])],
                       [InputSpec("primals_1", 1000, freeable=False)], ["relu"], name=name)


def record(budget_bytes: int, peak: int = 1000, held_before: int = 50) -> PartitionRecord:
    return PartitionRecord(graph="model__0_joint_0", nodes=9, budget=budget_bytes, budget_bytes=budget_bytes,
                           stock_peak=2000, peak=peak, feasible=peak <= budget_bytes, source="price 1/4",
                           saved_bytes=400, stock_saved_bytes=900, recomputed=1, stock_recomputed=0,
                           recomputed_flops=10, stock_recomputed_flops=0, held_before=held_before)


def planned(budget_bytes: int, scratch: dict | None = None, **kwargs) -> tuple[Session, PartitionRecord]:
    session, made = Session(), record(budget_bytes, **kwargs)
    session.add(made)
    expect_region(session, made.graph,
                  RegionPlan(made, frozenset({"primals_1"}), frozenset({"saved"}), scratch or {}))
    return session, made


def forward_code(name: str = "model__0_forward_1") -> GeneratedCode:
    """The forward's generated code: ``relu`` allocated (300 B), kept as the graph's output."""
    return GeneratedCode(name, (Event("allocate", "relu", 1, 300),), 2, (), {"primals_1": 1000})


def backward_code(name: str = "model__0_backward_3", mm_origins=frozenset({"mm"})) -> GeneratedCode:
    """The backward's generated code: the extern ``mm`` returns 600 B, the tangent (100 B) is deleted, ``mul``
    writes into the saved value (400 B) as it dies, and ``mm`` is deleted."""
    return GeneratedCode(name, (
        Event("extern", "buf0", 1, 600, origins=mm_origins),
        Event("free", "tangents_1", 1, 100, input=True, planning=False),
        Event("reuse", "buf1", 2, reused="saved"),
        Event("free", "buf0", 2),
    ), 3, (1,), {"primals_1": 1000, "saved": 400, "tangents_1": 100})


def compile_both(session: Session, prefix: str = "model__0") -> None:
    check_generated(session, f"{prefix}_forward_1", forward_code(f"{prefix}_forward_1"))
    check_generated(session, f"{prefix}_backward_3", backward_code(f"{prefix}_backward_3"))


def test_a_batch_saved_as_it_is_but_handed_over_channels_last_is_the_steps_copy():
    """The partition saves the batch itself (``primals_1``, the caller's: free); with Inductor's layout
    optimisation the backward gets it channels-last, a copy its forward made and returned (393,216 B on
    MobileNetV2's step at 0.397, which the check missed: 4.35% under the real peak). A weight handed over in its own
    layout (``primals_2``) stays the caller's."""
    from types import SimpleNamespace

    from torch._inductor.virtualized import V

    from reorder.inductor.compiled_budget import handed_channels_last, owned_inputs

    class Input:  # an IR input: its size and strides
        def __init__(self, size, stride):
            self.size, self.stride = size, stride

        def get_size(self):
            return self.size

        def get_stride(self):
            return self.stride

    made = record(1000)
    plan = RegionPlan(made, frozenset({"primals_1", "primals_2"}), frozenset({"saved"}),
                      layout_copies=frozenset({"primals_1", "primals_2"}))
    code = GeneratedCode("model__0_backward_3", (), 1, (), {"primals_1": 384, "primals_2": 384, "saved": 400})
    assert handed_channels_last(plan) == set()  # no graph being compiled: nothing known
    inputs = {"primals_1": Input((2, 3, 4, 4), (48, 1, 12, 3)), "primals_2": Input((2, 3, 4, 4), (48, 16, 4, 1))}
    sizes = SimpleNamespace(optimization_hint=lambda expr, fallback=0: expr)  # static sizes: their own hints
    with V.set_graph_handler(SimpleNamespace(graph_inputs=inputs, sizevars=sizes)):
        assert handed_channels_last(plan) == {"primals_1"}
        assert owned_inputs(plan, "backward", code) == ["primals_1", "saved"]


def test_the_measured_step_decides_the_verdict_and_names_what_eager_code_held(caplog):
    """A region whose compiled graphs meet 1,200 B; the step around it allocates 4,000 B in eager code (a loss
    and its gradient, here one tensor): the meter's verdict replaces the estimates', with those bytes named."""
    session, _ = planned(1200)
    compile_both(session)
    assert session.partitions[0].feasible
    with caplog.at_level(logging.WARNING, logger="reorder"):
        measured = session.measure_step(lambda: torch.ones(1000), "cpu")
    (amended,) = session.partitions
    assert measured.peak == amended.measured_peak == amended.outside_bytes == 4000 and not amended.feasible
    assert "NOT met by the measured step (4.00 kB, of which 4.00 kB allocated outside the compiled graphs;" \
        in session.summary(), session.summary()
    assert "met by the compiled region's estimate but not by the measured step (4,000 B, of which 4,000 B " \
           "allocated outside the compiled graphs)" in caplog.text
    session.measure_step(lambda: torch.ones(200), "cpu")  # 800 B: met, by the meter
    assert session.partitions[0].feasible and session.partitions[0].measured_peak == 800
    assert "compiled forward calls" not in caplog.text  # no compiled call ran: nothing ran twice


def test_where_the_code_allocates_other_than_its_model_said_the_storage_handed_on_differently_is_named(caplog):
    """The model of the backward writes ``mul`` into the donated ``saved`` as it dies (1,100 B); the code here
    allocates ``mul`` anew (1,400 B): the INFO line names that buffer, as the model and the code hand it on."""
    session, _ = planned(10_000)
    model = compiled_model(session, "model__0_backward_3", backward(), GENERATED)
    note_model(session, "model__0_backward_3", model, [0, 1])
    assert session.region_plan("model__0").handed["backward"] == {"mul": "saved"}
    code = GeneratedCode("model__0_backward_3", (
        Event("extern", "mm", 1, 600, origins=frozenset({"mm"})),
        Event("free", "tangents_1", 1, 100, input=True, planning=False),
        Event("allocate", "mul", 2, 400),
        Event("free", "saved", 2, 400, input=True),
        Event("free", "mm", 2),
    ), 3, (1,), {"primals_1": 1000, "saved": 400, "tangents_1": 100})
    assert handed_differently({"mul": "saved"}, code) == ["mul: saved in the model, none in the code"]
    assert handed_differently({"mul": "saved"}, backward_code()) == [
        "buf1: none in the model, saved in the code", "mul: saved in the model, none in the code"]
    with caplog.at_level(logging.INFO, logger="reorder"):
        check_generated(session, "model__0_backward_3", code)
    assert ("model__0_backward_3 allocates 1,400 B where the model of its code said 1,100 B; storage handed on "
            "differently: mul: saved in the model, none in the code") in caplog.text


def test_the_replay_of_generated_code_counts_owned_inputs_until_their_del_and_reuses_in_place():
    code = backward_code()
    # saved 400 + tangent 100 live from the start; mm's 600 on top; mul takes the saved value's storage
    replay = code.replay(["saved", "tangents_1"])
    assert (replay.start, replay.peak, replay.end, replay.peak_event) == (500, 1100, 400, 0)
    # above the start, as the allocator measures one call: the parameter is the caller's and costs nothing
    assert code.replay(["saved", "tangents_1", "primals_1"]).peak == 2100
    # an input not owned (the caller's) is returned by no del
    held = GeneratedCode("g", (Event("free", "primals_1", 1, 1000, input=True), Event("free", "tangents_1", 1, 100,
                                                                                    input=True)), 2, (), code.inputs)
    assert held.replay(["tangents_1"]).end == 0 and held.owned_in_a_step() == ["saved", "tangents_1"]


def test_a_region_whose_compiled_graphs_fit_keeps_its_verdict_with_their_peak(caplog):
    session, made = planned(1200)
    check_generated(session, "model__0_forward_1", forward_code())
    assert session.partitions == [made]  # the backward is not known yet
    with caplog.at_level(logging.WARNING, logger="reorder"):
        check_generated(session, "model__0_backward_3", backward_code())
    (amended,) = session.partitions
    assert amended.compiled_peak == 50 + 1100 and amended.feasible and caplog.text == ""
    assert amended.peak == made.peak and amended.source == made.source


def test_compiled_graphs_that_fit_meet_a_budget_the_plans_estimate_missed(caplog):
    """The plan's estimate (1,200 B) is above the budget, the code Inductor generated from it (1,150 B) is not:
    the compiled graphs decide, as the measured step would (with ``dynamic=True`` at 0.85 the plan said 19.14 MB
    over a budget of 18.29 MB, and the compiled graphs and the step 17.83 MB)."""
    session, made = planned(1160, peak=1200)
    assert not made.feasible
    with caplog.at_level(logging.WARNING, logger="reorder"):
        compile_both(session)
    (amended,) = session.partitions
    assert amended.compiled_peak == 1150 and amended.feasible and caplog.text == ""
    assert "met by the compiled graphs' estimate" in session.summary() and "NOT met" not in session.summary()


def test_a_budget_the_compiled_graphs_exceed_is_not_met_and_warns(caplog):
    session, _ = planned(1100)
    with caplog.at_level(logging.WARNING, logger="reorder"):
        compile_both(session)
    (amended,) = session.partitions
    assert amended.compiled_peak == 1150 and not amended.feasible
    assert "NOT met by the compiled graphs' estimate (estimated step peak 2.00 kB -> 1.00 kB, compiled graphs " \
           "1.15 kB;" in session.summary(), session.summary()
    assert "memory budget 1,100 B is met by the partition's estimate (1,000 B) but not by the graphs Inductor " \
           "compiled from it (1,150 B); a fusion that holds a buffer until a late kernel can do this, and " \
           "fusion_guard_allocated=True refuses those" in caplog.text
    caplog.clear()
    session, _ = planned(1100)
    session.options = HookOptions(fusion_guard_allocated=True)  # already judging so: no advice
    with caplog.at_level(logging.WARNING, logger="reorder"):
        compile_both(session)
    assert caplog.text.rstrip().endswith("compiled from it (1,150 B)"), caplog.text


def test_a_fraction_of_one_is_met_by_stocks_partition_whatever_its_graphs_hold_beside_stocks_estimate(caplog):
    """``memory_budget=1.0`` asks for stock's step, and the partitioner keeps stock's partition for it: its
    compiled graphs (here 1,150 B) lie above stock's estimate (1,100 B) as Inductor's own code does (the
    checkpointed decoder: estimated 24.56 MB, stock measured 27.60 MB, ours at 1.0 24.98 MB), which is no budget
    missed: the check on the compiled graphs does not call it not met, and the summary says why. The meter still
    judges the measured step by the bytes (an eager loss beside the region is memory no estimate of stock's
    counts). The same bytes asked as bytes (or a later region's lower partition at 1.0) are judged as before."""
    made = record(1100, peak=1100)
    stocks = dataclasses.replace(made, budget=1.0, stock_peak=1100, source="inductor")
    session = Session()
    session.add(stocks)
    expect_region(session, stocks.graph, RegionPlan(stocks, frozenset({"primals_1"}), frozenset({"saved"}), {}))
    with caplog.at_level(logging.WARNING, logger="reorder"):
        compile_both(session)
    (amended,) = session.partitions
    assert amended.asks_for_stock and amended.compiled_peak == 1150 and amended.feasible and caplog.text == ""
    assert "met by stock's partition, which a fraction of 1 asks for (no more than stock's step; estimated step " \
           "peak 1.10 kB -> 1.10 kB, compiled graphs 1.15 kB; the compiled region only" in session.summary()
    session.measure_step(lambda: torch.ones(1000), "cpu")  # 4,000 B: the meter's word, by the bytes
    (measured,) = session.partitions
    assert not measured.feasible and measured.measured_peak == 4000
    assert "NOT met by the measured step (4.00 kB" in session.summary()
    for other in (made, dataclasses.replace(stocks, source="price 1/4")):  # bytes; a partition of ours at 1.0
        session = Session()
        session.add(other)
        expect_region(session, other.graph, RegionPlan(other, frozenset({"primals_1"}), frozenset({"saved"}), {}))
        compile_both(session)
        assert not session.partitions[0].asks_for_stock and not session.partitions[0].feasible


def test_an_unmet_plan_stays_unmet_without_a_second_warning(caplog):
    session, _ = planned(900)
    with caplog.at_level(logging.WARNING, logger="reorder"):
        compile_both(session)
    (amended,) = session.partitions
    assert amended.compiled_peak == 1150 and not amended.feasible and caplog.text == ""


@pytest.mark.parametrize("prefix", ["model__1", "graph"])
def test_graphs_of_other_regions_leave_the_record_alone(prefix):
    session, made = planned(1100)
    compile_both(session, prefix)
    assert session.partitions == [made] and made.compiled_peak is None


def test_an_extern_kernels_scratch_counts_while_it_runs():
    """The probe's scratch of the joint graph's ``mm`` (500 B) goes to the extern kernel lowered from it."""
    session, _ = planned(2000, scratch={"backward": {"mm": 500}, "forward": {"mm": 10_000}})
    check_generated(session, "model__0_forward_1", forward_code())
    check_generated(session, "model__0_backward_3", backward_code(mm_origins=frozenset({"mm", "view"})))
    (amended,) = session.partitions
    assert amended.compiled_peak == 50 + 400 + 100 + 600 + 500 and amended.feasible


def test_a_model_that_cannot_be_set_up_warns_and_leaves_the_verdict_alone(caplog):
    """Scheduler nodes the model cannot read (here: objects without fused members) give no model and a WARNING;
    the order is then chosen on the estimates, and the region keeps the partitioner's verdict."""
    session, made = planned(1200)
    g = backward()
    with caplog.at_level(logging.WARNING, logger="reorder"):
        assert model_of_nodes(session, "model__0_backward_3", [object()], g) is None
    assert "could not model the compiled model__0_backward_3 for its memory budget: AttributeError" in caplog.text
    assert session.partitions == [made] and made.compiled_peak is None
    # a graph of no budgeted region gets no model, and its nodes are not read: no warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="reorder"):
        assert model_of_nodes(session, "model__1_backward_7", [object()], g) is None
        assert model_of_nodes(None, "model__0_backward_3", [object()], g) is None
    assert caplog.text == ""


def gelu_backward(name: str = "model__0_backward_3"):
    """A feed-forward layer's backward, as DeBERTa-v2's under a budget: the input gradient of the second matrix
    product (1000 B), the recomputed GELU output (600 B) for its weight gradient, and the GELU's backward, a
    generated kernel that reads the gradient and the saved pre-activation (1000 B). Listed, the gradient is
    computed first and the GELU's backward last, so both 1000 B buffers are live beside the GELU output; the GELU
    and the weight gradient first let the backward write into the gradient as both its inputs die."""
    return build_graph(
        [NodeSpec("mm_2", [BufferSpec("grad", 1000)], reads=["tangents_1"]),
         NodeSpec("gelu", [BufferSpec("gelu", 600)], reads=["saved"]),
         NodeSpec("mm_3", [BufferSpec("weight_grad", 10)], reads=["gelu", "tangents_1"]),
         NodeSpec("gelu_backward", [BufferSpec("grad_in", 1000)], reads=["grad", "saved"])],
        [InputSpec("saved", 1000), InputSpec("tangents_1", 100)], ["weight_grad", "grad_in"], name=name)


GELU_GENERATED = [False, True, False, True]


def test_nodes_move_while_what_the_generated_code_allocates_falls():
    g = gelu_backward()
    reusable = [True] * g.num_buffers
    gelu_model = AllocationModel(g, tuple(GELU_GENERATED), tuple(reusable))
    # listed: saved + tangent + grad + gelu + weight gradient, then grad_in written into grad
    assert allocated_peak(g, [0, 1, 2, 3], GELU_GENERATED, reusable) == 2710
    # the same estimate either way: Inductor's model cannot tell the two orders apart
    assert estimate_peak_memory(g, [0, 1, 2, 3]).peak == estimate_peak_memory(g, [1, 2, 0, 3]).peak == 3010
    assert lower_allocated_peak([gelu_model], [[0, 1, 2, 3]], lambda order: True) == (
        [1, 2, 0, 3], 2110, (), 0)
    # the caller's ceiling holds every move back, and so does a count of no replays
    assert lower_allocated_peak([gelu_model], [[0, 1, 2, 3]], lambda order: False) == (
        [0, 1, 2, 3], 2710, (), 0)
    assert lower_allocated_peak([gelu_model], [[0, 1, 2, 3]], lambda order: True,
                                evaluations=0) == ([0, 1, 2, 3], 2710, (), 0)
    moved = lower_allocated_peak([gelu_model], [[0, 1, 2, 3]], lambda order: True).order
    g.check_order(moved)
    # a later start's lower minimum is kept (here no move is allowed: each start is its own minimum), but only
    # with replays left once the searches before it are done
    assert lower_allocated_peak([gelu_model], [[0, 1, 2, 3], [1, 2, 0, 3]], lambda order: False) == (
        [1, 2, 0, 3], 2110, (), 1)
    assert lower_allocated_peak([gelu_model], [[0, 1, 2, 3], [1, 2, 0, 3]], lambda order: False,
                                evaluations=4) == ([0, 1, 2, 3], 2710, (), 0)


def test_a_search_replays_each_candidate_order_once_and_moves_as_before(monkeypatch):
    """The gelu backward's search tries the same orders again (the pass after its last move repeats the moves
    tried since, on the same order): each distinct order is replayed once, and the search ends where it did."""
    g = gelu_backward()
    model = AllocationModel(g, tuple(GELU_GENERATED), (True,) * g.num_buffers)
    replayed = []
    peak = AllocationModel.peak
    monkeypatch.setattr(AllocationModel, "peak", lambda self, order, check=True: replayed.append(tuple(order)) or
                        peak(self, order, check))
    assert lower_allocated_peak([model], [[0, 1, 2, 3]], lambda order: True) == ([1, 2, 0, 3], 2110, (), 0)
    assert len(replayed) == len(set(replayed)) > 2, replayed


def test_a_node_move_on_a_symbolic_graph_is_judged_at_every_point():
    """Running ``v`` first ends the 100 B input before the 1000 B buffer ``Q`` is made, and makes ``v``'s
    ``5*s`` bytes live beside ``Q``: lower at the hint (s = 10: 1,051 B against 1,101 B) and higher where ``s`` is
    large (s = 1000: 6,001 B against 5,101 B). Judged at the hint alone the move is kept; judged at every point
    of the sizes' range, as the reorder pass does, it is not. The free input stays at zero bytes at every point."""
    g = build_graph([NodeSpec("q", [BufferSpec("Q", 1000)]), NodeSpec("w", [BufferSpec("W", 1)], reads=["Q"]),
                     NodeSpec("v", [BufferSpec("O", "5*s")], reads=["I"]),
                     NodeSpec("z", [BufferSpec("out", 1)], reads=["O", "W", "parameter"])],
                    [InputSpec("I", 100), InputSpec("parameter", "8*s")], ["out"], size_hints={"s": 10},
                    size_ranges={"s": [2, 1000]})
    model = AllocationModel.build(g, [False] * 4, free_inputs={"parameter"})
    points = g.evaluation_points()
    assert [label for label, _ in points] == ["hint", "lower", "x2", "x4", "high"]
    models = [model.at(point) for _, point in points]
    assert [m.peak([0, 1, 2, 3]) for m in models] == [1101, 1101, 1101, 1101, 5101]
    assert [m.peak([2, 0, 1, 3]) for m in models] == [1051, 1011, 1101, 1201, 6001]
    assert lower_allocated_peak(models[:1], [[0, 1, 2, 3]], lambda order: True) == ([2, 0, 1, 3], 1051, (), 0)
    assert lower_allocated_peak(models, [[0, 1, 2, 3]], lambda order: True) == (
        [0, 1, 2, 3], 1101, (1101, 1101, 1101, 5101), 0)
    # lower at the hint and higher at no other point is kept: at s = 2 the move also lowers; lower elsewhere
    # but not at the hint is not
    assert lower_allocated_peak(models[:2], [[0, 1, 2, 3]], lambda order: True) == ([2, 0, 1, 3], 1051, (1011,), 0)
    # (with s = 20 as the hint, running v after w again is lower at s = 1000 only: not kept)
    assert lower_allocated_peak([models[2], models[4]], [[2, 0, 1, 3]], lambda order: True) == (
        [2, 0, 1, 3], 1101, (6001,), 0)


def test_a_budgeted_graph_is_ordered_by_what_its_generated_code_allocates():
    """Our methods keep the listed order (the lowest estimate, 3010 B, first found); in a budgeted region's
    backward the pass keeps an order of the same estimate whose generated code allocates 2110 B instead of 2710 B:
    another method's, or, where none found one, the listed order with its nodes moved."""
    session, _ = planned(5000)
    g = gelu_backward()
    replay = compiled_model(session, "model__0_backward_3", g, GELU_GENERATED)
    for methods, kept in ((None, "lpmf"), (["baseline"], "moved_baseline")):
        result = reorder_for_peak_memory(g, methods)
        assert result.peak == 3010 and replay.peak(result.order) == 2710
        choice = choose_order(g, g, result, allocation=replay)
        assert replay.peak(choice.order) == 2110 and choice.peak == 3010 and choice.method == kept
        assert choice.notes["allocated"] == (f"kept {kept} for what its generated code allocates: 2,110 B against "
                                             f"2,710 B for the order of lowest estimate (baseline, 3,010 B)")
        assert choice.optimal == result.optimal  # the same estimate: no claim changes
    # another region's graph, or a graph of no session, has no replay: the lowest estimate is kept
    assert compiled_model(session, "model__1_backward_7", g, GELU_GENERATED) is None
    assert compiled_model(None, "model__0_backward_3", g, GELU_GENERATED) is None
    assert choose_order(g, g, result).order == result.order


def test_the_wrapper_decides_a_reuse_by_inductors_own_estimate():
    """A parameter read early counts in Inductor's estimate (1,000 B until its last reader) and in no allocation
    of the step. The wrapper asks its own estimate whether holding ``a``'s 100 B until ``d`` reuses them keeps
    the estimate's peak: 100 + 550 <= 1,150 with the parameter counted, so the code holds them, 650 B at ``c``;
    with the parameter at zero bytes the same question says no (100 + 550 > 600), and a replay that asked it so
    promised 600 B. On ALBERT-QA's backward at 0.934 that question, answered the wrong way, let node moves
    promise 17.09 MB where the code allocates 18.62 MB."""
    g = build_graph(
        [NodeSpec("a", [BufferSpec("a", 100)], reads=[]),
         NodeSpec("b", [BufferSpec("b", 50)], reads=["a", "primals_1"]),
         NodeSpec("c", [BufferSpec("c", 500)], reads=["b"]),
         NodeSpec("d", [BufferSpec("d", 100)], reads=["c"])],
        [InputSpec("primals_1", 1000)], ["d"])
    assert estimate_peak_memory(g, [0, 1, 2, 3]).peak == 1150
    allocated = g.with_free_inputs({"primals_1"})
    reusable = [not allocated.is_input[b] for b in range(allocated.num_buffers)]
    generated = [True] * 4
    assert allocated_peak(allocated, [0, 1, 2, 3], generated, reusable) == 600  # decided by the zeroed estimate
    assert allocated_peak(allocated, [0, 1, 2, 3], generated, reusable, decided_by=g) == 650
    assert AllocationModel.build(g, generated, frozenset(), decided_by=g, free_inputs=frozenset({"primals_1"})).peak([0, 1, 2, 3]) == 650


def test_cpu_kernel_groups_free_their_dead_buffers_when_flushed():
    """Inductor's C++ backend runs consecutive generated kernels as one group and frees the buffers that died
    in it only when the next extern kernel (or the end) flushes it: ``a`` dies at ``b`` but stays allocated
    until ``mm``, beside ``b`` and ``c`` (100 + 200 + 300 B); per kernel (Triton), it is gone before ``c``.
    On ALBERT-QA's backward at 0.934, node moves that followed the per-kernel replay promised 17.09 MB and the
    code allocated 18.62 MB."""
    g = build_graph(
        [NodeSpec("a", [BufferSpec("a", 100)], reads=[]),
         NodeSpec("b", [BufferSpec("b", 200)], reads=["a"]),
         NodeSpec("c", [BufferSpec("c", 300)], reads=["b"]),
         NodeSpec("mm", [BufferSpec("mm", 10)], reads=["c"])],
        [], ["mm"])
    generated, reusable = [True, True, True, False], [True] * 4
    assert release_steps([0, 1, 2, 3], [True, True, True, False]) == [2, 2, 2, 3]
    assert release_steps([0, 1, 2, 3], None) == [0, 1, 2, 3]
    assert allocated_peak(g, [0, 1, 2, 3], generated, reusable) == 500  # b and c
    assert allocated_peak(g, [0, 1, 2, 3], generated, reusable, grouped=[True, True, True, False]) == 600
    # the extern kernel between them splits the groups: a is freed after b's group, before mm2
    g2 = build_graph(
        [NodeSpec("a", [BufferSpec("a", 100)], reads=[]),
         NodeSpec("b", [BufferSpec("b", 200)], reads=["a"]),
         NodeSpec("mm", [BufferSpec("mm", 10)], reads=["b"]),
         NodeSpec("c", [BufferSpec("c", 300)], reads=["mm"])],
        [], ["c"])
    assert allocated_peak(g2, [0, 1, 2, 3], [True, True, False, True], reusable,
                        grouped=[True, True, False, True]) == 310  # mm flushes the group: a is freed before it


@pytest.mark.slow
def test_kernel_groups_free_where_the_generated_code_frees(fresh_compiles):
    """The model's kernel-group rule against Inductor's own C++ code: three softmaxes are generated kernels of one
    group, each writing small temporaries (row maxima and sums) that die inside it; the generated code frees them
    all after the group's last allocation, where the extern matrix product flushes it, not after each kernel."""
    import torch

    from reorder import inductor as hook

    def f(x, w):
        return x.softmax(-1).softmax(0).softmax(-1) @ w

    with hook.use(memory_budget=0.9) as session:  # our code generation reads the graph's lines
        torch.compile(f)(torch.randn(64, 64), torch.randn(64, 64))
    (name,) = [r.graph for r in session.graphs]
    events = session.generated_code(name).events
    kinds = [e.kind for e in events]
    flush = kinds.index("call")  # the matrix product
    last_allocation = max(k for k, kind in enumerate(kinds) if kind == "allocate")
    temporaries = [k for k, e in enumerate(events) if e.kind == "free" and not e.input]
    assert len(temporaries) >= 3 and all(last_allocation < k < flush for k in temporaries), kinds
    # the model's rule says the same: every node of the group releases at its last member
    assert release_steps([0, 1, 2, 3], [True, True, True, False]) == [2, 2, 2, 3]


def test_a_kernel_writes_in_place_only_where_inductors_scheduler_allows_it():
    """``conv`` (an extern kernel's channels-last output) dies at ``bn``, a generated kernel whose output has its
    size: by size alone ``bn`` writes into it (conv + mean + stats: 800 B); Inductor reads it at another index
    than it writes and allocates (1,100 B at ``bn``'s step). Inside one fused kernel, a member writes into an
    earlier member's output that died there (``bn`` into ``mean``, which no later kernel reads), which the
    kernel's reads do not list: 800 B again."""
    g = build_graph(
        [NodeSpec("conv", [BufferSpec("conv", 300)], reads=["primals_1"]),
         NodeSpec("bn", [BufferSpec("mean", 300), BufferSpec("stats", 200), BufferSpec("bn", 300)], reads=["conv"]),
         NodeSpec("out", [BufferSpec("out", 10)], reads=["bn", "stats"])],
        [InputSpec("primals_1", 1000)], ["out"])
    generated = [False, True, True]
    by_size = AllocationModel.build(g, generated, free_inputs={"primals_1"})
    assert by_size.peak([0, 1, 2]) == 800
    read_at_another_index = AllocationModel.build(g, generated, free_inputs={"primals_1"},
                                                  writable={})
    assert read_at_another_index.peak([0, 1, 2]) == 1100
    into_a_member = AllocationModel.build(g, generated, free_inputs={"primals_1"}, writable={"bn": ("mean",)})
    assert into_a_member.peak([0, 1, 2]) == 800


def test_each_fused_member_writes_in_place_only_into_what_inductor_let_it():
    """``x`` dies in a fused kernel of two members; the first (``a``) reads it at another index or while the
    second still needs it, the second (``c``) is its last reader at the index it writes: Inductor's
    ``decide_inplace_update`` decides per member, so ``c`` writes into ``x`` and ``a`` is allocated (a, x and
    out at the end: 610 B), not ``a`` into ``x`` because the kernel as a whole may (a, c and out: 600 B)."""
    g = build_graph(
        [NodeSpec("x", [BufferSpec("x", 300)], reads=["primals_1"]),
         NodeSpec("f", [BufferSpec("a", 300), BufferSpec("c", 290)], reads=["x"]),
         NodeSpec("out", [BufferSpec("out", 10)], reads=["a", "c"])],
        [InputSpec("primals_1", 1000)], ["out"])
    model = AllocationModel.build(g, [True, True, True], free_inputs={"primals_1"}, writable={"c": ("x",)})
    assert model.peak([0, 1, 2]) == 610


def test_a_kernel_writes_nothing_into_a_buffer_it_keeps_local():
    """A fused kernel's member may write its output into an earlier member's output that dies inside the kernel,
    but not into one the kernel keeps local (never allocated: there is no storage to write into). On T5's
    backward at 0.767, the model wrote two attention-sized outputs (2 MB each) into a softmax's local
    exponentials, promised 46.95 MB for an order whose code allocated 48.91 MB, and the search kept that
    order."""
    g = build_graph(
        [NodeSpec("k", [BufferSpec("exp", 300), BufferSpec("out", 300)], reads=["primals_1"]),
         NodeSpec("mm", [BufferSpec("mm", 10)], reads=["out"])],
        [InputSpec("primals_1", 1000)], ["mm"])
    generated, reusable = (True, False), (True,) * g.num_buffers
    writable = tuple(frozenset({g.buffer_index["exp"]}) if name == "out" else frozenset() for name in g.buffer_names)
    model = AllocationModel(g, generated, reusable, writable=writable)
    assert model.peak([0, 1]) == 1000 + 300  # the input and exp, which out is written into as exp dies in k
    local = AllocationModel(g, generated, reusable, writable=writable, local=frozenset({g.buffer_index["exp"]}))
    assert local.peak([0, 1]) == 1000 + 300  # exp never allocated: out needs storage of its own


def test_an_output_whose_first_choice_is_a_local_buffer_takes_no_later_one_in_place():
    """Inductor writes a member's output into the first of the member's reads that dies there, in the order of
    its reads (``decide_inplace_update``). When that first choice is an earlier member's output the kernel would
    keep local, it stays allocated for the output to be written into (``remove_kernel_local_buffers`` keeps an
    in-place buffer whose partner it keeps), and a later read that dies in the kernel gives its storage to
    nobody in place. On the decoder's backward compiled per layer at 0.4, the model wrote such an output into a
    dying read instead and promised 20,852,872 B for a step that allocated 21,732,360 B."""
    g = build_graph(
        [NodeSpec("a", [BufferSpec("a", 300)], reads=["primals_1"]),
         NodeSpec("k", [BufferSpec("t", 300), BufferSpec("out", 300)], reads=["a"]),
         NodeSpec("mm", [BufferSpec("mm", 10)], reads=["out", "primals_1"])],
        [InputSpec("primals_1", 1000)], ["mm"])
    generated = (True, True, False)
    first_local = AllocationModel.build(g, generated, writable={"out": ("t", "a")}, local=["t"])
    assert first_local.peak([0, 1, 2]) == 1000 + 300 + 300  # a dies in k, but out is written into t, allocated
    first_dying = AllocationModel.build(g, generated, writable={"out": ("a", "t")}, local=["t"])
    assert first_dying.peak([0, 1, 2]) == 1000 + 300 + 10  # out written into a as a dies in k; t never allocated


def test_at_other_sizes_storage_is_handed_on_as_the_hints_decided():
    """Inductor decides each reuse once, by its estimate at the size hints, and the code makes it at every size.
    Here ``n`` takes the dead ``d``'s storage, held across ``spike``, since at the hint (s = 1) that stays under
    the estimate's peak; at s = 100 the same hold would not, but the code holds it all the same. The model at
    that point re-decided it and promised 10,028 B where the code allocates 11,028 B; on the decoder's backward
    under ``dynamic=True`` at 0.4 it promised 25,469,056 B at sequence 128 for a step that measured 27,422,904 B
    (27,390,080 B now)."""
    g = build_graph(
        [NodeSpec("early", [BufferSpec("e", 5000)], reads=["x"]),
         NodeSpec("use_e", [BufferSpec("s1", 10)], reads=["e"]),
         NodeSpec("make_d", [BufferSpec("d", "100*s")], reads=["x"]),
         NodeSpec("use_d", [BufferSpec("small", 10)], reads=["d"]),
         NodeSpec("spike", [BufferSpec("spike", 1000)], reads=["x"]),
         NodeSpec("make_n", [BufferSpec("n", "100*s")], reads=["small"]),
         NodeSpec("out", [BufferSpec("out", 10)], reads=["n", "s1"])],
        [InputSpec("x", 8)], ["out"], size_hints={"s": 1}, size_ranges={"s": [1, 1000]})
    model = AllocationModel.build(g, [True] * 7, reuse_keys={"d": ("k",), "n": ("k",)})
    order = list(range(7))
    assert model.live(order)[0][4] == 8 + 10 + 10 + 100 + 1000  # at the hint, d's storage is held across spike
    at = model.at({"s": 100})
    assert at.live(order)[0][4] == 8 + 10 + 10 + 10_000 + 1000  # and so it is at s = 100
    assert at.peak(order) == 11_028 and model.at({"s": 100}).peak(order) == 11_028


def test_a_cats_inputs_are_views_into_its_output_allocated_with_the_first():
    """On the CPU a cat's inputs are computed straight into slices of its output (``NonOwningLayout``): each
    view allocates nothing and takes no dead buffer's storage, and the output is allocated when its first view
    is made, taking the storage of a dead buffer of its key there. Inductor's estimate counts each view as a
    buffer of its own; so did the model, and on the decoder's backward under ``dynamic=True`` at 0.4 it promised
    18,300,032 B for code that allocates 18,037,888 B, and ordered the step by it."""
    g = build_graph(
        [NodeSpec("d", [BufferSpec("d", 200)], reads=["primals_1"]),
         NodeSpec("use_d", [BufferSpec("small", 10)], reads=["d"]),
         NodeSpec("p1", [BufferSpec("v1", 100)], reads=["primals_1"]),
         NodeSpec("big", [BufferSpec("big", 500)], reads=["primals_1"]),
         NodeSpec("use_big", [BufferSpec("tiny", 10)], reads=["big"]),
         NodeSpec("p2", [BufferSpec("v2", 100)], reads=["primals_1"]),
         NodeSpec("cat", [BufferSpec("cat", 200)], reads=["v1", "v2"]),
         NodeSpec("mm", [BufferSpec("out", 10)], reads=["cat", "small", "tiny"])],
        [InputSpec("primals_1", 1000)], ["out"])
    generated = (True, True, True, True, True, True, False, False)
    keys = {"d": ("k200",), "cat": ("k200",), "v1": ("k100",), "v2": ("k100",)}
    order = list(range(8))
    # as Inductor's estimate counts them: v1 beside big, then cat allocated anew while the views live
    estimated = AllocationModel.build(g, generated, reuse_keys=keys)
    assert estimated.peak(order) == 1000 + 10 + 100 + 500 + 10
    viewed = AllocationModel.build(g, generated, reuse_keys=keys, views={"v1": "cat", "v2": "cat"})
    # cat takes d's storage when v1 is made (d died right before): 200 B beside big, and no view counts
    assert viewed.peak(order) == 1000 + 10 + 200 + 500 + 10
    live, _ = viewed.live(order)
    assert live[2] == 1000 + 10 + 200  # at p1: d's storage handed on to cat, none allocated for v1
    assert (live[5], live[6]) == (1000 + 10 + 10 + 200, 10 + 10 + 200)  # at cat and before: the views hold nothing
    # made in the other order, the storage is allocated with whichever view comes first
    assert viewed.peak([0, 1, 5, 3, 4, 2, 6, 7]) == 1000 + 10 + 200 + 500 + 10
    assert viewed.peak([0, 1, 3, 4, 2, 5, 6, 7]) == 1000 + 10 + 500 + 10  # big dead before the first view


class HalvesSwapped(torch.nn.Module):
    """A linear layer's output with its halves swapped, one negated (a rotary embedding's ``rotate_half``), then
    another layer: the C++ backend computes the ``cat``'s inputs straight into the halves of its output."""

    def __init__(self):
        super().__init__()
        self.first, self.second = torch.nn.Linear(256, 256), torch.nn.Linear(256, 16)

    def forward(self, x):
        y = self.first(x)
        return self.second(torch.cat((-y[..., 128:], y[..., :128]), -1) * 2)


@pytest.mark.slow
def test_a_cats_views_are_the_aliases_the_generated_code_writes(fresh_compiles):
    """The views :func:`storage_views` reads from the scheduler nodes are the buffers the wrapper writes as
    ``# alias`` lines of the same storage, graph by graph, and the model of the code built with them is the
    code's peak to the byte (the forward's was 1,048,576 B for 786,432 B with each view counted as a buffer)."""
    import re

    from torch._inductor.utils import run_and_get_code

    import reorder.inductor.reorder_pass as reorder_pass
    from reorder import inductor as hook
    from reorder.inductor.compiled_budget import region_of, storage_views

    found, model_of_nodes_before = {}, reorder_pass.model_of_nodes

    def reading(session, name, nodes, *args):
        found[name] = storage_views(nodes)
        return model_of_nodes_before(session, name, nodes, *args)

    torch.manual_seed(0)
    module, x = HalvesSwapped(), torch.randn(4, 64, 256)
    with patch.object(reorder_pass, "model_of_nodes", reading), hook.use(memory_budget=1.0) as session:
        compiled = torch.compile(module)
        _, codes = run_and_get_code(lambda: compiled(x).sum().backward())
    aliases = [dict(re.findall(r"(buf\d+) = reinterpret_tensor\((buf\d+), [^\n]*# alias", code)) for code in codes]
    assert aliases[0], "no cat computed into its output here: the test tests nothing"
    assert list(found.values()) == aliases  # forward, then backward
    (partition,) = session.partitions
    plan = session.region_plan(region_of(partition.graph)[0])
    assert plan.modelled == plan.peaks and partition.modelled_peak == partition.compiled_peak is not None


def test_an_output_written_in_place_into_an_unaligned_input_is_pooled_apart_from_aligned_buffers():
    """``saved`` (a donated saved value, unaligned as every graph input is on the CPU) dies at ``a``, which writes
    into it in place; ``a2`` writes into ``a`` in place in turn and dies at ``b``. ``d`` (as many bytes, of the same
    aligned key) comes after ``c``, an extern kernel with 3,000 B of scratch. Aligned, ``a2``'s storage would be
    held through ``c`` for ``d`` (b, c, the held 400 B and the scratch: 3,600 B), the hold staying under the
    estimate's peak at ``e``; the in-place writes made ``a`` and then ``a2`` unaligned, so ``a2`` is pooled by the
    unaligned key, its storage freed after ``b``, and ``d`` allocates its own (3,200 B at ``c``). ``x`` is another
    input, never freed, that ``a`` also reads. The 400 B are ``100*s`` at the hint s = 4: at s = 8 the storage is
    handed on as at the hint."""
    g = build_graph(
        [NodeSpec("a", [BufferSpec("a", "100*s")], reads=["saved", "x"]),
         NodeSpec("a2", [BufferSpec("a2", "100*s")], reads=["a"]),
         NodeSpec("b", [BufferSpec("b", 100)], reads=["a2"]),
         NodeSpec("c", [BufferSpec("c", 100)], reads=["b"]),
         NodeSpec("d", [BufferSpec("d", "100*s")], reads=["c"]),
         NodeSpec("e", [BufferSpec("e", 2000)], reads=["d"])],
        [InputSpec("saved", "100*s"), InputSpec("x", 100, freeable=False)], ["e"],
        size_hints={"s": 4}, size_ranges={"s": [1, 64]})
    generated, scratch, order = [True, True, False, False, False, False], [0, 0, 0, 3000, 0, 0], list(range(6))
    keys = {name: ("cpu", "torch.float32", "100", "True") for name in ("a", "a2", "d")}
    unaligned_keys = {name: ("cpu", "torch.float32", "100", "False") for name in ("a", "a2", "d")}

    def model(unaligned=(), unaligned_keys=None):
        return AllocationModel.build(g, generated, frozenset({"saved"}), scratch, reuse_keys=keys,
                                     unaligned=unaligned, unaligned_keys=unaligned_keys)

    assert model().reuses(order) == {"a": "saved", "a2": "a", "d": "a2"}
    assert model().peak(order) == 3600
    pooled_apart = model({"saved", "x"}, unaligned_keys)
    assert pooled_apart.reuses(order) == {"a": "saved", "a2": "a"}
    assert pooled_apart.peak(order) == 3200
    assert model({"x"}, unaligned_keys).peak(order) == 3600  # written into an aligned input: aligned still
    at_8 = pooled_apart.at({"s": 8})
    assert at_8.reuses(order) == {"a": "saved", "a2": "a"} and at_8.peak(order) == 3200
    assert model().at({"s": 8}).peak(order) == 100 + 100 + 800 + 3000  # aligned: 800 B held through c


def test_unaligned_keys_are_inductors_and_leave_its_set_as_it_was():
    """:func:`unaligned_reuse_keys` reads each output's key from Inductor's ``buffer_reuse_key`` with the output put
    into ``V.graph.unaligned_buffers`` for the call: the set afterwards is the set before, in its order, also where
    a key cannot be read; an output already in the set gets no entry (its own key carries the flag), and one
    whose key cannot be read is left out."""
    from types import SimpleNamespace

    from torch._inductor.codegen import wrapper
    from torch._inductor.utils import OrderedSet
    from torch._inductor.virtualized import V

    from reorder.inductor.compiled_budget import unaligned_reuse_keys

    def key_of(node):
        if node == "broken":
            raise RuntimeError("no size")
        return ("cpu", node, node not in V.graph.unaligned_buffers)

    def output(name):
        return SimpleNamespace(get_name=lambda: name, node=name)

    nodes = [SimpleNamespace(get_outputs=lambda: [output("buf0"), output("buf1")]),
             SimpleNamespace(get_outputs=lambda: [output("broken"), output("buf2")])]
    graph = SimpleNamespace(unaligned_buffers=OrderedSet(["primals_1", "buf1", "tangents_1"]))
    with V.set_graph_handler(graph), patch.object(wrapper, "buffer_reuse_key", key_of):
        unaligned, keys = unaligned_reuse_keys(nodes)
    assert unaligned == {"primals_1", "buf1", "tangents_1"}
    assert list(graph.unaligned_buffers) == ["primals_1", "buf1", "tangents_1"]
    assert keys == {"buf0": ("cpu", "buf0", "False"), "buf2": ("cpu", "buf2", "False")}


class SiLUBlocks(torch.nn.Module):
    """Three linear layers, each with a SiLU after it, then a layer norm: the backward computes each SiLU's
    gradient straight into the saved linear output it reads (a donated graph input, so unaligned on the CPU)."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.SiLU())
                                            for _ in range(3)))
        self.norm = torch.nn.LayerNorm(256)

    def forward(self, x):
        return self.norm(self.blocks(x))


@pytest.mark.slow
def test_an_output_written_into_an_unaligned_input_is_unaligned_as_inductors_code_generation_makes_it(
        fresh_compiles):
    """The storage the model of each compiled graph says its code hands on (in place and through the reuse pool),
    for the order the graph runs in, is what the wrapper's reuse lines hand on. In the backward one kernel writes
    its output into a saved value in place; the model that took that output as aligned gave its storage to a later
    buffer of its size, which the code allocates anew."""
    import reorder.inductor.compiled_budget as compiled_budget
    import reorder.inductor.reorder_pass as reorder_pass
    from reorder import inductor as hook
    from reorder.inductor import codegen_hook

    models, orders, reused = {}, {}, {}
    model_of_nodes_before, reorder_before = reorder_pass.model_of_nodes, reorder_pass.ReorderPass._reorder
    check_before = compiled_budget.check_generated

    def modelling(session, name, nodes, *args):
        models[name] = model_of_nodes_before(session, name, nodes, *args)
        return models[name]

    def ordering(self, nodes, name, session):
        record, orders[name] = reorder_before(self, nodes, name, session)
        return record, orders[name]

    def checking(session, name, code):
        reused[name] = {event.name: event.reused for event in code.events if event.kind == "reuse"}
        return check_before(session, name, code)

    torch.manual_seed(0)
    module, x = SiLUBlocks(), torch.randn(64, 256, requires_grad=True)
    with patch.object(reorder_pass, "model_of_nodes", modelling), \
            patch.object(reorder_pass.ReorderPass, "_reorder", ordering), \
            patch.object(compiled_budget, "check_generated", checking), \
            patch.object(codegen_hook, "check_generated", checking), hook.use(memory_budget=1.0):
        torch.compile(module)(x).sum().backward()
    assert len(models) == 2 and all(model is not None for model in models.values())
    for name, model in models.items():
        assert model.reuses(orders[name]) == reused[name], name
    backward = next(name for name in models if region_of(name)[1] == "backward")
    model, order = models[backward], orders[backward]
    graph = model.graph
    into_inputs = {b: x for b, x in reused[backward].items() if graph.is_input[graph.buffer_index[x]]}
    assert into_inputs, "no output written into a saved value here: the test tests nothing"
    as_aligned = dataclasses.replace(model, unaligned=frozenset(), unaligned_key=None)
    assert as_aligned.reuses(order) != reused[backward]


@pytest.mark.slow
def test_a_kernel_fused_at_its_outer_loops_allocates_no_local_buffer(fresh_compiles):
    """Inductor's C++ backend fuses a softmax's loops at the row and keeps the exponentials in a row-sized local
    buffer (``try_outer_loop_fusion_with_local_buf``): the model's rule names the buffers it keeps local, and
    they are the ones the generated code never allocates, as many as Inductor's own count says."""
    from torch._inductor import metrics

    import reorder.inductor.reorder_pass as reorder_pass
    from reorder import inductor as hook
    from reorder.inductor.compiled_budget import outer_loop_local_buffers

    predicted, scheduled = [], []
    model_of_nodes_before = reorder_pass.model_of_nodes

    def reading(session, name, nodes, *args):
        predicted.append(outer_loop_local_buffers(nodes))
        scheduled.append({buf.get_name() for node in nodes for buf in node.get_outputs()})
        return model_of_nodes_before(session, name, nodes, *args)

    metrics.reset()
    with patch.object(reorder_pass, "model_of_nodes", reading), hook.use(memory_budget=0.9) as session:
        torch.compile(lambda x: torch.softmax(x, -1) * 2)(torch.randn(4, 12, 64, 64))
    ((local,),) = [predicted]
    assert local, "Inductor kept nothing local here: the test no longer tests anything"
    assert sum(count.local_buffer_number for count in metrics.cpp_outer_loop_fused_inner_counts) == len(local)
    (name,) = [r.graph for r in session.graphs]
    allocated = {e.name for e in session.generated_code(name).events if e.kind in ("allocate", "extern")}
    assert local <= scheduled[0] and not local & allocated


@pytest.mark.slow
def test_the_sources_counted_are_the_kernels_inductor_defines(fresh_compiles):
    """Three alike blocks (a matrix product, then pointwise ops and a layer norm: one kernel group each) make
    three kernel groups that Inductor's C++ backend defines as one source: the count of distinct sources read
    from the scheduler nodes is the count of distinct kernels it defines, graph by graph."""
    from torch._inductor import config
    from torch._inductor.codegen import cpp
    from torch._inductor.virtualized import V

    counted, defined = [], {}
    define_kernel = cpp.CppScheduling.define_kernel

    def defining(self, src_code, *args, **kwargs):
        defined.setdefault(id(V.graph), set()).add(src_code)
        return define_kernel(self, src_code, *args, **kwargs)

    def counting(nodes):
        grouped, generated = kernel_groups(nodes), generated_kernels(nodes)
        kinds = "".join("E" if not g else "G" if made else "N" for g, made in zip(grouped, generated))
        counted.append((kernel_count(kinds), kernel_sources(nodes).count(kinds, range(len(nodes)))))
        return nodes

    def block(x, w):
        return torch.nn.functional.layer_norm(torch.relu(x @ w) * 2 + 1, (64,))

    def f(x, w1, w2, w3):
        return block(block(block(x, w1), w2), w3)

    with patch.object(cpp.CppScheduling, "define_kernel", defining), \
            config.patch(_post_fusion_custom_pass=counting):
        torch.compile(f)(torch.randn(32, 64), *(torch.randn(64, 64) for _ in range(3)))
    ((groups, sources),) = counted
    assert groups == 3 > sources, "the blocks' groups no longer repeat: the test no longer tests anything"
    assert [sources] == [len(sources_defined) for sources_defined in defined.values()]


def test_kernel_groups_are_counted_as_the_cpu_backend_builds_them():
    """A kernel group is a run of grouped nodes with a generated kernel in it; a run of no-ops builds nothing, an
    extern kernel ends a run, and without kernel groups (Triton) there is no count."""
    assert kernel_count("NNEGNGENE") == 1
    assert kernel_count("GEGNEG") == 3 and kernel_count("GGNGEE") == 1  # the same nodes, ordered 0, 2, 3, 5, 1, 4
    g = split_kernels()
    model = AllocationModel(g, (True, False, True, False), (True,) * g.num_buffers, grouped=(True, False, True, False))
    assert model.kinds == "GEGE" and model.kernels([0, 1, 2, 3]) == 2 and model.kernels([0, 2, 1, 3]) == 1
    assert dataclasses.replace(model, grouped=None).kernels([0, 1, 2, 3]) is None


def split_kernels(out_bytes: int = 500):
    """``a`` and ``b`` are generated kernels, ``mm`` and ``mm2`` extern ones: listed a, mm, b, mm2, the two
    generated kernels build apart (two groups); ``b`` moved before ``mm`` joins ``a``'s group."""
    return build_graph(
        [NodeSpec("a", [BufferSpec("A", 100)], reads=["x"]),
         NodeSpec("mm", [BufferSpec("M", 100)], reads=["A"]),
         NodeSpec("b", [BufferSpec("B", 10)], reads=["x"]),
         NodeSpec("mm2", [BufferSpec("O", out_bytes)], reads=["M", "B"])],
        [InputSpec("x", 1000)], ["O"])


def test_kernels_are_gathered_into_fewer_groups_where_that_allocates_no_more():
    """Listed a, mm, b, mm2, the generated kernels ``a`` and ``b`` build as two groups. With ``mm2``'s 500 B output
    the peak is at ``mm2`` either way (610 B), so ``b`` moves before ``mm`` and joins ``a``: one group, the same
    peak. With a 10 B output the peak is at ``mm`` (A + M, 200 B), and ``b``'s 10 B live beside them would raise
    it: no move. The caller's ceiling and a count of no replays hold every move back too."""
    generated, grouped = (True, False, True, False), (True, False, True, False)
    g = split_kernels()
    model = AllocationModel.build(g, generated, grouped=grouped, free_inputs={"x"})
    assert model.peak([0, 1, 2, 3]) == model.peak([0, 2, 1, 3]) == 610
    assert fewer_kernels([model], [0, 1, 2, 3], lambda order: True) == ([0, 2, 1, 3], 2, 1, 1, 0, 0)
    assert fewer_kernels([model], [0, 1, 2, 3], lambda order: False) == ([0, 1, 2, 3], 2, 2, 0, 0, 0)
    assert fewer_kernels([model], [0, 1, 2, 3], lambda order: True, evaluations=0) == ([0, 1, 2, 3], 2, 2, 0, 0, 0)
    small = AllocationModel.build(split_kernels(out_bytes=10), generated, grouped=grouped, free_inputs={"x"})
    assert small.peak([0, 1, 2, 3]) == 200 < small.peak([0, 2, 1, 3]) == 210
    assert fewer_kernels([small], [0, 1, 2, 3], lambda order: True) == ([0, 1, 2, 3], 2, 2, 0, 0, 0)
    # an extern kernel between two groups joins them by moving where it splits none: first, or (with that
    # order refused) after ``b``; ``a`` moved after ``e`` makes the first order too, and is refused with it
    joined = build_graph(
        [NodeSpec("a", [BufferSpec("A", 100)], reads=["x"]),
         NodeSpec("e", [BufferSpec("E", 10)], reads=["x"]),
         NodeSpec("b", [BufferSpec("B", 100)], reads=["A"]),
         NodeSpec("f", [BufferSpec("O", 500)], reads=["E", "B"])],
        [InputSpec("x", 1000)], ["O"])
    model = AllocationModel.build(joined, generated, grouped=grouped, free_inputs={"x"})
    gathered = fewer_kernels([model], [0, 1, 2, 3], lambda order: True)
    assert gathered == ([1, 0, 2, 3], 2, 1, 1, 0, 0) and model.peak(gathered.order) <= model.peak([0, 1, 2, 3])
    assert fewer_kernels([model], [0, 1, 2, 3], lambda order: order != [1, 0, 2, 3]) == ([0, 2, 1, 3], 2, 1, 1, 0, 0)
    # an extern kernel moved into a run whose one side holds only a no-op splits no group there: listed a, e, b,
    # c, n (G E G G N: two groups), e moved after c makes G G G E N, one group and a run of a no-op
    after_noop = build_graph(
        [NodeSpec("a", [BufferSpec("A", 100)], reads=["x"]),
         NodeSpec("e", [BufferSpec("E", 10)], reads=["x"]),
         NodeSpec("b", [BufferSpec("B", 100)], reads=["A"]),
         NodeSpec("c", [BufferSpec("C", 10)], reads=["B"]),
         NodeSpec("n", [BufferSpec("V", 0)], reads=["E"])],
        [InputSpec("x", 1000)], ["C", "V"])
    noop_model = AllocationModel.build(after_noop, (True, False, True, True, False),
                                       grouped=(True, False, True, True, True), free_inputs={"x"})
    assert noop_model.kinds == "GEGGN" and noop_model.kernels([0, 1, 2, 3, 4]) == 2
    gathered = fewer_kernels([noop_model], [0, 1, 2, 3, 4], lambda order: order[0] != 1)  # not e first
    assert gathered == ([0, 2, 3, 1, 4], 2, 1, 1, 0, 0)
    assert noop_model.peak(gathered.order) <= noop_model.peak([0, 1, 2, 3, 4])
    # without kernel groups (Triton) the order stays
    assert fewer_kernels([dataclasses.replace(model, grouped=None)], [0, 1, 2, 3], lambda order: True) == (
        [0, 1, 2, 3], 0, 0, 0, 0, 0)


def test_a_kernel_group_that_repeats_another_is_one_source():
    """Two groups are one source when their generated members have the same code, in order, and name their
    buffers alike (numbered where the group first names them); a member whose code is unknown makes its group a
    source of its own."""
    kinds = "GGEGGE"  # a layer: add, mul (one group), a matrix product; the next layer the same
    code = ["add", "mul", None, "add", "mul", None]
    names = [["x", "A"], ["A", "B"], [], ["y", "C"], ["C", "D"], []]
    assert KernelSources(code, names).count(kinds, range(6)) == 1
    assert KernelSources(code, names).count("GGEGGE", [0, 1, 2, 4, 3, 5]) == 2  # mul before add: another source
    assert KernelSources(code, [*names[:4], ["y", "D"], []]).count(kinds, range(6)) == 2  # reads the layer's input
    assert KernelSources(["add", "mul", None, None, "mul", None], names).count(kinds, range(6)) == 2
    assert KernelSources(code, names).count("GNEGNE", range(6)) == 1  # no-ops put nothing into a source
    assert KernelSources(code, names).count("GGEGEE", range(6)) == 2  # (add, mul) and (add) groups


def test_the_sources_with_a_node_put_in_are_those_of_the_new_order_at_every_place():
    """:class:`SourcesWithInsertion` counts, from the groups beside a place, what :meth:`KernelSources.count` counts
    for the whole order with the node put in there: a generated kernel or a no-op joins the runs on either side
    (two groups become one), an extern kernel cuts the run it lands in (one group becomes two, or one and a run
    of no-ops), and a run of no-ops only is no group. Random orders of repeated code check every place and kind."""
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(0, 14)
        code = [rng.choice(["add", "mul", None]) for _ in range(n + 1)]
        names = [[rng.choice("xyAB")] for _ in range(n + 1)]
        order = rng.sample(range(n + 1), n + 1)
        node, rest = order[0], order[1:]
        letters = "".join(rng.choice("GGNE") for _ in rest)
        for kind in "GNE":  # a node has one kind (the sources remember a group by its nodes): one count per kind
            counted = KernelSources(code, names).insertions(letters, rest)
            assert counted.count(0, node, "E") == KernelSources(code, names).count(letters, rest)  # beside no run
            for place in range(len(rest) + 1):
                whole = KernelSources(code, names).count(letters[:place] + kind + letters[place:],
                                                         [*rest[:place], node, *rest[place:]])
                assert counted.count(place, node, kind) == whole, (letters, place, kind)
    sources = KernelSources(["add", "add", "add", None], [["x", "A"], ["x", "A"], ["x", "A"], []])
    assert sources.insertions("GG", [0, 1]).count(1, 3, "E") == 1  # cut into two groups of one source
    assert sources.insertions("GEG", [0, 3, 1]).count(2, 2, "G") == 2  # (add) and (add, add): two sources


def two_layers():
    """Two layers, each two generated kernels (``a``, ``b``: one kernel group) and an extern kernel reading both;
    listed a1, b1, mm1, b2, a2, mm2, the second layer's group lists its kernels the other way round."""
    nodes = []
    for layer, source in ((1, "x"), (2, "M1")):
        nodes += [NodeSpec(f"a{layer}", [BufferSpec(f"A{layer}", 100)], reads=[source]),
                  NodeSpec(f"b{layer}", [BufferSpec(f"B{layer}", 100)], reads=[source]),
                  NodeSpec(f"mm{layer}", [BufferSpec(f"M{layer}", 100)], reads=[f"A{layer}", f"B{layer}"])]
    graph = build_graph(nodes, [InputSpec("x", 1000)], ["M2"])
    sources = KernelSources(["add", "mul", None, "add", "mul", None],
                            [["x", "A1"], ["x", "B1"], [], ["M1", "A2"], ["M1", "B2"], []])
    model = AllocationModel.build(graph, (True, True, False) * 2, grouped=(True, True, False) * 2,
                                  free_inputs={"x"})
    return model, sources


def test_kernels_are_gathered_into_fewer_sources_where_that_allocates_no_more():
    """Listed a1, b1, mm1, b2, a2, mm2, the two layers' groups are two sources in two groups, and no move lowers
    the count of groups; ``a1`` moved after ``b1`` makes the first layer's group repeat the second's, one source,
    at the same peak. Without the sources, or with no count of them left, nothing moves; a caller's ceiling holds
    it back too."""
    model, sources = two_layers()
    listed = [0, 1, 2, 4, 3, 5]
    assert model.kernels(listed) == 2 and sources.count("GGEGGE", listed) == 2
    assert model.peak(listed) == model.peak([0, 1, 2, 3, 4, 5])
    assert fewer_kernels([model], listed, lambda order: True, sources=sources) == (
        [1, 0, 2, 4, 3, 5], 2, 2, 1, 2, 1)
    assert fewer_kernels([model], listed, lambda order: True) == (listed, 2, 2, 0, 0, 0)
    assert fewer_kernels([model], listed, lambda order: True, sources=sources, checks=0) == (listed, 2, 2, 0, 2, 2)
    assert fewer_kernels([model], listed, lambda order: False, sources=sources) == (listed, 2, 2, 0, 2, 2)
    # a move that joins two groups is kept when the groups were one source and stay one; where they were two
    # sources, it makes one, and both counts fall
    split = AllocationModel.build(split_kernels(), (True, False, True, False), grouped=(True, False, True, False),
                                  free_inputs={"x"})
    repeated = KernelSources(["add", None, "add", None], [["x", "A"], [], ["x", "B"], []])
    assert repeated.count("GEGE", [0, 1, 2, 3]) == 1 and repeated.count("GGEE", [0, 2, 1, 3]) == 1
    assert fewer_kernels([split], [0, 1, 2, 3], lambda order: True, sources=repeated)[:4] == ([0, 2, 1, 3], 2, 1, 1)
    differing = KernelSources(["add", None, "mul", None], [["x", "A"], [], ["x", "B"], []])
    assert fewer_kernels([split], [0, 1, 2, 3], lambda order: True, sources=differing) == (
        [0, 2, 1, 3], 2, 1, 1, 2, 1)
    # three groups of one source: joining two of them makes a second source, so no move is kept
    three = build_graph(
        [NodeSpec("a", [BufferSpec("A", 100)], reads=["x"]),
         NodeSpec("mm", [BufferSpec("M", 100)], reads=["A"]),
         NodeSpec("b", [BufferSpec("B", 10)], reads=["x"]),
         NodeSpec("mm2", [BufferSpec("O", 100)], reads=["M", "B"]),
         NodeSpec("c", [BufferSpec("C", 10)], reads=["x"]),
         NodeSpec("mm3", [BufferSpec("P", 500)], reads=["O", "C"])],
        [InputSpec("x", 1000)], ["P"])
    split3 = AllocationModel.build(three, (True, False) * 3, grouped=(True, False) * 3, free_inputs={"x"})
    alike = KernelSources(["add", None] * 3, [["x", "A"], [], ["x", "B"], [], ["x", "C"], []])
    assert fewer_kernels([split3], list(range(6)), lambda order: True)[:4] == ([4, 0, 2, 1, 3, 5], 3, 1, 2)
    assert fewer_kernels([split3], list(range(6)), lambda order: True, sources=alike) == (
        list(range(6)), 3, 3, 0, 1, 1)


def test_a_budgeted_graph_keeps_its_order_with_the_generated_kernels_gathered():
    """Listed a, mm, b, mm2 (the baseline's order), ``a`` and ``b`` build as two kernel groups; the pass moves
    ``b`` into ``a``'s group, which allocates no more and keeps Inductor's estimate under stock's, and says so.
    Without kernel groups (Triton) the order is the baseline's."""
    g = split_kernels()
    generated = (True, False, True, False)
    model = AllocationModel.build(g, generated, grouped=generated, free_inputs={"x"})
    result = reorder_for_peak_memory(g, ["baseline"])
    choice = choose_order(g, g, result, allocation=model)
    assert choice.order == [0, 2, 1, 3] and choice.method == "baseline_gathered"
    assert model.kernels(choice.order) == 1 and model.peak(choice.order) <= model.peak(result.order)
    assert choice.peak == estimate_peak_memory(g, choice.order).peak <= result.peak
    assert choice.notes["kernels"] == ("1 node move(s) gathered the generated kernels into 1 kernel group(s), "
                                       "was 2, allocating no more")
    plain = choose_order(g, g, result, allocation=dataclasses.replace(model, grouped=None))
    assert plain.order == [0, 1, 2, 3] and plain.method == "baseline" and "kernels" not in plain.notes
