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

Both limits are counts, of the sets seen and of the bytes they hold (every
set counted as the Python int it is, see :class:`PeakSearch`), so the answer
never depends on the machine. The facts the search reads about each node (what
it allocates, what it frees once which other readers have run) come from
:class:`~reorder.schedulers.node_sets.NodeSets`, which refine's windows share. Peaks are in Inductor 2.13's live-bytes model
(:mod:`reorder.timeline`; both of its estimators give the same peak).
This is the dynamic program of Serenity (Ahn et al., MLSys 2020) asked as a
decision problem, with the dominance rules above in place of its graph
rewriting.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple, Sequence

from ..errors import ReorderError
from ..graph import Graph
from ..timeline import estimate_peak_memory, lower_bound
from .node_sets import STATE_BYTES, NodeSets, bits, int_bytes

__all__ = ["LimitAnswer", "MinimumAnswer", "PeakSearch", "SetState", "minimum_peak"]

#: The bytes one remembered set holds besides its four node sets: its slot among the sets seen, and its
#: entry on the stack (the :class:`SetState` record, its live bytes, the tuple and list around them).
STATE_OVERHEAD = 288

#: The bytes a set a move reached (before its free moves) holds in the search's cache besides the set itself:
#: its slot in a Python set.
TRIED_OVERHEAD = 96


@dataclass(frozen=True)
class LimitAnswer:
    """The answer to one question "is there an order whose peak is at most ``limit``?".

    ``order`` is such an order, or None. ``stopped_by``: ``""`` when every set
    was seen (:attr:`complete`: then None means there is none, a proof), else the
    budget that stopped the search (``"max_states"`` or ``"max_bytes"``).
    """

    order: list[int] | None
    states: int
    stopped_by: str = ""

    @property
    def complete(self) -> bool:
        return not self.stopped_by


@dataclass(frozen=True)
class MinimumAnswer:
    """The answer to "what is the minimum peak?": the lowest peak found (``peak``, of ``order``);
    ``proven``: it is the minimum over every order; ``bound``: no order's peak is below it (``peak``
    once proven); the sets seen over all the questions asked; ``stopped_by``: unless proven, the
    budget that stopped the search for lower peaks (``"max_states"`` or ``"max_bytes"``)."""

    order: list[int]
    peak: int
    proven: bool
    bound: int
    states: int
    stopped_by: str = ""


class SetState(NamedTuple):
    """Where the search stands: the set of nodes that ran (``done``), the bytes live after them, the
    nodes whose predecessors all ran (``ready``) and the non-producers that may run next with the
    producers they pull in (``wanted``). Sets are bitmasks over node ids."""

    done: int
    live: int
    ready: int
    wanted: int


#: ``SetState`` from a tuple of its fields in one C call: the search makes one per node it runs, and
#: the class's own constructor (or ``_make``) is a Python function that costs it about a tenth of its time.
_new_state = partial(tuple.__new__, SetState)


class PeakSearch:
    """The search's arrays for one graph, built once: the node sets' bitmasks and frees
    (:class:`~reorder.schedulers.node_sets.NodeSets`), producers and the non-producers that pull them
    in (see the module docstring).

    Memory is counted, never measured: every set over the graph's nodes counts as a Python int of
    that many bits (:func:`~reorder.schedulers.node_sets.int_bytes`), so the arrays take at most
    :meth:`array_bytes` and each remembered set at most :meth:`state_bytes`; a question stops once
    its sets would hold more than ``max_bytes`` with the arrays (the same count on every machine).
    """

    def __init__(self, graph: Graph):
        n = graph.num_nodes
        self.graph = graph
        self.sets = sets = NodeSets(graph)
        self.alloc, self.pred_mask, self.succs, self.frees = sets.alloc, sets.pred_mask, sets.succs, sets.frees
        self.freed = sets.freed
        self.live_at_start = sum(graph.size_alloc[b] for b in range(graph.num_buffers) if graph.is_input[b])
        # Nodes that could ever free what they allocate: the only candidates for a free move.
        self.may_free = sum(1 << v for v in range(n) if sum(size for size, _ in self.frees[v]) >= self.alloc[v])
        # What a node frees changes only when another reader of the same buffers runs.
        self.co_readers = [(1 << v) | _union(need for _, need in self.frees[v]) for v in range(n)]
        descendants = graph.descendants
        self.producer = [
            bool(graph.succs[v]) and all(size == 0 or need & descendants[v] for size, need in self.frees[v])
            for v in range(n)
        ]
        self.sinks = sum(1 << v for v in range(n) if not graph.succs[v])
        self.non_producers = sum(1 << v for v in range(n) if not self.producer[v])
        self._pull_in_producers()

    @staticmethod
    def array_bytes(graph: Graph) -> int:
        """At most the bytes of the arrays built for ``graph``, known before building them: seven node
        sets per node (predecessors, co-readers, producers pulled in, non-producers needed, the graph's
        ancestors and descendants, and the node's own bit) and one per buffer read (its other readers)."""
        return int_bytes(graph.num_nodes) * (7 * graph.num_nodes + sum(len(r) for r in graph.reads))

    @staticmethod
    def state_bytes(graph: Graph) -> int:
        """At most the bytes one remembered set holds: itself among the sets seen, and its entry
        waiting on the stack (the nodes ready, wanted and known short: three more sets), with
        :data:`STATE_OVERHEAD`."""
        return 4 * int_bytes(graph.num_nodes) + STATE_OVERHEAD

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
            for x in (z, *bits(self.pulls[z])):
                for p in graph.preds[x]:
                    if not producer[p]:
                        self.needs[z] |= 1 << p
            for p in bits(self.needs[z]):
                self.waiting[p].append(z)
        self.wanted_at_start = sum(1 << z for z in range(n) if not producer[z] and not self.needs[z])

    def _run(self, state: SetState, v: int) -> SetState:
        """Run ``v`` after ``state``'s set: the new set, live bytes, ready nodes and runnable non-producers."""
        done, live, ready, wanted = state
        bit = 1 << v
        after = done | bit
        live += self.alloc[v]
        for size, need in self.frees[v]:  # NodeSets.freed, inlined: the search calls this for every node it runs
            if not need & ~after:
                live -= size
        if not done:
            live -= self.sets.unread_inputs
        ready &= ~bit
        wanted &= ~bit
        pred_mask, needs = self.pred_mask, self.needs
        for w in self.succs[v]:
            if not pred_mask[w] & ~after:
                ready |= 1 << w
        for z in self.waiting[v]:
            if not needs[z] & ~after and not after >> z & 1:
                wanted |= 1 << z
        return _new_state((after, live, ready, wanted))

    def _free_moves(self, state: SetState, limit: int, ran: list[int], short: int) -> tuple[SetState, int]:
        """Run every ready node that fits under ``limit`` and leaves no more bytes live, until none is left.

        ``short``: nodes known to free less than they allocate after ``state``'s set (what a node
        frees only grows when another reader of its buffers runs); returned updated.
        """
        if not state.done:
            return state, short
        alloc, freed = self.alloc, self.freed
        moved = True
        while moved:
            moved = False
            done, live, ready, _ = state
            for v in bits(ready & self.may_free & ~short):
                if live + alloc[v] > limit:
                    continue
                if freed(v, done | (1 << v)) >= alloc[v]:
                    state = self._run(state, v)
                    short &= ~self.co_readers[v]
                    ran.append(v)
                    moved = True
                    break
                short |= 1 << v
        return state, short

    def _moves(self, done: int, ready: int, wanted: int) -> list[list[int]]:
        """The branches at ``done`` (see the module docstring): every ready node alone at the first
        step; later, each runnable non-producer after the producers it pulls in (in index order, a
        topological one), except that a sink which would free nothing waits, unless it completes a
        buffer's readers together with the other sinks that read it, or only sinks are left."""
        if not done:
            return [[v] for v in bits(ready)]
        units = {z: [*bits(self.pulls[z] & ~done), z] for z in bits(wanted)}
        if not self.non_producers & ~done & ~self.sinks:
            return list(units.values())
        moves, waiting = [], []
        for z, unit in units.items():
            if self.sinks >> z & 1 and not self.freed(z, done | self.pulls[z] | (1 << z)):
                waiting.append(z)
            else:
                moves.append(unit)
        blocks: set[int] = set()
        for z in waiting:
            for size, need in self.frees[z]:
                readers = (need & ~done) | (1 << z)
                if size and readers not in blocks and not readers & ~(wanted & self.sinks):
                    blocks.add(readers)
                    members = sorted(bits(readers), key=lambda r: (r not in waiting, r))
                    moves.append([v for r in members for v in units[r]])
        return moves

    def order_within(self, limit: int, max_states: int, max_bytes: int | None = None) -> LimitAnswer:
        """An order whose peak is at most ``limit``, or the proof that none exists, within ``max_states``
        sets and (unless None) ``max_bytes`` of arrays and sets held."""
        cap, stopped_by = max_states, "max_states"
        if max_bytes is not None:
            fit = (max_bytes - self.array_bytes(self.graph)) // self.state_bytes(self.graph)
            if fit < cap:
                cap, stopped_by = max(fit, 0), "max_bytes"
        full = (1 << self.graph.num_nodes) - 1
        alloc = self.alloc
        seen: set[int] = set()
        # The sets moves reached before their free moves ran. Free moves from a set end in the one set that
        # no free move leaves (a free move only makes others possible), which was then seen, so a move that
        # reaches such a set again would add nothing and is skipped before it runs. A cache held to the bytes
        # the sets seen leave of their share (emptied when it would take more): it never changes an answer.
        tried: set[int] = set()
        state_bytes = self.state_bytes(self.graph)
        tried_bytes = int_bytes(self.graph.num_nodes) + TRIED_OVERHEAD
        room = cap * state_bytes
        path: list[int] = []
        stack: list[tuple[SetState, int, list[int], int]] = [
            (SetState(0, self.live_at_start, self.sets.ready_at_start, self.wanted_at_start), 0, [], 0)
        ]
        while stack:
            state, depth, ran, short = stack.pop()
            del path[depth:]
            path.extend(ran)
            if state.done == full:
                return LimitAnswer(list(path), len(seen))
            children = []
            for move in self._moves(state.done, state.ready, state.wanted):
                reached = state.done
                for v in move:
                    reached |= 1 << v
                if reached in tried:
                    continue
                nxt, short_here = state, short
                for v in move:
                    if nxt.live + alloc[v] > limit:
                        break
                    nxt = self._run(nxt, v)
                    short_here &= ~self.co_readers[v]
                else:
                    left = room - len(seen) * state_bytes
                    if (len(tried) + 1) * tried_bytes > left:
                        tried.clear()
                    if tried_bytes <= left:
                        tried.add(reached)
                    ran_here = list(move)
                    nxt, short_here = self._free_moves(nxt, limit, ran_here, short_here)
                    if nxt.done in seen:
                        continue
                    seen.add(nxt.done)
                    if len(seen) > cap:
                        return LimitAnswer(None, len(seen), stopped_by)
                    children.append((nxt.live - state.live, nxt, ran_here, short_here))
            # Depth first, the child that leaves the fewest bytes live first.
            children.sort(key=lambda c: -c[0])
            stack.extend((nxt, len(path), ran_here, short_here) for _, nxt, ran_here, short_here in children)
        return LimitAnswer(None, len(seen))


def minimum_peak(graph: Graph, start: Sequence[int], max_states: int, bound_states: int = 0,
                 floor: int | None = None, max_bytes: int | None = STATE_BYTES) -> MinimumAnswer:
    """The minimum peak over every order, starting from ``start``: ask for an order under the best
    peak so far until the answer is a proof that none exists, or the ``max_states`` sets are spent.
    Each question holds at most ``max_bytes`` of arrays and sets (None: no limit); when the arrays
    alone would take more, nothing is built and the answer is ``start``, stopped by ``"max_bytes"``.

    If they are spent first and ``bound_states`` > 0, a bisection between ``floor`` (a peak no
    order beats; default :func:`~reorder.timeline.lower_bound`) and the best peak certifies a
    bound: each limit it proves unreachable raises the bound, each order it finds lowers the peak,
    and each question that runs out of its share of ``bound_states`` narrows the bisection below
    that limit.
    """
    best = list(start)
    peak = estimate_peak_memory(graph, best).peak
    if max_bytes is not None and PeakSearch.array_bytes(graph) > max_bytes:
        return MinimumAnswer(best, peak, False, lower_bound(graph) if floor is None else floor, 0, "max_bytes")
    search = PeakSearch(graph)
    spent = 0

    def improve(order: list[int], limit: int) -> int:
        found = estimate_peak_memory(graph, order).peak
        if found > limit:  # the search's live bytes disagree with the estimator: a bug, never a proof
            raise ReorderError(f"peak search on {graph.name!r}: an order under {limit} estimates {found}")
        return found

    while True:
        answer = search.order_within(peak - 1, max_states - spent, max_bytes)
        spent += answer.states
        if answer.order is None:
            break
        best, peak = answer.order, improve(answer.order, peak - 1)
    if answer.complete:
        return MinimumAnswer(best, peak, True, peak, spent)
    stopped_by = answer.stopped_by
    low = lower_bound(graph) if floor is None else floor  # no order is below ``low``
    high = peak - 1  # the highest limit still worth asking about
    left = bound_states
    while low <= high and left > 0:
        limit = (low + high) // 2
        answer = search.order_within(limit, max(1, left // 4), max_bytes)
        left -= answer.states
        spent += answer.states
        if answer.order is not None:
            best, peak = answer.order, improve(answer.order, limit)
            high = peak - 1
        elif answer.complete:
            low = limit + 1
        else:
            high = limit - 1
    proven = low > peak - 1
    return MinimumAnswer(best, peak, proven, min(low, peak), spent, "" if proven else stopped_by)



def _union(masks) -> int:
    """The union of bitmasks."""
    union = 0
    for mask in masks:
        union |= mask
    return union
