"""Where to cut a training step's forward into segments that the backward recomputes one at a time.

A partition that saves few bytes can still peak high: when the backward
recomputes the whole forward from its inputs, it holds everything it
recomputed until the gradients reach back (the partition saves little, the
backward holds it all again). Checkpointing (Chen et al., 2016; Checkmate,
MLSys 2020) saves the values that cross a few cheap boundaries of the
forward, so the backward recomputes one segment at a time from the values at
its start. :func:`segment_boundaries` picks those values for ``k`` segments:

* the forward's nodes in order, and at each position the bytes *crossing* it
  (values made before it that a forward node at or after it reads; what
  costs nothing, a primal, is not counted);
* ``k - 1`` cut positions that split the bytes the backward reads into ``k``
  nearly equal shares, each moved within half a segment to where the least
  bytes cross (the nearest such position, the later one on a tie);
* the values crossing each cut: what the backward saves to start a segment
  (an element of a multi-output node is left to the minimum cut: Inductor
  recomputes it with its node rather than keep it saved).

The frontier (:mod:`~reorder.budget.frontier`) keeps these values saved
and lets the minimum cut decide the rest, for every segment count and price.
Linear in the graph per segment count.
"""

from __future__ import annotations

from ..sweep import live_bytes
from .step_graph import StepGraph

__all__ = ["SEGMENTS", "segment_boundaries"]

#: Segment counts tried (each one gives a set of values to keep saved; counts above the forward's length are skipped).
SEGMENTS: tuple[int, ...] = (2, 3, 4, 6, 8, 12, 16, 24, 32)


def segment_boundaries(graph: StepGraph, segments: int) -> tuple[int, ...]:
    """The values to save so that the forward falls into ``segments`` pieces (see the module docstring)."""
    forward = [v for v in range(graph.num_nodes) if graph.role[v] == "forward"]
    if segments < 2 or len(forward) < 2 * segments:
        return ()
    position = {v: k for k, v in enumerate(forward)}
    last_read = {}
    for v in forward:
        for a in graph.args[v]:
            if a in position:
                last_read[a] = position[v]
    counted = [v for v in forward if v in last_read and graph.storage[v] == v and not graph.costs_nothing[v]
               and graph.bytes[v]]
    crossing = live_bytes(len(forward), ((step, sign * graph.bytes[v]) for v in counted
                                         for step, sign in ((position[v] + 1, 1), (last_read[v] + 1, -1))))
    read_later = [graph.bytes[v] if any(graph.role[u] == "backward" for u in graph.users[v]) else 0 for v in forward]
    total = sum(read_later)
    if not total:
        return ()
    cuts, running, share = [], 0, 1
    window = max(1, len(forward) // (2 * segments))
    for t, weight in enumerate(read_later):
        running += weight
        if running * segments >= share * total and share < segments:  # the share is reached: cut after node t
            low, high = max(1, t + 1 - window), min(len(forward) - 1, t + 1 + window)
            cuts.append(min(range(low, high + 1), key=lambda x: (crossing[x], abs(x - t - 1), -x)))
            share += 1
    boundary = []
    for cut in sorted(set(cuts)):
        boundary += [v for v in counted if position[v] < cut <= last_read[v] and graph.saveable[v]
                     and graph.element_of[v] is None]
    return tuple(sorted(set(boundary)))
