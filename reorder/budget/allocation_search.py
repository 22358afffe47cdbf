"""An order whose generated code allocates less: node moves judged by the replay of Inductor's wrapper.

Our ordering methods minimise Inductor's estimate (``torch/_inductor/memory.py``),
which counts every buffer from its producer to its last reader. The code
Inductor generates writes a kernel's output into an input that dies there
and hands dead storage to later buffers of its size
(:mod:`~reorder.budget.allocation_model`), so two orders of one estimate can
allocate peaks a buffer apart: a pointwise kernel placed after the last
other reader of its input writes in place, placed before it does not. On
DeBERTa-v2's backward under a budget, orders of the same estimate allocate
11.42 MB and 10.19 MB.

:func:`lower_allocated_peak` is a first-improvement local search over an
order: each node in turn is tried at the earliest and the latest step its
predecessors and successors allow, and halfway to each; a move is kept
when it lowers the allocated peak (:meth:`~reorder.budget.allocation_model.AllocationModel.peak`)
and the caller's ``allowed`` accepts the new order (the reorder pass keeps
Inductor's estimate at or under stock's). Passes repeat until one moves
nothing or the count of candidate orders (``evaluations``) is judged: the
same graph gives the same order on any machine.

On a graph with size symbols the peak is judged at every point its sizes
are checked at (:meth:`~reorder.graph.Graph.evaluation_points`): a move is
kept when it lowers the peak at the size hints and raises it at no other
point, so that an order the hints favour costs nothing at the sizes the
program also runs at. A candidate no lower at the hints is refused after
one replay: most moves leave the peak where it is, and judging those at
every point cost 8 s more on the backward of a ``dynamic=True`` decoder
(nine points) where the search now costs what it does on a static graph.

One start ends in one local minimum. The search runs from each of the
caller's starts in turn (the reorder pass gives its candidate orders, best
first) with what the searches before it left of the count: on BERT-MLM's
backward at 0.917, the best-scored start ends at 37.38 MB and the second
reaches 36.86 MB (measured: 36,863,624 B). The first start has the whole
count, so where the later ones find nothing lower, the order is the one a
single start gives. (Moves that also cross orders of one peak, kept when
they lower the bytes allocated over the steps, reach 14.01 MB on ALBERT-QA's
backward at 0.806 where these stop at 14.08 MB, but on ResNet at 0.875 they
found an order the replay of its code put at 3.45 MB and that measured
4.48 MB: they follow the model's errors too far.)
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from .allocation_model import AllocationModel, KernelSources, kernel_count

__all__ = ["EVALUATIONS", "SOURCE_CHECKS", "Gathered", "Moved", "fewer_kernels", "lower_allocated_peak"]

#: Replays a search may run (each costs one pass over the graph's nodes and buffers).
EVALUATIONS = 2000

#: Counts of a candidate's kernel sources :func:`fewer_kernels` may make in one search (each a pass over the kernel
#: groups beside one place, :class:`~reorder.budget.allocation_model.SourcesWithInsertion`); once they are spent,
#: only places that lower the count of groups are still counted. More counts gather more: on the backward of the
#: decoder under autocast at 0.4, counting until no place lowers the count (28,000 counts) built 46 C++ kernels
#: instead of 49, allocating no more by the model, but its step measured 20,452,236 B instead of 19,884,940 B (a
#: model that then pooled storage by bytes, not by Inductor's reuse keys); with the keys, 30,000 counts built 45
#: instead of 48 at the same real peak (docs/measured.md: "Gathering further").
SOURCE_CHECKS = 5000


class Moved(NamedTuple):
    """What :func:`lower_allocated_peak` kept: the order, its allocated peak at the size hints and at the other
    points of a symbolic graph, and the index of its start."""

    order: list[int]
    peak: int
    peaks_elsewhere: tuple[int, ...]
    start: int


def lower_allocated_peak(models: Sequence[AllocationModel], starts: Sequence[Sequence[int]],
                         allowed: Callable[[list[int]], bool], evaluations: int = EVALUATIONS) -> Moved:
    """The order of lowest allocated peak that moves from ``starts`` reach (see the module docstring), judged by
    ``models``: one graph's model at each point its sizes are checked at, the size hints first (one model for a
    graph of constant sizes). A move is kept when it lowers the peak at the hints and raises it at no other
    point. The search runs from each start in turn, the first with the whole count of candidate orders and each
    next one with what the searches before it left, a later start's result kept only when it is lower in the
    same sense than the order kept so far (the first start itself when no move helps)."""
    replays = _Replays(models)
    best, best_peaks, best_start = list(starts[0]), replays.peaks(starts[0]), 0
    left = evaluations
    for index, start in enumerate(starts):
        if left <= 0:
            break
        found, peaks, spent = _descend(replays, start, allowed, left)
        left -= spent
        if _lower(peaks, best_peaks):
            best, best_peaks, best_start = found, peaks, index
    return Moved(best, best_peaks[0], tuple(best_peaks[1:]), best_start)


def _lower(peaks: Sequence[int], than: Sequence[int]) -> bool:
    """Lower at the hints (the first point) and higher at no other point."""
    return peaks[0] < than[0] and all(p <= q for p, q in zip(peaks, than))


class _Replays:
    """Each model's allocated peak of the candidate orders of one search, replayed once per order: the peak is
    a function of the order alone, and a search tries the same order again (a pass after the last move kept
    tries again the moves tried since, on the same order; 14% to 30% of the replays of the backwards of T5,
    MobileBERT and the decoder under autocast at their lowest points)."""

    def __init__(self, models: Sequence[AllocationModel]):
        self.models = models
        self._peaks: dict[tuple[int, tuple[int, ...]], int] = {}

    def peak(self, point: int, order: Sequence[int], check: bool = False) -> int:
        """The allocated peak of ``order`` by the model of the ``point``-th point (``check``: check the order when
        it is first replayed; a move within its neighbours makes a valid order, which is not checked)."""
        key = (point, tuple(order))
        peak = self._peaks.get(key)
        if peak is None:
            peak = self._peaks[key] = self.models[point].peak(order, check=check)
        return peak

    def peaks(self, order: Sequence[int]) -> list[int]:
        """The allocated peak of ``order`` at every point (a start of the search: checked where it is first
        replayed)."""
        return [self.peak(point, order, check=True) for point in range(len(self.models))]


def _judged(replays: _Replays, candidate: Sequence[int], current: Sequence[int],
            lower_at_hint: bool = True) -> list[int] | None:
    """The candidate's peak at every point when it is lower than ``current``'s (:func:`_lower`; with
    ``lower_at_hint`` False, when it is nowhere higher), else None; replayed point by point, hint first, up to
    the first point where it fails."""
    peaks = []
    for point, peak in enumerate(current):
        candidate_peak = replays.peak(point, candidate)
        if candidate_peak > peak or (lower_at_hint and not peaks and candidate_peak == peak):
            return None
        peaks.append(candidate_peak)
    return peaks


def _descend(replays: _Replays, order: Sequence[int], allowed: Callable[[list[int]], bool],
             evaluations: int) -> tuple[list[int], list[int], int]:
    """First-improvement moves from ``order`` until a pass moves nothing or ``evaluations`` candidate orders
    are judged: the order reached, its allocated peak at each point and the orders judged."""
    graph = replays.models[0].graph
    current = list(order)
    peaks = replays.peaks(current)
    spent, moved = 0, True
    while moved and spent < evaluations:
        moved = False
        position = _positions(current)
        for v in list(current):
            i = position[v]
            earliest = max((position[u] for u in graph.preds[v]), default=-1) + 1
            latest = min((position[u] for u in graph.succs[v]), default=len(current)) - 1
            for j in sorted({earliest, (earliest + i) // 2, (i + latest + 1) // 2, latest} - {i}):
                if spent >= evaluations:
                    return current, peaks, spent
                candidate = current[:i] + current[i + 1:]
                candidate.insert(j, v)
                spent += 1
                candidate_peaks = _judged(replays, candidate, peaks)
                if candidate_peaks is not None and allowed(candidate):
                    current, peaks, moved = candidate, candidate_peaks, True
                    position = _positions(current)
                    break
    return current, peaks, spent


def _positions(order: Sequence[int]) -> list[int]:
    position = [0] * len(order)
    for step, v in enumerate(order):
        position[v] = step
    return position


class Gathered(NamedTuple):
    """What :func:`fewer_kernels` kept: the order, its kernel groups before and after, the moves kept, and the
    distinct sources of its groups before and after (0 where they were not counted)."""

    order: list[int]
    kernels_before: int
    kernels: int
    moves: int
    sources_before: int = 0
    sources: int = 0


def fewer_kernels(models: Sequence[AllocationModel], order: Sequence[int], allowed: Callable[[list[int]], bool],
                  evaluations: int = EVALUATIONS, sources: KernelSources | None = None,
                  checks: int = SOURCE_CHECKS) -> Gathered:
    """``order`` with its C++ kernels gathered into fewer kernel groups
    (:meth:`~reorder.budget.allocation_model.AllocationModel.kernels`), and with ``sources`` into fewer distinct
    sources (:class:`~reorder.budget.allocation_model.KernelSources`), where that allocates no more:
    first-improvement moves of one node, each kept when it lowers the count (the sources first, then the
    groups), raises the allocated peak at no point of ``models`` (as in :func:`lower_allocated_peak`) and
    ``allowed`` accepts the new order. Passes repeat until one moves nothing or ``evaluations`` candidate orders
    are replayed.

    Each distinct source is a C++ file Inductor builds, and most of what a compile spends beyond our stages
    goes to building them. An order chosen for what it allocates splits groups that need not be split (a
    generated kernel placed between two extern kernels builds alone): ALBERT-MLM's backward at 1.0 ran its
    kernels in 18 groups where 13 allocate the same peak. Only two moves can lower the count of groups: a
    generated kernel that is the only one of its group, moved beside another group (a neighbour in the new
    place is grouped), and an extern kernel between two groups, which joins them, moved where it splits no
    group: beside another extern kernel, at either end, or inside a run of which one side holds only no-ops
    (every place of such an extern kernel is counted). Such a move is kept only where it builds no more
    sources. It also moves nodes of one repeated layer so that its groups no longer repeat another layer's,
    which Inductor then builds apart: any place of a node can lower the count of sources, so with ``sources``
    every place is counted (from the groups beside it, no replay:
    :class:`~reorder.budget.allocation_model.SourcesWithInsertion`) while ``checks`` counts are left (every count
    spends one, those of places that lower the groups too; once they are spent only those places are
    counted), and replayed where it lowers it. An order without kernel groups (Triton) is returned as it is."""
    model = models[0]
    kinds = model.kinds
    current = list(order)
    before = model.kernels(current)
    if before is None:
        return Gathered(current, 0, 0, 0)
    graph = model.graph
    replays = _Replays(models)
    kernels, peaks = before, replays.peaks(current)
    built = sources.count("".join(kinds[v] for v in current), current) if sources is not None else 0
    sources_before = built
    spent, moves, moved = 0, 0, True
    while moved and spent < evaluations:
        moved = False
        position = _positions(current)
        for v in list(current):
            if kinds[v] == "N":
                continue  # a no-op builds nothing: no place it goes lowers either count
            i = position[v]
            rest = current[:i] + current[i + 1:]
            letters = "".join(kinds[u] for u in rest)
            base = kernel_count(letters)
            if base >= kernels and (sources is None or checks <= 0):
                continue  # taking it out joins no groups and empties none: no place it goes lowers the count
            g_before, g_after = _generated_around(letters)
            insertions = None  # the sources of rest with v put in, once a place of v is counted
            earliest = max((position[u] for u in graph.preds[v]), default=-1) + 1
            latest = min((position[u] for u in graph.succs[v]), default=len(current)) - 1
            for j in range(earliest, latest + 1):
                if j == i:
                    continue
                # v between rest[j - 1] and rest[j]: the count there, from the letters around that place
                left, right = j > 0 and letters[j - 1] != "E", j < len(letters) and letters[j] != "E"
                left_g, right_g = left and g_before[j - 1], right and g_after[j]
                if kinds[v] == "E":  # splits a run with a generated kernel on both sides into two groups
                    count = base + (left and right and left_g and right_g)
                else:  # joins a run with a generated kernel, or builds a group of its own
                    count = base + (not (left_g or right_g))
                if count >= kernels and (sources is None or checks <= 0):
                    continue
                candidate_built = 0
                if sources is not None:
                    checks -= 1
                    if insertions is None:
                        insertions = sources.insertions(letters, rest)
                    candidate_built = insertions.count(j, v, kinds[v])
                if (candidate_built, count) >= (built, kernels):  # fewer sources, or as many in fewer groups
                    continue
                candidate = rest[:j] + [v] + rest[j:]  # v at step j, as lower_allocated_peak moves it
                if spent >= evaluations:
                    return Gathered(current, before, kernels, moves, sources_before, built)
                spent += 1
                candidate_peaks = _judged(replays, candidate, peaks, lower_at_hint=False)
                if candidate_peaks is not None and allowed(candidate):
                    current, peaks, kernels, built = candidate, candidate_peaks, count, candidate_built
                    moved, moves = True, moves + 1
                    position = _positions(current)
                    break
    return Gathered(current, before, kernels, moves, sources_before, built)


def _generated_around(letters: str) -> tuple[list[bool], list[bool]]:
    """Per place of ``letters`` (kinds in order, :attr:`~reorder.budget.allocation_model.AllocationModel.kinds`):
    whether its run of grouped nodes holds a generated kernel at or before it, and at or after it."""
    before, after = [False] * len(letters), [False] * len(letters)
    seen = False
    for t, letter in enumerate(letters):
        seen = letter != "E" and (seen or letter == "G")
        before[t] = seen
    seen = False
    for t in range(len(letters) - 1, -1, -1):
        seen = letters[t] != "E" and (seen or letters[t] == "G")
        after[t] = seen
    return before, after
