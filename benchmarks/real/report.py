"""The real-model report, rebuilt from the cached rows of :mod:`benchmarks.real.run`.

Writes docs/real-models.md, ``summary.csv`` and ``summary.json`` next to the
rows, and one plot per model (docs/img/real/<model>.png: real allocated bytes
over one training step, stock against our hook, forward and backward marked);
the memory-budget section comes from :mod:`benchmarks.real.budget_report`.
Every memory figure in it was measured by :func:`reorder.measure.measure`
in the run that produced the row, all variants of a row in one process.

Each cached row becomes one :class:`Summary` (the numbers of one model in one
mode); each table of the report is a tuple of :class:`Column` values (a
header, how to get the cell from a summary, how to write it) rendered by
:func:`markdown`.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from reorder.inductor.session import FallbackRecord, GuardRecord, OrderRecord, SlabRecord

from ..variants import load_records
from .budget_report import budget_section
from .compile_report import CompileRounds, percent, rounds_of
from .wild_report import wild_section
from .dynamic_report import dynamic_section
from .release_report import releases_section
from .tables import (DOC, GAP, GRAPHS, IMAGES, ROOT, Column, cached_rows, largest_estimate, left, markdown, megabytes,
                     records_of)

#: PyTorch PR #134874's table lists these models; ours is set beside it.
PR_134874 = ("DebertaV2ForQuestionAnswering", "AlbertForMaskedLM", "AlbertForQuestionAnswering",
             "MobileBertForQuestionAnswering")

#: Variants that compile (their real peak is compared with stock's).
COMPILED = ("hook", "slab", "guard", "memory_planning")

#: Variants a summary keeps the figures of, in the order of the summary's columns.
SUMMARIZED = ("eager", "stock", *COMPILED)

def _sci(x: float | None) -> str:
    return "" if x is None else f"{x:.1e}"


def _three(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


def _ratio(a: int | None, b: int | None) -> float | None:
    return None if a is None or not b else a / b


def _blank(x: Any) -> str:
    return "" if x is None else str(x)


def _slashed(values: tuple) -> str:
    return " / ".join(str(v) for v in values)


def _optimum_of_largest(row: dict, graphs: Sequence[OrderRecord]) -> str:
    """The recorded optimum (``python -m benchmarks.optimum``) of the step's largest graph, as a table cell."""
    from reorder.optima import optimum_for

    captured = [g for g in graphs if g.captured is not None]
    if not captured:
        return ""
    largest = max(captured, key=lambda g: g.peak)
    return _optimum_cell(optimum_for(GRAPHS.parent / row.get("size", "bench") / f"{row['model']}_{row['mode']}"
                                     / Path(largest.captured).name))


def _optimum_cell(optimum) -> str:
    """A recorded optimum in the report's unit (MB), or empty if none was recorded."""
    return optimum.column(megabytes) if optimum else ""


@dataclass(frozen=True)
class VariantFigures:
    """One variant's measured step in one row: real peak, allocator calls, compile and step seconds."""

    real_peak: int | None
    allocations: int | None = None
    compile_seconds: float | None = None
    step_seconds: float | None = None

    @classmethod
    def of(cls, run: dict, compile_rounds: CompileRounds | None = None) -> VariantFigures:
        """A variant's figures from its run; its compile seconds the median of ``compile_rounds`` where they
        measured it (fresh processes), else the run's own."""
        fresh = compile_rounds.median_seconds(run["variant"]) if compile_rounds is not None else None
        return cls(run["real_peak"], run.get("allocations"), run["compile_seconds"] if fresh is None else fresh,
                   run["step_seconds"])


_NOT_RUN = VariantFigures(None)


@dataclass(frozen=True)
class Summary:
    """One (model, mode) row of the report: what was measured per variant and what the hook's records say.

    Estimates are the largest graph's of the step (Inductor's live-bytes
    model); ``graphs`` and ``fallbacks`` count the graphs that reached our
    pass and those it left to Inductor; ``slab_*`` and ``guard_*`` come from
    the slab and guard variants' records. Seconds are as measured; the
    tables and :meth:`to_dict` round them.
    """

    model: str
    mode: str
    batch: int | None
    parameter_bytes: int | None
    input_bytes: int | None
    variants: dict[str, VariantFigures]
    graphs: int
    inductor_baseline_estimate: int | None
    inductor_best_estimate: int | None
    our_estimate: int | None
    optimum: str
    our_pass_seconds: float | None
    fallbacks: int = 0
    slab_pool_bytes: int | None = None
    slab_fallbacks: int = 0
    slab_worst_ratio: float | None = None
    slab_largest_pool_bytes: int | None = None
    slab_bound_bytes: int | None = None
    guard_blocked: int = 0
    guard_avoided_by_reordering: int = 0
    guard_estimate: int | None = None
    guard_seconds: float = 0.0
    max_difference_to_stock: float | None = None
    eager_difference_to_stock: float | None = None
    compile_rounds: CompileRounds | None = None

    def run(self, variant: str) -> VariantFigures:
        """The variant's figures (all None where it did not run in this row)."""
        return self.variants.get(variant, _NOT_RUN)

    def peak(self, variant: str) -> int | None:
        return self.run(variant).real_peak

    def peak_ratio(self, variant: str, reference: str = "stock") -> float | None:
        return _ratio(self.peak(variant), self.peak(reference))

    def to_dict(self) -> dict:
        """The flat JSON object of ``summary.json`` and one line of ``summary.csv`` (seconds rounded)."""
        out: dict = {"model": self.model, "mode": self.mode, "batch": self.batch,
                     "parameter_bytes": self.parameter_bytes, "input_bytes": self.input_bytes}
        for name, run in self.variants.items():
            out[f"{name}_real_peak"] = run.real_peak
            out[f"{name}_allocations"] = run.allocations
            out[f"{name}_compile_seconds"] = round(run.compile_seconds, 2)
            out[f"{name}_step_seconds"] = round(run.step_seconds, 4)
        out.update(graphs=self.graphs, inductor_baseline_estimate=self.inductor_baseline_estimate,
                   inductor_best_estimate=self.inductor_best_estimate, our_estimate=self.our_estimate,
                   optimum=self.optimum, our_pass_seconds=round(self.our_pass_seconds, 3), fallbacks=self.fallbacks,
                   slab_pool_bytes=self.slab_pool_bytes, slab_fallbacks=self.slab_fallbacks,
                   slab_worst_ratio=self.slab_worst_ratio, slab_largest_pool_bytes=self.slab_largest_pool_bytes,
                   slab_bound_bytes=self.slab_bound_bytes, guard_blocked=self.guard_blocked,
                   guard_avoided_by_reordering=self.guard_avoided_by_reordering, guard_estimate=self.guard_estimate,
                   guard_seconds=round(self.guard_seconds, 3), max_difference_to_stock=self.max_difference_to_stock,
                   eager_difference_to_stock=self.eager_difference_to_stock)
        return out


def _round_counts(records: list[Summary]) -> str:
    """How many compile rounds the table's rows had, in words: one round compares one pair of processes, whose
    ratio scatters by up to a third, so a reader needs the count beside the figures."""
    counts = sorted({r.compile_rounds.count for r in records if r.compile_rounds is not None})
    with_rounds = sum(r.compile_rounds is not None for r in records)
    if not counts:
        return "no row has rounds yet"
    spread = str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    rounds = "round" if counts == [1] else "rounds"
    return f"{spread} {rounds} on {with_rounds} of {len(records)} rows"


def summary(row: dict, compile_rounds: CompileRounds | None = None) -> Summary:
    """The report's numbers of one cached row (either format of records, :func:`~benchmarks.variants.load_records`);
    ``compile_rounds``: the row's compile seconds measured in fresh processes (:mod:`benchmarks.real.compile_rounds`),
    whose medians replace the row's own, measured in one process with the other variants."""
    v = row["variants"]
    records = {name: load_records(run) for name, run in v.items()}
    hook = records.get("hook", ())
    hook_graphs = records_of(hook, OrderRecord)
    slab = records.get("slab", ())
    plans = records_of(slab, SlabRecord)
    guard = records_of(records.get("guard", ()), GuardRecord)
    diffs = row["difference_to_stock"]
    return Summary(
        model=row["model"], mode=row["mode"], batch=row["batch"], parameter_bytes=row["parameter_bytes"],
        input_bytes=row["input_bytes"],
        variants={n: VariantFigures.of(v[n], compile_rounds) for n in SUMMARIZED if n in v},
        graphs=len(hook_graphs) + len(records_of(hook, FallbackRecord, "order")),
        inductor_baseline_estimate=largest_estimate(hook, "inductor_baseline"),
        inductor_best_estimate=largest_estimate(hook, "inductor_best"),
        our_estimate=largest_estimate(hook, "ours"),
        optimum=_optimum_of_largest(row, hook_graphs),
        our_pass_seconds=sum(g.seconds for g in hook_graphs),
        fallbacks=len(records_of(hook, FallbackRecord, "order")),
        slab_pool_bytes=sum(p.pool_bytes for p in plans) if plans else None,
        slab_fallbacks=len(records_of(slab, FallbackRecord, "slab")),
        slab_worst_ratio=max((p.worst_ratio for p in plans), default=None),
        slab_largest_pool_bytes=max((max(p.pools, default=0) for p in plans), default=None),
        slab_bound_bytes=max((p.bound for p in plans), default=None),
        guard_blocked=sum(len(g.blocked) for g in guard),
        guard_avoided_by_reordering=sum(g.avoided_by_reordering for g in guard),
        guard_estimate=largest_estimate(records.get("guard", ()), "ours"),
        guard_seconds=sum(g.seconds for g in guard),
        max_difference_to_stock=max((d for name, d in diffs.items() if name in COMPILED and d is not None),
                                    default=None),
        eager_difference_to_stock=diffs.get("eager"), compile_rounds=compile_rounds)


MODEL_MODE = (left("model", lambda s: s.model), left("mode", lambda s: s.mode))


def _peak(variant: str, header: str | None = None) -> Column:
    return Column(header or variant, lambda s: s.peak(variant), megabytes)


def _peak_ratio(variant: str, reference: str = "stock") -> Column:
    return Column(f"{variant}/{reference}", lambda s: s.peak_ratio(variant, reference), _three)


def _compile_shown(s: Summary, variant: str) -> float | None:
    """A variant's compile seconds as the estimates table shows them (two decimals)."""
    seconds = s.run(variant).compile_seconds
    return None if seconds is None else round(seconds, 2)


def _step_shown(s: Summary, variant: str) -> float | None:
    seconds = s.run(variant).step_seconds
    return None if seconds is None else round(seconds, 4)


def _compile_extras(s: Summary) -> tuple[str, ...]:
    """Hook, slab and guard's compile seconds over stock's, the median over the fresh processes' rounds of their
    ratio in the same round (empty where the row has no rounds)."""
    rounds = s.compile_rounds
    return tuple("" if rounds is None else percent(rounds.extra(v)) for v in ("hook", "slab", "guard"))


def _compile_added(s: Summary) -> float | str:
    """Slab compile seconds minus hook compile seconds, as the two are shown."""
    slab, hook = _compile_shown(s, "slab"), _compile_shown(s, "hook")
    return "" if hook is None else round(slab - hook, 1)


PEAKS = (*MODEL_MODE, _peak("eager"), _peak("stock"), _peak("hook"), _peak("slab"), _peak("guard"),
         _peak("memory_planning", "pools"), _peak_ratio("hook"), _peak_ratio("slab"), _peak_ratio("guard"),
         Column("ours vs stock", lambda s: s.max_difference_to_stock, _sci),
         Column("eager vs stock", lambda s: s.eager_difference_to_stock, _sci))

ESTIMATES = (*MODEL_MODE, Column("graphs", lambda s: s.graphs),
             Column("Inductor baseline", lambda s: s.inductor_baseline_estimate, megabytes),
             Column("Inductor best", lambda s: s.inductor_best_estimate, megabytes),
             Column("ours", lambda s: s.our_estimate, megabytes), Column("optimum", lambda s: s.optimum),
             _peak("stock", "stock real"), Column("our pass s", lambda s: round(s.our_pass_seconds, 3)),
             left("compile s stock / hook / slab / guard",
                   lambda s: tuple(_compile_shown(s, v) for v in ("stock", "hook", "slab", "guard")),
                   lambda values: " / ".join(_blank(v) for v in values)),
             left("compile extra hook / slab / guard", _compile_extras, lambda xs: " / ".join(xs) if any(xs) else ""),
             left("allocations stock / slab", lambda s: (s.run("stock").allocations, s.run("slab").allocations),
                   _slashed),
             Column("slab pool MB", lambda s: s.slab_pool_bytes, megabytes), Column("guard blocked", lambda s: s.guard_blocked),
             Column("guard s", lambda s: round(s.guard_seconds, 3)))

SLAB = (*MODEL_MODE, _peak_ratio("slab"), _peak_ratio("slab", "hook"),
        Column("pools/stock", lambda s: s.peak_ratio("memory_planning"), _three),
        Column("largest pool MB", lambda s: s.slab_largest_pool_bytes, megabytes),
        Column("live-bytes bound MB", lambda s: s.slab_bound_bytes, megabytes),
        Column("allocations stock / slab", lambda s: (s.run("stock").allocations, s.run("slab").allocations), _slashed),
        Column("compile added s", _compile_added))

GUARD = (*MODEL_MODE, Column("blocked", lambda s: s.guard_blocked),
         Column("avoided by reordering", lambda s: s.guard_avoided_by_reordering),
         Column("estimate MB hook -> guard", lambda s: f"{megabytes(s.our_estimate)} -> {megabytes(s.guard_estimate)}"),
         Column("real MB hook -> guard", lambda s: f"{megabytes(s.peak('hook'))} -> {megabytes(s.peak('guard'))}"),
         Column("step s stock / guard", lambda s: (_step_shown(s, "stock"), _step_shown(s, "guard")), _slashed),
         Column("guard s", lambda s: round(s.guard_seconds, 3)))

PR_TABLE = (left("model", lambda s: s.model), Column("batch", lambda s: s.batch),
            _peak("stock", "peak baseline (MB)"), _peak("hook", "peak new (MB)"),
            Column("ratio", lambda s: s.peak_ratio("hook"), _three))

FULL_DEPTH = (*MODEL_MODE, Column("parameters MB", lambda s: s.parameter_bytes, megabytes),
              Column("graphs", lambda s: s.graphs),
              Column("Inductor baseline", lambda s: s.inductor_baseline_estimate, megabytes),
              Column("Inductor best", lambda s: s.inductor_best_estimate, megabytes),
              Column("ours", lambda s: s.our_estimate, megabytes), Column("optimum", lambda s: s.optimum),
              Column("hook real peak", lambda s: s.peak("hook"), lambda n: "not measured" if n is None else megabytes(n)),
              Column("our pass s", lambda s: s.our_pass_seconds, lambda x: "" if x is None else f"{x:.2f}"),
              Column("compile s", lambda s: s.run("hook").compile_seconds,
                     lambda x: "" if x is None else f"{x:.0f}"))


def composition(row: dict) -> list[str]:
    """Where stock's real peak and the largest graph estimate differ by more than :data:`GAP`: what the peak is made of."""
    v = row["variants"]
    stock = v.get("stock")
    estimate = largest_estimate(load_records(v["hook"]), "inductor_best") if "hook" in v else None
    if not stock or not estimate or abs(stock["real_peak"] - estimate) <= GAP * estimate:
        return []
    parts = [f"parameters and inputs (allocated before the step, not in the peak above it): "
             f"{megabytes(row['parameter_bytes'] + row['input_bytes'])} MB"]
    if stock.get("held_at_backward") is not None:
        parts.append(f"held from forward into backward (activations saved, loss): {megabytes(stock['held_at_backward'])} MB")
    if stock.get("gradient_bytes"):
        parts.append(f"gradients: {megabytes(stock['gradient_bytes'])} MB")
    for origin, nbytes in sorted(stock.get("peak_composition", {}).items(), key=lambda kv: -abs(kv[1])):
        parts.append(f"live at the peak, allocated {origin}: {megabytes(nbytes)} MB")
    no_layout = v.get("stock_no_layout_opt")
    if no_layout:
        parts.append(f"with layout_optimization=False the real peak is {megabytes(no_layout['real_peak'])} MB "
                     f"({megabytes(stock['real_peak'] - no_layout['real_peak'])} MB of channels-last copies and "
                     f"layout-dependent buffers)")
    return parts


def _marks(variant: dict) -> dict[tuple, float]:
    """What a variant's measured step did, keyed so that two variants can be matched: each compiled call's start
    and end (in call order) and each phase's start and end (seconds on the variant's own clock)."""
    marks = {}
    for k, call in enumerate(variant.get("compiled_calls", [])):
        marks[("call", k, "start")], marks[("call", k, "end")] = call["start"], call["end"]
    for name, region in variant.get("phases", {}).items():
        marks[("phase", name, "start")], marks[("phase", name, "end")] = region["start"], region["end"]
    return marks


def aligned_times(variant: dict, reference: dict) -> list[float]:
    """``variant``'s curve times on ``reference``'s clock: matched at the marks both have
    (:func:`reorder.compare.align_times`), so a variant whose step ran slower or faster lines up by what it did."""
    from reorder.compare import align_times

    ours, theirs = _marks(variant), _marks(reference)
    common = sorted(set(ours) & set(theirs), key=lambda key: theirs[key])
    return align_times([t for t, _ in variant["curve"]], [ours[k] for k in common], [theirs[k] for k in common],
                       variant["curve"][-1][0], reference["curve"][-1][0])


def plot(row: dict, path: Path) -> bool:
    """Real allocated bytes over one step, stock against our hook (and slab), phases marked; False without matplotlib.

    Every curve is drawn on stock's clock, aligned at the compiled calls and phases (:func:`aligned_times`), so an
    idle stretch of one variant never looks like memory saved."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    v = row["variants"]
    reference = v.get("stock") if v.get("stock", {}).get("curve") else None
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for name, style in (("stock", "-"), ("hook", "--"), ("slab", ":")):
        if name in v and v[name].get("curve"):
            t = aligned_times(v[name], reference) if reference else [p[0] for p in v[name]["curve"]]
            end = reference["curve"][-1][0] if reference else t[-1]
            ax.plot([x / (end or 1.0) for x in t], [y / 1e6 for _, y in v[name]["curve"]], style,
                    label=f"{name} (peak {megabytes(v[name]['real_peak'])} MB)")
    stock_curve = v.get("stock", {}).get("curve") or [[1.0, 0]]
    for phase, region in v.get("stock", {}).get("phases", {}).items():
        start, end = (region[k] / (stock_curve[-1][0] or 1.0) for k in ("start", "end"))
        ax.axvspan(start, end, alpha=0.08, color={"forward": "C0", "backward": "C1"}.get(phase, "C2"))
        ax.text(start, ax.get_ylim()[1] * 0.95, phase, fontsize=7, va="top")
    ax.set_xlabel("progress through stock's step: every variant aligned at each compiled call and phase,\n"
                  "its allocations evenly spaced between them", fontsize=8)
    ax.set_ylabel("allocated MB above start")
    ax.set_title(f"{row['model']} ({row['mode']}, batch {row['batch']})", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def full_depth_section(folder: Path) -> list[str]:
    """The published full-depth configurations (``--size full --variants hook``): estimates and the hook's real peak."""
    rows = cached_rows(folder)
    if not rows:
        return []
    lines = ["## Full depth (the published configurations, batch 8)", "",
             "Compiled once with the hook (`python -m benchmarks.real --size full --variants hook`); per step, the "
             "largest graph's estimates and the step's measured real peak under the hook.", ""]
    measured = {f"{row['model']}_{row['mode']}" for row in rows}
    captured_only = [d for d in sorted(GRAPHS.parent.joinpath("full").glob("*_*")) if d.name not in measured]
    lines += markdown(FULL_DEPTH, [summary(row) for row in rows] + [captured_summary(d) for d in captured_only])
    if captured_only:
        lines += ["", "Rows with no real peak were compiled and captured (graphs and Inductor's figures: "
                  "`python -m benchmarks.real --size full --modes train --models M --capture-only`, one step under "
                  "the hook), but timing and metering their steps under the hook did not fit in the run's time on "
                  "this machine; their estimates come from the captured graphs (ours: our default methods on them)."]
    return lines + [""]


def captured_summary(directory: Path) -> Summary:
    """A full-depth row from a capture alone: Inductor's figures and our methods on the captured graphs, no run."""
    from reorder import load_graph
    from reorder.optima import optimum_for
    from reorder.schedulers import reorder_for_peak_memory

    figures = json.loads((directory / "inductor-figures.json").read_text())
    ours, largest = max((reorder_for_peak_memory(load_graph(directory / f"{name}.json")).peak, name) for name in figures)
    model, mode = directory.name.rsplit("_", 1)
    return Summary(model=model, mode=mode, batch=None, parameter_bytes=None, input_bytes=None, variants={},
                   graphs=len(figures),
                   inductor_baseline_estimate=max(f["peak"]["baseline"] for f in figures.values()),
                   inductor_best_estimate=max(min(f["peak"].values()) for f in figures.values()),
                   our_estimate=ours, optimum=_optimum_cell(optimum_for(directory / f"{largest}.json")),
                   our_pass_seconds=None)


def _section(title: str, text: str, columns: Sequence[Column], rows: Sequence[Summary]) -> list[str]:
    """A report section: a heading, its explanation and its table."""
    return ["", f"## {title}", "", text, "", *markdown(columns, rows)]


def write_summaries(folder: Path, records: Sequence[Summary]) -> None:
    """``summary.json`` and ``summary.csv`` next to the rows (columns in the first row's order, then any others)."""
    flat = [r.to_dict() for r in records]
    with open(folder / "summary.csv", "w", newline="") as f:
        fields = sorted({k for rec in flat for k in rec}, key=lambda k: list(flat[0]).index(k) if k in flat[0] else 99)
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(flat)
    (folder / "summary.json").write_text(json.dumps(flat, indent=1) + "\n")


def write_report(folder: Path) -> None:
    rows = cached_rows(folder)
    if not rows:
        print(f"no cached rows in {folder}")
        return
    own = folder.name == "bench"  # the report's own rows: their compile seconds were measured in fresh processes
    records = [summary(r, rounds_of("main", r["model"], r["mode"]) if own else None) for r in rows]
    write_summaries(folder, records)
    lines = ["# Real models, real memory", "",
             "Generated by `python -m benchmarks.real` (bench size: a few layers and a small width, batch 8, "
             "sequence 128, 64×64 images; CPU). Every peak below is **measured**: the allocator's own events "
             "(`reorder.measure`, from the profiler's memory events), bytes allocated above the start of one "
             "call of the step, all variants of a row in the same process on the same inputs. A training step "
             "is the compiled forward and loss, `loss.backward()` and an eager `SGD.step()`.", "",
             "Variants: **eager**; **stock** `torch.compile`; **hook** `reorder.inductor.use(memory_budget=None)` (our "
             "order; `use()` itself, whose default budget of 1.0 also orders a training step by the code Inductor "
             "generates and guards its fusions, is the budget section's point at 1.0); "
             "**slab** `use(slab=True)` (our order and our pools); **guard** `use(fusion_guard=True)` (our order "
             "and our fusion guard), both without a budget too; **pools** Inductor's own `config.memory_planning=True` (inference only).", "",
             "How each option models Inductor, and the history of each fix behind these figures (what measured "
             "wrong, what changed, the figures after): [measured.md](measured.md).", "",
             "## Real allocated peak (MB) per variant", "", *markdown(PEAKS, records)]
    above = [(r.model, r.mode, v) for r in records for v in COMPILED[:3]
             if r.peak(v) is not None and r.peak(v) > r.peak("stock")]
    lines += ["", "Rows where a variant of ours allocates more than stock: "
              + (", ".join(f"{m} {mode} ({v})" for m, mode, v in above) if above else "none") + ".",
              "Ours vs stock: the largest absolute difference of any output or gradient under hook, slab, guard or "
              "Inductor's pools, relative to that tensor's largest magnitude (float reassociation in fused kernels; "
              "0 would be bitwise); eager vs stock the same for eager.", "",
              "## Estimates per graph and costs", "",
              "Largest graph of the step (Inductor's live-bytes model): Inductor's own order (baseline), the best "
              "of Inductor's methods, and ours; the optimum column is the proven minimum (or certified bound) of that graph, recorded by "
              "`python -m benchmarks.optimum benchmarks/real/graphs/bench/*`. "
              "Compile seconds are the first two calls minus two steady calls (a second call may still compile), each "
              "variant compiled in a fresh process with Inductor's caches off, once a round, one after the other "
              "(`python -m benchmarks.real.compile_rounds`): the median of its rounds ("
              + _round_counts(records) + "); `compile extra` is the median over rounds of its compile over stock's in "
              "the same round (the hook compiled without `compare=True`, as users compile it). Rows without such rounds show the seconds of the row's own "
              "process, where variants compiled one after the other share what the first built (a C++ kernel "
              "of the same source is not built twice). Step "
              "seconds are the median of three later calls.", "", *markdown(ESTIMATES, records)]
    lines += _section(
        "Slab (`use(slab=True)`)",
        "Real peaks of the slab against stock, against our hook without pools, and Inductor's own pools against "
        "stock (inference only). Largest pool: the biggest pool of any graph (pools of a graph never coexist), "
        "against the largest live bytes of the buffers pooled (no layout of them is smaller). Allocations: "
        "allocator calls in one step. Compile added: slab compile seconds minus hook compile seconds.",
        SLAB, [r for r in records if r.peak("slab") is not None])
    lines += _section(
        "Fusion guard (`use(fusion_guard=True)`)",
        "Fusions blocked (a rise beyond the slack that survives reordering) and rises the reorder pass undoes "
        "(allowed); the largest graph estimate and the real peak with our hook alone and with the guard; step "
        "seconds of stock and of the guard, measured side by side in the same process (the median of three "
        "calls; this machine is shared, so ratios near 1 are noise); the guard's own seconds.",
        GUARD, [r for r in records if r.peak("guard") is not None])
    lines += _section(
        "Beside PyTorch PR #134874",
        "The PR's table form (model, batch, peak baseline, peak new, ratio), training step, here with stock "
        "Inductor as the baseline and our hook as new, both measured.",
        PR_TABLE, [r for r in records if r.model in PR_134874 and r.mode == "train"])
    lines += ["", *budget_section()]
    lines += wild_section()
    lines += ["## Where real memory and the estimate differ by more than 5%", ""]
    for row, s in zip(rows, records, strict=True):
        parts = composition(row)
        if parts:
            lines.append(f"**{row['model']} {row['mode']}**: stock real peak {megabytes(s.peak('stock'))} MB, largest "
                         f"graph estimate {megabytes(s.inductor_best_estimate)} MB.")
            lines += [f"- {p}" for p in parts]
            lines.append("")
    lines += full_depth_section(folder.parent / "full")
    lines += dynamic_section()
    lines += releases_section()
    lines += ["## Pictures", ""]
    for row in rows:
        if row["mode"] == "train":
            path = IMAGES / f"{row['model']}.png"
            if plot(row, path):
                lines.append(f"![{row['model']}](img/real/{path.name})")
    DOC.write_text("\n".join(lines) + "\n")
    print(f"wrote {DOC.relative_to(ROOT)}, {len(records)} rows; CSV and JSON in {folder.relative_to(ROOT)}")
