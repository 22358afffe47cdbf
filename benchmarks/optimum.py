"""Prove the minimum peak of every bundled and captured graph, and record it next to the graph.

    python -m benchmarks.optimum [FOLDER ...] [--effort 40] [--workers 1] [--max-nodes 400] [--again]
                                 [--search-states 1000000] [--accept-gap 0.01]
    python -m benchmarks.optimum [FOLDER ...] --joint [--effort 20] [--max-nodes 60]

For each graph file of up to ``--max-nodes`` nodes: the default pass
(:data:`~reorder.schedulers.DEFAULT_METHODS`), then the ``optimal`` method
from its order: the exact peak search (``--search-states``), then, only if
that proves nothing, CP-SAT with ``--effort`` deterministic time.
The result (best peak, proven bound, proven or not, solve seconds) goes into
the folder's ``optima.json`` (:mod:`reorder.optima`) after every graph, so an
interrupted run keeps what it proved; graphs already recorded with the same
effort and workers are skipped unless ``--again``. Prints the table that
docs/algorithms.md carries, and the graphs where the default pass is more
than 0.5% above the optimum (or above the bound, when unproven).

``--joint`` instead minimises the slab over orders and offsets together
(:func:`reorder.joint.joint_optimum`) on each graph of up to ``--max-nodes``
nodes and prints, per graph, the joint slab against the minimum-peak order's
exactly packed slab: "below" or "coincide".
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from reorder import load_graph
from reorder.cli import graph_files
from reorder.optima import Optimum, load_optima, save_optima
from reorder.report import format_table, markdown_table
from reorder.schedulers import reorder_for_peak_memory
from reorder.schedulers.optimal import Optimal
from reorder.timeline import estimate_peak_memory

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = [ROOT / "reorder" / "data" / "graphs", ROOT / "benchmarks" / "graphs" / "b2",
           *sorted(p for size in ("bench", "full") for p in (ROOT / "benchmarks" / "real" / "graphs" / size).glob("*")
                   if p.is_dir())]


def solve(path: Path, effort: float, workers: int, search_states: int = Optimal.search_states,
          accept_gap: float = 0.0) -> Optimum:
    """The default pass, then the ``optimal`` method from its order: one :class:`~reorder.optima.Optimum`."""
    graph = load_graph(path)
    default = reorder_for_peak_memory(graph)
    started = time.perf_counter()
    outcome = Optimal(effort=effort, workers=workers, search_states=search_states,
                      accept_gap=accept_gap).run(graph, default.order)
    seconds = time.perf_counter() - started
    peak = min(default.peak, estimate_peak_memory(graph, outcome.order).peak)
    bound = peak if outcome.optimal else max(default.lower_bound, outcome.bound or 0)
    return Optimum(graph.num_nodes, peak, bound, outcome.optimal or peak == bound, default.peak, effort, workers,
                   round(seconds, 2))


def rows(optima: dict[str, Optimum]) -> list[tuple]:
    """Table rows: graph, nodes, default pass, optimum or bound, proven, gap, default above the bound, seconds."""
    return [
        (name, o.nodes, o.default_peak, o.peak if o.proven else o.bound, "yes" if o.proven else "no",
         f"{100 * o.gap:.2f}%", f"{100 * (o.default_peak - o.bound) / o.bound:.2f}%" if o.bound else "-",
         f"{o.seconds:.1f}")
        for name, o in optima.items()
    ]


HEADERS = ["graph", "nodes", "default pass peak", "optimum or bound", "proven", "gap", "default above", "solve s"]


JOINT_HEADERS = ["graph", "nodes", "min peak", "its slab", "joint slab", "joint proven", "verdict", "solve s"]


def joint_rows(folders: list[Path], effort: float, workers: int, max_nodes: int) -> list[tuple]:
    """One row per graph of up to ``max_nodes`` nodes: the joint optimum against the minimum-peak order's slab."""
    from reorder.joint import joint_optimum

    out = []
    for folder in folders:
        for path in graph_files(str(folder)):
            graph = load_graph(path)
            if graph.num_nodes > max_nodes:
                continue
            started = time.perf_counter()
            joint = joint_optimum(graph, effort=effort, workers=workers, max_nodes=max_nodes)
            out.append((f"{folder.name}/{path.stem}", graph.num_nodes, joint.min_peak, joint.min_peak_slab, joint.slab,
                        "yes" if joint.proven else f"no (>= {joint.bound})", joint.verdict,
                        f"{time.perf_counter() - started:.1f}"))
            print(out[-1], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, default=FOLDERS)
    parser.add_argument("--effort", type=float, default=40.0, help="CP-SAT deterministic time per graph")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--search-states", type=int, default=Optimal.search_states,
                        help="sets the exact peak search may see before CP-SAT (and again to certify a bound)")
    parser.add_argument("--accept-gap", type=float, default=0.0,
                        help="skip CP-SAT when the search certifies a gap at most this fraction (0: never)")
    parser.add_argument("--max-nodes", type=int, default=400)
    parser.add_argument("--again", action="store_true", help="solve graphs already recorded with these options")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--joint", action="store_true", help="joint order and offsets instead (small graphs)")
    args = parser.parse_args()
    table = markdown_table if args.markdown else format_table
    if args.joint:
        print(table(JOINT_HEADERS, joint_rows(args.folders, args.effort, args.workers, args.max_nodes)))
        return
    everything: dict[str, Optimum] = {}
    for folder in args.folders:
        optima = load_optima(folder)
        for path in graph_files(str(folder)):
            known = optima.get(path.stem)
            if known is None or args.again or (known.effort, known.workers) != (args.effort, args.workers):
                if load_graph(path).num_nodes > args.max_nodes:
                    continue
                optima[path.stem] = solve(path, args.effort, args.workers, args.search_states, args.accept_gap)
                save_optima(folder, optima)
                print(f"{folder.name}/{path.stem}: {optima[path.stem]}", flush=True)
        everything.update({f"{folder.name}/{name}": o for name, o in optima.items()})
    print(table(HEADERS, rows(everything)))
    missed = [name for name, o in everything.items() if o.default_peak > 1.005 * o.bound]
    print(f"\ndefault pass more than 0.5% above the optimum or bound: {', '.join(missed) or 'none'}")


if __name__ == "__main__":
    main()
