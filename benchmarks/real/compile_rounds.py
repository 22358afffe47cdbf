"""``python -m benchmarks.real.compile_rounds``: compile seconds of the real-model rows, in fresh processes, as
ratios to stock's.

    python -m benchmarks.real.compile_rounds [--section main|budget] [--models A,B] [--modes infer,train]
                                             [--rounds 2] [--again]

One compile in a fresh process scatters by up to a third on a quiet machine (stock's whole decoder: 21.8 to
30.1 s in three processes one after the other), more than most of what our options add to it; and variants
compiled one after the other in one process share what the first one built (the main table's in-process column
read 0.0 s for MobileNetV2's hook, whose C++ kernels stock had built). So every variant of a row is compiled once a
round, each in a fresh process (:mod:`benchmarks.real.compile_once`, Inductor's caches off: every graph compiled
and every kernel built), one after the other, for ``--rounds`` rounds; the reports compare each variant with
stock's compile of the same round by the median over rounds of their ratio (:class:`CompileRounds`).

Sections (:func:`variants_of`): ``main``, the main table's compiled variants (stock, and our hook, slab and
guard as its columns compile them, without a memory budget) in both modes; ``budget``, each training row's stock, our budget at 1.0
and at the row's lowest fraction (``benchmarks/real/results/budget/``), and Inductor's budget at that fraction,
with the ``held_outside`` the budget's row gave ours. Rows are cached in
``benchmarks/real/results/compile/<section>/<model>_<mode>.json`` after every round (an interrupted run goes on
from its last round; ``--again`` measures anew). The reports read them (:func:`rounds_of`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .tables import RESULTS

__all__ = ["COMPILE", "SECTIONS", "CompileRounds", "compile_table", "in_rounds", "main", "measure_rows",
           "rounds_of", "variants_of"]

COMPILE = RESULTS / "compile"

#: The sections whose rows are timed, and the rounds a row gets by default.
SECTIONS = ("main", "budget")
ROUNDS = 2

#: The main table's compiled variants, by its columns' names (:data:`benchmarks.real.variants.VARIANTS`).
MAIN_VARIANTS = ("stock", "hook", "slab", "guard")

#: Seconds one compile may take before it counts as failed.
TIMEOUT = 1800


@dataclass(frozen=True)
class CompileRounds:
    """A row's compile seconds measured in rounds: every variant compiled once per round, each in a fresh process,
    one after the other. By variant, round by round: its compile seconds and our stages' seconds (its records'),
    None where it failed that round."""

    variants: tuple[str, ...]
    seconds: dict[str, tuple[float | None, ...]]
    stages: dict[str, tuple[float | None, ...]]

    @classmethod
    def of(cls, data: dict) -> CompileRounds:
        rounds = data["rounds"]
        get = lambda key: {v: tuple(r.get(v, {}).get(key) for r in rounds) for v in data["variants"]}  # noqa: E731
        return cls(tuple(data["variants"]), get("compile_seconds"), get("stage_seconds"))

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

    def ours(self) -> list[str]:
        return [v for v in self.variants if v.startswith("budget:")]

    def inductors(self) -> list[str]:
        return [v for v in self.variants if v.startswith("inductor-budget:")]


def compile_table(rounds: CompileRounds | None) -> list[str]:
    """A row's compile rounds as a table: each variant's seconds round by round, their median, the median of its
    ratio to stock's in the same round, and our stages' share of stock's compile."""
    if rounds is None:
        return []
    seconds = lambda xs: " / ".join("failed" if x is None else f"{x:.1f}" for x in xs)  # noqa: E731
    percent = lambda x, sign: "" if x is None else format(x, "+.0%" if sign else ".0%")  # noqa: E731
    lines = [f"Compile seconds in {rounds.count} rounds, every variant once a round in a fresh process, one after "
             "the other:", "",
             "| variant | compile s, by round | median s | extra over stock's (median of rounds) | "
             "our stages, of stock's compile |", "|---|---|---:|---:|---:|"]
    for v in rounds.variants:
        median = rounds.median_seconds(v)
        lines.append(f"| {v} | {seconds(rounds.seconds[v])} | {'' if median is None else f'{median:.1f}'} | "
                     f"{'' if v == 'stock' else percent(rounds.extra(v), True)} | "
                     f"{percent(rounds.stages_share(v), False)} |")
    return lines + [""]


def in_rounds(compile_one: Callable[[str], dict], variants: list[str], rounds: int, progress: Callable[[str], None],
              label: str, done: list[dict] | None = None, after_round: Callable[[list[dict]], None] | None = None
              ) -> list[dict]:
    """``variants`` compiled by ``compile_one`` (one fresh process each) until there are ``rounds`` rounds, each
    variant once a round in the order given; ``done``: rounds already measured, kept; ``after_round`` is handed
    the rounds so far after each (to cache them). Returns the rounds, each a mapping variant -> what
    ``compile_one`` answered. Stock must be among them: each variant is compared with stock's compile of the same
    round."""
    if "stock" not in variants:
        raise ValueError("compile rounds compare every variant with stock's compile: name stock among them")
    timed = list(done or ())
    while len(timed) < rounds:
        this_round = {}
        for variant in variants:
            this_round[variant] = compile_one(variant)
            said = this_round[variant].get("error") or f"{this_round[variant]['compile_seconds']:.1f} s"
            progress(f"{label}: compile round {len(timed) + 1}/{rounds}, {variant}: {said}")
        timed.append(this_round)
        if after_round is not None:
            after_round(timed)
    return timed


def run_child(command: list[str], out: Path, timeout: float) -> dict:
    """``command`` run to its end: the JSON it wrote to ``out``, or ``{"error": ...}`` (past ``timeout`` seconds,
    or its last line on stderr where it failed)."""
    try:
        ran = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"ran past {timeout} s"}
    if ran.returncode != 0 or not out.exists():
        lines = [line for line in ran.stderr.splitlines() if line.strip()]
        return {"error": lines[-1] if lines else f"exit status {ran.returncode}"}
    return json.loads(out.read_text())


def compile_fresh(model: str, mode: str, variant: str) -> dict:
    """One compile of ``model``'s row under ``variant`` in a fresh process (:mod:`benchmarks.real.compile_once`):
    its compile seconds, our stages' seconds and its real peak, or ``{"error": ...}``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        result = run_child([sys.executable, "-m", "benchmarks.real.compile_once", model, mode, variant,
                            "--out", str(out)], out, TIMEOUT)
    kept = ("compile_seconds", "dynamo_compile_seconds", "stage_seconds", "real_peak", "fallbacks", "error")
    return {k: result[k] for k in kept if k in result}


def held_spec(held_outside: dict | None) -> str:
    """A budget row's ``held_outside`` by region (``{"0": [F, M, B], ...}``) as ``reorder compare`` writes it after
    a budget (``+held=0:F/M/B;1:F/M/B``); empty for none."""
    if not held_outside:
        return ""
    return "+held=" + ";".join(f"{region}:{'/'.join(str(b) for b in held)}"
                               for region, held in sorted(held_outside.items(), key=lambda kv: int(kv[0])))


def variants_of(section: str, model: str, mode: str) -> list[str] | None:
    """The variants ``section`` times for ``model`` in ``mode`` (None: the section has no such row). The budget
    section reads the row the budget benchmark cached: its lowest fraction of ours and its ``held_outside``."""
    if section == "main":
        return list(MAIN_VARIANTS)
    if mode != "train":
        return None
    path = RESULTS / "budget" / f"{model}.json"
    if not path.exists():
        return None
    row = json.loads(path.read_text())
    lowest = min(row["fractions"])
    held = held_spec(row.get("held_outside"))
    ours = [f"budget:1{held}"] + ([f"budget:{lowest:g}{held}"] if lowest < 1 else [])
    return ["stock", *ours] + ([f"inductor-budget:{lowest:g}"] if lowest < 1 else [])


def _path(section: str, model: str, mode: str) -> Path:
    return COMPILE / section / f"{model}_{mode}.json"


def rounds_of(section: str, model: str, mode: str, folder: Path | None = None) -> CompileRounds | None:
    """The cached compile rounds of a row of ``section`` (None where none were measured)."""
    path = (folder / f"{model}_{mode}.json") if folder is not None else _path(section, model, mode)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return CompileRounds.of(data) if data.get("rounds") else None


def measure_rows(section: str, models: list[str], modes: list[str], rounds: int, again: bool,
                 progress: Callable[[str], None],
                 compile_one: Callable[[str, str, str], dict] = compile_fresh) -> None:
    """Every row of ``section`` among ``models`` x ``modes`` compiled in ``rounds`` rounds (:func:`in_rounds`),
    cached after each round; a cached row with the same variants keeps its rounds and gets only the missing ones
    (all of them anew with ``again``)."""
    for model in models:
        for mode in modes:
            variants = variants_of(section, model, mode)
            if variants is None:
                continue
            path = _path(section, model, mode)
            cached = json.loads(path.read_text()) if path.exists() else {}
            done = [] if again or cached.get("variants") != variants else cached.get("rounds", [])
            if len(done) >= rounds:
                continue
            import torch

            def write(timed: list[dict], model=model, mode=mode, variants=variants, path=path) -> None:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps({"model": model, "mode": mode, "section": section,
                                            "torch": torch.__version__, "variants": variants,
                                            "rounds": timed}) + "\n")

            in_rounds(lambda variant, model=model, mode=mode: compile_one(model, mode, variant), variants, rounds,
                      progress, f"{model} {mode}", done, write)


def main(argv: list[str] | None = None) -> int:
    from .models import MODELS

    p = argparse.ArgumentParser(prog="python -m benchmarks.real.compile_rounds", description=__doc__.splitlines()[0])
    p.add_argument("--section", choices=SECTIONS, default="main")
    p.add_argument("--models", help=f"comma-separated (default: all {len(MODELS)})")
    p.add_argument("--modes", default="infer,train")
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--again", action="store_true", help="measure cached rows anew")
    p.add_argument("--report-only", action="store_true", help="only rebuild the report from the cache")
    args = p.parse_args(argv)
    models = args.models.split(",") if args.models else list(MODELS)
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        p.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    if not args.report_only:
        measure_rows(args.section, models, args.modes.split(","), args.rounds, args.again,
                     lambda text: print(text, file=sys.stderr, flush=True))
    from .report import write_report

    write_report(RESULTS / "bench")
    return 0


if __name__ == "__main__":
    sys.exit(main())
