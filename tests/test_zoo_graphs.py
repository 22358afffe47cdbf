"""The graphs the benchmark suite captured from the zoo: Inductor's figures, recorded live, reproduced."""

import json

import pytest
from helpers import ROOT

from reorder import estimate_peak_memory, estimate_peak_memory_allocfree, load_graph
from reorder.schedulers import bfs_order, dfs_order, lpmf_order, reorder_for_peak_memory

CACHE = ROOT / "benchmarks" / "graphs" / "b2"
FIGURES = json.loads((CACHE / "figures.json").read_text())
PORTS = {"lpmf": lpmf_order, "bfs": bfs_order, "dfs": dfs_order}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_captured_graph_matches_inductor(name):
    graph = load_graph(CACHE / f"{name}.json")
    figures = FIGURES[name]
    assert estimate_peak_memory(graph).peak == figures["peak"]["baseline"]
    assert estimate_peak_memory_allocfree(graph).peak == figures["peak_allocfree_baseline"]
    for method, fn in PORTS.items():
        assert graph.names_of(fn(graph)) == figures["orders"][f"topological_sort_{method}"]
    result = reorder_for_peak_memory(graph)
    assert result.peak <= min(figures["peak"].values())


def test_captured_graphs_cover_the_semantics_that_bite():
    graphs = [load_graph(CACHE / f"{name}.json") for name in FIGURES]
    assert sum(g.alias_of[b] is not None for g in graphs for b in range(g.num_buffers)) > 0  # mutation renames
    assert sum(g.parent[b] is not None for g in graphs for b in range(g.num_buffers)) > 0  # multi-output children
    assert sum(g.is_input[b] for g in graphs for b in range(g.num_buffers)) > 0  # freeable inputs
    assert len(graphs) == 33


def test_refining_passes_hold_the_exact_search_to_fewer_sets():
    """Inception's second training graph is the zoo's one graph whose proof takes more than 10,000 sets: the
    defaults prove its minimum, the refining passes' methods stop short (40 bytes above) and say so."""
    from reorder.schedulers import DEFAULT_METHODS, QUICK_METHODS

    graph = load_graph(CACHE / "inception_train_1.json")
    full, refining = reorder_for_peak_memory(graph, DEFAULT_METHODS), reorder_for_peak_memory(graph, QUICK_METHODS)
    assert full.optimal and full.peak == 2_586_784
    assert not refining.optimal and refining.peak == 2_586_824
    assert refining.notes["exact"] == "gave up after 10001 states (max_states=10000)"


def test_the_hooks_passes_over_a_graph_searched_in_another_form_hold_the_exact_search_to_1000_sets(monkeypatch):
    """The re-run with a backward's tangents freed and the fusion guard's rank of the unfused graph keep only an
    order, never a proof, and the reorder pass searches the same graph in another form with more sets: on
    Inception's second training graph (more than 10,000 sets to prove) each stops at 1,000, while the pass itself,
    on a budgeted region's graph, spends its 10,000."""
    from test_fusion_guard import FakeNode

    import reorder.inductor.fusion_guard as fusion_guard
    from reorder.inductor.reorder_pass import choose_order
    from reorder.schedulers import QUICK_METHODS, exact

    notes = []
    run = exact.Exact.run

    def noted(self, graph, start):
        outcome = run(self, graph, start)
        notes.append(outcome.note)
        return outcome

    monkeypatch.setattr(exact.Exact, "run", noted)
    graph = load_graph(CACHE / "inception_train_1.json")
    result = reorder_for_peak_memory(graph, QUICK_METHODS)
    choice = choose_order(graph, load_graph(CACHE / "inception_train_1.json"), result)
    assert notes == ["gave up after 10001 states (max_states=10000)", "gave up after 1001 states (max_states=1000)"]
    assert choice.peak <= result.peak  # the first pass's orders stay candidates

    class Scheduler:
        nodes = [FakeNode([name]) for name in graph.node_names]

    monkeypatch.setattr(fusion_guard, "graph_from_scheduler", lambda nodes, name, scheduler: (graph, None))
    scheduler = Scheduler()
    view = fusion_guard._SchedulerView(scheduler)
    assert view.convert() == graph.num_nodes + graph.num_edges
    assert notes[2:] == ["gave up after 1001 states (max_states=1000)"]
    assert sorted(view.rank) == list(range(graph.num_nodes))
