"""Shared test helpers: fixture paths, a random-graph strategy, and brute-force references.

The references work from the *specs* (names and declared reads), not from the
arrays :func:`reorder.build_graph` derives, so they check the derivation too.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import strategies as st

from reorder import BufferSpec, InputSpec, NodeSpec, build_graph
from reorder.graph import Kahn
from reorder.inductor.releases import running_release

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
GRAPHS = ROOT / "reorder" / "data" / "graphs"
RELEASE = running_release()
FIGURES = json.loads((GRAPHS / f"torch-{RELEASE}-figures.json").read_text())  # the running release's figures
GRAPH_NAMES = sorted(FIGURES)


@st.composite
def graph_specs(draw, max_nodes: int = 10):
    """(nodes, inputs, outputs) with every feature: freeable and kept inputs,
    renames (also chained), views, multi-output parents and children, graph
    outputs, unread buffers and ordering-only edges."""
    n = draw(st.integers(1, max_nodes))
    sizes = st.integers(0, 64).map(lambda x: x * 16)
    inputs = [InputSpec(f"in{i}", draw(sizes), freeable=draw(st.booleans())) for i in range(draw(st.integers(0, 3)))]
    available = [i.name for i in inputs]  # buffers a later node may read
    parents: list[str] = []
    nodes = []
    for v in range(n):
        reads = draw(st.lists(st.sampled_from(available), max_size=3, unique=True)) if available else []
        kind = draw(st.sampled_from(["plain", "plain", "plain", "alias", "multi", "child"]))
        outputs: list[BufferSpec] = []
        computed_reads = [r for r in reads if not r.startswith("in")]
        if kind == "alias" and computed_reads:
            base = draw(st.sampled_from(computed_reads))
            outputs.append(BufferSpec(f"b{v}", 0, alias_of=base, alias_kind=draw(st.sampled_from(["mutation", "view"]))))
        elif kind == "multi":
            parents.append(f"b{v}")
            outputs.append(BufferSpec(f"b{v}"))
        elif kind == "child" and parents:
            parent = draw(st.sampled_from(parents))
            if parent not in reads:
                reads.append(parent)
            outputs.append(BufferSpec(f"b{v}", draw(sizes), parent=parent))
        else:
            outputs.append(BufferSpec(f"b{v}", draw(sizes)))
            if draw(st.integers(0, 4)) == 0:
                outputs.append(BufferSpec(f"b{v}x", draw(sizes)))
        after = [f"n{u}" for u in draw(st.lists(st.integers(0, v - 1), max_size=2, unique=True))] if v else []
        workspace, unique = (draw(sizes), draw(sizes)) if draw(st.integers(0, 5)) == 0 else (0, 0)
        nodes.append(NodeSpec(f"n{v}", outputs=outputs, reads=reads, after=after, workspace=workspace,
                              unique_workspace=unique))
        available += [o.name for o in outputs]
    # A parent nobody splits would be a plain buffer of size 0: give each one a child.
    for p in parents:
        if not any(o.parent == p for nd in nodes for o in nd.outputs):
            nodes.append(NodeSpec(f"split_{p}", outputs=[BufferSpec(f"{p}_0", 16, parent=p)], reads=[p]))
            available.append(f"{p}_0")
    computed = [o.name for nd in nodes for o in nd.outputs]
    outputs = draw(st.lists(st.sampled_from(computed + [i.name for i in inputs]), max_size=3, unique=True))
    return nodes, inputs, outputs


def build(spec, name="random"):
    nodes, inputs, outputs = spec
    return build_graph(nodes, inputs, outputs, name=name)


def reference_peak(spec, order_names):
    """Peak live bytes of running nodes in ``order_names``, simulated from the specs.

    Inductor 2.13's model, spelled out: a freeable input is live from the
    start; a node allocates its outputs, then frees every buffer whose last
    reader it is and its own outputs nobody reads; aliases cost nothing and
    keep their chain's root alive; multi-output parents allocate the
    children's bytes, children free them; graph outputs are never freed.
    """
    nodes, inputs, outputs = spec
    outputs = set(outputs)
    buf = {}
    for i in inputs:
        buf[i.name] = dict(alloc=i.size if i.freeable else 0, free=i.size if i.freeable else 0, alias=None)
    children: dict[str, list] = {}
    for nd in nodes:
        for o in nd.outputs:
            if o.parent:
                children.setdefault(o.parent, []).append(o)
    for nd in nodes:
        for o in nd.outputs:
            if o.alias_of:
                buf[o.name] = dict(alloc=0, free=0, alias=o.alias_of)
            elif o.name in children:
                buf[o.name] = dict(alloc=sum(c.size for c in children[o.name]), free=0, alias=None)
            elif o.parent:
                buf[o.name] = dict(alloc=0, free=o.size, alias=None)
            else:
                buf[o.name] = dict(alloc=o.size, free=o.size, alias=None)

    def root(b):
        while buf[b]["alias"]:
            b = buf[b]["alias"]
        return b

    by_name = {nd.name: nd for nd in nodes}
    keeps: dict[str, set] = {b: set() for b in buf}  # buffer -> nodes that keep it alive
    for nd in nodes:
        for r in nd.reads:
            keeps[r].add(nd.name)
            keeps[root(r)].add(nd.name)
    live = sum(i["alloc"] for n, i in buf.items() if any(n == x.name for x in inputs))
    peak = max(0, live)
    done: set = set()
    for name in order_names:
        nd = by_name[name]
        live += sum(buf[o.name]["alloc"] for o in nd.outputs)
        peak = max(peak, live)
        done.add(name)
        for b, readers in keeps.items():
            if b in outputs:
                continue
            if name in readers and readers <= done:
                live -= buf[b]["free"]
        for o in nd.outputs:
            if not keeps[o.name] and o.name not in outputs:
                live -= buf[o.name]["free"]
        if len(done) == 1:  # an input nobody reads is freed after the first step
            live -= sum(buf[i.name]["free"] for i in inputs if not keeps[i.name] and i.name not in outputs)
    return max(peak, live)


def all_topological_orders(graph, limit=50_000):
    """Every topological order of a small graph (node ids), at most ``limit`` of them."""
    n = graph.num_nodes
    indegree = [len(p) for p in graph.preds]
    order: list[int] = []
    out: list[list[int]] = []

    def extend():
        if len(out) >= limit:
            return
        if len(order) == n:
            out.append(list(order))
            return
        for v in range(n):
            if indegree[v] == 0 and v not in order:
                order.append(v)
                for s in graph.succs[v]:
                    indegree[s] -= 1
                extend()
                for s in graph.succs[v]:
                    indegree[s] += 1
                order.pop()

    extend()
    return out


def random_order(graph, priorities):
    """A topological order choosing the ready node with the highest priority."""
    kahn = Kahn(graph)
    ready = kahn.initial()
    order = []
    while ready:
        ready.sort(key=lambda v: priorities[v % len(priorities)] if priorities else v)
        v = ready.pop()
        order.append(v)
        ready.extend(kahn.done(v))
    return order


__all__ = [
    "FIGURES", "GRAPHS", "GRAPH_NAMES", "RELEASE", "ROOT", "TESTS", "all_topological_orders", "build", "graph_specs",
    "in_fresh_process", "random_order", "reference_peak",
]


def tiny_model(name: str):
    """A small model of the zoo's blocks and its input: "residual", "inception" or a transformer block."""
    import torch
    from torch import nn

    from benchmarks.zoo import BasicBlock, InceptionBlock, TransformerBlock

    torch.manual_seed(0)
    if name == "residual":
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), BasicBlock(8, 8), BasicBlock(8, 16, 2)), torch.randn(2, 3, 8, 8)
    if name == "inception":
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), InceptionBlock(16, 8)), torch.randn(2, 3, 8, 8)
    return TransformerBlock(dim=32, heads=2), torch.randn(2, 8, 32)


def assert_close_to_eager(actual, expected, what: str = "tensor", rtol: float = 1e-3) -> None:
    """A compiled result against eager mode, with the tolerance scaled to the reference's magnitude.

    A compiled kernel may sum floats in another order than eager mode (the
    vector width decides it), so an element near zero can differ by a rounding
    error of the tensor's largest terms. As PyTorch's own compile tests do, the
    absolute tolerance is ``rtol`` times the largest magnitude of ``expected``,
    never a fixed number. Compare against stock Inductor's compiled result where
    the kernels are the same: that comparison is bitwise.
    """
    import torch

    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=rtol * max(scale, 1e-12),
                               msg=lambda m: f"{what}: {m}")


@contextlib.contextmanager
def compiled_afresh():
    """Within the block every ``torch.compile`` runs every stage again, so that every record is in the session of
    its compile: Inductor's FX graph cache, AOT autograd's cache and dynamo's profile-guided dynamic shapes are
    off. The C++ kernels' binaries stay cached by their source code, as they are for users: a kernel another
    compile already built (stock's, when the test compiles ours beside it) is loaded instead of built again: a
    transformer block's budgeted step compiled after stock's took 7.3 s instead of 13.5 s at 1.0 and 10.8 s instead
    of 14.6 s at 0.5. ``force_disable_caches`` would build them all again in a fresh folder."""
    import torch._dynamo.config
    import torch._functorch.config
    import torch._inductor.config
    import torch.compiler.config

    with torch.compiler.config.patch(force_disable_caches=False), torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False), \
            torch._dynamo.config.patch(automatic_dynamic_local_pgo=False):
        yield


def in_fresh_process(module: str, function: str, *args) -> None:
    """Run ``module.function(*args)`` (a module of tests/) in a fresh Python process, as a user's program runs;
    fail with the end of its output if it fails. For a compile whose result Dynamo's state from earlier tests
    in the same process can change."""
    code = f"import {module}; {module}.{function}(*{args!r})"
    path = os.pathsep.join([str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900,
                            env={**os.environ, "PYTHONPATH": path})
    assert result.returncode == 0, f"{module}.{function}{args!r} failed:\n{result.stdout[-2000:]}{result.stderr[-4000:]}"


def allocated_peak(graph, order, generated, reusable, scratch=None, decided_by=None, grouped=None) -> int:
    """:meth:`~reorder.budget.allocation_model.AllocationModel.peak` of a model given field by field."""
    from reorder.budget.allocation_model import AllocationModel

    return AllocationModel(graph, tuple(generated), tuple(reusable), tuple(scratch) if scratch is not None else None,
                           decided_by, tuple(grouped) if grouped is not None else None).peak(order)
