"""`reorder optimize` at scale: peak resident memory and method seconds on 100,000-node graph files.

    python -m benchmarks.scale [--nodes 100000] [--renames 10000] [--previous PATH]
                               [--methods M,...] [--shapes S,...] [--repeat 1] [--timeout 600]

Shapes (``benchmarks/synthetic.py``): *wide* (25 layers of 4,000 parallel
nodes), *narrow* (25,000 layers of 4), *chains W* (W equal parallel chains
and a sink that reads every tail, for W = 10, 100, 1,000 and 10,000: the
shape whose precedence sets are largest, and with 1,000 chains a plateau of
peak steps), and a rename chain (one buffer renamed in place ``--renames``
times). Each shape is written once as a graph file in the library's format;
then ``python -m reorder optimize FILE --json`` runs on it in a fresh
process, so its peak resident memory (the child's ``ru_maxrss``, from
``wait4``) is the whole command's: interpreter, reading the file, the lower
bound, every method, the JSON out. (Linux counts the parent's own peak in a
child's at ``exec``, so this script imports nothing of the library and
keeps no order while it runs: its peak, about 15 MiB, is the floor.) ``--previous PATH`` (a checkout of an
earlier release) runs the same command with that checkout first on
``PYTHONPATH``, on the same file, in the same run, so the two columns are
comparable. Method seconds are those the command reports (every method but
the baseline, summed); with ``--repeat N`` the releases take turns N times
and the fastest run of each is shown (a loaded machine only slows runs down).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAIN_WIDTHS = (10, 100, 1000, 10000)
SHAPES = ("wide", "narrow", *(f"chains{w}" for w in CHAIN_WIDTHS), "renames")


def make(shape: str, nodes: int):
    """The graph of ``shape`` (``nodes`` is the length of the rename chain for ``renames``)."""
    from .synthetic import layered_graph, plateau_graph, rename_chain

    if shape == "wide":
        return layered_graph(nodes, 4000)
    if shape == "narrow":
        return layered_graph(nodes, 4)
    if shape.startswith("chains"):
        return plateau_graph(nodes, int(shape.removeprefix("chains")))
    if shape == "renames":
        return rename_chain(nodes)
    raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")


def write(shape: str, nodes: int, path: Path) -> None:
    """Build ``shape`` and save it at ``path`` (run in a child, so the parent stays small)."""
    from reorder import save_graph

    save_graph(make(shape, nodes), path)


def optimize(tree: Path, path: Path, methods: str | None, timeout: float) -> dict:
    """Run ``python -m reorder optimize path --json`` with ``tree`` first on PYTHONPATH, in a fresh process.

    Returns the command's JSON with ``peak_rss_mib`` (the child's own peak, from ``wait4``) and
    ``wall_s``, or ``{"timeout": timeout}``.
    """
    command = [sys.executable, "-m", "reorder", "optimize", str(path), "--json"]
    if methods:
        command += ["--methods", methods]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err, env=env, cwd=tree)
        killed = threading.Event()
        timer = threading.Timer(timeout, lambda: (killed.set(), child.kill()))
        timer.start()
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage, not the sum of all children
        timer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        if killed.is_set():
            return {"timeout": timeout}
        if child.returncode:
            err.seek(0)
            raise RuntimeError(f"{' '.join(command)} (in {tree}) exited {child.returncode}: {err.read().decode()[-2000:]}")
        out.seek(0)
        record = {key: value for key, value in json.loads(out.read()).items() if key != "order"}
    record.update(peak_rss_mib=usage.ru_maxrss / 1024, wall_s=wall)
    return record


def method_seconds(record: dict) -> float:
    return sum(s for name, s in record["seconds"].items() if name != "baseline")


def fastest(one: dict, other: dict) -> dict:
    """The run with fewer method seconds; peak RSS the larger of the two (memory does not vary by load)."""
    if "timeout" in one or "timeout" in other:
        return one if "timeout" in one else other
    best = min(one, other, key=method_seconds)
    return {**best, "peak_rss_mib": max(one["peak_rss_mib"], other["peak_rss_mib"])}


def cells(record: dict) -> tuple[str, str]:
    if "timeout" in record:
        return f"> {record['timeout']:.0f}", "-"
    return f"{method_seconds(record):.2f}", f"{record['peak_rss_mib']:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--renames", type=int, default=10_000)
    parser.add_argument("--previous", type=Path, help="a checkout of the previous release, run side by side")
    parser.add_argument("--methods", help="passed to `reorder optimize --methods` (default: its default set)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, from {', '.join(SHAPES)}")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per command before giving up on it")
    parser.add_argument("--repeat", type=int, default=1, help="runs per release and shape; the fastest is shown")
    parser.add_argument("--write", nargs=2, metavar=("SHAPE", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        write(args.write[0], args.renames if args.write[0] == "renames" else args.nodes, Path(args.write[1]))
        return
    trees = {"after": ROOT, **({"before": args.previous.resolve()} if args.previous else {})}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for shape in args.shapes.split(","):
            path = Path(folder) / f"{shape}.json"
            subprocess.run([sys.executable, "-m", "benchmarks.scale", "--nodes", str(args.nodes), "--renames",
                            str(args.renames), "--write", shape, str(path)], check=True, cwd=ROOT)
            runs = {}
            for _ in range(args.repeat):  # alternate the releases, so both see the same load on the machine
                for label, tree in trees.items():
                    record = optimize(tree, path, args.methods, args.timeout)
                    runs[label] = record if label not in runs else fastest(runs[label], record)
            for label, record in runs.items():
                summary = {k: record.get(k) for k in ("nodes", "best", "seconds", "peak_rss_mib", "wall_s", "timeout")}
                print(f"{shape} {label}: {json.dumps(summary)}", file=sys.stderr, flush=True)
            after, columns = runs["after"], [cells(runs[label]) for label in reversed(trees)]  # before first
            best = after.get("best")
            rows.append([shape, f"{after['nodes']:,}" if "nodes" in after else "-",
                         *(seconds for seconds, _ in columns), *(rss for _, rss in columns),
                         f"{best['peak']:,} ({best['method']})" if best else "-"])
    from reorder.report import markdown_table  # only now: see the module's docstring

    header = (["method s, before", "after", "peak RSS MiB, before", "after"] if args.previous
              else ["method s", "peak RSS MiB"])
    print(markdown_table(["shape", "nodes", *header, "best peak (method)"], rows))


if __name__ == "__main__":
    main()
