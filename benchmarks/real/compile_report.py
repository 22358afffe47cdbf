"""Compile seconds measured in rounds of fresh processes, as the reports read them: a row's rounds
(:class:`CompileRounds`), its table, and where :mod:`benchmarks.real.compile_rounds` (the runner) caches them.

Every variant of a row compiled once a round, each in a fresh process, one after the other; a variant is compared
with stock's compile of the same round by the median over rounds of their ratio, which cancels a slow stretch of a
shared machine that falls on a whole round.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from .tables import RESULTS

__all__ = ["COMPILE", "CompileRounds", "compile_table", "percent", "rounds_of", "row_path"]

#: Where the runner caches the rows, by section.
COMPILE = RESULTS / "compile"


def row_path(section: str, model: str, mode: str, folder: Path | None = None) -> Path:
    """The cached rounds of ``model`` in ``mode`` in ``section`` (in ``folder`` instead of the section's own)."""
    return (COMPILE / section if folder is None else folder) / f"{model}_{mode}.json"


def percent(x: float | None, signed: bool = True) -> str:
    """A ratio as a table shows it (``+12%``, ``7%``); empty for None."""
    return "" if x is None else format(x, "+.0%" if signed else ".0%")


@dataclass(frozen=True)
class CompileRounds:
    """A row's compile seconds measured in rounds: every variant compiled once per round, each in a fresh process,
    one after the other. By variant, round by round: its compile seconds, our stages' seconds (its records') and the
    C++ kernels it built, None where it failed that round (or, for the kernels, where rounds measured before the
    count existed)."""

    variants: tuple[str, ...]
    seconds: dict[str, tuple[float | None, ...]]
    stages: dict[str, tuple[float | None, ...]]
    kernels: dict[str, tuple[int | None, ...]]

    @classmethod
    def of(cls, data: dict) -> CompileRounds:
        rounds = data["rounds"]
        get = lambda key: {v: tuple(r.get(v, {}).get(key) for r in rounds) for v in data["variants"]}  # noqa: E731
        return cls(tuple(data["variants"]), get("compile_seconds"), get("stage_seconds"), get("kernels_built"))

    @property
    def count(self) -> int:
        return len(self.seconds["stock"])

    def _median_over_stocks(self, values: tuple[float | None, ...]) -> float | None:
        ratios = [value / stock for value, stock in zip(values, self.seconds["stock"])
                  if value is not None and stock]
        return statistics.median(ratios) if ratios else None

    def extra(self, variant: str) -> float | None:
        """What ``variant`` adds to stock's compile: the median over rounds of its seconds over stock's in the same
        round, less one."""
        ratio = self._median_over_stocks(self.seconds[variant])
        return None if ratio is None else ratio - 1

    def stages_share(self, variant: str) -> float | None:
        """Our stages' seconds in ``variant``'s compile relative to stock's compile of the same round, the median
        over rounds (None for a variant without records: stock, Inductor's)."""
        return self._median_over_stocks(self.stages[variant])

    def median_seconds(self, variant: str) -> float | None:
        ran = [s for s in self.seconds.get(variant, ()) if s is not None]
        return statistics.median(ran) if ran else None

    def kernels_built(self, variant: str) -> str:
        """The C++ kernels ``variant``'s compile built, as a table shows them: one count where every round that
        counted them agrees (a compile builds the same kernels each time), else each round's (``40, 41``); empty
        where none counted them."""
        counted = [k for k in self.kernels.get(variant, ()) if k is not None]
        return "" if not counted else str(counted[0]) if len(set(counted)) == 1 else ", ".join(map(str, counted))

    def ours(self) -> list[str]:
        return [v for v in self.variants if v.startswith("budget:")]

    def inductors(self) -> list[str]:
        return [v for v in self.variants if v.startswith("inductor-budget:")]


def compile_table(rounds: CompileRounds | None) -> list[str]:
    """A row's compile rounds as a table: each variant's seconds round by round, their median, the median of its
    ratio to stock's in the same round, our stages' share of stock's compile, and the C++ kernels it built."""
    if rounds is None:
        return []
    seconds = lambda xs: " / ".join("failed" if x is None else f"{x:.1f}" for x in xs)  # noqa: E731
    lines = [f"Compile seconds in {rounds.count} rounds, every variant once a round in a fresh process, one after "
             "the other (`C++ kernels built`: the distinct kernels its compile built, counted in a cache folder of "
             "its own; empty for rounds measured before they were counted):", "",
             "| variant | compile s, by round | median s | extra over stock's (median of rounds) | "
             "our stages, of stock's compile | C++ kernels built |", "|---|---|---:|---:|---:|---:|"]
    for v in rounds.variants:
        median = rounds.median_seconds(v)
        lines.append(f"| {v} | {seconds(rounds.seconds[v])} | {'' if median is None else f'{median:.1f}'} | "
                     f"{'' if v == 'stock' else percent(rounds.extra(v), True)} | "
                     f"{percent(rounds.stages_share(v), False)} | {rounds.kernels_built(v)} |")
    return lines + [""]


def rounds_of(section: str, model: str, mode: str, folder: Path | None = None) -> CompileRounds | None:
    """The cached compile rounds of a row of ``section`` (None where none were measured)."""
    path = row_path(section, model, mode, folder)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return CompileRounds.of(data) if data.get("rounds") else None
