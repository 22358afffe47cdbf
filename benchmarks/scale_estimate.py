"""Build and estimate a 100,000-node graph; prints seconds for each stage.

    python -m benchmarks.scale_estimate [--nodes 100000]
"""

from __future__ import annotations

import argparse
import time

from reorder import estimate_peak_memory, estimate_peak_memory_allocfree, lower_bound

from .synthetic import layered_graph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    args = parser.parse_args()
    for width in (1, 100, 1000):
        t0 = time.perf_counter()
        graph = layered_graph(args.nodes, width)
        t1 = time.perf_counter()
        peak = estimate_peak_memory(graph).peak
        t2 = time.perf_counter()
        estimate_peak_memory_allocfree(graph)
        t3 = time.perf_counter()
        bound = lower_bound(graph)
        t4 = time.perf_counter()
        print(f"{graph.name}: {graph.num_nodes} nodes, {graph.num_edges} edges; build {t1 - t0:.2f}s, "
              f"estimate {t2 - t1:.2f}s, allocfree {t3 - t2:.2f}s, lower bound {t4 - t3:.2f}s; peak {peak}, bound {bound}")


if __name__ == "__main__":
    main()
