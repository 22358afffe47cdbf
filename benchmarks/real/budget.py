"""``python -m benchmarks.real.budget``: a memory budget on every training row, ours against Inductor's, measured.

    python -m benchmarks.real.budget [--models A,B] [--points 5 | --at-frontier] [--rounds 21] [--again]
                                     [--report-only] [--refresh-records] [--device cpu|cuda]

For each training row of the real-model benchmark (bench size), in one process:

* **stock**: ``torch.compile``;
* **ours**: ``reorder.inductor.use(memory_budget=f)`` at ``--points`` fractions ``f`` of stock's estimated step
  peak, evenly spaced from 1.0 down to the smallest one our frontier reaches (read from the records of a compile
  under :data:`EXPLORE`, below every point: at 1.0 no partition but stock's is built); with ``--at-frontier``,
  at 1.0 and at the fraction that reaches each point of that frontier (:func:`frontier_fractions`); where
  stock's step runs several compiled regions (GPT-2's loss is compiled apart), with ``held_outside`` by region
  number, what stock's measured step held beside each (:func:`held_beside_regions`), as ``measure_step`` tells
  a user;
* **Inductor's** ``torch._functorch.config.activation_memory_budget`` at the same fractions (its 1.0 is stock)
  and at every fraction of :data:`INDUCTOR_GRID`, 0.9 down to 0.0: a user who asks Inductor for less than our
  lowest estimate gets its lowest partition, which our lowest point is compared with.

Every variant compiles a fresh copy of the same seeded model, with an Inductor backend of its own (so that
dynamo never runs one variant's code for another, :meth:`benchmarks.variants.Variant.compile`), and runs its
first two steps in its own context (a second step may still compile). The first step's loss and gradients
are compared with stock's: the largest difference relative to each tensor's magnitude, and PyTorch's accuracy
rule against a float64 eager run of the same step (:func:`benchmarks.real.run.as_accurate`). Each variant's real
peak is one step measured by :func:`reorder.measure.measure`; step times are medians over ``--rounds``
rounds that call every variant once, in alternation, in this process. A compile after the first two steps
would run outside its variant's context: the row counts such compiles and the report says so.

Rows are cached in ``benchmarks/real/results/budget/<model>.json`` (rerun with ``--again``); the report's
section of docs/real-models.md and one plot per model come from the cache
(:mod:`benchmarks.real.budget_report`). Under another torch release than the report's, rows go to
``budget-torch<release>/`` instead, and the report sets them beside its own
(:mod:`benchmarks.real.release_report`).

``--device cuda`` runs the same rows on the GPU: the model and its inputs move there after the float64
reference is computed on the CPU, each step synchronises before its time is taken, and each variant's real peak
is read twice, from the profiler's CUDA memory events and from ``torch.cuda.max_memory_allocated`` /
``max_memory_reserved`` over the same step (the caching allocator's view, what ``nvidia-smi`` would show).
Those rows go to ``budget-cuda-torch<release>/``; the report's table of them is
:func:`benchmarks.real.budget_report.cuda_table`.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from reorder.budget.frontier import reaching_fraction
from reorder.inductor.releases import installed_version, running_release
from reorder.inductor.session import PartitionRecord
from reorder.measure import measure

from ..timing import alternated_times
from ..variants import Variant, functorch, hooked, load_records, records_json
from .budget_report import BUDGETS, INDUCTOR_GRID, cuda_table
from .models import BATCH, MODELS, build, parameter_bytes
from .tables import RESULTS, release_folder
from .run import as_accurate, difference, float64_reference, step_function, tensors, unique_graphs

__all__ = ["fractions_for", "frontier_fractions", "held_beside_regions", "main", "refresh_records",
           "row_held_outside", "run_row", "variants_for"]

#: Fractions tried per row, rounds of alternating steps for the medians.
POINTS = 5
ROUNDS = 21

#: The fraction of the compile whose records give the row's frontier: below every partition's estimate, so the
#: partitioner builds them all (at 1.0 it keeps stock's and builds none).
EXPLORE = 0.001


def ours(fraction: float, held_outside: dict[int, tuple[int, int, int]] | None = None) -> Variant:
    """Our budget at ``fraction``; ``held_outside``: by region number, what the step holds beside each of
    several compiled regions (:func:`held_beside_regions`)."""
    held = {"held_outside": held_outside} if held_outside else {}
    return hooked(f"ours {fraction:g}", f"torch.compile with reorder.inductor.use(memory_budget={fraction:g}"
                  + (", held_outside by region" if held else "") + ")", memory_budget=float(fraction), **held)


def held_beside_regions(measured) -> dict[int, tuple[int, int, int]] | None:
    """Where stock's step (``measured``: :func:`reorder.measure.measure`) runs several compiled regions, what
    eager code and later regions held beside each, by region number, as ``Session.measure_step`` would tell a
    user (GPT-2's loss region runs between its model region's forward and backward, on the model's saved
    values); None for one region, whose estimates the defaults already make of the whole step. The bytes are
    stock's: beside the model region, the loss region under stock's partition."""
    beside = measured.held_beside_regions()
    return dict(enumerate(beside)) if len(beside) > 1 else None


def inductors(fraction: float) -> Variant:
    return functorch(f"inductor {fraction:g}",
                     f"torch.compile with torch._functorch.config.activation_memory_budget={fraction:g}",
                     activation_memory_budget=float(fraction))


STOCK = functorch("stock", "torch.compile, Inductor as configured by default")


def fractions_for(records, points: int = POINTS) -> list[float]:
    """``points`` fractions from 1.0 down to the smallest our frontier reaches in every region that has points
    below stock (records of a compile under :data:`EXPLORE`), rounded up to 0.001; only 1.0 when no region has
    one. (A region without points, a loss compiled apart, say, is then over its budget, which its record says.)"""
    partitions = _regions_with_points(records)
    lowest = max((min(p for _, p in r.frontier) / r.stock_peak for r in partitions), default=1.0)
    lowest = math.ceil(lowest * 1000) / 1000
    if lowest >= 1.0 or points < 2:
        return [1.0]
    return sorted({round(1.0 - k * (1.0 - lowest) / (points - 1), 3) for k in range(points)}, reverse=True)


def frontier_fractions(records) -> list[float]:
    """1.0 and, for each point of each region's frontier (records of a compile under :data:`EXPLORE`), the
    smallest fraction that reaches it (:func:`reorder.budget.frontier.reaching_fraction`), where evenly spaced
    fractions can step over a point (ResNet's Inductor 0.5 partition, between our 0.881 and 0.842). A later
    region's points are as that compile estimated them, beside the earlier regions' lowest points; with symbolic
    sizes a point's level may ask for a smaller fraction."""
    reached = {reaching_fraction(peak, r.stock_peak) for r in _regions_with_points(records) for _, peak in r.frontier}
    return sorted({1.0} | {f for f in reached if f < 1.0}, reverse=True)


def _regions_with_points(records) -> list[PartitionRecord]:
    return [r for r in records if isinstance(r, PartitionRecord) and r.frontier]


def variants_for(fractions: list[float], held_outside: dict[int, tuple[int, int, int]] | None = None
                 ) -> list[tuple[str, float | None, Variant]]:
    """``(kind, fraction, variant)`` of a row: stock, ours at each fraction (with ``held_outside``), Inductor's at
    each of ours below 1.0 and at each of :data:`INDUCTOR_GRID` (fractions falling)."""
    made = [("stock", None, STOCK)]
    made += [("ours", f, ours(f, held_outside)) for f in fractions]
    theirs = sorted({f for f in fractions if f < 1.0} | set(INDUCTOR_GRID), reverse=True)
    made += [("inductor", f, inductors(f)) for f in theirs]
    return made


@dataclass
class _Prepared:
    """One compiled variant kept alive for alternation: its step, its first step's tensors and figures."""

    kind: str
    fraction: float | None
    variant: Variant
    step: Callable
    reset: Callable
    checked: list
    first_two_seconds: float
    records: list


def results_folder(device: str = "cpu") -> Path:
    """Where the rows measured on ``device`` under the running torch release are cached: the report's own
    folder on the CPU under its release; ``budget-cuda-torch<release>`` on a GPU."""
    if device == "cpu":
        return RESULTS / release_folder("budget")
    return RESULTS / f"budget-{device}-torch{running_release()}"


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _prepare(base, inputs: dict, kind: str, fraction: float | None, variant: Variant,
             device: str = "cpu") -> _Prepared:
    model = copy.deepcopy(base)
    fn = variant.compile(step_function(model, "train"), own_cache=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        loss = fn(inputs)
        loss.backward()
        optimizer.step()
        _synchronize(device)
        return loss.detach()

    def reset():
        optimizer.zero_grad(set_to_none=True)

    torch.manual_seed(0)
    t0 = time.perf_counter()
    with variant.enter(True) as session:
        loss = step()
        checked = [t.detach().cpu().clone() for t in tensors(loss)] + [
            p.grad.cpu().clone() for p in model.parameters() if p.grad is not None]
        reset()
        step()  # a second step may still compile: inside the context too
    seconds = time.perf_counter() - t0
    reset()
    return _Prepared(kind, fraction, variant, step, reset, checked, seconds, records_json(session))


def run_row(name: str, size: str = "bench", points: int = POINTS, rounds: int = ROUNDS, device: str = "cpu",
            at_frontier: bool = False) -> dict:
    """Every budget variant of ``name``'s training step side by side on ``device`` (see the module docstring);
    ``at_frontier``: ours at :func:`frontier_fractions` instead of ``points`` evenly spaced ones."""
    from torch._dynamo import config as dynamo_config
    from torch._inductor import config

    config.force_disable_caches = True
    dynamo_config.recompile_limit = dynamo_config.accumulated_recompile_limit = 1024  # every variant compiles anew
    base, inputs = build(name, size, "train")
    reference = float64_reference(base, inputs)
    base = base.to(device)
    inputs = {k: v.to(device) for k, v in inputs.items()}
    torch._dynamo.reset()
    stock = _prepare(base, inputs, "stock", None, STOCK, device)
    held_outside = held_beside_regions(measure(stock.step, device))
    stock.reset()
    explored = _prepare(base, inputs, "ours", EXPLORE, ours(EXPLORE, held_outside), device)
    records = load_records({"records": explored.records})
    fractions = frontier_fractions(records) if at_frontier else fractions_for(records, points)
    del explored
    prepared = [stock] + [_prepare(base, inputs, kind, f, v, device)
                          for kind, f, v in variants_for(fractions, held_outside) if kind != "stock"]
    compiled = unique_graphs()
    peaks = {}
    for p in prepared:
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()  # the reserved peak then counts the segments this step makes the cache hold
        m = measure(p.step, device)
        p.reset()
        peaks[p.variant.name] = m
    by_name = {p.variant.name: p for p in prepared}
    times = alternated_times({name: p.step for name, p in by_name.items()}, rounds,
                             before=lambda name: by_name[name].reset())
    stock = prepared[0]
    row = {"model": name, "size": size, "mode": "train", "device": device, "batch": BATCH,
           "gpu": torch.cuda.get_device_name() if device == "cuda" else None, "parameter_bytes": parameter_bytes(base),
           "fractions": fractions, "rounds": rounds, "compiles_after_context": unique_graphs() - compiled,
           "held_outside": held_outside and {str(k): list(v) for k, v in held_outside.items()},
           "variants": {}}
    for p in prepared:
        m = peaks[p.variant.name]
        step_seconds = statistics.median(times[p.variant.name])
        accuracy = as_accurate(p.checked, stock.checked, reference)
        row["variants"][p.variant.name] = {
            "kind": p.kind, "fraction": p.fraction, "description": p.variant.description,
            "real_peak": m.peak, "held_at_backward": m.held_at_backward, "peak_composition": m.peak_composition,
            "cuda": m.cuda,
            "step_seconds": step_seconds, "step_times": times[p.variant.name],
            "compile_seconds": max(0.0, p.first_two_seconds - 2 * step_seconds),
            "difference_to_stock": difference(p.checked, stock.checked),
            "as_accurate_as_stock": accuracy and accuracy[0], "error_to_stocks": accuracy and accuracy[1],
            "records": p.records,
        }
    torch._dynamo.reset()
    return row


def row_held_outside(row: dict) -> dict[int, tuple[int, int, int]] | None:
    """The ``held_outside`` by region a cached row gave ours (JSON keeps the region numbers as strings)."""
    held = row.get("held_outside")
    return {int(k): tuple(v) for k, v in held.items()} if held else None


def _plan(records: list[dict]) -> list[tuple]:
    """What a variant's records say was compiled: each region's partition (not its estimated step peak, which a
    change to the step model moves while the same partition compiles) and each graph's order and peak."""
    return [(r["source"], r["saved_bytes"], r["recomputed"]) if r["kind"] == "partition" else
            (r["nodes"], r["peak"], r["method"]) for r in records if r["kind"] in ("partition", "order")]


def refresh_records(name: str) -> list[str]:
    """Our variants of ``name``'s cached row compiled again, one step measured: where the plan (:func:`_plan`) and
    the real peak are the cached ones, the same program ran, and the cached records are replaced by the new
    ones (which newer records extend, the compiled graphs' check for one). Returns the variants that differ, each
    with its cached and new real peak and whether its plan changed: their rows need measuring again
    (``--again``)."""
    from torch._dynamo import config as dynamo_config
    from torch._inductor import config

    config.force_disable_caches = True
    dynamo_config.recompile_limit = dynamo_config.accumulated_recompile_limit = 1024
    path = RESULTS / release_folder("budget") / f"{name}.json"
    row = json.loads(path.read_text())
    base, inputs = build(name, row["size"], "train")
    torch._dynamo.reset()
    differ = []
    held_outside = row_held_outside(row)
    for variant_name, cached in row["variants"].items():
        if cached["kind"] != "ours":
            continue
        p = _prepare(base, inputs, "ours", cached["fraction"], ours(cached["fraction"], held_outside))
        gc.collect()
        peak = measure(p.step, "cpu").peak
        p.reset()
        same_plan = _plan(p.records) == _plan(cached["records"])
        if peak == cached["real_peak"] and same_plan:
            cached["records"] = p.records
        else:
            differ.append(f"{variant_name} ({cached['real_peak']:,} B -> {peak:,} B"
                          f"{'' if same_plan else ', another plan'})")
    path.write_text(json.dumps(row) + "\n")
    torch._dynamo.reset()
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real.budget", description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated (default: all {len(MODELS)})")
    parser.add_argument("--points", type=int, default=POINTS, help="fractions per row, 1.0 included")
    parser.add_argument("--at-frontier", action="store_true",
                        help="ours at the fraction that reaches each point of the frontier instead of --points "
                             "evenly spaced ones")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of alternating steps per row")
    parser.add_argument("--again", action="store_true", help="rerun rows that are cached")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the report from the cache")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the steps run (cuda: rows beside the report's, with the allocator's peaks)")
    parser.add_argument("--refresh-records", action="store_true",
                        help="compile our variants of cached rows again and take their new records where the same "
                             "program ran (same plan, same real peak); the others are listed for --again")
    args = parser.parse_args(argv)
    models = args.models.split(",") if args.models else list(MODELS)
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    folder = results_folder(args.device)  # the report's rows, or beside them another release's or device's
    folder.mkdir(parents=True, exist_ok=True)
    if args.device != "cpu" and args.refresh_records:
        parser.error("--refresh-records compares with the report's CPU rows: leave --device out")
    if args.refresh_records:
        for k, model in enumerate(models, 1):
            if (folder / f"{model}.json").exists():
                print(f"[{k}/{len(models)}] {model}: records ...", file=sys.stderr, flush=True)
                differ = refresh_records(model)
                print(f"    {'same programs' if not differ else 'changed, run again with --again: ' + str(differ)}",
                      file=sys.stderr, flush=True)
    elif not args.report_only:
        for k, model in enumerate(models, 1):
            path = folder / f"{model}.json"
            if path.exists() and not args.again:
                continue
            print(f"[{k}/{len(models)}] {model} ...", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            row = run_row(model, points=args.points, rounds=args.rounds, device=args.device,
                          at_frontier=args.at_frontier)
            row["seconds"] = time.perf_counter() - t0
            row["torch"] = installed_version()
            path.write_text(json.dumps(row) + "\n")
            peaks = {name: v["real_peak"] for name, v in row["variants"].items()}
            print(f"    {row['seconds']:.0f}s  real peaks {peaks}", file=sys.stderr, flush=True)
    from .budget_report import inductor_table
    from .report import write_report
    from .tables import write_between_markers

    write_report(RESULTS / "bench")
    if folder == BUDGETS:
        write_between_markers("budget-table", inductor_table())
    write_between_markers("budget-cuda-table", cuda_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
