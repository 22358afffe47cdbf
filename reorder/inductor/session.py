"""What the hook was asked for and what it did: :class:`HookOptions` and :class:`Session` with its typed records.

``with reorder.inductor.use(...) as session:`` (or ``session = install(...)``)
gives one :class:`Session`. Every graph that the session's compiles send
through our pass, our slab code generation or our fusion guard adds one
record to it, in the order they happened:

* :class:`OrderRecord`: the order the pass chose for one graph, with every
  method's peak (``session.graphs``);
* :class:`SlabRecord`: the pools ``slab=True`` planned for one graph (``session.slabs``);
* :class:`GuardRecord`: what the fusion guard checked and blocked in one graph (``session.guards``);
* :class:`FallbackRecord`: a graph where one of them kept Inductor's own
  behaviour, with the stage and the reason (``session.fallbacks``);
* :class:`CacheHitRecord`: compiles that Inductor's FX graph cache served, so
  that no scheduler pass of ours ran (``session.cache_hits``).

Nothing accumulates globally: two sessions (say, in two threads, or one
nested in another) each see their own compiles. Records are frozen
dataclasses; ``record.to_dict()`` gives the JSON object the CLI and the
benchmarks write, with ``"kind"`` naming the record type.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence, Union

from ..errors import ReorderError
from ..report import format_bytes, format_table

__all__ = ["CacheHitRecord", "FallbackRecord", "GuardRecord", "HookOptions", "OrderRecord", "Record", "Session",
           "SlabRecord"]


@dataclass(frozen=True)
class HookOptions:
    """Everything :func:`~reorder.inductor.use` and :func:`~reorder.inductor.install` take, checked once.

    methods: our ordering methods or specs (``"exact:max_states=10000"``);
        None runs :data:`~reorder.schedulers.DEFAULT_METHODS`.
    keep_inductor_pass: leave Inductor's own ``reorder_for_peak_memory`` on
        (it then runs after ours, from our order).
    compare: also run Inductor's three methods on the real nodes; their peaks
        go into each :class:`OrderRecord` and their orders join our candidates.
    capture_dir: write each graph and Inductor's figures there (turns
        Inductor's caches off while installed: a cache hit skips every pass).
    max_seconds: wall-clock safety cap on our methods per graph (reported when
        hit; every method's effort is a count, so the cap is never what decides).
    slab: the wrapper allocates each graph's intermediate buffers from pools at
        our offsets (:mod:`~reorder.inductor.slab`).
    poison: the slab's run-time checks (:mod:`~reorder.inductor.slab_check`); implies ``slab``.
    fusion_guard: refuse fusions that raise the estimated peak
        (:class:`~reorder.inductor.fusion_guard.FusionGuard`).
    fusion_slack_bytes, fusion_slack_fraction: the rise the guard tolerates.
    """

    methods: tuple[str, ...] | None = None
    keep_inductor_pass: bool = False
    compare: bool = False
    capture_dir: Path | None = None
    max_seconds: float = 60.0
    slab: bool = False
    poison: bool = False
    fusion_guard: bool = False
    fusion_slack_bytes: int = 0
    fusion_slack_fraction: float = 0.01

    def __post_init__(self) -> None:
        if self.methods is not None:
            if isinstance(self.methods, str):
                raise ReorderError(f"hook option methods={self.methods!r}: give a list of method names, not a string")
            object.__setattr__(self, "methods", tuple(self.methods))
            from ..schedulers import make_method

            for spec in self.methods:
                make_method(spec)  # raises ReorderError naming the method and what it takes
        if self.capture_dir is not None:
            object.__setattr__(self, "capture_dir", Path(self.capture_dir))
        for name in ("keep_inductor_pass", "compare", "slab", "poison", "fusion_guard"):
            if not isinstance(getattr(self, name), bool):
                raise ReorderError(f"hook option {name}={getattr(self, name)!r}: expected True or False")
        if not isinstance(self.max_seconds, (int, float)) or not self.max_seconds > 0:
            raise ReorderError(f"hook option max_seconds={self.max_seconds!r}: expected a number of seconds > 0")
        if not isinstance(self.fusion_slack_bytes, int) or self.fusion_slack_bytes < 0:
            raise ReorderError(f"hook option fusion_slack_bytes={self.fusion_slack_bytes!r}: expected an int >= 0")
        if not isinstance(self.fusion_slack_fraction, (int, float)) or not 0 <= self.fusion_slack_fraction < 1:
            raise ReorderError(f"hook option fusion_slack_fraction={self.fusion_slack_fraction!r}: "
                               f"expected a number in [0, 1)")
        if self.poison:
            object.__setattr__(self, "slab", True)

    def uuid(self) -> str:
        """A digest of the options that change what a compile produces (not ``capture_dir``, not ``compare``'s
        figures): part of the pass's ``uuid()``, so Inductor's caches tell configurations apart."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "capture_dir"}
        return hashlib.sha256(repr(sorted(fields.items())).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class OrderRecord:
    """The order our pass chose for one graph (Inductor's estimate model, bytes).

    ``peak`` is the chosen order's peak, ``method`` the method that found it
    (``tangents_freed_<m>``: method ``m`` rerun with a backward's tangents
    counted as freed, see :class:`~reorder.inductor.reorder_pass.ReorderPass`),
    ``methods`` every method's peak, ``lower_bound`` the highest proven bound,
    ``optimal`` whether the chosen peak is proven minimal,
    ``estimate_of_incoming_order`` Inductor's figure for the order it handed
    us. ``inductor`` (with ``compare``): Inductor's own peaks by method.
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
    peak_tangents_freed: int | None = None
    peak_tangents_freed_of_stock_order: int | None = None
    inductor: dict[str, int] | None = None
    inductor_seconds: dict[str, float] | None = None
    captured: str | None = None

    kind = "order"

    @property
    def inductor_best(self) -> int:
        """Stock Inductor's figure for this graph: the lowest of its own order and its three methods
        (their ports when ``compare`` was off)."""
        stock = self.inductor or {m: self.methods[m] for m in ("baseline", "lpmf", "bfs", "dfs") if m in self.methods}
        return min(stock.values())

    def to_dict(self) -> dict:
        return {"kind": self.kind, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class SlabRecord:
    """The pools ``slab=True`` planned for one graph.

    ``pools``: bytes of each pool; ``pooled``/``individual``: buffer groups in
    pools and left to their own allocation; ``pool_bytes``: the pools' sum;
    ``bound``: the largest live bytes of the pooled groups (no layout of them
    is smaller); ``worst_ratio``: the largest pool's slab over its own bound;
    ``estimated_peak`` and ``stock_estimated_peak``: the wrapper's allocations
    replayed with our pools and one by one (the wrapper's view, which counts
    allocations Inductor's scheduler model does not, so it differs from the
    :class:`OrderRecord`'s ``peak``).
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

    kind = "slab"

    def to_dict(self) -> dict:
        return {"kind": self.kind, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class GuardRecord:
    """What the fusion guard did in one graph: ``checks`` (fusions judged), ``blocked`` (one dict per fusion
    refused: ``nodes``, ``peak``, ``fused_peak``, ``bytes``), ``avoided_by_reordering`` (rises the reorder pass
    undoes, so allowed), ``work`` (its count of effort), ``budget_exhausted``, ``rebuilds``, ``seconds``,
    ``failed`` (the error that turned it off for this graph, if any)."""

    graph: str
    checks: int
    blocked: tuple[dict, ...]
    avoided_by_reordering: int
    work: int
    budget_exhausted: bool
    rebuilds: int
    seconds: float
    failed: str | None = None

    kind = "guard"

    def to_dict(self) -> dict:
        return {"kind": self.kind, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class FallbackRecord:
    """A graph where ``stage`` (``"order"``, ``"slab"`` or ``"guard"``) kept Inductor's own behaviour, and why."""

    graph: str
    stage: str
    reason: str

    kind = "fallback"

    def to_dict(self) -> dict:
        return {"kind": self.kind, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class CacheHitRecord:
    """``count`` compiles that Inductor's FX graph cache served: no scheduler pass of ours ran for them."""

    count: int

    kind = "cache_hit"

    def to_dict(self) -> dict:
        return {"kind": self.kind, **dataclasses.asdict(self)}


Record = Union[OrderRecord, SlabRecord, GuardRecord, FallbackRecord, CacheHitRecord]


class Session:
    """One installation of the hook: its :class:`HookOptions` and the records of what its compiles did.

    Records are added by the pass, the slab code generation and the guard
    (:meth:`add`, thread-safe) and read through the typed views below. A
    session is live from :func:`~reorder.inductor.install` to the matching
    :func:`~reorder.inductor.uninstall`; records stay readable after.
    """

    def __init__(self, options: HookOptions):
        self.options = options
        self._records: list[Record] = []
        self._lock = threading.Lock()

    def add(self, record: Record) -> None:
        with self._lock:
            self._records.append(record)

    @property
    def records(self) -> tuple[Record, ...]:
        """Every record, in the order the compiles produced them."""
        with self._lock:
            return tuple(self._records)

    def _of(self, kind: type) -> list:
        return [r for r in self.records if isinstance(r, kind)]

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
        """A table a person can read: one row per graph, then one line per fallback and for cache hits."""
        slabs = {r.graph: r for r in self.slabs}
        guards = {r.graph: r for r in self.guards}
        rows = []
        for r in self.graphs:
            slab, guard = slabs.get(r.graph), guards.get(r.graph)
            rows.append((r.graph, r.nodes, format_bytes(r.inductor_best), format_bytes(r.peak),
                         "yes" if r.optimal else f"gap {(r.peak - r.lower_bound) / max(r.lower_bound, 1):.2%}",
                         r.method, format_bytes(slab.pool_bytes) if slab else "-",
                         f"{len(guard.blocked)} of {guard.checks}" if guard else "-"))
        lines = []
        if rows:
            lines.append(format_table(["graph", "nodes", "Inductor (est.)", "ours (est.)", "optimal", "method",
                                       "slab pools", "fusions blocked"], rows))
        lines += [f"fallback ({r.stage}) in {r.graph}: {r.reason}" for r in self.fallbacks]
        if self.cache_hits:
            lines.append(f"{self.cache_hits} compile(s) came from Inductor's FX graph cache: no pass of ours ran for "
                         f"them (torch._inductor.config.force_disable_caches = True, or use(capture_dir=...), "
                         f"forces one)")
        if not lines:
            lines.append("no graph reached Inductor's scheduler in this session")
        return "\n".join(lines)


def sized(values: Sequence[int]) -> tuple[int, ...]:
    """Plain ints for a record (sympy integers and numpy ints do not belong in one)."""
    return tuple(int(v) for v in values)
