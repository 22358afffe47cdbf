"""The graph model: each kind of buffer, and a clear error for each kind of bad input."""

import pytest

from reorder import BufferSpec, CycleError, GraphError, InputSpec, NodeSpec, build_graph, estimate_peak_memory
from reorder.errors import OrderError


def test_computed_buffer_lives_from_producer_to_last_reader():
    g = build_graph([
        NodeSpec("a", [BufferSpec("x", 100)]),
        NodeSpec("b", [BufferSpec("y", 10)], reads=["x"]),
        NodeSpec("c", [BufferSpec("z", 1)], reads=["x"]),
    ], outputs=["z"])
    t = estimate_peak_memory(g)
    assert t.lifetimes.start[g.buffer_index["x"]] == 0
    assert t.lifetimes.end[g.buffer_index["x"]] == 2
    assert t.live == (100, 110, 101, 1)  # y (unread) freed after b; x after c; z kept
    assert g.readers[g.buffer_index["x"]] == (1, 2)


def test_freeable_input_dies_after_last_reader_and_kept_input_costs_nothing():
    g = build_graph(
        [NodeSpec("a", [BufferSpec("x", 10)], reads=["w", "p"]), NodeSpec("b", [BufferSpec("y", 10)], reads=["x"])],
        inputs=[InputSpec("w", 1000), InputSpec("p", 5000, freeable=False)],
        outputs=["y"],
    )
    assert g.size_alloc[g.buffer_index["p"]] == 0
    assert estimate_peak_memory(g).live == (1010, 20, 10)


def test_graph_outputs_are_never_freed():
    g = build_graph([NodeSpec("a", [BufferSpec("x", 7)]), NodeSpec("b", [BufferSpec("y", 3)], reads=["x"])],
                    outputs=["x", "y"])
    assert estimate_peak_memory(g).live == (7, 10, 10)


def test_mutation_rename_costs_nothing_and_its_readers_keep_the_real_buffer():
    g = build_graph([
        NodeSpec("a", [BufferSpec("x", 100)]),
        NodeSpec("m", [BufferSpec("x2", 0, alias_of="x")], reads=["x"]),
        NodeSpec("m2", [BufferSpec("x3", 0, alias_of="x2")], reads=["x2"]),
        NodeSpec("other", [BufferSpec("o", 1)]),
        NodeSpec("r", [BufferSpec("y", 1)], reads=["x3"]),
    ], outputs=["y"])
    x, x3 = g.buffer_index["x"], g.buffer_index["x3"]
    assert g.root[x3] == x
    assert (g.size_alloc[x3], g.size_free[x3]) == (0, 0)
    assert g.node_index["r"] in g.readers[x]
    assert g.node_index["a"] in g.preds[g.node_index["r"]]  # root's producer orders the reader
    assert g.declared_reads[g.node_index["r"]] == (x3,)
    t = estimate_peak_memory(g)
    assert t.lifetimes.end[x] == 4
    assert t.live == (100, 100, 100, 101, 101, 1)  # o is unread: freed after its step


def test_multi_output_parent_allocates_children_free_their_own():
    g = build_graph([
        NodeSpec("mo", [BufferSpec("p")]),
        NodeSpec("g0", [BufferSpec("c0", 30, parent="p")], reads=["p"]),
        NodeSpec("g1", [BufferSpec("c1", 70, parent="p")], reads=["p"]),
        NodeSpec("use0", [BufferSpec("u", 1)], reads=["c0"]),
        NodeSpec("use1", [BufferSpec("v", 1)], reads=["c1", "u"]),
    ], outputs=["v"])
    p, c0, c1 = (g.buffer_index[k] for k in ("p", "c0", "c1"))
    assert (g.size_alloc[p], g.size_free[p]) == (100, 0)
    assert (g.size_alloc[c0], g.size_free[c0]) == (0, 30)
    assert g.parent[c1] == p
    assert estimate_peak_memory(g).live == (100, 100, 100, 101, 72, 1)


def test_ordering_only_edges_constrain_but_keep_nothing_alive():
    g = build_graph([NodeSpec("a", [BufferSpec("x", 10)]), NodeSpec("b", [BufferSpec("y", 5)], after=["a"])],
                    outputs=["y"])
    assert g.preds[1] == (0,)
    assert g.readers[0] == ()
    assert estimate_peak_memory(g).live == (10, 5, 5)
    with pytest.raises(OrderError, match="before its predecessor 'a'"):
        estimate_peak_memory(g, [1, 0])


def test_symbolic_sizes_resolve_with_hints_and_keep_their_expression():
    g = build_graph([NodeSpec("a", [BufferSpec("x", "s0*4096")])], inputs=[InputSpec("i", "2*s0 + s1")],
                    outputs=["x"], size_hints={"s0": 8, "s1": 3})
    assert g.size[g.buffer_index["x"]] == 32768
    assert g.symbolic_size[g.buffer_index["x"]] == "s0*4096"
    assert g.size[g.buffer_index["i"]] == 19


def test_an_inputs_storage_replaces_its_estimated_bytes_at_every_point():
    """``with_input_bytes``: what freeing an input returns (its storage), where the estimate counted its last
    read's extent. A parameter (not freeable) and names not in the graph are left alone."""
    nodes = [NodeSpec("a", [BufferSpec("x", "s0*4")], reads=["saved", "weight"])]
    inputs = [InputSpec("saved", "s0*16"), InputSpec("weight", 64, freeable=False)]
    g = build_graph(nodes, inputs=inputs, outputs=["x"], size_hints={"s0": 8})
    stored = g.with_input_bytes({"saved": "s0*4 + 8", "weight": 128, "elsewhere": 4})
    b, w = g.buffer_index["saved"], g.buffer_index["weight"]
    assert (stored.size[b], stored.size_alloc[b], stored.size_free[b], stored.symbolic_size[b]) == (40, 40, 40,
                                                                                                     "s0*4 + 8")
    assert stored.size[w] == g.size[w] == 64 and stored.size_free[w] == 0
    assert estimate_peak_memory(stored).peak == 40 + 32 and estimate_peak_memory(g).peak == 128 + 32
    at = stored.at({"s0": 100})
    assert (at.size[b], at.size_free[b]) == (408, 408) and g.at({"s0": 100}).size[b] == 1600
    assert g.with_input_bytes({"saved": "s0*16"}) is g and g.with_input_bytes({}) is g
    constant = build_graph([NodeSpec("a", [BufferSpec("x", 4)], reads=["saved"])], inputs=[InputSpec("saved", 8)],
                           outputs=["x"])
    assert constant.with_input_bytes({"saved": 32}).size_free[0] == 32
    with pytest.raises(GraphError, match=r"input 'saved' field 'size': symbol s1 is not one of the graph's \(none\)"):
        constant.with_input_bytes({"saved": "s1*4"})


@pytest.mark.parametrize("nodes, inputs, outputs, message", [
    ([NodeSpec("a", [BufferSpec("x", 1)], reads=["nope"])], [], [], "node 'a' field 'reads' names unknown buffer 'nope'"),
    ([NodeSpec("a", [BufferSpec("x", 1)]), NodeSpec("b", [BufferSpec("x", 1)])], [], [],
     "buffer 'x' has two producers: 'a' and 'b'"),
    ([NodeSpec("a", [BufferSpec("x", 1)]), NodeSpec("a", [BufferSpec("y", 1)])], [], [], "duplicate node name 'a'"),
    ([NodeSpec("a", [BufferSpec("x", 1)])], [InputSpec("x", 1)], [], "duplicate buffer name 'x'"),
    ([NodeSpec("a", [BufferSpec("x", -5)])], [], [], "buffer 'x' field 'size': size -5 is negative"),
    ([NodeSpec("a", [BufferSpec("x", 2.5)])], [], [], "buffer 'x' field 'size': a size must be an integer number of bytes or an expression, got 2.5"),
    ([NodeSpec("a", [BufferSpec("x", "s0/3")])], [], [], "needs a size hint for s0"),
    ([NodeSpec("a", [BufferSpec("x", "s0 +* 2")])], [], [], "buffer 'x' field 'size': unexpected '*' in size expression 's0 +* 2'"),
    ([NodeSpec("a", [BufferSpec("x", 1)])], [], ["ghost"], "graph outputs names unknown buffer 'ghost'"),
    ([NodeSpec("a", [BufferSpec("x", 1)], after=["zz"])], [], [], "node 'a' must run after unknown node 'zz'"),
    ([NodeSpec("a", [BufferSpec("x", 1)], reads=["x"])], [], [], "node 'a' reads its own output 'x'"),
    ([NodeSpec("a", [BufferSpec("x", 1, alias_of="y")]), NodeSpec("b", [BufferSpec("y", 1, alias_of="x")])], [], [],
     "alias chain loops: x -> y -> x"),
    ([NodeSpec("a", [BufferSpec("x", 1)]), NodeSpec("b", [BufferSpec("y", 0, alias_of="x")])], [], [],
     "alias 'y' of 'x': its producer 'b' must read the buffer it renames"),
    ([NodeSpec("a", [BufferSpec("p")]), NodeSpec("b", [BufferSpec("c", 4, parent="p")])], [], [],
     "multi-output child 'c': its producer 'b' must read the parent 'p'"),
])
def test_invalid_input_names_what_is_wrong(nodes, inputs, outputs, message):
    with pytest.raises(GraphError) as err:
        build_graph(nodes, inputs, outputs)
    assert message in str(err.value)


def test_cycle_error_prints_the_cycle():
    nodes = [
        NodeSpec("start", [BufferSpec("s", 1)]),
        NodeSpec("a", [BufferSpec("x", 1)], reads=["s", "z"]),
        NodeSpec("b", [BufferSpec("y", 1)], reads=["x"]),
        NodeSpec("c", [BufferSpec("z", 1)], reads=["y"]),
    ]
    with pytest.raises(CycleError) as err:
        build_graph(nodes)
    cycle = err.value.cycle
    assert cycle[0] == cycle[-1] and sorted(cycle[:-1]) == ["a", "b", "c"]
    for first, second in zip(cycle, cycle[1:]):  # each step is a real edge
        assert {"a": "b", "b": "c", "c": "a"}[first] == second
    assert "dependency cycle: " in str(err.value)


def test_order_errors_name_the_node():
    g = build_graph([NodeSpec("a", [BufferSpec("x", 1)]), NodeSpec("b", [BufferSpec("y", 1)], reads=["x"])])
    with pytest.raises(OrderError, match="runs node 'a' twice"):
        g.check_order([0, 0])
    with pytest.raises(OrderError, match="order has 1 nodes"):
        g.check_order([0])
    with pytest.raises(GraphError, match="no node named 'q'"):
        g.order_from_names(["a", "q"])


def test_a_long_rename_chain_builds_and_forwards_every_reader_to_its_root():
    """Roots are found once per buffer (the chain used to cost cubic time in its length)."""
    from benchmarks.synthetic import rename_chain

    graph = rename_chain(10_000)
    root = graph.buffer_index["b0"]
    assert all(graph.root[graph.buffer_index[f"b{k}"]] == root for k in range(10_000))
    assert len(graph.readers[root]) == 10_000  # every renaming node and the last reader keep b0 alive
    assert estimate_peak_memory(graph).peak == 2 * 4096  # x then out beside b0: renames cost nothing


@pytest.mark.parametrize("nodes, inputs, message", [
    ([NodeSpec("a", [BufferSpec("x", 4)], reads="in")], [InputSpec("in", 4)],
     "node 'a' field 'reads' must be a list of names, got 'in'"),
    ([NodeSpec("a", [BufferSpec("x", 4)], reads=["in", ["in"]])], [InputSpec("in", 4)],
     "node 'a' field 'reads' entry #1 must be a non-empty string, got ['in']"),
    ([NodeSpec("a", [BufferSpec("x", 4)], reads=["in", "nope"])], [InputSpec("in", 4)],
     "node 'a' field 'reads' names unknown buffer 'nope'"),
    ([NodeSpec("a", [BufferSpec("x", 4)], after=[""])], [], "node 'a' field 'after' entry #0 must be a non-empty "
                                                             "string, got ''"),
    ([NodeSpec("a", [BufferSpec("x", 4)], workspace=-1)], [], "node 'a' field 'workspace': size -1 is negative"),
    ([NodeSpec("a", [BufferSpec("x", 4)], unique_workspace=True)], [],
     "node 'a' field 'unique_workspace': a size must be an integer number of bytes or an expression, got True"),
    ([NodeSpec("a", [BufferSpec("x", True)])], [],
     "buffer 'x' field 'size': a size must be an integer number of bytes or an expression, got True"),
    ([NodeSpec("a", [BufferSpec("x", 2**61)])], [], "buffer 'x' field 'size': size 2305843009213693952 is larger "
                                                    "than 2**60 bytes"),
    ([NodeSpec("a", [BufferSpec("x", 4, size_free=1.5)])], [],
     "buffer 'x' field 'size_free': a size must be an integer number of bytes or an expression, got 1.5"),
    ([NodeSpec(7, [BufferSpec("x", 4)])], [], "node #0 field 'name' must be a non-empty string, got 7"),
    ([NodeSpec("a", [BufferSpec("", 4)])], [], "node 'a' output field 'name' must be a non-empty string, got ''"),
    ([], [InputSpec(None, 4)], "input #0 field 'name' must be a non-empty string, got None"),
])
def test_the_builder_names_the_field_of_every_malformed_spec(nodes, inputs, message):
    """The builder writes these messages only when a check fails (a compile builds graphs of thousands of buffers
    many times), so each is pinned here: the node or buffer, the field and the value."""
    with pytest.raises(GraphError) as raised:
        build_graph(nodes, inputs)
    assert str(raised.value) == message


def test_plain_graph_makes_what_build_graph_makes_of_views_and_multi_output_nodes():
    """From arrays (buffers numbered inputs first, then each node's outputs), a graph with a view of an input, a
    multi-output node and its elements, and a view of an element: every field is build_graph's from the specs."""
    import dataclasses

    from reorder.graph import plain_graph

    specs = [
        NodeSpec("view_x", [BufferSpec("view_x", 0, alias_of="x", alias_kind="view")], reads=["x"]),
        NodeSpec("split", [BufferSpec("split", 300)], reads=["view_x", "w"]),
        NodeSpec("first", [BufferSpec("first", 100, parent="split")], reads=["split"]),
        NodeSpec("second", [BufferSpec("second", 200, parent="split")], reads=["split"]),
        NodeSpec("view_second", [BufferSpec("view_second", 0, alias_of="second", alias_kind="view")],
                 reads=["second"]),
        NodeSpec("out", [BufferSpec("out", 64)], reads=["first", "view_second", "x"]),
    ]
    built = build_graph(specs, [InputSpec("x", 400), InputSpec("w", 50, freeable=False)], ["out", "first"],
                        name="g")
    names = ["x", "w", "view_x", "split", "first", "second", "view_second", "out"]
    unset = [None] * len(names)
    plain = plain_graph("g", [s.name for s in specs], names, [400, 50, 0, 300, 100, 200, 0, 64], unset, unset,
                        [None, None, 0, 1, 2, 3, 4, 5], [True, False] + [False] * 6,
                        [False] * 4 + [True, False, False, True], [(0,), (2, 1), (3,), (3,), (5,), (4, 6, 0)],
                        [()] * 6, alias_of=[None, None, 0, None, None, None, 5, None],
                        parent=[None, None, None, None, 3, 3, None, None])
    for f in dataclasses.fields(built):
        assert getattr(plain, f.name) == getattr(built, f.name), f.name
    assert built.root[6] == 5 and built.alias_kind[2] == "view" and built.size_alloc[3] == 300  # not all trivial
