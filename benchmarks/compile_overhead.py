"""Compile time and peaks with the hook, side by side with stock Inductor, forward and backward.

    python -m benchmarks.compile_overhead [--models resnet,inception,densenet,gpt] [--batch 2]

For each model: compile-and-first-step wall time with stock Inductor, with
``reorder.inductor.use()`` (the default: Inductor's own peak pass off, no
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

from reorder import inductor as hook
from reorder.report import markdown_table

from .zoo import make


def step(name: str, batch: int) -> float:
    torch._dynamo.reset()
    model, inputs = make(name, batch)
    t0 = time.perf_counter()
    out = torch.compile(model)(*inputs)
    out.float().sum().backward()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet,inception,densenet,gpt")
    parser.add_argument("--batch", type=int, default=2)
    args = parser.parse_args()
    config.force_disable_caches = True
    rows, graph_rows = [], []
    for name in args.models.split(","):
        stock = step(name, args.batch)
        with hook.use():
            ours = step(name, args.batch)
        with hook.use(keep_inductor_pass=True):
            both = step(name, args.batch)
        hook.reports.clear()
        with hook.use(compare=True):
            step(name, args.batch)
        reports = [r for r in hook.reports if "fallback" not in r]
        pass_seconds = sum(r["seconds"] for r in reports)
        inductor_seconds = sum(sum(r["inductor_seconds"].values()) for r in reports)
        rows.append((name, f"{stock:.1f}", f"{ours:.1f}", f"{both:.1f}", f"{pass_seconds * 1000:.0f}",
                     f"{inductor_seconds * 1000:.0f}"))
        for r in reports:
            best = min(r["inductor"].values())
            graph_rows.append((name, r["graph"].split("__0_")[-1], r["nodes"], best, r["peak"],
                               f"{100 * (best - r['peak']) / best:.2f}%", r["method"]))
        print(f"{name}: done", flush=True)
    print(markdown_table(["model", "stock compile s", "with hook s", "hook + Inductor pass s", "our pass ms",
                          "Inductor's 3 methods ms"], rows))
    print()
    print(markdown_table(["model", "graph", "nodes", "Inductor best", "ours", "saved", "method"], graph_rows))


if __name__ == "__main__":
    main()
