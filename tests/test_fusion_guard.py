"""The fusion guard inside Inductor: cache identity, the never-fail promise, its records, and real peaks (slow)."""

import dataclasses
import logging

import pytest
import torch

pytestmark = pytest.mark.usefixtures("fresh_compiles")

from benchmarks.fusion_guard import CASES
from helpers import assert_close_to_eager
from reorder import inductor as hook
from reorder.errors import ReorderError
from reorder.inductor.fusion_guard import FusionGuard
from reorder.inductor.session import FallbackRecord, HookOptions, Session
from reorder.measure import measure


def test_uuid_changes_with_the_guards_options_and_enters_inductors_cache_key():
    import torch._inductor.config as config

    base = FusionGuard().uuid()
    assert FusionGuard().uuid() == base
    unbudgeted = HookOptions(fusion_guard=True, memory_budget=None)  # what FusionGuard() takes
    assert FusionGuard(unbudgeted).uuid() == base
    assert len({base, FusionGuard(dataclasses.replace(unbudgeted, fusion_slack_bytes=4096)).uuid(),
                FusionGuard(dataclasses.replace(unbudgeted, fusion_slack_fraction=0.05)).uuid(),
                FusionGuard(max_work=10).uuid(),
                FusionGuard(dataclasses.replace(unbudgeted, memory_budget=0.5)).uuid(),
                FusionGuard(dataclasses.replace(unbudgeted, memory_budget=0.5, fusion_guard_allocated=True)).uuid()}
               ) == 6
    assert FusionGuard(dataclasses.replace(unbudgeted, fusion_guard_allocated=True)).uuid() == base  # no budget
    with pytest.raises(ReorderError, match=r"fusion_guard_allocated='yes': expected True or False"):
        HookOptions(fusion_guard_allocated="yes")
    assert config.inductor_choices_class is None
    keys = []
    for slack in (0, 4096):
        with hook.use(fusion_guard=True, fusion_slack_bytes=slack) as session:
            guard = config.inductor_choices_class()
            assert isinstance(guard, FusionGuard) and guard.slack_bytes == slack
            assert guard.session_token == session.token
            keys.append(config.save_config_portable()["inductor_choices_class"])
    assert keys == [FusionGuard(HookOptions(fusion_guard=True)).uuid(),  # under use()'s default budget of 1.0
                    FusionGuard(HookOptions(fusion_guard=True, fusion_slack_bytes=4096)).uuid()]
    assert config.inductor_choices_class is None  # restored exactly


@pytest.mark.parametrize("budget", [None, 0.5])
def test_inductor_can_copy_its_configuration_while_a_guard_holds_a_graphs_state(budget):
    import copy
    import pickle

    import torch._inductor.config as config

    with hook.use(fusion_guard=True, fusion_slack_fraction=0.1, memory_budget=budget) as session:
        guard = config.inductor_choices_class()
        assert guard.hold_unfused_peak == (budget is not None)
        guard._view = (x for x in ())  # stands for a compile's state: neither copyable nor picklable
        assert "inductor_choices_class" in config.codegen_config()  # deep-copies every value
        pickle.dumps(config.get_config_copy())  # the pass and the guard's factory hold the session's token only
        for clone in (copy.deepcopy(guard), pickle.loads(pickle.dumps(guard))):
            assert clone.uuid() == guard.uuid() and clone._view is None
            assert clone.hold_unfused_peak == guard.hold_unfused_peak
            assert Session.find(clone.session_token) is session


def test_the_guard_does_not_replace_a_users_choices_class():
    import torch._inductor.config as config

    def users_choices():
        return FusionGuard()

    with config.patch(inductor_choices_class=users_choices):
        with pytest.raises(ReorderError, match="already set"):
            hook.install(fusion_guard=True)
        assert config.inductor_choices_class is users_choices and config._post_fusion_custom_pass is None
    from torch._inductor.choices import InductorChoices
    from torch._inductor.virtualized import V

    class UsersHeuristics(InductorChoices):
        pass

    with V.set_choices_handler(UsersHeuristics()):
        with pytest.raises(ReorderError, match="already set"):
            hook.install(fusion_guard=True)
        with hook.use():  # the budget's own guard gives way to their handler, which stays
            assert isinstance(V.choices, UsersHeuristics)
        assert isinstance(V.choices, UsersHeuristics)


class NotAScheduler:
    nodes = ["not a node"]


def test_a_failing_guard_allows_the_fusion_warns_once_and_records_why(caplog):
    session = Session()
    guard = FusionGuard(session=session)
    scheduler = NotAScheduler()
    with caplog.at_level(logging.WARNING, logger="reorder"):
        assert guard.allows(scheduler, object(), object()) is True
        assert guard.allows(scheduler, object(), object()) is True
    assert len([r for r in caplog.records if "fusion guard off" in r.getMessage()]) == 1
    [record] = [guard.finish(scheduler, "g")]
    assert session.guards == [record] and record.graph == "g" and "Error" in record.failed


def test_the_budgets_own_guard_judges_the_graphs_of_the_regions_it_partitioned_and_holds_their_peak(monkeypatch):
    """With ``fusion_guard`` left None the guard is the budget's: it judges (and holds at the unfused peak) the
    forward and backward of a region the partitioner chose for, whichever region of the step; not a region whose
    partition fell back to Inductor's (it has no record), nor an inference graph, which it leaves to Inductor
    with no record. ``fusion_guard=True`` judges every graph, holding only the partitioned ones'."""
    import reorder.inductor.fusion_guard as fusion_guard
    from test_compiled_budget import record

    session = Session()
    for region in ("model__0", "model__4"):  # a step's first region and a later one (a loss compiled apart)
        session.add(dataclasses.replace(record(1000), graph=f"{region}_joint_{region[-1]}"))
    session.add(FallbackRecord("model__7_joint_20", "partition", "RuntimeError: no frontier today"))
    judged = {}
    for fusion_guard_option in (None, True):
        guard = FusionGuard(HookOptions(fusion_guard=fusion_guard_option), session=session)
        for name in ("model__0_forward_1", "model__0_backward_3", "model__4_backward_17", "model__7_forward_21",
                     "model__2_inference_5", "graph"):
            monkeypatch.setattr(fusion_guard, "graph_being_compiled", lambda name=name: name)
            view = guard.view_of(NotAScheduler())
            judged[fusion_guard_option, name] = (view.judged, view.hold)
            assert guard.allows(NotAScheduler(), object(), object()) is True  # judged or not: never fails
    held = {("model__0_forward_1", (True, True)), ("model__0_backward_3", (True, True)),
            ("model__4_backward_17", (True, True))}
    assert {(n, v) for (o, n), v in judged.items() if o is None and v[0]} == held
    assert {n for (o, n), v in judged.items() if o is None and not v[0]} == {"model__7_forward_21",
                                                                             "model__2_inference_5", "graph"}
    assert {(n, v) for (o, n), v in judged.items() if o is True} == held | {
        (n, (True, False)) for n in ("model__7_forward_21", "model__2_inference_5", "graph")}
    monkeypatch.setattr(fusion_guard, "graph_being_compiled", lambda: "model__2_inference_5")
    guard = FusionGuard(HookOptions(), session=session)
    assert guard.finish(NotAScheduler(), "model__2_inference_5") is None  # not judged: no record
    assert session.guards == []


def test_a_graph_the_guard_was_never_asked_about_still_gets_a_record():
    session = Session()
    guard = FusionGuard(session=session)
    first, second = NotAScheduler(), NotAScheduler()
    guard.finish(first, "g0")
    guard.finish(second, "g1")
    assert [(r.graph, r.checks, r.blocked, r.failed) for r in session.guards] == [("g0", 0, (), None),
                                                                                 ("g1", 0, (), None)]
    FusionGuard().finish(first, "nobody's")  # a guard without a session records nothing
    assert len(session) == 2


class FakeNode:
    """A scheduler node as the guard sees it: its name and the operations it holds."""

    def __init__(self, names):
        self.names = tuple(names)

    def get_name(self):
        return "_".join(self.names)

    def get_operation_names(self):
        return set(self.names)


class FakeScheduler:
    """What the guard reads of Inductor's scheduler: the fused node of each operation."""

    def __init__(self, names):
        self.name_to_fused_node = {name: FakeNode([name]) for name in names}

    def get_fused_node(self, node):
        return self.name_to_fused_node[next(iter(node.get_operation_names()))]

    def fuse(self, node1, node2):
        fused = FakeNode(node1.names + node2.names)
        for name in fused.names:
            self.name_to_fused_node[name] = fused
        return fused


@pytest.mark.parametrize("hold, allowed, peak", [(False, [True, True, True], 5), (True, [True, True, False], 4)])
def test_rises_within_the_slack_add_up_unless_the_unfused_peak_is_held(hold, allowed, peak):
    """``total += relu(mm(x, w[i]))``: fusing the adds into one kernel holds one more matmul output per add, a
    rise of 1 MB each time, within a slack of 1 MB; held at the unfused peak (3 MB) plus the slack, the third
    fusion is refused."""
    from test_fusion import MB, accumulation

    from reorder.fusion import PeakProfile, fused_graph, ranked_order
    from reorder.inductor.fusion_guard import _SchedulerView

    graph = accumulation(4)
    scheduler = FakeScheduler(graph.node_names)
    options = HookOptions(fusion_slack_bytes=MB, fusion_slack_fraction=0.0, memory_budget=0.5 if hold else None)
    guard = FusionGuard(options)
    view = guard._view = _SchedulerView(scheduler, hold=hold)  # as in a graph of a region the budget partitioned
    view.base, view.base_of_op = graph, {name: v for v, name in enumerate(graph.node_names)}
    view.rank = list(range(graph.num_nodes))  # the unfused peak (3 MB) the guard finds itself
    answers = []
    node = scheduler.name_to_fused_node["add0"]
    for i in (1, 2, 3):
        other = scheduler.name_to_fused_node[f"add{i}"]
        answers.append(guard.allows(scheduler, node, other))
        if answers[-1]:
            node = scheduler.fuse(node, other)
    assert answers == allowed
    groups = list(dict.fromkeys(scheduler.name_to_fused_node[name] for name in graph.node_names))
    groups = [sorted(graph.node_id(name) for name in group.names) for group in groups]
    fused = fused_graph(graph, [groups[i] for i in ranked_order(graph, groups, view.rank)])
    assert PeakProfile.of(fused).timeline.peak == peak * MB
    assert guard.finish(scheduler, "accumulation").blocked == (() if not hold else
                                                               ({"nodes": ["add0_add1_add2", "add3"], "peak": 4 * MB,
                                                                 "fused_peak": 5 * MB, "bytes": MB},))


@pytest.mark.parametrize("allocated, cpu", [(False, False), (True, False), (True, True)])
def test_a_fusion_that_raises_only_what_the_code_allocates_is_refused_when_the_guard_judges_allocations(allocated,
                                                                                                       cpu):
    """A backward that writes its logits' gradient into the logits (20 KB, in place: Inductor's estimate counts
    both, 40 KB, and the code 20 KB), then sums a 3 KB value and a 22 KB one into one output, as ALBERT sums a
    shared parameter's gradient over its layers. Fusing the two sums holds the 3 KB value until the second runs:
    the code's peak rises from 23,000 B to 25,002 B, the estimate's stays at its in-place 40,000 B. Held at the
    unfused peak, the guard allows it by the estimate; with ``fusion_guard_allocated`` it refuses it and says by
    which model. On the CPU the generated kernels gather into kernel groups, which free their dead buffers when an
    extern kernel flushes them; here the matrix products (extern) flush each group where its buffers die, so the
    peaks are the same."""
    from reorder.graph import BufferSpec, NodeSpec, build_graph
    from reorder.inductor.fusion_guard import _SchedulerView

    graph = build_graph([
        NodeSpec("logits", [BufferSpec("L", 20_000)]),
        NodeSpec("grad", [BufferSpec("G", 20_000)], reads=["L"]),  # a generated kernel: written into L
        NodeSpec("layer1", [BufferSpec("A", 3_000)], reads=["G"]),
        NodeSpec("sum1", [BufferSpec("S1", 1)], reads=["A"]),
        NodeSpec("layer2", [BufferSpec("W", 22_000)]),
        NodeSpec("sum2", [BufferSpec("S2", 1)], reads=["W"]),
        NodeSpec("out", [BufferSpec("O", 1)], reads=["S1", "S2"]),
    ], [], ["O"], name="shared")
    scheduler = FakeScheduler(graph.node_names)
    guard = FusionGuard(HookOptions(memory_budget=0.5, fusion_guard_allocated=allocated))
    view = guard._view = _SchedulerView(scheduler, hold=True, allocated=allocated)
    view.base, view.base_of_op = graph, {name: v for v, name in enumerate(graph.node_names)}
    view.rank = list(range(graph.num_nodes))
    view.generated = [False, True, False, True, False, True, True] if allocated else None  # matmuls are extern
    view.grouped = view.generated if cpu else None
    fused = scheduler.name_to_fused_node
    assert guard.allows(scheduler, fused["sum1"], fused["sum2"]) is not allocated
    assert guard.finish(scheduler, "shared").blocked == (() if not allocated else (
        {"nodes": ["sum1", "sum2"], "peak": 23_000, "fused_peak": 25_002, "bytes": 2_002, "model": "allocated"},))
    assert view.allocated_ceiling == (23_000 if allocated else None)


class FakeCpuNode(FakeNode):
    """A scheduler node of a CPU graph as :func:`~reorder.inductor.compiled_budget.kernel_groups` reads it."""

    def __init__(self, names, extern=False):
        super().__init__(names)
        self.extern = extern

    def get_device(self):
        return torch.device("cpu")

    def is_extern(self):
        return self.extern

    def is_template(self):
        return False


@pytest.mark.parametrize("rewrites, grouped", [(None, True), ("without kernel_groups", False)])
def test_the_guards_allocation_model_counts_kernel_groups_only_where_model_rewrites_keeps_them(monkeypatch, rewrites,
                                                                                               grouped):
    """The guard's model of what the code allocates honours ``model_rewrites`` as the reorder pass's model of the
    same graph does (:func:`~reorder.inductor.compiled_budget.model_of_nodes`): with ``kernel_groups`` left out,
    a CPU graph's fused lists are judged without the C++ kernel groups, and the answers it keeps for a recompile
    are keyed apart."""
    from test_fusion import accumulation

    import reorder.inductor.fusion_guard as fusion_guard
    from reorder.inductor.rewrites import MIRRORED

    graph = accumulation(2)
    scheduler = FakeScheduler(graph.node_names)
    scheduler.nodes = [FakeCpuNode([name], extern=name.startswith("mm")) for name in graph.node_names]
    monkeypatch.setattr(fusion_guard, "partitioned", lambda session, name: True)  # a graph the budget partitioned
    monkeypatch.setattr(fusion_guard, "graph_from_scheduler", lambda nodes, name, scheduler: (graph, None))
    kept = None if rewrites is None else tuple(m for m in MIRRORED if m != "kernel_groups")
    guard = FusionGuard(HookOptions(memory_budget=0.5, fusion_guard_allocated=True, model_rewrites=kept))
    assert guard.allows(scheduler, scheduler.name_to_fused_node["add0"], scheduler.name_to_fused_node["add1"])
    view = guard._view
    assert view.allocated and view.generated == [True] * graph.num_nodes  # fake nodes: none is Inductor's extern class
    assert view.grouped == ([not name.startswith("mm") for name in graph.node_names] if grouped else None)
    assert guard._answers_key(view)[4] is grouped


def test_a_fused_node_holding_an_operation_it_never_saw_turns_the_guard_off(caplog):
    """The guard's list is the first (unfused) one's nodes grouped; a fused node with an operation outside it would
    be judged from part of its members, so the guard stops, warns and allows the fusion, as stock."""
    from test_fusion import accumulation

    from reorder.inductor.fusion_guard import _SchedulerView

    graph = accumulation(2)
    scheduler = FakeScheduler(graph.node_names)
    session = Session()
    guard = FusionGuard(HookOptions(fusion_guard=True, memory_budget=None), session=session)
    view = guard._view = _SchedulerView(scheduler)
    view.base, view.base_of_op = graph, {name: v for v, name in enumerate(graph.node_names)}
    view.rank = list(range(graph.num_nodes))
    assert guard.allows(scheduler, scheduler.name_to_fused_node["add0"], scheduler.name_to_fused_node["add1"])
    fused = scheduler.fuse(scheduler.name_to_fused_node["add0"], scheduler.name_to_fused_node["add1"])
    stray = FakeNode(fused.names + ("op_new",))
    for name in fused.names:
        scheduler.name_to_fused_node[name] = stray
    with caplog.at_level(logging.WARNING, logger="reorder"):
        assert guard.allows(scheduler, stray, scheduler.name_to_fused_node["mm0"])
    assert "did not list before fusion" in guard.finish(scheduler, "accumulation").failed


def compiled_peak(name, guard):
    import torch._inductor.config as config

    program, inputs, patch = CASES[name]()
    torch._dynamo.reset()
    guards = []
    with config.patch(**patch):  # compiled afresh: the module's fixture
        compiled = torch.compile(program)
        if guard:
            with hook.use(fusion_guard=True) as session:
                out = compiled(*inputs)
            guards = session.guards
        else:
            out = compiled(*inputs)
        peak = measure(lambda: compiled(*inputs)).peak
    return out, peak, guards, measure(lambda: program(*inputs)).peak, program(*inputs)


@pytest.mark.slow
def test_the_guard_brings_an_accumulation_down_to_eagers_peak():
    out, peak, guards, eager_peak, expected = compiled_peak("accumulation", guard=True)
    assert_close_to_eager(out, expected, "output")
    assert eager_peak == 3 << 20
    assert peak <= eager_peak * 1.05
    # Stock Inductor fuses the whole chain (12 MiB, see docs/measured.md); the guard stops at pairs.
    assert len(guards) == 1 and len(guards[0].blocked) >= 5 and all(b["bytes"] > 0 for b in guards[0].blocked)


@pytest.mark.slow
def test_the_guard_keeps_two_reductions_apart_when_fusing_them_raises_the_peak():
    out, peak, guards, eager_peak, expected = compiled_peak("two_reductions", guard=True)
    assert_close_to_eager(out, expected, "output")  # sums of 2048 products, reassociated
    assert peak <= eager_peak * 1.05  # one 16 MiB product at a time, as unfused
    # fusing the first sum into the add (op1 + op4) looks like +16 MiB in the current order, but the reorder
    # pass runs the other product and its sum first: the guard confirms that and lets Inductor fuse it
    assert len(guards) == 1 and guards[0].avoided_by_reordering >= 1
    assert all(b["bytes"] > 0 for b in guards[0].blocked)


@pytest.mark.slow
def test_every_graph_compiled_under_the_guard_gets_a_record_even_with_no_fusion_asked():
    def program(x, w):
        return torch.mm(x, w)  # one extern kernel: nothing to fuse, so Inductor asks the guard nothing

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    with torch.no_grad(), hook.use(fusion_guard=True) as session:
        out = torch.compile(program)(x, w)
    assert_close_to_eager(out, program(x, w), "output")
    [order] = session.graphs
    assert [(r.graph, r.checks, r.blocked) for r in session.guards] == [(order.graph, 0, ())]
    assert "fusions blocked" in session.summary()


def _accumulation_asked(guard, graph, questions, rebuilds_allowed=True):
    """The guard asked ``questions`` (pairs of operation names) about a fresh scheduler of ``graph``, fusing what it
    allows, as Inductor does; its answers and its record."""
    from reorder.inductor.fusion_guard import _SchedulerView

    scheduler = FakeScheduler(graph.node_names)
    view = guard._view = _SchedulerView(scheduler, hold=True)
    view.base, view.base_of_op = graph, {name: v for v, name in enumerate(graph.node_names)}
    view.rank = list(range(graph.num_nodes))
    if not rebuilds_allowed:
        view.rebuild = lambda: pytest.fail("the guard judged a question it had answered for the same graph")
    answers = []
    for first, second in questions:
        node1, node2 = scheduler.name_to_fused_node[first], scheduler.name_to_fused_node[second]
        answers.append(guard.allows(scheduler, node1, node2))
        if answers[-1]:
            scheduler.fuse(node1, node2)
    return answers, guard.finish(scheduler, "accumulation")


def test_the_same_graph_compiled_again_gets_the_answers_it_got_without_judging_them_again():
    """A recompile, or each layer compiled on its own: the same graph asked the same questions in the same order
    gets the first compile's answers and counts, replayed (the accumulation's third fusion stays refused); where
    the questions part from the first compile's, the guard judges again from the scheduler as it is."""
    from test_fusion import MB, accumulation

    graph = accumulation(4)
    questions = [("add0", "add1"), ("add0", "add2"), ("add0", "add3")]
    session = Session()
    options = HookOptions(fusion_slack_bytes=MB, fusion_slack_fraction=0.0, memory_budget=0.5)
    first_answers, first = _accumulation_asked(FusionGuard(options, session=session), graph, questions)
    assert first_answers == [True, True, False] and not first.replayed and first.rebuilds > 0
    again_answers, again = _accumulation_asked(FusionGuard(options, session=session), graph, questions,
                                               rebuilds_allowed=False)
    assert again_answers == first_answers and again.replayed
    assert dataclasses.replace(again, seconds=first.seconds, replayed=False) == first
    # another order of questions: judged again, the answers a guard with no past gives
    other = [("add2", "add3"), ("add0", "add1"), ("add0", "add2")]
    fresh_answers, fresh = _accumulation_asked(FusionGuard(options, session=Session()), graph, other)
    parted_answers, parted = _accumulation_asked(FusionGuard(options, session=session), graph, other)
    assert parted_answers == fresh_answers and not parted.replayed and parted.rebuilds > 0
    # other options: judged again (a slack large enough allows every fusion)
    wider = dataclasses.replace(options, fusion_slack_bytes=4 * MB)
    wide_answers, wide = _accumulation_asked(FusionGuard(wider, session=session), graph, questions)
    assert wide_answers == [True, True, True] and not wide.replayed
