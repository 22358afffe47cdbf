"""The memory-budget section of docs/real-models.md and its plots, from the rows of :mod:`benchmarks.real.budget`.

Each cached row becomes one :class:`BudgetRow`: per variant (stock, ours at each fraction, Inductor's
``activation_memory_budget`` at each fraction) the measured real peak and median step time, and for ours the
partition records. The section states, per row, the checks the feature promises (each computed here from the
measurements, none assumed):

* **monotone**: our real peak does not rise as the budget falls (beyond 0.5%, the run-to-run noise allowed);
* **within budget**: where our records say a budget is met (by the partition's estimate and by the compiled
  graphs' check, :mod:`reorder.inductor.compiled_budget`), the real peak is at most 2% above the budget's bytes;
* **at 1.0**: our real peak is at most stock's;
* **as close as eager**: our largest difference to stock (loss and gradients) is at most eager's on the same step;
* **as accurate as stock**: every loss and gradient of ours passes PyTorch's own accuracy rule against stock's,
  with a float64 eager run of the step as the reference (``torch._dynamo.utils.same``,
  :func:`benchmarks.real.run.as_accurate`): the check the previous one approximates, without dividing rounding by
  rounding where a gradient is zero in exact arithmetic;
* **Inductor points matched**: for how many of the fractions Inductor's budget ran at (ours, and 0.9 ... 0.0 on
  the rows measured since :data:`INDUCTOR_GRID`) one of our points has a real peak at or below Inductor's and a
  step time at most 5% above it: the median, over the rounds, of our step's time over Inductor's in the same
  round (both ran in every round, one after the other, so a slow stretch of the shared machine falls on both);
  **ours lowest <= Inductor's**: our lowest real peak at or below the lowest of all of Inductor's points.

Plots (``docs/img/real/budget-<model>.png``): real peak against median step time, our points and Inductor's,
each labelled with its fraction, stock marked.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from reorder.inductor.session import PartitionRecord

from ..variants import load_records
from .compile_report import CompileRounds, percent, rounds_of
from .tables import IMAGES, RESULTS, Column, cached_rows, count_of, details_with_plots, left, markdown, megabytes

__all__ = ["INDUCTOR_GRID", "BudgetRow", "budget_row", "budget_rows", "budget_section", "cuda_table",
           "inductor_table", "plot_budget", "round_ratio", "step_figures", "time_ratio"]

BUDGETS = RESULTS / "budget"

#: The fractions Inductor's budget runs at besides ours (:func:`benchmarks.real.budget.variants_for`): what a user
#: of ``activation_memory_budget`` would try.
INDUCTOR_GRID = tuple(round(0.1 * k, 1) for k in range(9, -1, -1))

#: Real-peak noise allowed by the monotone check; slack of a feasible budget; step-time slack of dominance.
NOISE, OVER_BUDGET, SLOWER = 0.005, 0.02, 0.05


@dataclass(frozen=True)
class Point:
    """One variant of a row: its kind, fraction, real peak, median step seconds, and (ours) what its records say."""

    name: str
    kind: str
    fraction: float | None
    real_peak: int
    step_seconds: float
    difference_to_stock: float | None
    step_times: tuple[float, ...] = ()
    budget_bytes: int | None = None
    estimate: int | None = None
    feasible: bool | None = None
    compiled_estimate: int | None = None
    as_accurate_as_stock: bool | None = None
    error_to_stocks: float | None = None


@dataclass(frozen=True)
class BudgetRow:
    """One model's budget run: stock, our points and Inductor's, and the checks of the module docstring."""

    model: str
    stock: Point
    ours: tuple[Point, ...]
    inductor: tuple[Point, ...]
    compiles_after_context: int
    eager_difference: float | None = None
    compile_rounds: CompileRounds | None = None

    def _above(self, a: int, b: int, slack: float) -> bool:
        return a > b * (1 + slack)

    @property
    def monotone(self) -> bool:
        peaks = [p.real_peak for p in self.ours]  # fractions falling
        return all(not self._above(b, a, NOISE) for a, b in zip(peaks, peaks[1:]))

    @property
    def within_budget(self) -> bool:
        return all(not self._above(p.real_peak, p.budget_bytes, OVER_BUDGET) for p in self.ours if p.feasible)

    @property
    def verdicts_agree(self) -> bool:
        """Every verdict agrees with the meter within 2%: called met, the real peak is at most 2% above the budget;
        called not met, it is at least 98% of it (points without a verdict left out)."""
        return self.within_budget and all(not self._above(p.budget_bytes * (1 - OVER_BUDGET), p.real_peak, 0)
                                          for p in self.ours if p.feasible is False)

    @property
    def full_not_above_stock(self) -> bool:
        full = next((p for p in self.ours if p.fraction == 1.0), None)
        return full is not None and full.real_peak <= self.stock.real_peak

    def dominating(self, theirs: Point) -> Point | None:
        """Our fastest point, relative to ``theirs`` (:func:`time_ratio`), with a real peak at or below theirs and
        at most 5% slower; None if there is none."""
        fits = [p for p in self.ours if p.real_peak <= theirs.real_peak and time_ratio(p, theirs) <= 1 + SLOWER]
        return min(fits, key=lambda p: time_ratio(p, theirs), default=None)

    @property
    def matched(self) -> tuple[int, int]:
        """How many of Inductor's points one of ours dominates (:meth:`dominating`), of how many."""
        return sum(1 for p in self.inductor if self.dominating(p) is not None), len(self.inductor)

    @property
    def lowest(self) -> Point:
        return min(self.ours, key=lambda p: p.real_peak)

    @property
    def on_the_grid(self) -> bool:
        """Inductor's budget ran at every fraction of :data:`INDUCTOR_GRID`, not only at ours (rows measured
        before the grid was added have ours only)."""
        return set(INDUCTOR_GRID) <= {p.fraction for p in self.inductor}

    @property
    def inductor_lowest(self) -> int | None:
        """The lowest real peak of Inductor's points; None without them."""
        return min((p.real_peak for p in self.inductor), default=None)

    @property
    def lowest_not_above_inductors(self) -> bool | None:
        """Our lowest real peak at or below the lowest of Inductor's points; None without Inductor's points."""
        return None if self.inductor_lowest is None else self.lowest.real_peak <= self.inductor_lowest

    @property
    def saving(self) -> float:
        """Our lowest real peak below stock's, as a fraction of stock's."""
        return 1 - self.lowest.real_peak / self.stock.real_peak

    def errors(self) -> list[float]:
        """Our points' real peak against their estimate, ``real / estimate - 1``, fractions falling."""
        return [p.real_peak / p.estimate - 1 for p in self.ours if p.estimate]

    def compiled_errors(self) -> list[float]:
        """Our points' real peak against the compiled graphs' estimate (fractions falling; points without one
        left out)."""
        return [p.real_peak / p.compiled_estimate - 1 for p in self.ours if p.compiled_estimate]

    @property
    def largest_difference(self) -> float:
        return _largest_difference((*self.ours, *self.inductor))

    @property
    def our_largest_difference(self) -> float:
        return _largest_difference(self.ours)

    @property
    def as_close_as_eager(self) -> bool | None:
        """Our largest difference to stock at most eager's difference to stock on the same step (the tolerance the
        benchmark's main table states for that model: two correct programs of the same step differ that much);
        None where that row was not measured."""
        return None if self.eager_difference is None else self.our_largest_difference <= self.eager_difference

    @property
    def as_accurate_as_stock(self) -> bool | None:
        """Every point of ours passes PyTorch's accuracy rule against stock with the float64 reference
        (:func:`benchmarks.real.run.as_accurate`); None where a point was measured before the rule was."""
        verdicts = [p.as_accurate_as_stock for p in self.ours]
        return None if None in verdicts else all(verdicts)

    @property
    def error_to_stocks(self) -> float | None:
        """The largest, over our points and tensors, of our distance to the float64 reference over stock's."""
        ratios = [p.error_to_stocks for p in self.ours]
        return None if None in ratios or not ratios else max(ratios)


def _largest_difference(points) -> float:
    """The largest difference of the loss or a gradient to stock's over ``points`` (0 where none was measured)."""
    return max((p.difference_to_stock or 0.0 for p in points), default=0.0)


def time_ratio(ours: Point, theirs: Point) -> float:
    """The median over rounds of our step time over theirs in the same round (the ratio of medians where the
    rounds are not known)."""
    return round_ratio(ours.step_times, theirs.step_times, ours.step_seconds, theirs.step_seconds)


def round_ratio(mine: Sequence[float], theirs: Sequence[float], my_median: float, their_median: float) -> float:
    """One step's time over another's: the median over rounds of their ratio in the same round, where both were
    timed in the same rounds (``mine``, ``theirs``); else ``my_median / their_median``."""
    if mine and len(mine) == len(theirs):
        return statistics.median(a / b for a, b in zip(mine, theirs))
    return my_median / their_median


def step_figures(partitions: list[PartitionRecord]) -> dict:
    """The step's byte budget, estimated peak and feasibility from the records of its regions.

    Each region's ``peak`` already counts what earlier regions hold (``held_before``), so the step's estimated
    peak is the highest of them; a fraction's bytes are the fraction of each region's stock peak, so the step's
    are those of the region whose stock peak is highest (the step's stock estimate), the highest of them (an
    int budget gives every region the same bytes). The step meets its budget when its highest estimate does:
    each region's compiled graphs' estimate where they were checked, else its partition's (a region may exceed
    its own share while the step, whose peak is another region's, stays within the step's budget; the meter
    measures the step). That highest estimate is the step's
    compiled estimate where any region's compiled graphs were checked (GPT-2's loss region, compiled after the
    model's, is not: its inputs include the logits, which Inductor's model of them leaves out)."""
    budget = max(r.budget_bytes for r in partitions)
    step = max(r.peak if r.compiled_peak is None else r.compiled_peak for r in partitions)
    checked = any(r.compiled_peak is not None for r in partitions)
    return {"budget_bytes": budget, "estimate": max(r.peak for r in partitions), "feasible": step <= budget,
            "compiled_estimate": step if checked else None}


def eager_difference(model: str, size: str) -> float | None:
    """Eager's largest difference to stock on ``model``'s training step, from the main table's cached row."""
    path = RESULTS / size / f"{model}_train.json"
    return json.loads(path.read_text())["difference_to_stock"].get("eager") if path.exists() else None


def budget_row(row: dict, compile_rounds: CompileRounds | None = None) -> BudgetRow:
    """A cached row (``benchmarks/real/results/budget/<model>.json``) as a :class:`BudgetRow`; ``compile_rounds``:
    its variants' compile seconds measured in fresh processes (:mod:`benchmarks.real.compile_rounds`)."""
    points = []
    for name, v in row["variants"].items():
        partitions = [r for r in load_records(v) if isinstance(r, PartitionRecord)]
        extra = {}
        if partitions:  # a step of several regions: the step's figures (:func:`step_figures`)
            extra = step_figures(partitions)
        points.append(Point(name, v["kind"], v["fraction"], v["real_peak"], v["step_seconds"],
                            v["difference_to_stock"], tuple(v.get("step_times", ())), **extra,
                            as_accurate_as_stock=v.get("as_accurate_as_stock"),
                            error_to_stocks=v.get("error_to_stocks")))
    by_fraction = lambda p: -(p.fraction or 0.0)  # noqa: E731
    return BudgetRow(row["model"], next(p for p in points if p.kind == "stock"),
                     tuple(sorted((p for p in points if p.kind == "ours"), key=by_fraction)),
                     tuple(sorted((p for p in points if p.kind == "inductor"), key=by_fraction)),
                     row.get("compiles_after_context", 0), eager_difference(row["model"], row["size"]),
                     compile_rounds)


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f}"


def _signed(x: float | None) -> str:
    return "" if x is None else f"{x:+.1%}"


def _span(xs: list[float]) -> str:
    return f"{min(xs):+.1%} .. {max(xs):+.1%}" if xs else ""


def _yes(flag: bool) -> str:
    return "yes" if flag else "**no**"


SUMMARY = (left("model", lambda r: r.model), Column("stock MB", lambda r: r.stock.real_peak, megabytes),
           Column("ours lowest MB", lambda r: r.lowest.real_peak, megabytes),
           Column("below stock", lambda r: r.saving, lambda x: f"{x:.1%}"),
           Column("at fraction", lambda r: r.lowest.fraction, lambda f: f"{f:g}"),
           Column("Inductor's lowest MB", lambda r: r.inductor_lowest, megabytes),
           Column("Inductor's fractions", lambda r: r.on_the_grid, lambda f: "ours, 0.9 … 0.0" if f else "ours"),
           Column("ours lowest <= Inductor's", lambda r: r.lowest_not_above_inductors,
                  lambda f: "" if f is None else _yes(f)),
           Column("monotone", lambda r: r.monotone, _yes), Column("within budget", lambda r: r.within_budget, _yes),
           Column("verdicts agree", lambda r: r.verdicts_agree, _yes),
           Column("1.0 <= stock", lambda r: r.full_not_above_stock, _yes),
           Column("Inductor points matched", lambda r: r.matched, count_of),
           Column("real vs est. at 1.0", lambda r: r.errors()[0] if r.errors() else None, _signed),
           Column("real vs est. below 1.0", lambda r: r.errors()[1:], _span),
           Column("real vs compiled est.", lambda r: r.compiled_errors(), _span),
           Column("largest difference to stock", lambda r: r.largest_difference, lambda x: f"{x:.1e}"),
           Column("eager's difference to stock", lambda r: r.eager_difference, lambda x: f"{x:.1e}"),
           Column("ours within eager's", lambda r: r.as_close_as_eager, lambda f: "" if f is None else _yes(f)),
           Column("error vs stock's (float64 ref.)", lambda r: r.error_to_stocks,
                  lambda x: "" if x is None else f"{x:.2f}x"),
           Column("as accurate as stock", lambda r: r.as_accurate_as_stock, lambda f: "" if f is None else _yes(f)))


def _detail(row: BudgetRow) -> list[str]:
    """One model's table: per fraction, ours (budget, estimate, feasible, real peak, step) beside Inductor's, and
    the point of ours that dominates Inductor's there; a fraction only one side ran at leaves the other's cells
    empty."""
    mine = {p.fraction: p for p in row.ours}
    theirs = {p.fraction: p for p in row.inductor}
    lines = [f"**{row.model}**: stock {megabytes(row.stock.real_peak)} MB, {_ms(row.stock.step_seconds)} ms per step"
             + (f" ({row.compiles_after_context} compiles after the variants' first two steps: their timings "
                f"may include them)" if row.compiles_after_context else ""), "",
             "| fraction | budget MB | ours est. MB | compiled est. MB | met | ours real MB | ours ms | Inductor real MB "
             "| Inductor ms | our point at or below it (time against Inductor's) |",
             "|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    for fraction in sorted(mine.keys() | theirs.keys(), reverse=True):
        p, other = mine.get(fraction), theirs.get(fraction)
        ours = ["", "", "", "", "", ""] if p is None else [
            megabytes(p.budget_bytes), megabytes(p.estimate), megabytes(p.compiled_estimate),
            "" if p.feasible is None else ("yes" if p.feasible else "no"), megabytes(p.real_peak),
            _ms(p.step_seconds)]
        cells = [f"{fraction:g}", *ours, megabytes(other.real_peak) if other else "",
                 _ms(other.step_seconds) if other else "",
                 _against(row.dominating(other) if other else None, other)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _against(ours: Point | None, theirs: Point | None) -> str:
    if theirs is None:
        return ""
    return f"{ours.fraction:g} ({time_ratio(ours, theirs):.2f}x)" if ours else "**none**"


def plot_budget(row: BudgetRow, path: Path,
                xlabel: str = "median step time (ms), alternating in one process") -> bool:
    """Real peak against step time, ours and Inductor's, each point labelled with its fraction; False without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for points, style, label in ((row.ours, "o-", "ours: use(memory_budget=f)"),
                                 (row.inductor, "s--", "Inductor: activation_memory_budget=f")):
        if not points:
            continue
        ax.plot([p.step_seconds * 1e3 for p in points], [p.real_peak / 1e6 for p in points], style, label=label)
        for p in points:
            ax.annotate(f"{p.fraction:g}", (p.step_seconds * 1e3, p.real_peak / 1e6), textcoords="offset points",
                        xytext=(4, 3), fontsize=7)
    ax.plot([row.stock.step_seconds * 1e3], [row.stock.real_peak / 1e6], "k*", markersize=10, label="stock")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("real peak (MB above the step's start)")
    ax.set_title(f"{row.model}: training step under a memory budget", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def budget_rows(folder: Path = BUDGETS) -> list[BudgetRow]:
    """Every cached row, by model name (the report's own rows with their compile rounds)."""
    own = folder == BUDGETS
    return [budget_row(row, rounds_of("budget", row["model"], "train") if own else None)
            for row in cached_rows(folder)]


def _budget_fraction(spec: str) -> float:
    """The fraction a variant of ours or Inductor's asks for (``budget:0.467+held=...``, ``inductor-budget:0.467``
    -> 0.467), as ``reorder compare`` reads its spec."""
    from reorder.compare import Variant

    variant = Variant.parse(spec)
    return variant.hook["memory_budget"] if variant.hook else dict(variant.functorch)["activation_memory_budget"]


def compile_costs(rows: Sequence[BudgetRow]) -> list[str]:
    """What the budget costs a compile and gives a step, per row measured in compile rounds: stock's compile
    seconds (the median of its rounds), ours at 1.0 (real peak and step time against stock's, from the row's
    alternation; compile seconds against stock's in the same round, and of them our stages), ours at the row's
    lowest fraction and Inductor's budget at that fraction (compile against stock's), and the C++ kernels each
    built."""
    timed = [r for r in rows if r.compile_rounds is not None]
    if not timed:
        return []
    lines = ["| model | stock compile s | rounds | ours 1.0: real peak vs stock | step vs stock | compile extra | "
             "of it our stages | ours lowest: fraction | compile extra | of it our stages | "
             "Inductor's at that fraction: compile extra | C++ kernels built: stock / 1.0 / lowest / Inductor's |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in timed:
        rounds = row.compile_rounds
        ours = {_budget_fraction(v): v for v in rounds.ours()}
        full, lowest = ours.get(1.0), min((f for f in ours if f < 1.0), default=None)
        at_one = next((p for p in row.ours if p.fraction == 1.0), None)
        theirs = next((v for v in rounds.inductors() if lowest is not None and _budget_fraction(v) == lowest), None)
        stock = rounds.median_seconds("stock")
        cells = [row.model, "failed" if stock is None else f"{stock:.1f}", str(rounds.count),
                 "" if at_one is None else percent(at_one.real_peak / row.stock.real_peak - 1, True),
                 "" if at_one is None else percent(time_ratio(at_one, row.stock) - 1, True),
                 "" if full is None else percent(rounds.extra(full)),
                 "" if full is None else percent(rounds.stages_share(full), False),
                 "" if lowest is None else f"{lowest:g}",
                 "" if lowest is None else percent(rounds.extra(ours[lowest])),
                 "" if lowest is None else percent(rounds.stages_share(ours[lowest]), False),
                 "" if theirs is None else percent(rounds.extra(theirs)),
                 _kernels(rounds, ["stock", full, lowest and ours[lowest], theirs])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _kernels(rounds: CompileRounds, variants: list[str | None]) -> str:
    """The C++ kernels each of ``variants`` built, ``a / b / c / d`` (``-`` for one not compiled); empty where the
    rounds did not count them."""
    counts = [rounds.kernels_built(v) if v else "" for v in variants]
    return "" if not any(counts) else " / ".join(c or "-" for c in counts)


def inductor_table(folder: Path = BUDGETS) -> list[str]:
    """The table docs/measured.md shows: the section's summary, one line per training row."""
    rows = budget_rows(folder)
    return ["Measured with `python -m benchmarks.real.budget` (docs/real-models.md has each row's fractions, "
            "step times and a plot): the training step of every bench-size row, real peaks from the allocator's "
            "events, ours and Inductor's `activation_memory_budget` at the same fractions (and, on the rows whose "
            "`Inductor's fractions` say so, Inductor's at 0.9, 0.8, …, 0.0 as well), side by side in one process.",
            "", *markdown(SUMMARY, rows)] if rows else []


def _allocator(v: dict, key: str) -> int | None:
    return (v.get("cuda") or {}).get(key)


def cuda_table(folders: list[Path] | None = None) -> list[str]:
    """The table docs/measured.md shows for the rows measured on a GPU (``--device cuda``, every
    ``budget-cuda-torch<release>`` folder): per row, stock's, ours at 1.0 and at our lowest fraction, and Inductor's
    at that fraction and at its lowest, each as ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``
    over one step (MB), with the median step time."""
    lines = []
    for folder in sorted(RESULTS.glob("budget-cuda-torch*")) if folders is None else folders:
        for row in cached_rows(folder):
            variants = row["variants"]
            stock = variants["stock"]
            ours = sorted((v for v in variants.values() if v["kind"] == "ours"), key=lambda v: -v["fraction"])
            inductor = [v for v in variants.values() if v["kind"] == "inductor"]
            lowest = min(ours, key=lambda v: (v["real_peak"], v["step_seconds"]))
            same = next((v for v in inductor if v["fraction"] == lowest["fraction"]), None)
            theirs = min(inductor, key=lambda v: v["real_peak"], default=None)

            def cell(v: dict | None) -> str:
                if v is None:
                    return ""
                allocated, reserved = _allocator(v, "max_memory_allocated"), _allocator(v, "max_memory_reserved")
                stock_allocated = _allocator(stock, "max_memory_allocated")
                change = f" ({allocated / stock_allocated - 1:+.1%})" if v is not stock else ""
                return f"{megabytes(allocated)} / {megabytes(reserved)}{change}, {_ms(v['step_seconds'])} ms"

            lines.append([row["model"], f"{row.get('gpu')}, torch {row['torch']}", cell(stock), cell(ours[0]),
                          f"{lowest['fraction']:g}: {cell(lowest)}", cell(same),
                          "" if theirs is None else f"{theirs['fraction']:g}: {cell(theirs)}"])
    if not lines:
        return []
    head = ["model", "GPU, torch", "stock", "ours 1.0", "ours lowest", "Inductor's at that fraction",
            "Inductor's lowest"]
    return ["Measured with `python -m benchmarks.real.budget --device cuda` (fewer points and rounds than the CPU "
            "rows; see each row's JSON): each cell is `torch.cuda.max_memory_allocated` / `max_memory_reserved` "
            "over one training step in MB (the change of the allocated peak against stock's), and the median step "
            "time.", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(cells) + " |" for cells in lines)]


def budget_section(folder: Path = BUDGETS, images: Path = IMAGES) -> list[str]:
    """The report's memory-budget section (empty without cached rows), from the rows cached in ``folder``, its plots
    drawn into ``images``."""
    rows = budget_rows(folder)
    if not rows:
        return []
    lines = ["## A memory budget for the training step", "",
             "Generated by `python -m benchmarks.real.budget` (bench size, CPU, one process per model). Ours: "
             "`reorder.inductor.use(memory_budget=f)`; Inductor's: `torch._functorch.config.activation_memory_budget"
             " = f`; our fractions go from 1.0 down to the lowest estimate our partitioner reaches, evenly spaced (or, "
             "with `--at-frontier`, one per point of the frontier), and Inductor's "
             "budget runs at the same ones and, on the rows whose `Inductor's fractions` say so, at 0.9, 0.8, …, 0.0 "
             "too (`ours lowest <= Inductor's`: our lowest real peak at or below the lowest of all of Inductor's). "
             "Where the step runs several compiled regions (GPT-2's loss is compiled apart, after its model), ours "
             "are given `held_outside` by region: what stock's measured step held beside each region (eager code "
             "and later regions), as `session.measure_step` names it. "
             "Peaks are real "
             "(one step measured by `reorder.measure`), step times the median over alternating rounds in the same "
             "process (each round calls every variant once). `monotone`: our real peak never rises as the budget "
             "falls (0.5% noise allowed); `verdicts agree`: `within budget`, and every budget our records call not "
             "met has a real peak of at least 98% of it; `within budget`: every budget our records call met has a "
             "real peak at most 2% above it; `Inductor points matched`: for how many of the fractions Inductor ran "
             "at one of our points has a real peak at or below its and a step at most 5% slower (the median over "
             "rounds of our time over Inductor's in the same round); `real vs est.`: our real peak against our "
             "estimate of it (the step's estimated peak in our records, of the region where it is highest when "
             "the step has several; at 1.0 the partition is "
             "stock's and the reorder pass orders it); the largest difference of the loss or any gradient to "
             "stock's (ours and Inductor's points) is relative to each tensor's largest magnitude, and `ours within "
             "eager's`: our points' largest difference is at most eager's on the same step (the main table's "
             "`eager vs stock`); `as accurate as stock`: every loss and gradient of our points passes PyTorch's own "
             "accuracy rule (`torch._dynamo.utils.same`, tolerance 1e-4) against stock's, with a float64 eager run "
             "of the same step as the reference, and `error vs stock's` is the largest ratio of our root mean "
             "square error against that reference to stock's.", "",
             *markdown(SUMMARY, rows), ""]
    costs = compile_costs(rows)
    if costs:
        lines += ["Compile seconds in fresh processes (`python -m benchmarks.real.compile_rounds --section budget`): "
                  "stock, ours at 1.0 and at the row's lowest fraction, and Inductor's budget at that fraction, each "
                  "compiled once a round in a fresh process with Inductor's caches off (every graph compiled and "
                  "every C++ kernel built), one after the other; `compile extra` is the median over rounds of a "
                  "variant's compile seconds over stock's in the same round, and `of it our stages` what our own "
                  "stages took (partition, order, fusion guard: the records' seconds), relative to stock's compile. "
                  "The rest is Inductor compiling what the partition asks for: a backward that recomputes has more "
                  "kernels to generate and build, whoever chose the partition (`C++ kernels built`: the distinct "
                  "kernels each compile built, counted in a cache folder of its own). Real peak and step time at 1.0 "
                  "against stock's come from the row's measurement above (the step times' median over rounds of "
                  "their ratio in the same round).", "", *costs, ""]
    return lines + details_with_plots(rows, _detail, plot_budget, lambda r: f"budget-{r.model}.png",
                                      lambda r: f"{r.model} under a memory budget", images)
