"""Dynamic shapes without compiling: sizes with ranges, symbolic graphs at any point, stacked plans valid for every
size (against brute force), orders that hold across sizes, pools of symbolic groups, and the CLI's --at."""

import dataclasses
import json
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import ROOT, graph_specs, random_order, reference_peak
from reorder import BufferSpec, InputSpec, NodeSpec, PlanError, build_graph, estimate_peak_memory, load_graph
from reorder.cli import main
from reorder.errors import GraphError
from reorder.io import graph_from_dict, graph_to_dict
from reorder.planning import PlanOptions, SlabPlan, plan_memory
from reorder.planning.intervals import storage_intervals
from reorder.planning.pools import ALIGNMENT, BufferGroup, GroupKind, choose_layout, replayed_peak
from reorder.planning.symbolic import Stacking
from reorder.schedulers import reorder_for_peak_memory
from reorder.schedulers.across_sizes import INDUCTOR_ORDERS, inductor_reference, peaks_at_points
from reorder.sizes import (align_expression, check_size_ranges, evaluate_size, evaluation_points, format_size,
                           parse_point, parse_size, size_interval, size_symbols, to_sympy)

DYNAMIC_GRAPHS = ROOT / "benchmarks" / "real" / "graphs" / "dynamic"

# --- expressions ------------------------------------------------------------------------------------------------

RANGES = {"s0": (2, None), "s1": (1, 8)}
HINTS = {"s0": 16, "s1": 3}


@st.composite
def expressions(draw, depth=3):
    """Random expression texts over s0 and s1, with every operator and function a size may use."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(["s0", "s1", str(draw(st.integers(0, 9)))]))
    a, b = draw(expressions(depth - 1)), draw(expressions(depth - 1))
    form = draw(st.sampled_from(["({a})+({b})", "({a})-({b})", "({a})*({b})", "({a})**2", "-({a})",
                                 "Max({a}, {b})", "Min({a}, {b})", "FloorDiv({a}, 3)", "CeilDiv({a}, 4)",
                                 "Mod({a}, 5)", "({a})//2", "({a})/4", "ModularIndexing({a}, 2, 3)", "Abs({a})",
                                 "floor(({a})/3)", "ceiling(({a})/3)"]))
    return form.format(a=a, b=b)


def points_in(ranges, rng, count=6):
    """Random points of the ranges (an unbounded range drawn up to 300)."""
    return [{s: rng.randint(lo, hi if hi is not None else 300) for s, (lo, hi) in ranges.items()} for _ in range(count)]


@settings(max_examples=150)
@given(expressions(), st.randoms(use_true_random=False))
def test_interval_bounds_hold_at_every_point_and_printing_and_sympy_agree(text, rng):
    tree = parse_size(text)
    assert parse_size(format_size(tree)) == tree  # our printer writes what our parser reads
    lo, hi = size_interval(tree, RANGES)
    expr = to_sympy(tree, RANGES)
    for point in points_in(RANGES, rng):
        value = evaluate_size(tree, point)
        assert lo <= value <= hi
        assert Fraction(str(expr.subs({s: point[s.name] for s in expr.free_symbols}))) == value  # sympy, built node by node, computes the same


@settings(max_examples=100)
@given(expressions(), st.sampled_from([1, 8, 64]), st.randoms(use_true_random=False))
def test_aligned_expressions_round_up_to_the_alignment_at_every_point(text, alignment, rng):
    tree = parse_size(text)
    aligned = align_expression(tree, alignment)
    for point in points_in(RANGES, rng):
        value = evaluate_size(tree, point)
        if value.denominator != 1:
            continue
        assert evaluate_size(aligned, point) == math.ceil(value / alignment) * alignment


def test_an_expression_already_a_multiple_of_the_alignment_is_kept_as_it_is():
    assert align_expression(parse_size("4096*s0"), 64) == parse_size("4096*s0")
    assert format_size(align_expression(parse_size("4*s0*s1"), 64)) == "CeilDiv(4*s0*s1, 64)*64"
    assert align_expression(100, 64) == 128


def test_evaluation_points_scale_every_symbol_and_then_each_alone_inside_its_range():
    points = evaluation_points({"s0": 32, "s1": 4}, {"s0": (2, None), "s1": (2, 10)})
    assert points[0] == ("hint", {"s0": 32, "s1": 4})
    as_dict = dict(points)
    assert as_dict["lower"] == {"s0": 2, "s1": 2}
    assert as_dict["x4"] == {"s0": 128, "s1": 10}  # clamped to s1's upper bound
    assert as_dict["high"] == {"s0": 256, "s1": 10}  # 8 times the hint, or the upper bound
    assert as_dict["s0 high"] == {"s0": 256, "s1": 4} and as_dict["s1 lower"] == {"s0": 32, "s1": 2}
    assert len({tuple(p.values()) for _, p in points}) == len(points)  # each point once
    assert evaluation_points({"s0": 2}, {"s0": (2, 2)}) == [("hint", {"s0": 2})]


@pytest.mark.parametrize("ranges, message", [
    ({"s0": [3, 2]}, "range of 's0' is empty"),
    ({"s0": [9, None]}, "hint 8 of 's0' lies outside its range [9, inf]"),
    ({"s1": [1, 2]}, "symbol 's1' has a range but no size hint"),
    ({"s0": [1.5, None]}, "lower bound of 's0' must be an integer"),
    ({"s0": "1..4"}, "must be [lower, upper]"),
    ({"s0": [True, 9]}, "lower bound of 's0' must be an integer"),
])
def test_bad_ranges_name_the_symbol(ranges, message):
    with pytest.raises(GraphError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_size_ranges(ranges, {"s0": 8})


@pytest.mark.parametrize("text, message", [
    ("s9=3", "the graph has no symbol 's9' (its symbols: s0, s1)"),
    ("s0=1", "s0=1 lies outside its range [2, inf]"),
    ("s1=9", "s1=9 lies outside its range [1, 8]"),
    ("s0", "'s0' is not symbol=value"),
    ("s0=x", "the value of 's0' must be an integer"),
])
def test_a_bad_point_is_one_line_naming_the_symbol(text, message):
    with pytest.raises(GraphError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        parse_point(text, HINTS, RANGES)
    assert parse_point("s1=5", HINTS, RANGES) == {"s0": 16, "s1": 5}


# --- symbolic graphs --------------------------------------------------------------------------------------------


FORMS = ["{z}", "{c}*s0", "{c}*s1+{z}", "{c}*s0*s1", "{c}*s0**2+{z}", "{c}*CeilDiv(s0, 3)", "Max({c}*s0, {z})"]


@st.composite
def symbolic_specs(draw, max_nodes=8):
    """Random graphs of every feature (helpers.graph_specs) whose sizes are expressions in s0 and s1, with hints
    inside random ranges: ``(nodes, inputs, outputs, hints, ranges)``."""
    nodes, inputs, outputs = draw(graph_specs(max_nodes))

    def size(z):
        if not z:
            return 0
        return draw(st.sampled_from(FORMS)).format(c=max(1, z // 64), z=z)

    nodes = [NodeSpec(n.name, [BufferSpec(o.name, size(o.size) if o.alias_of is None else 0, alias_of=o.alias_of,
                                          alias_kind=o.alias_kind, parent=o.parent) for o in n.outputs],
                      n.reads, n.after, size(n.workspace), size(n.unique_workspace)) for n in nodes]
    inputs = [InputSpec(i.name, size(i.size), i.freeable) for i in inputs]
    lower0, lower1 = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    ranges = {"s0": (lower0, draw(st.sampled_from([None, lower0 + 40]))), "s1": (lower1, lower1 + 6)}
    hints = {"s0": draw(st.integers(lower0, lower0 + 20)), "s1": draw(st.integers(lower1, lower1 + 6))}
    return nodes, inputs, outputs, hints, ranges


def symbolic_graph(spec, name="symbolic"):
    nodes, inputs, outputs, hints, ranges = spec
    return build_graph(nodes, inputs, outputs, name=name, size_hints=hints, size_ranges=ranges)


def specs_at(spec, point):
    """The same specs with every size evaluated at ``point`` (for the reference simulator)."""
    nodes, inputs, outputs, hints, _ = spec

    def at(size):
        return size if isinstance(size, int) else int(evaluate_size(parse_size(size), {**hints, **point}))

    nodes = [NodeSpec(n.name, [BufferSpec(o.name, at(o.size), alias_of=o.alias_of, alias_kind=o.alias_kind,
                                          parent=o.parent) for o in n.outputs], n.reads, n.after) for n in nodes]
    return nodes, [InputSpec(i.name, at(i.size), i.freeable) for i in inputs], outputs


@settings(max_examples=60)
@given(symbolic_specs(), st.lists(st.integers(0, 50), max_size=10), st.randoms(use_true_random=False))
def test_a_symbolic_graph_at_any_point_is_the_graph_of_its_sizes_there(spec, priorities, rng):
    graph = symbolic_graph(spec)
    order = random_order(graph, priorities)
    for point in points_in(graph.size_ranges, rng, 4):
        at = graph.at(point)
        assert at.size_hints == {**graph.size_hints, **point}
        assert estimate_peak_memory(at, order).peak == reference_peak(specs_at(spec, point), graph.names_of(order))
        assert graph.at(point) is at  # made once per point: the passes ask for the same points again and again


def test_a_size_that_is_not_a_whole_number_at_a_point_names_the_buffer():
    graph = build_graph([NodeSpec("a", [BufferSpec("x", "s0 - 4")])], size_hints={"s0": 8})
    for _ in range(2):  # asked again, it says so again
        with pytest.raises(GraphError, match=r"buffer 'x' field 'size': size 's0-4' \(= -2\) is negative"):
            graph.at({"s0": 2})


def test_a_symbol_without_a_hint_is_the_error_whatever_else_the_evaluation_meets():
    """The hints are looked at only when an evaluation fails; the missing hint is still what it says, also where
    a division by zero or a huge value comes first."""
    from reorder.sizes import evaluate_bytes, parse_size

    for text in ("s1 // (s0 - 8)", "8 // (s0 - 8) + s1", "s0**40 * s1"):
        with pytest.raises(GraphError, match=r"^x: needs a size hint for s1$"):
            evaluate_bytes(parse_size(text), {"s0": 8}, "x")
    with pytest.raises(GraphError, match=r"^x: division by zero with the hints given$"):
        evaluate_bytes(parse_size("8 // (s0 - 8)"), {"s0": 8}, "x")
    with pytest.raises(GraphError, match=r"^x: size 's0-9' \(= -1\) is negative$"):
        evaluate_bytes(parse_size("s0 - 9"), {"s0": 8}, "x")


def test_the_own_format_keeps_ranges_and_symbolic_costs_and_workspaces():
    graph = build_graph([NodeSpec("a", [BufferSpec("x", "s0*64", size_alloc="s0*64", size_free="s0*32")],
                                  workspace="s0*8"),
                         NodeSpec("b", [BufferSpec("y", 64)], reads=["x"])],
                        outputs=["y"], size_hints={"s0": 4}, size_ranges={"s0": [2, 100]})
    data = graph_to_dict(graph)
    assert data["size_ranges"] == {"s0": [2, 100]}
    assert data["nodes"][0]["workspace"] == "s0*8" and data["nodes"][0]["outputs"][0]["size_free"] == "s0*32"
    again = graph_from_dict(json.loads(json.dumps(data)))
    assert again.size_ranges == graph.size_ranges and again.at({"s0": 50}).size_free == graph.at({"s0": 50}).size_free


# --- stacked plans: valid at every point ------------------------------------------------------------------------


def overlapping(plan: SlabPlan):
    """Brute force: pairs of positive-size storages live at a common step whose bytes intersect."""
    bad = []
    for i in range(len(plan.names)):
        for j in range(i + 1, len(plan.names)):
            if plan.starts[i] < plan.ends[j] and plan.starts[j] < plan.ends[i] and plan.sizes[i] and plan.sizes[j]:
                if plan.offsets[i] < plan.offsets[j] + plan.sizes[j] and \
                        plan.offsets[j] < plan.offsets[i] + plan.sizes[i]:
                    bad.append((i, j))
    return bad


@settings(max_examples=60)
@given(symbolic_specs(), st.lists(st.integers(0, 50), max_size=10), st.randoms(use_true_random=False))
def test_stacked_plans_hold_at_random_points_of_the_ranges_exactly_as_brute_force_says(spec, priorities, rng):
    graph = symbolic_graph(spec)
    order = random_order(graph, priorities)
    options = PlanOptions(restarts=20)
    plan = plan_memory(graph, order, options, symbolic=True)  # validated for every size
    if not graph.symbols:  # every size drawn constant: a plain plan
        assert isinstance(plan, SlabPlan)
        return
    for point in points_in(graph.size_ranges, rng):
        concrete = plan.at(point)
        storages = storage_intervals(graph.at(point), order, options.alignment)
        assert list(concrete.sizes) == [s.size for s in storages]  # the storages of the graph there, aligned
        assert overlapping(concrete) == []
        assert all(o % options.alignment == 0 for o in concrete.offsets)
        concrete.validate()
        assert concrete.slab_bytes >= concrete.lower_bound
    # the concrete validator against brute force on a stacking with an edge removed: exactly as brute force
    stacking = plan.stacking
    cut = [k for k in stacking.order if stacking.below[k]]
    if cut:
        k = cut[0]
        broken = Stacking(tuple(() if j == k else b for j, b in enumerate(stacking.below)), stacking.order,
                          stacking.chosen_at, stacking.ratios)
        wrong = dataclasses.replace(plan, stacking=broken)
        for point in points_in(graph.size_ranges, rng, 3):
            concrete = wrong.at(point)
            if overlapping(concrete):
                with pytest.raises(PlanError, match="share bytes"):
                    concrete.validate()
            else:
                concrete.validate()
        with pytest.raises(PlanError, match="neither is stacked on the other"):
            wrong.validate()  # the structural proof misses the pair, whatever the points show


def test_a_stacking_that_leaves_two_live_buffers_unordered_is_refused_naming_them():
    graph = build_graph([NodeSpec("a", [BufferSpec("x", "s0*64")]), NodeSpec("b", [BufferSpec("y", "s0*128")]),
                         NodeSpec("c", [BufferSpec("z", 64)], reads=["x", "y"])], outputs=["z"],
                        size_hints={"s0": 4})
    plan = plan_memory(graph, None, PlanOptions(restarts=5), symbolic=True)
    loose = dataclasses.replace(plan, stacking=Stacking(((),) * 3, plan.stacking.order, "hint", {}))
    with pytest.raises(PlanError, match="buffers 'x' and 'y' are live at a common step but neither is stacked"):
        loose.validate()


def test_a_size_that_may_be_negative_in_the_ranges_cannot_be_stacked():
    graph = build_graph([NodeSpec("a", [BufferSpec("x", "s0*64-128")]), NodeSpec("b", [BufferSpec("y", 64)],
                                                                                 reads=["x"])],
                        outputs=["y"], size_hints={"s0": 4}, size_ranges={"s0": [1, None]})
    with pytest.raises(PlanError, match="buffer 'x': its size .* may be negative"):
        plan_memory(graph, None, PlanOptions(restarts=5), symbolic=True)


def test_one_stacking_for_sizes_that_grow_at_different_rates_says_how_far_it_is_at_each_point():
    # at small s0 the quadratic buffer is small; at large s0 it dominates: the ratios tell
    graph = build_graph([NodeSpec("a", [BufferSpec("x", "s0*s0*64")]), NodeSpec("b", [BufferSpec("y", 8192)]),
                         NodeSpec("c", [BufferSpec("z", "s0*4096")], reads=["y"]),
                         NodeSpec("d", [BufferSpec("w", 64)], reads=["x", "z"])],
                        outputs=["w"], size_hints={"s0": 8}, size_ranges={"s0": [1, 256]})
    plan = plan_memory(graph, None, PlanOptions(restarts=50), symbolic=True)
    assert set(plan.ratios) == {label for label, _ in graph.evaluation_points()}
    for label, point in graph.evaluation_points():
        assert plan.ratios[label] == pytest.approx(plan.at(point).slab_bytes / plan.at(point).tensor_bound)
    assert plan.ratios["hint"] == 1.0


# --- orders that hold across sizes ------------------------------------------------------------------------------


@settings(max_examples=60)
@given(symbolic_specs())
def test_the_chosen_order_is_never_above_inductors_at_any_evaluated_point(spec):
    graph = symbolic_graph(spec)
    result = reorder_for_peak_memory(graph, ["lpmf", "bfs", "dfs", "refine", "exact"])
    if not graph.symbols:
        assert result.points == {}
        return
    reference = inductor_reference(result.peaks)
    assert result.reference == reference
    table = peaks_at_points(graph, {"chosen": result.order, "inductor": result.orders[reference]},
                            list(result.points.items()))
    for label in result.points:
        assert table[label]["chosen"] <= table[label]["inductor"]
        assert result.peaks_at[label][reference] == table[label]["inductor"]
    # the lowest at the hint among the candidates that hold at every point
    holding = [m for m in result.orders if all(result.peaks_at[p][m] <= result.peaks_at[p][reference]
                                               for p in result.points)]
    assert result.peak == min(result.peaks_at["hint"][m] for m in holding)


def test_an_order_lower_at_the_hint_but_above_inductors_elsewhere_is_passed_over():
    # found by searching random symbolic graphs: refine's order is the lowest at the hint (s0=8, s1=8) and above
    # Inductor's own at the lower bounds (s0=2, s1=3), where the sizes that grow with s0*s1 are small
    nodes = [NodeSpec("n0", [BufferSpec("b0", "15*s0*s1")]), NodeSpec("n1", [BufferSpec("b1", "15*s0*s1")]),
             NodeSpec("n2", [BufferSpec("b2", "9*s1+576")], reads=["b0", "b1"]),
             NodeSpec("n3", [BufferSpec("b3", "3*s0*s1"), BufferSpec("b3x", "3*s1+208")]),
             NodeSpec("n4", [BufferSpec("b4", "Max(3*s0, 192)")], reads=["b2"]),
             NodeSpec("n5", [BufferSpec("b5")], reads=["b0"]),
             NodeSpec("n6", [BufferSpec("b6", "6*CeilDiv(s0, 3)", parent="b5")], reads=["b4", "b5"])]
    graph = build_graph(nodes, outputs=["b3", "b2", "b1"], size_hints={"s0": 8, "s1": 8},
                        size_ranges={"s0": [2, None], "s1": [3, 9]})
    result = reorder_for_peak_memory(graph, ["lpmf", "bfs", "dfs", "refine", "exact"])
    assert result.peaks["refine"] < result.peak  # lower at the hint ...
    assert result.peaks_at["lower"]["refine"] > result.peaks_at["lower"][result.reference]  # ... above elsewhere
    assert "over refine" in result.notes["across_sizes"] and "at lower (s0=2, s1=3)" in result.notes["across_sizes"]
    for label in result.points:
        assert result.peaks_at[label][result.method] <= result.peaks_at[label][result.reference]
    assert not result.optimal  # the lowest at the hint is not kept, so the kept one is not called optimal
    assert all(note.startswith("about the order of lowest estimate (refine, ") for key, note in result.notes.items()
               if key != "across_sizes")


@pytest.mark.skipif(not DYNAMIC_GRAPHS.is_dir(), reason="no captured dynamic-shape graphs")
def test_captured_dynamic_graphs_hold_across_sizes_against_inductors_order():
    files = sorted(p for p in DYNAMIC_GRAPHS.glob("*/*.json") if "figures" not in p.name)
    assert files
    for path in files:
        graph = load_graph(path)
        assert graph.symbols, path
        result = reorder_for_peak_memory(graph)
        figures = json.loads((path.parent / "inductor-figures.json").read_text())[path.stem]
        assert result.peaks["baseline"] == figures["peak"]["baseline"]  # Inductor's own figure at the hint
        for label, peaks in result.peaks_at.items():
            assert peaks[result.method] <= peaks[result.reference], (path.name, label)


# --- pools of symbolic groups -----------------------------------------------------------------------------------


@st.composite
def symbolic_groups(draw):
    """Buffer groups of every kind over a few steps, most of them sized by an expression in s0."""
    n = draw(st.integers(1, 12))
    horizon = draw(st.integers(3, 10))
    groups = []
    for i in range(n):
        begin = draw(st.integers(0, horizon - 2))
        end = draw(st.integers(begin + 1, horizon))
        form = draw(st.sampled_from(["{z}", "{c}*s0", "{c}*s0+{z}", "{c}*s0**2", "{c}*s0*s1"]))
        z = draw(st.integers(1, 40)) * 16
        text = form.format(c=max(1, z // 64), z=z)
        tree = parse_size(text) if not text.isdigit() else None
        nbytes = int(evaluate_size(tree, HINTS)) if tree is not None else z
        kind = draw(st.sampled_from([GroupKind.POOLED] * 4 + [GroupKind.INDIVIDUAL, GroupKind.EXTERN]))
        groups.append(BufferGroup(f"g{i}", nbytes, -(-nbytes // ALIGNMENT) * ALIGNMENT, begin, end, "cpu", kind,
                                  tree))
    foreign = draw(st.lists(st.integers(0, horizon - 1), max_size=2))
    return groups, horizon, foreign


@settings(max_examples=60)
@given(symbolic_groups(), st.randoms(use_true_random=False))
def test_pools_of_symbolic_groups_never_overlap_and_never_peak_above_stock_at_any_point(case, rng):
    groups, horizon, foreign = case
    layout = choose_layout(groups, horizon, foreign, HINTS, RANGES)
    layout.validate(groups)
    points = [point for _, point in evaluation_points(HINTS, RANGES)]
    for point in points + points_in(RANGES, rng, 3):
        for pool in layout.pools:
            concrete = pool.plan if isinstance(pool.plan, SlabPlan) else pool.plan.at(point)
            assert overlapping(concrete) == []
            concrete.validate()
    symbols = {s for g in groups if g.expr is not None for s in size_symbols(g.expr)}
    for label, point in evaluation_points(HINTS, RANGES, symbols) if symbols else [("hint", {})]:
        stock = replayed_peak(horizon, [(g.begin, g.end, g.nbytes_at(point)) for g in groups])[0]
        in_pools = {i for p in layout.pools for i in p.members}
        ours = replayed_peak(horizon, [*((g.begin, g.end, g.nbytes_at(point)) for i, g in enumerate(groups)
                                         if i not in in_pools),
                                       *((p.begin, p.end, p.nbytes_at(point)) for p in layout.pools)])[0]
        assert ours <= stock, label
        assert layout.peaks_at.get(label, (layout.estimated_peak, layout.stock_estimated_peak)) == (ours, stock)


# --- the command line -------------------------------------------------------------------------------------------


@pytest.fixture
def dynamic_file(tmp_path):
    path = tmp_path / "dyn.json"
    path.write_text(json.dumps({
        "format": "reorder-graph", "version": 1, "name": "dyn", "size_hints": {"s0": 8, "s1": 3},
        "size_ranges": {"s0": [2, None], "s1": [1, 64]},
        "inputs": [{"name": "x", "size": "s0*4096"}],
        "nodes": [{"name": "a", "reads": ["x"], "outputs": [{"name": "y", "size": "s0*s1*4"}]},
                  {"name": "b", "reads": ["y"], "outputs": [{"name": "z", "size": "s1*100+7"}]},
                  {"name": "c", "reads": ["z", "x"], "outputs": [{"name": "w", "size": 640}]}],
        "outputs": ["w"]}))
    return path


def test_estimate_at_a_point_and_at_every_evaluation_point(dynamic_file, capsys):
    assert main(["estimate", str(dynamic_file), "--at", "s0=512", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    graph = load_graph(dynamic_file)
    assert data["peak"] == estimate_peak_memory(graph.at({"s0": 512})).peak
    assert data["symbols"] == {"s0": {"hint": 512, "range": [2, None]}, "s1": {"hint": 3, "range": [1, 64]}}
    assert main(["estimate", str(dynamic_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["peaks_at"]["high"] == {"point": {"s0": 64, "s1": 64},
                                        "peak": estimate_peak_memory(graph.at({"s0": 64, "s1": 64})).peak}


def test_optimize_reports_its_evaluation_points(dynamic_file, capsys):
    assert main(["optimize", str(dynamic_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["inductor_order"] in INDUCTOR_ORDERS and data["points"]["hint"] == {"s0": 8, "s1": 3}
    for label, peaks in data["peaks_at"].items():
        assert peaks[data["best"]["method"]] <= peaks[data["inductor_order"]]
    assert main(["optimize", str(dynamic_file)]) == 0
    assert "never above Inductor's order" in capsys.readouterr().out


def test_plan_prints_symbolic_offsets_and_instantiates_them_at_a_point(dynamic_file, capsys):
    assert main(["plan", str(dynamic_file), "--json", "--restarts", "20"]) == 0
    data = json.loads(capsys.readouterr().out)
    buffers = {b["name"]: b for b in data["buffers"]}
    assert buffers["x"]["offset"] == "0" and buffers["x"]["size_expression"] == "4096*s0"
    assert set(data["ratios"]) == set(data["points"])
    graph = load_graph(dynamic_file)
    point = {"s0": 1000, "s1": 64}
    for b in buffers.values():  # every printed offset is an expression our parser reads back
        assert evaluate_size(parse_size(b["offset"]), point) >= 0
    assert main(["plan", str(dynamic_file), "--json", "--restarts", "20", "--at", "s0=1000,s1=64"]) == 0
    at = json.loads(capsys.readouterr().out)
    assert at["point"] == point
    for b in at["buffers"]:
        assert b["offset"] == evaluate_size(parse_size(buffers[b["name"]]["offset"]), point)
        assert b["size"] == -(-int(evaluate_size(parse_size(buffers[b["name"]]["size_expression"]), point)) // 64) * 64
    assert at["slab_bytes"] == evaluate_size(parse_size(data["slab"]), point)
    assert main(["-v", "plan", str(dynamic_file), "--restarts", "20"]) == 0
    out = capsys.readouterr().out
    assert "slab = Max(" in out and "plan validated for every value of the symbols" in out
    assert graph.symbols == ("s0", "s1")


def test_a_bad_point_on_the_command_line_is_one_line_and_exit_2(dynamic_file, capsys):
    assert main(["estimate", str(dynamic_file), "--at", "s0=1"]) == 2
    assert capsys.readouterr().err.strip() == "reorder: error: --at 's0=1': s0=1 lies outside its range [2, inf]"
    assert main(["plan", str(dynamic_file), "--at", "q=1"]) == 2
    assert "the graph has no symbol 'q'" in capsys.readouterr().err


def test_a_symbolic_graph_is_not_planned_by_a_strategy_made_for_constant_sizes(dynamic_file, capsys):
    assert main(["plan", str(dynamic_file), "--strategy", "greedy_by_size"]) == 2
    assert "planned by stacking" in capsys.readouterr().err


def test_a_range_unbounded_below_is_evaluated_from_its_hint_and_its_sizes_stay_out_of_the_pools():
    # Inductor gives an integer input such as `logits_to_keep` (0 here) the range [-inf, 0]
    ranges = check_size_ranges({"s0": [2, None], "k": [None, 0]}, {"s0": 8, "k": 0})
    assert ranges["k"] == (None, 0)
    points = dict(evaluation_points({"s0": 8, "k": 0}, ranges))
    assert points["lower"] == {"s0": 2, "k": 0} and points["high"] == {"s0": 64, "k": 0}
    assert parse_point("k=-5", {"s0": 8, "k": 0}, ranges) == {"s0": 8, "k": -5}
    assert size_interval(parse_size("64*s0 + 64*k"), ranges)[0] == -math.inf
    groups = [BufferGroup("sliced", 512, 512, 0, 2, "cpu", GroupKind.POOLED, parse_size("64*s0 + 64*k")),
              BufferGroup("a", 512, 512, 0, 2, "cpu", GroupKind.POOLED, parse_size("64*s0")),
              BufferGroup("b", 512, 512, 1, 3, "cpu", GroupKind.POOLED, parse_size("64*s0"))]
    layout = choose_layout(groups, 3, (), {"s0": 8, "k": 0}, ranges)
    layout.validate(groups)
    assert layout.individual == (0,) and [p.members for p in layout.pools] == [(1, 2)]


def test_sizes_scaled_puts_every_backed_size_symbol_at_a_multiple_of_its_hint():
    """The budget judges a graph compiled with dynamic shapes at twice its sizes too: within ``sizes_scaled(2)``
    a symbolic size (and any expression of it, a floor division included) is evaluated with each symbol at twice
    its hint; a static size stays as it is, and outside the block every size is at its hint again."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    from reorder.inductor.fx_values import nbytes, size_hint, sizes_scaled

    mode = FakeTensorMode(shape_env=ShapeEnv())
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.STATIC, DimDynamic.DYNAMIC, DimDynamic.STATIC])
    t = mode.from_tensor(torch.empty(3, 64, 8), symbolic_context=dynamic)
    assert (size_hint(t.shape[1]), nbytes(t)) == (64, 3 * 64 * 8 * 4)
    with sizes_scaled(2):
        assert (size_hint(t.shape[1]), size_hint((t.shape[1] + 1) // 2), size_hint(t.shape[0])) == (128, 64, 3)
        assert nbytes(t) == 3 * 128 * 8 * 4
    assert nbytes(t) == 3 * 64 * 8 * 4
