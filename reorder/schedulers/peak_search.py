"""The minimum peak over every topological order, by a search that asks "is there an order under T?".

After any set ``S`` of nodes has run, the live bytes ``L(S)`` do not depend on
the order they ran in (:mod:`reorder.schedulers.subsets`), and running ``v``
next costs ``L(S) + alloc(v)`` during its step. Whether some order keeps
every step at or under a limit ``T`` is therefore a reachability question
over the downward-closed sets ``S``: a depth-first search that remembers the
sets it has seen never looks at a set twice, and once it has seen them all
the answer "no" is a proof. The minimum peak is found by asking again with
``T`` = the best peak found so far minus one, until the answer is no.

Three rules cut the sets it has to see, each of which keeps at least one order
under ``T`` whenever there is one (so a "no" is still a proof):

* **Free moves.** A ready node ``v`` whose step fits under ``T`` and that
  frees at least what it allocates (``L(S + v) <= L(S)``) runs at once, no
  branching. Moving ``v`` to the front of any order under ``T`` keeps it
  under ``T``: ``v``'s own step fits, and every step between the front and
  ``v``'s old place holds ``alloc(v)`` more and at least what ``v`` frees
  less (the more nodes have run, the more ``v``'s run frees), which is no
  more than before.
* **Sinks that free nothing wait.** A node nobody reads after (a parameter's
  gradient) that would free nothing if it ran now only adds bytes, so the
  same swap moves it past the next node: it waits until it frees something,
  or runs in one block with the other sinks that read the same buffer (the
  last of them frees it), or runs once only sinks are left.
* **Producers run when they are needed.** A *producer* is a node that can
  never free anything: every buffer it reads has another reader that comes
  after it (a descendant), and every buffer it writes has a reader. Such a
  node only adds bytes, so in any order it can be swapped with the next
  node unless that node reads what it wrote, without raising either step
  (the next node's step no longer holds the producer's output, and the
  producer's step holds at most what the next node's did). So some order
  under ``T`` runs every producer right before a node that needs it: the
  search runs a non-producer ``z`` together with the producers it needs
  (its producer ancestors through producers) just before it, and never a
  producer alone. Recomputations from saved activations in backward graphs
  (a batch norm and activation redone for the gradient) are producers: they
  can run at any step, and without this rule every subset of them is a new
  set to search.

The program's first step is the exception to all three: it also frees the
graph inputs nobody reads, so every ready node is tried there, alone.

Both limits are counts (sets seen), so the answer never depends on the
machine. Peaks are in Inductor 2.13's live-bytes model
(:mod:`reorder.timeline`; both of its estimators give the same peak).
This is the dynamic program of Serenity (Ahn et al., MLSys 2020) asked as a
decision problem, with the dominance rules above in place of its graph
rewriting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import ReorderError
from ..graph import Graph
from ..timeline import estimate_peak_memory, lower_bound

__all__ = ["Minimum", "PeakSearch", "Search", "minimum_peak"]


@dataclass(frozen=True)
class Search:
    """One question "is there an order whose peak is at most ``limit``?".

    ``order`` is such an order, or None. ``complete``: every set was seen, so
    None means there is none (a proof); False when ``max_states`` stopped it.
    """

    order: list[int] | None
    complete: bool
    states: int


@dataclass(frozen=True)
class Minimum:
    """The lowest peak found (``peak``, of ``order``); ``proven``: it is the minimum over every
    order; ``bound``: no order's peak is below it (``peak`` once proven); the sets seen over all
    the questions asked."""

    order: list[int]
    peak: int
    proven: bool
    bound: int
    states: int


class PeakSearch:
    """The search's arrays for one graph, built once: bitmasks of predecessors, what each node
    frees and when, producers and the non-producers that pull them in (see the module docstring)."""

    def __init__(self, graph: Graph):
        n = graph.num_nodes
        self.graph = graph
        self.alloc = list(graph.alloc_size)
        self.pred_mask = [0] * n
        for v in range(n):
            for p in graph.preds[v]:
                self.pred_mask[v] |= 1 << p
        self.succs = [tuple(graph.succs[v]) for v in range(n)]
        readers = [0] * graph.num_buffers
        for b in range(graph.num_buffers):
            for r in graph.readers[b]:
                readers[b] |= 1 << r
        # Frees of each node: (bytes, readers other than the node that must have run).
        self.frees: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for v in range(n):
            for b in graph.reads[v]:
                if not graph.is_output[b]:
                    self.frees[v].append((graph.size_free[b], readers[b] & ~(1 << v)))
            for b in graph.outputs[v]:
                if not graph.is_output[b] and not graph.readers[b]:
                    self.frees[v].append((graph.size_free[b], 0))
        self.unread_inputs = sum(
            graph.size_free[b] for b in range(graph.num_buffers)
            if graph.is_input[b] and not graph.readers[b] and not graph.is_output[b]
        )
        self.live_at_start = sum(graph.size_alloc[b] for b in range(graph.num_buffers) if graph.is_input[b])
        self.ready_at_start = sum(1 << v for v in range(n) if not self.pred_mask[v])
        # Nodes that could ever free what they allocate: the only candidates for a free move.
        self.may_free = sum(1 << v for v in range(n) if sum(size for size, _ in self.frees[v]) >= self.alloc[v])
        # What a node frees changes only when another reader of the same buffers runs.
        self.co_readers = [0] * n
        for b in range(graph.num_buffers):
            for r in graph.readers[b]:
                self.co_readers[r] |= readers[b]
        descendants = graph.descendants
        self.producer = [
            bool(graph.succs[v]) and all(size == 0 or need & descendants[v] for size, need in self.frees[v])
            for v in range(n)
        ]
        self.sinks = sum(1 << v for v in range(n) if not graph.succs[v])
        self.non_producers = sum(1 << v for v in range(n) if not self.producer[v])
        self._pull_in_producers()

    def _pull_in_producers(self) -> None:
        """``pulls[z]``: the producers a non-producer ``z`` runs with (its producer ancestors through
        producers); ``needs[z]``: the non-producers that must have run first (predecessors of ``z``
        and of those producers); ``waiting[v]``: the non-producers whose ``needs`` hold ``v``."""
        graph, n, producer = self.graph, self.graph.num_nodes, self.producer
        self.pulls = [0] * n
        for z in range(n):  # node ids are an order that runs (the baseline): predecessors come first
            for p in graph.preds[z]:
                if producer[p]:
                    self.pulls[z] |= (1 << p) | self.pulls[p]
        self.needs = [0] * n
        self.waiting: list[list[int]] = [[] for _ in range(n)]
        for z in range(n):
            if producer[z]:
                continue
            for x in (z, *_bits(self.pulls[z])):
                for p in graph.preds[x]:
                    if not producer[p]:
                        self.needs[z] |= 1 << p
            for p in _bits(self.needs[z]):
                self.waiting[p].append(z)
        self.wanted_at_start = sum(1 << z for z in range(n) if not producer[z] and not self.needs[z])

    def _freed(self, v: int, after: int) -> int:
        """The bytes ``v`` frees when it runs and ``after`` is the set that has run then (``v`` included)."""
        freed = 0
        for size, need in self.frees[v]:
            if not need & ~after:
                freed += size
        return freed

    def _run(self, done: int, live: int, ready: int, wanted: int, v: int) -> tuple[int, int, int, int]:
        """Run ``v`` after ``done``: the new set, live bytes, ready nodes and runnable non-producers."""
        after = done | (1 << v)
        live += self.alloc[v] - self._freed(v, after) - (self.unread_inputs if not done else 0)
        ready &= ~(1 << v)
        wanted &= ~(1 << v)
        for w in self.succs[v]:
            if not self.pred_mask[w] & ~after:
                ready |= 1 << w
        for z in self.waiting[v]:
            if not self.needs[z] & ~after and not after >> z & 1:
                wanted |= 1 << z
        return after, live, ready, wanted

    def _free_moves(self, state: tuple[int, int, int, int], limit: int, ran: list[int],
                    short: int) -> tuple[tuple[int, int, int, int], int]:
        """Run every ready node that fits under ``limit`` and leaves no more bytes live, until none is left.

        ``short``: nodes known to free less than they allocate after ``state``'s set (what a node
        frees only grows when another reader of its buffers runs); returned updated.
        """
        done, live, ready, wanted = state
        if not done:
            return state, short
        alloc = self.alloc
        moved = True
        while moved:
            moved = False
            for v in _bits(ready & self.may_free & ~short):
                if live + alloc[v] > limit:
                    continue
                if self._freed(v, done | (1 << v)) >= alloc[v]:
                    done, live, ready, wanted = self._run(done, live, ready, wanted, v)
                    short &= ~self.co_readers[v]
                    ran.append(v)
                    moved = True
                    break
                short |= 1 << v
        return (done, live, ready, wanted), short

    def _moves(self, done: int, ready: int, wanted: int) -> list[list[int]]:
        """The branches at ``done`` (see the module docstring): every ready node alone at the first
        step; later, each runnable non-producer after the producers it pulls in (in index order, a
        topological one), except that a sink which would free nothing waits, unless it completes a
        buffer's readers together with the other sinks that read it, or only sinks are left."""
        if not done:
            return [[v] for v in _bits(ready)]
        units = {z: [*_bits(self.pulls[z] & ~done), z] for z in _bits(wanted)}
        if not self.non_producers & ~done & ~self.sinks:
            return list(units.values())
        moves, waiting = [], []
        for z, unit in units.items():
            if self.sinks >> z & 1 and not self._freed(z, done | self.pulls[z] | (1 << z)):
                waiting.append(z)
            else:
                moves.append(unit)
        blocks: set[int] = set()
        for z in waiting:
            for size, need in self.frees[z]:
                readers = (need & ~done) | (1 << z)
                if size and readers not in blocks and not readers & ~(wanted & self.sinks):
                    blocks.add(readers)
                    members = sorted(_bits(readers), key=lambda r: (r not in waiting, r))
                    moves.append([v for r in members for v in units[r]])
        return moves

    def order_within(self, limit: int, max_states: int) -> Search:
        """An order whose peak is at most ``limit``, or the proof that none exists (within ``max_states`` sets)."""
        full = (1 << self.graph.num_nodes) - 1
        alloc = self.alloc
        seen: set[int] = set()
        path: list[int] = []
        stack: list[tuple[tuple[int, int, int, int], int, list[int], int]] = [
            ((0, self.live_at_start, self.ready_at_start, self.wanted_at_start), 0, [], 0)
        ]
        while stack:
            state, depth, ran, short = stack.pop()
            del path[depth:]
            path.extend(ran)
            done, live, ready, wanted = state
            if done == full:
                return Search(list(path), True, len(seen))
            children = []
            for move in self._moves(done, ready, wanted):
                nxt, short_here = state, short
                for v in move:
                    if nxt[1] + alloc[v] > limit:
                        break
                    nxt = self._run(*nxt, v)
                    short_here &= ~self.co_readers[v]
                else:
                    ran_here = list(move)
                    nxt, short_here = self._free_moves(nxt, limit, ran_here, short_here)
                    if nxt[0] in seen:
                        continue
                    seen.add(nxt[0])
                    if len(seen) > max_states:
                        return Search(None, False, len(seen))
                    children.append((nxt[1] - live, nxt, ran_here, short_here))
            # Depth first, the child that leaves the fewest bytes live first.
            children.sort(key=lambda c: -c[0])
            stack.extend((nxt, len(path), ran_here, short_here) for _, nxt, ran_here, short_here in children)
        return Search(None, True, len(seen))


def minimum_peak(graph: Graph, start: Sequence[int], max_states: int, bound_states: int = 0,
                 floor: int | None = None) -> Minimum:
    """The minimum peak over every order, starting from ``start``: ask for an order under the best
    peak so far until the answer is a proof that none exists, or the ``max_states`` sets are spent.

    If they are spent first and ``bound_states`` > 0, a bisection between ``floor`` (a peak no
    order beats; default :func:`~reorder.timeline.lower_bound`) and the best peak certifies a
    bound: each limit it proves unreachable raises the bound, each order it finds lowers the peak,
    and each question that runs out of its share of ``bound_states`` narrows the bisection below
    that limit.
    """
    best = list(start)
    peak = estimate_peak_memory(graph, best).peak
    search = PeakSearch(graph)
    spent = 0

    def improve(order: list[int], limit: int) -> int:
        found = estimate_peak_memory(graph, order).peak
        if found > limit:  # the search's live bytes disagree with the estimator: a bug, never a proof
            raise ReorderError(f"peak search on {graph.name!r}: an order under {limit} estimates {found}")
        return found

    while True:
        answer = search.order_within(peak - 1, max_states - spent)
        spent += answer.states
        if answer.order is None:
            break
        best, peak = answer.order, improve(answer.order, peak - 1)
    if answer.complete:
        return Minimum(best, peak, True, peak, spent)
    low = lower_bound(graph) if floor is None else floor  # no order is below ``low``
    high = peak - 1  # the highest limit still worth asking about
    left = bound_states
    while low <= high and left > 0:
        limit = (low + high) // 2
        answer = search.order_within(limit, max(1, left // 4))
        left -= answer.states
        spent += answer.states
        if answer.order is not None:
            best, peak = answer.order, improve(answer.order, limit)
            high = peak - 1
        elif answer.complete:
            low = limit + 1
        else:
            high = limit - 1
    return Minimum(best, peak, low > peak - 1, min(low, peak), spent)


def _bits(mask: int):
    """The set bits of ``mask``, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low
