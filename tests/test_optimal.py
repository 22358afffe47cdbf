"""The optimal method (CP-SAT): its model is the estimator, its proofs hold, its answers repeat."""

import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers import GRAPHS, all_topological_orders, build, graph_specs, random_order

from reorder import ReorderError, estimate_peak_memory, load_graph
from reorder.cli import main
from reorder.schedulers import reorder_for_peak_memory
from reorder.schedulers.optimal import Optimal, segments
from reorder.timeline import estimate_peak_memory_allocfree, lifetimes, lower_bound

pytest.importorskip("ortools")


@settings(max_examples=60)
@given(spec=graph_specs(max_nodes=9), priorities=st.lists(st.integers(0, 99), max_size=9))
def test_segments_add_up_to_the_estimators_live_bytes(spec, priorities):
    graph = build(spec)
    order = random_order(graph, priorities)
    life = lifetimes(graph, order)
    segs, unpaid = segments(graph)
    n = graph.num_nodes
    live = []
    for t in range(n + 1):
        covered = 0
        for seg in segs:
            first = 0 if seg.start_node is None else life.step[seg.start_node]
            last = n if seg.end_buffer is None else life.end[seg.end_buffer]
            covered += seg.demand if first <= t <= last else 0
        live.append(covered - unpaid)
    assert live == list(estimate_peak_memory(graph, order).live)
    assert [after_alloc for after_alloc, _ in estimate_peak_memory_allocfree(graph, order).phases] == live[:n]


@settings(max_examples=40)
@given(spec=graph_specs(max_nodes=7), model=st.sampled_from(["net", "allocfree"]),
       search_states=st.sampled_from([0, 1_000_000]))
def test_optimal_finds_and_proves_the_brute_force_optimum(spec, model, search_states):
    """CP-SAT alone (``search_states=0``) and after the peak search."""
    graph = build(spec)
    estimate = estimate_peak_memory if model == "net" else estimate_peak_memory_allocfree
    orders = all_topological_orders(graph)
    optimum = min(estimate(graph, o).peak for o in orders)
    worst = max(orders, key=lambda o: estimate(graph, o).peak)
    outcome = Optimal(effort=5, model=model, search_states=search_states).run(graph, worst)
    graph.check_order(outcome.order)
    assert outcome.optimal and estimate(graph, outcome.order).peak == optimum == outcome.bound


def test_a_bound_without_a_proof_is_certified_and_never_above_what_was_found():
    from benchmarks.synthetic import layered_graph

    graph = layered_graph(60, 6)
    start = list(range(graph.num_nodes))
    outcome = Optimal(effort=0.5, search_states=2_000).run(graph, start)  # the search gives up, CP-SAT goes on
    found = estimate_peak_memory(graph, outcome.order).peak
    assert not outcome.optimal and "bound" in outcome.note
    assert lower_bound(graph) <= outcome.bound < found <= estimate_peak_memory(graph, start).peak


@pytest.mark.parametrize("workers", [1, 2])
def test_same_graph_same_answer(workers):
    from benchmarks.synthetic import layered_graph

    graph = layered_graph(60, 6)
    start = list(range(graph.num_nodes))
    first, second = (Optimal(effort=0.5, workers=workers, search_states=2_000).run(graph, start) for _ in range(2))
    assert first == second


def test_best_of_reports_the_proof_as_the_bound():
    graph = load_graph(GRAPHS / "vgg16_train_1.json")
    default = reorder_for_peak_memory(graph)
    result = reorder_for_peak_memory(graph, ["lpmf", "bfs", "dfs", "refine", "optimal:effort=30"])
    assert result.optimal and result.gap == 0 and result.lower_bound == result.peak == 72343552
    # The default pass's exact search reaches and proves the same minimum (refine alone stops at 72,482,816).
    assert default.peak == 72343552 and default.optimal and default.peaks["refine"] == 72482816


def test_without_ortools_the_method_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)
    graph = load_graph(GRAPHS / "gpt_train_1.json")
    with pytest.raises(ReorderError, match=r"install the 'exact' extra"):
        Optimal(search_states=0).run(graph, list(range(graph.num_nodes)))


def test_cli_optimize_reports_order_proof_and_certified_gap(capsys):
    path = GRAPHS / "alexnet_train_1.json"
    assert main(["optimize", str(path), "--methods", "optimal:effort=20,workers=1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    graph = load_graph(path)
    assert estimate_peak_memory(graph, graph.order_from_names(data["order"])).peak == data["best"]["peak"] == 52272384
    assert data["optimal"] is True and data["gap"] == 0 and data["lower_bound"] == 52272384


@settings(max_examples=15)
@given(spec=graph_specs(max_nodes=6))
def test_joint_order_and_offsets_match_the_brute_force_smallest_slab(spec):
    from reorder.joint import joint_optimum
    from reorder.planning import PlanOptions, plan_memory

    graph = build(spec)
    exact = PlanOptions(alignment=1, exact=True)
    smallest = min(plan_memory(graph, o, exact).tensor_bytes for o in all_topological_orders(graph))
    joint = joint_optimum(graph, effort=5, alignment=1)
    graph.check_order(joint.order)
    assert joint.proven and joint.slab == joint.bound == smallest <= joint.min_peak_slab
    assert joint.verdict == ("below" if smallest < joint.min_peak_slab else "coincide")


def test_recorded_optima_cover_the_bundled_graphs_and_agree_with_them():
    from reorder.cli import graph_files
    from reorder.optima import load_optima

    optima = load_optima(GRAPHS)
    files = graph_files(str(GRAPHS))
    assert set(optima) == {f.stem for f in files}
    for path in files:
        graph, record = load_graph(path), optima[path.stem]
        assert record.nodes == graph.num_nodes
        assert lower_bound(graph) <= record.bound <= record.peak <= record.default_peak
        assert record.default_peak == reorder_for_peak_memory(graph).peak



def test_a_peak_search_over_its_byte_budget_hands_over_to_cp_sat():
    """``search_bytes`` too small for even the search's arrays: nothing is searched, CP-SAT proves the same minimum."""
    graph = load_graph(GRAPHS / "mlp_train_1.json")
    start = list(range(graph.num_nodes))
    searched = Optimal(effort=5).run(graph, start)
    solved = Optimal(effort=5, search_bytes=1).run(graph, start)
    assert searched.note.startswith("proven optimal by the peak search") and solved.note == "proven optimal"
    assert searched.optimal and solved.optimal
    assert estimate_peak_memory(graph, solved.order).peak == estimate_peak_memory(graph, searched.order).peak
