"""Synthetic graphs for scaling runs: layered (``layers`` x ``width`` nodes), parallel chains, rename chains.

Node ``j`` of layer ``k`` reads node ``j`` of layer ``k - 1`` and, with
``fan_in=2``, also its neighbour ``(j + 1) % width``; sizes are drawn from a
seeded generator, so a graph is the same on every run. ``width=1`` is a chain
(narrow); ``width=4000`` with 10 layers is the 40k-node wide graph that makes
Inductor's LPMF quadratic.
"""

from __future__ import annotations

import random

from reorder import BufferSpec, InputSpec, NodeSpec, build_graph

__all__ = ["layered_graph", "plateau_graph", "rename_chain"]


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


def plateau_graph(nodes: int, chains: int, size: int = 4096):
    """``chains`` equal parallel chains of ``nodes // chains`` equal buffers, and a sink that reads every tail.

    Every chain holds one buffer at a time, so live bytes sit at the same
    value for most of any order: a plateau of peak steps, the case where a
    search that looks at every peak step does the most work. Listed chain
    by chain, each node's ancestors are a run of ids far from 0: the shape
    where sets of ancestors per node are largest (``benchmarks/scale.py``
    runs several widths).
    """
    length = max(1, nodes // chains)
    specs = []
    last = []
    for c in range(chains):
        previous = "x"
        for k in range(length):
            name = f"c{c}_{k}"
            specs.append(NodeSpec(name, [BufferSpec(f"b{name}", size)], reads=[previous]))
            previous = f"b{name}"
        last.append(previous)
    specs.append(NodeSpec("join", [BufferSpec("out", size)], reads=last))
    return build_graph(specs, [InputSpec("x", size)], ["out"], name=f"plateau_{nodes}x{chains}")


def rename_chain(length: int, size: int = 4096):
    """One buffer renamed ``length`` times in place (``x.add_(1)`` in a loop): an alias chain that long."""
    specs = [NodeSpec("n0", [BufferSpec("b0", size)], reads=["x"])]
    for k in range(1, length):
        specs.append(NodeSpec(f"n{k}", [BufferSpec(f"b{k}", 0, alias_of=f"b{k - 1}")], reads=[f"b{k - 1}"]))
    specs.append(NodeSpec("last", [BufferSpec("out", size)], reads=[f"b{length - 1}"]))
    return build_graph(specs, [InputSpec("x", size)], ["out"], name=f"renames_{length}")
