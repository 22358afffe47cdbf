"""The benchmark suite: every model of the zoo, every method, side by side with torch's own functions.

    python -m benchmarks.suite [--batch 2] [--models resnet,gpt] [--recapture] [--out report]

1. **Capture** (cached). Each zoo model is compiled with ``torch.compile``
   through the Inductor hook, in inference (forward) and training (forward
   and backward); every graph is written in torch's simulator format with
   Inductor's own per-method figures to ``benchmarks/graphs/b<batch>/``. A
   rerun reads the files instead of recompiling (``--recapture`` forces it).
2. **Compare**, in one process, on every graph: torch's own
   ``topological_sort_lpmf/bfs/dfs`` and ``estimate_peak_memory`` (on
   stand-in nodes, :mod:`reorder.inductor.figures`) against our methods, then our
   slab plan of the best orders.
3. **Scale**: synthetic layered graphs from 1k to 100k nodes, narrow and wide;
   seconds per method for ours and torch's (torch's runs stop where the
   quadratic LPMF would take longer than ``--torch-limit`` seconds).
4. **Write** ``report.md`` (the tables), ``results.csv``, ``results.json``,
   ``scaling.png`` (log-log) and one PNG per graph under ``plots/``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

from reorder import load_graph
from reorder.planning import plan_orders
from reorder.report import format_bytes, markdown_table
from reorder.schedulers import INDUCTOR_METHODS, bfs_order, dfs_order, lpmf_order, reorder_for_peak_memory
from reorder.schedulers.across_sizes import INDUCTOR_ORDERS
from reorder.timeline import estimate_peak_memory
from reorder.inductor.figures import torch_reference
from reorder.optima import optimum_for

from .progress import progress
from .synthetic import layered_graph
from .timing import timed
from .zoo import MODELS, make

HERE = Path(__file__).resolve().parent
MODES = ("infer", "train")


def capture(model: str, mode: str, batch: int, cache: Path) -> list[str]:
    """Compile ``model`` through the hook; save its graphs as ``<model>_<mode>_<k>.json``; return their names."""
    import torch
    import torch._inductor.config as config

    from reorder import inductor

    config.force_disable_caches = True
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")  # we disable caches on purpose
    torch._dynamo.reset()
    net, inputs = make(model, batch)
    with tempfile.TemporaryDirectory() as tmp:
        with inductor.use(capture_dir=tmp, memory_budget=None):
            compiled = torch.compile(net)
            if mode == "infer":
                net.eval()
                with torch.no_grad():
                    compiled(*inputs)
            else:
                compiled(*inputs).float().sum().backward()
        figures = json.loads((Path(tmp) / "inductor-figures.json").read_text())
        names = []
        index = cache / "figures.json"
        saved = json.loads(index.read_text()) if index.exists() else {}
        for k, graph in enumerate(figures):
            name = f"{model}_{mode}_{k}"
            shutil.copy(Path(tmp) / f"{graph}.json", cache / f"{name}.json")
            saved[name] = figures[graph]
            names.append(name)
        index.write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")
    torch._dynamo.reset()
    return names


def compare(path: Path, figures: dict, plots: Path | None) -> dict:
    """One graph: torch's methods and ours side by side, and the slab."""
    graph = load_graph(path)
    reference = torch_reference(graph)
    theirs = reference.run_all()
    mismatch = [m for m in INDUCTOR_METHODS if figures and
                theirs["peak"][m] != figures["peak"][f"topological_sort_{m}"]]
    t0 = time.perf_counter()
    result = reorder_for_peak_memory(graph)
    ours_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan_method, plan = plan_orders(graph, result.orders)
    plan_seconds = time.perf_counter() - t0
    inductor_best = min(theirs["peak"].values())
    if plots is not None:
        from reorder.plot import plot_graph

        plot_graph(graph, list(range(graph.num_nodes)), result.order, result.method, plan,
                   plots / f"{graph.name}.png", result.lower_bound)
    return {
        "graph": graph.name,
        "nodes": graph.num_nodes,
        "inductor_baseline": theirs["peak"]["baseline"],
        "inductor_lpmf": theirs["peak"]["lpmf"],
        "inductor_bfs": theirs["peak"]["bfs"],
        "inductor_dfs": theirs["peak"]["dfs"],
        "inductor_best": inductor_best,
        "ours": result.peak,
        "method": result.method,
        "ratio": result.peak / inductor_best if inductor_best else 1.0,
        "lower_bound": result.lower_bound,
        "optimal": result.optimal,
        "slab_bytes": plan.slab_bytes,
        "slab_bound": plan.lower_bound,
        "slab_ratio": plan.ratio,
        "slab_order": plan_method,
        "inductor_seconds": sum(theirs["seconds"].values()),
        "ours_seconds": ours_seconds,
        "ours_fast_seconds": sum(result.seconds[m] for m in INDUCTOR_ORDERS),
        "plan_seconds": plan_seconds,
        "figures_match": not mismatch,
        "peaks": result.peaks,
        "optimum": optimum_cell(path),
    }


def optimum_cell(path: Path) -> str:
    """The "optimum" cell of a graph file: its recorded optimum or certified bound, "-" if none was recorded."""
    optimum = optimum_for(path)
    return optimum.column() if optimum else "-"


def scaling(sizes: list[int], torch_limit: float) -> list[dict]:
    """Seconds per method against N, ours and torch's, narrow (width 4) and wide (width N/10) layered graphs."""
    ours = {"lpmf": lpmf_order, "bfs": bfs_order, "dfs": dfs_order}
    rows = []
    jobs = [(shape, n) for shape in ("narrow", "wide") for n in sizes]
    last_torch: dict[tuple[str, str], tuple[int, float]] = {}
    for shape, n in progress(jobs, "scaling"):
        graph = layered_graph(n, 4 if shape == "narrow" else max(1, n // 10), fan_in=1 if shape == "wide" else 2)
        reference = torch_reference(graph)
        row = {"shape": shape, "nodes": graph.num_nodes}
        for method, fn in ours.items():
            order, row[f"ours_{method}"] = timed(lambda: fn(graph))
            previous = last_torch.get((shape, method))
            projected = previous[1] * (n / previous[0]) ** 2 if previous else 0.0
            if projected > torch_limit:
                row[f"torch_{method}"] = None
                continue
            sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * n + 1000))
            try:
                theirs, row[f"torch_{method}"] = timed(reference.method(method))
                last_torch[(shape, method)] = (n, row[f"torch_{method}"])
                row[f"same_{method}"] = theirs == order
            except RecursionError:
                row[f"torch_{method}"] = None
                row[f"same_{method}"] = "RecursionError"
        row["ours_estimate"] = timed(lambda: estimate_peak_memory(graph))[1]
        row["torch_estimate"] = timed(reference.estimate)[1]
        rows.append(row)
    return rows


def plot_scaling(rows: list[dict], out: Path) -> None:
    from reorder.plot import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True, sharey=True)
    for ax, shape in zip(axes, ("narrow", "wide")):
        data = [r for r in rows if r["shape"] == shape]
        for k, method in enumerate(("lpmf", "bfs", "dfs", "estimate")):
            color = f"C{k}"
            for who, style in (("ours", "-o"), ("torch", "--x")):
                points = [(r["nodes"], r[f"{who}_{method}"]) for r in data if r.get(f"{who}_{method}")]
                if points:
                    ax.loglog(*zip(*points), style, color=color, label=f"{who} {method}")
        ax.set_title(f"{shape} layered graphs")
        ax.set_xlabel("nodes")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("seconds")
    axes[1].legend(fontsize=8, ncol=2)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def write_report(out: Path, batch: int, rows: list[dict], scale_rows: list[dict], seconds: float) -> None:
    table = [(r["graph"], batch, r["nodes"], format_bytes(r["inductor_baseline"]), format_bytes(r["inductor_best"]),
              format_bytes(r["ours"]), f"{r['ratio']:.4f}", r["method"], r["optimum"], format_bytes(r["slab_bytes"]),
              f"{r['slab_ratio']:.4f}", f"{r['ours_fast_seconds'] * 1000:.1f} / {r['inductor_seconds'] * 1000:.1f}",
              f"{r['ours_seconds'] * 1000:.0f}")
             for r in rows]
    lines = [f"# reorder benchmark report (batch {batch})", "",
             "Peaks are Inductor 2.13's live-bytes model. *Inductor best* is the lowest of its baseline, LPMF, BFS and "
             "DFS (torch's own functions, run on the same graph). *ratio* is ours / Inductor best. *slab / bound* is the "
             "planned slab over the live-bytes lower bound of its order (64-byte alignment). *ms ours / torch* times "
             "the same work (baseline estimate + LPMF + BFS + DFS) in one process; *all ms* adds our refine and exact "
             "methods. *optimum* is the minimum peak over every order, proven by the `optimal` method (the exact peak search, then CP-SAT where it cannot finish) and "
             "recorded by `python -m benchmarks.optimum` (or the certified bound where it was not proven).", "",
             markdown_table(["graph", "batch", "nodes", "Inductor baseline", "Inductor best", "ours", "ratio", "method",
                             "optimum", "slab", "slab / bound", "ms ours / torch", "all ms"], table), ""]
    lower = [r for r in rows if r["ours"] < r["inductor_best"]]
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows)) if rows else 1.0
    lines += [f"Lower than Inductor on {len(lower)} of {len(rows)} graphs; never higher: "
              f"{all(r['ours'] <= r['inductor_best'] for r in rows)}; geomean ratio {geo:.4f}; "
              f"torch figures reproduced on every graph: {all(r['figures_match'] for r in rows)}.", ""]
    if scale_rows:
        srows = []
        for r in scale_rows:
            cells = [r["shape"], r["nodes"]]
            for m in ("lpmf", "bfs", "dfs", "estimate"):
                theirs = r.get(f"torch_{m}")
                cells.append(f"{r[f'ours_{m}']:.3f} / " + (f"{theirs:.3f}" if theirs else "skipped"))
            srows.append(cells)
        lines += ["## Scaling (seconds, ours / torch)", "", markdown_table(["shape", "nodes", "lpmf", "bfs", "dfs", "estimate"], srows),
                  "", "torch runs are skipped where the previous size projects (quadratically) past the limit. "
                  "![scaling](scaling.png)", ""]
    lines += [f"Report written in {seconds:.0f} s by `python -m benchmarks.suite --batch {batch}`.", ""]
    (out / "report.md").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--recapture", action="store_true", help="recompile even where cached graphs exist")
    parser.add_argument("--cache", default=None, help="graph cache folder (default: benchmarks/graphs/b<batch>)")
    parser.add_argument("--out", default="report")
    parser.add_argument("--scale", default="1000,3000,10000,30000,100000", help="node counts; empty to skip")
    parser.add_argument("--torch-limit", type=float, default=30.0, help="skip torch's runs projected past this")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    cache = Path(args.cache) if args.cache else HERE / "graphs" / f"b{args.batch}"
    cache.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plots = None if args.no_plots else out / "plots"
    if plots is not None:
        plots.mkdir(exist_ok=True)

    jobs = [(m, mode) for m in args.models.split(",") for mode in args.modes.split(",")]
    for model, mode in progress(jobs, "capture"):
        if args.recapture or not list(cache.glob(f"{model}_{mode}_*.json")):
            capture(model, mode, args.batch, cache)
    figures = json.loads((cache / "figures.json").read_text())
    wanted = {f"{m}_{mode}" for m, mode in jobs}
    files = sorted(p for p in cache.glob("*_*_*.json") if p.stem.rsplit("_", 1)[0] in wanted)
    rows = [compare(p, figures.get(p.stem, {}), plots) for p in progress(files, "compare")]
    sizes = [int(x) for x in args.scale.split(",") if x]
    scale_rows = scaling(sizes, args.torch_limit) if sizes else []
    if scale_rows and plots is not None:
        plot_scaling(scale_rows, out / "scaling.png")
    (out / "results.json").write_text(json.dumps({"graphs": rows, "scaling": scale_rows}, indent=1) + "\n")
    with open(out / "results.csv", "w", newline="") as f:
        fields = [k for k in rows[0] if k != "peaks"] if rows else []
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    write_report(out, args.batch, rows, scale_rows, time.perf_counter() - start)
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
