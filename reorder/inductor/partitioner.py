"""``use(memory_budget=...)``: the partitioner that decides what a training step's backward recomputes.

:class:`BudgetPartitioner` is a ``CustomPartitionerFn`` that Inductor calls
for each compiled region's joint forward-backward graph
(``torch._inductor.config.custom_partitioner_fn``). It

1. runs Inductor's own min-cut partitioner: *stock*, what the compile would do without us (its minimum
   cuts and common subexpressions kept for the runs of Inductor's budgets below, :class:`_InductorRuns`);
2. converts the joint graph once (:mod:`~reorder.inductor.joint_adapter`)
   and builds the frontier of partitions (:func:`~reorder.budget.frontier.frontier`):
   stock, for each price of recomputation the partition that minimises
   saved bytes plus priced recomputation (whole, and in checkpoint
   segments), and the partitions of Inductor's own
   ``activation_memory_budget`` at :data:`INDUCTOR_BUDGETS`, each judged by
   the step's estimated peak; when the budget is at least stock's estimated
   step peak (a fraction of 1.0, say), stock is the choice whatever the
   others reach, so none of them is built (the record's ``frontier`` is
   empty; that saves most of what the partitioner adds to a compile); a
   region compiled again in the session with the same joint graph (each
   layer of a Hugging Face decoder compiled on its own recompiles per
   ``layer_idx``) reuses the frontier its first compile built
   (:func:`region_key` names everything it depends on);
3. picks the cheapest one within the budget (stock itself when stock fits);
4. hands it to Inductor's min-cut partitioner as ``torch.utils.checkpoint``
   policies on the joint graph's nodes (``node.meta["recompute"]``:
   ``MUST_RECOMPUTE`` for what the backward recomputes, ``MUST_SAVE`` for the
   rest of the forward), so Inductor's own rules and extraction make the two
   graphs: what may not be recomputed (random ops, collectives, effectful
   ops, mutations) never is, and nodes the user's checkpoint policies mark
   keep their policy;
5. checks the result: the partition Inductor made from the policies is
   estimated again, and if it came out above stock, stock is kept;
6. leaves the region's plan for the check on the compiled graphs
   (:mod:`~reorder.inductor.compiled_budget`): once our reorder pass has
   ordered the region's forward and backward, their generated code's
   allocations are replayed, and the record says whether they fit too.

A step compiled in several regions (a graph break) runs their forwards one
after another and their backwards in reverse, so each region's estimate
adds what the earlier regions of the same session saved (``held_before``),
and counts its own inputs that are not parameters as activations the step
holds. A region compiled again (same joint graph) does not count itself. A
region that runs several times a step (a compile per layer) adds what its
other calls save, under each candidate's partition: the hook's
``region_calls`` says how many. Eager code beside the regions (a loss
computed after a compiled model) holds what the hook's ``held_outside``
says, in each phase of the step
(:class:`~reorder.budget.step_peak.Held`); given per region (by the order
the step first runs them), later regions count there too: a loss compiled
apart runs between the model's forward and backward, beside its saved
values.

Its promises: never fail the compile (any error keeps stock's partition,
with a WARNING on the ``reorder`` logger and a ``FallbackRecord`` with
``stage="partition"``); never above stock's estimate; effort is a count (the
prices and our ordering methods' counts), never a clock, so the same graph and
the same convolution scratch give the same partition under any load. The
scratch is measured by running each convolution once on this machine's CPU
(:mod:`~reorder.inductor.scratch`), and oneDNN's blocked layouts differ
between instruction sets: on a convolutional model two CPUs can choose
different partitions.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import threading
import time
from contextlib import contextmanager
from typing import Callable

from ..budget.frontier import (STOCK_SOURCE, Candidate, Frontier, at_larger_sizes, budget_bytes_of, candidate_of,
                               frontier)
from ..budget.partition import partition_of
from ..budget.step_graph import StepGraph
from ..budget.step_peak import Held, donated_values, free_values, programs_of, step_peak
from .adapter import graph_being_compiled
from .compiled_budget import RegionPlan, expect_region
from .fx_values import shape_env_hints, sizes_scaled
from .joint_adapter import (draws_nothing, inputs_not_channels_last, parameter_gradient_bytes, recompute_policy,
                            saved_names, step_graph_from_joint)
from .releases import hook_base
from .scratch import probe_of
from .session import (REUSED_FRONTIER, FallbackRecord, HookOptions, PartitionRecord, Session, SessionBound,
                      source_hash)

__all__ = ["INDUCTOR_BUDGETS", "BudgetPartitioner"]

log = logging.getLogger("reorder")

#: Inductor's ``activation_memory_budget`` values whose partitions join the candidates, every tenth (its knapsack
#: over estimated runtimes finds partitions our cuts may not: MobileNetV2's 0.4 recomputes less than any cut of
#: ours as low): the frontier then holds Inductor's own choices too, judged by the same estimate.
INDUCTOR_BUDGETS: tuple[float, ...] = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)


class BudgetPartitioner(hook_base("CustomPartitionerFn"), SessionBound):
    """Inductor's partitioner hook: the cheapest partition whose estimated step peak fits ``memory_budget``.

    Holds its session's token, not the session (Inductor deep-copies and
    pickles its configuration): a deep copy records into the same session, a
    pickle carries only the options (:class:`~reorder.inductor.session.SessionBound`).
    """

    def __init__(self, session: Session):
        self.options = session.options
        self.bind(session)

    def uuid(self) -> str:
        """Our sources and the options: a different budget is a different partition, so another cache entry."""
        return f"reorder-budget-{source_hash()[:16]}-{self.options.uuid()}"

    def __call__(self, gm, joint_inputs, **kwargs):
        name = graph_being_compiled()
        runs = _InductorRuns()
        stock = _stock_partition(gm, joint_inputs, kwargs, runs)
        session = self.session
        try:
            region = _region_number(session, gm)
            with _collection_paused():
                record, modules, plan = self._partition(gm, joint_inputs, kwargs, stock, name, session, region,
                                                        runs)
        except Exception as exc:  # noqa: BLE001 - the user's compile must go on
            reason = f"{type(exc).__name__}: {exc}"
            log.warning("reorder: keeping Inductor's partition for %s: %s", name, reason)
            if session is not None:
                session.add(FallbackRecord(name, "partition", reason))
            return stock
        if session is not None:
            session.add(record)
            if plan is not None:
                expect_region(session, name, plan)
        if not record.feasible:
            log.warning("reorder: %s: memory budget %s B cannot be met; the lowest estimated step peak found is "
                        "%s B (stock's: %s B)", name, f"{record.budget_bytes:,}", f"{record.peak:,}",
                        f"{record.stock_peak:,}")
        log.info("reorder: %s: estimated step peak %d -> %d (budget %d, %s)", name, record.stock_peak, record.peak,
                 record.budget_bytes, record.source)
        return modules

    def _partition(self, gm, joint_inputs, kwargs: dict, stock: tuple, name: str, session: Session | None,
                   region: int, runs: _InductorRuns) -> tuple[PartitionRecord, tuple, RegionPlan | None]:
        t0 = time.perf_counter()
        stages: dict[str, float] = {}
        lap = _stopwatch(stages)
        num_fwd_outputs = kwargs["num_fwd_outputs"]
        digest = joint_digest(gm)
        earlier = {r.digest: r for r in (session.partitions if session is not None else ()) if r.digest != digest}
        calls = self.options.region_calls
        held_before = sum(r.saved_bytes * r.calls for r in earlier.values())
        gradients = parameter_gradient_bytes(gm, num_fwd_outputs, kwargs.get("static_lifetime_input_indices")) \
            if calls > 1 else 0  # they stay only while the region's other calls run backward
        held = Held(held_before, calls, self.options.held_outside_of(region), gradients)
        # a later region's inputs, and a region's own run many times (the previous call's output), are the step's
        inputs_are_activations = bool(earlier) or calls > 1
        graph = step_graph_from_joint(gm, num_fwd_outputs, kwargs.get("static_lifetime_input_indices"), name,
                                      inputs_are_activations=inputs_are_activations,
                                      model_rewrites=self.options.model_rewrites)
        lap("joint graph")
        stock_candidate = candidate_of(graph, _saved(graph, stock[0], num_fwd_outputs, gm), STOCK_SOURCE,
                                       held=held)
        stock_peak = (stock_candidate.peak.peak - held_before
                      + sum(r.stock_saved_bytes * r.calls for r in earlier.values()))
        budget = self.options.memory_budget
        budget_bytes = budget_bytes_of(budget, stock_peak)
        lap("stock's estimate")
        if budget_bytes >= stock_candidate.peak.peak:  # stock is the choice whatever the others reach
            front = Frontier(stock_candidate, ())
        else:
            def build() -> Frontier:
                stock_here = stock_candidate
                scaled = _at_larger_sizes(gm, num_fwd_outputs, kwargs, name, inputs_are_activations, self.options,
                                          graph)
                if scaled is not None:
                    stock_here = at_larger_sizes(stock_candidate, scaled, held=held)
                    lap("larger sizes")
                offered = {f"inductor budget {b:g}": [graph.index[n] for n in names if n in graph.index]
                           for b, names in _inductor_choices(gm, joint_inputs, kwargs, INDUCTOR_BUDGETS,
                                                                       runs).items()}
                lap("inductor budgets")
                built = frontier(graph, stock_here, held=held, offered=offered, scaled=scaled)
                lap("frontier")
                return built

            # the same region compiled again (each layer of a model compiled on its own) has the same frontier
            key = ("frontier", region_key(gm, kwargs), held, stock_candidate.partition.saved)
            front, reused = session.reused(key, build) if session is not None else (build(), False)
            if reused:
                lap(REUSED_FRONTIER)
        choice = front.choose(budget_bytes)
        chosen, modules, note = choice.candidate, stock, ""
        if not choice.is_stock:
            modules = _min_cut_with_policies(gm, joint_inputs, kwargs, graph, chosen.partition)
            made = partition_of(graph, _saved(graph, modules[0], num_fwd_outputs, gm))
            if made.saved != chosen.partition.saved:
                made_candidate = Candidate(made, step_peak(graph, made, held=held), chosen.source)
                note = (f"Inductor's min-cut saved another set than planned (estimated {chosen.peak.peak:,} B "
                        f"planned, {made_candidate.peak.peak:,} B made)")
                chosen = made_candidate
            if chosen.peak.peak > front.stock.peak.peak:  # never above stock
                note += "; above stock's estimate, so stock's partition is kept"
                chosen, modules = front.stock, stock
        lap("partition made")
        stock_partition = front.stock.partition
        reachable = front.reachable
        record = PartitionRecord(
            graph=name,
            nodes=graph.num_nodes,
            budget=budget,
            budget_bytes=budget_bytes,
            stock_peak=stock_peak,
            peak=chosen.peak.peak,
            feasible=chosen.peak.peak <= budget_bytes,
            source=chosen.source,
            saved_bytes=chosen.partition.saved_bytes,
            stock_saved_bytes=stock_partition.saved_bytes,
            recomputed=_ops(graph, chosen.partition.recomputed),
            stock_recomputed=_ops(graph, stock_partition.recomputed),
            recomputed_flops=chosen.cost,
            stock_recomputed_flops=stock_partition.cost,
            frontier=tuple((p.cost, p.peak.peak) for p in reachable),
            frontier_levels=(tuple(front.level(p) for p in reachable) if front.stock.scaled_peak is not None
                             else ()),  # judged at larger sizes too
            held_before=held_before,
            digest=digest,
            seconds=time.perf_counter() - t0,
            note=note.lstrip("; "),
            stages=tuple(stages.items()),
            calls=calls,
            held_outside=held.outside,
            gradient_bytes=held.gradients,
            region=region,
        )
        # the compiled graphs of a region after the first take the activations handed over as inputs that
        # Inductor's model of them leaves out (named as parameters are): they are not checked
        names = lambda values: frozenset(graph.node_names[v] for v in values)  # noqa: E731
        plan = None
        if not earlier:
            programs = dict(zip(("forward", "backward"), programs_of(graph, chosen.partition)))
            plan = RegionPlan(record, names(free_values(graph, chosen.partition)),
                              names(donated_values(graph, chosen.partition)),
                              {kind: _scratch_by_name(program) for kind, program in programs.items()},
                              probes=_probes(gm, self.options.model_rewrites),
                              layout_copies=inputs_not_channels_last(gm))
        return record, modules, plan


#: Where sizes are symbolic, candidates are judged at the size hints and at this multiple of them too.
LARGER_SIZES = 2


def _at_larger_sizes(gm, num_fwd_outputs: int, kwargs: dict, name: str, inputs_are_activations: bool,
                     options: HookOptions, graph: StepGraph) -> StepGraph | None:
    """The step graph of ``gm`` with every size symbol at :data:`LARGER_SIZES` times its hint, where ``graph``
    (the same at the hints) has size symbols: a graph compiled with dynamic shapes runs at other sizes than
    the call that compiled it, and at the hints its parameters can outweigh every difference between partitions.
    None for a graph without size symbols, or where the larger sizes give other nodes (a rewrite that depends
    on sizes), whose partitions would not carry over."""
    if not any(graph.size_symbol):
        return None
    with sizes_scaled(LARGER_SIZES):
        scaled = step_graph_from_joint(gm, num_fwd_outputs, kwargs.get("static_lifetime_input_indices"), name,
                                       inputs_are_activations=inputs_are_activations,
                                       model_rewrites=options.model_rewrites)
    same = scaled.node_names == graph.node_names and scaled.args == graph.args
    return scaled if same else None


@contextmanager
def _collection_paused():
    """Python's cyclic garbage collector off while the block runs, and on again after it if it was on before.

    The partition builds thousands of small containers (our graphs of each candidate's programs, Inductor's
    partitioner run at each of its budgets), and in a compile's heap every collection they trigger costs more
    than the code around it: on a decoder compiled whole at 0.4 the partition took 1.75 and 1.78 s with the
    collector on, 1.44 and 1.40 s with it off, the same partition. Nothing it makes outlives the compile but
    the partition and its records; the cycles left are collected once the collector runs again."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _stopwatch(stages: dict[str, float]):
    """A function that records, under the name it is given, the seconds since it was last called (or made)."""
    last = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        stages[name] = stages.get(name, 0.0) + now - last[0]
        last[0] = now

    return lap


def joint_digest(gm) -> str:
    """A digest of a joint graph's nodes and shapes: the same region compiled again has the same one."""
    text = "\n".join(f"{n.op} {n.name} {n.target} {getattr(n.meta.get('val'), 'shape', '')}" for n in gm.graph.nodes)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def region_key(gm, kwargs: dict) -> tuple:
    """A key of everything Inductor's partitioner and our frontier read from a joint graph: every node's
    operation, arguments, value (shape, strides, dtype, device) and checkpoint tags, each size symbol's hint and
    range, the partitioner's arguments, and functorch's configuration. Two compiles with the same key have the
    same frontier. Made of the values themselves (a size symbol's expression, not its text: printing the
    symbolic shapes of a ``dynamic=True`` decoder's joint graph took 0.7 s), so it holds within one process
    only."""
    from torch._functorch import config as functorch_config

    symbols: dict = {}  # each size symbol met -> its shape environment
    nodes = tuple((node.op, node.name, node.target, _frozen(node.args, symbols), _frozen(node.kwargs, symbols),
                   node.meta.get("recompute"), node.meta.get("ac_graph_id"), node.meta.get("partitioner_tag"),
                   _frozen(node.meta.get("val"), symbols))
                  for node in gm.graph.nodes)
    sizes = tuple(sorted((str(symbol), shape_env_hints(env).get(symbol), str(env.var_to_range.get(symbol)))
                         for symbol, env in symbols.items()))
    return (functorch_config.get_hash(), kwargs.get("num_fwd_outputs"),
            _frozen(kwargs.get("static_lifetime_input_indices"), symbols), sizes, nodes)


def _frozen(value, symbols: dict):
    """``value`` as a hashable value for :func:`region_key`: a joint node by its name, a size by its expression
    (its symbols and their shape environment go into ``symbols``), a tensor by its shape, strides, dtype and
    device, containers element by element."""
    import torch

    if isinstance(value, (tuple, list)):
        return tuple(_frozen(v, symbols) for v in value)
    if isinstance(value, dict):
        return tuple((k, _frozen(v, symbols)) for k, v in value.items())
    if isinstance(value, torch.fx.Node):
        return ("node", value.name)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        expr = value.node.expr
        for symbol in getattr(expr, "free_symbols", ()):
            symbols.setdefault(symbol, value.node.shape_env)
        return ("size", expr)
    if isinstance(value, torch.Tensor):
        strides = value.stride() if value.layout == torch.strided else None
        return ("tensor", _frozen(tuple(value.shape), symbols), _frozen(strides, symbols), value.dtype, value.device)
    try:
        hash(value)
    except TypeError:
        return ("text", repr(value))
    return value


def _region_number(session: Session | None, gm) -> int:
    """The session's number of the region being partitioned (:meth:`Session.region_number`), by Dynamo's frame
    (the joint graph's digest where no frame is compiling); 0 without a session."""
    if session is None:
        return 0
    from torch._guards import CompileContext

    compile_id = CompileContext.current_compile_id()
    return session.region_number(("frame", compile_id.frame_id) if compile_id is not None else joint_digest(gm))


def _saved(graph, forward_module, num_fwd_outputs: int, joint_module) -> list[int]:
    """Our node ids of the tensors a partitioned forward of ``joint_module`` saves (nodes the partitioner added,
    such as random states, are not joint-graph nodes and are left out)."""
    return [graph.index[n] for n in saved_names(forward_module, num_fwd_outputs, joint_module) if n in graph.index]


def _probes(gm, model_rewrites: tuple[str, ...] | None) -> dict[str, tuple]:
    """The joint graph's probed nodes by name (:func:`~reorder.inductor.scratch.probe_of`, those whose rewrite
    is on): their kernels are measured again in the layouts Inductor compiles them with
    (:func:`~reorder.inductor.compiled_budget.kernel_scratch`)."""
    return {node.name: probe for node in gm.graph.nodes if (probe := probe_of(node, model_rewrites)) is not None}


def _scratch_by_name(program) -> dict[str, int]:
    """A program's nodes that have scratch, by name (the joint graph's, which Inductor's graphs keep)."""
    return {name: bytes_ for name, bytes_ in zip(program.graph.node_names, program.scratch or ()) if bytes_}


def _ops(graph, nodes) -> int:
    """How many of ``nodes`` do work (views and elements of multi-output nodes cost nothing)."""
    return sum(1 for v in nodes if graph.cost[v])


def _inductor_partition(gm, joint_inputs, kwargs: dict, budget: float) -> tuple:
    """Inductor's min-cut partition of ``gm`` with ``torch._functorch.config.activation_memory_budget=budget``."""
    from torch._functorch import config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    with functorch_config.patch(activation_memory_budget=budget):
        return min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)


class _Chosen(Exception):
    """Carries the joint nodes Inductor's partitioner chose to save out of it, before it builds its graphs."""

    def __init__(self, names: list[str]):
        super().__init__("saved values chosen")
        self.names = names


_patching = threading.RLock()  # a block may open another (two modules patched)


@contextmanager
def _in_this_thread(replacements: dict[str, Callable[[Callable], Callable]], module=None):
    """While the block runs, each function of ``module`` (default ``torch._functorch.partitioners``) named in
    ``replacements`` is, for calls from this thread, the one its factory makes from the original
    (``replacements[name](original)``); calls from any other thread, a compile running meanwhile, get the
    original. A name the module does not have is left out. The originals are back when the block ends; one
    block patches at a time."""
    if module is None:
        import torch._functorch.partitioners as module

    caller = threading.get_ident()
    with _patching:
        originals = {name: getattr(module, name) for name in replacements if hasattr(module, name)}

        def routed(original, mine):
            return lambda *args, **kwargs: (mine if threading.get_ident() == caller else original)(*args, **kwargs)

        for name, original in originals.items():
            setattr(module, name, routed(original, replacements[name](original)))
        try:
            yield
        finally:
            for name, original in originals.items():
                setattr(module, name, original)


class _InductorRuns:
    """What Inductor's min-cut partitioner does alike in each of its runs on one joint graph within one partition
    (stock's partition, its choices at our :data:`INDUCTOR_BUDGETS`), done once for all of them while
    :meth:`shared` is open:

    * its minimum cuts (``solve_min_cut``) are remembered by their options and the nodes they may not ban: stock's
      own run at 1.0 makes the first cut every budget below 1.0 makes again, and below 1.0 every budget cuts with
      the same three sets of options, only the knapsack's last cut depending on the budget;
    * its common-subexpression pass (``fx_graph_cse``) runs once: each run makes the pass's result the joint
      module's graph, so the next run is handed that graph, which has no common subexpression left (a graph the
      pass did not make is passed through it as before);
    * the knapsack's runtime of each node (``estimate_runtime``: its flops, counted by running it on fake
      tensors) is counted once: every budget weighs the same nodes of the same graph. Only the ``"flops"`` and
      ``"testing"`` estimators are remembered; one that profiles, or a user's own, is asked every time, as
      Inductor asks it;
    * the cuts it makes are made by our Dinic (:func:`_cut_by_dinic`), six times faster than networkx's
      preflow-push on a decoder's joint graph, with the same answer.

    Only this thread's calls are changed; a compile in another thread meanwhile runs the partitioner as is."""

    def __init__(self):
        self.cuts: dict[tuple, tuple[list[str], list[str]]] = {}
        self.made_by_cse: list[tuple] = []
        self.runtimes: dict[str, float] = {}

    @contextmanager
    def shared(self, stopped: bool = False):
        """While the block runs, this thread's runs of the partitioner share the work above; ``stopped``: each
        run stops where it would build the forward and backward graphs from its choice
        (``_extract_fwd_bwd_modules``, half its time), raising :class:`_Chosen` with the names it saves."""
        replacements = {"solve_min_cut": self._remembered, "fx_graph_cse": self._once,
                        "estimate_runtime": self._counted_once}
        if stopped:
            replacements["_extract_fwd_bwd_modules"] = _stop
        with _in_this_thread(replacements), _cut_by_dinic():
            yield

    def _remembered(self, solve):
        from torch.utils._ordered_set import OrderedSet

        cuts = self.cuts

        def solved(joint_graph, node_info, min_cut_options, dont_ban=None):
            key = (repr(min_cut_options), tuple(sorted(node.name for node in dont_ban or ())))
            if key not in cuts:
                saved, banned = solve(joint_graph, node_info, min_cut_options, dont_ban)
                cuts[key] = ([node.name for node in saved], [node.name for node in banned])
            by_name = {node.name: node for node in joint_graph.nodes}  # a run may make its graph anew
            saved, banned = cuts[key]
            return [by_name[name] for name in saved], OrderedSet(by_name[name] for name in banned)
        return solved

    def _once(self, cse):
        made_by_cse = self.made_by_cse

        def eliminated(fx_graph, *args, **options):
            # 2.14 adds ``extra_node_key``, made anew by each run, which keeps a forward-only value apart from
            # one the backward needs. A graph the pass made with it has no pair left to merge under the next
            # run's key (a forward-only node's users are forward-only too), so a graph counts as done for the
            # same options by name, not by the key function's identity.
            asked = (len(args), sorted(options))
            if any(fx_graph is made and asked == made_with for made, made_with in made_by_cse):
                return fx_graph
            made_by_cse.append((cse(fx_graph, *args, **options), asked))
            return made_by_cse[-1][0]
        return eliminated

    def _counted_once(self, estimate):
        from torch._functorch import config as functorch_config

        runtimes = self.runtimes

        def estimated(node):
            if functorch_config.activation_memory_budget_runtime_estimator not in ("flops", "testing"):
                return estimate(node)
            if node.name not in runtimes:
                runtimes[node.name] = estimate(node)
            return runtimes[node.name]
        return estimated


def _stop(extract):
    """``_extract_fwd_bwd_modules`` replaced by a function that raises :class:`_Chosen` with what it was handed."""
    def stopped(joint_module, saved_values, *args, **kwargs):
        # the size symbols it saves beside them (dynamic shapes: an attention's sequence-length outputs)
        # are saved values too; without them the backward would seem to recompute what computed them
        sym_nodes = args[0] if args else kwargs.get("saved_sym_nodes", ())
        raise _Chosen([node.name for node in (*saved_values, *sym_nodes)])
    return stopped


def _stock_partition(gm, joint_inputs, kwargs: dict, runs: _InductorRuns) -> tuple:
    """Inductor's own min-cut partition of ``gm``, what the compile makes without us, with ``runs`` shared (its
    cuts made by our Dinic, and remembered for the runs after it). Should anything of ours fail in it, the
    partitioner runs again as Inductor ships it, so the compile gets stock's partition all the same."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    try:
        with runs.shared():
            return min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the user's compile must go on
        log.warning("reorder: Inductor's partitioner failed with our cuts (%s: %s); running it as it is",
                    type(exc).__name__, exc)
        runs.cuts.clear()
        return min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)


def _inductor_choices(gm, joint_inputs, kwargs: dict, budgets, runs: _InductorRuns | None = None
                      ) -> dict[float, list[str]]:
    """Per budget, the names of the joint nodes Inductor's min-cut partition of ``gm`` saves with
    ``activation_memory_budget=budget``, as its own partitioner chooses them, in less time than running it once
    per budget:

    * it is stopped where it would build the forward and backward graphs from its choice
      (``_extract_fwd_bwd_modules``, half its time), which a candidate does not need;
    * it runs once for all the budgets (:func:`_chosen_at_every_budget`): everything it does before choosing
      (dead code, common subexpressions, tags, ``classify_nodes``, distances to the backward) depends on the
      joint graph alone, so its ``choose_saved_values_set`` is asked at every budget with the same graph and
      node classes, and what it would hand to the extraction is taken from each answer as the partitioner
      takes it. It runs once per budget where that is not trusted (see there);
    * its runs share their cuts, common subexpressions and runtimes, with each other and with the earlier runs
      of ``runs`` (stock's partition: :func:`_stock_partition`), and cut by our Dinic (:class:`_InductorRuns`).
    """
    found: dict[float, list[str]] = {}
    with (runs or _InductorRuns()).shared(stopped=True):
        found.update(_chosen_at_every_budget(gm, joint_inputs, kwargs, budgets))
        for budget in budgets:
            if budget in found:
                continue
            try:
                forward = _inductor_partition(gm, joint_inputs, kwargs, budget)[0]
            except _Chosen as chosen:
                found[budget] = chosen.names
            else:  # a torch whose partitioner builds its graphs otherwise
                found[budget] = saved_names(forward, kwargs["num_fwd_outputs"], gm)
    return found


def _chosen_at_every_budget(gm, joint_inputs, kwargs: dict, budgets) -> dict[float, list[str]]:
    """Per budget, what one run of Inductor's partitioner chooses to save, its ``choose_saved_values_set`` asked
    at every budget in turn with the run's joint graph and node classes; empty where the answers cannot be
    trusted to be those of one run per budget:

    * the ranks synchronise their choices (``_sync_decision_cross_ranks``: every rank must ask alike);
    * the partitioner lacks one of the filters it hands its choice over by (saved values, size symbols kept;
      opaque objects and assert-only booleans left out), or never reaches its choice (a graph with no
      backward), or asks for it otherwise than by keyword or more than once, or the hand-over it raises with
      (:class:`_Chosen`, made by :func:`_stop`, inside whose patches this runs) is not
      what those filters make of its answer at the first budget;
    * a node carries a budget of its own (``memory_budget`` in its meta, a region's
      ``region_activation_memory_budget``), which overrides the configured one in every run."""
    import torch._functorch.partitioners as partitioners
    from torch._functorch import config as functorch_config

    budgets = tuple(budgets)
    filters = [getattr(partitioners, name, None)
               for name in ("is_sym_node", "is_opaque_node", "_is_assert_only_symbool")]
    if (getattr(functorch_config, "_sync_decision_cross_ranks", False) or None in filters or not budgets
            or _budget_annotated(gm)):
        return {}
    is_sym, is_opaque, assert_only = filters
    answers: dict[float, list] = {}
    asked = []  # one choice a run, or the answers are not trusted

    def handed_over(values) -> list[str]:  # as min_cut_rematerialization_partition filters its choice
        return ([n.name for n in values if not is_sym(n) and not is_opaque(n)]
                + [n.name for n in values if is_sym(n) and not assert_only(n)])

    def every_budget(choose):
        def chosen(joint_graph, node_info, *args, **options):
            asked.append(options.get("memory_budget"))
            if args or options.get("memory_budget") != functorch_config.activation_memory_budget:
                return choose(joint_graph, node_info, *args, **options)  # asked otherwise, or overridden: untrusted
            del options["memory_budget"]
            for budget in budgets:
                answers[budget] = choose(joint_graph, node_info, memory_budget=budget, **options)
            return answers[budgets[0]]
        return chosen

    with _in_this_thread({"choose_saved_values_set": every_budget}):
        try:
            _inductor_partition(gm, joint_inputs, kwargs, budgets[0])
        except _Chosen as stopped:
            if len(asked) == 1 and answers and handed_over(answers[budgets[0]]) == stopped.names:
                return {budget: handed_over(values) for budget, values in answers.items()}
    return {}


def _budget_annotated(gm) -> bool:
    """Whether a node of ``gm`` or of a graph module inside it carries a memory budget of its own, which Inductor's
    partitioner takes instead of ``activation_memory_budget``."""
    import torch.fx
    import torch.fx.traceback

    annotation = getattr(torch.fx.traceback, "_get_memory_budget_annotation", lambda node: None)
    return any(isinstance(node.meta.get("memory_budget"), float) or annotation(node) is not None
               for module in gm.modules() if isinstance(module, torch.fx.GraphModule) for node in module.graph.nodes)


def _cut_by_dinic():
    """While the block runs, networkx's ``minimum_cut`` is our Dinic for this thread's calls
    (:func:`_minimum_cut_by_dinic`, networkx's answer). Torch 2.13 and 2.14 cut Inductor's networks with
    networkx; 2.15's ``solve_min_cut`` calls a Dinic of its own, which the block leaves as it is."""
    import networkx

    return _in_this_thread({"minimum_cut": _minimum_cut_by_dinic}, networkx)


def _minimum_cut_by_dinic(minimum_cut: Callable) -> Callable:
    """networkx's ``minimum_cut`` as Inductor's ``solve_min_cut`` calls it, by our Dinic
    (:meth:`~reorder.budget.mincut.Network.min_cut_sink_side`), with networkx's answer.

    networkx reports the vertices that can reach the sink in the residual network as the sink's side, and the
    rest as the source's. Every maximum flow (or maximum preflow, networkx's default) leaves the same vertices
    able to reach the sink: the smallest sink side of any minimum cut. So the sides are networkx's whatever
    the flow; only the value, which Inductor never reads, may differ in type (an int here). Capacities are
    an edge's ``capacity``, infinite where it has none or ``inf``; Inductor's finite ones are whole numbers
    (bytes scaled and rounded, ``INT_INF``). A call with anything else (a fractional capacity, other
    arguments) goes to networkx; an infinite path from source to sink raises networkx's own error."""
    import math

    import networkx as nx

    from ..budget.mincut import Network

    def cut(flow_graph, s, t, capacity="capacity", flow_func=None, **kwargs):
        plain = (capacity == "capacity" and flow_func is None and not kwargs and flow_graph.is_directed()
                 and not flow_graph.is_multigraph() and s in flow_graph and t in flow_graph and s != t)
        if plain:
            names = list(flow_graph)
            index = {name: i for i, name in enumerate(names)}
            arcs, capacities, infinite = [], [], []
            for u, v, data in flow_graph.edges(data=True):
                c = data.get(capacity, math.inf)
                if c == math.inf:
                    infinite.append(len(arcs))
                    c = 0
                elif isinstance(c, (int, float)) and not isinstance(c, bool) and 0 <= c == int(c):
                    c = int(c)
                else:
                    plain = False
                    break
                arcs.append((index[u], index[v]))
                capacities.append(c)
        if not plain:
            return minimum_cut(flow_graph, s, t, capacity=capacity, flow_func=flow_func, **kwargs)
        unbounded = sum(capacities) + 1  # more than every finite capacity together
        for k in infinite:
            capacities[k] = unbounded
        value, sink_side = Network(len(names), arcs).min_cut_sink_side(capacities, index[s], index[t])
        if value >= unbounded:
            raise nx.NetworkXUnbounded("Infinite capacity path, flow unbounded above.")
        non_reachable = {name for name, reaches in zip(names, sink_side) if reaches}
        return value, (set(flow_graph) - non_reachable, non_reachable)

    return cut


def _min_cut_with_policies(gm, joint_inputs, kwargs: dict, graph, partition) -> tuple:
    """Inductor's min-cut partition of ``gm`` with our choice as checkpoint policies; the policies are taken off
    again afterwards. A node whose ``torch.utils.checkpoint`` policy is ``MUST_*`` keeps it (the user's rule); a
    ``PREFER_*`` one is a preference the budget weighs, and gets our choice until the partition is made. Its
    minimum cut is made by our Dinic where networkx would make it (:func:`_cut_by_dinic`)."""
    from torch.utils.checkpoint import CheckpointPolicy

    recomputed = {graph.node_names[v] for v in partition.recomputed}
    recomputed |= {graph.node_names[v] for v in partition.backward if graph.role[v] == "either"}
    forward = {graph.node_names[v] for v in partition.forward}
    marked = {}
    symbols = {graph.node_names[v] for v in range(graph.num_nodes) if graph.size_symbol[v]}
    for node in gm.graph.nodes:  # sizes are Inductor's to hand over, as it always does
        policy = recompute_policy(node)
        if (node.op != "call_function" or node.name in symbols
                or policy in (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.MUST_RECOMPUTE)):
            continue
        if node.name in recomputed:
            marked[node.name] = policy
            node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        elif node.name in forward:
            marked[node.name] = policy
            node.meta["recompute"] = CheckpointPolicy.MUST_SAVE
    drawless = frozenset(node.name for node in gm.graph.nodes
                         if node.name in marked and node.name in recomputed and draws_nothing(node))
    try:
        with _replayed_without_state(drawless), _cut_by_dinic():
            return _inductor_partition(gm, joint_inputs, kwargs, 1.0)
    finally:
        for node in gm.graph.nodes:
            if node.name in marked:
                if marked[node.name] is None:
                    node.meta.pop("recompute", None)
                else:
                    node.meta["recompute"] = marked[node.name]


@contextmanager
def _replayed_without_state(names: frozenset[str]):
    """While Inductor's partitioner runs in this thread, ``functionalize_rng_ops`` leaves the joint nodes named in
    ``names`` (ops that draw nothing, :func:`~reorder.inductor.joint_adapter.draws_nothing`, which our choice
    recomputes) as they are.

    It wraps every seeded op marked ``MUST_RECOMPUTE`` in ``run_and_save_rng_state`` and saves the generator's
    state for the backward's replay (5,056 B a call on CPU). Inductor's own budget recomputes the same attention
    with no mark and saves no state; our marks must not add it: the per-layer row's layers with Inductor's own
    0.4 partition measured 20,224 B above Inductor's run of it (four calls)."""

    def unmarked(functionalize):
        def functionalized(joint_module, *args, **kwargs):
            held = {node: node.meta.pop("recompute") for node in joint_module.graph.nodes
                    if node.name in names and "recompute" in node.meta}
            try:
                return functionalize(joint_module, *args, **kwargs)
            finally:
                for node, policy in held.items():
                    node.meta["recompute"] = policy
        return functionalized

    if not names:
        yield
        return
    with _in_this_thread({"functionalize_rng_ops": unmarked}):
        yield
