"""The report's "how people train" section, from the rows :mod:`benchmarks.real.wild` cached.

Per row: stock's real peak, ours at 1.0 and at its lowest, Inductor's lowest, and the checks the section states
(every Inductor point matched by one of ours at or below its real peak with a step at most 5% slower, by the
step times of the row's alternation in one process where it ran; our lowest
at or below Inductor's lowest; compile seconds in fresh processes against stock's, as ratios in rounds where the row
has them; no fallback; verdicts that agree with the meter); one table line per variant and a plot per row (:func:`benchmarks.real.budget_report.
plot_budget`).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from .budget_report import OVER_BUDGET, SLOWER, BudgetRow, Point, plot_budget, round_ratio
from .compile_report import CompileRounds, compile_table
from .tables import IMAGES, RESULTS, Column, count_of, details_with_plots, left, markdown, megabytes

__all__ = ["CompileRounds", "WildRow", "stage_seconds", "wild_rows", "wild_section"]

WILD = RESULTS / "wild"


@dataclass(frozen=True)
class WildPoint:
    """One variant of a row, run in a process of its own."""

    name: str
    kind: str
    fraction: float | None
    real_peak: int | None
    step_seconds: float | None
    compile_seconds: float | None
    error: str | None
    fallbacks: tuple[str, ...]
    budget_bytes: int | None
    estimate_said_met: bool | None
    peaks: tuple[tuple[int, int], ...]
    difference_to_stock: float | None
    as_accurate_as_stock: bool | None
    alternated_times: tuple[float, ...] = ()
    alternated_peak: int | None = None
    stage_seconds: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def seconds(self) -> float:
        """The step time the report compares: the median of the row's alternation where the variant ran in it,
        else its own process's median."""
        return statistics.median(self.alternated_times) if self.alternated_times else self.step_seconds

    def time_against(self, other: WildPoint) -> float:
        """This step's time over ``other``'s: the median over the alternation's rounds of the two times in the
        same round where both ran in it, else the ratio of their own processes' medians."""
        return round_ratio(self.alternated_times, other.alternated_times, self.step_seconds, other.step_seconds)

    @property
    def verdict_agrees(self) -> bool | None:
        """The records' verdict before the meter ran (the compiled graphs' estimate) against the measured step:
        met within 2% above the budget, or not met and not 2% below it. None without a budget's records. Where
        the step ran at several sizes (the dynamic row), the budget's bytes are a fraction of stock's estimate at
        the sizes the region was compiled for, the first call's: the step at those sizes is the one judged."""
        peak = self.peaks[0][1] if len(self.peaks) > 1 else self.real_peak
        if self.budget_bytes is None or self.estimate_said_met is None or peak is None:
            return None
        if self.estimate_said_met:
            return peak <= self.budget_bytes * (1 + OVER_BUDGET)
        return peak >= self.budget_bytes * (1 - OVER_BUDGET)


def _variant(name: str, v: dict, alternated: dict | None = None) -> WildPoint:
    kind, fraction = ("stock", None) if name == "stock" else (
        ("inductor", float(name.split(":")[1])) if name.startswith("inductor-budget:") else
        ("ours", float(name.split(":")[1])))
    partitions = [r for r in v.get("records", ()) if r.get("kind") == "partition"]
    estimates = v.get("estimate_feasible") or []
    return WildPoint(name, kind, fraction, v.get("real_peak"), v.get("step_seconds"), v.get("compile_seconds"),
                   v.get("error"), tuple(v.get("fallbacks", ())),
                   max((r["budget_bytes"] for r in partitions if r.get("budget_bytes")), default=None),
                   all(estimates) if estimates else None,
                   tuple((p["seq"], p["real_peak"]) for p in v.get("peaks", ())),
                   v.get("difference_to_stock"), v.get("as_accurate_as_stock"),
                   tuple((alternated or {}).get("step_times", ())), (alternated or {}).get("real_peak"),
                   stage_seconds(v.get("records", ())))


def stage_seconds(records) -> float | None:
    """The seconds our stages took in the variant's compile, as its records give them (None without records)."""
    timed = [r["seconds"] for r in records if r.get("seconds") is not None]
    return sum(timed) if timed else None


@dataclass(frozen=True)
class WildRow:
    """One row: stock, our points and Inductor's, each from a process of its own."""

    row: str
    description: str
    stock: WildPoint
    ours: tuple[WildPoint, ...]
    inductor: tuple[WildPoint, ...]
    alternation_error: str | None = None
    rounds: int | None = None
    compiles_after_context: int = 0
    compile_rounds: CompileRounds | None = None

    @property
    def ran(self) -> list[WildPoint]:
        return [v for v in (self.stock, *self.ours, *self.inductor) if v.ok]

    @property
    def lowest(self) -> WildPoint | None:
        return min((v for v in self.ours if v.ok), key=lambda v: (v.real_peak, v.seconds), default=None)

    @property
    def inductor_lowest(self) -> WildPoint | None:
        return min((v for v in self.inductor if v.ok), key=lambda v: (v.real_peak, v.seconds), default=None)

    def match(self, theirs: WildPoint) -> WildPoint | None:
        """Our point at or below ``theirs``'s real peak with a step at most 5% slower (:meth:`WildPoint.
        time_against`), the fastest such against it."""
        return min((v for v in self.ours if v.ok and v.real_peak <= theirs.real_peak
                    and v.time_against(theirs) <= 1 + SLOWER),
                   key=lambda v: v.time_against(theirs), default=None)

    @property
    def alternated(self) -> bool:
        """Every variant that ran was timed in the row's alternation, and nothing compiled after their first
        steps there (a compile then would have run outside its variant's context, and inside a timed step)."""
        return bool(self.ran) and all(v.alternated_times for v in self.ran) and not self.compiles_after_context

    @property
    def same_programs(self) -> tuple[int, int]:
        """Variants whose real peak in the alternation equals their own process's (the same program timed),
        of those measured in both."""
        both = [v for v in self.ran if v.alternated_peak is not None]
        return sum(1 for v in both if v.alternated_peak == v.real_peak), len(both)

    @property
    def matched(self) -> tuple[int, int]:
        theirs = [v for v in self.inductor if v.ok]
        return sum(1 for v in theirs if self.match(v) is not None), len(theirs)

    @property
    def saving(self) -> float | None:
        low = self.lowest
        return None if low is None or not self.stock.ok else 1 - low.real_peak / self.stock.real_peak

    @property
    def compile_extra(self) -> float | None:
        """The most any of our points adds to stock's compile seconds, relative to them: by the compile rounds where
        the row has them (the median over rounds of the ratio to stock's compile of the same round), else by each
        variant's own process."""
        if self.compile_rounds is not None:
            extras = [x for x in map(self.compile_rounds.extra, self.compile_rounds.ours()) if x is not None]
            return max(extras, default=None)
        ours = [v.compile_seconds for v in self.ours if v.ok]
        if not ours or not self.stock.ok or not self.stock.compile_seconds:
            return None
        return max(ours) / self.stock.compile_seconds - 1

    @property
    def stock_compile_seconds(self) -> float | None:
        """Stock's compile seconds: the median of the compile rounds where the row has them, else its own
        process's."""
        if self.compile_rounds is not None:
            return self.compile_rounds.median_seconds("stock")
        return self.stock.compile_seconds if self.stock.ok else None

    @property
    def inductor_compile_extra(self) -> float | None:
        """What Inductor's own budget adds to stock's compile in the compile rounds, the most of its points there
        (None without rounds)."""
        if self.compile_rounds is None:
            return None
        extras = [x for x in map(self.compile_rounds.extra, self.compile_rounds.inductors()) if x is not None]
        return max(extras, default=None)

    @property
    def stages_share(self) -> float | None:
        """The most our stages (partition, order, fusion guard: the records' seconds) took in any of our points'
        compiles, relative to stock's compile seconds (in the compile rounds where the row has them): the part of
        :attr:`compile_extra` that is ours; the rest is Inductor compiling what the partition asks for (a backward
        that recomputes has more kernels)."""
        if self.compile_rounds is not None:
            shares = [x for x in map(self.compile_rounds.stages_share, self.compile_rounds.ours()) if x is not None]
            return max(shares, default=None)
        ours = [v.stage_seconds for v in self.ours if v.ok and v.stage_seconds is not None]
        if not ours or not self.stock.ok or not self.stock.compile_seconds:
            return None
        return max(ours) / self.stock.compile_seconds

    @property
    def fallbacks(self) -> int:
        return sum(len(v.fallbacks) for v in self.ours)

    @property
    def verdicts_agree(self) -> tuple[int, int]:
        judged = [v.verdict_agrees for v in self.ours if v.verdict_agrees is not None]
        return sum(judged), len(judged)


def wild_row(data: dict) -> WildRow:
    alternation = data.get("alternated") or {}
    compiles = alternation.get("compiles_after_context", 0)
    alternated = {} if compiles else alternation.get("variants", {})  # its times are not the variants' own
    variants = [_variant(name, v, alternated.get(name)) for name, v in data["variants"].items()]
    by_fraction = lambda v: -v.fraction  # noqa: E731
    stock = next((v for v in variants if v.kind == "stock"), None) or _variant("stock", {"error": "not run"})
    return WildRow(data["row"], data["description"], stock,
                   tuple(sorted((v for v in variants if v.kind == "ours"), key=by_fraction)),
                   tuple(sorted((v for v in variants if v.kind == "inductor"), key=by_fraction)),
                   alternation.get("error"), alternation.get("rounds"), compiles,
                   CompileRounds.of(data["compile_rounds"]) if data.get("compile_rounds") else None)


def wild_rows(folder: Path = WILD) -> list[WildRow]:
    from .wild_step import ROWS

    paths = [folder / f"{row}.json" for row in ROWS]
    return [wild_row(json.loads(p.read_text())) for p in paths if p.exists()]


def _point(v: WildPoint | None) -> str:
    return "" if v is None else f"{megabytes(v.real_peak)} ({v.fraction:g})"


SUMMARY = (left("row", lambda r: r.row), Column("stock MB", lambda r: r.stock.real_peak, megabytes),
           Column("ours 1.0 MB", lambda r: next((v.real_peak for v in r.ours if v.fraction == 1.0 and v.ok), None),
                  megabytes),
           Column("ours lowest MB (fraction)", lambda r: r.lowest, _point),
           Column("below stock", lambda r: r.saving, lambda x: "" if x is None else f"{x:.1%}"),
           Column("Inductor's lowest MB (fraction)", lambda r: r.inductor_lowest, _point),
           Column("step times", lambda r: r.alternated, lambda f: "alternated" if f else "own processes"),
           Column("Inductor points matched", lambda r: r.matched, count_of),
           Column("lowest <= Inductor's", lambda r: (r.lowest, r.inductor_lowest),
                  lambda p: "" if None in p else ("yes" if p[0].real_peak <= p[1].real_peak else "**no**")),
           Column("stock compile s", lambda r: r.stock_compile_seconds, lambda s: "" if s is None else f"{s:.1f}"),
           Column("compiles measured", lambda r: r.compile_rounds,
                  lambda c: "one process each" if c is None else f"{c.count} rounds"),
           Column("ours' compile extra", lambda r: r.compile_extra, lambda x: "" if x is None else f"{x:+.0%}"),
           Column("of it our stages, at most", lambda r: r.stages_share, lambda x: "" if x is None else f"{x:.0%}"),
           Column("Inductor's budget's compile extra", lambda r: r.inductor_compile_extra,
                  lambda x: "" if x is None else f"{x:+.0%}"),
           Column("fallbacks", lambda r: r.fallbacks, str),
           Column("verdicts agree", lambda r: r.verdicts_agree, count_of),
           Column("same peak alternated", lambda r: r.same_programs, lambda p: count_of(p) if p[1] else ""))


def _detail(row: WildRow) -> list[str]:
    said = (f" The alternation failed: {row.alternation_error}; step times are the variants' own processes'."
            if row.alternation_error else
            f" The alternation compiled {row.compiles_after_context} graphs after the variants' first steps: its "
            "times are left out." if row.compiles_after_context else "")
    lines = [f"**{row.row}**: {row.description}.{said}", "",
             "| variant | real peak MB | step ms, own process | step ms, alternated | compile s | our stages s | "
             "estimate said | difference to stock | as accurate | matches |",
             "|---|---:|---:|---:|---:|---:|---|---:|---|---|"]
    for v in (row.stock, *row.ours, *row.inductor):
        if not v.ok:
            lines.append(f"| {v.name} | failed: {v.error} | | | | | | | | |")
            continue
        peaks = " / ".join(megabytes(p) for _, p in v.peaks) if len(v.peaks) > 1 else megabytes(v.real_peak)
        said = "" if v.estimate_said_met is None else ("met" if v.estimate_said_met else "not met")
        match = row.match(v) if v.kind == "inductor" else None
        alternated = f"{v.seconds * 1e3:.1f}" if v.alternated_times else ""
        if v.alternated_peak is not None and v.alternated_peak != v.real_peak:
            alternated += f" (its peak there {megabytes(v.alternated_peak)})"
        stages = "" if v.stage_seconds is None else f"{v.stage_seconds:.1f}"
        lines.append(f"| {v.name} | {peaks} | {v.step_seconds * 1e3:.1f} | {alternated} | {v.compile_seconds:.1f} | "
                     f"{stages} | {said} | "
                     f"{'' if v.difference_to_stock is None else f'{v.difference_to_stock:.1e}'} | "
                     f"{'' if v.as_accurate_as_stock is None else ('yes' if v.as_accurate_as_stock else '**no**')} | "
                     f"{'' if v.kind != 'inductor' else (match.name if match else '**none**')} |")
    return lines + [""] + compile_table(row.compile_rounds)


def plot_wild(row: WildRow, path: Path) -> bool:
    """The row's real peaks against step time (the alternation's where it ran), ours and Inductor's labelled by
    fraction."""
    def point(v: WildPoint) -> Point:
        return Point(v.name, v.kind, v.fraction, v.real_peak, v.seconds, v.difference_to_stock)

    ok = lambda vs: tuple(point(v) for v in vs if v.ok)  # noqa: E731
    if not row.stock.ok:
        return False
    return plot_budget(BudgetRow(f"{row.row} decoder", point(row.stock), ok(row.ours), ok(row.inductor), 0), path,
                       xlabel="median step time (ms), " + ("alternating in one process" if row.alternated else
                                                            "each variant in a fresh process"))


def wild_section(folder: Path = WILD, images: Path = IMAGES) -> list[str]:
    """The report's "how people train" section (empty without cached rows), from the rows cached in ``folder``, its
    plots drawn into ``images``."""
    rows = wild_rows(folder)
    if not rows:
        return []
    sizes = " ".join(json.loads((folder / f"{rows[0].row}.json").read_text())["sizes"])
    lines = ["## How people train", "",
             f"Generated by `python -m benchmarks.real.wild` (a Llama-style decoder from its `transformers` config, "
             f"`{sizes}`, CPU). Each variant ran in a fresh process with Inductor's caches off: compile seconds are "
             "the first step's minus a steady step's, the real peak is one step's (the allocator's events; at each "
             "sequence length for the dynamic row). Step times: where `step times` says alternated, every variant "
             "of the row was compiled again side by side in one process and timed in rounds (21 by default, the "
             "row's `alternated.rounds`) that call each once (`same peak alternated`: the variants whose real peak "
             "there equals their own process's, the same program timed), and a step is compared with another by "
             "the median over rounds of the ratio of their times; else the median of five steady steps of the "
             "variant's own process, which vary by up to 18% "
             "between processes for one program. Compile seconds scatter too (stock's whole row: 21.8 to 30.1 s "
             "in three processes one after the other): where `compiles measured` says rounds, stock, ours at 1.0, "
             "0.7 and 0.4 and Inductor's budget at 0.4 were compiled again once a round, each in a fresh process, "
             "one after the other (`--compile-rounds`), and each is compared with stock's compile of the same round "
             "by the median over rounds of their ratio (the table under the row's); else each variant's own "
             "process is compared with stock's. `ours' compile extra`: the most any of our points adds to stock's "
             "compile seconds; `of it our stages, at most`: the most our own stages took in any of those compiles "
             "(partition, order, fusion guard, the records' seconds; the column `our stages s` per variant), "
             "relative to stock's compile; the rest is Inductor compiling what the partition asks for (a backward "
             "that recomputes has more kernels to generate and build), which `Inductor's budget's compile extra` "
             "shows for its own budget at 0.4. `Inductor points matched`: for how many of Inductor's "
             "`activation_memory_budget` points one of ours has a real peak at or below it with a step at most 5% "
             "slower; `verdicts agree`: our records' verdict from the compiled graphs' "
             "estimate, before anything ran, against the measured step (met: at most 2% above the budget; not met: "
             "at least 2% below it is a disagreement; the dynamic row's step at its first length, the sizes it "
             "was compiled for, which its budget is a fraction of stock's estimate at). Our budgets count the whole "
             "step as a user told by `session.measure_step` would compile it: on the rows that compile each layer "
             "on its own, `region_calls` is the number of layers (`budget:0.5x4`), and on every row `held_outside` "
             "is what eager code held beside the compiled graphs in stock's step, by phase (rows measured before "
             "the option existed say so in their records: `held_outside` all zero).", "",
             *markdown(SUMMARY, rows), ""]
    return lines + details_with_plots(rows, _detail, plot_wild, lambda r: f"wild-{r.row}.png",
                                      lambda r: f"{r.row}: real peak against step time", images)
