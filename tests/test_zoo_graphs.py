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
