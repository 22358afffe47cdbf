"""Compile time and peaks with the hook, side by side with stock Inductor, forward and backward.

    python -m benchmarks.compile_overhead [--models resnet,inception,densenet,gpt] [--batch 2]

For each model: compile-and-first-step wall time with stock Inductor, with
``reorder.inductor.use(memory_budget=None)`` (Inductor's own peak pass off, no
comparison), and with ``use(keep_inductor_pass=True)``; plus, from a run with
``compare=True``, per compiled graph Inductor's best peak against ours and the
seconds each side spent. Caches are disabled so
every configuration really compiles. Wall times include C++ compilation and
are noisy; the pass's own seconds are measured inside the compile.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch._inductor.config as config

from reorder.report import markdown_table

from .variants import Variant, hooked, stock
from .zoo import make

#: The timed variants, then the one whose records give each graph's peaks and seconds (Inductor's and ours).
TIMED: tuple[Variant, ...] = (
    stock(),
    hooked("hook", "reorder.inductor.use(memory_budget=None): our pass, Inductor's own peak pass off"),
    hooked("hook_and_inductor", "reorder.inductor.use(keep_inductor_pass=True, memory_budget=None)",
           keep_inductor_pass=True),
)
COMPARED = hooked("compared", "reorder.inductor.use(compare=True, memory_budget=None)", compare=True)


def step(name: str, batch: int, variant: Variant):
    """Compile and run one training step of ``name`` under ``variant``; its wall seconds and the hook's session."""
    torch._dynamo.reset()
    model, inputs = make(name, batch)
    t0 = time.perf_counter()
    with variant.enter(True) as session:
        out = variant.compile(model)(*inputs)
        out.float().sum().backward()
    return time.perf_counter() - t0, session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet,inception,densenet,gpt")
    parser.add_argument("--batch", type=int, default=2)
    args = parser.parse_args()
    config.force_disable_caches = True
    rows, graph_rows = [], []
    for name in args.models.split(","):
        stock_seconds, ours, both = (step(name, args.batch, variant)[0] for variant in TIMED)
        _, session = step(name, args.batch, COMPARED)
        reports = session.graphs
        pass_seconds = sum(r.seconds for r in reports)
        inductor_seconds = sum(sum(r.inductor_seconds.values()) for r in reports)
        rows.append((name, f"{stock_seconds:.1f}", f"{ours:.1f}", f"{both:.1f}", f"{pass_seconds * 1000:.0f}",
                     f"{inductor_seconds * 1000:.0f}"))
        for r in reports:
            best = min(r.inductor.values())
            graph_rows.append((name, r.graph.split("__0_")[-1], r.nodes, best, r.peak,
                               f"{100 * (best - r.peak) / best:.2f}%", r.method))
        print(f"{name}: done", flush=True)
    print(markdown_table(["model", "stock compile s", "with hook s", "hook + Inductor pass s", "our pass ms",
                          "Inductor's 3 methods ms"], rows))
    print()
    print(markdown_table(["model", "graph", "nodes", "Inductor best", "ours", "saved", "method"], graph_rows))


if __name__ == "__main__":
    main()
