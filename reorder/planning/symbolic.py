"""Slab plans whose offsets are expressions in the size symbols, valid for every value in their ranges.

A graph compiled with dynamic shapes has storages whose sizes are expressions
(``s0*4096``). Offsets packed at one point (the hint) are wrong at another: a
storage that grows runs into its neighbour. A :class:`StackedPlan` places
storages by *stacking* instead:

* Every pair of storages live at a common step is ordered: one lies below
  the other. The order is a DAG; each storage sits directly on the storages
  of :attr:`StackedPlan.below` (a transitive reduction: the others below it
  are below those).
* A storage's offset is the highest top among those it sits on,
  ``offset(k) = max(offset(j) + size(j) for j in below[k])`` (0 on nothing),
  with ``size`` the aligned size expression; the tensor region ends at the
  highest top. The offsets are therefore expressions (``Max`` of sums of
  sizes), evaluated at run time by whoever allocates the slab.

**Why no two live storages ever share a byte, for every value of the
symbols.** Every size is non-negative over the symbols' ranges (proven by
interval arithmetic, :func:`~reorder.sizes.size_interval`, not sampled), so
along an edge ``j -> k`` the recurrence gives ``offset(k) >= offset(j) +
size(j)`` term by term, and along a path of edges offsets only grow by
non-negative sizes. Two storages live at a common step are joined by a path
(:meth:`StackedPlan.validate` checks every such pair), so the lower one ends
at or before the higher one begins. Aligned sizes are multiples of the
alignment for every value (:func:`~reorder.sizes.align_expression`), so are
their sums and maxima. None of this depends on the values: it holds at every
point of the ranges, which is what the plan promises. The validator then
also instantiates the plan at every evaluation point and runs the concrete
:meth:`~reorder.planning.slab.SlabPlan.validate` on it.

**How the stacking is chosen.** At each evaluation point of the symbols
(:func:`~reorder.sizes.evaluation_points`: the hint, the lower bounds, points
well above the hint), the offset search packs the storages at that point's
sizes; ordering storages by their packed offset (ties by index) orients
every pair live together, acyclically. Its longest-path offsets at that point
are no higher than the packing's own (the recurrence puts each storage as
low as the orientation allows), so there the stacked slab is at most the
packed one. Each candidate stacking is evaluated at every point against that
point's live-bytes bound, and the one with the smallest worst ratio is kept
(then the smaller slab at the hint). :attr:`StackedPlan.ratios` records the
ratio at every point: where one stacking cannot be near the bound at every
size (sizes that grow at different rates, such as ``s`` and ``s**2``), the
plan says how far it is, point by point.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Mapping, Sequence, TypeVar

import sympy

from ..errors import PlanError
from ..sizes import (Expr, Point, SymbolRange, evaluate_bytes, evaluation_points, format_size, size_interval,
                     size_symbols, to_sympy)
from .offset_search import search_offsets
from .offsets import live_bytes_bound
from .slab import PlannedStorages, SlabPlan

__all__ = ["Stacking", "StackedPlan", "check_nonnegative", "choose_stacking", "stack"]

T = TypeVar("T")


@dataclass(frozen=True)
class Stacking:
    """Which storages sit directly on which: ``below[k]`` (storage indices), ``order`` (every storage after the
    ones it sits on), the label of the point whose packing gave it, its tensor-region slab over the live-bytes
    bound at every evaluation point (``ratios``), and whether a search's safety cap cut it short."""

    below: tuple[tuple[int, ...], ...]
    order: tuple[int, ...]
    chosen_at: str
    ratios: dict[str, float]
    capped: bool = False


def stack(stacking: Stacking, sizes: Sequence[T], zero: T = 0, maximum: Callable[..., T] = max,
          bind: Callable[[int, T], T] | None = None) -> tuple[list[T], T]:
    """The recurrence of the module docstring over any arithmetic: the offset of every storage and the top of
    the region, given each storage's size (ints at a point, sympy expressions, ...). ``maximum`` of several
    values; ``zero`` where a storage sits on nothing. ``bind(k, offset)``, if given, is what later storages see
    as storage ``k``'s offset (a name for it, say, so that expressions stay linear in the storages)."""
    offsets: list[T] = [zero] * len(sizes)
    supporting: set[int] = set()
    for k in stacking.order:
        tops = [offsets[j] + sizes[j] for j in stacking.below[k]]
        supporting.update(stacking.below[k])
        offsets[k] = tops[0] if len(tops) == 1 else maximum(*tops) if tops else zero
        if bind is not None and tops:
            offsets[k] = bind(k, offsets[k])
    tops = [offsets[k] + sizes[k] for k in stacking.order if k not in supporting]
    top = tops[0] if len(tops) == 1 else maximum(*tops) if tops else zero
    return offsets, top


def check_nonnegative(names: Sequence[str], sizes: Sequence[Expr], ranges: Mapping[str, SymbolRange],
                      what: str = "buffer") -> None:
    """Prove every size non-negative over the symbols' ranges (interval arithmetic), or raise :class:`PlanError`
    naming the first that may be negative: stacking keeps storages apart only with such sizes."""
    for name, z in zip(names, sizes, strict=True):
        if type(z) is not int and size_interval(z, ranges)[0] < 0:
            raise PlanError(f"{what} {name!r}: its size {format_size(z)} may be negative in the symbols' ranges, "
                            f"so stacking cannot keep storages apart")


def overlapping_pairs(starts: Sequence[int], ends: Sequence[int], active: Sequence[int]) -> list[list[int]]:
    """For each storage, the storages of ``active`` live at a common step with it (half-open ranges), by one
    sweep over the starts: linear in the storages plus the pairs."""
    together: list[list[int]] = [[] for _ in starts]
    live: list[int] = []
    for k in sorted(active, key=lambda k: (starts[k], k)):
        live = [j for j in live if ends[j] > starts[k]]
        for j in live:
            together[j].append(k)
            together[k].append(j)
        live.append(k)
    return together


def _orient(rank: Sequence[int], together: Sequence[Sequence[int]], active: Sequence[int]
            ) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """The stacking that a total order of the storages (``rank``) gives to every pair live together: each
    storage on the lower-ranked ones it meets, transitively reduced (bitsets of everything below)."""
    order = tuple(sorted(active, key=rank.__getitem__))
    below: list[tuple[int, ...]] = [()] * len(rank)
    reach = [0] * len(rank)
    for k in order:
        covered, direct = 0, []
        for j in sorted((j for j in together[k] if rank[j] < rank[k]), key=rank.__getitem__, reverse=True):
            if not covered >> j & 1:  # not already below one that k sits on
                direct.append(j)
                covered |= reach[j] | 1 << j
        below[k] = tuple(sorted(direct))
        reach[k] = covered
    return tuple(below), order


def choose_stacking(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[Expr],
                    points: Sequence[tuple[str, Mapping[str, int]]], restarts: int,
                    max_seconds: float | None = None, greedy_work_limit: int | None = None,
                    what: Callable[[int], str] = lambda k: f"storage #{k}") -> Stacking:
    """The stacking of storages (half-open ``starts``/``ends``, aligned size expressions) with the smallest worst
    ratio to the live-bytes bound over ``points`` (the first point breaks ties by its slab): one candidate per
    point, from the offset search at that point's sizes with ``restarts`` (see the module docstring).
    ``max_seconds`` caps the whole choice; ``what(k)`` names a storage in an error."""
    deadline = None if max_seconds is None else time.perf_counter() + max_seconds
    at = [[evaluate_bytes(z, point, what(k)) for k, z in enumerate(sizes)] for _, point in points]
    active = [k for k, z in enumerate(sizes) if z != 0]
    together = overlapping_pairs(starts, ends, active)
    bounds = [live_bytes_bound(starts, ends, values) for values in at]
    best: tuple[tuple[float, int], Stacking] | None = None
    capped = False
    for (label, _), values in zip(points, at, strict=True):
        left = None if deadline is None else max(deadline - time.perf_counter(), 0.0)
        if left == 0.0 and best is not None:
            capped = True
            break
        found = search_offsets(starts, ends, values, restarts=restarts, max_seconds=left,
                               greedy_work_limit=greedy_work_limit)
        capped = capped or found.capped
        rank = sorted(range(len(sizes)), key=lambda k: (found.offsets[k], k))
        position = [0] * len(sizes)
        for r, k in enumerate(rank):
            position[k] = r
        below, order = _orient(position, together, active)
        candidate = Stacking(below, order, label, {})
        tops = [stack(candidate, v)[1] for v in at]
        ratios = {lab: (top / bound if bound else 1.0) for (lab, _), top, bound in zip(points, tops, bounds, strict=True)}
        score = (max(ratios.values()), tops[0])
        if best is None or score < best[0]:
            best = (score, Stacking(below, order, label, ratios))
    return Stacking(best[1].below, best[1].order, best[1].chosen_at, best[1].ratios, capped)


@dataclass(frozen=True)
class StackedPlan(PlannedStorages):
    """A slab plan for every point of the size symbols' ranges: storages stacked (see the module docstring).

    Besides the :class:`~reorder.planning.slab.PlannedStorages` (whose
    ``starts``/``ends`` do not depend on sizes), parallel tuples per storage:
    ``sizes`` (aligned size expressions, ints where constant) and
    ``symbolic_sizes`` (the buffers' own size texts, for
    reports). ``stacking``: the :class:`Stacking`. Workspaces follow the
    tensor region as in ``SlabPlan``: ``unique_workspace`` (node, aligned
    bytes expression) in node order, then ``shared_workspace``. ``hints``
    and ``ranges``: the symbols' hints and ranges; :meth:`at` gives the
    concrete plan at any point of them, :attr:`points` the points it is
    checked at.
    """

    sizes: tuple[Expr, ...]
    stacking: Stacking
    unique_workspace: tuple[tuple[str, Expr], ...]
    shared_workspace: Expr
    hints: Mapping[str, int]
    ranges: Mapping[str, SymbolRange]
    symbolic_sizes: tuple[str | None, ...] = ()

    @cached_property
    def symbols(self) -> tuple[str, ...]:
        found: set[str] = set()
        for tree in (*self.sizes, *(z for _, z in self.unique_workspace), self.shared_workspace):
            if type(tree) is not int:
                found |= size_symbols(tree)
        return tuple(sorted(found))

    @cached_property
    def points(self) -> list[tuple[str, dict[str, int]]]:
        """The labelled evaluation points (:func:`~reorder.sizes.evaluation_points`) of the plan's symbols."""
        if not self.symbols:
            return [("hint", {})]
        return evaluation_points(self.hints, self.ranges, self.symbols)

    @property
    def capped(self) -> bool:
        return self.stacking.capped

    @property
    def ratios(self) -> dict[str, float]:
        """The tensor region's slab over its live-bytes bound at each evaluation point (1.0: optimal there)."""
        return self.stacking.ratios

    def sizes_at(self, point: Point) -> list[int]:
        values = {**self.hints, **point}
        return [evaluate_bytes(z, values, f"buffer {self.names[k]!r}") for k, z in enumerate(self.sizes)]

    def at(self, point: Point) -> SlabPlan:
        """The concrete plan at ``point`` (symbols not named keep their hints): every offset evaluated."""
        values = {**self.hints, **point}
        sizes = self.sizes_at(values)
        offsets, top = stack(self.stacking, sizes)
        unique, end = {}, top
        for node, z in self.unique_workspace:
            unique[node] = (end, evaluate_bytes(z, values, f"node {node!r} unique workspace"))
            end += unique[node][1]
        shared = (end, evaluate_bytes(self.shared_workspace, values, "shared workspace"))
        return SlabPlan(f"{self.strategy} (stacked)", self.alignment, self.order, self.names, self.members,
                        self.starts, self.ends, tuple(sizes), tuple(offsets), top,
                        live_bytes_bound(self.starts, self.ends, sizes), unique, shared, self.symbolic_sizes,
                        capped=self.capped)

    @cached_property
    def at_hint(self) -> SlabPlan:
        return self.at(self.hints)

    @property
    def slab_bytes(self) -> int:
        """The slab at the hint."""
        return self.at_hint.slab_bytes

    @property
    def tensor_bound(self) -> int:
        return self.at_hint.tensor_bound

    @property
    def lower_bound(self) -> int:
        return self.at_hint.lower_bound

    @property
    def ratio(self) -> float:
        return self.at_hint.ratio

    @cached_property
    def expressions(self) -> tuple[list[sympy.Expr], sympy.Expr]:
        """Every storage's offset and the whole slab's size as sympy expressions in the symbols."""
        sizes = [to_sympy(z, self.ranges) for z in self.sizes]
        offsets, top = stack(self.stacking, sizes, sympy.Integer(0), sympy.Max)
        for _, z in self.unique_workspace:
            top = top + to_sympy(z, self.ranges)
        return offsets, top + to_sympy(self.shared_workspace, self.ranges)

    def validate(self) -> None:
        """Prove the plan sound at every point of the ranges, or raise :class:`PlanError` naming the culprits.

        1. Every size expression (storages and workspaces) is non-negative over
           the ranges (interval arithmetic).
        2. The stacking is a DAG listed in order (each storage after those it
           sits on) and every pair of positive-size storages live at a common
           step is joined by a path in it.
        3. At every evaluation point, the concrete plan passes
           :meth:`SlabPlan.validate` (offsets aligned and disjoint while live,
           workspaces laid out after the tensor region).

        1 and 2 are the argument of the module docstring: with them the plan
        holds for every value of the symbols, not only at the points of 3.
        """
        check_nonnegative(self.names, self.sizes, self.ranges)
        check_nonnegative([node for node, _ in self.unique_workspace], [z for _, z in self.unique_workspace],
                          self.ranges, "the unique workspace of node")
        check_nonnegative(["shared workspace"], [self.shared_workspace], self.ranges, "the")
        n = len(self.names)
        position = {k: i for i, k in enumerate(self.stacking.order)}
        reach = [0] * n
        for k in self.stacking.order:
            for j in self.stacking.below[k]:
                if position.get(j, n) >= position[k]:
                    raise PlanError(f"buffer {self.names[k]!r} sits on {self.names[j]!r}, which is not stacked "
                                    f"before it")
                reach[k] |= reach[j] | 1 << j
        active = [k for k, z in enumerate(self.sizes) if z != 0]
        missing = [k for k in active if k not in position]
        if missing:
            raise PlanError(f"buffer {self.names[missing[0]]!r} is not in the stacking")
        for k, others in enumerate(overlapping_pairs(self.starts, self.ends, active)):
            for j in others:
                if j < k and not (reach[k] >> j & 1 or reach[j] >> k & 1):
                    raise PlanError(f"buffers {self.names[j]!r} and {self.names[k]!r} are live at a common step "
                                    f"but neither is stacked on the other: they may share bytes")
        for label, point in self.points:
            try:
                self.at(point).validate()
            except PlanError as exc:
                raise PlanError(f"at {label} ({', '.join(f'{s}={v}' for s, v in point.items())}): {exc}") from None

    def to_json(self) -> dict:
        """The ``plan`` CLI object of a symbolic graph: the hint's figures (as for a static plan) and, per buffer,
        its offset as an expression; ``slab`` the slab's expression, ``ratios`` the slab over the bound at each
        evaluation point, ``points`` those points."""
        offsets, slab = self.expressions
        data = self.at_hint.to_json()
        data.update(symbols={s: {"hint": self.hints[s], "range": list(self.ranges[s])} for s in self.symbols},
                    slab=str(slab), stacked_at=self.stacking.chosen_at, ratios=self.ratios,
                    points={label: point for label, point in self.points})
        for k, entry in enumerate(data["buffers"]):
            entry["offset_at_hint"] = entry["offset"]
            entry["offset"] = str(offsets[k])
            entry["size_expression"] = str(to_sympy(self.sizes[k], self.ranges))
            entry["below"] = [self.names[j] for j in self.stacking.below[k]]
        return data
