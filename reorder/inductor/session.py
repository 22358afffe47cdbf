"""What the hook was asked for and what it did: :class:`HookOptions` and :class:`Session` with its typed records.

``with reorder.inductor.use(...) as session:`` (or ``session = install(...)``)
gives one :class:`Session`. Every graph that the session's compiles send
through our pass, our slab code generation or our fusion guard adds one
record to it, in the order they happened:

* :class:`OrderRecord`: the order the pass chose for one graph, with every
  method's peak (``session.graphs``);
* :class:`SlabRecord`: the pools ``slab=True`` planned for one graph (``session.slabs``);
* :class:`GuardRecord`: what the fusion guard checked and blocked in one graph (``session.guards``);
* :class:`PartitionRecord`: what ``memory_budget`` chose for one compiled region's
  forward and backward (``session.partitions``);
* :class:`FallbackRecord`: a graph where one of them kept Inductor's own
  behaviour, with the stage and the reason (``session.fallbacks``);
* :class:`CacheHitRecord`: compiles that Inductor's FX graph cache served, so
  that no scheduler pass of ours ran (``session.cache_hits``).

Nothing accumulates globally: two sessions (say, in two threads, or one
nested in another) each see their own compiles. Records are frozen
dataclasses; ``record.to_dict()`` gives the JSON object the CLI and the
benchmarks write, with ``"kind"`` naming the record type.

Inductor deep-copies and pickles its configuration, which holds our pass,
our partitioner and our guard's factory; they are :class:`SessionBound`: they
hold a session's :attr:`Session.token`, not the session, and find it with
:meth:`Session.find` in a registry of live sessions that holds them weakly.
What a compile learns for a later one (a budgeted region's plan, read when its
forward and backward are ordered) the session holds too (:meth:`Session.plan_region`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import logging
import numbers
import os
import itertools
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, Union

from ..budget.frontier import STOCK_SOURCE, reaching_fraction
from ..budget.step_peak import Held
from ..errors import ReorderError
from ..report import format_bytes, format_table
from ..schedulers.across_sizes import INDUCTOR_ORDERS
from .rewrites import MIRRORED

log = logging.getLogger("reorder")

__all__ = ["CacheHitRecord", "FallbackRecord", "GuardRecord", "HookOptions", "OrderRecord", "PartitionRecord", "Record",
           "Session", "SessionBound", "SlabRecord", "asks_for_stocks_step", "record_from_dict", "source_hash"]


#: The summary of a session in which nothing was compiled, and the usual reason for it.
NOTHING_COMPILED = ("no graph reached Inductor's scheduler in this session: torch.compile compiles at the first "
                    "call of the compiled function (and a backward at the first backward), so that call must run "
                    "inside the 'with reorder.inductor.use()' block (a function first called before the block was "
                    "compiled then, without the hook)")


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """A digest of the package's sources: any change to them changes the ``uuid()`` of every pass and guard."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parent.parent
    for path in sorted(package.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


#: The stage of a :class:`PartitionRecord` whose region had compiled before in the session: its frontier was reused.
REUSED_FRONTIER = "frontier of the same region, reused"

#: An ``int`` budget below this many bytes is refused: it is surely a fraction written as an int (``1`` for ``1.0``).
SMALLEST_BYTE_BUDGET = 1024


@dataclass(frozen=True)
class HookOptions:
    """Everything :func:`~reorder.inductor.use` and :func:`~reorder.inductor.install` take, checked once.

    methods: our ordering methods or specs (``"exact:max_states=10000"``);
        None runs :data:`~reorder.schedulers.DEFAULT_METHODS`, and on the graphs
        of a region compiled under a ``memory_budget`` (where the exact search
        gives up on the recomputing backward) :data:`~reorder.schedulers.QUICK_METHODS`.
    keep_inductor_pass: leave Inductor's own ``reorder_for_peak_memory`` on
        (it then runs after ours, from our order).
    compare: also run Inductor's three methods on the real nodes; their peaks
        go into each :class:`OrderRecord` and their orders join our candidates.
    capture_dir: write each graph and Inductor's figures there (turns
        Inductor's caches off while installed: a cache hit skips every pass).
    max_seconds: wall-clock safety cap on our methods per graph (reported when
        hit; every method's effort is a count, so the cap decides only when it is hit, and then says so).
    slab: the wrapper allocates each graph's intermediate buffers from pools at
        our offsets (:mod:`~reorder.inductor.slab`).
    poison: the slab's run-time checks (:mod:`~reorder.inductor.slab_check`); implies ``slab``.
    fusion_guard: refuse fusions that raise the estimated peak
        (:class:`~reorder.inductor.fusion_guard.FusionGuard`) in every graph;
        None (the default) turns it on for the forward and backward of every
        region the ``memory_budget`` partitioned (a training step's), and
        leaves other graphs (inference) to Inductor (:attr:`guards_fusions`).
    fusion_slack_bytes, fusion_slack_fraction: the rise the guard tolerates.
    fusion_guard_allocated: in the graphs of the regions the ``memory_budget``
        partitioned, the guard also judges each fusion it allows by what the
        generated code will allocate (in-place writes, the reuse pool and the
        C++ backend's kernel groups, the rules the reorder pass orders those
        graphs by), not only by
        Inductor's estimate, which counts no in-place write: a fusion that
        holds a buffer until a late kernel is refused where it raises the
        allocated peak by more than the slack and above the unfused list's
        allocated peak plus the slack
        (:meth:`~reorder.inductor.fusion_guard.FusionGuard.raises_allocation`).
        Off by default: measured on some of the benchmark's points only
        (docs/measured.md, "Where the compiled backward allocates more than
        the plan"), where it lowered ALBERT-MLM at 0.942 by 2.1 MB and the
        decoder at 0.7 by 4.4%, changed nothing on 13 of 19 points, raised
        one length of a ``dynamic=True`` decoder by 0.8%, and added up to
        2.8 s to a compile.
    memory_budget: a budget for each training step's peak, for which the
        partitioner chooses what the backward recomputes
        (:class:`~reorder.inductor.partitioner.BudgetPartitioner`): an ``int``
        is bytes above the step's start, a ``float`` in (0, 1] a fraction of
        the estimated step peak of Inductor's own partition. 1.0 (the
        default) asks for stock's step: Inductor's partition is kept, and the
        step's two graphs are ordered by the model of the code Inductor
        generates for them, with the fusion guard, which lowers its real
        peak by 0 to 12% on the benchmark's training rows at a compile 3%
        shorter to 12% longer (docs/real-models.md); where a partitioner is already set
        (``config.custom_partitioner_fn``), 1.0 leaves it be. None turns the
        budget off: Inductor partitions, and the training step's graphs are
        ordered as any other graph.
    region_calls: how many times each budgeted region runs a step before its
        backward: 1 (the default) for a model compiled whole; the number of
        layers where each layer is compiled on its own (``layer.compile()``,
        FSDP), which compiles one region that every layer calls. Each call's
        saved values are held while the last call runs, forward and
        backward, so the estimates, the fraction and the verdict are of the
        step with all ``region_calls`` calls (what :func:`reorder.measure.measure`
        measures); :meth:`Session.measure_step` says the number a step ran.
    held_outside: bytes the step's eager code holds beside the compiled
        regions (a loss computed after the compiled model; the embedding,
        the head and the loss a per-layer compile leaves eager), the
        regions' outputs it keeps included (the logits until an eager loss
        is done with them, a model's output kept in a variable through the
        backward: an estimate holds its saved values and no output), as
        ``(while the compiled forwards run, between the last forward and the
        first backward, while the compiled backwards run)``, or one int for
        all three: every estimate adds them, so the budget and its verdict
        are of the whole step. The last may be a sequence, one amount per
        backward call in the order they run (a region run ``region_calls``
        times), each with what the calls before it output and the step
        holds (a per-layer compile's parameter gradients; FSDP frees them
        after its reduce-scatter): each call's backward is then counted
        beside its own amount and the saved values of the calls still to
        run, and the gradients are not modelled apart; a sequence of
        another length than ``region_calls`` counts its largest amount
        beside every call. :meth:`Session.measure_step` measures them
        (``outside_by_phase`` of :func:`reorder.measure.measure`) and names
        the value when the estimates counted less. Where the step runs
        several compiled regions, a mapping from a region's number (0 for
        the first the step runs; a region left out counts none) to its
        bytes: beside each region, what eager code and later regions hold,
        the region's outputs they keep included (a loss compiled apart runs
        between the model's forward and backward, on the model's saved
        values and the logits it saves); ``measure_step`` measures these
        too (``outside_by_region``).
    scalar_aliases: in joint graphs, give each later reader of a scalar computed
        from an unspecialized float input its own alias of it, so that under
        ``dynamic=True`` the forward saves what a static compile saves
        (:class:`~reorder.inductor.scalar_aliases.ScalarAliases`).
    model_rewrites: the Inductor rewrites the budget's models mirror
        (:data:`~reorder.inductor.rewrites.REWRITES`), by name; None (the
        default) applies all of them. Fewer is a model that knows less of
        Inductor: for finding which rule decides a partition.
    """

    methods: tuple[str, ...] | None = None
    keep_inductor_pass: bool = False
    compare: bool = False
    capture_dir: Path | None = None
    max_seconds: float = 60.0
    slab: bool = False
    poison: bool = False
    fusion_guard: bool | None = None
    fusion_slack_bytes: int = 0
    fusion_slack_fraction: float = 0.01
    fusion_guard_allocated: bool = False
    memory_budget: int | float | None = 1.0
    region_calls: int = 1
    held_outside: int | tuple | Mapping[int, int | tuple] = (0, 0, 0)
    scalar_aliases: bool = True
    model_rewrites: tuple[str, ...] | None = None

    @classmethod
    def build(cls, options: HookOptions | None = None, **fields) -> HookOptions:
        """``options`` (default: every default) with ``fields`` replaced: what ``use``/``install`` take.

        Raises :class:`~reorder.errors.ReorderError` naming an unknown field and listing the valid ones.
        """
        if options is not None and not isinstance(options, HookOptions):
            raise ReorderError(f"hook options: expected a HookOptions or keyword options, got {options!r}")
        valid = [f.name for f in dataclasses.fields(cls)]
        for name in fields:
            if name not in valid:
                raise ReorderError(f"unknown hook option {name!r}; valid options: {', '.join(valid)}")
        return dataclasses.replace(options, **fields) if options is not None else cls(**fields)

    def __post_init__(self) -> None:
        if self.model_rewrites is not None:
            names = (self.model_rewrites,) if isinstance(self.model_rewrites, str) else tuple(self.model_rewrites)
            unknown = [n for n in names if n not in MIRRORED]
            if unknown:
                raise ReorderError(f"hook option model_rewrites={self.model_rewrites!r}: unknown {unknown}; known: "
                                   f"{', '.join(MIRRORED)}")
            object.__setattr__(self, "model_rewrites", tuple(n for n in MIRRORED if n in names))
        if self.methods is not None:
            if isinstance(self.methods, str):
                raise ReorderError(f"hook option methods={self.methods!r}: give a list of method names, not a string")
            object.__setattr__(self, "methods", tuple(self.methods))
            if not self.methods:
                raise ReorderError("hook option methods=(): give at least one method, or None for the defaults")
            from ..schedulers import make_method

            for spec in self.methods:
                make_method(spec)  # raises ReorderError naming the method and what it takes
        if self.capture_dir is not None:
            if not isinstance(self.capture_dir, (str, os.PathLike)):
                raise ReorderError(f"hook option capture_dir={self.capture_dir!r}: expected a folder path")
            object.__setattr__(self, "capture_dir", Path(self.capture_dir))
        for name in ("keep_inductor_pass", "compare", "slab", "poison", "scalar_aliases", "fusion_guard_allocated"):
            if not isinstance(getattr(self, name), bool):
                raise ReorderError(f"hook option {name}={getattr(self, name)!r}: expected True or False")
        if self.fusion_guard is not None and not isinstance(self.fusion_guard, bool):
            raise ReorderError(f"hook option fusion_guard={self.fusion_guard!r}: expected True or False "
                               f"(or None: on with a memory_budget)")
        if isinstance(self.max_seconds, bool) or not isinstance(self.max_seconds, (int, float)) \
                or not self.max_seconds > 0:
            raise ReorderError(f"hook option max_seconds={self.max_seconds!r}: expected a number of seconds > 0")
        if isinstance(self.fusion_slack_bytes, bool) or not isinstance(self.fusion_slack_bytes, int) \
                or self.fusion_slack_bytes < 0:
            raise ReorderError(f"hook option fusion_slack_bytes={self.fusion_slack_bytes!r}: expected an int >= 0")
        if isinstance(self.fusion_slack_fraction, bool) or not isinstance(self.fusion_slack_fraction, (int, float)) \
                or not 0 <= self.fusion_slack_fraction < 1:
            raise ReorderError(f"hook option fusion_slack_fraction={self.fusion_slack_fraction!r}: "
                               f"expected a number in [0, 1)")
        budget = self.memory_budget
        if isinstance(budget, numbers.Integral) and not isinstance(budget, bool):
            budget = int(budget)  # a NumPy integer is bytes too
        elif isinstance(budget, numbers.Real) and not isinstance(budget, bool):
            budget = float(budget)
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float))
                                   or (isinstance(budget, int) and budget < 1)
                                   or (isinstance(budget, float) and not 0 < budget <= 1)):
            raise ReorderError(f"hook option memory_budget={budget!r}: expected bytes (an int >= 1) or a fraction "
                               f"of stock's estimated step peak (a float in (0, 1])")
        if isinstance(budget, int) and budget < SMALLEST_BYTE_BUDGET:
            raise ReorderError(f"hook option memory_budget={budget!r}: an int is bytes ({budget} B, below any step's "
                               f"peak); for a fraction of stock's estimated step peak write a float "
                               f"({float(budget)!r})")
        object.__setattr__(self, "memory_budget", budget)
        calls = self.region_calls
        if isinstance(calls, bool) or not isinstance(calls, numbers.Integral) or calls < 1:
            raise ReorderError(f"hook option region_calls={calls!r}: expected how many times a region runs a step "
                               f"(an int >= 1)")
        object.__setattr__(self, "region_calls", int(calls))
        outside = self.held_outside
        if isinstance(outside, Mapping):
            if any(isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0 for k in outside):
                raise ReorderError(f"hook option held_outside={outside!r}: a mapping's keys are region numbers (an "
                                   f"int >= 0: 0 for the first region the step runs)")
            held = RegionBytes({int(k): _phase_bytes(outside[k], self.held_outside) for k in sorted(outside)})
        else:
            held = _phase_bytes(outside, outside)
        object.__setattr__(self, "held_outside", held)
        if self.poison:
            object.__setattr__(self, "slab", True)

    def held_outside_of(self, region: int) -> tuple:
        """What ``held_outside`` counts beside the step's region number ``region`` (0 for the first it runs)."""
        if isinstance(self.held_outside, RegionBytes):
            return self.held_outside.get(region, (0, 0, 0))
        return self.held_outside

    @property
    def guards_fusions(self) -> bool:
        """Whether the options ask for the fusion guard: as ``fusion_guard`` says, or, left None, when a memory budget
        is set (it then judges the graphs of the regions the budget partitioned only:
        :meth:`~reorder.inductor.fusion_guard.FusionGuard.view_of`; where a partitioner the user set stays, there
        are none, and :func:`~reorder.inductor.install` installs no guard).

        The budget's step model judges each program as if no fusion raised its peak, but a fusion may pull a
        recomputed node up to an early kernel that shares its reads, and hold its output until the late use
        (on DeBERTa-v2's step at 0.489 of stock's estimate: 14.47 MB measured against an estimated 11.76 MB;
        11.70 MB with the guard). The guard refuses exactly the fusions that raise a graph's estimated peak, and
        under a budget any rise above the unfused graph's peak (``hold_unfused_peak``), which the estimate assumed."""
        return self.memory_budget is not None if self.fusion_guard is None else self.fusion_guard

    def uuid(self) -> str:
        """A digest of the options that change what a compile produces (not ``capture_dir``, not ``compare``'s
        figures): part of the pass's ``uuid()``, so Inductor's caches tell configurations apart."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "capture_dir"}
        return hashlib.sha256(repr(sorted(fields.items())).encode()).hexdigest()[:16]


class RegionBytes(Mapping):
    """``held_outside`` by region number, as :class:`HookOptions` keeps it: a mapping that cannot change and
    hashes, so that the options stay a value (equal options, equal hashes); it prints as the dict it was given."""

    def __init__(self, by_region: Mapping[int, tuple]):
        self._by_region = dict(by_region)

    def __getitem__(self, region: int) -> tuple:
        return self._by_region[region]

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_region)

    def __len__(self) -> int:
        return len(self._by_region)

    def __hash__(self) -> int:
        return hash(tuple(self._by_region.items()))

    def __eq__(self, other) -> bool:
        return isinstance(other, Mapping) and self._by_region == dict(other)

    def __repr__(self) -> str:
        return repr(self._by_region)


def asks_for_stocks_step(budget: int | float | None) -> bool:
    """Whether a ``memory_budget`` asks for stock's step: a fraction of 1, for which the partitioner keeps
    Inductor's partition (bytes are bytes, whatever stock's estimate)."""
    return isinstance(budget, float) and budget >= 1.0


def _bytes_text(amount: int | tuple[int, ...], text: Callable[[int], str] = "{:,}".format) -> str:
    """An amount of ``held_outside`` (bytes, written by ``text``), or its amounts by backward call in
    parentheses."""
    return f"({', '.join(map(text, amount))})" if isinstance(amount, tuple) else text(amount)


def _most_held(values: list[tuple]) -> tuple:
    """The most of several ``held_outside`` values in each phase: by backward call where all are by call, with
    as many calls; else the most of any call."""
    backwards = [v[2] for v in values]
    if all(isinstance(b, tuple) for b in backwards) and len({len(b) for b in backwards}) == 1:
        backward = tuple(map(max, zip(*backwards)))
    else:
        backward = max(max(b) if isinstance(b, tuple) else b for b in backwards)
    return max(v[0] for v in values), max(v[1] for v in values), backward


def _counted_less(got: dict, counted: tuple, slack: float) -> bool:
    """Whether a step measured holding ``got`` (:func:`reorder.measure.outside_held`'s bytes by phase) beside
    the compiled graphs held more than estimates that count ``counted`` (``held_outside``) by over ``slack``
    bytes in some phase: by backward call where both are, else against the most of any call, and against the
    ``"backward"`` phase where the estimates count one amount for all calls (their gradients are modelled
    apart, and the phase leaves them out as that amount does)."""
    from ..measure import phase_bytes

    measured = phase_bytes(got)
    backward = counted[2]
    if isinstance(backward, tuple):
        by_call = measured[2] if isinstance(measured[2], tuple) else (measured[2],)
        if len(by_call) == len(backward):
            pairs = zip(by_call, backward)
        else:
            pairs = [(max(by_call), max(backward))]
    else:
        pairs = [(got.get("backward", 0), backward)]
    return any(g > c + slack for g, c in [*zip(measured[:2], counted[:2]), *pairs])


def _phase_bytes(value, option) -> tuple:
    """``held_outside``'s bytes by phase from one int or three, the last an int or a non-empty sequence of them
    (by backward call), as a tuple of ints and the last a tuple where a sequence (``option``: the whole option,
    for the error)."""
    is_bytes = lambda b: isinstance(b, numbers.Integral) and not isinstance(b, bool) and b >= 0  # noqa: E731
    if is_bytes(value):
        value = (value,) * 3
    if isinstance(value, (tuple, list)) and len(value) == 3 and isinstance(value[2], (tuple, list)):
        by_call = value[2]
        if by_call and all(is_bytes(b) for b in by_call) and all(is_bytes(b) for b in value[:2]):
            return int(value[0]), int(value[1]), tuple(int(b) for b in by_call)
    elif isinstance(value, (tuple, list)) and len(value) == 3 and all(is_bytes(b) for b in value):
        return tuple(int(b) for b in value)
    raise ReorderError(f"hook option held_outside={option!r}: expected bytes eager code holds (an int >= 0, or "
                       f"three: while the forwards run, between, while the backwards run, the last an int or one "
                       f"per backward call), or a mapping from region number to either")


class _Record:
    """What every record shares: ``kind`` names its type, ``to_dict()`` is its JSON object."""

    kind = "record"

    def to_dict(self) -> dict:
        return {"kind": self.kind, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class OrderRecord(_Record):
    """The order our pass chose for one graph, in bytes of Inductor's estimate (``torch/_inductor/memory.py``).

    ``peak`` is the chosen order's estimated peak and ``method`` what found it:

    * ``baseline``: the order Inductor handed us (nothing beat it);
    * ``lpmf``, ``bfs``, ``dfs``, ``refine``, ``exact``, ``optimal``: our method of that name
      (``lpmf``/``bfs``/``dfs`` give Inductor's own orders node for node);
    * ``inductor_<m>`` (``inductor_lpmf``, ``inductor_bfs``, ``inductor_dfs``; with ``compare``):
      Inductor's own method ``m`` run on the real nodes, kept only when strictly lower than ours;
    * ``tangents_freed_<m>``, with ``<m>`` any of the above: in a backward graph, the order method
      ``m`` found once the tangents count as freed, as a real step frees them (see
      :class:`~reorder.inductor.reorder_pass.ReorderPass`);
    * ``<m>@<point>`` (``refine@high``, say): in a graph whose sizes are expressions in size symbols,
      method ``m`` run at another evaluation point of the symbols' ranges than the hint (``lower``,
      ``x2``, ``x4``, ``high``, ``s0 high``, ...), kept when it is the lowest at the hint among the
      orders never above Inductor's own at any point (:mod:`reorder.schedulers.across_sizes`).

    ``methods``: every method's estimated peak; ``lower_bound``: the highest
    proven bound on the minimum; ``optimal``: whether ``peak`` itself is
    proven minimal. ``notes``: what the methods said about their runs
    (``exact``'s "starting order is optimal" speaks of the order it started
    from); when a ``tangents_freed_<m>`` order above that minimum is chosen,
    the notes say so under ``"tangents_freed"`` and every other note names the
    order it is about, so that no note calls a non-optimal order optimal. In a
    graph of a region compiled under a memory budget, the order kept is the one
    whose generated code allocates least among those no higher than stock's
    estimate, and ``"allocated"`` says so where that decided it (both replayed
    peaks, :func:`~reorder.inductor.reorder_pass.choose_order`).
    ``estimate_of_incoming_order``: the estimate of the order Inductor handed
    us. ``seconds``: our pass's time on the graph (its conversions, our
    methods, the model of its generated code and the choice), without
    Inductor's own methods (``compare``) or writing the capture.
    ``held_at_end``: the bytes the graph's outputs hold when it ends, under
    every order (for a training forward, its outputs and the tensors it saves
    for the backward, which stay live until the backward frees them): the
    part of the estimate no order can lower, and what the step holds next to
    the following graph (None in records written before it was kept).
    ``inductor`` (with ``compare``): Inductor's own peaks by method.
    ``peaks_at`` (a graph compiled with dynamic shapes, whose sizes are
    expressions in size symbols): at each evaluation point of the symbols'
    ranges (the hint first, then the lower bounds and points well above the
    hint), ``{"point": {symbol: value}, "peak": ours, "inductor": Inductor's
    own order}``; the order is never above Inductor's at any of them (see
    :mod:`reorder.schedulers.across_sizes`). ``notes["sizes"]`` says why a
    graph with symbols was ordered at its hints only. ``replayed``: the graph
    is one the pass ordered earlier in the session (a recompile, each layer of
    a model compiled on its own: the same nodes, options and model of its
    code), and the order and figures are the ones kept then, found without
    searching again (``seconds`` is this compile's).

    These are per-graph estimates: a lower ``peak`` lowers a step's real peak
    only where this graph's peak is the step's; :func:`reorder.measure.measure`
    measures the step.
    """

    graph: str
    nodes: int
    peak: int
    method: str
    methods: dict[str, int]
    lower_bound: int
    optimal: bool
    seconds: float
    estimate_of_incoming_order: int
    notes: dict[str, str] = field(default_factory=dict)
    held_at_end: int | None = None
    peak_tangents_freed: int | None = None
    peak_tangents_freed_of_stock_order: int | None = None
    inductor: dict[str, int] | None = None
    inductor_seconds: dict[str, float] | None = None
    captured: str | None = None
    peaks_at: dict[str, dict] | None = None
    replayed: bool = False

    kind = "order"

    @property
    def inductor_best(self) -> int:
        """Stock Inductor's figure for this graph: the lowest of its own order and its three methods
        (their ports when ``compare`` was off)."""
        stock = self.inductor or {m: self.methods[m] for m in INDUCTOR_ORDERS if m in self.methods}
        return min(stock.values())


@dataclass(frozen=True)
class SlabRecord(_Record):
    """The pools ``slab=True`` planned for one graph.

    ``pools``: bytes of each pool; ``pooled``/``individual``: buffer groups in
    pools and left to their own allocation; ``pool_bytes``: the pools' sum;
    ``bound``: the largest live bytes of the pooled groups (no layout of them
    is smaller); ``worst_ratio``: the largest pool's slab over its own bound;
    ``estimated_peak`` and ``stock_estimated_peak``: the wrapper's allocations
    replayed with our pools and one by one.

    The replay and :class:`OrderRecord`'s ``peak`` are two models of the same
    order, so they differ: the scheduler's estimate counts every buffer of the
    scheduler's nodes from its producer to its last reader, while the replay
    counts what the generated wrapper allocates and frees: a buffer that takes
    over the storage of one dying at the same step (Inductor's in-place
    reuse) allocates nothing, extern kernels' outputs and the inputs the
    wrapper deletes count as the wrapper sees them, and steps are batches
    of the wrapper's planning lines. Compare ``estimated_peak`` with
    ``stock_estimated_peak`` (same model), not with ``OrderRecord.peak``.
    ``capped``: a pool's offset search stopped on its wall-clock safety cap
    before its count of restarts was done (its offsets then depend on the
    machine; a WARNING says so).

    Under dynamic shapes the figures above are at the size hints;
    ``stacked`` counts the pools whose offsets and size are expressions in
    the size symbols (valid for every value, evaluated by the generated code
    when it allocates the pool), and ``peaks_at`` gives, at each evaluation
    point of the symbols' ranges, ``{"point", "estimated_peak",
    "stock_estimated_peak", "worst_ratio"}`` (the replay is never above
    stock's at any of them; ``worst_ratio`` is the largest pool's slab over
    its own live-bytes bound there).
    """

    graph: str
    pools: tuple[int, ...]
    pooled: int
    individual: int
    pool_bytes: int
    bound: int
    worst_ratio: float
    estimated_peak: int
    stock_estimated_peak: int
    capped: bool = False
    stacked: int = 0
    peaks_at: dict[str, dict] | None = None

    kind = "slab"


@dataclass(frozen=True)
class GuardRecord(_Record):
    """What the fusion guard did in one graph: ``checks`` (fusions judged), ``blocked`` (one dict per fusion
    refused: ``nodes``, ``peak``, ``fused_peak``, ``bytes``; with ``"model": "allocated"`` where the peaks are of
    what the generated code allocates, ``fusion_guard_allocated``), ``avoided_by_reordering`` (rises the reorder pass
    undoes, so allowed), ``work`` (its count of effort), ``budget_exhausted``, ``rebuilds``, ``seconds``,
    ``failed`` (the error that turned it off for this graph, if any); ``replayed``: whether its answers were
    those the guard gave the same graph earlier in the session (a recompile, or each layer compiled on its own),
    replayed without judging again (the counts are then that compile's, ``seconds`` this one's)."""

    graph: str
    checks: int
    blocked: tuple[dict, ...]
    avoided_by_reordering: int
    work: int
    budget_exhausted: bool
    rebuilds: int
    seconds: float
    failed: str | None = None
    replayed: bool = False

    kind = "guard"


@dataclass(frozen=True)
class PartitionRecord(_Record):
    """What ``memory_budget`` chose for one compiled region: which forward values its forward saves, which its
    backward recomputes.

    ``graph``: the region's name; ``nodes``: its joint graph's. ``budget`` as
    given and ``budget_bytes`` as applied (a fraction times ``stock_peak``).
    ``stock_peak``: the estimated step peak of Inductor's own partition;
    ``peak``: of ours; ``feasible``: ``peak <= budget_bytes`` (when the plan
    did not fit, ours is the lowest estimate found). ``source``: ``"inductor"`` (stock's
    partition was kept), else the chosen candidate: ``"price <p>"``, ``"<k>
    segments, price <p>"`` or ``"inductor budget <b>"`` (the partition of
    Inductor's ``activation_memory_budget=b``). ``saved_bytes``, ``recomputed`` (operations the backward runs
    again) and ``recomputed_flops`` (their cost: floating-point operations of
    matrix products, convolutions and attention, one per element written for
    the others), each beside stock's. ``frontier``: ``(recompute cost,
    estimated peak)`` of every partition below stock's estimate that some
    budget chooses (the frontier's points, less those of Inductor's that give
    way to a point of ours: :attr:`~reorder.budget.frontier.Frontier.reachable`);
    empty where the budget is at least stock's estimate (stock is then the
    choice, and no other partition is built).
    ``frontier_levels``: where sizes are symbolic (dynamic shapes), each
    frontier point's level, by which it was chosen: its estimate at twice
    the size hints as the same fraction of ``stock_peak`` as it is of
    stock's estimate there (:mod:`~reorder.budget.frontier`); empty otherwise.
    ``held_before``: what earlier regions of the same
    session saved, which this region's estimates include (a step compiled in
    several regions holds them while this one runs); ``stock_peak`` then
    counts what the earlier regions' stock partitions saved. ``calls``: how
    many times the region runs a step (the hook's ``region_calls``), and
    ``held_outside``: what eager code (and, given by region, later regions)
    holds beside it (the hook's option, for its ``region``: the region's
    number, :meth:`Session.region_number`): every peak, stock's too, counts
    them (:attr:`held`); ``gradient_bytes``: the parameters' gradients its
    backward outputs, which the other calls' backwards run beside. ``digest``: the
    joint graph's (a region compiled again is not an earlier region).
    ``seconds``: our conversion, candidates and check. ``note``: where the
    partition Inductor made from our choice differs from the plan.
    ``compiled_peak``: the same step peak replayed on the graphs Inductor
    compiled from the partition, once our pass has ordered the region's
    backward (:mod:`~reorder.inductor.compiled_budget`; None before that, or
    where the FX graph cache served the graphs); ``feasible`` is then
    ``compiled_peak <= budget_bytes``, whatever the plan's estimate said,
    except where the budget asks for stock's step (:attr:`asks_for_stock`).
    ``modelled_peak``: the same peak as the model of the generated code promised for the orders our pass kept,
    before that code existed
    (:class:`~reorder.budget.allocation_model.AllocationModel`): how far the
    model is from what the code does. ``measured_peak``: the real peak of a
    step that ran the region, measured by the allocator
    (:meth:`Session.measure_step`), and ``outside_bytes``: what of it was
    allocated outside the compiled graphs (eager code around the region: a
    loss computed after the compiled model, its gradient); once measured,
    ``feasible`` is ``measured_peak <= budget_bytes``, the meter's verdict
    (at 1.0 too: a step above stock's estimate by what eager code holds is
    above the bytes the budget stands for, and the meter says so).
    ``stages``: where ``seconds`` went, ``(stage, seconds)`` in order:
    ``joint graph`` (our conversion, convolution scratch probes included),
    ``stock's estimate``, ``larger sizes`` (with dynamic shapes only: the
    joint graph at twice its size hints, and stock's estimate there),
    ``inductor budgets`` (Inductor's partitioner at
    every tenth of its own ``activation_memory_budget``, candidates of ours),
    ``frontier`` (minimum cuts, segments and every candidate's estimate),
    ``partition made`` (Inductor's min-cut with our choice as policies); the
    stages between are left out where no other partition was built, and a
    region compiled again in the session (the same joint graph: each layer of
    a model compiled on its own) has :data:`REUSED_FRONTIER` in their place,
    the frontier its first compile built.

    Peaks are the estimate of :func:`~reorder.budget.step_peak.step_peak`
    (the forward with its saved values, the backward freeing them, in the
    orders our methods find, with Inductor's buffer reuse), not measured
    memory; docs/measured.md gives its distance to measured peaks.
    """

    graph: str
    nodes: int
    budget: int | float
    budget_bytes: int
    stock_peak: int
    peak: int
    feasible: bool
    source: str
    saved_bytes: int
    stock_saved_bytes: int
    recomputed: int
    stock_recomputed: int
    recomputed_flops: int
    stock_recomputed_flops: int
    frontier: tuple[tuple[int, int], ...] = ()
    frontier_levels: tuple[int, ...] = ()
    held_before: int = 0
    digest: str = ""
    seconds: float = 0.0
    note: str = ""
    compiled_peak: int | None = None
    modelled_peak: int | None = None
    measured_peak: int | None = None
    outside_bytes: int | None = None
    stages: tuple[tuple[str, float], ...] = ()
    calls: int = 1
    held_outside: tuple = (0, 0, 0)
    gradient_bytes: int = 0
    region: int = 0

    kind = "partition"

    @property
    def held(self) -> Held:
        """What the step holds beside the region, for :func:`~reorder.budget.step_peak.step_total`."""
        return Held(self.held_before, self.calls, tuple(self.held_outside), self.gradient_bytes)

    @property
    def asks_for_stock(self) -> bool:
        """Whether the budget is a fraction of 1 and stock's partition was kept for it: a budget of stock's step,
        which its compiled graphs meet by definition. They are stock's partition, compiled in the order our pass
        keeps (at or below Inductor's own order's in its models) with the fusions the guard allows, so the check
        of the compiled graphs does not judge them against ``budget_bytes``, stock's *estimate*, from which
        Inductor's own code departs too (the checkpointed decoder: stock estimated at 24.56 MB measures 27.60 MB,
        and ours at 1.0 24.98 MB); ``compiled_peak`` still says what they allocate. The meter
        (:meth:`Session.measure_step`) still judges the measured step by those bytes.
        (A region after a step's first one may get a lower partition at 1.0: its fraction is of what the step
        holds with stock's partitions of the earlier regions, and ours of them can save less.)"""
        return asks_for_stocks_step(self.budget) and self.source == STOCK_SOURCE


@dataclass(frozen=True)
class FallbackRecord(_Record):
    """A graph where ``stage`` (``"order"``, ``"slab"``, ``"guard"`` or ``"partition"``) kept Inductor's own
    behaviour, and why; stage ``"install"``: the hook stayed off for every graph (an unsupported torch release)."""

    graph: str
    stage: str
    reason: str

    kind = "fallback"


@dataclass(frozen=True)
class CacheHitRecord(_Record):
    """``count`` compiles that Inductor's FX graph cache served: no scheduler pass of ours ran for them."""

    count: int

    kind = "cache_hit"


Record = Union[OrderRecord, SlabRecord, GuardRecord, PartitionRecord, FallbackRecord, CacheHitRecord]


_KINDS: dict[str, type] = {cls.kind: cls for cls in (OrderRecord, SlabRecord, GuardRecord, PartitionRecord,
                                                    FallbackRecord, CacheHitRecord)}


def record_from_dict(data: dict) -> Record:
    """The record a ``record.to_dict()`` came from, read back from JSON (its lists become the record's tuples).

    Raises ValueError for a ``"kind"`` that names no record type.
    """
    if data.get("kind") not in _KINDS:
        raise ValueError(f"record kind {data.get('kind')!r}: expected one of {', '.join(_KINDS)}")
    cls = _KINDS[data["kind"]]
    fields = {k: v for k, v in data.items() if k != "kind"}
    for f in dataclasses.fields(cls):
        if str(f.type).startswith("tuple") and f.name in fields:
            fields[f.name] = tuple(tuple(x) if isinstance(x, list) else x for x in fields[f.name])  # JSON gave lists
    return cls(**fields)


#: Sessions that passes and guards can still record into, by token (held weakly: a session nobody holds goes).
_live: weakref.WeakValueDictionary[int, Session] = weakref.WeakValueDictionary()
_tokens = itertools.count(1)


class Session:
    """One installation of the hook: its :class:`HookOptions` and the records of what its compiles did.

    Records are added by the pass, the slab code generation and the guard
    (:meth:`add`, thread-safe) and read through the typed views below. A
    session is live from :func:`~reorder.inductor.install` to the matching
    :func:`~reorder.inductor.uninstall` (:meth:`close`); records stay readable after.
    """

    def __init__(self, options: HookOptions | None = None):
        self.options = options if options is not None else HookOptions()
        self.token = next(_tokens)
        self._records: list[Record] = []
        self._regions: dict[str, object] = {}
        self._region_numbers: dict[object, int] = {}
        self._generated: dict[str, object] = {}
        self._made: dict[object, object] = {}
        self._lock = threading.Lock()
        self._cache_hits_seen: int | None = None
        _live[self.token] = self

    def plan_region(self, region: str, plan: object) -> None:
        """Remember what the partition of compiled region ``region`` (``"model__0"``) planned, for the check of
        the forward and backward Inductor compiles from it (:mod:`~reorder.inductor.compiled_budget`)."""
        with self._lock:
            self._regions[region] = plan

    def region_number(self, key: object) -> int:
        """The number of the budgeted region ``key`` names (Dynamo's frame: a recompile is the same region), in
        the order they first compiled, which is the order the step first runs them: what ``held_outside`` by
        region and ``outside_by_region`` of :func:`reorder.measure.measure` count by."""
        with self._lock:
            return self._region_numbers.setdefault(key, len(self._region_numbers))

    def note_generated(self, code) -> None:
        """Keep what a compiled graph's generated code allocates (a plain
        :class:`~reorder.inductor.generated_code.GeneratedCode`), read where our code generation runs
        (``slab=True`` or a ``memory_budget``)."""
        with self._lock:
            self._generated[code.graph] = code

    def generated_code(self, graph: str):
        """What the generated code of ``graph`` allocates, as events
        (:class:`~reorder.inductor.generated_code.GeneratedCode`; ``replay()`` gives its peak), or None where
        our code generation did not run for it."""
        with self._lock:
            return self._generated.get(graph)

    def reused(self, key: object, make: Callable[[], object]) -> tuple[object, bool]:
        """The value made for ``key`` earlier in this session, else ``make()``, kept for the next asking; and
        whether it was reused. ``key`` must hold everything the value depends on (the partitioner's frontier of
        one region compiled again: each layer of a model compiled on its own; a None made is made again). ``make``
        runs outside the lock: two threads asking at once may both make it."""
        value = self.remembered(key)
        if value is not None:
            return value, True
        value = make()
        self.remember(key, value)
        return value, False

    def remembered(self, key: object) -> object | None:
        """What :meth:`remember` (or :meth:`reused`) kept for ``key`` in this session, or None."""
        with self._lock:
            return self._made.get(key)

    def remember(self, key: object, value: object) -> None:
        """Keep ``value`` for ``key`` (the first one kept stays); ``key`` must hold everything it depends on."""
        with self._lock:
            self._made.setdefault(key, value)

    def region_plan(self, region: str) -> object | None:
        """The plan :meth:`plan_region` remembered for ``region``, or None."""
        with self._lock:
            return self._regions.get(region)

    @staticmethod
    def find(token: int | None) -> Session | None:
        """The live session with this :attr:`token`, or None (closed, or never made in this process)."""
        return _live.get(token) if token is not None else None

    @property
    def live(self) -> bool:
        return Session.find(self.token) is self

    def close(self) -> None:
        """Stop taking records from passes and guards (done by :func:`~reorder.inductor.uninstall`)."""
        _live.pop(self.token, None)

    def add(self, record: Record) -> None:
        with self._lock:
            self._records.append(record)

    def replace(self, old: Record, new: Record) -> None:
        """Put ``new`` where ``old`` is (a record amended once more is known); nothing if ``old`` is not here."""
        with self._lock:
            for k, record in enumerate(self._records):
                if record is old:
                    self._records[k] = new
                    return

    def note_cache_hits(self, total: int) -> None:
        """Given Inductor's running count of FX graph cache hits: the first call takes it as the start, each
        later one records the hits since the call before as a :class:`CacheHitRecord`."""
        with self._lock:
            seen, self._cache_hits_seen = self._cache_hits_seen, total
            if seen is not None and total > seen:
                self._records.append(CacheHitRecord(total - seen))

    def frontier(self) -> str:
        """The points each budgeted region could reach, as a table a person can pick a budget from: per region,
        stock's partition and every cheaper-to-lower candidate some budget chooses (the record's
        ``frontier``), with its estimated step peak, the smallest fraction of stock's that reaches it (the
        ``memory_budget`` to ask for: :func:`~reorder.budget.frontier.reaching_fraction`), the floating-point
        work its backward recomputes and what that adds to stock's; the point the budget chose is marked. The
        lowest row is the lowest budget any partition is estimated to meet.
        """
        tables = []
        for r in self.partitions:
            points = [(r.stock_recomputed_flops, r.stock_peak), *r.frontier]
            levels = [r.stock_peak, *r.frontier_levels] if r.frontier_levels else []
            rows = [[f"{reaching_fraction(peak, r.stock_peak):.3f}",
                     *([f"{reaching_fraction(levels[k], r.stock_peak):.3f}"] if levels else []), format_bytes(peak),
                     f"{cost / 1e9:.3g}", f"{(cost - r.stock_recomputed_flops) / 1e9:+.3g}",
                     "<- chosen" if (cost, peak) == (r.recomputed_flops, r.peak)
                     and (k == 0) == (r.source == STOCK_SOURCE) else ""]
                    for k, (cost, peak) in enumerate(points)]
            table = f"{r.graph} (budget {format_bytes(r.budget_bytes)}):\n" + format_table(
                ["fraction", *(["at twice the sizes"] if levels else []), "estimated step peak",
                 "recomputed GFLOP", "added to stock's", "choice"], rows)
            if levels:
                table += ("\n(sizes are symbolic: points were chosen by their fraction of stock's estimate at twice "
                          "the sizes this region was compiled for; a budget is met where both fractions meet it, "
                          "and one below every first fraction gets the cheapest point of the lowest first fraction "
                          "whose second it meets)")
            # the stages say whether others were built (a later region's skip counts what earlier ones hold);
            # a record read back from before they were kept says it by the budget
            built = (any(stage in ("frontier", REUSED_FRONTIER) for stage, _ in r.stages) if r.stages
                     else r.budget_bytes < r.stock_peak)
            if not built and r.budget_bytes < r.stock_peak:  # stock's partition meets it after earlier regions'
                table += (f"\n(with what the earlier regions save under this budget ({format_bytes(r.held_before)}),"
                          f" this region's stock partition is estimated at {format_bytes(r.peak)}, within the "
                          f"budget: it was kept and no other was built; the fractions are of stock's step, where "
                          f"the earlier regions save what stock's partitions of them save)")
            elif not built:
                table += ("\n(the budget is at least stock's estimate, so stock's partition was kept and no other "
                          "was built: compile under a budget below 1.0 to see what the others reach)")
            tables.append(table)
        return "\n\n".join(tables) if tables else "no memory budget was asked for: no region was partitioned"

    def measure_step(self, step: Callable[[], Any], device=None):
        """Run ``step()`` once under :func:`reorder.measure.measure` and give every memory budget's record the
        meter's verdict: ``measured_peak`` (the step's real peak above its start), ``outside_bytes`` (what of it
        eager code allocated outside the compiled graphs: a loss computed after a compiled model, its gradient)
        and ``feasible`` as ``measured_peak <= `` the step's budget (the highest ``budget_bytes`` of the
        session's regions, each of which counts what earlier regions hold). A WARNING where an estimate had said
        met. Returns the :class:`~reorder.measure.MemoryMeasurement`. Call it with the step the session compiled
        (after the first call, which compiles). A region compiled once and run several times a step (a compile
        per layer, FSDP) has one record, whose estimates count ``region_calls`` calls, and eager code beside
        the regions holds memory the estimates count as ``held_outside``: where the step ran more compiled calls,
        or its eager code held more (by over 2% of the budget in some phase), a WARNING gives the options that
        count them. Where the step ran several budgeted regions, what beside each (eager code and later
        regions: ``outside_by_region``) held more than its estimates counted is what the warning names, as
        ``held_outside`` by region number."""
        from ..measure import measure, phase_bytes

        measured = measure(step, device)
        records = self.partitions
        if not records:
            return measured
        budget = max(r.budget_bytes for r in records)
        outside = measured.outside_compiled_bytes
        calls = len(measured.forward_calls)
        regions = len({r.digest or r.graph for r in records})
        counted = max(r.calls for r in records)
        eager = phase_bytes(measured.outside_by_phase)
        eager_counted = _most_held([r.held_outside for r in records])
        first_records: dict[int, PartitionRecord] = {}  # each region's first record, by its number
        for r in records:
            first_records.setdefault(r.region, r)
        beside = measured.held_beside_regions()
        reasons, options = [], []
        if calls > regions * counted:
            reasons.append(f"the step ran {calls} compiled forward calls of {regions} budgeted regions, whose "
                           f"estimates count {counted} call(s) each")
            options.append(f"region_calls={-(-calls // regions)}")
        by_region = len(first_records) > 1 and sorted(first_records) == list(range(len(beside)))
        if len(first_records) > 1 and not by_region:
            log.info("reorder: the step ran %d compiled regions with a backward, and %d were budgeted: no "
                     "held_outside by region is suggested", len(beside), len(first_records))
        counted_beside = [first_records[k].held_outside for k in range(len(beside))] if by_region else []
        if by_region and any(_counted_less(got, held, 0.02 * budget)
                             for got, held in zip(measured.outside_by_region, counted_beside)):
            bytes_of = lambda held: ", ".join(_bytes_text(b) for b in held)  # noqa: E731
            reasons.append("beside each compiled region, eager code and later regions held (with the compiled "
                           "outputs they kept) " + "; ".join(
                f"{bytes_of(got)} B beside region {k} ({first_records[k].graph}), where its estimates count "
                f"{bytes_of(held)} B" for k, (got, held) in enumerate(zip(beside, counted_beside)))
                           + " (while it ran forward, between, while it ran backward)")
            options.append(f"held_outside={dict(enumerate(beside))}")
        elif _counted_less(measured.outside_by_phase, eager_counted, 0.02 * budget):
            reasons.append("eager code beside the compiled graphs held (with the compiled outputs it kept) "
                           + ", ".join(
                f"{_bytes_text(got)} B {phase}" for got, phase in zip(eager, (
                    "while they ran forward", "between", "while they ran backward (by call, with the outputs of "
                    "the calls before that the step kept)" if isinstance(eager[2], tuple) else
                    "while they ran backward")))
                           + f", where the estimates count {', '.join(_bytes_text(b) for b in eager_counted)} B")
            options.append(f"held_outside={eager}")
        if reasons:
            log.warning("reorder: %s; compile with use(memory_budget=..., %s) for estimates, a fraction and a "
                        "verdict of the whole step", "; ".join(reasons), ", ".join(options))
        for record in records:
            amended = dataclasses.replace(record, measured_peak=measured.peak, outside_bytes=outside,
                                          feasible=measured.peak <= budget)
            self.replace(record, amended)
            if record.feasible and not amended.feasible:
                log.warning("reorder: %s: memory budget %s B is met by the compiled region's estimate but not by "
                            "the measured step (%s B, of which %s B allocated outside the compiled graphs)",
                            record.graph, f"{budget:,}", f"{measured.peak:,}", f"{outside:,}")
        return measured

    @property
    def records(self) -> tuple[Record, ...]:
        """Every record, in the order the compiles produced them."""
        with self._lock:
            return tuple(self._records)

    def _of(self, kind: type) -> list:
        return [r for r in self.records if isinstance(r, kind)]

    @property
    def stage_seconds(self) -> float:
        """Seconds our stages took in this session's compiles, as their records give them (partitions, orders,
        fusion guards; not the slab's planning nor the reading of the generated code, which keep no seconds): most
        of what the hook itself adds to a compile. The rest of a compile is Inductor's own work, more of it where
        a partition recomputes (the backward has more kernels to generate and build)."""
        return sum(r.seconds for r in self.records if isinstance(r, (PartitionRecord, OrderRecord, GuardRecord)))

    @property
    def graphs(self) -> list[OrderRecord]:
        return self._of(OrderRecord)

    @property
    def slabs(self) -> list[SlabRecord]:
        return self._of(SlabRecord)

    @property
    def guards(self) -> list[GuardRecord]:
        return self._of(GuardRecord)

    @property
    def partitions(self) -> list[PartitionRecord]:
        return self._of(PartitionRecord)

    @property
    def fallbacks(self) -> list[FallbackRecord]:
        return self._of(FallbackRecord)

    @property
    def cache_hits(self) -> int:
        return sum(r.count for r in self._of(CacheHitRecord))

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def to_json(self) -> list[dict]:
        """Every record as a JSON object (``record.to_dict()``), in order."""
        return [r.to_dict() for r in self.records]

    def summary(self) -> str:
        """A table a person can read, one row per graph, then what its figures mean, fallbacks and cache hits.

        Every figure in the table is an estimate of one graph; the lines under
        it say what that means for a step (what the graphs hold when they end,
        the highest estimate) and where real savings are measured.
        """
        graphs, slabs, guards = self.graphs, {r.graph: r for r in self.slabs}, {r.graph: r for r in self.guards}
        headers = ["graph", "nodes", "Inductor (est.)", "ours (est.)", "change (est.)", "held at end", "optimal",
                   "method"]
        if slabs:
            headers += ["slab pools", "slab replay (est.) / stock replay"]
        if guards:
            headers += ["fusions blocked"]
        rows = []
        for r in graphs:
            row = [r.graph, r.nodes, format_bytes(r.inductor_best), format_bytes(r.peak),
                   f"{(r.peak - r.inductor_best) / max(r.inductor_best, 1):+.2%}",
                   "-" if r.held_at_end is None else format_bytes(r.held_at_end),
                   "yes" if r.optimal else f"gap {(r.peak - r.lower_bound) / max(r.lower_bound, 1):.2%}", r.method]
            if slabs:
                slab = slabs.get(r.graph)
                row += [format_bytes(slab.pool_bytes), f"{format_bytes(slab.estimated_peak)} / "
                        f"{format_bytes(slab.stock_estimated_peak)}"] if slab else ["-", "-"]
            if guards:
                guard = guards.get(r.graph)
                row += [f"{len(guard.blocked)} of {guard.checks}" if guard else "-"]
            rows.append(row)
        lines = []
        if rows:
            lines.append(format_table(headers, rows))
            lines.append("(est.): Inductor's per-graph estimate of live bytes, not measured memory. 'held at end': "
                         "what the graph's outputs hold when it ends, under every order (a training forward's "
                         "saved tensors stay live into the backward). A lower estimate lowers a step's real peak "
                         "only where this graph's peak is the step's: measure the step with "
                         "reorder.measure.measure for real savings.")
            if len(graphs) > 1:
                lines.append(f"highest estimate among these graphs: Inductor "
                             f"{format_bytes(max(r.inductor_best for r in graphs))}, ours "
                             f"{format_bytes(max(r.peak for r in graphs))}")
        if slabs:
            lines.append("slab replay: the generated wrapper's allocations replayed step by step, another model "
                         "than the scheduler's estimate in 'ours (est.)' (in-place reuse allocates nothing, "
                         "steps are batches of the wrapper's lines), so the two differ for the same order: compare "
                         "the slab's replay with stock's replay.")
        for r in graphs:
            if r.peaks_at:
                changes = [at["peak"] / max(at["inductor"], 1) - 1 for at in r.peaks_at.values()]
                lines.append(f"{r.graph}: sizes are symbolic; its order was checked at {len(r.peaks_at)} points of "
                             f"the symbols' ranges ({', '.join(r.peaks_at)}) and is never above Inductor's own "
                             f"there (change (est.) from {min(changes):+.2%} to {max(changes):+.2%}; "
                             f"record.peaks_at has each)")
            slab = slabs.get(r.graph)
            if slab is not None and slab.peaks_at:
                ratio = max(at["worst_ratio"] for at in slab.peaks_at.values())
                lines.append(f"{r.graph}: {slab.stacked} of {len(slab.pools)} pools have offsets that are "
                             f"expressions in the size symbols, valid for every size; the slab replay is at or below "
                             f"stock's at each of the {len(slab.peaks_at)} points (largest pool over its live-bytes "
                             f"bound there: {ratio:.3f})")
        lines += [partition_line(r) for r in self.partitions]
        ordered = {r.graph for r in graphs}
        lines += [f"fusion guard in {g.graph}: {len(g.blocked)} of {g.checks} fusions blocked"
                  for g in guards.values() if g.graph not in ordered]
        lines += [f"fallback ({r.stage}) in {r.graph}: {r.reason}" for r in self.fallbacks]
        if self.cache_hits:
            lines.append(f"{self.cache_hits} graph(s) came from Inductor's FX graph cache (compiled before with "
                         f"these options): no pass of ours ran and they have no records here; to run the passes, "
                         f"set torch.compiler.config.force_disable_caches = True before compiling")
        if not lines:
            lines.append(NOTHING_COMPILED)
        return "\n".join(lines)


class SessionBound:
    """An object of ours that Inductor keeps in its configuration (the reorder pass, the budget partitioner, the
    fusion guard) and that records into one :class:`Session`.

    It holds the session's :attr:`~Session.token`, never the session, and
    finds the session through it (:attr:`session`). Inductor deep-copies its
    configuration and compiles a backward with the copy it took at the
    forward's compile: a copy records into the same session. Inductor also
    pickles its configuration into its FX graph cache key: a pickle carries
    the object's options and not the token (the same options give the same key
    in every session), unless the class sets ``pickled_with_session`` (the
    guard: Inductor keys its cache by the guard's ``uuid()``, not its pickle).
    State of one compile that a copy must not share is named in
    ``transient`` and starts anew in every copy (:meth:`fresh`).
    """

    session_token: int | None = None
    pickled_with_session: bool = False
    transient: tuple[str, ...] = ()

    @property
    def session(self) -> Session | None:
        """The live session this object records into (None once it was closed, or in a pickled copy)."""
        return Session.find(self.session_token)

    def bind(self, session: Session | None) -> None:
        """Record into ``session`` from now on (None: nowhere)."""
        self.session_token = session.token if session is not None else None

    def fresh(self) -> None:
        """Set the ``transient`` state as a new object has it (nothing by default)."""

    def carried(self) -> dict:
        """What a copy or a pickle carries: the object's attributes but the token and the transient state."""
        return {k: v for k, v in vars(self).items() if k != "session_token" and k not in self.transient}

    def __copy__(self):
        return rebuilt(type(self), self.carried(), self.session_token)

    def __deepcopy__(self, memo: dict):
        return rebuilt(type(self), copy.deepcopy(self.carried(), memo), self.session_token)

    def __reduce__(self):
        return (rebuilt, (type(self), self.carried(), self.session_token if self.pickled_with_session else None))


def rebuilt(cls: type, state: dict, token: int | None):
    """A :class:`SessionBound` of ``cls`` with ``state``, recording into the session with ``token`` (what a copy
    or an unpickled object becomes)."""
    made = cls.__new__(cls)
    made.__dict__.update(state)
    made.session_token = token
    made.fresh()
    return made


def partition_line(r: PartitionRecord) -> str:
    """One summary line for a :class:`PartitionRecord`: the budget, the verdict and the figure that decides it
    (the measured step where :meth:`Session.measure_step` measured one, else the compiled graphs' estimate where
    they were checked, else the partition's), the other figures, and what the partition saves and recomputes."""
    budget = f"{r.budget:g} of stock's {format_bytes(r.stock_peak)}" if isinstance(r.budget, float) else "given"
    if r.calls > 1:
        budget += f"; the region run {r.calls} times a step, every estimate counting all the calls"
    if any(r.held_outside):
        by_call = " by call" if isinstance(r.held_outside[2], tuple) else ""
        budget += "; what eager code and later regions hold beside it counted at " + "/".join(
            _bytes_text(b, format_bytes) for b in r.held_outside) + f" (forward/between/backward{by_call})"
    if r.held_before:
        budget += (f"; earlier regions save {format_bytes(r.held_before)} before it under this budget, where "
                   f"stock's step counts what stock's partitions of them save")
    estimates = f"estimated step peak {format_bytes(r.stock_peak)} -> {format_bytes(r.peak)}"
    if r.compiled_peak is not None:
        estimates += f", compiled graphs {format_bytes(r.compiled_peak)}"
    met = "met" if r.feasible else "NOT met"
    if r.measured_peak is not None:
        verdict = (f"{met} by the measured step ({format_bytes(r.measured_peak)}, of which "
                   f"{format_bytes(r.outside_bytes or 0)} allocated outside the compiled graphs; {estimates})")
    elif r.asks_for_stock:
        verdict = (f"met by stock's partition, which a fraction of 1 asks for (no more than stock's step; "
                   f"{estimates}; the compiled region only: session.measure_step(step) counts what eager code "
                   f"around it holds)")
    else:
        decider = "the partition's estimate" if r.compiled_peak is None else "the compiled graphs' estimate"
        lowest = "; the lowest found" if r.peak > r.budget_bytes else ""
        verdict = (f"{met} by {decider} ({estimates}{lowest}; the compiled region only: "
                   f"session.measure_step(step) counts what eager code around it holds)")
    return (f"memory budget in {r.graph}: {format_bytes(r.budget_bytes)} ({budget}); {verdict}; saved "
            f"{format_bytes(r.stock_saved_bytes)} -> {format_bytes(r.saved_bytes)}; recomputed ops "
            f"{r.stock_recomputed} -> {r.recomputed} ({r.stock_recomputed_flops / 1e9:.3g} -> "
            f"{r.recomputed_flops / 1e9:.3g} GFLOP); {r.source}")


def sized(values: Sequence[int]) -> tuple[int, ...]:
    """Plain ints for a record (sympy integers and numpy ints do not belong in one)."""
    return tuple(int(v) for v in values)
