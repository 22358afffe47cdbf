"""Synthetic layered graphs for scaling runs: ``layers`` x ``width`` nodes.

Node ``j`` of layer ``k`` reads node ``j`` of layer ``k - 1`` and, with
``fan_in=2``, also its neighbour ``(j + 1) % width``; sizes are drawn from a
seeded generator, so a graph is the same on every run. ``width=1`` is a chain
(narrow); ``width=4000`` with 10 layers is the 40k-node wide graph that makes
Inductor's LPMF quadratic.
"""

from __future__ import annotations

import random

from reorder import BufferSpec, InputSpec, NodeSpec, build_graph

__all__ = ["layered_graph"]


def layered_graph(nodes: int, width: int, fan_in: int = 2, seed: int = 0):
    rng = random.Random(seed)
    layers = max(1, nodes // width)
    specs = []
    previous = ["x"] * width
    for k in range(layers):
        current = []
        for j in range(width):
            reads = [previous[j]]
            if fan_in > 1 and width > 1:
                reads.append(previous[(j + 1) % width])
            name = f"l{k}_{j}"
            specs.append(NodeSpec(name, [BufferSpec(f"b{name}", 64 * rng.randint(1, 256))], reads=reads))
            current.append(f"b{name}")
        previous = current
    specs.append(NodeSpec("reduce", [BufferSpec("out", 64)], reads=previous))
    return build_graph(specs, [InputSpec("x", 4096)], ["out"], name=f"layered_{nodes}x{width}")
