"""Graph files are untrusted: nothing in one runs code, and every malformed one is a GraphError.

The fuzz test takes valid files in both formats, deletes keys, swaps types
and injects strings (code among them), and checks that loading either gives
a graph the estimator accepts or raises :class:`GraphError`, nothing else;
the CLI answers each with one line and status 2, never a traceback.
"""

import copy
import json

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers import GRAPHS

from reorder import BufferSpec, GraphError, InputSpec, NodeSpec, build_graph, estimate_peak_memory, load_graph
from reorder.cli import main
from reorder.io import graph_to_dict
from reorder.sizes import resolve_size
from reorder.timeline import lower_bound

SIMULATOR = json.loads((GRAPHS / "mlp_train_1.json").read_text())
OWN = graph_to_dict(load_graph(GRAPHS / "alexnet_infer_0.json"))
SYMBOLIC = {
    "format": "reorder-graph", "version": 1, "name": "dyn", "size_hints": {"s0": 8},
    "inputs": [{"name": "x", "size": "s0*4096"}, {"name": "w", "size": 65536, "freeable": False}],
    "nodes": [
        {"name": "mm", "reads": ["x", "w"], "outputs": [{"name": "y", "size": "FloorDiv(s0*8192, 2)"}]},
        {"name": "relu_", "reads": ["y"], "outputs": [{"name": "y2", "size": 0, "alias_of": "y"}]},
        {"name": "split", "reads": ["y2"], "outputs": [{"name": "parts", "size": 0}]},
        {"name": "get0", "reads": ["parts"], "outputs": [{"name": "p0", "size": "s0*2048", "parent": "parts"}]},
        {"name": "log", "after": ["get0"], "workspace": 64, "outputs": [{"name": "tick", "size": 0}]},
    ],
    "outputs": ["p0"],
}


def code(marker):
    """A size text that would create ``marker`` if anything evaluated it as Python."""
    return f"__import__('pathlib').Path({str(marker)!r}).touch() or 64"


def paths(tree, prefix=()):
    """Every (container, key) location in a JSON tree."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield prefix + (k,)
            yield from paths(v, prefix + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield prefix + (i,)
            yield from paths(v, prefix + (i,))


def replacements(marker):
    return [None, "false", "true", 1.5, -3, float("nan"), float("inf"), 10**40, [], {}, True, 0, "", "x",
            code(marker), "s0**s0**s0**99", "(" * 5000 + "1" + ")" * 5000, "s9*8", "1/0", [1, 2], {"name": 3},
            ["op0"], "buf0", "op0"]


def mutate(data, draw, marker):
    tree = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, 3))):
        locations = list(paths(tree))
        if not locations:
            break
        where = draw(st.sampled_from(locations))
        parent = tree
        for key in where[:-1]:
            parent = parent[key]
        key = where[-1]
        action = draw(st.sampled_from(["delete", "replace", "replace", "add"]))
        if action == "delete":
            del parent[key]
        elif action == "replace":
            parent[key] = draw(st.sampled_from(replacements(marker)))
        elif isinstance(parent[key], dict):
            parent[key][draw(st.sampled_from(["colour", "size", "freeable", "reads"]))] = \
                draw(st.sampled_from(replacements(marker)))
        elif isinstance(parent[key], list):
            parent[key].append(draw(st.sampled_from(replacements(marker))))
    return tree


def check_file(path, marker, capsys):
    try:
        graph = load_graph(path)
    except GraphError:
        pass
    else:
        assert estimate_peak_memory(graph).peak >= 0
        assert lower_bound(graph) >= 0
    status = main(["estimate", str(path)])
    out = capsys.readouterr()
    assert status in (0, 2)
    if status == 2:
        lines = out.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("reorder: error: "), out.err
    assert not marker.exists(), "a graph file ran code"


# capsys is read (and so reset) after every example.
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(["simulator", "own", "symbolic"]))
def test_fuzzed_files_load_or_raise_graph_error(tmp_path_factory, capsys, data, which):
    folder = tmp_path_factory.mktemp("fuzz")
    marker = folder / "pwned"
    original = {"simulator": SIMULATOR, "own": OWN, "symbolic": SYMBOLIC}[which]
    path = folder / "g.json"
    path.write_text(json.dumps(mutate(original, data.draw, marker)))
    check_file(path, marker, capsys)


@pytest.mark.parametrize("text", [
    "", "   ", "null", "[]", "3", '"x"', "[" * 100_000 + "]" * 100_000, "{" * 5000, '{"nodes": ' + "1" * 5000 + "}",
    '{"format": "reorder-graph", "nodes": [], "version": "1"}', "\xff\xfe",
])
def test_files_that_are_not_graphs(tmp_path, capsys, text):
    path = tmp_path / "bad.json"
    path.write_bytes(text.encode("latin-1") if text == "\xff\xfe" else text.encode())
    check_file(path, tmp_path / "pwned", capsys)
    with pytest.raises(GraphError):
        load_graph(path)


def assert_load_fails(tmp_path, data, edit, message):
    edit(data)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    with pytest.raises(GraphError) as err:
        load_graph(path)
    assert message in str(err.value)


def sim_buffer(name, **fields):
    return {"name": name, "size_alloc": 64, "size_free": 64, "size": 64, "is_input": False, "is_output": False,
            "deps": [], "unmet_deps": [], **fields}


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["buffers"][0].pop("size_alloc"), "buffer 'buf0': missing field 'size_alloc'"),
    (lambda d: d["buffers"][0].update(is_output="false"), "buffer 'buf0' field 'is_output': expected true or false, got \"false\""),
    (lambda d: d["buffers"][0].update(size_free="64"), "buffer 'buf0' field 'size_free': expected a non-negative integer"),
    (lambda d: d["buffers"][0].update(size_free=1.5), "buffer 'buf0' field 'size_free': expected a non-negative integer, got 1.5"),
    (lambda d: d["buffers"][0].update(size_free=float("inf")), "field 'size_free': expected a non-negative integer, got Infinity"),
    (lambda d: d["buffers"][0].update(deps="buf1"), "buffer 'buf0' field 'deps': expected a list"),
    (lambda d: d["nodes"][0].update(name=None), "node #0 field 'name': expected a non-empty string, got null"),
    (lambda d: d["nodes"][0].update(buffer_names=7), "node 'op0' field 'buffer_names': expected a list, got 7"),
    (lambda d: d["buffers"].append(3), "buffer #2: expected an object, got 3"),
])
def test_simulator_fields_are_checked(tmp_path, edit, message):
    data = {"nodes": [{"name": "op0", "buffer_names": ["buf0"]}, {"name": "op1", "buffer_names": ["buf1"]}],
            "buffers": [sim_buffer("buf0"), sim_buffer("buf1", deps=["buf0"], is_output=True)]}
    assert_load_fails(tmp_path, data, edit, message)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["inputs"][1].update(freeable="false"), "input 'w' field 'freeable': expected true or false, got \"false\""),
    (lambda d: d["nodes"][0].update(reads="x"), "node 'mm' field 'reads': expected a list, got \"x\""),
    (lambda d: d["nodes"][0].update(reads=[None]), "node 'mm' field 'reads' entry #0: expected a non-empty string, got null"),
    (lambda d: d["nodes"][0]["outputs"][0].update(size=1.5), "buffer 'y' field 'size': expected an integer number of bytes"),
    (lambda d: d["nodes"][0]["outputs"][0].update(size="s0/3"), "buffer 'y' field 'size': size 's0/3' (= 8/3) is not a whole number"),
    (lambda d: d["nodes"][0]["outputs"][0].update(size="s1*2"), "buffer 'y' field 'size': needs a size hint for s1"),
    (lambda d: d["nodes"][0]["outputs"][0].update(size="s0**s0**s0**99"), "buffer 'y' field 'size': an exponent must be a literal"),
    (lambda d: d["nodes"][0]["outputs"][0].update(size="(" * 100 + "1" + ")" * 100), "more than 64 levels of nesting"),
    (lambda d: d.update(size_hints={"s0": "8"}), "size_hints: the hint for 's0' must be an integer"),
    (lambda d: d.update(size_hints=[1]), "dyn field 'size_hints': expected an object"),
    (lambda d: d.update(size_ranges=[1]), "dyn field 'size_ranges': expected an object"),
    (lambda d: d.update(size_ranges={"s0": [16, None]}), "size_ranges: the hint 8 of 's0' lies outside its range"),
    (lambda d: d.update(size_ranges={"s0": ["1", 9]}), "size_ranges: the lower bound of 's0' must be an integer"),
    (lambda d: d.update(size_ranges={"s9": [1, 9]}), "size_ranges: symbol 's9' has a range but no size hint"),
    (lambda d: d.update(outputs="p0"), "dyn field 'outputs': expected a list"),
    (lambda d: d["nodes"].insert(0, d["nodes"].pop(1)),
     "node 'relu_' (#0) is listed before 'mm' (#1), which it depends on"),
])
def test_own_format_fields_are_checked(tmp_path, edit, message):
    assert_load_fails(tmp_path, copy.deepcopy(SYMBOLIC), edit, message)


def test_a_misspelled_buffer_is_reported_in_the_files_own_field(tmp_path, capsys):
    """The simulator format lists a producer's reads in its buffers' ``deps``; ours in a node's ``reads``."""
    simulator = {"nodes": [{"name": "op0", "buffer_names": ["buf0"]}, {"name": "op1", "buffer_names": ["buf1"]}],
                 "buffers": [sim_buffer("buf0"), sim_buffer("buf1", deps=["buf9"], is_output=True)]}
    own = copy.deepcopy(SYMBOLIC)
    own["nodes"][1]["reads"] = ["yy"]
    for data, message in [
        (simulator, "g: buffer 'buf1' field 'deps' names unknown buffer 'buf9'"),
        (own, "dyn: node 'relu_' field 'reads' names unknown buffer 'yy'"),
    ]:
        path = tmp_path / "g.json"
        path.write_text(json.dumps(data))
        with pytest.raises(GraphError) as err:
            load_graph(path)
        assert str(err.value) == message
        assert main(["estimate", str(path)]) == 2
        assert capsys.readouterr().err == f"reorder: error: {message}\n"


def test_code_in_a_size_is_never_run(tmp_path, capsys):
    marker = tmp_path / "pwned"
    data = copy.deepcopy(SYMBOLIC)
    data["nodes"][0]["outputs"][0]["size"] = code(marker)
    data["size_hints"] = {"s0": 8}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    with pytest.raises(GraphError, match="buffer 'y' field 'size': unexpected character"):
        load_graph(path)
    assert main(["estimate", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not marker.exists()


def test_symbols_match_their_hints_by_name_whatever_their_assumptions():
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    assert resolve_size(4 * s0, {"s0": 8}, "x") == (32, "4*s0")
    graph = build_graph([NodeSpec("a", [BufferSpec("y", 4 * s0)], reads=["x"])], [InputSpec("x", s0 * 2)], ["y"],
                        size_hints={"s0": 8})
    assert graph.size == (16, 32)


@pytest.mark.parametrize("text, value", [
    ("s0*4096", 32768), ("(s0 + 1) // 2 * 64", 256), ("ModularIndexing(s0, 1, 4) + 1", 1), ("Max(s0, 3) * Min(2, s0)", 16),
    ("CeilDiv(s0, 3) * 8", 24), ("FloorDiv(s0*3, 2)", 12), ("floor(s0/3) + ceiling(s0/3)", 5), ("s0**2 - s0 % 3", 62),
    ("-(-s0)", 8), ("PythonMod(s0, 5) + Abs(-2)", 5), ("  7  ", 7), ("2**60", 2**60),
])
def test_the_grammar_evaluates_inductor_expressions_exactly(text, value):
    assert resolve_size(text, {"s0": 8}, "x")[0] == value


@pytest.mark.parametrize("text, message", [
    ("2**61", "larger than 2**60 bytes"), ("s0 ** 65", "an exponent must be a literal integer from 0 to 64"),
    ("s0 ** 2 ** 3", "chained exponents"), ("eval(1)", "unknown function 'eval'"), ("s0.real", "unexpected character '.'"),
    ("Max()", "unexpected ')'"), ("FloorDiv(s0)", "FloorDiv takes 2 arguments, got 1"), ("s0 // 0", "division by zero"),
    ("9" * 31, "a literal longer than 30 digits"), ("1" + "*99999999999999999999" * 8, "a value of 2**128 or more"),
    ("s0 s0", "unexpected 's0'"), ("-" * 100 + "1", "more than 64 levels of nesting"),
])
def test_the_grammar_rejects_everything_else(text, message):
    with pytest.raises(GraphError) as err:
        resolve_size(text, {"s0": 8}, "buffer 'b' field 'size'")
    assert message in str(err.value) and "buffer 'b' field 'size'" in str(err.value)
