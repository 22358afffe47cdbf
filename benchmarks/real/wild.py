"""``python -m benchmarks.real.wild``: the memory budget where people train, each variant in a fresh process.

    python -m benchmarks.real.wild [--rows whole,per-layer,...] [--variants stock,budget:0.5,...] [--again]
                                   [--alternate-again] [--compile-rounds 3]
                                   [--report-only] [--layers 4] [--hidden 256] [--seq 128] [--batch 4]

Each row (:data:`benchmarks.real.wild_step.ROWS`) is a Llama-style decoder's training step written one way
people write it: compiled whole, per layer, per layer under FSDP2 on two ranks, under autocast, with Hugging
Face's gradient checkpointing, with ``dynamic=True`` at three sequence lengths, with the loss computed eagerly.
Each variant (:data:`VARIANTS`: stock, ours at four fractions, Inductor's ``activation_memory_budget`` at 0.9,
0.8, ..., 0.1 and 0.0) runs in a process of its own (:mod:`benchmarks.real.wild_step`) with Inductor's caches
off: its compile seconds are a fresh process's, its real peak is one step's, measured by the allocator's
events, and its step time the median of steady steps. Then every variant of the row is compiled again, side by
side in one process, and timed in alternation (``wild_step --alternate``: ``--rounds`` rounds, each calling every
variant once): those step times are the ones the report compares, since separate processes' step times of one
program differ by up to 18% on a shared machine. The first step's loss and gradients are checked against
stock's by PyTorch's accuracy rule (:func:`benchmarks.real.run.as_accurate`, a float64 eager run of the same
step as the reference; the FSDP row, whose gradients are rank 0's shards, by the largest relative difference).

Variants are cached one by one in ``benchmarks/real/results/wild/<row>.json`` (an interrupted run goes on where
it stopped; ``--again`` measures every variant anew), the alternation under its ``alternated`` key (run again
when the variants changed or one measures another real peak than there; a failed one only with
``--alternate-again``); the report's section and one plot per row come from the
cache (:mod:`benchmarks.real.wild_report`).

One compile in a fresh process scatters by up to a third on a quiet machine (stock's whole row: 21.8 to 30.1 s
in three processes one after the other), more than most of what a budget adds to it. ``--compile-rounds N`` measures
compile seconds as a ratio instead (:func:`time_compiles`): :data:`COMPILE_VARIANTS` (stock, ours at three
fractions and Inductor's budget at 0.4) each compiled once per round, in fresh processes one after the other,
``N`` rounds; the report compares each variant with stock by the median over rounds of their ratio in the same
round. Cached under the row's ``compile_rounds`` key, run again when asked with other variants or rounds or with
``--again`` (or ``--compile-again``: the rounds alone).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from reorder.measure import phase_bytes

from .compile_rounds import in_rounds, run_child
from .run import as_accurate, difference
from .tables import RESULTS
from .wild_step import ROWS, SIZES, build, held_outside_option, parser as step_parser, step_function, token_batches

__all__ = ["COMPILE_VARIANTS", "OURS", "INDUCTORS", "VARIANTS", "WILD", "main", "run_variant", "time_compiles"]

WILD = RESULTS / "wild"

#: Our fractions (0.1 asks for less than most steps reach: the lowest partition found) and Inductor's.
OURS = (1.0, 0.7, 0.4, 0.1)
INDUCTORS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)
VARIANTS = ("stock", *(f"budget:{f:g}" for f in OURS), *(f"inductor-budget:{f:g}" for f in INDUCTORS))

#: The variants whose compile seconds ``--compile-rounds`` measures in rounds: stock, ours at 1.0 (stock's
#: partition, our order and guard), at 0.7 and at 0.4 (partitions that recompute), and Inductor's own budget at 0.4,
#: which shows what compiling a recomputing backward costs Inductor whoever chose the partition.
COMPILE_VARIANTS = ("stock", "budget:1", "budget:0.7", "budget:0.4", "inductor-budget:0.4")

#: Seconds a variant may run before it counts as failed (two ranks compile for the FSDP row), and the alternation
#: of every variant of a row (all of them compile in it).
TIMEOUT, ALTERNATION_TIMEOUT = 1800, 7200

#: Rounds of the alternation.
ROUNDS = 21


def float64_reference(row: str, sizes: list[str]) -> list[torch.Tensor]:
    """The row's first step computed eagerly in float64: its loss and every gradient, in a variant's order."""
    args = step_parser().parse_args(["--row", row, "--variant", "stock", *sizes])
    model = build(args).double()
    loss = step_function(model, args, compiled=False)(token_batches(args)[0])
    loss.backward()
    return [loss.detach(), *(p.grad for p in model.parameters() if p.grad is not None)]


def _held_option(held_outside: list | None) -> list[str]:
    return [held_outside_option(held_outside)] if held_outside else []


def _variant_command(row: str, variant: str, sizes: list[str], held_outside: list | None, out: Path) -> list[str]:
    """The command that measures one variant of ``row`` in a fresh process, its result written to ``out``."""
    return [sys.executable, "-m", "benchmarks.real.wild_step", "--row", row, "--variant", variant,
            "--out", str(out), *sizes, *_held_option(held_outside)]


def run_variant(row: str, variant: str, sizes: list[str], held_outside: list[int] | None = None
                ) -> tuple[dict, list[torch.Tensor]]:
    """One variant of ``row`` in a fresh process: its result (or ``{"error": ...}``) and its first step's loss
    and gradients; ``held_outside``: what eager code held in stock's step, by phase, which our budgets count."""
    with tempfile.TemporaryDirectory() as tmp:
        out, saved = Path(tmp) / "result.json", Path(tmp) / "tensors.pt"
        command = [*_variant_command(row, variant, sizes, held_outside, out), "--tensors", str(saved)]
        t0 = time.perf_counter()
        result = run_child(command, out, TIMEOUT)
        if "error" in result:
            return {"variant": variant, **result}, []
        result["process_seconds"] = time.perf_counter() - t0
        return result, torch.load(saved, weights_only=True)


def compile_once(row: str, variant: str, sizes: list[str], held_outside: list | None) -> dict:
    """One compile of ``variant`` in a fresh process (:mod:`benchmarks.real.wild_step`): its compile seconds, the
    seconds its records give our stages, the C++ kernels it built, and its real peak (the same program as its own
    cached process when equal), or ``{"error": ...}``."""
    from .wild_report import stage_seconds

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        result = run_child(_variant_command(row, variant, sizes, held_outside, out), out, TIMEOUT)
    if "error" in result:
        return {"error": result["error"]}
    return {"compile_seconds": result["compile_seconds"], "stage_seconds": stage_seconds(result.get("records", ())),
            "kernels_built": result.get("kernels_built"), "real_peak": result["real_peak"]}


def time_compiles(row: str, data: dict, variants: list[str], sizes: list[str], rounds: int, progress) -> dict:
    """``variants`` compiled ``rounds`` times in fresh processes, one after the other and each once per round
    (:func:`benchmarks.real.compile_rounds.in_rounds`), each budget with the ``held_outside`` its cached process
    had: the variants and the rounds, each a mapping variant -> :func:`compile_once`'s answer."""
    cached = data.get("variants", {})

    def compile_one(variant: str) -> dict:
        held = cached.get(variant, {}).get("held_outside") if variant.startswith("budget:") else None
        return compile_once(row, variant, sizes, held or None)

    return {"variants": list(variants), "rounds": in_rounds(compile_one, list(variants), rounds, progress, row)}


def alternate_row(row: str, variants: list[str], sizes: list[str], held_outside: dict[str, list[int]],
                  rounds: int = ROUNDS) -> dict:
    """Every variant of ``variants`` compiled in one fresh process and timed in alternation (``wild_step
    --alternate``), each budget with the ``held_outside`` its own process had (``held_outside[variant]``): its
    step times and real peak by variant, or ``{"error": ...}``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times.json"
        command = [sys.executable, "-m", "benchmarks.real.wild_step", "--row", row, "--alternate", ",".join(variants),
                   f"--rounds={rounds}", "--out", str(out), *sizes]
        if held_outside:
            command.append(f"--held-outside-of={json.dumps(held_outside)}")
        return run_child(command, out, ALTERNATION_TIMEOUT)


def _stocks_held_outside(stock: dict) -> list | None:
    """What eager code held beside the compiled graphs in stock's step at the first length, by phase (the
    backward's by call where several ran, :func:`reorder.measure.phase_bytes`)."""
    by_phase = (stock.get("peaks") or [{}])[0].get("outside_by_phase") or {}
    return list(phase_bytes(by_phase)) if by_phase else None


def measure_row(row: str, variants: list[str], sizes: list[str], again: bool, progress,
                alternate_again: bool = False, compile_rounds: int = 0,
                compile_variants: tuple[str, ...] = COMPILE_VARIANTS, compile_again: bool = False) -> dict:
    """Every variant of ``variants`` not yet cached (all of them with ``again``), each cached as soon as it ran;
    the row's other cached variants are kept. Stock runs first whenever another variant does: its loss and
    gradients are what the others are checked against, and what its eager code held beside the compiled graphs
    (at the first length, by phase) is our budgets' ``held_outside``, as ``measure_step`` would tell a user.
    Then every variant of the row that ran is timed side by side (:func:`alternate_row`) when the cached
    alternation is stale (:func:`_alternation_stale`: a variant measured anew to another program, say) or with
    ``alternate_again`` (the only way a failed alternation runs again). With ``compile_rounds``, the
    ``compile_variants``' compile seconds in that many rounds (:func:`time_compiles`) where the cache has none of
    those variants and rounds, or with ``again`` or ``compile_again`` (the compiles alone, the variants kept)."""
    path = WILD / f"{row}.json"
    cached = json.loads(path.read_text()) if path.exists() else {}
    same_sizes = cached.get("sizes") == sizes
    data = {"row": row, "description": ROWS[row], "sizes": sizes, "torch": torch.__version__,
            "variants": cached.get("variants", {}) if same_sizes else {}}
    alternated = cached.get("alternated") if same_sizes else None
    if alternated:  # kept through the variants' writes below, and judged after them
        data["alternated"] = alternated
    compiles = cached.get("compile_rounds") if same_sizes else None
    if compiles:
        data["compile_rounds"] = compiles
    missing = [v for v in variants if again or v not in data["variants"]]
    if missing:
        _measure_variants(row, data, missing, sizes, progress)
    ran = [v for v in data["variants"] if "error" not in data["variants"][v]]
    if ran and (alternate_again or _alternation_stale(alternated, data["variants"], ran)):
        progress(f"{row}: {len(ran)} variants side by side, in alternation ...")
        t0 = time.perf_counter()
        held = {v: data["variants"][v]["held_outside"] for v in ran if data["variants"][v].get("held_outside")}
        data["alternated"] = alternate_row(row, ran, sizes, held)
        progress(f"    {data['alternated'].get('error', 'done')}, {time.perf_counter() - t0:.0f} s")
        path.write_text(json.dumps(data) + "\n")
    asked = list(compile_variants)
    if compile_rounds and (again or compile_again or not compiles or compiles.get("variants") != asked
                           or len(compiles.get("rounds", ())) != compile_rounds):
        data["compile_rounds"] = time_compiles(row, data, asked, sizes, compile_rounds, progress)
        path.write_text(json.dumps(data) + "\n")
    return data


def _alternation_stale(alternated: dict | None, variants: dict, ran: list[str]) -> bool:
    """Whether the row's cached alternation no longer times its variants: there is none, or it timed other
    variants, or one of them now measures another real peak in its own process than there (measured anew to
    another program). A failed alternation is not stale: it runs again with ``--alternate-again`` only."""
    if not alternated:
        return True
    if "error" in alternated:
        return False
    timed = alternated.get("variants", {})
    return set(timed) != set(ran) or any(timed[v].get("real_peak") != variants[v].get("real_peak") for v in ran)


def _measure_variants(row: str, data: dict, missing: list[str], sizes: list[str], progress) -> None:
    """Each of ``missing`` in a fresh process, stock first (see :func:`measure_row`), cached as soon as it ran."""
    path = WILD / f"{row}.json"
    reference = None if row == "fsdp" else float64_reference(row, sizes)
    stock_tensors: list[torch.Tensor] = []
    held_outside = None
    for variant in ["stock", *(v for v in missing if v != "stock")]:
        progress(f"{row}: {variant} ...")
        result, checked = run_variant(row, variant, sizes, held_outside)
        if variant == "stock":
            stock_tensors = checked
            held_outside = _stocks_held_outside(result)
        elif checked and stock_tensors:
            result["difference_to_stock"] = difference(checked, stock_tensors)
            accuracy = None if reference is None else as_accurate(checked, stock_tensors, reference)
            result["as_accurate_as_stock"] = accuracy and accuracy[0]
            result["error_to_stocks"] = accuracy and accuracy[1]
        data["variants"][variant] = result
        progress(f"    {result['error'] if 'error' in result else format(result['real_peak'], ',') + ' B'}, "
                 f"{result.get('process_seconds', 0):.0f} s")
        WILD.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.real.wild", description=__doc__.splitlines()[0])
    p.add_argument("--rows", help=f"comma-separated (default: all of {', '.join(ROWS)})")
    p.add_argument("--variants", help="comma-separated variants of reorder compare (default: stock, ours at "
                                      f"{', '.join(f'{f:g}' for f in OURS)}, Inductor's at 0.9 ... 0.0)")
    p.add_argument("--again", action="store_true", help="measure cached variants again")
    p.add_argument("--alternate-again", action="store_true",
                   help="time the row's variants in alternation again, even where nothing was measured anew")
    p.add_argument("--report-only", action="store_true", help="only rebuild the report from the cache")
    p.add_argument("--compile-rounds", type=int, default=0, metavar="N",
                   help="also compile stock, ours at 1.0, 0.7 and 0.4 and Inductor's 0.4 in N rounds of fresh "
                        "processes, for compile seconds as ratios to stock's in the same round")
    p.add_argument("--compile-again", action="store_true",
                   help="with --compile-rounds: compile the rounds anew, the variants' cached measurements kept")
    for name, default in SIZES.items():
        p.add_argument(f"--{name}", type=int, default=default)
    args = p.parse_args(argv)
    rows = args.rows.split(",") if args.rows else list(ROWS)
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        p.error(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
    variants = args.variants.split(",") if args.variants else list(VARIANTS)
    from reorder.compare import parse_variants
    from reorder.errors import ReorderError

    try:
        parse_variants(variants)
    except ReorderError as exc:
        p.error(str(exc))
    sizes = [f"--{name}={getattr(args, name)}" for name in SIZES]
    if not args.report_only:
        for row in rows:
            measure_row(row, variants, sizes, args.again, lambda text: print(text, file=sys.stderr, flush=True),
                        args.alternate_again, args.compile_rounds, compile_again=args.compile_again)
    from .report import write_report

    write_report(RESULTS / "bench")
    return 0


if __name__ == "__main__":
    sys.exit(main())
