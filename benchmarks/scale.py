"""The default method set at scale: seconds and peak resident memory on 100,000-node graphs.

    python -m benchmarks.scale [--nodes 100000] [--renames 10000] [--timeout 600]

Three shapes (``benchmarks/synthetic.py``): *wide* (25 layers of 4,000
parallel nodes), *narrow* (25,000 layers of 4) and *plateau* (1,000 equal
parallel chains: most steps of any order sit at the peak). Each runs in a
fresh process, so its peak resident memory (``ru_maxrss``) is the whole
process's: interpreter, sympy, the graph and every method of the default set
(what ``reorder optimize`` and the Inductor hook run). Then a rename chain
(one buffer renamed in place ``--renames`` times) is built, the case of an
alias chain that long.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from reorder.report import markdown_table

SHAPES = ("wide", "narrow", "plateau")


def make(shape: str, nodes: int):
    from .synthetic import layered_graph, plateau_graph, rename_chain

    if shape == "wide":
        return layered_graph(nodes, 4000)
    if shape == "narrow":
        return layered_graph(nodes, 4)
    if shape == "plateau":
        return plateau_graph(nodes, 1000)
    return rename_chain(nodes)


def one(shape: str, nodes: int) -> dict:
    """Build the shape, run the default methods, and report seconds and this process's peak RSS."""
    from reorder.schedulers import reorder_for_peak_memory

    t0 = time.perf_counter()
    graph = make(shape, nodes)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = reorder_for_peak_memory(graph)
    methods = time.perf_counter() - t0
    return {"shape": shape, "nodes": graph.num_nodes, "edges": graph.num_edges, "build_s": build,
            "methods_s": methods, "per_method_s": result.seconds, "peak": result.peak, "method": result.method,
            "notes": result.notes, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run(shape: str, nodes: int, timeout: float) -> dict:
    try:
        out = subprocess.run([sys.executable, "-m", "benchmarks.scale", "--one", shape, "--nodes", str(nodes)],
                             capture_output=True, text=True, timeout=timeout, check=True).stdout
    except subprocess.TimeoutExpired:
        return {"shape": shape, "nodes": nodes, "timeout": timeout}
    return json.loads(out.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--renames", type=int, default=10_000)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per shape before giving up on it")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.nodes)))
        return
    rows = []
    for shape, nodes in [*((s, args.nodes) for s in SHAPES), ("renames", args.renames)]:
        r = run(shape, nodes, args.timeout)
        print(f"{shape}: {json.dumps(r)}", file=sys.stderr, flush=True)
        if "timeout" in r:
            rows.append((shape, nodes, f"> {args.timeout:.0f}", "-", "-", "-", "-"))
            continue
        slowest = max((k for k in r["per_method_s"] if k != "baseline"), key=r["per_method_s"].get)
        rows.append((shape, r["nodes"], f"{r['build_s']:.2f}", f"{r['methods_s']:.2f}",
                     f"{slowest} {r['per_method_s'][slowest]:.2f}", f"{r['peak_rss_mib']:.0f}",
                     f"{r['peak']:,} ({r['method']})"))
    print(markdown_table(["shape", "nodes", "build s", "default methods s", "slowest method s", "peak RSS MiB",
                          "best peak (method)"], rows))


if __name__ == "__main__":
    main()
