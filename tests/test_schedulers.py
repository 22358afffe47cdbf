"""Ordering methods: Inductor's orders node for node, valid orders, and ours never worse."""

import logging

import pytest
from hypothesis import given, settings
from helpers import FIGURES, GRAPH_NAMES, GRAPHS, all_topological_orders, build, graph_specs

from reorder import BufferSpec, NodeSpec, ReorderError, build_graph, estimate_peak_memory, load_graph
from reorder.schedulers import METHODS, bfs_order, dfs_order, lpmf_order, reorder_for_peak_memory
from reorder.schedulers.exact import Exact
from reorder.schedulers.refine import refine_order

PORTS = {"lpmf": lpmf_order, "bfs": bfs_order, "dfs": dfs_order}


@pytest.mark.parametrize("name", GRAPH_NAMES)
@pytest.mark.parametrize("method", sorted(PORTS))
def test_ports_reproduce_torch_orders(name, method):
    graph = load_graph(GRAPHS / f"{name}.json")
    assert graph.names_of(PORTS[method](graph)) == FIGURES[name]["orders"][f"topological_sort_{method}"]


@settings(max_examples=60)
@given(spec=graph_specs(max_nodes=12))
def test_ports_match_torch_functions_on_random_graphs(spec):
    """Every port against torch's own function; LPMF also with its segment tree forced on
    (it normally serves only ready sets wider than these graphs have)."""
    figures = pytest.importorskip("reorder.inductor.figures")
    from torch._inductor import config

    from reorder.schedulers import lpmf as lpmf_module

    graph = build(spec)
    reference = figures.torch_reference(graph)
    for name, fn in PORTS.items():
        assert fn(graph) == reference.method(name)(), name
    saved = lpmf_module.TREE_ABOVE, lpmf_module.TREE_BELOW
    for tree_above, tree_below in (saved, (-1, -1)):
        lpmf_module.TREE_ABOVE, lpmf_module.TREE_BELOW = tree_above, tree_below
        try:
            assert lpmf_order(graph) == reference.method("lpmf")()
            for threshold in (1, 200, 10_000):
                with config.patch(size_threshold_for_succ_based_strategy=threshold):
                    assert lpmf_order(graph, threshold) == reference.method("lpmf")()
        finally:
            lpmf_module.TREE_ABOVE, lpmf_module.TREE_BELOW = saved


def test_lpmf_on_a_wide_graph_matches_torch():
    figures = pytest.importorskip("reorder.inductor.figures")
    from benchmarks.synthetic import layered_graph

    for fan_in in (1, 2):
        graph = layered_graph(2000, 200, fan_in=fan_in)  # about 200 ready nodes: the tree path
        assert lpmf_order(graph) == figures.torch_reference(graph).method("lpmf")()


@pytest.mark.parametrize("name", ["resnet18_train_1", "gpt_train_1"])
def test_lpmf_successor_strategy_matches_torch(name):
    figures = pytest.importorskip("reorder.inductor.figures")
    from torch._inductor import config

    graph = load_graph(GRAPHS / f"{name}.json")
    reference = figures.torch_reference(graph)
    for threshold in (1, 1 << 16, 1 << 20):
        with config.patch(size_threshold_for_succ_based_strategy=threshold):
            assert lpmf_order(graph, threshold) == reference.method("lpmf")()


def chain(n):
    return build_graph([NodeSpec(f"n{i}", [BufferSpec(f"b{i}", 8)], reads=[f"b{i - 1}"] if i else [])
                        for i in range(n)], outputs=[f"b{n - 1}"])


def test_no_recursion_on_a_100k_chain():
    graph = chain(100_000)
    for fn in PORTS.values():
        order = fn(graph)
        graph.check_order(order)
    assert estimate_peak_memory(graph, dfs_order(graph)).peak == 16


@settings(max_examples=80)
@given(spec=graph_specs(max_nodes=7))
def test_exact_finds_the_brute_force_optimum_and_refine_never_worsens(spec):
    graph = build(spec)
    orders = all_topological_orders(graph)
    optimum = min(estimate_peak_memory(graph, o).peak for o in orders)
    worst = max(orders, key=lambda o: estimate_peak_memory(graph, o).peak)
    outcome = Exact().run(graph, worst)
    graph.check_order(outcome.order)
    assert outcome.optimal
    assert estimate_peak_memory(graph, outcome.order).peak == optimum
    refined = refine_order(graph, worst)
    graph.check_order(refined)
    assert optimum <= estimate_peak_memory(graph, refined).peak <= estimate_peak_memory(graph, worst).peak


def test_exact_says_when_it_gives_up():
    graph = load_graph(GRAPHS / "resnet18_train_1.json")
    start = list(range(graph.num_nodes))
    outcome = Exact(max_states=5).run(graph, start)
    assert not outcome.optimal and "gave up after 6 states (max_states=5)" in outcome.note
    graph.check_order(outcome.order)  # the best order it found before giving up
    assert estimate_peak_memory(graph, outcome.order).peak <= estimate_peak_memory(graph, start).peak


@pytest.mark.parametrize("name", GRAPH_NAMES)
def test_best_of_is_never_worse_than_inductor(name):
    graph = load_graph(GRAPHS / f"{name}.json")
    result = reorder_for_peak_memory(graph)
    graph.check_order(result.order)
    assert result.peak == estimate_peak_memory(graph, result.order).peak
    assert result.peak <= min(FIGURES[name]["peak"].values())
    assert result.lower_bound <= result.peak
    for method in ("lpmf", "bfs", "dfs"):
        assert result.peaks[method] == FIGURES[name]["peak"][f"topological_sort_{method}"]
    assert set(result.seconds) == set(result.peaks) == {"baseline", "lpmf", "bfs", "dfs", "refine", "exact"}


@pytest.mark.parametrize("name, torch_best, ours_at_most", [
    ("gpt_train_1", 43537408, 41963520),
    ("vgg16_train_1", 73531392, 72482816),
    ("alexnet_train_1", 52567696, 52272384),
])
def test_best_of_beats_inductor_on_backward_graphs(name, torch_best, ours_at_most):
    graph = load_graph(GRAPHS / f"{name}.json")
    assert min(FIGURES[name]["peak"].values()) == torch_best
    assert reorder_for_peak_memory(graph).peak <= ours_at_most


def test_best_of_logs_one_line_per_method(caplog):
    graph = load_graph(GRAPHS / "mlp_train_1.json")
    with caplog.at_level(logging.INFO, logger="reorder"):
        reorder_for_peak_memory(graph, ["lpmf", "bfs"])
    lines = [r.getMessage() for r in caplog.records if r.name == "reorder"]
    assert any(line.startswith("baseline peak memory: ") for line in lines)
    assert any(line.startswith("lpmf peak memory: ") for line in lines)
    assert any(line.startswith("bfs peak memory: ") for line in lines)


def test_method_specs_and_errors():
    graph = load_graph(GRAPHS / "mlp_train_1.json")
    result = reorder_for_peak_memory(graph, ["exact:max_states=10", "refine:window=4:max_work=100000"])
    assert set(result.peaks) == {"baseline", "exact", "refine"}
    with pytest.raises(ReorderError, match="unknown method 'fastest'"):
        reorder_for_peak_memory(graph, ["fastest"])
    with pytest.raises(ReorderError, match="option 'window=big' is not key=number"):
        reorder_for_peak_memory(graph, ["refine:window=big"])
    with pytest.raises(ReorderError, match="unexpected keyword argument 'colour'"):
        reorder_for_peak_memory(graph, ["refine:colour=1"])
    assert {"baseline", "lpmf", "bfs", "dfs", "refine", "exact"} <= set(METHODS)


def test_exact_skips_graphs_too_large_for_its_bitmasks_before_allocating_them():
    from benchmarks.synthetic import layered_graph

    graph = layered_graph(6000, 200)
    outcome = Exact().run(graph, list(range(graph.num_nodes)))
    assert outcome.note == f"skipped: {graph.num_nodes} nodes (max_nodes=5000)" and not outcome.optimal


def test_refine_effort_is_counted_not_timed(monkeypatch):
    """Each full estimate costs the graph's size in work units: the budget bounds how many there are."""
    from benchmarks.synthetic import plateau_graph
    from reorder.schedulers import refine

    graph = plateau_graph(3000, 100)  # most steps of any order sit at the peak
    unit = graph.num_nodes + graph.num_buffers + sum(len(r) for r in graph.reads)
    calls = []
    real = refine.estimate_peak_memory
    monkeypatch.setattr(refine, "estimate_peak_memory", lambda *a: calls.append(1) or real(*a))
    start = list(range(graph.num_nodes))
    order = refine_order(graph, start, max_work=20 * unit)
    assert len(calls) <= 20 + 2  # the budget, plus the first and the last estimate
    assert estimate_peak_memory(graph, order).peak <= estimate_peak_memory(graph, start).peak
    assert refine_order(graph, start, max_work=20 * unit) == order  # same counts, same answer
