"""Slab planning: storage semantics, every strategy validated, the bound, and the validator itself."""

import dataclasses
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers import FIGURES, GRAPH_NAMES, GRAPHS, ROOT, build, graph_specs, random_order

from reorder import BufferSpec, InputSpec, NodeSpec, PlanError, ReorderError, build_graph, estimate_peak_memory, load_graph
from reorder.cli import main
from reorder.planning import (STRATEGY_NAMES, PlanOptions, SlabPlan, live_bytes_bound, load_instance, pack,
                              plan_intervals, plan_memory, plan_orders, search_offsets)
from reorder.planning.intervals import storage_intervals
from reorder.planning.offsets import busiest_step
from reorder.schedulers import reorder_for_peak_memory


def overlaps(starts, ends, sizes, offsets):
    """Brute force: every pair live at a common step whose byte ranges intersect."""
    bad = []
    n = len(sizes)
    for i in range(n):
        for j in range(i + 1, n):
            if starts[i] < ends[j] and starts[j] < ends[i]:
                if offsets[i] < offsets[j] + sizes[j] and offsets[j] < offsets[i] + sizes[i] and sizes[i] and sizes[j]:
                    bad.append((i, j))
    return bad


def test_storage_semantics():
    g = build_graph([
        NodeSpec("a", [BufferSpec("x", 100)], reads=["in"]),
        NodeSpec("m", [BufferSpec("x2", 0, alias_of="x")], reads=["x"]),
        NodeSpec("split", [BufferSpec("p")], reads=["x2"]),
        NodeSpec("g0", [BufferSpec("c0", 30, parent="p")], reads=["p"]),
        NodeSpec("g1", [BufferSpec("c1", 70, parent="p")], reads=["p"]),
        NodeSpec("use", [BufferSpec("y", 10)], reads=["c0"]),
        NodeSpec("view", [BufferSpec("yv", 0, alias_of="y", alias_kind="view")], reads=["y"]),
    ], inputs=[InputSpec("in", 64), InputSpec("w", 640, freeable=False)], outputs=["yv"])
    by_owner = {g.buffer_names[s.owner]: s for s in storage_intervals(g, range(g.num_nodes), alignment=64)}
    assert set(by_owner) == {"in", "x", "c0", "c1", "y"}  # no parent, no alias, no kept input
    assert (by_owner["in"].start, by_owner["in"].end) == (0, 1)
    assert (by_owner["x"].start, by_owner["x"].end) == (0, 3)  # the rename's reader keeps x
    assert [g.buffer_names[m] for m in by_owner["x"].members] == ["x", "x2"]
    assert (by_owner["c0"].start, by_owner["c0"].end) == (2, 6)  # from the parent's step
    assert (by_owner["c1"].start, by_owner["c1"].end) == (2, 5)  # unread: until its own step
    assert by_owner["y"].end == 7  # a view of y is a graph output
    assert by_owner["c0"].size == 64 and by_owner["c1"].size == 128  # aligned
    without_inputs = storage_intervals(g, range(g.num_nodes), include_inputs=False)
    assert "in" not in {g.buffer_names[s.owner] for s in without_inputs}


def test_workspaces_follow_the_tensors():
    g = build_graph([
        NodeSpec("a", [BufferSpec("x", 100)], workspace=1000, unique_workspace=10),
        NodeSpec("b", [BufferSpec("y", 100)], reads=["x"], workspace=3000),
        NodeSpec("c", [BufferSpec("z", 100)], reads=["y"], unique_workspace=200),
    ], outputs=["z"])
    plan = plan_memory(g, options=PlanOptions(alignment=64))
    assert plan.tensor_bytes == 256
    assert plan.unique_workspace == {"a": (256, 64), "c": (320, 256)}
    assert plan.shared_workspace == (576, 3008)
    assert plan.slab_bytes == 576 + 3008 and plan.lower_bound == plan.slab_bytes


@pytest.mark.parametrize("name", GRAPH_NAMES)
def test_every_strategy_validates_on_bundled_graphs(name):
    graph = load_graph(GRAPHS / f"{name}.json")
    result = reorder_for_peak_memory(graph, ["lpmf", "refine"])
    slabs = {}
    for strategy in STRATEGY_NAMES:
        plan = plan_memory(graph, result.order, PlanOptions(strategy=strategy, restarts=20, max_seconds=600))
        assert not overlaps(plan.starts, plan.ends, plan.sizes, plan.offsets)
        assert plan.lower_bound <= plan.slab_bytes
        slabs[strategy] = plan.slab_bytes
    assert slabs["search"] <= min(slabs.values())
    exact = plan_memory(graph, result.order, PlanOptions(strategy="greedy_by_size", alignment=1))
    assert exact.tensor_bound == result.peak  # the slab's bound is the estimator's peak


@pytest.mark.parametrize("name", GRAPH_NAMES)
def test_demo_plans_do_not_depend_on_the_clock(name):
    """The demo's plan (default options) is at its bound, and the same under two safety caps that are not hit."""
    graph = load_graph(GRAPHS / f"{name}.json")
    result = reorder_for_peak_memory(graph)
    runs = [plan_orders(graph, result.orders, PlanOptions(max_seconds=cap)) for cap in (300, None)]
    assert runs[0] == runs[1]
    chosen, plan = runs[0]
    assert chosen in result.orders and not plan.capped
    assert plan.slab_bytes == plan.lower_bound  # the README's ratio 1.0000
    if name == "resnet18_train_1":
        assert plan.slab_bytes == 52_762_880


@pytest.mark.parametrize("name", GRAPH_NAMES)
def test_order_aware_slab_is_no_larger_than_inductors_best_estimate(name):
    graph = load_graph(GRAPHS / f"{name}.json")
    result = reorder_for_peak_memory(graph)
    chosen, plan = plan_orders(graph, result.orders, PlanOptions(alignment=1))  # Inductor's estimate is unaligned
    assert chosen in result.orders
    assert plan.slab_bytes <= min(FIGURES[name]["peak"].values())


def test_plan_orders_gives_what_planning_every_order_gives():
    """Orders whose bound cannot beat the best slab are skipped; the choice is the smallest slab, ties to the first."""
    graph = load_graph(GRAPHS / "vgg16_train_1.json")
    orders = reorder_for_peak_memory(graph).orders
    options = PlanOptions(restarts=20)
    plans = {name: plan_memory(graph, order, options) for name, order in orders.items()}
    smallest = min(plans.values(), key=lambda p: p.slab_bytes).slab_bytes
    first = next(name for name, p in plans.items() if p.slab_bytes == smallest)
    assert plan_orders(graph, orders, options) == (first, plans[first])


def test_the_safety_cap_is_reported_when_hit():
    graph = load_graph(GRAPHS / "resnet18_train_1.json")
    result = reorder_for_peak_memory(graph, ["lpmf"])
    plan = plan_memory(graph, result.order, PlanOptions(max_seconds=1e-9))
    assert plan.capped and plan.to_json()["capped"] is True
    plan.validate()
    assert not plan_memory(graph, result.order, PlanOptions(restarts=2)).to_json()["capped"]
    _, plan = plan_orders(graph, result.orders, PlanOptions(max_seconds=1e-9))
    assert plan.capped
    exact = plan_memory(graph, result.order, PlanOptions(exact=True, max_seconds=1e-9))
    assert exact.capped and exact.strategy == "exact"


def test_search_is_a_count_of_restarts():
    inst = load_instance(ROOT / "data" / "offset-benchmarks" / "minimalloc-challenging" / "A.1048576.csv")
    runs = [search_offsets(inst.starts, inst.ends, inst.sizes, restarts=15, max_seconds=cap) for cap in (600, None)]
    assert runs[0] == runs[1] and runs[0].restarts == 15 and not runs[0].capped
    assert runs[0].slab == max(o + z for o, z in zip(runs[0].offsets, inst.sizes, strict=True))
    more = search_offsets(inst.starts, inst.ends, inst.sizes, restarts=60)
    assert more.restarts == 60 and more.slab <= runs[0].slab
    capped = search_offsets(inst.starts, inst.ends, inst.sizes, restarts=15, max_seconds=1e-9)
    assert capped.capped and capped.restarts == 0
    plan = plan_intervals(inst.ids, inst.starts, inst.ends, inst.sizes, PlanOptions(restarts=15))
    assert plan.offsets == runs[0].offsets and not plan.capped


@pytest.mark.parametrize("field, value, message", [
    ("max_seconds", -1, "max_seconds=-1: must be a positive number of seconds"),
    ("max_seconds", float("nan"), "max_seconds=nan"),
    ("restarts", 0, "restarts=0: must be a positive integer"),
    ("restarts", 2.5, "restarts=2.5: must be a positive integer"),
    ("alignment", 48, "alignment=48: must be a power of two"),
    ("alignment", 0, "alignment=0: must be a power of two"),
    ("strategy", "best_fit", "strategy='best_fit' is unknown; known: naive, linear_scan, .*, search"),
    ("nodes", -5, "nodes=-5: must be a positive integer"),
    ("exact", "yes", "exact='yes': must be True or False"),
])
def test_plan_options_are_checked_once(field, value, message):
    with pytest.raises(PlanError, match=message):
        PlanOptions(**{field: value})


def test_plan_cli_rejects_a_negative_cap():
    done = subprocess.run([sys.executable, "-m", "reorder", "plan", str(GRAPHS / "mlp_train_0.json"), "--seconds", "-1"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "reorder: error: --seconds -1.0: must be a positive number of seconds, or None for no cap"]


@settings(max_examples=80)
@given(spec=graph_specs(), priorities=st.lists(st.integers(0, 99), max_size=10),
       strategy=st.sampled_from(STRATEGY_NAMES), alignment=st.sampled_from([1, 8, 64]))
def test_random_graphs_every_strategy(spec, priorities, strategy, alignment):
    graph = build(spec)
    order = random_order(graph, priorities)
    plan = plan_memory(graph, order, PlanOptions(strategy=strategy, alignment=alignment, restarts=3, max_seconds=600))
    assert not overlaps(plan.starts, plan.ends, plan.sizes, plan.offsets)
    assert all(o % alignment == 0 for o in plan.offsets)
    alias_output = any(graph.is_output[b] and graph.alias_of[b] is not None for b in range(graph.num_buffers))
    if alignment == 1 and not alias_output:
        assert plan.tensor_bound == estimate_peak_memory(graph, order).peak


def broken_plan(**changes):
    base = dict(strategy="manual", alignment=8, order=("a", "b"), names=("x", "y"), members=(("x",), ("y",)),
                starts=(0, 1), ends=(2, 3), sizes=(16, 16), offsets=(0, 16), tensor_bytes=32, tensor_bound=32,
                unique_workspace={}, shared_workspace=(32, 0))
    base.update(changes)
    return SlabPlan(**base)


def test_validator_names_the_overlapping_buffers_and_step():
    broken_plan().validate()
    with pytest.raises(PlanError, match=r"buffers 'x' and 'y' share bytes \[8, 16\) while both are live at step 1"):
        broken_plan(offsets=(0, 8)).validate()
    with pytest.raises(PlanError, match="buffer 'y': offset 12 is not a non-negative multiple of the alignment 8"):
        broken_plan(offsets=(0, 12)).validate()
    with pytest.raises(PlanError, match="runs past the tensor region"):
        broken_plan(offsets=(0, 24)).validate()
    broken_plan(offsets=(0, 0), starts=(0, 2)).validate()  # half-open: x is dead when y starts


def test_validator_sees_an_overlap_next_to_a_zero_size_storage():
    with pytest.raises(PlanError, match="buffers 'a' and 'c' share bytes"):
        SlabPlan.of_intervals(["a", "z", "c"], [0, 0, 1], [3, 3, 2], [100, 0, 10], [0, 50, 60]).validate()


@settings(max_examples=400)
@given(data=st.data())
def test_validator_is_exact_against_brute_force(data):
    """validate() raises if and only if two positive storages live at a common step share a byte,
    or one reaches past the slab: zero sizes, equal starts and ends, touching lifetimes and bytes."""
    n = data.draw(st.integers(1, 7))
    starts = data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    ends = [s + data.draw(st.integers(1, 3)) for s in starts]
    sizes = data.draw(st.lists(st.sampled_from([0, 0, 1, 2, 4]), min_size=n, max_size=n))
    offsets = data.draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    names = [f"s{i}" for i in range(n)]
    plan = SlabPlan.of_intervals(names, starts, ends, sizes, offsets)
    top = plan.tensor_bytes
    if data.draw(st.booleans()):  # sometimes a slab too small for its storages
        top = data.draw(st.integers(0, plan.tensor_bytes))
        plan = dataclasses.replace(plan, tensor_bytes=top, shared_workspace=(top, 0))
    bad = overlaps(starts, ends, sizes, offsets)
    past = [i for i in range(n) if offsets[i] + sizes[i] > top]
    if bad or past:
        with pytest.raises(PlanError) as err:
            plan.validate()
        if not past:
            message = str(err.value)
            assert any(f"'s{i}'" in message and f"'s{j}'" in message for i, j in bad), message
    else:
        plan.validate()


def test_offset_of_finds_aliases_through_one_index():
    plan = SlabPlan.of_intervals(["a", "b"], [0, 0], [1, 1], [8, 8], [0, 8])
    assert plan.offset_of("b") == 8
    with pytest.raises(PlanError, match="buffer 'q' owns no storage"):
        plan.offset_of("q")


def test_pack_cli_contract(capsys, tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,lower,upper,size\na,0,10,4\nb,5,15,4\nc,10,20,8\nd,0,20,2\n")
    assert main(["pack", str(path), "--json", "--seconds", "600", "--restarts", "10"]) == 0
    data = json.loads(capsys.readouterr().out)
    inst = load_instance(path)
    offsets = [data["offsets"][i] for i in inst.ids]
    assert not overlaps(inst.starts, inst.ends, inst.sizes, offsets)
    assert data["lower_bound"] == 14 and data["slab_bytes"] == max(o + z for o, z in zip(offsets, inst.sizes, strict=True)) == 14


@pytest.mark.parametrize("name", ["A.1048576.csv", "resnet50.csv"])
def test_bundled_offset_instances_pack_validly(name):
    folder = "minimalloc-challenging" if name[0] == "A" else "idealloc-real"
    inst = load_instance(ROOT / "data" / "offset-benchmarks" / folder / name)
    for strategy in ("skyline", "greedy_by_size", "linear_scan"):
        offsets = pack(inst.starts, inst.ends, inst.sizes, PlanOptions(strategy=strategy))
        if len(offsets) < 400:  # the brute-force oracle is quadratic; validate() covers the large one
            assert not overlaps(inst.starts, inst.ends, inst.sizes, offsets)
        plan = SlabPlan.of_intervals(inst.ids, inst.starts, inst.ends, inst.sizes, offsets, strategy)
        plan.validate()
        assert plan.lower_bound == live_bytes_bound(inst.starts, inst.ends, inst.sizes) <= plan.slab_bytes


@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_peak_stack_leaves_no_hole_at_the_busiest_step(data):
    n = data.draw(st.integers(1, 25))
    starts = data.draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    ends = [s + data.draw(st.integers(1, 8)) for s in starts]
    sizes = data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    offsets = pack(starts, ends, sizes, PlanOptions(strategy="peak_stack"))
    assert not overlaps(starts, ends, sizes, offsets)
    step, bound = busiest_step(starts, ends, sizes)
    at_step = [i for i in range(n) if starts[i] <= step < ends[i]]
    assert sum(sizes[i] for i in at_step) == bound == live_bytes_bound(starts, ends, sizes)
    assert max(offsets[i] + sizes[i] for i in at_step) == bound  # stacked without a gap
    stack = sorted((i for i in at_step if sizes[i]), key=lambda i: offsets[i])
    assert all(ends[a] - starts[a] >= ends[b] - starts[b] for a, b in zip(stack, stack[1:]))  # longest-lived lowest


@pytest.mark.parametrize("text, message", [
    ("a,b,c\n", "first line must be the header"),
    ("id,lower,upper,size\n1,0,x,4\n", ":2: lower, upper and size must be integers"),
    ("id,lower,upper,size\n1,5,5,4\n", "buffer '1' needs size >= 0 and lower < upper"),
    ("id,lower,upper,size\n1,0,5,4\n1,0,5,4\n", ":3: duplicate id '1'"),
])
def test_instance_errors(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ReorderError, match=message):
        load_instance(path)


def test_plan_cli_contract(capsys):
    name = "resnet18_train_1"
    assert main(["plan", str(GRAPHS / f"{name}.json"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"order", "slab_bytes", "lower_bound", "strategy", "capped", "buffers"} <= set(data)
    assert data["strategy"] == "search" and data["slab_bytes"] == data["lower_bound"] == 52_762_880
    assert data["capped"] is False
    buffers = data["buffers"]
    assert not overlaps([b["start"] for b in buffers], [b["end"] for b in buffers], [b["size"] for b in buffers],
                        [b["offset"] for b in buffers])
    graph = load_graph(GRAPHS / f"{name}.json")
    owners = {b["name"] for b in buffers}
    parents = {graph.buffer_names[graph.parent[b]] for b in range(graph.num_buffers) if graph.parent[b] is not None}
    assert not owners & parents  # multi-output parents own no storage
    assert sorted(data["order"]) == sorted(graph.node_names)


def test_plan_reports_symbolic_sizes(tmp_path, capsys):
    path = tmp_path / "dyn.json"
    path.write_text(json.dumps({"format": "reorder-graph", "version": 1, "name": "dyn", "size_hints": {"s0": 8},
                                "nodes": [{"name": "a", "outputs": [{"name": "x", "size": "s0*4096"}]},
                                          {"name": "b", "reads": ["x"], "outputs": [{"name": "y", "size": 64}]}],
                                "outputs": ["y"]}))
    assert main(["plan", str(path), "--json", "--order", "baseline"]) == 0
    buffers = {b["name"]: b for b in json.loads(capsys.readouterr().out)["buffers"]}
    assert buffers["x"]["size"] == 32768 and buffers["x"]["symbolic_size"] == "s0*4096"
    assert "symbolic_size" not in buffers["y"]
    assert main(["-v", "plan", str(path), "--order", "baseline"]) == 0
    assert "s0*4096" in capsys.readouterr().out
