"""The fusion guard: an ``InductorChoices`` whose fusion hooks refuse fusions that raise the peak.

Inductor asks ``V.choices`` about every candidate fusion; the object comes
from ``config.inductor_choices_class`` (a factory, also called for the FX
cache key, which takes its ``uuid()``). :class:`FusionGuard` answers first
as stock Inductor does and then, for a fusion Inductor allows, asks
:func:`reorder.fusion.fusion_peak` for the peak of the current node list
with the two nodes fused, and blocks the fusion when it rises by more than
the slack. It sits in ``can_fuse_vertical`` and ``can_fuse_horizontal``,
the hooks Inductor calls after all of its own shared checks
(``InductorChoices.can_fuse``, the vertical legality check), so it judges
only fusions Inductor would otherwise make.

Keeping in step with the scheduler: the first question about a scheduler
converts its (pre-fusion) node list once (:mod:`~reorder.inductor.adapter`)
and finds its lowest-peak order with our methods
(:func:`~reorder.schedulers.reorder_for_peak_memory`, as the reorder pass
will after fusion, with the exact search held to fewer sets:
:data:`~reorder.schedulers.RECHECK_METHODS`). The current node list is that graph's nodes grouped as
``scheduler.name_to_fused_node`` says, each fused node running where its
last member runs in that order (:func:`reorder.fusion.ranked_order`); it is
rebuilt (linear in the graph, plus a heap) when a node asked about is new or
the last fusion the guard allowed has happened. Judging in Inductor's own
listing order instead would miss fusions that only hurt once the nodes are
reordered: in PR #157563's example Inductor lists every ``rand`` before the
first add, so fusing the adds changes nothing there, yet it keeps the
reorder pass from interleaving them.

A rise in the current order is confirmed before anything is blocked: the
reorder pass runs after fusion and may find an order of the fused list that
avoids it (:func:`reorder.fusion.reordered_fusion_peak`: our methods on the
fused list against their peak on the current one, computed once per list).
Only a rise that survives reordering is blocked; the others are counted in
the record as ``avoided_by_reordering``, since blocking them would cost a
kernel for no memory.

Each fusion is judged against the peak of the list as it is then, so rises
within the slack can add up, and a fusion whose rise reordering avoids
leaves the current order's peak above what reordering reaches, so that the
next rise is measured from there. With ``hold_unfused_peak`` (what a memory
budget turns on: the budget's step model counts each program at our order's
peak of its unfused list) the guard also blocks any rise above a ceiling:
that peak plus the slack. On MobileBERT's training step at 0.762 of stock's
estimate, 27 fusions allowed one by one had raised the backward's current
order from 12.29 to 14.26 MB, and the fusion that then held a 1 MB buffer
over 53 kernels rose only 65 KB from there (the real step: 14.33 MB
against an estimated 13.28 MB). The ceiling holds while the guard has work
left: past ``max_work`` every fusion is allowed, as stock, and the record
says ``budget_exhausted``.

Inductor's estimate counts no in-place write, so a backward that writes a
large gradient into the value it comes from peaks there in the estimate and
lower in its code, where a fusion holding a buffer until a late kernel then
raises the code's peak under the estimate's. With ``fusion_guard_allocated``
a fusion the estimate allows in a held graph is judged again by the
:class:`~reorder.budget.allocation_model.AllocationModel` of the fused list
(:meth:`_SchedulerView.allocation_check`, :meth:`FusionGuard.raises_allocation`);
its refusals say ``"model": "allocated"`` in the record.

The same graph compiled again in a session (a recompile: a Hugging Face
model's loss sets ``config.problem_type`` on the first call, and Dynamo
compiles the step again; each layer of a decoder compiled on its own) is
asked the same questions in the same order, and judging them again would
give the same answers. The guard keeps each graph's answers in its session
(:class:`Answers`, keyed by the graph's
:attr:`~reorder.graph.Graph.content_digest` and the options that decide
them) and replays them while the questions match, node names and order;
from the first question that differs it judges as above, from the
scheduler as it is then. The record says ``replayed`` where every answer
was. On MobileNetV2's training step at 0.397 of stock's estimate (a
compile and its recompile, four graphs judged) the guard took 11.1 of our
stages' 24.0 s; with the recompile's answers replayed (0.65 and 0.08 s for
its two graphs) and the fused lists built faster, 4.6 of 17.3 s, with the
same checks, blocks, kernels and real peak.

Promises: **never fail the compile** (any error in the guard allows the
fusion, as stock would, with one WARNING on the ``reorder`` logger per
guard); **deterministic** (the work is a count: window steps and rebuilt
nodes; past ``max_work`` per graph the guard allows everything and says so
in the record). Every graph the guard judges (:meth:`FusionGuard.view_of`:
each with ``fusion_guard=True``, else the forward and backward of a region
the memory budget partitioned) adds one
:class:`~reorder.inductor.session.GuardRecord` to the guard's session, also
a graph where Inductor asked about no fusion (``checks=0``): the code
generation hook, which runs once fusion and our order are done, closes it
(:func:`finish_guard`). Which graphs it judges depends on what the
partitioner did in the session, which Inductor's FX graph cache key does not
see: a region whose partition fell back to Inductor's is compiled unguarded,
and a cache entry may then serve a guarded compile of the same graph with
that compile's fusions (either is a correct program of it).
Each blocked fusion is logged at DEBUG.

Inductor builds its choices object from ``config.inductor_choices_class``
(:func:`choices_factory`: a new guard each time, one per thread, since
Inductor keeps one per thread) and deep-copies and pickles its
configuration; the guard therefore holds its session's token, never the
session (:class:`~reorder.inductor.session.SessionBound`).
"""

from __future__ import annotations

import functools
import logging
import time
import weakref
from dataclasses import dataclass
from typing import Sequence

from ..errors import ReorderError
from ..budget.allocation_model import AllocationModel
from ..fusion import (CONFIRM_METHODS, FusionCheck, PeakProfile, fused_graph, fusion_groups, fusion_peak,
                      ranked_order, removable_buffers, reordered_fusion_peak, should_block)
from ..schedulers import RECHECK_METHODS, reorder_for_peak_memory
from .adapter import graph_being_compiled, graph_from_scheduler
from .compiled_budget import generated_kernels, kernel_groups, partitioned
from .rewrites import applies
from .session import GuardRecord, HookOptions, Session, SessionBound, source_hash

__all__ = ["FusionGuard", "choices_factory", "finish_guard", "forget_cached_choices", "users_choices_handler"]

log = logging.getLogger("reorder")

#: The guard's default effort per graph (window steps and rebuilt nodes).
MAX_WORK = 2_000_000


def _inductor_choices_base():
    from torch._inductor.choices import InductorChoices

    return InductorChoices


@dataclass(frozen=True)
class Answers:
    """The guard's answers in one graph, kept in the session for the same graph compiled again: per question
    (in the order asked) the two nodes' names, the answer and the counts after it; and the fusions blocked."""

    answers: tuple[tuple, ...]
    blocked: tuple[dict, ...]


class _SchedulerView:
    """The guard's picture of one scheduler: its first node list as our graph, and the current fused list;
    ``judged``: whether the guard judges this graph's fusions at all (else it allows every one, as stock, and
    records nothing); ``hold``: whether the unfused list's peak plus the slack is a ceiling (``hold_unfused_peak``,
    in a graph of a region the memory budget partitioned); ``allocated``: whether a fusion the estimate allows is
    judged again by what the generated code allocates (``fusion_guard_allocated``, in a held graph);
    ``kernel_groups``: whether that judgement counts the C++ backend's kernel groups (the ``kernel_groups`` rule
    of ``model_rewrites``, which the reorder pass's model of the same graph honours too)."""

    def __init__(self, scheduler, judged: bool = True, hold: bool = False, allocated: bool = False,
                 kernel_groups: bool = True):
        self.scheduler = weakref.ref(scheduler)
        self.graph_name = graph_being_compiled()
        self.judged = judged
        self.hold = hold
        self.allocated = allocated
        self.kernel_groups = kernel_groups
        self.generated: list[bool] | None = None  # per node of the first list: a kernel Inductor generates
        self.grouped: list[bool] | None = None  # per node of the first list: in a C++ kernel group (CPU only)
        self.allocated_ceiling: int | None = None  # the unfused list's allocated peak, in ``rank`` order, once asked
        self.fused_generated: list[bool] = []  # per node of the current list (``profile.graph``)
        self.fused_grouped: list[bool] | None = None  # per node of the current list, on the CPU
        self.allocated_peak: int | None = None  # the current list's allocated peak, once asked
        self.checks = 0
        self.blocked: list[dict] = []
        self.avoided_by_reordering = 0
        self.work = 0
        self.budget_exhausted = False
        self.rebuilds = 0
        self.seconds = 0.0
        self.failed: str | None = None
        self.base = None
        self.base_removable: tuple[bool, ...] | None = None
        self.base_of_op: dict[str, int] = {}
        self.rank: list[int] = []
        self.profile: PeakProfile | None = None
        self.current: list = []  # held so that the ids in ``position`` stay theirs
        self.position: dict[int, int] = {}
        self.decided: dict[tuple[int, int], bool] = {}
        self.best_peak: int | None = None  # our methods' lowest peak of the current list, once asked
        self.unfused_peak: int | None = None  # the confirming methods' lowest peak of the unfused list, once asked
        self.last_allowed = None
        self.answers: list[tuple] = []  # per question: the two nodes' names, the answer, the counts after it
        self.replay: Answers | None = None  # the answers given to the same graph earlier, while they still match
        self.replayed = 0  # questions answered from them

    def record(self, graph: str) -> GuardRecord:
        return GuardRecord(graph, self.checks, tuple(self.blocked), self.avoided_by_reordering, self.work,
                           self.budget_exhausted, self.rebuilds, self.seconds, self.failed,
                           replayed=bool(self.answers) and self.replayed == len(self.answers))

    def counts(self) -> tuple:
        return (self.checks, self.work, self.rebuilds, self.avoided_by_reordering, len(self.blocked),
                self.budget_exhausted)

    def answered(self, pair: tuple[str, str], allowed: bool) -> None:
        self.answers.append((pair, allowed, self.counts()))

    def answer_replayed(self, pair: tuple[str, str]) -> bool | None:
        """The answer given to this question when the same graph was judged before, where every question so far
        came in the same order (the scheduler then holds the same fused nodes, so the answer is the one judging
        would give), with the counts as they were then; None where there is none: the guard judges from here
        on, rebuilding its picture from the scheduler as it is."""
        replay, at = self.replay, len(self.answers)
        if replay is None:
            return None
        if at >= len(replay.answers) or replay.answers[at][0] != pair:
            self.replay = None
            return None
        _, allowed, (self.checks, self.work, self.rebuilds, self.avoided_by_reordering, blocked,
                     self.budget_exhausted) = replay.answers[at]
        self.blocked = list(replay.blocked[:blocked])
        self.replayed += 1
        return allowed

    def convert(self) -> int:
        """Our graph of the scheduler's node list as it is now (before fusion); returns the work (nodes)."""
        scheduler = self.scheduler()
        nodes = list(scheduler.nodes)
        self.base, _ = graph_from_scheduler(nodes, self.graph_name, scheduler=scheduler)
        if self.allocated:
            self.generated = generated_kernels(nodes)
            self.grouped = kernel_groups(nodes) if self.kernel_groups else None
        self.base_of_op = {op: i for i, node in enumerate(nodes) for op in node.get_operation_names()}
        self.rank = [0] * self.base.num_nodes
        for step, v in enumerate(reorder_for_peak_memory(self.base, RECHECK_METHODS, log_level=logging.DEBUG).order):
            self.rank[v] = step
        return self.base.num_nodes + self.base.num_edges

    def confirmed_peak(self, graph) -> int:
        """The lowest peak the confirming methods find for ``graph``; their work goes on the count."""
        self.work += len(CONFIRM_METHODS) * (graph.num_nodes + graph.num_edges)
        return reorder_for_peak_memory(graph, CONFIRM_METHODS, log_level=logging.DEBUG).peak

    def allocation_check(self, first: int, second: int) -> FusionCheck | None:
        """The peak the generated code allocates for the current list (in its order) and with nodes ``first`` and
        ``second`` fused (:class:`~reorder.budget.allocation_model.AllocationModel`: a fused node is a kernel
        Inductor generates where one of its members is, and may write its output into a buffer it reads that dies
        there; dead storage goes to the reuse pool by its bytes; on the CPU a fused node whose members all join
        the C++ backend's kernel groups joins them too); None for a cycle. Its work, the fused list's nodes and
        edges, goes on the count."""
        graph = self.profile.graph
        if self.allocated_peak is None:
            self.allocated_peak = AllocationModel.build(graph, self.fused_generated, grouped=self.fused_grouped).peak(
                range(graph.num_nodes))
            self.work += graph.num_nodes + graph.num_edges
        groups = fusion_groups(graph, first, second)
        if groups is None:
            return None
        fused = fused_graph(graph, groups)
        generated, grouped = _kernel_kinds(self.fused_generated, self.fused_grouped, groups)
        work = fused.num_nodes + fused.num_edges
        self.work += work
        model = AllocationModel.build(fused, generated, grouped=grouped)
        return FusionCheck(self.allocated_peak, model.peak(range(fused.num_nodes)), work)

    def unfused_allocated_peak(self) -> int:
        """The peak the generated code of the unfused list allocates in ``rank`` order (computed once)."""
        if self.allocated_ceiling is None:
            order = sorted(range(self.base.num_nodes), key=self.rank.__getitem__)
            model = AllocationModel.build(self.base, self.generated, grouped=self.grouped)
            self.allocated_ceiling = model.peak(order)
            self.work += self.base.num_nodes + self.base.num_edges
        return self.allocated_ceiling

    def stale(self, node1, node2) -> bool:
        scheduler = self.scheduler()
        last = self.last_allowed
        return (self.profile is None or id(node1) not in self.position or id(node2) not in self.position
                or (last is not None and scheduler.get_fused_node(last) is not last))

    def rebuild(self) -> int:
        """The current fused nodes as our graph, ordered by ``rank``, and its profile; returns the work.

        The fused nodes' members come from one pass over the ops (Inductor's ``get_operation_names`` builds a
        set on every call to a node not fused yet: a third of the guard's time on MobileNetV2's forward); only a
        node new since the last rebuild is asked, to check that no operation of it is unknown (the previous
        list, held in ``current``, keeps the ids in ``position`` unique)."""
        fused_node = self.scheduler().name_to_fused_node
        members: dict[int, list[int]] = {}  # by fused node's id: its ops' nodes in our graph
        current = []
        for op, v in self.base_of_op.items():
            node = fused_node[op]
            group = members.get(id(node))
            if group is None:
                group = members[id(node)] = []
                current.append(node)
            group.append(v)
        for node in current:  # a node new since the last rebuild holds only ops of the first list, or we stop
            if id(node) not in self.position and len(node.get_operation_names()) != len(members[id(node)]):
                raise ReorderError(f"fused node {node.get_name()} holds operations the scheduler did not list "
                                   f"before fusion")
        groups = [sorted(set(members[id(node)])) for node in current]
        order = ranked_order(self.base, groups, self.rank)
        if self.base_removable is None:  # the unfused list's, the same for every fused list made of it
            self.base_removable = removable_buffers(self.base)
        self.profile = PeakProfile.of(fused_graph(self.base, [groups[i] for i in order],
                                                  removable=self.base_removable))
        self.current = current
        self.position = {id(current[i]): step for step, i in enumerate(order)}
        if self.generated is not None:
            self.fused_generated, self.fused_grouped = _kernel_kinds(self.generated, self.grouped,
                                                                     [groups[i] for i in order])
            self.allocated_peak = None
        self.decided = {}
        self.best_peak = None
        self.last_allowed = None
        self.rebuilds += 1
        return self.base.num_nodes + self.base.num_edges


def _kernel_kinds(generated: Sequence[bool], grouped: Sequence[bool] | None, groups: Sequence[Sequence[int]]
                  ) -> tuple[list[bool], list[bool] | None]:
    """Per group of nodes fused into one: whether Inductor generates its kernel (one of its members is a kernel it
    generates) and whether it joins the C++ backend's kernel groups (all of its members do; None off the CPU)."""
    return ([any(generated[v] for v in group) for group in groups],
            None if grouped is None else [all(grouped[v] for v in group) for group in groups])


class FusionGuard(_inductor_choices_base(), SessionBound):
    """Inductor's choices, except that a fusion raising the estimated peak by more than the slack is refused.

    Parameters
    ----------
    options: the hook's :class:`~reorder.inductor.session.HookOptions`; the
        guard reads ``fusion_slack_bytes`` and ``fusion_slack_fraction`` (a
        fusion is blocked only when the peak rises by more than both: a rise
        of a few hundred bytes on a peak of megabytes is below what the
        estimate can promise, and blocking it costs a kernel) and, with a
        ``memory_budget``, also blocks every rise above the unfused list's
        peak plus the slack, however small, in the graphs of the regions the
        budget partitioned (``hold_unfused_peak``; see the module docstring).
        With ``fusion_guard`` None (the budget's guard) those are the only
        graphs it judges; with ``fusion_guard=True`` it judges every graph.
        Default: ``HookOptions(fusion_guard=True, memory_budget=None)``, a
        guard of every graph without a budget.
    session: the :class:`~reorder.inductor.session.Session` that gets one
        :class:`~reorder.inductor.session.GuardRecord` per graph (None: none is kept).
    max_work: the guard's effort per graph, in window steps and rebuilt
        nodes (see :func:`reorder.fusion.fusion_peak`); past it every fusion
        is allowed, as stock.

    Copies and pickles carry the options and the session's token only
    (:class:`~reorder.inductor.session.SessionBound`): the state of a graph
    being compiled does not go along, and neither does the session.
    """

    pickled_with_session = True
    transient = ("_view", "_warned")

    def __init__(self, options: HookOptions | None = None, session: Session | None = None, max_work: int = MAX_WORK):
        super().__init__()
        if isinstance(max_work, bool) or not isinstance(max_work, int) or max_work < 0:
            raise ReorderError(f"fusion guard: max_work={max_work!r} must be an int >= 0")
        self.options = options if options is not None else HookOptions(fusion_guard=True, memory_budget=None)
        self.max_work = max_work
        self.bind(session)
        self.fresh()

    def fresh(self) -> None:
        self._view: _SchedulerView | None = None
        self._warned = False

    @property
    def slack_bytes(self) -> int:
        return self.options.fusion_slack_bytes

    @property
    def slack_fraction(self) -> float:
        return float(self.options.fusion_slack_fraction)

    @property
    def hold_unfused_peak(self) -> bool:
        """Under a memory budget: in the graphs it partitioned, no fusion may rise above the unfused list's peak
        plus the slack."""
        return self.options.memory_budget is not None

    def view_of(self, scheduler) -> _SchedulerView:
        """A new picture of ``scheduler``: judged where ``fusion_guard=True`` asks for every graph or where the
        budget partitioned the graph's region (:func:`~reorder.inductor.compiled_budget.partitioned`), which is
        then held at its unfused peak; a graph of neither (inference, under the budget's own guard) is left to
        Inductor."""
        held = self.hold_unfused_peak and partitioned(self.session, graph_being_compiled())
        return _SchedulerView(scheduler, bool(self.options.fusion_guard) or held, held,
                              held and self.options.fusion_guard_allocated,
                              applies("kernel_groups", self.options.model_rewrites))

    def uuid(self) -> str:
        """Stable across processes: our sources and the options that change which fusions happen."""
        return (f"reorder-fusion-guard-{source_hash()[:16]}-slack={self.slack_bytes},{self.slack_fraction}"
                f"-work={self.max_work}-hold={self.hold_unfused_peak}"
                f"-allocated={self.hold_unfused_peak and self.options.fusion_guard_allocated}")

    def can_fuse_vertical(self, scheduler, node1, node2, shared_data_score) -> bool:
        return (super().can_fuse_vertical(scheduler, node1, node2, shared_data_score)
                and self.allows(scheduler, node1, node2))

    def can_fuse_horizontal(self, scheduler, node1, node2, shared_data_score) -> bool:
        return (super().can_fuse_horizontal(scheduler, node1, node2, shared_data_score)
                and self.allows(scheduler, node1, node2))

    def allows(self, scheduler, node1, node2) -> bool:
        """Our answer for a fusion Inductor allows: False only when it raises the peak beyond the slack."""
        view = self._view
        if view is None or view.scheduler() is not scheduler:
            view = self._view = self.view_of(scheduler)
        if not view.judged or view.failed is not None:
            return True
        try:
            return self._decide(view, node1, node2)
        except Exception as exc:  # noqa: BLE001 - the user's compile must go on
            view.failed = f"{type(exc).__name__}: {exc}"
            if not self._warned:
                self._warned = True
                log.warning("reorder: fusion guard off for %s, allowing fusions as stock does: %s: %s",
                            view.graph_name, type(exc).__name__, exc)
            return True

    def _decide(self, view: _SchedulerView, node1, node2) -> bool:
        t0 = time.perf_counter()
        try:
            if view.base is None:
                view.work += view.convert()
            if not view.answers:  # the first question: were this graph's asked before in the session?
                view.replay = self._answers_of(view)
            pair = (node1.get_name(), node2.get_name())
            allowed = view.answer_replayed(pair)
            if allowed is None:
                allowed = self._judge(view, node1, node2)
            view.answered(pair, allowed)
            return allowed
        finally:
            view.seconds += time.perf_counter() - t0

    def _answers_key(self, view: _SchedulerView) -> tuple:
        """Everything the guard's answers in ``view`` depend on but the questions: the graph and the options."""
        return ("fusion guard answers", view.base.content_digest, view.hold, view.allocated, view.kernel_groups,
                self.slack_bytes, self.slack_fraction, self.max_work)

    def _answers_of(self, view: _SchedulerView) -> Answers | None:
        session = self.session
        return None if session is None else session.remembered(self._answers_key(view))

    def _judge(self, view: _SchedulerView, node1, node2) -> bool:
        if view.budget_exhausted:
            return True
        if view.stale(node1, node2):
            view.work += view.rebuild()
        key = (view.position[id(node1)], view.position[id(node2)])
        if key in view.decided:
            return view.decided[key]
        check = fusion_peak(view.profile, *key)
        view.checks += 1
        ceiling = self.ceiling(view)
        if check is None:
            allowed = True  # a cycle: Inductor refuses it on its own
        else:
            view.work += check.work
            allowed = not should_block(check, self.slack_bytes, self.slack_fraction, ceiling)
            if not allowed:  # confirm: does the rise survive the reorder pass that runs after fusion?
                graph = view.profile.graph
                if view.best_peak is None:
                    view.best_peak = view.confirmed_peak(graph)
                check = reordered_fusion_peak(graph, *key, view.best_peak)
                view.work += check.work
                allowed = not should_block(check, self.slack_bytes, self.slack_fraction, ceiling)
                if allowed:
                    view.avoided_by_reordering += 1
            by_allocation = False
            if allowed and view.allocated:  # the code's allocations: a rise the estimate does not see
                allocation = view.allocation_check(*key)
                if allocation is not None and self.raises_allocation(view, allocation):
                    allowed, check, by_allocation = False, allocation, True
            if not allowed:
                names = [node1.get_name(), node2.get_name()]
                if names not in [entry["nodes"] for entry in view.blocked]:
                    entry = {"nodes": names, "peak": check.peak, "fused_peak": check.fused_peak, "bytes": check.rise}
                    if by_allocation:
                        entry["model"] = "allocated"
                    view.blocked.append(entry)
                log.debug("reorder: fusion guard blocks %s + %s in %s: peak %d -> %d (+%d bytes)", *names,
                          view.graph_name, check.peak, check.fused_peak, check.rise)
        view.decided[key] = allowed
        if allowed:
            view.last_allowed = node1
        if view.work > self.max_work:
            view.budget_exhausted = True
            log.info("reorder: fusion guard used its work budget (%d) on %s; later fusions go unchecked",
                     self.max_work, view.graph_name)
        return allowed

    def raises_allocation(self, view: _SchedulerView, check: FusionCheck) -> bool:
        """With ``fusion_guard_allocated``: whether a fusion the estimate allows raises the allocated peak
        (:meth:`_SchedulerView.allocation_check`) by more than the slack and above the unfused list's allocated peak
        plus the slack. Inductor's estimate counts no in-place write, so a graph whose code writes a large
        gradient into the value it is computed from peaks there in the estimate and lower in its code, and a fusion
        that holds a buffer until a late kernel rises in the code only: on ALBERT-MLM's backward at 0.942 of stock's
        estimate, the logits' 20.48 MB gradient put the estimate's peak at 46.0 MB while the code peaked at 40.5
        MB where the kernel that sums the two layers' shared parameters' gradients held the first layer's."""
        slack = max(self.slack_bytes, self.slack_fraction * check.peak)
        return check.rise > slack and check.fused_peak > view.unfused_allocated_peak() + slack

    def ceiling(self, view: _SchedulerView) -> int | None:
        """With ``hold_unfused_peak``, the peak no fusion may rise above: the unfused list's plus the slack.

        The unfused list's peak is the one the confirming methods find (computed once per graph), the methods a
        rise is confirmed with: a lower peak that only ``exact`` reaches would block fusions whose confirmed
        peaks merely match the unfused list's."""
        if not view.hold:
            return None
        if view.unfused_peak is None:
            view.unfused_peak = view.confirmed_peak(view.base)
        return view.unfused_peak + int(max(self.slack_bytes, self.slack_fraction * view.unfused_peak))

    def finish(self, scheduler, graph: str) -> GuardRecord | None:
        """Close the record of ``scheduler``'s graph (its fusions are done) and add it to the session.

        A graph the guard was never asked about gets a record too, with
        ``checks=0``, so every graph the guard judges has one; a graph it does
        not judge (:meth:`view_of`) has none (None).
        """
        view = self._view
        if view is None or view.scheduler() is not scheduler:
            view = self.view_of(scheduler)
        self._view = None
        if not view.judged:
            return None
        record = view.record(graph)
        session = self.session
        if session is not None:
            session.add(record)
            if view.base is not None and view.failed is None:
                session.remember(self._answers_key(view), Answers(tuple(view.answers), tuple(view.blocked)))
        return record


def guard_for(options: HookOptions, session_token: int | None, max_work: int = MAX_WORK) -> FusionGuard:
    """A new guard with ``options``, recording into the session with ``session_token`` (None: nowhere)."""
    guard = FusionGuard(options, max_work=max_work)
    guard.session_token = session_token
    return guard


def choices_factory(session: Session):
    """A picklable factory for ``config.inductor_choices_class``: a new guard with the session's options,
    recording into it (Inductor calls it once per thread, and once more to put the guard's ``uuid()`` in its
    cache key)."""
    return functools.partial(guard_for, session.options, session.token)


def finish_guard(session_token: int, graph: str) -> None:
    """After fusion: the guard Inductor asked for this graph, if it is ``session_token``'s, closes its record.

    Called at code generation (:mod:`~reorder.inductor.codegen_hook`); never fails the compile (an error is
    logged as a WARNING).
    """
    try:
        from torch._inductor.virtualized import V

        choices = V.choices
        if isinstance(choices, FusionGuard) and choices.session_token == session_token:
            choices.finish(V.graph.scheduler, graph)
    except Exception as exc:  # noqa: BLE001 - the user's compile must go on
        log.warning("reorder: fusion guard record of %s lost: %s: %s", graph, type(exc).__name__, exc)


def users_choices_handler():
    """The choices object the user set on this thread with ``V.set_choices_handler``, if any (not ours)."""
    from torch._inductor import virtualized
    from torch._inductor.choices import InductorChoices

    handler = getattr(virtualized.threadlocal, virtualized._choices._key, None)
    if handler is None or type(handler) is InductorChoices or isinstance(handler, FusionGuard):
        return None
    return handler


def forget_cached_choices() -> None:
    """Drop this thread's cached ``V.choices``, so the next compile builds it from ``config.inductor_choices_class``.

    Inductor creates its choices object on first use and keeps it per thread;
    without this, a guard installed after any compile would never be asked.
    Only Inductor's default object or a guard is dropped, never one the user set.
    """
    from torch._inductor import virtualized

    if users_choices_handler() is None and hasattr(virtualized.threadlocal, virtualized._choices._key):
        delattr(virtualized.threadlocal, virtualized._choices._key)
