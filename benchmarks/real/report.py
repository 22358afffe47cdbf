"""The real-model report, rebuilt from the cached rows of :mod:`benchmarks.real.run`.

Writes docs/real-models.md, ``summary.csv`` and ``summary.json`` next to the
rows, and one plot per model (docs/img/real/<model>.png: real allocated bytes
over one training step, stock against our hook, forward and backward marked).
Every memory figure in it was measured by :func:`reorder.measure.measure`
in the run that produced the row, all variants of a row in one process.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
GRAPHS = Path(__file__).resolve().parent / "graphs" / "bench"
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "real-models.md"
IMAGES = ROOT / "docs" / "img" / "real"

#: PyTorch PR #134874's table lists these models; ours is set beside it.
PR_134874 = ("DebertaV2ForQuestionAnswering", "AlbertForMaskedLM", "AlbertForQuestionAnswering",
             "MobileBertForQuestionAnswering")

#: Variants that compile (their real peak is compared with stock's).
COMPILED = ("hook", "slab", "guard", "memory_planning")

#: Relative difference between the real peak and the largest graph estimate that asks for a decomposition.
GAP = 0.05


def _mb(n: int | None) -> str:
    return "" if n is None else f"{n / 1e6:.2f}"


def _sci(x: float | None) -> str:
    return "" if x is None else f"{x:.1e}"


def _ratio(a: int | None, b: int | None) -> str:
    return "" if a is None or not b else f"{a / b:.3f}"


def largest_estimate(graphs: list[dict], key: str) -> int | None:
    """The largest per-graph estimate of a step: ``key`` is ``"ours"``, ``"inductor_best"`` or ``"inductor_baseline"``."""
    values = []
    for g in graphs:
        if "fallback" in g or "peak" not in g:
            continue
        if key == "ours":
            values.append(g["peak"])
        elif "inductor" in g:
            values.append(min(g["inductor"].values()) if key == "inductor_best" else g["inductor"]["baseline"])
    return max(values) if values else None


def _optimum_of_largest(row: dict, graphs: list[dict]) -> str:
    """The recorded optimum (``python -m benchmarks.optimum``) of the step's largest graph, as a table cell."""
    from reorder.optima import optimum_for

    captured = [g for g in graphs if "captured" in g and "fallback" not in g]
    if not captured:
        return ""
    largest = max(captured, key=lambda g: g["peak"])
    return _optimum_cell(optimum_for(GRAPHS.parent / row.get("size", "bench") / f"{row['model']}_{row['mode']}"
                                     / Path(largest["captured"]).name))


def _optimum_cell(optimum) -> str:
    """A recorded optimum in the report's unit (MB), or empty if none was recorded."""
    return optimum.column(_mb) if optimum else ""


def summary(row: dict) -> dict:
    """One flat record per (model, mode): the report's numbers."""
    v = row["variants"]
    hook_graphs = v.get("hook", {}).get("graphs", [])
    out = {"model": row["model"], "mode": row["mode"], "batch": row["batch"],
           "parameter_bytes": row["parameter_bytes"], "input_bytes": row["input_bytes"]}
    for name in ("eager", "stock", *COMPILED):
        if name in v:
            out[f"{name}_real_peak"] = v[name]["real_peak"]
            out[f"{name}_allocations"] = v[name].get("allocations")
            out[f"{name}_compile_seconds"] = round(v[name]["compile_seconds"], 2)
            out[f"{name}_step_seconds"] = round(v[name]["step_seconds"], 4)
    out["graphs"] = len(hook_graphs)
    out["inductor_baseline_estimate"] = largest_estimate(hook_graphs, "inductor_baseline")
    out["inductor_best_estimate"] = largest_estimate(hook_graphs, "inductor_best")
    out["our_estimate"] = largest_estimate(hook_graphs, "ours")
    out["optimum"] = _optimum_of_largest(row, hook_graphs)
    out["our_pass_seconds"] = round(sum(g.get("seconds", 0.0) for g in hook_graphs), 3)
    out["fallbacks"] = sum("fallback" in g for g in hook_graphs)
    plans = [p for p in v.get("slab", {}).get("slab_plans", []) if "fallback" not in p]
    out["slab_pool_bytes"] = sum(p["pool_bytes"] for p in plans) if plans else None
    out["slab_fallbacks"] = sum("fallback" in p for p in v.get("slab", {}).get("slab_plans", []))
    out["slab_worst_ratio"] = max((p["worst_ratio"] for p in plans), default=None)
    out["slab_largest_pool_bytes"] = max((max(p["pools"], default=0) for p in plans), default=None)
    out["slab_bound_bytes"] = max((p["bound"] for p in plans), default=None)
    guard = [g["fusion_guard"] for g in v.get("guard", {}).get("fusion_guard", [])]
    out["guard_blocked"] = sum(len(g["blocked"]) for g in guard)
    out["guard_avoided_by_reordering"] = sum(g.get("avoided_by_reordering", 0) for g in guard)
    out["guard_estimate"] = largest_estimate(v.get("guard", {}).get("graphs", []), "ours")
    out["guard_seconds"] = round(sum(g.get("seconds", 0.0) for g in guard), 3)
    diffs = row["difference_to_stock"]
    out["max_difference_to_stock"] = max((d for v, d in diffs.items() if v in COMPILED and d is not None), default=None)
    out["eager_difference_to_stock"] = diffs.get("eager")
    return out


def composition(row: dict) -> list[str]:
    """Where stock's real peak and the largest graph estimate differ by more than :data:`GAP`: what the peak is made of."""
    v = row["variants"]
    stock = v.get("stock")
    estimate = largest_estimate(v.get("hook", {}).get("graphs", []), "inductor_best")
    if not stock or not estimate or abs(stock["real_peak"] - estimate) <= GAP * estimate:
        return []
    parts = [f"parameters and inputs (allocated before the step, not in the peak above it): "
             f"{_mb(row['parameter_bytes'] + row['input_bytes'])} MB"]
    if stock.get("held_at_backward") is not None:
        parts.append(f"held from forward into backward (activations saved, loss): {_mb(stock['held_at_backward'])} MB")
    if stock.get("gradient_bytes"):
        parts.append(f"gradients: {_mb(stock['gradient_bytes'])} MB")
    for origin, nbytes in sorted(stock.get("peak_composition", {}).items(), key=lambda kv: -abs(kv[1])):
        parts.append(f"live at the peak, allocated {origin}: {_mb(nbytes)} MB")
    no_layout = v.get("stock_no_layout_opt")
    if no_layout:
        parts.append(f"with layout_optimization=False the real peak is {_mb(no_layout['real_peak'])} MB "
                     f"({_mb(stock['real_peak'] - no_layout['real_peak'])} MB of channels-last copies and "
                     f"layout-dependent buffers)")
    return parts


def plot(row: dict, path: Path) -> bool:
    """Real allocated bytes over one step, stock against our hook (and slab), phases marked; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    v = row["variants"]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for name, style in (("stock", "-"), ("hook", "--"), ("slab", ":")):
        if name in v and v[name].get("curve"):
            t, live = zip(*v[name]["curve"])
            ax.plot([x / (t[-1] or 1.0) for x in t], [y / 1e6 for y in live], style,
                    label=f"{name} (peak {_mb(v[name]['real_peak'])} MB)")
    stock_curve = v.get("stock", {}).get("curve") or [[1.0, 0]]
    for phase, region in v.get("stock", {}).get("phases", {}).items():
        start, end = (region[k] / (stock_curve[-1][0] or 1.0) for k in ("start", "end"))
        ax.axvspan(start, end, alpha=0.08, color={"forward": "C0", "backward": "C1"}.get(phase, "C2"))
        ax.text(start, ax.get_ylim()[1] * 0.95, phase, fontsize=7, va="top")
    ax.set_xlabel("fraction of the step, each variant on its own clock (stock's phases shaded)")
    ax.set_ylabel("allocated MB above start")
    ax.set_title(f"{row['model']} ({row['mode']}, batch {row['batch']})", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def full_depth_section(folder: Path) -> list[str]:
    """The published full-depth configurations (``--size full --variants hook``): estimates and the hook's real peak."""
    rows = [json.loads(p.read_text()) for p in sorted(folder.glob("*_*.json"))] if folder.is_dir() else []
    if not rows:
        return []
    lines = ["## Full depth (the published configurations, batch 8)", "",
             "Compiled once with the hook (`python -m benchmarks.real --size full --variants hook`); per step, the "
             "largest graph's estimates and the step's measured real peak under the hook.", "",
             "| model | mode | parameters MB | graphs | Inductor baseline | Inductor best | ours | optimum | hook real peak | "
             "our pass s | compile s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        hook = row["variants"]["hook"]
        graphs = hook["graphs"]
        lines.append(f"| {row['model']} | {row['mode']} | {_mb(row['parameter_bytes'])} | {len(graphs)} | "
                     f"{_mb(largest_estimate(graphs, 'inductor_baseline'))} | {_mb(largest_estimate(graphs, 'inductor_best'))} | "
                     f"{_mb(largest_estimate(graphs, 'ours'))} | {_optimum_of_largest(row, graphs)} | {_mb(hook['real_peak'])} | "
                     f"{sum(g.get('seconds', 0.0) for g in graphs):.2f} | {hook['compile_seconds']:.0f} |")
    measured = {f"{row['model']}_{row['mode']}" for row in rows}
    captured_only = [d for d in sorted(GRAPHS.parent.joinpath("full").glob("*_*")) if d.name not in measured]
    for directory in captured_only:
        lines.append(captured_row(directory))
    if captured_only:
        lines += ["", "Rows with no real peak were compiled and captured (graphs and Inductor's figures: "
                  "`python -m benchmarks.real --size full --modes train --models M --capture-only`, one step under "
                  "the hook), but timing and metering their steps under the hook did not fit in the run's time on "
                  "this machine; their estimates come from the captured graphs (ours: our default methods on them)."]
    return lines + [""]


def captured_row(directory: Path) -> str:
    """A full-depth table row from a capture alone: Inductor's figures and our methods on the captured graphs."""
    from reorder import load_graph
    from reorder.optima import optimum_for
    from reorder.schedulers import reorder_for_peak_memory

    figures = json.loads((directory / "inductor-figures.json").read_text())
    baseline = max(f["peak"]["baseline"] for f in figures.values())
    best = max(min(f["peak"].values()) for f in figures.values())
    ours, largest = max((reorder_for_peak_memory(load_graph(directory / f"{name}.json")).peak, name) for name in figures)
    optimum = optimum_for(directory / f"{largest}.json")
    model, mode = directory.name.rsplit("_", 1)
    return (f"| {model} | {mode} |  | {len(figures)} | {_mb(baseline)} | {_mb(best)} | {_mb(ours)} | "
            f"{_optimum_cell(optimum)} | not measured |  |  |")


def _section(title: str, text: str, columns: list[str], records: list[dict], cells) -> list[str]:
    """A report section: a heading, its explanation and one table row per record (model, mode, then ``cells``)."""
    lines = ["", f"## {title}", "", text, "", "| model | mode | " + " | ".join(columns) + " |",
             "|---|---|" + "---:|" * len(columns)]
    for r in records:
        lines.append(f"| {r['model']} | {r['mode']} | " + " | ".join(str(c) for c in cells(r)) + " |")
    return lines


def write_report(folder: Path) -> None:
    rows = [json.loads(p.read_text()) for p in sorted(folder.glob("*_*.json")) if p.name != "summary.json"]
    if not rows:
        print(f"no cached rows in {folder}")
        return
    records = [summary(r) for r in rows]
    with open(folder / "summary.csv", "w", newline="") as f:
        fields = sorted({k for rec in records for k in rec}, key=lambda k: list(records[0]).index(k) if k in records[0] else 99)
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(records)
    (folder / "summary.json").write_text(json.dumps(records, indent=1) + "\n")
    lines = ["# Real models, real memory", "",
             "Generated by `python -m benchmarks.real` (bench size: a few layers and a small width, batch 8, "
             "sequence 128, 64×64 images; CPU). Every peak below is **measured**: the allocator's own events "
             "(`reorder.measure`, from the profiler's memory events), bytes allocated above the start of one "
             "call of the step, all variants of a row in the same process on the same inputs. A training step "
             "is the compiled forward and loss, `loss.backward()` and an eager `SGD.step()`.", "",
             "Variants: **eager**; **stock** `torch.compile`; **hook** `reorder.inductor.use()` (our order); "
             "**slab** `use(slab=True)` (our order and our pools); **guard** `use(fusion_guard=True)` (our order "
             "and our fusion guard); **pools** Inductor's own `config.memory_planning=True` (inference only).", "",
             "## Real allocated peak (MB) per variant", "",
             "| model | mode | eager | stock | hook | slab | guard | pools | hook/stock | slab/stock | guard/stock | ours vs stock | eager vs stock |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in records:
        diff = r["max_difference_to_stock"]
        lines.append(f"| {r['model']} | {r['mode']} | {_mb(r.get('eager_real_peak'))} | {_mb(r.get('stock_real_peak'))} | "
                     f"{_mb(r.get('hook_real_peak'))} | {_mb(r.get('slab_real_peak'))} | {_mb(r.get('guard_real_peak'))} | "
                     f"{_mb(r.get('memory_planning_real_peak'))} | {_ratio(r.get('hook_real_peak'), r.get('stock_real_peak'))} | "
                     f"{_ratio(r.get('slab_real_peak'), r.get('stock_real_peak'))} | "
                     f"{_ratio(r.get('guard_real_peak'), r.get('stock_real_peak'))} | "
                     f"{_sci(diff)} | {_sci(r['eager_difference_to_stock'])} |")
    above = [(r["model"], r["mode"], v) for r in records for v in COMPILED[:3]
             if r.get(f"{v}_real_peak") is not None and r[f"{v}_real_peak"] > r["stock_real_peak"]]
    lines += ["", "Rows where a variant of ours allocates more than stock: "
              + (", ".join(f"{m} {mode} ({v})" for m, mode, v in above) if above else "none") + ".",
              "Ours vs stock: the largest absolute difference of any output or gradient under hook, slab, guard or "
              "Inductor's pools, relative to that tensor's largest magnitude (float reassociation in fused kernels; "
              "0 would be bitwise); eager vs stock the same for eager.", "",
              "## Estimates per graph and costs", "",
              "Largest graph of the step (Inductor's live-bytes model): Inductor's own order (baseline), the best "
              "of Inductor's methods, and ours; the optimum column is the proven minimum (or certified bound) of that graph, recorded by "
              "`python -m benchmarks.optimum benchmarks/real/graphs/bench/*`. "
              "Compile seconds are the first two calls minus two steady calls (a second call may still compile); step "
              "seconds are the median of three later calls.", "",
              "| model | mode | graphs | Inductor baseline | Inductor best | ours | optimum | stock real | our pass s | "
              "compile s stock / hook / slab / guard | allocations stock / slab | slab pool MB | guard blocked | guard s |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|"]
    for r in records:
        lines.append(f"| {r['model']} | {r['mode']} | {r['graphs']} | {_mb(r['inductor_baseline_estimate'])} | "
                     f"{_mb(r['inductor_best_estimate'])} | {_mb(r['our_estimate'])} | {r['optimum']} | {_mb(r.get('stock_real_peak'))} | "
                     f"{r['our_pass_seconds']} | "
                     + " / ".join(str(r.get(f"{v}_compile_seconds", "")) for v in ("stock", "hook", "slab", "guard"))
                     + f" | {r.get('stock_allocations')} / {r.get('slab_allocations')} | {_mb(r['slab_pool_bytes'])} | "
                     f"{r['guard_blocked']} | {r['guard_seconds']} |")
    lines += _section(
        "Slab (`use(slab=True)`)",
        "Real peaks of the slab against stock, against our hook without pools, and Inductor's own pools against "
        "stock (inference only). Largest pool: the biggest pool of any graph (pools of a graph never coexist), "
        "against the largest live bytes of the buffers pooled (no layout of them is smaller). Allocations: "
        "allocator calls in one step. Compile added: slab compile seconds minus hook compile seconds.",
        ["slab/stock", "slab/hook", "pools/stock", "largest pool MB", "live-bytes bound MB",
         "allocations stock / slab", "compile added s"],
        [r for r in records if r.get("slab_real_peak") is not None],
        lambda r: [_ratio(r["slab_real_peak"], r["stock_real_peak"]), _ratio(r["slab_real_peak"], r.get("hook_real_peak")),
                   _ratio(r.get("memory_planning_real_peak"), r["stock_real_peak"]), _mb(r["slab_largest_pool_bytes"]),
                   _mb(r["slab_bound_bytes"]), f"{r.get('stock_allocations')} / {r.get('slab_allocations')}",
                   (round(r["slab_compile_seconds"] - r["hook_compile_seconds"], 1)
                    if r.get("hook_compile_seconds") is not None else "")])
    lines += _section(
        "Fusion guard (`use(fusion_guard=True)`)",
        "Fusions blocked (a rise beyond the slack that survives reordering) and rises the reorder pass undoes "
        "(allowed); the largest graph estimate and the real peak with our hook alone and with the guard; step "
        "seconds of stock and of the guard, measured side by side in the same process (the median of three "
        "calls; this machine is shared, so ratios near 1 are noise); the guard's own seconds.",
        ["blocked", "avoided by reordering", "estimate MB hook -> guard", "real MB hook -> guard",
         "step s stock / guard", "guard s"],
        [r for r in records if r.get("guard_real_peak") is not None],
        lambda r: [r["guard_blocked"], r["guard_avoided_by_reordering"],
                   f"{_mb(r['our_estimate'])} -> {_mb(r['guard_estimate'])}",
                   f"{_mb(r.get('hook_real_peak'))} -> {_mb(r['guard_real_peak'])}",
                   f"{r.get('stock_step_seconds')} / {r.get('guard_step_seconds')}", r["guard_seconds"]])
    lines += ["", "## Beside PyTorch PR #134874", "",
              "The PR's table form (model, batch, peak baseline, peak new, ratio), training step, here with stock "
              "Inductor as the baseline and our hook as new, both measured.", "",
              "| model | batch | peak baseline (MB) | peak new (MB) | ratio |", "|---|---:|---:|---:|---:|"]
    for r in records:
        if r["model"] in PR_134874 and r["mode"] == "train":
            lines.append(f"| {r['model']} | {r['batch']} | {_mb(r['stock_real_peak'])} | {_mb(r.get('hook_real_peak'))} | "
                         f"{_ratio(r.get('hook_real_peak'), r['stock_real_peak'])} |")
    lines += ["", "## Where real memory and the estimate differ by more than 5%", ""]
    for row in rows:
        parts = composition(row)
        if parts:
            s = summary(row)
            lines.append(f"**{row['model']} {row['mode']}**: stock real peak {_mb(s['stock_real_peak'])} MB, largest "
                         f"graph estimate {_mb(s['inductor_best_estimate'])} MB.")
            lines += [f"- {p}" for p in parts]
            lines.append("")
    lines += full_depth_section(folder.parent / "full")
    lines += ["## Pictures", ""]
    for row in rows:
        if row["mode"] == "train":
            path = IMAGES / f"{row['model']}.png"
            if plot(row, path):
                lines.append(f"![{row['model']}](img/real/{path.name})")
    DOC.write_text("\n".join(lines) + "\n")
    print(f"wrote {DOC.relative_to(ROOT)}, {len(records)} rows; CSV and JSON in {folder.relative_to(ROOT)}")
