"""Ordering methods: Inductor's orders node for node, valid orders, and ours never worse."""

import logging

import pytest
from hypothesis import given, settings
from helpers import FIGURES, GRAPH_NAMES, GRAPHS, all_topological_orders, build, graph_specs

from reorder import BufferSpec, NodeSpec, ReorderError, build_graph, estimate_peak_memory, load_graph
from reorder.schedulers import (INDUCTOR_METHODS, METHODS, bfs_order, dfs_order, lpmf_order, make_method,
                               reorder_for_peak_memory, split_methods)
from reorder.schedulers.exact import Exact
from reorder.schedulers.optimal import Optimal
from reorder.schedulers.refine import Refine, refine_order
from reorder.timeline import lower_bound

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


@pytest.mark.parametrize("name", GRAPH_NAMES)
def test_a_caller_that_needs_no_proof_gets_the_same_order_and_a_bound_still_below_it(name):
    graph = load_graph(GRAPHS / f"{name}.json")
    proved = reorder_for_peak_memory(graph, INDUCTOR_METHODS)
    quick = reorder_for_peak_memory(graph, INDUCTOR_METHODS, bound_work=0)
    assert (quick.order, quick.peak, quick.method, quick.peaks) == (proved.order, proved.peak, proved.method,
                                                                    proved.peaks)
    assert quick.lower_bound == lower_bound(graph, 0) <= proved.lower_bound <= proved.peak


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
    assert {"baseline", "lpmf", "bfs", "dfs", "refine", "exact"} <= set(METHODS)


@pytest.mark.parametrize("spec, message", [
    ("exact:max_state=10", "method 'exact': unknown option 'max_state'; options: max_states (int >= 1), "
                           "max_nodes (int >= 1), max_bytes (int >= 1)"),
    ("bfs:depth=2", "method 'bfs': unknown option 'depth'; it takes no options"),
    ("exact:max_states=-1", "method 'exact': option max_states=-1: expected int >= 1"),
    ("exact:max_states=0", "method 'exact': option max_states=0: expected int >= 1"),
    ("exact:max_states=1.5", "method 'exact': option max_states='1.5': expected int >= 1"),
    ("refine:window=big", "method 'refine': option window='big': expected int >= 1"),
    ("refine:move_candidates=-1", "method 'refine': option move_candidates=-1: expected int >= 0"),
    ("lpmf:size_threshold=-5", "method 'lpmf': option size_threshold=-5: expected int >= 0"),
    ("optimal:effort=0", "method 'optimal': option effort=0.0: expected number > 0"),
    ("optimal:model=exactly", "method 'optimal': option model='exactly': expected one of 'net', 'allocfree'"),
    ("optimal:accept_gap=-0.1", "method 'optimal': option accept_gap=-0.1: expected number >= 0"),
    ("refine:window", "method 'refine': option 'window' is not key=value"),
    ("refine:=4", "method 'refine': option '=4' is not key=value"),
    ("exact:max_states=5:max_states=6", "method 'exact': option 'max_states' given twice"),
])
def test_a_bad_method_option_is_one_line_naming_method_option_value_and_what_is_allowed(spec, message):
    assert message_of(make_method, spec) == message


def message_of(call, *args) -> str:
    """The message of the :class:`ReorderError` that ``call(*args)`` raises."""
    with pytest.raises(ReorderError) as caught:
        call(*args)
    return str(caught.value)


@pytest.mark.parametrize("options, message", [
    ({"max_states": -1}, "method 'exact': option max_states=-1: expected int >= 1"),
    ({"max_nodes": True}, "method 'exact': option max_nodes=True: expected int >= 1"),
    ({"max_states": "10"}, "method 'exact': option max_states='10': expected int >= 1"),
])
def test_python_callers_get_the_same_checks_as_the_command_line(options, message):
    assert message_of(lambda: Exact(**options)) == message


def test_options_of_every_kind_are_read_from_the_command_line():
    assert make_method("optimal:effort=2:workers=3:model=allocfree:accept_gap=0") == Optimal(
        effort=2.0, workers=3, model="allocfree", accept_gap=0.0)
    assert make_method("refine:move_candidates=0") == Refine(move_candidates=0)  # 0: no single-node moves
    assert make_method("exact:") == Exact()


@pytest.mark.parametrize("text, message", [
    ("", "methods '': name at least one method; known: baseline, bfs, dfs, exact, lpmf, optimal, refine"),
    (" , ", "methods ' , ': name at least one method; known: baseline, bfs, dfs, exact, lpmf, optimal, refine"),
    ("max_states=5,exact", "methods 'max_states=5,exact': option 'max_states=5' comes before any method"),
])
def test_a_method_list_that_names_no_method_is_an_error(text, message):
    assert message_of(split_methods, text) == message


def test_split_methods_joins_options_to_the_method_before_them():
    assert split_methods("lpmf, optimal:effort=5,workers=2 ,exact") == ["lpmf", "optimal:effort=5:workers=2", "exact"]


def test_an_empty_method_list_is_an_error_not_a_baseline_only_run():
    graph = load_graph(GRAPHS / "mlp_train_1.json")
    assert message_of(reorder_for_peak_memory, graph, []) == (
        "methods: name at least one method; known: baseline, bfs, dfs, exact, lpmf, optimal, refine")


def test_cli_prints_the_method_options_and_exits_2(capsys):
    from reorder.cli import main

    path = str(GRAPHS / "mlp_train_1.json")
    assert main(["optimize", path, "--methods", "exact:max_state=10"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "reorder: error: --methods 'exact:max_state=10': method 'exact': unknown option 'max_state'; options: "
        "max_states (int >= 1), max_nodes (int >= 1), max_bytes (int >= 1)")
    assert main(["optimize", path, "--methods", ""]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "reorder: error: --methods '': methods '': name at least one method; known: baseline, bfs, dfs, exact, lpmf, "
        "optimal, refine")


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


def test_exact_says_when_its_node_sets_reach_max_bytes():
    from reorder.schedulers.peak_search import PeakSearch

    graph = load_graph(GRAPHS / "resnet18_train_1.json")
    start = list(range(graph.num_nodes))
    max_bytes = PeakSearch.array_bytes(graph) + 5 * PeakSearch.state_bytes(graph)
    outcome = Exact(max_bytes=max_bytes).run(graph, start)
    assert outcome.note == (f"gave up after 6 states: their node sets reached max_bytes={max_bytes} "
                            f"({PeakSearch.state_bytes(graph)} bytes a set)")
    assert not outcome.optimal and outcome.order == Exact(max_states=5).run(graph, start).order
    skipped = Exact(max_bytes=1000).run(graph, start)
    assert skipped.note == f"skipped: its arrays would take {PeakSearch.array_bytes(graph)} bytes (max_bytes=1000)"
    assert skipped.order == start


def test_refine_says_when_its_windows_reach_max_bytes():
    from reorder.schedulers.subsets import window_state_bytes

    graph = load_graph(GRAPHS / "gpt_train_1.json")
    start = list(range(graph.num_nodes))
    tight = Refine(max_bytes=3 * window_state_bytes(8)).run(graph, start)
    assert tight.note.endswith(f"window searches stopped at max_bytes={3 * window_state_bytes(8)} "
                               f"({window_state_bytes(8)} bytes a state)")
    assert estimate_peak_memory(graph, tight.order).peak <= estimate_peak_memory(graph, start).peak
    default = Refine().run(graph, start)
    assert default.note == "" and default.order == refine_order(graph, start)
