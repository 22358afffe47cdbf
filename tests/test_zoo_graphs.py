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
