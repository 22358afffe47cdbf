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
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from .compile_report import row_path
from .tables import RESULTS

__all__ = ["SECTIONS", "compile_fresh", "held_spec", "in_rounds", "main", "measure_rows", "run_child",
           "variants_of"]

#: The sections whose rows are timed, and the rounds a row gets by default.
SECTIONS = ("main", "budget")
ROUNDS = 2

#: The main table's compiled variants, by its columns' names (:data:`benchmarks.real.variants.VARIANTS`).
MAIN_VARIANTS = ("stock", "hook", "slab", "guard")

#: Seconds one compile may take before it counts as failed.
TIMEOUT = 1800


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
    its compile seconds, our stages' seconds, the C++ kernels it built and its real peak, or ``{"error": ...}``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        result = run_child([sys.executable, "-m", "benchmarks.real.compile_once", model, mode, variant,
                            "--out", str(out)], out, TIMEOUT)
    kept = ("compile_seconds", "dynamo_compile_seconds", "stage_seconds", "kernels_built", "real_peak", "fallbacks",
            "error")
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


def measure_rows(section: str, models: list[str], modes: list[str], rounds: int, again: bool,
                 progress: Callable[[str], None],
                 compile_one: Callable[[str, str, str], dict] = compile_fresh) -> None:
    """Every row of ``section`` among ``models`` x ``modes`` compiled in ``rounds`` rounds (:func:`in_rounds`),
    cached after each round; a cached row with the same variants under the same torch release keeps its rounds and
    gets only the missing ones (all of them anew with ``again``)."""
    import torch

    for model in models:
        for mode in modes:
            variants = variants_of(section, model, mode)
            if variants is None:
                continue
            path = row_path(section, model, mode)
            cached = json.loads(path.read_text()) if path.exists() else {}
            same = cached.get("variants") == variants and cached.get("torch") == torch.__version__
            done = cached.get("rounds", []) if same and not again else []
            if len(done) >= rounds:
                continue

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
