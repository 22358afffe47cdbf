"""The ``reorder`` command line: ``python -m reorder SUBCOMMAND ...``.

Subcommands print a readable summary, or one JSON object with ``--json``
(whose keys are a contract other tools rely on; see each handler). Bad input
ends with ``reorder: error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

from .errors import ReorderError
from .graph import Graph
from .io import load_graph
from .optima import OPTIMA_FILE, optimum_for
from .report import format_bytes, format_table
from .timeline import estimate_peak_memory, estimate_peak_memory_allocfree, lower_bound

__all__ = ["main"]

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    COMMANDS[fn.__name__.removeprefix("cmd_")] = fn
    return fn


def graph_files(path: str) -> list[Path]:
    """The JSON graph files at ``path``: the file itself, or every ``*.json`` in a folder but figure
    files and recorded optima."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.glob("*.json") if "figures" not in f.name and f.name != OPTIMA_FILE)
        if not files:
            raise ReorderError(f"no graph files (*.json) in {p}")
        return files
    if not p.exists():
        raise ReorderError(f"no such file or folder: {p}")
    return [p]


def estimate_record(graph: Graph) -> dict:
    """The ``estimate`` JSON object for one graph."""
    timeline = estimate_peak_memory(graph)
    return {
        "graph": graph.name,
        "nodes": graph.num_nodes,
        "buffers": graph.num_buffers,
        "edges": graph.num_edges,
        "peak": timeline.peak,
        "peak_step": timeline.peak_step,
        "peak_allocfree": estimate_peak_memory_allocfree(graph).peak,
        "lower_bound": lower_bound(graph),
    }


@command
def cmd_estimate(args: argparse.Namespace) -> int:
    """Peak of the graph's own order; JSON keys: peak, peak_allocfree, lower_bound, nodes."""
    records = [estimate_record(load_graph(f)) for f in graph_files(args.file)]
    if args.json:
        print(json.dumps(records[0] if len(records) == 1 and Path(args.file).is_file() else records, indent=1))
        return 0
    rows = [
        (r["graph"], r["nodes"], r["buffers"], format_bytes(r["peak"]), format_bytes(r["peak_allocfree"]),
         format_bytes(r["lower_bound"]), f"{r['peak'] / r['lower_bound']:.3f}" if r["lower_bound"] else "-")
        for r in records
    ]
    print(format_table(["graph", "nodes", "buffers", "peak", "peak (alloc/free)", "lower bound", "peak/bound"], rows))
    return 0


def optimize_record(graph: Graph, methods: Sequence[str] | None) -> dict:
    """The ``optimize`` JSON object for one graph."""
    from .schedulers import reorder_for_peak_memory

    result = reorder_for_peak_memory(graph, methods)
    return {
        "graph": graph.name,
        "nodes": graph.num_nodes,
        "methods": result.peaks,
        "best": {"method": result.method, "peak": result.peak},
        "order": graph.names_of(result.order),
        "lower_bound": result.lower_bound,
        "gap": result.gap,
        "optimal": result.optimal,
        "seconds": result.seconds,
        "notes": result.notes,
    }


def _method_list(text: str | None) -> list[str] | None:
    from .schedulers import split_methods

    return None if text is None else split_methods(text)


@command
def cmd_optimize(args: argparse.Namespace) -> int:
    """Best order over methods; JSON keys: methods, best, order, lower_bound, seconds."""
    methods = _method_list(args.methods)
    records = [optimize_record(load_graph(f), methods) for f in graph_files(args.file)]
    if args.json:
        print(json.dumps(records[0] if len(records) == 1 and Path(args.file).is_file() else records, indent=1))
        return 0
    for r in records:
        base = r["methods"]["baseline"]
        print(f"{r['graph']}: {r['nodes']} nodes, lower bound {format_bytes(r['lower_bound'])}")
        rows = [
            (name, format_bytes(peak), f"{peak / base:.3f}" if base else "-", f"{r['seconds'][name] * 1000:.1f}",
             "*" if name == r["best"]["method"] else "", r["notes"].get(name, ""))
            for name, peak in r["methods"].items()
        ]
        print(format_table(["method", "peak", "vs baseline", "ms", "best", "note"], rows))
        status = "optimal" if r["optimal"] else f"{100 * r['gap']:.2f}% above the lower bound"
        print(f"best: {r['best']['method']} at {format_bytes(r['best']['peak'])} ({status})\n")
    return 0


#: The search strategy's budget in ``plan`` and ``pack`` when --seconds is not given.
PLAN_SEARCH_SECONDS = 2.0
PACK_SEARCH_SECONDS = 10.0


@command
def cmd_plan(args: argparse.Namespace) -> int:
    """Slab plan; JSON keys: order, slab_bytes, lower_bound, strategy, buffers [{name, offset, size, start, end}];
    with --exact also status and nodes."""
    from .planning import plan_memory, plan_orders
    from .schedulers import reorder_for_peak_memory

    graph = load_graph(args.file)
    seconds = PLAN_SEARCH_SECONDS if args.seconds is None and not args.exact else args.seconds
    options = dict(alignment=args.alignment, include_inputs=not args.exclude_inputs, seconds=seconds,
                   restarts=args.restarts, exact=args.exact, nodes=args.nodes)
    if args.order == "baseline":
        chosen, plan = "baseline", plan_memory(graph, None, args.strategy, **options)
    else:
        result = reorder_for_peak_memory(graph, _method_list(args.methods))
        orders = result.orders if args.order == "all" else {result.method: result.order}
        chosen, plan = plan_orders(graph, orders, args.strategy, **options)
    if args.json:
        print(json.dumps({"graph": graph.name, "order_method": chosen, **plan.to_json()}, indent=1))
        return 0
    print(f"{graph.name}: {len(plan.names)} storages, order from {chosen}, strategy {plan.strategy}, "
          f"alignment {plan.alignment}")
    print(f"slab {format_bytes(plan.slab_bytes)} ({plan.slab_bytes} B), lower bound {format_bytes(plan.lower_bound)}, "
          f"ratio {plan.ratio:.4f}; plan validated: no two live buffers share a byte")
    if plan.status:
        print(f"exact packer: {plan.status} after {plan.nodes} nodes")
    if args.verbose:
        rows = [(plan.names[k], plan.offsets[k], plan.sizes[k], plan.symbolic_sizes[k] or "", plan.starts[k], plan.ends[k])
                for k in range(len(plan.names))]
        print(format_table(["buffer", "offset", "size", "symbolic", "start", "end"], rows))
    return 0


@command
def cmd_pack(args: argparse.Namespace) -> int:
    """Pack a CSV instance; JSON keys: slab_bytes, lower_bound, offsets {id: offset};
    with --exact also status, capacity, nodes, clock_stopped, note (offsets and slab_bytes null without a packing)."""
    import time

    from .planning import load_instance, pack
    from .planning.slab import SlabPlan

    inst = load_instance(args.file)
    if args.exact:
        return pack_exactly(args, inst)
    if args.capacity is not None:
        raise ReorderError("--capacity needs --exact")
    t0 = time.perf_counter()

    def show(restarts: int, slab: int) -> None:
        print(f"\r{inst.name}: {time.perf_counter() - t0:5.1f}s  restart {restarts:5d}  best slab {slab}",
              end="", file=sys.stderr, flush=True)

    seconds = PACK_SEARCH_SECONDS if args.seconds is None else args.seconds
    offsets = pack(inst.starts, inst.ends, inst.sizes, args.strategy, seconds, args.restarts,
                   progress=None if args.json else show)
    if not args.json and args.strategy == "search":
        print(file=sys.stderr)
    seconds = time.perf_counter() - t0
    plan = SlabPlan.of_intervals(inst.ids, inst.starts, inst.ends, inst.sizes, offsets, args.strategy)
    plan.validate()
    slab, bound = plan.slab_bytes, plan.lower_bound
    if args.json:
        print(json.dumps({"instance": inst.name, "strategy": args.strategy, "buffers": len(inst.ids), "slab_bytes": slab,
                          "lower_bound": bound, "ratio": slab / bound if bound else 1.0, "seconds": seconds,
                          "offsets": dict(zip(inst.ids, offsets))}))
        return 0
    print(f"{inst.name}: {len(inst.ids)} buffers, slab {slab} B, lower bound {bound} B, "
          f"ratio {slab / bound if bound else 1.0:.4f}, {seconds:.2f}s ({args.strategy}); valid")
    return 0


def pack_exactly(args: argparse.Namespace, inst) -> int:
    """``pack --exact``: the exact packer's verdict; any packing is validated before it is printed."""
    from .planning import exact_packing
    from .planning.slab import SlabPlan

    found = exact_packing(inst.starts, inst.ends, inst.sizes, args.strategy, args.capacity, args.nodes, args.seconds)
    if found.offsets is not None:
        SlabPlan.of_intervals(inst.ids, inst.starts, inst.ends, inst.sizes, found.offsets, "exact").validate()
    bound = found.lower_bound
    if args.json:
        print(json.dumps({"instance": inst.name, "strategy": "exact", "buffers": len(inst.ids), "status": found.status,
                          "capacity": found.capacity, "slab_bytes": found.slab, "lower_bound": bound,
                          "ratio": found.slab / bound if found.slab is not None and bound else None,
                          "nodes": found.nodes, "seconds": found.seconds, "clock_stopped": found.clock_stopped,
                          "note": found.note,
                          "offsets": None if found.offsets is None else dict(zip(inst.ids, found.offsets))}))
        return 0
    slab = "no packing" if found.slab is None else f"slab {found.slab} B (ratio {found.slab / bound:.4f}); valid"
    within = "" if found.capacity is None else f" within {found.capacity} B"
    stopped = ", stopped by the clock" if found.clock_stopped else ""
    print(f"{inst.name}: {len(inst.ids)} buffers, {found.status}{within}: {slab}, lower bound {bound} B, "
          f"{found.nodes} nodes, {found.seconds:.2f}s{stopped}" + (f" ({found.note})" if found.note else ""))
    return 0


@command
def cmd_capture(args: argparse.Namespace) -> int:
    """Run a script with the Inductor hook on; write every compiled graph and Inductor's figures to --out."""
    import runpy

    from . import inductor

    script = Path(args.script)
    if not script.exists():
        raise ReorderError(f"no such script: {script}")
    rest = list(args.script_args)
    if "--out" in rest:  # accepted after the script too
        i = rest.index("--out")
        if i + 1 >= len(rest):
            raise ReorderError("--out needs a folder")
        args.out = rest[i + 1]
        del rest[i:i + 2]
    args.script_args = rest
    out = Path(args.out)
    sys.argv = [str(script), *args.script_args]
    with inductor.use(capture_dir=out) as session:
        runpy.run_path(str(script), run_name="__main__")
    captured = session.graphs
    for r in session.fallbacks:
        print(f"not captured: {r.graph}: {r.reason}", file=sys.stderr)
    if not captured:
        raise ReorderError(f"no graph reached Inductor's scheduler while {script} ran (does it call torch.compile "
                           f"and run the compiled function?); nothing was written to {out}")
    rows = [(r.graph, r.nodes, r.inductor["baseline"], min(r.inductor.values()), r.peak, r.method) for r in captured]
    print(format_table(["graph", "nodes", "Inductor baseline", "Inductor best", "ours", "method"], rows))
    print(f"wrote {len(captured)} graphs and inductor-figures.json to {out} (Inductor's caches were off while "
          f"capturing, so every compiled graph went through the pass)")
    return 0


@command
def cmd_plot(args: argparse.Namespace) -> int:
    """Live bytes per step (baseline vs the chosen order) and the slab layout, in one PNG."""
    from .planning import plan_orders
    from .plot import plot_graph
    from .schedulers import reorder_for_peak_memory

    graph = load_graph(args.file)
    result = reorder_for_peak_memory(graph, _method_list(args.methods))
    method, plan = plan_orders(graph, result.orders, seconds=args.seconds)
    out = plot_graph(graph, list(range(graph.num_nodes)), result.order, result.method, plan, args.out, result.lower_bound)
    print(f"wrote {out}: peak {result.peaks['baseline']} -> {result.peak} ({result.method}), "
          f"slab {plan.slab_bytes} (order of {method})")
    return 0


BUNDLED_GRAPHS = Path(__file__).resolve().parent / "data" / "graphs"


@command
def cmd_demo(args: argparse.Namespace) -> int:
    """End to end on a folder of graphs (default: the bundled ones): reorder, plan the slab, table, plots."""
    from .planning import plan_orders
    from .schedulers import reorder_for_peak_memory

    out = Path(args.out)
    plots = True
    try:
        from .plot import plot_graph

        out.mkdir(parents=True, exist_ok=True)
    except ReorderError as exc:
        plots = False
        print(f"(no plots: {exc})", file=sys.stderr)
    rows, records = [], []
    files = graph_files(args.folder)
    for k, path in enumerate(files, 1):
        graph = load_graph(path)
        optimum = optimum_for(path)
        result = reorder_for_peak_memory(graph)
        # A recorded optimum (benchmarks.optimum) is a proven bound too.
        bound = max(result.lower_bound, optimum.bound if optimum else 0)
        plan_method, plan = plan_orders(graph, result.orders, seconds=args.seconds)
        peaks = result.peaks
        inductor = min(peaks[m] for m in ("baseline", "lpmf", "bfs", "dfs"))
        saved = inductor - result.peak
        if plots:
            plot_graph(graph, list(range(graph.num_nodes)), result.order, result.method, plan,
                       out / f"{graph.name}.png", result.lower_bound)
        rows.append((
            graph.name, graph.num_nodes, format_bytes(peaks["baseline"]), format_bytes(inductor),
            format_bytes(result.peak), f"{format_bytes(saved)} ({100 * saved / inductor:.2f}%)" if inductor else "-",
            result.method, "yes" if result.peak <= bound else f"{100 * (result.peak - bound) / bound:.1f}% gap",
            optimum.column() if optimum else "-", format_bytes(plan.slab_bytes), f"{plan.ratio:.4f}", f"{sum(result.seconds.values()) * 1000:.0f}",
        ))
        records.append({"graph": graph.name, "nodes": graph.num_nodes, "inductor_best": inductor, "ours": result.peak,
                        "method": result.method, "lower_bound": result.lower_bound, "optimal": result.optimal,
                        "slab_bytes": plan.slab_bytes, "slab_lower_bound": plan.lower_bound, "peaks": peaks,
                        "optimum": asdict(optimum) if optimum else None})
        print(f"\r[{k}/{len(files)}] {graph.name}".ljust(60), end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print(format_table(["graph", "nodes", "baseline", "Inductor best", "ours", "saved", "method", "optimal",
                        "optimum", "slab", "slab/bound", "ms"], rows))
    never_worse = all(r["ours"] <= r["inductor_best"] for r in records)
    lower = sum(r["ours"] < r["inductor_best"] for r in records)
    print(f"\nours <= Inductor's best on every graph: {never_worse}; lower on {lower} of {len(records)}.")
    if plots:
        (out / "demo.json").write_text(json.dumps(records, indent=1) + "\n")
        print(f"plots (live bytes per step, slab layout) and demo.json in {out}/")
    return 0


def add_exact_options(p: argparse.ArgumentParser) -> None:
    from .planning.exact import DEFAULT_NODES

    p.add_argument("--exact", action="store_true",
                   help="minimise the slab with the exact packer (branch and bound) from the strategy's offsets")
    p.add_argument("--nodes", type=int, default=DEFAULT_NODES,
                   help=f"effort of the exact packer: placements tried (default {DEFAULT_NODES:,}); results depend on it, not on the machine")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reorder", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log each method's peak (INFO on the 'reorder' logger); with plan, list every buffer")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("estimate", help="peak memory of a graph's own order (file or folder of graphs)")
    p.add_argument("file")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("optimize", help="find the lowest-peak order")
    p.add_argument("file")
    p.add_argument("--json", action="store_true")
    p.add_argument("--methods", help="comma-separated, e.g. lpmf,bfs,refine (options: 'exact:max_states=10000,refine:window=10'; "
                        "'optimal:effort=30:workers=1' solves with CP-SAT, needs the exact extra)")

    from .planning import STRATEGY_NAMES

    p = sub.add_parser("plan", help="pack every buffer into one slab at static offsets")
    p.add_argument("file")
    p.add_argument("--json", action="store_true")
    p.add_argument("--strategy", default="search", choices=STRATEGY_NAMES)
    p.add_argument("--alignment", type=int, default=64)
    p.add_argument("--order", default="all", choices=["all", "best", "baseline"],
                   help="plan every method's order and keep the smallest slab (all), only the lowest-peak order, or the graph's own")
    p.add_argument("--methods", help="reordering methods whose orders are candidates (as for optimize)")
    p.add_argument("--seconds", type=float,
                   help="time budget of the search strategy (default 2), or the exact packer's wall-clock cap (default none)")
    p.add_argument("--restarts", type=int, help="cap on the search's random restarts (deterministic results)")
    p.add_argument("--exclude-inputs", action="store_true", help="leave graph inputs to the caller")
    add_exact_options(p)

    p = sub.add_parser("pack", help="pack an offset instance (CSV id,lower,upper,size)")
    p.add_argument("file")
    p.add_argument("--json", action="store_true")
    p.add_argument("--strategy", default="search", choices=STRATEGY_NAMES)
    p.add_argument("--seconds", type=float,
                   help="time budget of the search strategy (default 10), or the exact packer's wall-clock cap (default none)")
    p.add_argument("--restarts", type=int, help="cap on the search's random restarts (deterministic results)")
    add_exact_options(p)
    p.add_argument("--capacity", type=int, help="with --exact: decide whether a slab of this many bytes suffices")

    p = sub.add_parser("plot", help="draw live bytes per step and the slab layout (needs matplotlib)")
    p.add_argument("file")
    p.add_argument("--out", required=True, help="PNG file to write")
    p.add_argument("--methods", help="reordering methods (as for optimize)")
    p.add_argument("--seconds", type=float, default=1.0, help="time budget of the slab search")

    p = sub.add_parser("capture", help="run a script with the Inductor hook and save its graphs")
    p.add_argument("script")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.add_argument("--out", default="captured", help="folder for the graphs (default: ./captured)")

    p = sub.add_parser("demo", help="reorder and plan every graph in a folder, print a table, draw plots")
    p.add_argument("folder", nargs="?", default=str(BUNDLED_GRAPHS), help="default: the bundled Inductor graphs")
    p.add_argument("--out", default="demo-out", help="folder for the plots (default: ./demo-out)")
    p.add_argument("--seconds", type=float, default=0.5, help="slab search budget per order set")

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
    try:
        return COMMANDS[args.command](args)
    except ReorderError as exc:
        print(f"reorder: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
