"""Sessions of the Inductor hook: options as one value, typed records, summaries that do not overclaim."""

import copy
import dataclasses
import pickle
import re
import threading
from pathlib import Path

import pytest
import torch

from helpers import assert_close_to_eager
from reorder import inductor as hook
from reorder.errors import ReorderError
from reorder.graph import BufferSpec, InputSpec, NodeSpec, build_graph
from reorder.inductor.figures import INDUCTOR_METHODS
from reorder.inductor.reorder_pass import ReorderPass, choose_order
from reorder.inductor.session import (NOTHING_COMPILED, CacheHitRecord, FallbackRecord, GuardRecord, HookOptions,
                                      OrderRecord, Session, SlabRecord)
from reorder.schedulers import METHODS, reorder_for_peak_memory

pytestmark = pytest.mark.usefixtures("fresh_compiles")

DOCS = Path(__file__).resolve().parent.parent / "docs" / "inductor.md"


# --- options --------------------------------------------------------------------------------------------------------


def test_an_unknown_option_names_itself_and_lists_the_valid_ones():
    with pytest.raises(ReorderError) as info:
        hook.install(fusion_gaurd=True)
    message = str(info.value)
    assert "'fusion_gaurd'" in message and "fusion_guard" in message and "max_seconds" in message
    with pytest.raises(ReorderError, match="unknown hook option 'slack'"):
        with hook.use(slack=1):
            pass
    import torch._inductor.config as config

    assert config._post_fusion_custom_pass is None  # nothing was installed


@pytest.mark.parametrize("fields, message", [
    ({"methods": ("lpmf", 5)}, "method 5: expected a method name such as 'lpmf' or 'exact:max_states=10000', "
                               "or a method instance"),
    ({"methods": [None]}, "method None: expected a method name"),
    ({"methods": "lpmf"}, "hook option methods='lpmf': give a list of method names, not a string"),
    ({"capture_dir": 123}, "hook option capture_dir=123: expected a folder path"),
    ({"max_seconds": 0}, "hook option max_seconds=0"),
    ({"fusion_slack_fraction": 1.5}, "hook option fusion_slack_fraction=1.5"),
    ({"slab": 1}, "hook option slab=1"),
])
def test_every_bad_option_value_is_one_reorder_error_naming_it(fields, message):
    with pytest.raises(ReorderError) as info:
        HookOptions(**fields)
    assert str(info.value).startswith(message)


def test_options_come_as_one_value_and_keywords_replace_its_fields():
    base = HookOptions(methods=["lpmf"], compare=True)
    with hook.use(base, max_seconds=5) as session:
        assert session.options == HookOptions(methods=("lpmf",), compare=True, max_seconds=5)
    with pytest.raises(ReorderError, match="expected a HookOptions"):
        hook.install(["lpmf"])  # the old positional methods
    assert HookOptions(poison=True).slab  # poison implies slab
    with pytest.raises(ReorderError, match="at least one method"):
        HookOptions(methods=[])
    with pytest.raises(ReorderError, match="fusion_slack_bytes=True"):
        HookOptions(fusion_slack_bytes=True)
    assert HookOptions().uuid() == HookOptions(capture_dir="/tmp/x").uuid() != HookOptions(compare=True).uuid()


# --- sessions: installation, registry, threads ---------------------------------------------------------------------


def test_the_pass_and_its_copies_find_their_session_through_a_token():
    import torch._inductor.config as config

    with hook.use() as session:
        ours = config._post_fusion_custom_pass
        pickle.dumps(config.get_config_copy())  # Inductor copies its configuration: the session stays out of it
        clone = copy.deepcopy(ours)  # Inductor compiles a backward with a copy of the forward's configuration
        assert clone.session is session and clone.uuid() == ours.uuid()
        # Inductor hashes the pickled pass into its FX graph cache key: equal options, equal keys in any session
        other = ReorderPass(Session(), previous=ours.previous, inductor_fallback=ours.inductor_fallback)
        assert pickle.dumps(other) == pickle.dumps(ours)
        assert pickle.dumps(ReorderPass(Session(HookOptions(compare=True)))) != pickle.dumps(ours)
        unpickled = pickle.loads(pickle.dumps(ours))
        assert unpickled.session is None and unpickled.uuid() == ours.uuid()  # no records across processes
    assert ours.session is None and Session.find(session.token) is None  # closed: no more records


def test_installations_are_per_thread_like_inductors_configuration():
    import torch._inductor.config as config

    seen = {}
    ready, done = threading.Barrier(2, timeout=60), threading.Barrier(2, timeout=60)

    def worker(name):
        with hook.use(methods=[name]) as session:
            ready.wait()
            seen[name] = (config._post_fusion_custom_pass.session is session, session.options.methods)
            done.wait()
        seen[name] += (config._post_fusion_custom_pass,)

    threads = [threading.Thread(target=worker, args=(name,), daemon=True) for name in ("lpmf", "bfs")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert seen == {"lpmf": (True, ("lpmf",), None), "bfs": (True, ("bfs",), None)}


def test_records_are_typed_json_and_safe_to_add_from_threads():
    session = Session()

    def add(i):
        for j in range(200):
            session.add(FallbackRecord(f"g{i}_{j}", "order", "reason"))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(session.fallbacks) == 800 and len({r.graph for r in session}) == 800
    assert session.to_json()[0] == {"kind": "fallback", "graph": "g0_0", "stage": "order", "reason": "reason"}


def test_cache_hits_are_counted_from_the_installation_on():
    session = Session()
    session.note_cache_hits(7)  # what the process had served before: not this session's
    session.note_cache_hits(7)
    session.note_cache_hits(9)
    session.note_cache_hits(10)
    assert session.cache_hits == 3 and [r.count for r in session.records] == [2, 1]


# --- 24.4(a): optimal and notes agree --------------------------------------------------------------------------------


def backward_like(tangents_freed: bool):
    """A backward graph where the order of lowest estimate holds the tangent longest once tangents are freed."""
    nodes = [NodeSpec("n0", [BufferSpec("b0", 512)]), NodeSpec("n1", [BufferSpec("b1", 1024)]),
             NodeSpec("n2", [BufferSpec("b2", 64)]),
             NodeSpec("n3", [BufferSpec("b3", 512)], ["b0", "b2", "tangents_1"]),
             NodeSpec("n4", [BufferSpec("b4", 512)], ["b1"])]
    return build_graph(nodes, [InputSpec("tangents_1", 1024, freeable=tangents_freed)], ["b0", "b4"])


def test_an_order_chosen_for_freed_tangents_above_the_minimum_is_not_called_optimal_anywhere():
    graph, real_graph = backward_like(False), backward_like(True)
    result = reorder_for_peak_memory(graph)
    assert result.optimal and result.notes["exact"].startswith("starting order is optimal")
    choice = choose_order(graph, real_graph, result)
    assert choice.method.startswith("tangents_freed_") and choice.peak > result.peak
    assert not choice.optimal
    assert choice.peak_tangents_freed <= choice.peak_tangents_freed_of_stock_order
    assert "not optimal" in choice.notes["tangents_freed"]
    for key, note in choice.notes.items():  # a note may call optimal only another order, and names it
        if key != "tangents_freed" and "optimal" in note:
            assert note.startswith(f"about the order of lowest estimate ({result.method}, {result.peak:,} B)")


def test_an_order_at_the_minimum_keeps_the_notes_of_the_methods():
    graph = backward_like(False)
    result = reorder_for_peak_memory(graph)
    choice = choose_order(graph, graph, result)  # nothing to free: the lowest estimate is kept
    assert choice.peak == result.peak and choice.optimal and choice.notes == result.notes


# --- 24.4(b): every method value is documented -----------------------------------------------------------------------


def test_every_method_a_record_can_name_is_documented():
    methods = [*METHODS, *(f"inductor_{m}" for m in INDUCTOR_METHODS)]
    docs = DOCS.read_text()
    for method in methods:
        assert f"`{method}`" in docs, method
    assert "`tangents_freed_<m>`" in docs and "`inductor_<m>`" in docs and "`<m>@<point>`" in docs
    for method in ("tangents_freed_<m>", "inductor_<m>", "<m>@<point>", *methods):
        assert f"``{method}``" in OrderRecord.__doc__, method


# --- summaries: 24.4(c), (e), (f) -----------------------------------------------------------------------------------


def order_record(graph, peak, inductor_best, held_at_end, **fields):
    values = dict(graph=graph, nodes=10, peak=peak, method="refine",
                  methods={"baseline": inductor_best, "lpmf": inductor_best, "refine": peak}, lower_bound=peak,
                  optimal=True, seconds=0.1, estimate_of_incoming_order=inductor_best, held_at_end=held_at_end)
    return OrderRecord(**{**values, **fields})


def test_a_lower_estimate_is_shown_as_an_estimate_next_to_what_the_graph_holds_at_its_end():
    session = Session()
    session.add(order_record("model__0_forward_1", 11_021_952, 11_169_408, 9_437_184))
    session.add(order_record("model__0_backward_2", 7_000_000, 7_000_000, 2_000_000))
    summary = session.summary()
    row = next(line for line in summary.splitlines() if line.startswith("model__0_forward_1"))
    assert "11.17 MB" in row and "11.02 MB" in row and "-1.32%" in row  # the estimates and their change
    assert "9.44 MB" in row  # its outputs and saved tensors, held at its end under every order
    assert "Inductor (est.)" in summary and "ours (est.)" in summary and "change (est.)" in summary
    assert "not measured memory" in summary and "reorder.measure" in summary
    assert "highest estimate among these graphs: Inductor 11.17 MB, ours 11.02 MB" in summary


def test_a_symbolic_graph_says_at_how_many_points_its_order_and_pools_were_checked():
    session = Session(HookOptions(slab=True))
    at = {"hint": {"point": {"s0": 8}, "peak": 900, "inductor": 1000},
          "high": {"point": {"s0": 64}, "peak": 8000, "inductor": 8000}}
    session.add(dataclasses.replace(order_record("model__0_forward_1", 1000, 900, 500), peaks_at=at))
    session.add(SlabRecord("model__0_forward_1", (512, 1024), 3, 0, 1536, 1024, 1.0, 900, 1000, stacked=2,
                           peaks_at={"hint": {"point": {"s0": 8}, "estimated_peak": 900, "stock_estimated_peak": 1000,
                                              "worst_ratio": 1.0},
                                     "high": {"point": {"s0": 64}, "estimated_peak": 8000,
                                              "stock_estimated_peak": 8000, "worst_ratio": 1.25}}))
    summary = session.summary()
    assert ("model__0_forward_1: sizes are symbolic; its order was checked at 2 points of the symbols' ranges "
            "(hint, high) and is never above Inductor's own there (change (est.) from -10.00% to +0.00%") in summary
    assert ("2 of 2 pools have offsets that are expressions in the size symbols, valid for every size; the slab "
            "replay is at or below stock's at each of the 2 points (largest pool over its live-bytes bound there: "
            "1.250)") in summary


def test_the_summary_says_why_the_slab_replay_differs_from_the_order_estimate():
    session = Session(HookOptions(slab=True))
    session.add(order_record("mlp_backward", 21_594_152, 21_594_152, 1_000_000))
    session.add(SlabRecord("mlp_backward", (4096,), 3, 1, 4096, 4096, 1.0, 21_069_864, 21_069_864))
    summary = session.summary()
    assert "21.07 MB / 21.07 MB" in summary  # the slab's replay against stock's, the same model
    assert "another model than the scheduler's estimate" in summary and "in-place reuse" in summary
    assert "OrderRecord.peak" in SlabRecord.__doc__ and "in-place" in SlabRecord.__doc__


def test_the_summary_says_when_inductors_cache_served_a_graph_and_how_to_force_a_pass():
    session = Session()
    session.add(CacheHitRecord(2))
    [line] = session.summary().splitlines()
    assert line.startswith("2 graph(s) came from Inductor's FX graph cache")
    assert "no pass of ours ran" in line and "force_disable_caches = True" in line
    assert Session().summary() == NOTHING_COMPILED
    assert "compiles at the first call of the compiled function" in NOTHING_COMPILED
    guarded = Session()
    guarded.add(GuardRecord("g", 3, (), 0, 0, False, 0, 0.0))
    assert guarded.summary() == "fusion guard in g: 0 of 3 fusions blocked"


def test_the_docs_put_the_cache_note_next_to_the_first_snippet():
    docs = DOCS.read_text()
    first_snippet_end = docs.index("```", docs.index("```python") + 3)
    assert "force_disable_caches" in docs[first_snippet_end:first_snippet_end + 800]


# --- real compiles (slow) -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_graph_served_by_inductors_cache_is_recorded_as_such(monkeypatch, config_patch, tmp_path):
    import torch._functorch.config
    import torch._inductor.config as config

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    config_patch(config, force_disable_caches=False, fx_graph_cache=True)
    config_patch(torch._functorch.config, enable_autograd_cache=True)

    def program(x):
        return (x * 2).relu().sum(0)

    x = torch.randn(16, 16)
    with torch.no_grad(), hook.use(methods=["lpmf"]) as first:
        torch.compile(program)(x)
    torch._dynamo.reset()
    with torch.no_grad(), hook.use(methods=["lpmf"]) as second:
        out = torch.compile(program)(x)
    assert_close_to_eager(out, program(x), "output")
    assert len(first.graphs) == 1 and first.cache_hits == 0
    assert second.graphs == [] and second.cache_hits == 1
    assert re.search(r"^1 graph\(s\) came from Inductor's FX graph cache", second.summary(), re.M)
