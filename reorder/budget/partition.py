"""Which forward values a training step saves, which its backward recomputes: :class:`Partition`.

A partition of a :class:`~reorder.budget.step_graph.StepGraph` is the set of
values the forward saves. Everything else follows from it
(:func:`partition_of`): the backward runs what the gradients need, reading
saved values and tangents; a forward node it runs is *recomputed*. The set is
valid when every recomputed node may be recomputed.

:func:`cheapest_partition` finds, for one *price* of recomputation (bytes per
unit of cost), the saved set that minimises ``saved bytes + price x
recomputed cost``, as a minimum cut (the network of Inductor's min-cut
partitioner, ``torch/_functorch/partitioners.py``, with every capacity
finite where recomputing is allowed): each node ``v`` is an edge
``in(v) -> out(v)`` whose capacity is the bytes of saving it; an edge
``source -> in(v)`` of capacity ``price x cost(v)`` is cut when the backward
recomputes ``v`` (infinite when it may not); ``in(v) -> sink`` for nodes only
the backward can run; ``out(v) -> in(u)`` for every reader ``u``. A cut
separates what the forward computes from what the backward needs; the edges
``in(v) -> out(v)`` it crosses are the saved values. Price 0 saves the least
bytes the rules allow, an infinite price recomputes nothing but what may not
be saved (a checkpoint's ``MUST_RECOMPUTE``, at its cost). Capacities are
integers (the price is a fraction), so a price gives the same cut on every
machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Sequence

from ..errors import ReorderError
from .mincut import Network
from .step_graph import StepGraph

__all__ = ["Partition", "cheapest_partition", "cheapest_partitions", "partition_of"]


@dataclass(frozen=True)
class Partition:
    """What the forward saves and what the backward runs, as node ids in node order.

    ``saved``: values the forward returns for the backward (primals among
    them cost nothing); ``forward``: the nodes the forward runs; ``backward``:
    the nodes the backward runs (tangents excluded); ``recomputed``: forward
    nodes among them; ``cost``: their summed cost; ``saved_bytes``: the
    storage the saved values hold, each storage once.
    """

    saved: tuple[int, ...]
    forward: tuple[int, ...]
    backward: tuple[int, ...]
    recomputed: tuple[int, ...]
    cost: int
    saved_bytes: int


def partition_of(graph: StepGraph, saved: Iterable[int]) -> Partition:
    """The partition in which the forward saves ``saved``; raises :class:`~reorder.errors.ReorderError` if invalid.

    The backward runs the ancestors of the gradients, stopping at saved
    values and tangents; a primal it reaches must be saved (it is the
    forward's input, not the backward's), and a forward node it reaches is
    recomputed, which its flags must allow. A size symbol it reaches is
    saved whatever ``saved`` says, at no cost (Inductor hands the backward
    every size it needs). The forward runs the ancestors of its outputs and
    of the saved values. Values in ``saved`` that the backward does not read
    are dropped, as Inductor drops them.
    """
    saved_set = set(saved)
    n = graph.num_nodes
    in_backward = [False] * n
    stack = [v for v in graph.backward_outputs if v not in saved_set]
    while stack:
        v = stack.pop()
        if in_backward[v] or graph.role[v] == "tangent":
            continue
        if graph.size_symbol[v] and graph.role[v] != "backward":
            saved_set.add(v)
            continue
        if graph.role[v] == "primal":
            raise ReorderError(f"partition of {graph.name!r}: the backward reads primal "
                               f"{graph.node_names[v]!r}, which is not saved")
        in_backward[v] = True
        stack.extend(a for a in graph.args[v] if a not in saved_set)
    read_by_backward = {a for v in range(n) if in_backward[v] for a in graph.args[v]}
    saved_set = {v for v in saved_set if v in read_by_backward or v in graph.backward_outputs}
    in_forward = [False] * n
    stack = [*graph.forward_outputs, *saved_set]
    while stack:
        v = stack.pop()
        if in_forward[v] or graph.role[v] == "primal":
            continue
        if graph.role[v] in ("backward", "tangent"):
            raise ReorderError(f"partition of {graph.name!r}: the forward needs {graph.node_names[v]!r}, "
                               f"which reads a tangent")
        in_forward[v] = True
        stack.extend(graph.args[v])
    recomputed = [v for v in range(n) if in_backward[v] and graph.role[v] == "forward"]
    for v in recomputed:
        if not graph.recomputable[v]:
            raise ReorderError(f"partition of {graph.name!r}: the backward would recompute "
                               f"{graph.node_names[v]!r}, which may not be recomputed")
    for v in saved_set:
        if not graph.saveable[v] and graph.role[v] != "primal":
            raise ReorderError(f"partition of {graph.name!r}: {graph.node_names[v]!r} may not be saved")
    storages = {graph.storage[v] for v in saved_set}
    return Partition(
        saved=tuple(sorted(saved_set)),
        forward=tuple(v for v in range(n) if in_forward[v]),
        backward=tuple(v for v in range(n) if in_backward[v]),
        recomputed=tuple(recomputed),
        cost=sum(graph.cost[v] for v in recomputed),
        saved_bytes=sum(graph.saved_bytes[s] for s in storages),
    )


def cheapest_partition(graph: StepGraph, price: Fraction | None, kept: Iterable[int] = ()) -> Partition:
    """The partition minimising ``saved bytes + price x recomputed cost`` (``None``: an infinite price) among those
    that save every node of ``kept``.

    See the module docstring for the network; a kept node runs in the forward
    and is saved (infinite edges from the source to ``in(v)`` and from
    ``out(v)`` to the sink). Ties go to the smallest set of nodes on the
    forward's side of the cut, so the answer is unique.
    """
    return _partition_of_side(graph, _PricedNetwork(graph, tuple(kept)).forward_side(price))


def cheapest_partitions(graph: StepGraph, prices: Sequence[Fraction | None], kept: Iterable[int] = ()
                        ) -> list[Partition]:
    """:func:`cheapest_partition` at each of ``prices`` (in their order), with fewer minimum cuts.

    Only the edges from the source grow with the price (``price x cost``; the
    others are bytes, or infinite), so the smallest forward side of a minimum
    cut grows with it (Gallo, Grigoriadis and Tarjan, 1989: the minimum cuts
    of such a parametric network are nested). Where two prices give the same
    forward side, every price between them gives it too, and its cut is not
    computed: the finite prices are cut at the two ends of their range and then
    halfway between any two neighbours whose sides differ. On the frontier's
    prices, most neighbours agree. A price between two neighbours is cut on a
    smaller network (the same paper's contraction): the lower price's side
    stays on the forward's side and what lies outside the higher price's side
    stays on the backward's, so those vertices become the source and the sink,
    and only the ones between the two sides are decided again. The infinite
    price is cut on its own.
    """
    network = _PricedNetwork(graph, tuple(kept))
    finite = sorted({p for p in prices if p is not None}, reverse=True)
    sides: dict[Fraction | None, tuple[bool, ...]] = {}
    if finite:
        for price in (finite[0], finite[-1]):
            sides[price] = network.forward_side(price)
        spans = [(0, len(finite) - 1)]
        while spans:
            high, low = spans.pop()
            if low - high < 2:
                continue
            if sides[finite[high]] == sides[finite[low]]:
                for k in range(high + 1, low):
                    sides[finite[k]] = sides[finite[high]]
                continue
            middle = (high + low) // 2
            sides[finite[middle]] = network.forward_side(finite[middle], sides[finite[low]], sides[finite[high]])
            spans += [(high, middle), (middle, low)]
    if None in prices:
        sides[None] = network.forward_side(None)
    made: dict[tuple[bool, ...], Partition] = {}
    for side in sides.values():
        if side not in made:
            made[side] = _partition_of_side(graph, side)
    return [made[sides[p]] for p in prices]


class _PricedNetwork:
    """:func:`cheapest_partition`'s network for ``graph`` with ``kept`` saved, built once and cut at any price:
    only the capacities change with the price. Vertex ``2v`` is ``in(v)``, ``2v + 1`` is ``out(v)``, then the
    source and the sink."""

    def __init__(self, graph: StepGraph, kept: tuple[int, ...]):
        n = graph.num_nodes
        self.graph = graph
        self.source, self.sink = source, sink = 2 * n, 2 * n + 1
        arcs: list[tuple[int, int]] = []  # of infinite capacity unless listed below
        self.recomputing: list[tuple[int, int]] = []  # (arc, v): source -> in(v), cut when the backward recomputes v
        self.saving: list[tuple[int, int]] = []  # (arc, v): in(v) -> out(v), cut when the forward saves v

        def arc(tail: int, head: int, priced: list | None = None, v: int | None = None) -> None:
            if priced is not None:
                priced.append((len(arcs), v))
            arcs.append((tail, head))

        for v in kept:
            arc(source, 2 * v)
            arc(2 * v + 1, sink)
        for v in range(n):
            role = graph.role[v]
            node_in, node_out = 2 * v, 2 * v + 1
            if role in ("backward", "tangent"):
                arc(node_in, sink)
            else:
                if role == "primal" or not graph.recomputable[v]:
                    arc(source, node_in)
                elif role == "forward":
                    arc(source, node_in, self.recomputing, v)
                if graph.saveable[v] or role == "primal":
                    arc(node_in, node_out, self.saving, v)
                else:
                    arc(node_in, node_out)
                if graph.available_to_backward[v]:
                    arc(node_out, sink)
            for u in graph.users[v]:
                arc(node_out, 2 * u)
        self.network = Network(2 * n + 2, arcs)
        self.num_arcs = len(arcs)
        self.total_saved_bytes, self.total_cost = sum(graph.saved_bytes), sum(graph.cost)

    def forward_side(self, price: Fraction | None, inside: tuple[bool, ...] | None = None,
                     within: tuple[bool, ...] | None = None) -> tuple[bool, ...]:
        """The smallest source side of the minimum cut at ``price``, one flag per vertex; given the sides of a lower
        and a higher price (``inside`` and ``within``, which it lies between), cut on the network contracted to the
        vertices of ``within`` outside ``inside`` (see :func:`cheapest_partitions`)."""
        graph = self.graph
        if price is not None and price < 0:
            raise ReorderError(f"price of recomputation {price}: expected >= 0")
        numerator, denominator = (1, 0) if price is None else (price.numerator, price.denominator)
        finite = self.total_saved_bytes * denominator + self.total_cost * numerator
        infinite = finite + 1
        capacities = [infinite] * self.num_arcs
        for k, v in self.recomputing:
            if price is None:  # recompute only what may not be saved (a checkpoint's)
                capacities[k] = infinite if graph.saveable[v] else max(graph.cost[v], 1)
            else:
                capacities[k] = graph.cost[v] * numerator
        for k, v in self.saving:
            capacities[k] = graph.saved_bytes[v] * denominator
        if inside is None or within is None:
            value, forward_side = self.network.min_cut(capacities, self.source, self.sink)
        else:
            value, forward_side = self._contracted_cut(capacities, inside, within)
        if value >= infinite:
            raise ReorderError(f"partition of {graph.name!r}: no valid partition (a value the backward needs can be "
                               f"neither saved nor recomputed)")
        return tuple(forward_side)

    def _contracted_cut(self, capacities: list[int], inside: tuple[bool, ...], within: tuple[bool, ...]
                        ) -> tuple[int, list[bool]]:
        """The minimum cut whose source side holds ``inside`` and lies in ``within``: the vertices of ``inside``
        merged into the source, those outside ``within`` into the sink, and the arcs that cannot cross such a cut
        (inside one merged end, out of the sink or into the source, from the source straight to the sink) left
        out. Its value leaves out those from the source straight to the sink, and its side is the original's."""
        free = [u for u in range(len(inside)) if within[u] and not inside[u]]
        source, sink = len(free), len(free) + 1
        renamed = [source if inside[u] else sink for u in range(len(inside))]
        for k, u in enumerate(free):
            renamed[u] = k
        head = self.network.head
        arcs, kept = [], []
        for k, capacity in enumerate(capacities):
            tail, to = renamed[head[2 * k + 1]], renamed[head[2 * k]]
            if capacity and tail != to and tail != sink and to != source and (tail, to) != (source, sink):
                arcs.append((tail, to))
                kept.append(capacity)
        value, side = Network(len(free) + 2, arcs).min_cut(kept, source, sink)
        return value, [inside[u] or (within[u] and side[renamed[u]]) for u in range(len(inside))]


def _partition_of_side(graph: StepGraph, forward_side: tuple[bool, ...]) -> Partition:
    """The partition that saves the nodes whose edge ``in(v) -> out(v)`` the cut crosses."""
    return partition_of(graph, [v for v in range(graph.num_nodes)
                                if forward_side[2 * v] and not forward_side[2 * v + 1]])
