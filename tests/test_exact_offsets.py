"""The exact offset packer: against an exhaustive oracle, its statuses, determinism, effort, and its wiring."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers import GRAPHS, ROOT

from reorder import PlanError, load_graph
from reorder.cli import main
from reorder.planning import PlanOptions, SlabPlan, live_bytes_bound, load_instance, pack, pack_exact, plan_memory
from reorder.planning import exact_packing

CHALLENGING = ROOT / "data" / "offset-benchmarks" / "minimalloc-challenging"

#: Bound 4, optimum 5: the tallest step holds 4 bytes, yet no packing fits in 4.
GAP = ([3, 0, 1, 5, 1, 0, 4], [6, 4, 3, 6, 5, 1, 5], [1, 1, 2, 3, 1, 3, 2])


def oracle(starts, ends, sizes):
    """The smallest slab, by enumerating every packing in which each buffer rests on another or on 0.

    Any packing can be lowered into one of those without growing; each is
    reached by adding buffers in order of offset, each at the top of the
    placed ones it overlaps in time. Partial packings are kept as sets, so
    orders that build the same one are explored once.
    """
    n = len(sizes)
    layer = {frozenset()}
    for _ in range(n):
        following = set()
        for placed in layer:
            offsets = dict(placed)
            for i in range(n):
                if i not in offsets:
                    at = max((o + sizes[j] for j, o in offsets.items() if starts[i] < ends[j] and starts[j] < ends[i]),
                             default=0)
                    following.add(placed | {(i, at)})
        layer = following
    return min(max((o + sizes[i] for i, o in placed), default=0) for placed in layer)


def valid(starts, ends, sizes, offsets, capacity):
    plan = SlabPlan.of_intervals([str(i) for i in range(len(sizes))], starts, ends, sizes, offsets, "exact")
    plan.validate()
    return plan.slab_bytes <= capacity


def stacked(sizes):
    """Offsets with no reuse at all: an incumbent that leaves all the work to the search."""
    return [sum(sizes[:i]) for i in range(len(sizes))]


@st.composite
def instances(draw, max_buffers=7):
    """Random lifetimes and sizes; half of them with every step filled to the same height by one-step buffers,
    which is where the smallest slab can exceed the live-bytes bound."""
    steps = draw(st.integers(1, 6))
    count = draw(st.integers(1, max_buffers))
    starts, ends, sizes = [], [], []
    for _ in range(count):
        start = draw(st.integers(0, steps - 1))
        starts.append(start)
        ends.append(draw(st.integers(start + 1, steps)))
        sizes.append(draw(st.integers(0, 5)))
    if draw(st.booleans()):
        live = [sum(z for s, e, z in zip(starts, ends, sizes, strict=True) if s <= t < e) for t in range(steps)]
        for t in range(steps):
            if max(live) > live[t] and len(sizes) < max_buffers:
                starts.append(t)
                ends.append(t + 1)
                sizes.append(max(live) - live[t])
    return starts, ends, sizes


def test_the_gap_instance_is_proven():
    starts, ends, sizes = GAP
    assert live_bytes_bound(starts, ends, sizes) == 4 and oracle(starts, ends, sizes) == 5
    proof = pack_exact(starts, ends, sizes, 4, incumbent=stacked(sizes))
    assert proof.status == "infeasible" and proof.offsets is None and proof.lower_bound == 5 and proof.nodes > 0
    best = pack_exact(starts, ends, sizes, incumbent=stacked(sizes))
    assert (best.status, best.slab, best.lower_bound) == ("optimal", 5, 5)
    assert valid(starts, ends, sizes, best.offsets, 5)


@settings(max_examples=150)
@given(instance=instances())
def test_minimum_matches_the_oracle(instance):
    starts, ends, sizes = instance
    best = oracle(starts, ends, sizes)
    found = pack_exact(starts, ends, sizes, incumbent=stacked(sizes))
    assert (found.status, found.slab, found.lower_bound) == ("optimal", best, best)
    assert valid(starts, ends, sizes, found.offsets, best)


@settings(max_examples=150)
@given(instance=instances(), slack=st.integers(-2, 1))
def test_infeasible_exactly_below_the_optimum(instance, slack):
    starts, ends, sizes = instance
    capacity = oracle(starts, ends, sizes) + slack
    found = pack_exact(starts, ends, sizes, capacity, incumbent=stacked(sizes))
    if slack < 0:
        assert found.status == "infeasible" and found.offsets is None and found.lower_bound > capacity
    else:
        assert found.status in ("optimal", "feasible") and valid(starts, ends, sizes, found.offsets, capacity)
        assert (found.status == "optimal") == (found.slab == live_bytes_bound(starts, ends, sizes))


def test_a_challenging_instance_at_its_capacity():
    inst = load_instance(CHALLENGING / "J.1048576.csv")
    found = pack_exact(inst.starts, inst.ends, inst.sizes, 1048576, nodes=20_000)
    assert found.status == "feasible" and found.slab <= 1048576 and found.nodes <= 20_000
    assert found.lower_bound == live_bytes_bound(inst.starts, inst.ends, inst.sizes) < found.slab
    assert valid(inst.starts, inst.ends, inst.sizes, found.offsets, 1048576)


def test_deterministic_and_bounded_by_nodes():
    inst = load_instance(CHALLENGING / "A.1048576.csv")
    runs = [pack_exact(inst.starts, inst.ends, inst.sizes, 1048576, nodes=3000) for _ in range(2)]
    assert runs[0].status == "unknown" and runs[0].offsets is None and not runs[0].clock_stopped
    assert 2900 <= runs[0].nodes <= 3000
    assert runs[0].nodes == runs[1].nodes
    minimised = [pack_exact(inst.starts, inst.ends, inst.sizes, nodes=3000) for _ in range(2)]
    assert minimised[0].status == "feasible" and minimised[0].offsets == minimised[1].offsets
    assert valid(inst.starts, inst.ends, inst.sizes, minimised[0].offsets, minimised[0].slab)


def test_the_clock_cap_is_reported():
    inst = load_instance(CHALLENGING / "A.1048576.csv")
    found = pack_exact(inst.starts, inst.ends, inst.sizes, 1048576, max_seconds=0.0)
    assert found.status == "unknown" and found.clock_stopped


def test_empty_and_zero_size_buffers():
    assert pack_exact([], [], []).status == "optimal"
    starts, ends, sizes = [0, 0, 1], [1, 2, 2], [4, 0, 4]
    found = pack_exact(starts, ends, sizes, 4, incumbent=[0, 0, 4])
    assert found.status == "optimal" and found.offsets == (0, 0, 0) and found.nodes > 0


def test_too_many_overlaps_keeps_the_incumbent(monkeypatch):
    monkeypatch.setattr(exact_packing, "MAX_OVERLAPPING_PAIRS", 2)
    starts, ends, sizes = GAP
    found = pack_exact(starts, ends, sizes, incumbent=stacked(sizes))
    assert found.status == "feasible" and found.offsets == tuple(stacked(sizes)) and "not searched" in found.note


@pytest.mark.parametrize("args, message", [
    (([0], [1, 2], [1]), "1 starts, 2 ends and 1 sizes"),
    (([0], [0], [1]), "buffer 0 needs size >= 0 and start < end"),
    (([0], [1], [-1]), "buffer 0 needs size >= 0"),
    (([0], [1], [1], -4), "capacity=-4: must be a non-negative number of bytes"),
])
def test_bad_input_is_named(args, message):
    with pytest.raises(PlanError, match=message):
        pack_exact(*args)


def test_planner_and_plan_memory():
    starts, ends, sizes = GAP
    assert max(o + z for o, z in zip(pack(starts, ends, sizes, PlanOptions(exact=True)), sizes, strict=True)) == 5
    graph = load_graph(GRAPHS / "resnet18_train_1.json")
    plan = plan_memory(graph, options=PlanOptions(exact=True))
    assert plan.strategy == "exact" and plan.status == "optimal" and plan.slab_bytes == plan.lower_bound
    assert not plan.capped
    with pytest.raises(PlanError, match="strategy='nope' is unknown"):
        PlanOptions(strategy="nope", exact=True)


def test_pack_cli_exact(capsys, tmp_path):
    path = tmp_path / "gap.csv"
    path.write_text("id,lower,upper,size\n" + "".join(f"b{i},{s},{e},{z}\n" for i, (s, e, z) in enumerate(zip(*GAP, strict=True))))
    assert main(["pack", str(path), "--exact", "--json", "--seconds", "60"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["status"], data["slab_bytes"], data["lower_bound"]) == ("optimal", 5, 5)
    assert data["nodes"] > 0 and data["capacity"] is None and not data["clock_stopped"]
    inst = load_instance(path)
    assert valid(inst.starts, inst.ends, inst.sizes, [data["offsets"][i] for i in inst.ids], 5)
    assert main(["pack", str(path), "--exact", "--capacity", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["status"], data["offsets"], data["slab_bytes"], data["lower_bound"]) == ("infeasible", None, None, 5)
    assert main(["pack", str(path), "--exact", "--capacity", "4"]) == 0
    assert "infeasible within 4 B: no packing, lower bound 5 B" in capsys.readouterr().out
    assert main(["pack", str(path), "--capacity", "4"]) == 2
    assert "--capacity needs --exact" in capsys.readouterr().err


def test_plan_cli_exact(capsys):
    assert main(["plan", str(GRAPHS / "mlp_train_1.json"), "--exact", "--json", "--order", "best"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["strategy"] == "exact" and data["status"] == "optimal" and data["slab_bytes"] == data["lower_bound"]
