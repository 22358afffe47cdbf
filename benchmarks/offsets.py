"""Offset strategies on public packing instances: slab vs capacity and vs the live-bytes bound.

    python -m benchmarks.offsets [--seconds 10] [--strategies greedy_by_size,skyline,search]

MiniMalloc's "challenging" set A-K (capacity in the file name, which their
exact solver reaches) and idealloc's real traces. Every result is validated.
Also plans a synthetic 100,000-buffer graph to time the planner at scale.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from reorder.planning import live_bytes_bound, load_instance, pack, plan_memory
from reorder.planning.slab import SlabPlan

from .synthetic import layered_graph

DATA = Path(__file__).resolve().parent.parent / "data" / "offset-benchmarks"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="search budget per instance")
    parser.add_argument("--strategies", default="greedy_by_size,skyline,search")
    parser.add_argument("--skip-scale", action="store_true")
    args = parser.parse_args()
    strategies = args.strategies.split(",")
    print(f"{'instance':>16} {'buffers':>7} " + " ".join(f"{s:>16}" for s in strategies) + "   (slab / capacity; slab / bound)")
    for folder in ("minimalloc-challenging", "idealloc-real"):
        logs = {s: [] for s in strategies}
        for path in sorted((DATA / folder).glob("*.csv")):
            inst = load_instance(path)
            bound = live_bytes_bound(inst.starts, inst.ends, inst.sizes)
            capacity = int(path.name.split(".")[1]) if folder.startswith("minimalloc") else bound
            cells = []
            for strategy in strategies:
                t0 = time.perf_counter()
                offsets = pack(inst.starts, inst.ends, inst.sizes, strategy, args.seconds)
                seconds = time.perf_counter() - t0
                plan = SlabPlan.of_intervals(inst.ids, inst.starts, inst.ends, inst.sizes, offsets, strategy)
                plan.validate()
                slab = plan.slab_bytes
                logs[strategy].append(math.log(slab / capacity))
                cells.append(f"{slab / capacity:7.4f} {seconds:6.1f}s")
            print(f"{path.stem:>16} {len(inst.ids):>7} " + " ".join(f"{c:>16}" for c in cells), flush=True)
        print(f"{'geomean ' + folder[:8]:>24} " + " ".join(f"{math.exp(sum(v) / len(v)):16.4f}" for v in logs.values()))
    if not args.skip_scale:
        graph = layered_graph(100_000, 100)
        for strategy in ("linear_scan", "skyline"):
            t0 = time.perf_counter()
            plan = plan_memory(graph, strategy=strategy)
            print(f"100k-node graph, {len(plan.names)} storages, {strategy}: {time.perf_counter() - t0:.2f}s, "
                  f"slab/bound {plan.ratio:.4f} (validated)")


if __name__ == "__main__":
    main()
