"""Offset strategies on public packing instances: slab vs capacity and vs the live-bytes bound.

    python -m benchmarks.offsets [--restarts N] [--seconds CAP] [--strategies greedy_by_size,skyline,search]
                                 [--only A,B,...] [--exact [--nodes N]]

MiniMalloc's "challenging" set A-K (capacity in the file name, which their
exact solver reaches) and idealloc's real traces. Every result is validated.
The search's effort is ``--restarts`` per instance, so its slabs do not depend
on the machine; ``--seconds`` is only a safety cap, and a cell it cut short is
marked "capped".
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

from reorder.planning import PlanOptions, live_bytes_bound, load_instance, pack_exact, plan_intervals, plan_memory
from reorder.planning.exact_packing import DEFAULT_NODES
from reorder.planning.slab import SlabPlan

from .synthetic import layered_graph

DATA = Path(__file__).resolve().parent.parent / "data" / "offset-benchmarks"

#: The search's restarts per instance by default: A-K's geomean slab/capacity
#: 1.079, what a 10 s budget gave on this project's machines (2,000 restarts: about 1.085).
RESTARTS = 6000


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
    parser.add_argument("--restarts", type=int, default=RESTARTS, help="the search's restarts per instance")
    parser.add_argument("--seconds", type=float, default=60.0, help="safety cap per instance (reported when hit)")
    parser.add_argument("--only", help="comma-separated instance names (file stems), e.g. A.1048576,G_1")
    parser.add_argument("--strategies", default="greedy_by_size,skyline,search")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--exact", action="store_true", help="add the exact packer's column")
    parser.add_argument("--nodes", type=int, default=DEFAULT_NODES, help="the exact packer's effort per instance")
    args = parser.parse_args()
    strategies = [s for s in args.strategies.split(",") if s]
    only = set(args.only.split(",")) if args.only else None
    print(f"{'instance':>16} {'buffers':>7} " + " ".join(f"{s:>16}" for s in strategies)
          + (f" {'exact':>28}" if args.exact else "") + "   (slab / capacity; slab / bound)")
    for folder in ("minimalloc-challenging", "idealloc-real"):
        logs = {s: [] for s in strategies}
        for path in sorted((DATA / folder).glob("*.csv")):
            if only is not None and path.stem not in only:
                continue
            inst = load_instance(path)
            bound = live_bytes_bound(inst.starts, inst.ends, inst.sizes)
            capacity = int(path.name.split(".")[1]) if folder.startswith("minimalloc") else bound
            cells = []
            for strategy in strategies:
                options = PlanOptions(strategy=strategy, restarts=args.restarts, max_seconds=args.seconds)
                t0 = time.perf_counter()
                plan = plan_intervals(inst.ids, inst.starts, inst.ends, inst.sizes, options)  # validated
                seconds = time.perf_counter() - t0
                slab = plan.slab_bytes
                logs[strategy].append(math.log(slab / capacity))
                cells.append(f"{slab / capacity:7.4f} {seconds:6.1f}s" + (" capped" if plan.capped else ""))
            if args.exact:
                cells.append(exact_cell(inst, capacity if folder.startswith("minimalloc") else None, capacity, args.nodes))
            print(f"{path.stem:>16} {len(inst.ids):>7} " + " ".join(f"{c:>16}" for c in cells), flush=True)
        if any(logs.values()):
            print(f"{'geomean ' + folder[:8]:>24} " + " ".join(f"{math.exp(sum(v) / len(v)):16.4f}" for v in logs.values()))
    if not args.skip_scale:
        graph = layered_graph(100_000, 100)
        for strategy in ("linear_scan", "skyline"):
            t0 = time.perf_counter()
            plan = plan_memory(graph, options=PlanOptions(strategy=strategy))
            print(f"100k-node graph, {len(plan.names)} storages, {strategy}: {time.perf_counter() - t0:.2f}s, "
                  f"slab/bound {plan.ratio:.4f} (validated)")


if __name__ == "__main__":
    main()
