"""Offset strategies on public packing instances: slab vs capacity and vs the live-bytes bound.

    python -m benchmarks.offsets [--seconds 10] [--strategies greedy_by_size,skyline,search] [--exact [--nodes N]]

MiniMalloc's "challenging" set A-K (capacity in the file name, which their
exact solver reaches) and idealloc's real traces. Every result is validated.
``--exact`` adds the exact packer: on A-K it decides the file's capacity, on
the real traces it minimises the slab (status, slab / capacity or bound,
seconds). Also plans a synthetic 100,000-buffer graph to time the planner at
scale.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from reorder.planning import live_bytes_bound, load_instance, pack, pack_exact, plan_memory
from reorder.planning.exact import DEFAULT_NODES
from reorder.planning.slab import SlabPlan

from .synthetic import layered_graph

DATA = Path(__file__).resolve().parent.parent / "data" / "offset-benchmarks"


def exact_cell(inst, capacity: int | None, scale: int, nodes: int) -> str:
    """The exact packer on ``inst`` (deciding ``capacity``, or minimising): status, slab / ``scale``, seconds."""
    found = pack_exact(inst.starts, inst.ends, inst.sizes, capacity, nodes=nodes)
    ratio = "-"
    if found.offsets is not None:
        SlabPlan.of_intervals(inst.ids, inst.starts, inst.ends, inst.sizes, found.offsets, "exact").validate()
        ratio = f"{found.slab / scale:.4f}"
    return f"{found.status:>10} {ratio:>7} {found.seconds:6.1f}s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="search budget per instance")
    parser.add_argument("--strategies", default="greedy_by_size,skyline,search")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--exact", action="store_true", help="add the exact packer's column")
    parser.add_argument("--nodes", type=int, default=DEFAULT_NODES, help="the exact packer's effort per instance")
    args = parser.parse_args()
    strategies = [s for s in args.strategies.split(",") if s]
    print(f"{'instance':>16} {'buffers':>7} " + " ".join(f"{s:>16}" for s in strategies)
          + (f" {'exact':>28}" if args.exact else "") + "   (slab / capacity; slab / bound)")
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
            if args.exact:
                cells.append(exact_cell(inst, capacity if folder.startswith("minimalloc") else None, capacity, args.nodes))
            print(f"{path.stem:>16} {len(inst.ids):>7} " + " ".join(f"{c:>16}" for c in cells), flush=True)
        if strategies:
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
