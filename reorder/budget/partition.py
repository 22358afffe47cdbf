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
from typing import Iterable

from ..errors import ReorderError
from .mincut import min_cut_source_side
from .step_graph import StepGraph

__all__ = ["Partition", "cheapest_partition", "partition_of"]


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
    if price is not None and price < 0:
        raise ReorderError(f"price of recomputation {price}: expected >= 0")
    n = graph.num_nodes
    source, sink = 2 * n, 2 * n + 1
    numerator, denominator = (1, 0) if price is None else (price.numerator, price.denominator)
    finite = sum(graph.saved_bytes) * denominator + sum(graph.cost) * numerator
    infinite = finite + 1
    edges: list[tuple[int, int, int]] = []
    for v in kept:
        edges += [(source, 2 * v, infinite), (2 * v + 1, sink, infinite)]
    for v in range(n):
        role = graph.role[v]
        node_in, node_out = 2 * v, 2 * v + 1
        if role in ("backward", "tangent"):
            edges.append((node_in, sink, infinite))
        else:
            if role == "primal" or not graph.recomputable[v]:
                edges.append((source, node_in, infinite))
            elif role == "forward" and price is None:  # recompute only what may not be saved (a checkpoint's)
                edges.append((source, node_in, infinite if graph.saveable[v] else max(graph.cost[v], 1)))
            elif role == "forward":
                edges.append((source, node_in, graph.cost[v] * numerator))
            saving = graph.saved_bytes[v] * denominator if graph.saveable[v] or role == "primal" else infinite
            edges.append((node_in, node_out, saving))
            if graph.available_to_backward[v]:
                edges.append((node_out, sink, infinite))
        for u in graph.users[v]:
            edges.append((node_out, 2 * u, infinite))
    value, forward_side = min_cut_source_side(2 * n + 2, edges, source, sink)
    if value >= infinite:
        raise ReorderError(f"partition of {graph.name!r}: no valid partition (a value the backward needs can be "
                           f"neither saved nor recomputed)")
    saved = [v for v in range(n) if forward_side[2 * v] and not forward_side[2 * v + 1]]
    return partition_of(graph, saved)
