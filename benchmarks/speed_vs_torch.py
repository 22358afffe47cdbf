"""Ours vs torch's own ``memory.py`` functions on the same wide graphs, in one run.

    python -m benchmarks.speed_vs_torch [--sizes 10000,20000,40000] [--width 4000]

For each graph, times torch's ``topological_sort_lpmf/bfs/dfs`` (on stand-in
scheduler nodes, see :mod:`reorder.inductor.figures`) and ours, checks the orders
are identical, and prints the ratio torch/ours. Speed is a ratio measured side
by side because the machines are noisy; tests never assert timings.
"""

from __future__ import annotations

import argparse
import sys

from reorder import estimate_peak_memory
from reorder.schedulers import bfs_order, dfs_order, lpmf_order
from reorder.inductor.figures import torch_reference

from .synthetic import layered_graph
from .timing import timed

OURS = {"lpmf": lpmf_order, "bfs": bfs_order, "dfs": dfs_order}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,20000,40000")
    parser.add_argument("--width", type=int, default=4000)
    parser.add_argument("--fan-in", type=int, default=1, help="1: independent parallel branches (the ready set stays `width` wide)")
    parser.add_argument("--methods", default="lpmf,bfs,dfs")
    args = parser.parse_args()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    print(f"{'graph':>22} {'method':>6} {'torch s':>9} {'ours s':>8} {'ratio':>7}  same order  peak")
    for nodes in (int(x) for x in args.sizes.split(",")):
        graph = layered_graph(nodes, args.width, fan_in=args.fan_in)
        reference = torch_reference(graph)
        for method in args.methods.split(","):
            theirs, t_theirs = timed(reference.method(method))
            ours, t_ours = timed(lambda: OURS[method](graph))
            peak = estimate_peak_memory(graph, ours).peak
            same = "yes" if theirs == ours else "NO"
            print(f"{graph.name:>22} {method:>6} {t_theirs:9.2f} {t_ours:8.3f} {t_theirs / t_ours:6.1f}x  {same:>10}  {peak}",
                  flush=True)
        (_, t_theirs), (_, t_ours) = timed(reference.estimate), timed(lambda: estimate_peak_memory(graph))
        print(f"{graph.name:>22} {'est.':>6} {t_theirs:9.3f} {t_ours:8.3f} {t_theirs / t_ours:6.1f}x", flush=True)


if __name__ == "__main__":
    main()
