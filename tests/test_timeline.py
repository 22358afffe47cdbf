"""The estimator: torch 2.13's figures to the byte, and a brute-force reference on random graphs."""

import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers import FIGURES, GRAPH_NAMES, GRAPHS, all_topological_orders, build, graph_specs, random_order, reference_peak

from reorder import (BufferSpec, InputSpec, NodeSpec, build_graph, estimate_peak_memory,
                     estimate_peak_memory_allocfree, load_graph, lower_bound)

ROOT = GRAPHS.parent.parent.parent
#: ``lower_bound`` of every bundled graph, recorded with the previous release's bitmask pass.
RECORDED_BOUNDS = json.loads((ROOT / "tests" / "lower_bounds.json").read_text())


@pytest.mark.parametrize("name", GRAPH_NAMES)
def test_baseline_peaks_equal_torch_figures(name):
    graph = load_graph(GRAPHS / f"{name}.json")
    assert estimate_peak_memory(graph).peak == FIGURES[name]["peak"]["baseline"]
    assert estimate_peak_memory_allocfree(graph).peak == FIGURES[name]["peak_allocfree_baseline"]


@pytest.mark.parametrize("name", GRAPH_NAMES)
def test_peaks_of_torch_orders_equal_torch_figures(name):
    graph = load_graph(GRAPHS / f"{name}.json")
    for method, names in FIGURES[name]["orders"].items():
        assert estimate_peak_memory(graph, graph.order_from_names(names)).peak == FIGURES[name]["peak"][method]


@settings(max_examples=150)
@given(spec=graph_specs(), priorities=st.lists(st.integers(0, 1000), max_size=12))
def test_estimator_matches_brute_force_reference(spec, priorities):
    graph = build(spec)
    order = random_order(graph, priorities)
    timeline = estimate_peak_memory(graph, order)
    assert timeline.peak == reference_peak(spec, graph.names_of(order))
    assert estimate_peak_memory_allocfree(graph, order).peak == timeline.peak
    assert len(timeline.live) == graph.num_nodes + 1


@settings(max_examples=80)
@given(spec=graph_specs(max_nodes=7))
def test_lower_bound_is_below_every_order_in_both_models(spec):
    graph = build(spec)
    orders = all_topological_orders(graph)
    best = min(estimate_peak_memory(graph, o).peak for o in orders)
    assert min(estimate_peak_memory_allocfree(graph, o).peak for o in orders) == best
    # A smaller work budget only weakens the bound; the full one is still below the optimum.
    assert lower_bound(graph, max_work=0) <= lower_bound(graph, max_work=2) <= lower_bound(graph) <= best


def test_precedence_bound_proves_an_order_optimal_that_working_sets_could_not():
    from reorder.schedulers import reorder_for_peak_memory

    graph = load_graph(GRAPHS / "gpt_infer_0.json")
    result = reorder_for_peak_memory(graph, ["lpmf"])
    assert lower_bound(graph, max_work=0) == 4718592 < lower_bound(graph) == result.peak == 6291456
    assert result.optimal and result.gap == 0


@pytest.mark.parametrize("path", sorted(RECORDED_BOUNDS))
def test_lower_bound_of_every_bundled_graph_equals_the_recorded_figure(path):
    assert lower_bound(load_graph(ROOT / path)) == RECORDED_BOUNDS[path]


def parallel_chains(chains: int, length: int, size: int = 4096):
    """``chains`` chains of ``length`` nodes reading one input, and a sink that reads every tail."""
    nodes, tails = [], []
    for c in range(chains):
        previous = "x"
        for k in range(length):
            nodes.append(NodeSpec(f"c{c}_{k}", [BufferSpec(f"b{c}_{k}", size)], reads=[previous]))
            previous = f"b{c}_{k}"
        tails.append(previous)
    nodes.append(NodeSpec("sink", [BufferSpec("out", size)], reads=tails))
    return build_graph(nodes, [InputSpec("x", size)], ["out"], name=f"chains_{chains}x{length}")


@pytest.mark.parametrize("chains", [1, 10, 100])
def test_lower_bound_memory_is_linear_in_the_graph_whatever_its_shape(chains):
    graph = parallel_chains(chains, 6000 // chains)
    tracemalloc.start()
    try:
        bound = lower_bound(graph)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # The sink reads every tail and writes its output: nothing forces more (precedence adds nothing).
    assert bound == 4096 * (chains + 1)
    # A few arrays over 6,001 nodes and buffers: under 200 bytes each (ancestor masks took N**2 / 8).
    assert peak < 200 * graph.num_nodes


def test_lower_bound_budget_only_weakens_the_bound_on_a_graph_where_it_bites():
    graph = load_graph(GRAPHS / "gpt_train_1.json")
    full = lower_bound(graph)
    partial = [lower_bound(graph, max_work=w) for w in (0, 10, 100, 1000, 10_000)]
    assert partial == sorted(partial) and partial[-1] <= full


@settings(max_examples=40)
@given(spec=graph_specs(), priorities=st.lists(st.integers(0, 1000), max_size=12))
def test_estimator_matches_torch_on_random_graphs(spec, priorities):
    figures = pytest.importorskip("reorder.inductor.figures")
    graph = build(spec)
    if any(graph.is_input[b] and graph.freeable[b] and not graph.readers[b] for b in range(graph.num_buffers)):
        return  # torch only models inputs that some node reads
    order = random_order(graph, priorities)
    reference = figures.torch_reference(graph)
    assert estimate_peak_memory(graph, order).peak == reference.estimate(order)[0]
    assert list(estimate_peak_memory(graph, order).live) == reference.estimate(order)[1]
    assert estimate_peak_memory_allocfree(graph, order).peak == reference.estimate_allocfree(order)
