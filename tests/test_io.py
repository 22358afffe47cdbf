"""Graph files: torch's simulator format and ours, both ways."""

import json

import pytest
from hypothesis import given, settings
from helpers import GRAPH_NAMES, GRAPHS, build, graph_specs

from reorder import GraphError, estimate_peak_memory, load_graph, save_graph
from reorder.io import graph_from_dict, graph_to_dict, graph_to_simulator

FIELDS = ["node_names", "buffer_names", "size", "symbolic_size", "size_alloc", "size_free", "producer", "is_input",
          "freeable", "is_output", "alias_of", "alias_kind", "root", "parent", "readers", "outputs", "reads",
          "declared_reads", "after", "preds", "succs", "workspace", "unique_workspace"]


def same_graph(a, b):
    for f in FIELDS:
        assert getattr(a, f) == getattr(b, f), f


@pytest.mark.parametrize("name", GRAPH_NAMES)
def test_simulator_files_round_trip_byte_for_byte(name, tmp_path):
    original = json.loads((GRAPHS / f"{name}.json").read_text())
    graph = load_graph(GRAPHS / f"{name}.json")
    assert graph_to_simulator(graph) == original
    save_graph(graph, tmp_path / "g.json", fmt="reorder")
    same_graph(load_graph(tmp_path / "g.json"), graph)


def test_simulator_reader_recovers_renames_and_multi_outputs():
    graph = load_graph(GRAPHS / "alexnet_train_1.json")
    b37, b33 = graph.buffer_index["buf37"], graph.buffer_index["buf33"]
    assert graph.alias_of[b37] == b33
    reader = graph.node_index["op38"]
    assert b33 not in graph.declared_reads[reader] and b33 in graph.reads[reader]
    assert graph.parent[graph.buffer_index["buf31"]] == graph.buffer_index["buf29"]


@settings(max_examples=80)
@given(spec=graph_specs())
def test_own_format_round_trips_every_feature(spec):
    graph = build(spec)
    again = graph_from_dict(json.loads(json.dumps(graph_to_dict(graph))))
    same_graph(again, graph)
    assert again.name == graph.name


def test_own_format_keeps_symbolic_sizes_hints_edges_and_name(tmp_path):
    data = {"format": "reorder-graph", "version": 1, "name": "dyn", "size_hints": {"s0": 4},
            "inputs": [{"name": "x", "size": "s0*64"}],
            "nodes": [{"name": "a", "reads": ["x"], "outputs": [{"name": "y", "size": "s0*128"}]},
                      {"name": "b", "after": ["a"], "outputs": [{"name": "z", "size": 8}]}],
            "outputs": ["y", "z"]}
    graph = graph_from_dict(data)
    assert graph.name == "dyn" and graph.size[graph.buffer_index["y"]] == 512 and graph.after[1] == (0,)
    save_graph(graph, tmp_path / "g.json")
    # the range nobody gave is written as the default the graph assumed: from 1 up
    assert json.loads((tmp_path / "g.json").read_text()) == {**data, "size_ranges": {"s0": [1, None]},
                                                             "nodes": [data["nodes"][0], {**data["nodes"][1], "reads": []}]}


def test_simulator_export_loses_only_what_it_cannot_say():
    spec_graph = load_graph(GRAPHS / "resnet18_train_1.json")
    again = graph_from_dict(graph_to_dict(spec_graph))
    assert estimate_peak_memory(again).peak == estimate_peak_memory(spec_graph).peak


@pytest.mark.parametrize("text, message", [
    ("not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"a": 1}', "neither a reorder-graph file nor torch's simulator format"),
    ('{"nodes": [{"name": "op0", "buffer_names": ["buf9"]}], "buffers": []}', "node 'op0' writes buffer 'buf9', which is not in 'buffers'"),
    ('{"nodes": [], "buffers": [{"name": "b", "size_alloc": 1, "size_free": 1, "deps": []}]}', "buffer 'b' is neither a graph input nor written by a node"),
    ('{"format": "reorder-graph", "version": 7, "nodes": []}', "unsupported reorder-graph version 7"),
    ('{"format": "reorder-graph", "nodes": [{"name": "a", "outputs": [{"name": "x", "colour": 1}]}]}', "unknown fields ['colour']"),
    ('{"format": "reorder-graph", "nodes": [{"outputs": []}]}', "missing field 'name'"),
])
def test_bad_files_get_clear_errors(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(GraphError) as err:
        load_graph(path)
    assert message in str(err.value)


def test_missing_file():
    with pytest.raises(GraphError, match="no such graph file"):
        load_graph("/nonexistent/graph.json")


def test_the_documented_example_loads():
    text = (GRAPHS.parent.parent.parent / "docs" / "format.md").read_text()
    example = json.loads(text.split("```json")[2].split("```")[0])
    graph = graph_from_dict(example)
    assert graph.size[graph.buffer_index["y"]] == 32768
    assert graph.root[graph.buffer_index["y2"]] == graph.buffer_index["y"]
    assert graph.size_alloc[graph.buffer_index["parts"]] == 32768
    assert graph.after[graph.node_index["log"]] == (graph.node_index["get1"],)
    assert estimate_peak_memory(graph).peak == 65536
