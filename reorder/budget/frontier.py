"""The trade-off between a training step's peak and its recomputation, and the choice under a budget.

Candidates are partitions of one :class:`~reorder.budget.step_graph.StepGraph`:
the partition Inductor made (*stock*); for each price of recomputation in
:data:`PRICES`, the partition that minimises ``saved bytes + price x
recomputed cost`` (:func:`~reorder.budget.partition.cheapest_partition`);
the same for each segment count of
:data:`~reorder.budget.segments.SEGMENTS` at the prices of
:data:`SEGMENT_PRICES`, keeping the values at the segments' boundaries
saved (:func:`~reorder.budget.segments.segment_boundaries`), so that the
backward recomputes one segment at a time; and any other saved sets the
caller offers (the partitions of Inductor's ``activation_memory_budget``,
say), those that are valid.
Each is judged by the step's estimated peak
(:func:`~reorder.budget.step_peak.step_peak`). The :class:`Frontier` keeps
the candidates below stock's peak whose peak falls as their cost rises
(sorted by cost, each lower than every cheaper one by more than
:data:`RESOLUTION` of stock's estimate: the estimate is a model, and on the
real-model benchmark two partitions whose estimates differ by less than
that can measure the other way round, so a smaller budget could get a
higher real peak; but the last point is the lowest estimate of all, even
within that resolution, since a budget no point meets asks for the least
memory, and an offered partition needs only :data:`OFFERED_SHARE` of the
resolution, so that a budget its estimate meets does not get a costlier point
of ours instead), and
:meth:`Frontier.choose` picks for a budget in bytes:

* stock itself when the budget is at least stock's estimate (the compile is
  then exactly Inductor's);
* else the cheapest frontier point within the budget, unless it is an
  offered partition that recomputes at least :data:`OFFERED_MARGIN` of the
  step's work (every node's cost once) and a point of ours meets the budget
  for at most that much more and lies :data:`RESOLUTION` of stock's
  estimate below the point before it (every point of ours does but the
  lowest): then the first such point of ours (see below);
* else the lowest point (the budget cannot be met: ``feasible`` is False;
  where sizes are symbolic, the cheapest point that meets it at larger
  sizes, see below).

Where sizes are symbolic (a compile with dynamic shapes), the estimates at the
size hints (the sizes of the call that compiled) say little about larger
calls, where memory runs out: at the hints the parameters' bytes weigh most,
and partitions that differ in what they save per element look alike. The
caller then passes the same graph at larger sizes (``scaled``), and the
frontier is built on each candidate's *level*: its estimate there, scaled
by stock's ratio between the two sizes (so a level is in the hints' bytes,
and a fraction of stock's level is the same fraction of stock's estimate at
the larger sizes). A candidate above stock's estimate at the hints is left
out (the partitioner never goes above it), and a point meets a budget where
its level and its estimate at the hints both do. When none does, the budget
asks at the hints for less than any partition is estimated to reach there,
and the least is what it gets: among the points of the lowest estimate at
the hints, the cheapest whose level meets the budget (``feasible`` stays
False: the hints' estimate is above it); when none of those does either, the
lowest level. On a ``dynamic=True`` decoder's step, five of the frontier's
six points share one estimate at the hints and differ only at twice them:
a budget between their levels got the lowest (the most recomputation)
rather than the cheapest point that meets it at the larger sizes. Without
``scaled`` the level is the estimate, and the rule is the one above.

A smaller budget therefore never gets a higher level: a point meeting it
meets every larger budget, and the cheapest of those has the higher level;
a point chosen by its level alone has the lowest estimate at the hints, so
a larger budget at or above that estimate is met by it in both, and gets it
or a cheaper point of a higher level. An offered point gives way to a later
point that meets the budget too; where sizes are static every later point
does (their estimates fall), and a smaller budget's cheapest point is the
same one or a later one, and gives way to the same point of ours or to a
later one (whether a point of ours may be given way to is its own property:
its level lies the resolution below the point's before it, which every point
but the lowest satisfies by construction; the lowest, kept within the
resolution, is one the estimate cannot tell from the point before it).

Why an offered partition gives way to a point of ours that costs a little
more: Inductor's knapsack chooses op by op, so its partitions recompute
different things in a model's repeated layers, and each layer's backward
then builds kernels of its own, where our cuts recompute alike in every
layer and the layers share their kernels' sources. On the decoder rows of
"how people train" whose kernels were counted (eager loss, autocast,
``dynamic=True``), every budget that chose one of Inductor's partitions
built 38 to 45 C++ kernels (stock: 23 to 31), our points 20 to 27; with the
eager loss, 0.7 chose Inductor's 0.4 (11.4% of the step's work recomputed,
38 kernels, real peak 34.59 MB, compile 50% above stock's), where our next
point recomputes 16.1%; chosen instead, it built 26 kernels (stock 27 on
that machine), measured 27.25 MB and compiled 10% above stock's, at 1.17
times stock's step in the alternation (with Inductor's 0.4, 1.15 times).
An offered partition that recomputes less adds few kernels however it
chooses, and stays: on MobileNetV2, Inductor's 0.4 recomputes 1.3% of the
work and built fewer kernels at the lowest budget than our cut there (172
against 206); and so does one whose next point of ours costs more than the
margin beyond it: ALBERT-MLM's 0.6 (12.2% of the work, ours 11.2% more).
Everything here is a count (the prices, our ordering methods' effort), so one step graph
(with its measured scratch) gives the same choice on any machine.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Iterable, Mapping, Sequence

from ..errors import ReorderError
from .partition import Partition, cheapest_partitions, partition_of
from .segments import SEGMENTS, segment_boundaries
from .step_graph import StepGraph
from .step_peak import ORDER_METHODS, Held, StepPeak, step_peak

__all__ = ["OFFERED_MARGIN", "OFFERED_SHARE", "PRICES", "RESOLUTION", "SEGMENT_PRICES", "STOCK_SOURCE", "Candidate",
           "Choice", "Frontier", "at_larger_sizes", "budget_bytes_of", "candidate_of", "frontier", "price_label",
           "reaching_fraction"]

#: Prices of recomputation tried, in bytes saved per unit of cost: None (infinite: recompute nothing), powers of
#: two from 16 down to 2**-24 (a matrix product of inner size k frees about 2/k bytes per operation, an attention
#: over s keys about 1/s, a pointwise op 4 per element), and 0 (save the fewest bytes the rules allow).
PRICES: tuple[Fraction | None, ...] = (None, *(Fraction(2) ** k for k in range(4, -25, -1)), Fraction(0))

#: Prices tried with each segmentation: every other power of two of :data:`PRICES`, and 0.
SEGMENT_PRICES: tuple[Fraction, ...] = (*(Fraction(2) ** k for k in range(4, -25, -2)), Fraction(0))


#: The least a point must lower the estimate below every cheaper point, as a fraction of stock's estimated peak
#: (the estimate's error against the measured real peaks of recomputing partitions reached 5% on the real-model
#: benchmark, in either direction); an offered partition (Inductor's own) needs :data:`OFFERED_SHARE` of it.
RESOLUTION = 0.05

#: The share of :data:`RESOLUTION` an offered partition (Inductor's own) must lower the level by to be a point. Two
#: fifths were tried: they made MobileNetV2's Inductor 0.2 a point (estimated 2.2% of stock's estimate below its
#: 0.4, measured 9,974,864 B against 10,236,944 B), but on the decoder compiled per layer they also made its 0.2 one
#: (estimated 2.3% below its 0.3, measured 25,234,440 B against 24,709,128 B), which left our six segments out
#: (3.3% below it): a budget of 0.55 got Inductor's 0.3 (24,709,128 B) where with half it gets our six segments
#: (20,859,912 B). The estimate misorders Inductor's own partitions at gaps of 2.3% to 5.8% (BERT-MLM's 0.2 against
#: its 0.5, MobileBERT's 0.2 against its 0.3) and ordered one at 2.2%: half stays.
OFFERED_SHARE = Fraction(1, 2)

#: How much of the step's work (every node's cost once) the offered partition (Inductor's own) that is the cheapest
#: to meet a budget must recompute, and how much more a point of ours may cost than it, for ours to be chosen instead
#: (see the module docstring): on the decoder rows, Inductor's partitions there recomputed 10.1% to 16.1% of the
#: work, and our next points 1.3% (with the eager loss, beside Inductor's 0.3), 4.7% (beside its 0.4), 5.1% (per
#: layer, beside its 0.3) and 6.0% (compiled whole, beside its 0.5) more; on the 13 benchmark rows, Inductor's
#: partitions on the frontier recompute 3.0% of the work at most, but for ALBERT-MLM's 0.6 (12.2%, our next point
#: 11.2% more) and GPT-2's 0.3 to 0.1 (6.1% to 9.5%, given what the step holds beside its regions), and none gives
#: way (GPT-2's 0.1 would give way to our lowest point, 4.4% more, but that one lies within the resolution of it).
OFFERED_MARGIN = 0.06


def budget_bytes_of(budget: int | float, stock_peak: int) -> int:
    """The bytes a ``memory_budget`` asks for: an int is bytes; a float is that fraction of stock's estimated step
    peak, rounded down (at least one byte)."""
    return budget if isinstance(budget, int) else max(1, int(budget * stock_peak))


def reaching_fraction(peak: int, stock_peak: int, digits: int = 3) -> float:
    """The smallest fraction written with ``digits`` decimals whose budget (:func:`budget_bytes_of`) is at least
    ``peak``: the ``memory_budget`` that reaches a point estimated at ``peak``. Rounded to the nearest instead,
    it can fall a few bytes short and choose the next, costlier point (36,980,744 B of 47,220,744 B is 0.78314:
    0.783 asks for 36,973,842 B)."""
    scale = 10 ** digits
    k = max(0, -(-peak * scale // max(stock_peak, 1)) - 1)
    while budget_bytes_of(k / scale, stock_peak) < peak:
        k += 1
    return k / scale


def price_label(price: Fraction | None) -> str:
    """How a price is written in records: ``"inf"``, ``"1/64"``, ``"0"``."""
    return "inf" if price is None else str(price)


#: The ``source`` of stock's candidate: the partition Inductor made with its own defaults.
STOCK_SOURCE = "inductor"


@dataclass(frozen=True)
class Candidate:
    """A partition with its estimated step peak; ``source`` is :data:`STOCK_SOURCE`, ``"price <p>"`` or another
    partitioner's (``"inductor budget 0.5"``);
    ``scaled_peak``: its estimated step peak at larger sizes, where the frontier was given them;
    ``offered``: one of the saved sets the caller offered (another partitioner's), not a cut of ours."""

    partition: Partition
    peak: StepPeak
    source: str
    scaled_peak: int | None = None
    offered: bool = False

    @property
    def cost(self) -> int:
        return self.partition.cost


@dataclass(frozen=True)
class Choice:
    """What :meth:`Frontier.choose` picked for ``budget`` bytes, and whether its estimate meets it."""

    candidate: Candidate
    budget: int
    feasible: bool

    @property
    def is_stock(self) -> bool:
        return self.candidate.source == STOCK_SOURCE


@dataclass(frozen=True)
class Frontier:
    """Stock's candidate and the frontier below it: ``points`` by rising cost, strictly falling level (the
    estimated peak, where no larger sizes were judged); ``work``: the step's work, every node's cost once, which
    :data:`OFFERED_MARGIN` is a fraction of (0: an offered point never gives way); ``resolution``: the least drop
    in level that tells a point apart from the one before it, as a fraction of stock's estimate (an offered point
    gives way only to a point of ours told apart so)."""

    stock: Candidate
    points: tuple[Candidate, ...]
    work: int = 0
    resolution: float = RESOLUTION

    @property
    def lowest(self) -> Candidate:
        """The candidate with the lowest level (stock if nothing is below it)."""
        return self.points[-1] if self.points else self.stock

    @property
    def reachable(self) -> tuple[Candidate, ...]:
        """The points some budget chooses: all but the offered ones that give way to a point of ours at the least
        budget they meet, and so at every budget they are the cheapest to meet (:meth:`choose`), unless a budget
        below every estimate at the hints can get them by their level; records and tables leave those out, since
        asking for one's fraction gets the other."""
        least = self._least_estimate
        return tuple(p for k, p in enumerate(self.points)
                     if self._ours_instead(k, max(p.peak.peak, self.level(p))) is p or p.peak.peak == least)

    def level(self, candidate: Candidate) -> int:
        """``candidate``'s estimated peak, or, where it has one at larger sizes, that one scaled by stock's ratio
        between the hints' estimate and the larger sizes' (see the module docstring)."""
        return _level(candidate, self.stock)

    def choose(self, budget: int) -> Choice:
        """The cheapest candidate whose estimated peak is at most ``budget`` bytes (see the module docstring)."""
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ReorderError(f"memory budget {budget!r}: expected a number of bytes >= 1")
        if budget >= self.stock.peak.peak:
            return Choice(self.stock, budget, True)
        for k, point in enumerate(self.points):
            if self._meets(point, budget):
                return Choice(self._ours_instead(k, budget), budget, True)
        least = self._least_estimate
        for point in self.points:  # the hints' estimate cannot be met: the least of it, and the level decides
            if point.peak.peak == least and self.level(point) <= budget:
                return Choice(point, budget, False)
        return Choice(self.lowest, budget, False)

    def _ours_instead(self, k: int, budget: int) -> Candidate:
        """Point ``k`` (the cheapest to meet ``budget``), or where it is offered and recomputes at least
        :data:`OFFERED_MARGIN` of the step's work, the first point of ours after it that meets ``budget`` too,
        costs at most that much more and is told apart from the point before it (:meth:`_told_apart`)."""
        point, margin = self.points[k], int(OFFERED_MARGIN * self.work)
        if not point.offered or point.cost < margin or not margin:
            return point
        most = point.cost + margin
        return next((p for j, p in enumerate(self.points[k + 1:], k + 1)
                     if not p.offered and p.cost <= most and self._told_apart(j) and self._meets(p, budget)), point)

    def _told_apart(self, j: int) -> bool:
        """Whether point ``j``'s level lies :attr:`resolution` of stock's estimate below the point's before it
        (stock's for the first). Every point of ours but the lowest does, by how :func:`frontier` keeps them; the lowest
        may lie closer, and an offered point does not give way to it, since the estimate cannot tell the two
        apart: on GPT-2's step Inductor's 0.1, estimated 2.1% of stock's estimate above our lowest point and
        exact, measured 42,554,444 B where ours measured 44,147,720 B. A point of ours fails this or not
        whichever offered point asks, so the choice stays monotone."""
        before = self.level(self.points[j - 1]) if j else self.level(self.stock)
        return self.level(self.points[j]) < before - _resolution_bytes(self.resolution, self.stock)

    def _meets(self, point: Candidate, budget: int) -> bool:
        """Whether ``point`` meets ``budget`` bytes: its level and its estimate at the hints both do."""
        return self.level(point) <= budget and point.peak.peak <= budget

    @property
    def _least_estimate(self) -> int | None:
        """The least estimate at the hints of any point (None without points)."""
        return min((point.peak.peak for point in self.points), default=None)


def _level(candidate: Candidate, stock: Candidate) -> int:
    if candidate.scaled_peak is None or not stock.scaled_peak:
        return candidate.peak.peak
    return -(-candidate.scaled_peak * stock.peak.peak // stock.scaled_peak)


def candidate_of(graph: StepGraph, saved: Iterable[int], source: str, methods: Sequence[str] = ORDER_METHODS,
                 held: Held = Held(), scaled: StepGraph | None = None) -> Candidate:
    """The partition that saves ``saved`` (stock's: the values Inductor saves) with its estimated step peak, and
    with its estimate on ``scaled`` (the same graph at larger sizes) where given."""
    partition = partition_of(graph, saved)
    return _candidate(graph, partition, source, methods, held, scaled)


def _candidate(graph: StepGraph, partition: Partition, source: str, methods: Sequence[str], held: Held,
               scaled: StepGraph | None) -> Candidate:
    candidate = Candidate(partition, step_peak(graph, partition, methods, held), source)
    return candidate if scaled is None else at_larger_sizes(candidate, scaled, methods, held)


def at_larger_sizes(candidate: Candidate, scaled: StepGraph, methods: Sequence[str] = ORDER_METHODS,
                    held: Held = Held()) -> Candidate:
    """``candidate`` with its estimated step peak on ``scaled`` (the same graph at larger sizes: the same nodes,
    so the same saved values make the same partition there)."""
    partition = partition_of(scaled, candidate.partition.saved)
    return dataclasses.replace(candidate, scaled_peak=step_peak(scaled, partition, methods, held).peak)


def frontier(graph: StepGraph, stock: Candidate, prices: Sequence[Fraction | None] = PRICES,
             segments: Sequence[int] = SEGMENTS, segment_prices: Sequence[Fraction] = SEGMENT_PRICES,
             methods: Sequence[str] = ORDER_METHODS, held: Held = Held(),
             offered: Mapping[str, Iterable[int]] | None = None, resolution: float = RESOLUTION,
             scaled: StepGraph | None = None) -> Frontier:
    """Stock's candidate (:func:`candidate_of` the values Inductor saves, estimated with the same ``methods``,
    ``held`` and ``scaled``) and the frontier of the other candidates; ``held``: what the step holds beside the
    region (earlier regions, its other calls, eager code: :class:`~reorder.budget.step_peak.Held`); ``offered``:
    more saved sets by name (one that is not a valid partition is left out); ``resolution``: the least drop in
    level, below every cheaper point, as a fraction of stock's estimate (:data:`OFFERED_SHARE` of it for an offered
    set);
    ``scaled``: the same graph at larger sizes, each candidate's level then counting its estimate there (see the
    module docstring)."""
    seen = {stock.partition.saved}
    candidates = []
    partitions = list(zip(cheapest_partitions(graph, prices), (f"price {price_label(p)}" for p in prices)))
    for count in segments:
        kept = segment_boundaries(graph, count)
        if kept:
            partitions += zip(cheapest_partitions(graph, segment_prices, kept),
                              (f"{count} segments, price {price_label(p)}" for p in segment_prices))
    offered_sets, offered_sources = set(), set()  # the offered partitions' saved sets, and their names
    for source, saved in (offered or {}).items():
        try:
            partition = partition_of(graph, saved)
        except ReorderError:
            continue  # recomputes what may not be recomputed (a random op, say)
        partitions.append((partition, source))
        offered_sets.add(partition.saved)
        offered_sources.add(source)
    for partition, source in partitions:
        if partition.saved in seen:
            continue
        seen.add(partition.saved)
        candidate = _candidate(graph, partition, source, methods, held, scaled)
        if source in offered_sources:  # our cut of the same set came first and stays ours
            candidate = dataclasses.replace(candidate, offered=True)
        if scaled is not None and candidate.peak.peak > stock.peak.peak:
            continue  # lower at larger sizes, above stock at the sizes it was compiled for: never chosen
        candidates.append(candidate)
    least = _resolution_bytes(resolution, stock)
    cost_then_level = lambda c: (c.cost, _level(c, stock))  # noqa: E731
    by_cost = sorted(candidates, key=cost_then_level)
    # an offered partition (Inductor's own budget's) needs a share of the resolution: a budget its estimate meets then
    # gets what Inductor's budget would make rather than a costlier point of ours, unless it is a near copy of a
    # cheaper point (on a decoder's step, Inductor's 0.9 came 0.16% of stock's estimate below our cheaper point
    # and measured 1.9 MB above it; its 0.7, 4.1% below, measured 1.1 MB below)
    # a candidate of ours no costlier and no higher than such a point is left out all the same (unless it is the
    # lowest, below): it lies within that share of the resolution of it (left out by the whole, below the same cheaper
    # points as the offered one), a near copy by the estimate, which measured the other way round on
    # ALBERT-MLM (ours 41.59 MB, Inductor's 0.6 40.01 MB)
    offered_drop = int(least * OFFERED_SHARE)
    points = _falling(by_cost, stock, lambda c: offered_drop if c.partition.saved in offered_sets else least)
    # the lowest level found ends the frontier even where it lies within the resolution of the last point: a
    # budget no point meets asks for the least memory, and the estimate's best guess at it is this candidate;
    # the points it leaves pointless (costlier and no lower) go
    floor = min(candidates, key=lambda c: (_level(c, stock), c.cost), default=None)
    if floor is not None:
        points = _falling(sorted([*points, floor], key=cost_then_level), stock, lambda c: 0)
    return Frontier(stock, tuple(points), sum(graph.cost), resolution)


def _resolution_bytes(resolution: float, stock: Candidate) -> int:
    """The least drop in level, in bytes, that tells two candidates apart: ``resolution`` of stock's estimate."""
    return int(resolution * stock.peak.peak)


def _falling(candidates: list[Candidate], stock: Candidate, least_drop: Callable[[Candidate], int]
             ) -> list[Candidate]:
    """Of ``candidates`` sorted by cost, those whose level lies more than ``least_drop(candidate)`` bytes below
    every cheaper one's kept (and below stock's estimate by as much)."""
    points: list[Candidate] = []
    for candidate in candidates:
        last = _level(points[-1], stock) if points else stock.peak.peak
        if _level(candidate, stock) < last - least_drop(candidate):
            points.append(candidate)
    return points
