"""Slab pools in compiled code against stock Inductor, measured: real peaks, pool bytes, allocator calls.

    python -m benchmarks.slab [--models resnet,inception,...] [--modes infer,train] [--batch 8]
                              [--cache-dir out/slab] [--out docs/slab-table.md]

For every zoo model, an inference step (``no_grad``) and a training step
(forward and backward, gradients set to None before each step), four
variants compiled from the same weights and inputs, caches off:

* ``stock``: plain ``torch.compile``;
* ``reorder``: ``reorder.inductor.use(memory_budget=None)`` (our order, Inductor's allocation);
* ``slab``: ``reorder.inductor.use(slab=True, memory_budget=None)``;
* ``inductor_pools``: Inductor's own ``memory_planning=True`` (in training,
  where Inductor switches it off, forced on for this comparison).

Each variant runs one warm-up step, then one step under
:func:`reorder.measure.measure`: the real allocated peak and the number of
allocations. Outputs and gradients are compared with stock's, bitwise.
Compile time is the first step's wall time. Per compiled graph, the pool
bytes: ours (sum of our pools, which never coexist, and the largest), the
live-bytes bound of what we pooled, and Inductor's intermediate pools. Each
(model, mode) row is cached as JSON in ``--cache-dir``, with each variant's
session records (``"records"``, read back by :func:`benchmarks.variants.load_records`).
The variants are the values in :data:`VARIANTS` (:mod:`benchmarks.variants`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path
from typing import Iterator

import torch
import torch._inductor.config as config

from reorder.inductor.session import FallbackRecord, Session, SlabRecord
from reorder.measure import measure
from reorder.report import markdown_table

from .variants import Variant, hooked, load_records, records_json, stock
from .zoo import MODELS, make


@contextlib.contextmanager
def inductor_pools(changes: tuple[tuple[str, object], ...], training: bool) -> Iterator[list[dict]]:
    """Inductor's ``memory_planning=True`` (in ``changes``); in training its wrapper pass is forced to plan too.

    Yields the list it fills with each compiled graph's pools: bytes of the intermediates' pools and of the outputs'.
    """
    from torch._inductor.codegen import memory_planning
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    plan, passes = memory_planning.MemoryPlanner.plan, PythonWrapperCodegen.run_wrapper_ir_passes
    pools_per_graph: list[dict] = []

    def recording_plan(self, lines):
        result = plan(self, lines)
        pools = [p for ps in self.pools.device_to_pools.values() for p in ps]
        outputs = {id(g.allocation.pool) for g in self.buffer_groups if g.is_output}
        pools_per_graph.append({
            "intermediates": sum(p.root.get_size_hint() for p in pools if id(p) not in outputs),
            "outputs": sum(p.root.get_size_hint() for p in pools if id(p) in outputs),
        })
        return result

    memory_planning.MemoryPlanner.plan = recording_plan
    if training:
        PythonWrapperCodegen.run_wrapper_ir_passes = lambda self, is_inference: passes(self, True)
    try:
        with config.patch(dict(changes)):
            yield pools_per_graph
    finally:
        memory_planning.MemoryPlanner.plan = plan
        PythonWrapperCodegen.run_wrapper_ir_passes = passes


VARIANTS: tuple[Variant, ...] = (
    stock(description="plain torch.compile"),
    hooked("reorder", "reorder.inductor.use(memory_budget=None): our order, Inductor's allocation"),
    hooked("slab", "reorder.inductor.use(slab=True, memory_budget=None): our order and our pools", slab=True),
    Variant("inductor_pools", "Inductor's own memory_planning=True, forced on in training", inductor_pools,
            (("memory_planning", True),)),
)


def run_step(compiled, model, inputs, training: bool):
    """One step: outputs (and every gradient, in training), detached."""
    if not training:
        with torch.no_grad():
            return [compiled(*inputs)]
    model.zero_grad(set_to_none=True)
    out = compiled(*inputs)
    out.float().sum().backward()
    return [out.detach()] + [p.grad for p in model.parameters()]


def run_variant(name: str, mode: str, variant: Variant, batch: int) -> dict:
    """Compile ``name`` under ``variant``; first-step seconds, the measured step, its results and its records."""
    torch._dynamo.reset()
    training = mode == "train"
    model, inputs = make(name, batch)
    model.train(training)
    with variant.enter(training) as recorded:
        compiled = variant.compile(model)
        t0 = time.perf_counter()
        run_step(compiled, model, inputs, training)
        compile_seconds = time.perf_counter() - t0
        results = [t.clone() for t in run_step(compiled, model, inputs, training)]
        meter = measure(lambda: run_step(compiled, model, inputs, training), "cpu")
    return {
        "peak": meter.peak, "allocations": meter.allocations, "compile_seconds": compile_seconds,
        "results": results, "records": records_json(recorded if isinstance(recorded, Session) else None),
        "inductor_pools": recorded if isinstance(recorded, list) else [],
    }


def compare(results: list, reference: list) -> str:
    if all(torch.equal(a, b) for a, b in zip(results, reference, strict=True)):
        return "bitwise"
    worst = max(float((a.float() - b.float()).abs().max()) for a, b in zip(results, reference, strict=True))
    return f"max |diff| {worst:.1e}"


def measure_row(name: str, mode: str, batch: int) -> dict:
    runs = {variant.name: run_variant(name, mode, variant, batch) for variant in VARIANTS}
    reference = runs["stock"]["results"]
    row = {"model": name, "mode": mode, "batch": batch}
    for variant, run in runs.items():
        row[variant] = {k: v for k, v in run.items() if k != "results"}
        row[variant]["outputs"] = compare(run["results"], reference)
    return row


def graph_rows(row: dict) -> list[dict]:
    """Pool bytes per compiled graph: ours, the bound of what we pooled, Inductor's intermediate pools."""
    ours = [r for r in load_records(row["slab"])
            if isinstance(r, SlabRecord) or (isinstance(r, FallbackRecord) and r.stage == "slab")]
    theirs = row["inductor_pools"]["inductor_pools"]
    out = []
    for k, plan in enumerate(ours):
        if isinstance(plan, FallbackRecord):
            out.append({"model": row["model"], "mode": row["mode"], "graph": plan.graph, "ours": "fallback",
                        "largest": "", "bound": "", "slab/bound": "", "inductor": "", "note": plan.reason})
            continue
        inductor = theirs[k]["intermediates"] if k < len(theirs) else None
        out.append({
            "model": row["model"], "mode": row["mode"], "graph": plan.graph, "ours": plan.pool_bytes,
            "largest": max(plan.pools, default=0), "bound": plan.bound,
            "slab/bound": f"{plan.worst_ratio:.3f}", "inductor": inductor if inductor is not None else "",
            "note": f"{len(plan.pools)} pools, {plan.pooled} pooled, {plan.individual} left individual",
        })
    return out


def summary_row(row: dict) -> dict:
    stock, slab = row["stock"], row["slab"]
    return {
        "model": row["model"], "mode": row["mode"],
        "stock": stock["peak"], "reorder": row["reorder"]["peak"], "slab": slab["peak"],
        "inductor pools": row["inductor_pools"]["peak"],
        "slab/stock": f"{slab['peak'] / stock['peak']:.3f}" if stock["peak"] else "",
        "allocs stock/slab/pools": f"{stock['allocations']}/{slab['allocations']}/"
                                   f"{row['inductor_pools']['allocations']}",
        "outputs slab / pools": f"{slab['outputs']} / {row['inductor_pools']['outputs']}",
        "compile s stock/slab": f"{stock['compile_seconds']:.1f}/{slab['compile_seconds']:.1f}",
    }


def table(dicts: list[dict]) -> str:
    return markdown_table(list(dicts[0]), [list(d.values()) for d in dicts]) if dicts else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default="infer,train")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--cache-dir", default="out/slab")
    parser.add_argument("--out", default=None, help="also write the markdown tables here")
    args = parser.parse_args()
    config.force_disable_caches = True
    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        for mode in args.modes.split(","):
            path = cache / f"{name}_{mode}_{args.batch}.json"
            if path.exists():
                row = json.loads(path.read_text())
            else:
                row = measure_row(name, mode, args.batch)
                path.write_text(json.dumps(row, indent=1) + "\n")
            rows.append(row)
            print(f"{name} {mode}: stock {row['stock']['peak']} slab {row['slab']['peak']}", flush=True)
    text = (f"Real allocated peak (bytes, CPU, batch {args.batch}) per step, `reorder.measure`:\n\n"
            + table([summary_row(r) for r in rows])
            + "\n\nPool bytes per compiled graph (ours: sum of pools, which never coexist; largest pool; "
              "live-bytes bound of the pooled buffers; Inductor's intermediate pools):\n\n"
            + table([g for r in rows for g in graph_rows(r)]))
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
