"""The fusion decision: exact peaks of fused graphs, the incremental check against a full re-estimate, slack."""

import dataclasses

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from helpers import all_topological_orders, build, graph_specs

from reorder import BufferSpec, InputSpec, NodeSpec, build_graph, estimate_peak_memory
from reorder.errors import GraphError
from reorder.graph import Graph
from reorder.fusion import (CONFIRM_METHODS, PeakProfile, fused_graph, fusion_groups, fusion_peak, ranked_order,
                            removable_buffers, reordered_fusion_peak, should_block, window_order)
from reorder.schedulers import reorder_for_peak_memory

MB = 1 << 20


def accumulation(k: int = 4):
    """``total = x; total = total + relu(mm(x, w[i]))`` as Inductor schedules it before fusion."""
    nodes = []
    total = "x"
    for i in range(k):
        nodes.append(NodeSpec(f"mm{i}", [BufferSpec(f"m{i}", MB)], reads=["x"]))
        nodes.append(NodeSpec(f"add{i}", [BufferSpec(f"t{i}", MB)], reads=[total, f"m{i}"]))
        total = f"t{i}"
    return build_graph(nodes, [InputSpec("x", MB, freeable=False)], [total], name="accumulation")


def full_reestimate(graph, first, second):
    return estimate_peak_memory(fused_graph(graph, fusion_groups(graph, first, second))).peak


def test_unfused_groups_reproduce_the_graphs_own_peak():
    graph = accumulation()
    same = fused_graph(graph, [[v] for v in range(graph.num_nodes)])
    assert estimate_peak_memory(same).live == estimate_peak_memory(graph).live


def test_fusing_into_an_accumulation_keeps_the_matmul_outputs_alive():
    graph = accumulation()
    profile = PeakProfile.of(graph)
    assert profile.timeline.peak == 3 * MB  # running total, matmul output, new total
    add0, add1 = graph.node_id("add0"), graph.node_id("add1")
    check = fusion_peak(profile, add0, add1)
    # mm1 moves before the fused add: m0 and m1 live together with t1; t0 is never materialised.
    assert check.fused_peak == 3 * MB and check.rise == 0
    fused = fused_graph(graph, fusion_groups(graph, add0, add1))
    assert "t0" not in fused.buffer_index and fused.node_names[1:3] == ("mm1", "add0+add1")
    # Fusing that with the next add holds three matmul outputs at once.
    groups = fusion_groups(graph, add0, add1)
    once = fused_graph(graph, groups)
    second = fusion_peak(PeakProfile.of(once), once.node_id("add0+add1"), once.node_id("add2"))
    assert second.fused_peak == 4 * MB and second.rise == MB
    assert second.fused_peak == full_reestimate(once, once.node_id("add0+add1"), once.node_id("add2"))
    assert should_block(second) and not should_block(second, slack_bytes=MB)
    assert should_block(second, slack_fraction=0.3) and not should_block(second, slack_fraction=1 / 3)


def test_a_ceiling_blocks_any_rise_above_it_however_small():
    graph = accumulation()
    once = fused_graph(graph, fusion_groups(graph, graph.node_id("add0"), graph.node_id("add1")))
    check = fusion_peak(PeakProfile.of(once), once.node_id("add0+add1"), once.node_id("add2"))
    assert (check.peak, check.fused_peak) == (3 * MB, 4 * MB)
    assert not should_block(check, slack_bytes=MB) and not should_block(check, slack_bytes=MB, ceiling=4 * MB)
    assert should_block(check, slack_bytes=MB, ceiling=4 * MB - 1)
    level = fusion_peak(PeakProfile.of(graph), graph.node_id("add0"), graph.node_id("add1"))
    assert level.rise == 0 and not should_block(level, ceiling=MB)  # no rise: never blocked, even above it


def test_the_check_that_confirms_a_block_logs_its_orders_at_debug(caplog):
    """The guard confirms a rise by ordering the fused graph with our methods, many times a compile: those
    orders' lines are DEBUG, not the INFO of a call of our methods on its own."""
    import logging

    graph = accumulation()
    with caplog.at_level(logging.DEBUG, logger="reorder"):
        check = reordered_fusion_peak(graph, graph.node_id("add0"), graph.node_id("add1"),
                                      reorder_for_peak_memory(graph, CONFIRM_METHODS, log_level=logging.DEBUG).peak)
    assert check is not None and any(r.levelno == logging.DEBUG for r in caplog.records)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []


def test_a_harmless_vertical_fusion_lowers_the_peak():
    nodes = [
        NodeSpec("a", [BufferSpec("a0", 400)], reads=["x"]),
        NodeSpec("b", [BufferSpec("b0", 400)], reads=["a0"]),
        NodeSpec("c", [BufferSpec("c0", 100)], reads=["b0"]),
    ]
    graph = build_graph(nodes, [InputSpec("x", 400, freeable=False)], ["c0"])
    profile = PeakProfile.of(graph)
    assert profile.timeline.peak == 800  # a0 and b0 together
    check = fusion_peak(profile, 0, 1)
    assert check.fused_peak == 500 == full_reestimate(graph, 0, 1)  # a0 is never materialised
    assert check.rise == -300 and not should_block(check)


def test_independent_nodes_between_run_after_the_fused_node():
    nodes = [
        NodeSpec("a", [BufferSpec("a0", 10)], reads=["x"]),
        NodeSpec("side", [BufferSpec("s0", 1000)], reads=["x"]),
        NodeSpec("feed", [BufferSpec("f0", 10)], reads=["x"]),
        NodeSpec("b", [BufferSpec("b0", 10)], reads=["a0", "f0"]),
        NodeSpec("out", [BufferSpec("o0", 10)], reads=["b0", "s0"]),
    ]
    graph = build_graph(nodes, [InputSpec("x", 10)], ["o0"])
    assert window_order(graph, 0, 3) == [2, 0, 1]
    check = fusion_peak(PeakProfile.of(graph), 0, 3)
    assert check.fused_peak == full_reestimate(graph, 0, 3)


def test_a_fusion_through_a_dependent_node_is_refused():
    nodes = [
        NodeSpec("a", [BufferSpec("a0", 10)], reads=["x"]),
        NodeSpec("mid", [BufferSpec("m0", 10)], reads=["a0"]),
        NodeSpec("b", [BufferSpec("b0", 10)], reads=["m0"]),
    ]
    graph = build_graph(nodes, [InputSpec("x", 10)], ["b0"])
    assert fusion_peak(PeakProfile.of(graph), 0, 2) is None and fusion_groups(graph, 0, 2) is None


def graph_and_pair(spec, pick):
    """The random graph and two distinct nodes of it picked by ``pick`` (None for a graph of one node)."""
    graph = build(spec)
    n = graph.num_nodes
    if n < 2:
        return None, None, None
    first, second = pick[0] % n, pick[1] % n
    return graph, first, second if first != second else (first + 1) % n


def _unread_input_case(split: bool):
    """An input nobody reads (Inductor's model frees it after step 0) next to a fusion at step 0."""
    if split:
        nodes = [NodeSpec("n0", [BufferSpec("b0", 0)]), NodeSpec("split_b0", [BufferSpec("b0_0", 16, parent="b0")],
                                                                 reads=["b0"])]
    else:
        nodes = [NodeSpec(f"n{i}", [BufferSpec(f"b{i}", 0), BufferSpec(f"b{i}x", 16 if i == 2 else 0)])
                 for i in range(6)]
    return nodes, [InputSpec("in0", 16)], []


def _unread_input_moved_case():
    """An input nobody reads, and a fusion at step 0 that moves the first node later: n1 feeds n2, so fusing n0
    with n2 runs n1 first. The input still dies after step 0, whichever node runs there."""
    nodes = [NodeSpec("n0", [BufferSpec("b0", 0)]), NodeSpec("n1", [BufferSpec("b1", 16)]),
             NodeSpec("n2", [BufferSpec("b2", 16)], after=["n0", "n1"]), NodeSpec("n3", [BufferSpec("b3", 0)],
                                                                                  reads=["b1"])]
    return nodes, [InputSpec("in0", 16)], []


@settings(max_examples=200, deadline=None)
@given(spec=graph_specs(max_nodes=9), pick=st.tuples(st.integers(0, 100), st.integers(0, 100)))
@example(spec=_unread_input_case(split=False), pick=(0, 3))  # the unread input used to stay live too long
@example(spec=_unread_input_case(split=True), pick=(0, 1))   # ... and then to die too early
@example(spec=_unread_input_moved_case(), pick=(0, 2))       # ... and to follow the node that ran at step 0
def test_incremental_peak_equals_full_reestimate(spec, pick):
    graph, first, second = graph_and_pair(spec, pick)
    if graph is None:
        return
    check = fusion_peak(PeakProfile.of(graph), first, second)
    if check is None:
        assert fusion_groups(graph, first, second) is None
        return
    assert check.peak == estimate_peak_memory(graph).peak
    assert check.fused_peak == full_reestimate(graph, first, second)
    assert check.work >= abs(first - second) + 1


def _fused_specs(graph, groups):
    """What ``fused_graph`` stands for, spelled out as specs for ``build_graph``: each group one node writing its
    members' outputs (less those read only inside it, where Inductor drops them) and reading the rest."""
    removable = removable_buffers(graph)
    group_of = {v: g for g, members in enumerate(groups) for v in members}
    names = ["+".join(graph.node_names[v] for v in members) for members in groups]
    nodes = []
    for g, members in enumerate(groups):
        outputs = [BufferSpec(graph.buffer_names[b], graph.size[b], size_alloc=graph.size_alloc[b],
                              size_free=graph.size_free[b])
                   for v in members for b in graph.outputs[v]
                   if not (removable[b] and all(group_of[r] == g for r in graph.readers[b]))]
        reads = [graph.buffer_names[b] for v in members for b in graph.reads[v]
                 if graph.producer[b] is None or group_of[graph.producer[b]] != g]
        after = [names[group_of[p]] for v in members for p in graph.after[v] if group_of[p] != g]
        nodes.append(NodeSpec(names[g], outputs, list(dict.fromkeys(reads)), list(dict.fromkeys(after))))
    inputs = [InputSpec(graph.buffer_names[b], graph.size[b], graph.freeable[b])
              for b in range(graph.num_buffers) if graph.is_input[b]]
    outputs = [graph.buffer_names[b] for b in range(graph.num_buffers) if graph.is_output[b]]
    return build_graph(nodes, inputs, outputs, name=graph.name)


@settings(max_examples=300, deadline=None)
@given(spec=graph_specs(max_nodes=10), cuts=st.lists(st.integers(1, 9), max_size=4),
       rank=st.randoms(use_true_random=False), pick=st.tuples(st.integers(0, 100), st.integers(0, 100)),
       kind=st.sampled_from(["runs", "ranked", "pair"]), free=st.booleans())
def test_the_fused_graph_is_the_one_its_specs_build(spec, cuts, rank, pick, kind, free):
    """``fused_graph`` assembles its arrays directly (the guard makes hundreds per compile): they must be exactly
    what ``build_graph`` makes of the specs it stands for, field by field, aliases, multi-output buffers,
    ordering-only edges and kept inputs included. Groups: runs of the listed order, the same runs in another
    order that runs (``ranked_order`` with random ranks, as the guard orders its list), or two nodes fused
    (``fusion_groups``); inputs zeroed by ``with_free_inputs`` too."""
    graph = build(spec)
    if free:
        graph = graph.with_free_inputs(graph.buffer_names[b] for b in range(graph.num_buffers)
                                       if graph.is_input[b] and b % 2 == 0)
    bounds = sorted({0, graph.num_nodes, *(c for c in cuts if c < graph.num_nodes)})
    groups = [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]
    if kind == "ranked":
        ranks = list(range(graph.num_nodes))
        rank.shuffle(ranks)
        groups = [groups[i] for i in ranked_order(graph, groups, ranks)]
    elif kind == "pair":
        groups = fusion_groups(graph, pick[0] % graph.num_nodes, pick[1] % graph.num_nodes)
        if groups is None or graph.num_nodes < 2 or pick[0] % graph.num_nodes == pick[1] % graph.num_nodes:
            return
    fused, reference = fused_graph(graph, groups), _fused_specs(graph, groups)
    for field in dataclasses.fields(Graph):
        assert getattr(fused, field.name) == getattr(reference, field.name), field.name


def test_the_groups_must_split_the_nodes():
    graph = accumulation(2)
    for groups in ([[0, 1], [2]], [[0, 1], [2, 3], []], [[0, 1], [1, 2, 3]]):
        with pytest.raises(GraphError, match="fused_graph"):
            fused_graph(graph, groups)


def test_a_node_cannot_fuse_with_itself():
    with pytest.raises(ValueError, match="itself"):
        fusion_peak(PeakProfile.of(accumulation()), 1, 1)


def test_ranked_order_follows_the_ranks_within_the_dependencies():
    graph = accumulation(3)  # mm0 add0 mm1 add1 mm2 add2
    singles = [[v] for v in range(6)]
    mms_first = [0, 5, 1, 5, 2, 5]
    order = ranked_order(graph, singles, mms_first)
    graph.check_order(order)
    assert graph.names_of(order) == ["mm0", "mm1", "mm2", "add0", "add1", "add2"]
    assert estimate_peak_memory(graph, order).peak == 4 * MB
    assert ranked_order(graph, singles, range(6)) == list(range(6))
    # mm0 and mm2 fused run where mm2 ran: after mm1, which had run between them.
    groups = [[0, 4], [1], [2], [3], [5]]
    assert ranked_order(graph, groups, range(6)) == [2, 0, 1, 3, 4]


def test_a_rise_the_reorder_pass_undoes_is_not_confirmed():
    # in the best order, fusing n2 (reads b0) with n3's split keeps b0 (560 B) alive 16 bytes too high;
    # reordering the fused graph finds an order at the unfused peak, so the guard must not block it
    nodes = [NodeSpec("n0", [BufferSpec("b0", 560)], reads=["in1", "in2", "in0"]),
             NodeSpec("n1", [BufferSpec("b1", 592)], reads=["in2", "in1", "in0"]),
             NodeSpec("n2", [BufferSpec("b2", 0)], reads=["b0"]),
             NodeSpec("n3", [BufferSpec("b3", 0)], after=["n1", "n0"]),
             NodeSpec("split_b2", [BufferSpec("b2_0", 16, parent="b2")], reads=["b2"]),
             NodeSpec("split_b3", [BufferSpec("b3_0", 16, parent="b3")], reads=["b3"])]
    inputs = [InputSpec("in0", 752, freeable=False), InputSpec("in1", 688, freeable=False), InputSpec("in2", 832)]
    graph = build_graph(nodes, inputs, [])
    best = reorder_for_peak_memory(graph, CONFIRM_METHODS)
    graph = fused_graph(graph, [[v] for v in best.order])  # the guard's current list: the best order
    window = fusion_peak(PeakProfile.of(graph), 2, 4)
    assert window.rise > 0 and should_block(window)
    confirmed = reordered_fusion_peak(graph, 2, 4, best.peak)
    assert confirmed.peak == best.peak and confirmed.rise <= 0 and not should_block(confirmed)


@settings(max_examples=100, deadline=None)
@given(spec=graph_specs(max_nodes=7), pick=st.tuples(st.integers(0, 100), st.integers(0, 100)))
def test_the_confirming_peak_lies_between_the_fused_optimum_and_the_window_order(spec, pick):
    graph, first, second = graph_and_pair(spec, pick)
    if graph is None:
        return
    window = fusion_peak(PeakProfile.of(graph), first, second)
    best = reorder_for_peak_memory(graph, CONFIRM_METHODS).peak
    confirmed = reordered_fusion_peak(graph, first, second, best)
    if window is None:
        assert confirmed is None
        return
    fused = fused_graph(graph, fusion_groups(graph, first, second))
    optimum = min(estimate_peak_memory(fused, order).peak for order in all_topological_orders(fused))
    assert optimum <= confirmed.fused_peak <= window.fused_peak
    lowest = reorder_for_peak_memory(fused, CONFIRM_METHODS).peak  # what the reorder pass finds after the fusion
    assert confirmed.fused_peak == lowest
    assert should_block(confirmed) == (lowest > best)  # blocked exactly when reordering cannot undo the rise
