"""The memory budget checked on the compiled graphs: replayed allocations, and the record amended once a region's
forward and backward are known (hand-built scheduler graphs; the real compiles are in test_budget_inductor.py)."""

import logging

import pytest

from reorder.graph import BufferSpec, InputSpec, NodeSpec, build_graph
from reorder.inductor import PartitionRecord
from reorder.inductor.compiled_budget import RegionPlan, allocated_peak, expect_region, record_compiled, region_of
from reorder.inductor.session import Session


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
    assert allocated_peak(g, [0, 1], GENERATED, frozenset({"primals_1"}), frozenset({"saved"})) == 1100
    # not donated: mul allocates its own 400 B beside the saved value
    assert allocated_peak(g, [0, 1], GENERATED, frozenset({"primals_1"}), frozenset()) == 1400
    # an extern kernel never writes in place
    assert allocated_peak(g, [0, 1], [False, False], frozenset({"primals_1"}), frozenset({"saved"})) == 1400
    # the parameter counted: live until mm, its last reader
    assert allocated_peak(g, [0, 1], GENERATED, frozenset(), frozenset({"saved"})) == 2100


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


def compile_both(session: Session, prefix: str = "model__0") -> None:
    record_compiled(session, f"{prefix}_forward_1", forward(), [0], [True])
    record_compiled(session, f"{prefix}_backward_3", backward(), [0, 1], GENERATED)


def test_a_region_whose_compiled_graphs_fit_keeps_its_verdict_with_their_peak(caplog):
    session, made = planned(1200)
    record_compiled(session, "model__0_forward_1", forward(), [0], [True])
    assert session.partitions == [made]  # the backward is not known yet
    with caplog.at_level(logging.WARNING, logger="reorder"):
        record_compiled(session, "model__0_backward_3", backward(), [0, 1], GENERATED)
    (amended,) = session.partitions
    assert amended.compiled_peak == 50 + 1100 and amended.feasible and caplog.text == ""
    assert amended.peak == made.peak and amended.source == made.source


def test_a_budget_the_compiled_graphs_exceed_is_not_met_and_warns(caplog):
    session, _ = planned(1100)
    with caplog.at_level(logging.WARNING, logger="reorder"):
        compile_both(session)
    (amended,) = session.partitions
    assert amended.compiled_peak == 1150 and not amended.feasible
    assert "(within, but NOT as compiled, compiled graphs 1.12 KiB)" in session.summary(), session.summary()
    assert "memory budget 1,100 B is met by the partition's estimate (1,000 B) but not by the graphs Inductor " \
           "compiled from it (1,150 B)" in caplog.text


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
    """The probe's scratch of the joint graph's ``mm`` (500 B) goes to the scheduler node lowered from it."""
    session, _ = planned(2000, scratch={"backward": {"mm": 500}, "forward": {"mm": 10_000}})
    record_compiled(session, "model__0_forward_1", forward(), [0], [True], [frozenset({"relu"})])
    record_compiled(session, "model__0_backward_3", backward(), [0, 1], GENERATED,
                    [frozenset({"mm", "view"}), frozenset({"mul"})])
    (amended,) = session.partitions
    assert amended.compiled_peak == 50 + 400 + 100 + 600 + 500 and amended.feasible
