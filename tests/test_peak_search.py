"""The exact peak search: its answers against brute force, its dominance rules, its proofs on real graphs."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers import ROOT, all_topological_orders, build, graph_specs

from reorder import BufferSpec, InputSpec, NodeSpec, build_graph, estimate_peak_memory, load_graph
from reorder.schedulers.peak_search import PeakSearch, minimum_peak

REAL = ROOT / "benchmarks" / "real" / "graphs" / "bench"


@st.composite
def backward_specs(draw, max_layers: int = 4):
    """Backward-pass-shaped graphs: a chain of gradients through layers whose saved activations are
    graph inputs, some layers recomputing a value from their saved activation (a producer: the
    gradient reads the activation again) and some writing a parameter gradient (a graph output)."""
    sizes = st.integers(1, 32).map(lambda x: x * 16)
    layers = draw(st.integers(1, max_layers))
    inputs = [InputSpec("grad_out", draw(sizes))]
    nodes, outputs, grad = [], [], "grad_out"
    for k in range(layers):
        saved = f"saved{k}"
        inputs.append(InputSpec(saved, draw(sizes), freeable=draw(st.booleans())))
        reads = [grad, saved]
        if draw(st.booleans()):
            nodes.append(NodeSpec(f"recompute{k}", outputs=[BufferSpec(f"act{k}", draw(sizes))], reads=[saved]))
            reads.append(f"act{k}")
        if draw(st.booleans()):
            nodes.append(NodeSpec(f"wgrad{k}", outputs=[BufferSpec(f"dw{k}", draw(sizes))], reads=[grad, saved]))
            outputs.append(f"dw{k}")
        if draw(st.booleans()):  # a second sink on the same gradient: the last of them frees it
            nodes.append(NodeSpec(f"bgrad{k}", outputs=[BufferSpec(f"db{k}", draw(sizes))], reads=[grad]))
            outputs.append(f"db{k}")
        nodes.append(NodeSpec(f"grad{k}", outputs=[BufferSpec(f"g{k}", draw(sizes))], reads=reads))
        grad = f"g{k}"
    outputs.append(grad)
    return nodes, inputs, outputs


def _check_against_brute_force(graph):
    peaks = sorted({estimate_peak_memory(graph, o).peak for o in all_topological_orders(graph)})
    search = PeakSearch(graph)
    for limit in sorted({p for peak in peaks for p in (peak - 1, peak)}):
        answer = search.order_within(limit, 10**6)
        assert answer.complete
        if limit >= peaks[0]:
            graph.check_order(answer.order)
            assert estimate_peak_memory(graph, answer.order).peak <= limit
        else:
            assert answer.order is None  # the proof that no order is under the minimum
    worst = max(all_topological_orders(graph), key=lambda o: estimate_peak_memory(graph, o).peak)
    result = minimum_peak(graph, worst, 10**6)
    assert result.proven and result.peak == peaks[0] == estimate_peak_memory(graph, result.order).peak


@settings(max_examples=120, deadline=None)
@given(spec=graph_specs(max_nodes=8))
def test_every_answer_matches_brute_force_on_random_graphs(spec):
    """Every feature of the model (renames, views, multi-outputs, kept inputs, ordering edges)."""
    _check_against_brute_force(build(spec))


@settings(max_examples=80, deadline=None)
@given(spec=backward_specs())
def test_every_answer_matches_brute_force_on_backward_shaped_graphs(spec):
    """Graphs full of producers (recomputations) and sinks (parameter gradients): every dominance rule at work."""
    graph = build(spec)
    assert any(PeakSearch(graph).producer) or not any(n.name.startswith("recompute") for n in spec[0])
    _check_against_brute_force(graph)


def test_producers_are_nodes_that_can_never_free_anything():
    nodes = [
        NodeSpec("recompute", outputs=[BufferSpec("act", 64)], reads=["saved"]),   # saved is read again later
        NodeSpec("last_use", outputs=[BufferSpec("y", 16)], reads=["other"]),       # frees other
        NodeSpec("grad", outputs=[BufferSpec("g", 16)], reads=["act", "saved", "y"]),
    ]
    graph = build_graph(nodes, [InputSpec("saved", 64), InputSpec("other", 64)], ["g"])
    assert PeakSearch(graph).producer == [True, False, False]


def test_a_recomputation_waits_until_it_is_needed():
    """Running the recomputation first holds its 1,000 bytes beside the 800 the other branch needs;
    the search finds the order that runs it last and proves nothing is lower."""
    nodes = [
        NodeSpec("recompute", outputs=[BufferSpec("act", 1000)], reads=["saved"]),
        NodeSpec("other", outputs=[BufferSpec("o", 800)], reads=["x"]),
        NodeSpec("use_other", outputs=[BufferSpec("u", 16)], reads=["o"]),
        NodeSpec("grad", outputs=[BufferSpec("g", 16)], reads=["act", "saved", "u"]),
    ]
    graph = build_graph(nodes, [InputSpec("saved", 100), InputSpec("x", 100)], ["g"])
    assert estimate_peak_memory(graph, [0, 1, 2, 3]).peak == 2000
    result = minimum_peak(graph, [0, 1, 2, 3], 1000)
    assert result.proven and result.peak == 1132 and graph.names_of(result.order)[-2:] == ["recompute", "grad"]


@pytest.mark.parametrize("folder, graph_name, optimum", [
    ("ConvNextForImageClassification_train", "model__2_backward_11", 4_181_312),
    ("MobileNetV2ForImageClassification_train", "model__2_backward_11", 17_621_216),
    ("EfficientNetForImageClassification_train", "model__2_backward_11", 15_755_288),
])
def test_proves_the_optimum_of_real_backward_graphs(folder, graph_name, optimum):
    """Real backward graphs (139 to 349 nodes) that CP-SAT could not prove in 170 to 620 s; the
    recorded optimum is the one in optima.json."""
    graph = load_graph(REAL / folder / f"{graph_name}.json")
    recorded = json.loads((REAL / folder / "optima.json").read_text())[graph_name]
    start = list(range(graph.num_nodes))
    result = minimum_peak(graph, start, 200_000)
    graph.check_order(result.order)
    assert result.proven and result.peak == estimate_peak_memory(graph, result.order).peak == optimum
    assert recorded["proven"] and recorded["peak"] == optimum


def test_sinks_that_read_one_buffer_run_together_to_free_it():
    """Two parameter-gradient sinks share a 1,000-byte gradient: only running both, back to back,
    before the 900-byte branch frees it in time. Neither sink alone frees anything."""
    nodes = [
        NodeSpec("grad", outputs=[BufferSpec("g", 1000), BufferSpec("h", 16)], reads=["seed"]),
        NodeSpec("weight_grad", outputs=[BufferSpec("dw", 16)], reads=["g"]),
        NodeSpec("bias_grad", outputs=[BufferSpec("db", 16)], reads=["g"]),
        NodeSpec("other", outputs=[BufferSpec("y", 900)], reads=["h", "x"]),
        NodeSpec("use", outputs=[BufferSpec("z", 16)], reads=["y"]),
    ]
    graph = build_graph(nodes, [InputSpec("seed", 16), InputSpec("x", 16)], ["dw", "db", "z"])
    optimum = min(estimate_peak_memory(graph, o).peak for o in all_topological_orders(graph))
    result = minimum_peak(graph, [0, 3, 4, 1, 2], 1000)
    assert estimate_peak_memory(graph, [0, 3, 4, 1, 2]).peak == 1932
    assert result.proven and result.peak == optimum == 1064
    assert graph.names_of(result.order)[:3] == ["grad", "weight_grad", "bias_grad"]


@settings(max_examples=60, deadline=None)
@given(spec=backward_specs(max_layers=3), share=st.integers(1, 30))
def test_a_search_that_runs_out_certifies_only_true_bounds(spec, share):
    """With almost no budget for the descent, the bisection's bound never exceeds the true minimum,
    and a claimed proof is the true minimum."""
    graph = build(spec)
    orders = all_topological_orders(graph)
    optimum = min(estimate_peak_memory(graph, o).peak for o in orders)
    worst = max(orders, key=lambda o: estimate_peak_memory(graph, o).peak)
    result = minimum_peak(graph, worst, 1, share)
    graph.check_order(result.order)
    assert result.bound <= optimum <= result.peak == estimate_peak_memory(graph, result.order).peak
    assert not result.proven or result.peak == optimum


def test_a_certified_bound_on_a_full_depth_graph_the_search_cannot_finish():
    """GPT-2 small's training backward (323 nodes): the descent gives up, the bisection proves that no
    order is more than 1% below the default pass's peak."""
    from reorder.schedulers import reorder_for_peak_memory

    graph = load_graph(ROOT / "benchmarks/real/graphs/full/GPT2LMHeadModel_train/model__2_backward_12.json")
    default = reorder_for_peak_memory(graph, ["lpmf", "bfs", "dfs", "refine"])
    result = minimum_peak(graph, default.order, 2_000, 20_000)
    assert not result.proven and result.peak <= default.peak == 652_542_976
    assert 0.99 * result.peak <= result.bound <= result.peak


def parallel_chains(chains: int, length: int):
    """``chains`` parallel chains of ``length`` nodes, buffers of several widths, one sink reading every tail:
    the sets of nodes that ran are every mix of chain prefixes, so the search's sets grow fast."""
    nodes, tails = [], []
    for c in range(chains):
        previous = "x"
        for k in range(length):
            name = f"c{c}_{k}"
            nodes.append(NodeSpec(name, [BufferSpec(f"b{name}", 64 * (1 + c % 5) * (1 + k % 2))], reads=[previous]))
            previous = f"b{name}"
        tails.append(previous)
    nodes.append(NodeSpec("sink", [BufferSpec("out", 64)], reads=tails))
    return build_graph(nodes, [InputSpec("x", 4096)], ["out"], name=f"chains_{chains}x{length}")


def test_the_bytes_a_search_holds_stay_under_its_byte_budget():
    """The count is a bound on real memory: the search's allocations (traced) never exceed ``max_bytes``."""
    import tracemalloc

    graph = parallel_chains(20, 20)
    graph.descendants  # the graph's own cache, built before tracing
    max_bytes = 2 * 2**20
    start = list(range(graph.num_nodes))
    tracemalloc.start()
    try:
        result = minimum_peak(graph, start, 10**9, max_bytes=max_bytes)
        traced = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.stopped_by == "max_bytes" and not result.proven
    fit = (max_bytes - PeakSearch.array_bytes(graph)) // PeakSearch.state_bytes(graph)
    assert result.states > fit  # over every question asked; the last one stopped at fit + 1 sets
    assert traced <= max_bytes


def test_the_cache_of_sets_moves_reached_never_changes_an_answer(monkeypatch):
    """Moves that reach a set a move reached before are skipped: its free moves end in a set already seen. With
    the cache emptied at every set (no room for it), the search sees the same sets and gives the same answer,
    on a backward graph it cannot finish and on one it proves."""
    import reorder.schedulers.peak_search as peak_search

    gpt2 = load_graph(ROOT / "benchmarks/real/graphs/full/GPT2LMHeadModel_train/model__2_backward_12.json")
    convnext = load_graph(REAL / "ConvNextForImageClassification_train" / "model__2_backward_11.json")
    cases = [(gpt2, 3_000), (convnext, 200_000), (parallel_chains(6, 5), 10**6)]
    cached = [minimum_peak(graph, list(range(graph.num_nodes)), states) for graph, states in cases]
    monkeypatch.setattr(peak_search, "TRIED_OVERHEAD", 2**60)
    emptied = [minimum_peak(graph, list(range(graph.num_nodes)), states) for graph, states in cases]
    assert [(a.order, a.peak, a.states, a.proven) for a in cached] == \
        [(a.order, a.peak, a.states, a.proven) for a in emptied]
    assert [a.proven for a in cached] == [False, True, True]


def test_a_byte_budget_is_a_count_of_sets():
    """The same answer as a state budget of as many sets: never a measurement of the machine."""
    graph = parallel_chains(6, 5)
    start = list(range(graph.num_nodes))
    sets = 40
    by_bytes = minimum_peak(graph, start, 10**9, max_bytes=PeakSearch.array_bytes(graph)
                            + sets * PeakSearch.state_bytes(graph))
    by_states = minimum_peak(graph, start, sets, max_bytes=None)
    assert (by_bytes.order, by_bytes.states, by_bytes.stopped_by) == (by_states.order, by_states.states, "max_bytes")
    assert by_states.stopped_by == "max_states"


def test_a_graph_whose_arrays_exceed_the_byte_budget_is_not_searched():
    graph = parallel_chains(3, 3)
    start = list(range(graph.num_nodes))
    result = minimum_peak(graph, start, 10**6, max_bytes=PeakSearch.array_bytes(graph) - 1)
    assert (result.order, result.states, result.stopped_by, result.proven) == (start, 0, "max_bytes", False)
    assert minimum_peak(graph, start, 10**6).proven  # the default budget holds this graph many times over
