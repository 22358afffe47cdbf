"""``python -m benchmarks.real.dynamic``: real models compiled once with ``dynamic=True``, run at several sizes.

    python -m benchmarks.real.dynamic [--models A,B] [--modes infer,train] [--again] [--report-only]
    python -m benchmarks.real.dynamic --add-static-stock   # the stock-per-size reference for cached rows

Each (model, mode) row is one process-local run of :func:`run_dynamic_case`:
text models at four sequence lengths (batch 8), image models at four batch
sizes. Per row and size, the real allocated peak (:func:`reorder.measure.measure`,
one call) of

* **stock**: ``torch.compile(step, dynamic=True)``, compiled once;
* **hook**: the same under ``reorder.inductor.use(compare=True, memory_budget=None)`` (our order;
  its graphs are written to ``benchmarks/real/graphs/dynamic/<model>_<mode>/``
  in our format, symbols and ranges included);
* **slab**: the same under ``use(slab=True, memory_budget=None)`` (our order, our pools, their
  offsets expressions in the size symbols);
* **static slab** (the reference): ``use(slab=True)`` compiled for that one
  size (``dynamic=False``), a fresh compile per size;
* **static stock**: stock compiled for that one size, which says how much of
  a gap between the two slabs is what compiling once costs Inductor itself;
* **budget** (training rows): ``use(memory_budget=0.5)``, compiled once, whose
  partition is chosen at the first size and at twice it
  (:mod:`reorder.budget.frontier`); its loss and gradients against stock's at
  every size. ``--add-budget`` measures it (and stock beside it) for cached
  rows.

The compiled-once variants stay in their context for every size, so a
recompile (if any) goes through our passes too; the Dynamo graphs each
variant compiled are counted. Outputs and gradients of hook and slab are
compared with stock's at every size (the largest difference relative to each
tensor's magnitude). A training step is the compiled forward and loss,
``loss.backward()`` and an eager ``SGD.step()``, as in :mod:`benchmarks.real.run`;
each variant runs the same sequence of steps from the same weights.

Rows are cached in ``benchmarks/real/results/dynamic/``; the report section
(:func:`dynamic_section`, part of docs/real-models.md) and one plot per row
(docs/img/real/dynamic/<model>_<mode>.png: real peak against size) are
rebuilt from the cache.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import shutil
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from reorder.measure import measure

from ..variants import records_json
from .models import MODELS, build_model, make_inputs
from .dynamic_report import RESULTS, VARIANTS, cached_rows, inductor_table
from .report import write_report
from .rows import run_rows
from .run import difference, tensors, unique_graphs
from .tables import DOC, RESULTS as BENCH_RESULTS, write_between_markers

__all__ = ["DYNAMIC_ROWS", "DynamicRow", "run_dynamic_case"]

HERE = Path(__file__).resolve().parent
GRAPHS = HERE / "graphs" / "dynamic"


@dataclass(frozen=True)
class DynamicRow:
    """One architecture of the dynamic section: the axis that varies, its sizes (the first compiles), and config
    overrides (GPT-2's positions must reach the longest sequence)."""

    axis: str  # "sequence" or "batch"
    sizes: tuple[int, ...]
    overrides: tuple[tuple[str, object], ...] = ()


TEXT = DynamicRow("sequence", (32, 64, 128, 256))
IMAGE = DynamicRow("batch", (2, 4, 8, 16))

DYNAMIC_ROWS: dict[str, DynamicRow] = {
    "BertForMaskedLM": TEXT,
    "GPT2LMHeadModel": DynamicRow("sequence", TEXT.sizes, (("n_positions", 256),)),
    "T5ForConditionalGeneration": TEXT,
    "DebertaV2ForQuestionAnswering": TEXT,
    "ResNetForImageClassification": IMAGE,
    "ViTForImageClassification": IMAGE,
}



class Stepper:
    """One variant's model copy, its compiled step and optimizer: ``step(inputs)`` runs one step and returns its
    outputs and, in training, the gradients (then set to None)."""

    def __init__(self, base: torch.nn.Module, mode: str, dynamic: bool):
        torch._dynamo.reset()
        self.model = copy.deepcopy(base)
        self.train = mode == "train"
        model = self.model
        forward = (lambda inputs: model(**inputs).loss) if self.train else \
            (lambda inputs: tuple(model(**inputs).to_tuple()))
        self.fn = torch.compile(forward, dynamic=dynamic)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=1e-3) if self.train else None

    def run(self, inputs: dict):
        if not self.train:
            with torch.no_grad():
                return self.fn(inputs)
        loss = self.fn(inputs)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def step(self, inputs: dict) -> list[torch.Tensor]:
        outputs = [t.detach().clone() for t in tensors(self.run(inputs))]
        if self.train:
            outputs += [p.grad.clone() for p in self.model.parameters() if p.grad is not None]
            self.optimizer.zero_grad(set_to_none=True)
        return outputs

    def peak(self, inputs: dict) -> int:
        gc.collect()
        m = measure(lambda: self.run(inputs), "cpu")
        if self.train:
            self.optimizer.zero_grad(set_to_none=True)
        return m.peak


#: The memory budget of the training rows' budget variant, a fraction of stock's estimated step peak.
BUDGET = 0.5


def _context(variant: str, capture_dir: Path | None):
    import contextlib

    from reorder import inductor

    if variant == "stock":
        return contextlib.nullcontext()
    if variant == "hook":
        return inductor.use(compare=True, capture_dir=capture_dir, memory_budget=None)
    if variant == "budget":
        return inductor.use(memory_budget=BUDGET)
    return inductor.use(slab=True, memory_budget=None)


def _compiled_once(base, mode: str, variant: str, sizes, inputs_at, capture: Path | None = None):
    """``variant`` compiled once with ``dynamic=True`` at the first size and run at every size: its entry of the
    row (real peak per size, Dynamo graphs compiled, seconds, records) and its outputs per size."""
    t0 = time.perf_counter()
    stepper = Stepper(base, mode, dynamic=True)
    before = unique_graphs()
    peaks, outputs = {}, {}
    with _context(variant, capture) as session:
        for size in sizes:
            outputs[size] = stepper.step(inputs_at(size))  # the first size compiles
            peaks[str(size)] = stepper.peak(inputs_at(size))
    entry = {"real_peak": peaks, "compiles": unique_graphs() - before, "seconds": time.perf_counter() - t0,
             "records": records_json(session)}
    print(f"    {variant}: {peaks} ({entry['compiles']} graphs compiled, {entry['seconds']:.0f}s)", file=sys.stderr,
          flush=True)
    del stepper
    return entry, outputs


def _budget_entry(base, mode: str, sizes, inputs_at, stock_outputs: dict) -> dict:
    """The budget variant's entry: as :func:`_compiled_once`, with its fraction and its largest difference to
    stock's loss and gradients at each size."""
    entry, outputs = _compiled_once(base, mode, "budget", sizes, inputs_at)
    entry["fraction"] = BUDGET
    entry["difference_to_stock"] = {str(size): difference(outputs[size], stock_outputs[size]) for size in sizes}
    return entry


#: The references compiled for one size at a time (``dynamic=False``): a name, and the variant whose context they
#: compile in. The slab per size is the criterion; stock per size says how much of a gap is Inductor's own.
STATIC = {"static_slab": "slab", "static_stock": "stock"}


def _row_model(name: str, mode: str):
    """The row's model (seeded) and a function giving its inputs at a size of the row's axis."""
    spec = DYNAMIC_ROWS[name]
    base, model_config = build_model(name, "bench", mode, dict(spec.overrides))

    def inputs_at(size: int) -> dict:
        if spec.axis == "batch":
            return make_inputs(name, model_config, "bench", mode, batch=size)
        return make_inputs(name, model_config, "bench", mode, sequence=size)

    return base, inputs_at


def run_static(name: str, mode: str, reference: str) -> dict:
    """The real peak of ``reference`` (a key of :data:`STATIC`) at each size of the row, a fresh compile for each."""
    base, inputs_at = _row_model(name, mode)
    peaks, records = {}, {}
    for size in DYNAMIC_ROWS[name].sizes:
        stepper = Stepper(base, mode, dynamic=False)
        with _context(STATIC[reference], None) as session:
            stepper.step(inputs_at(size))
            peaks[str(size)] = stepper.peak(inputs_at(size))
        records[str(size)] = records_json(session)
        del stepper
    print(f"    {reference}: {peaks}", file=sys.stderr, flush=True)
    return {"real_peak": peaks, "records": records}


def run_dynamic_case(name: str, mode: str) -> dict:
    """Every variant of one row at every size, side by side in this process (see the module docstring)."""
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
    from torch._inductor import config

    config.force_disable_caches = True  # every variant compiles for real
    spec = DYNAMIC_ROWS[name]
    base, inputs_at = _row_model(name, mode)
    row = {"model": name, "mode": mode, "axis": spec.axis, "sizes": list(spec.sizes), "variants": {},
           "difference_to_stock": {}}
    outputs: dict[str, dict[int, list[torch.Tensor]]] = {}
    for variant in VARIANTS:
        capture = GRAPHS / f"{name}_{mode}" if variant == "hook" else None
        if capture is not None:
            shutil.rmtree(capture, ignore_errors=True)  # the graphs of an earlier run are not this run's
        row["variants"][variant], outputs[variant] = _compiled_once(base, mode, variant, spec.sizes, inputs_at,
                                                                    capture)
    if mode == "train":
        row["variants"]["budget"] = _budget_entry(base, mode, spec.sizes, inputs_at, outputs["stock"])
    for variant in VARIANTS[1:]:
        row["difference_to_stock"][variant] = {str(size): difference(outputs[variant][size], outputs["stock"][size])
                                               for size in spec.sizes}
    for reference in STATIC:
        row["variants"][reference] = run_static(name, mode, reference)
    torch._dynamo.reset()
    return row


def add_budget(name: str, mode: str) -> dict:
    """A cached training row with the budget variant added (or measured again), stock compiled beside it for
    its outputs."""
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
    from torch._inductor import config

    config.force_disable_caches = True
    row = json.loads((RESULTS / f"{name}_{mode}.json").read_text())
    spec = DYNAMIC_ROWS[name]
    base, inputs_at = _row_model(name, mode)
    _, stock_outputs = _compiled_once(base, mode, "stock", spec.sizes, inputs_at)
    row["variants"]["budget"] = _budget_entry(base, mode, spec.sizes, inputs_at, stock_outputs)
    torch._dynamo.reset()
    return row


def add_static_stock(name: str, mode: str) -> dict:
    """A cached row with the stock-per-size reference added (rows cached before it was measured)."""
    row = json.loads((RESULTS / f"{name}_{mode}.json").read_text())
    row["variants"]["static_stock"] = run_static(name, mode, "static_stock")
    return row


def _seconds_added(cached: dict, new: dict) -> dict:
    """A row measured partly again: the new row, with the seconds of both runs."""
    return {**new, "seconds": cached.get("seconds", 0.0) + new["seconds"]}


# ---------------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real.dynamic", description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated (default: {', '.join(DYNAMIC_ROWS)})")
    parser.add_argument("--modes", default="infer,train")
    parser.add_argument("--again", action="store_true", help="rerun rows that are cached")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the report from the cache")
    parser.add_argument("--add-static-stock", action="store_true",
                        help="measure stock compiled per size for cached rows that lack it, and add it")
    parser.add_argument("--add-budget", action="store_true",
                        help="measure the budget variant (stock beside it) for the cached training rows")
    args = parser.parse_args(argv)
    models = args.models.split(",") if args.models else list(DYNAMIC_ROWS)
    unknown = [m for m in models if m not in DYNAMIC_ROWS]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(DYNAMIC_ROWS)} (of {', '.join(MODELS)})")
    cases = [(m, mode) for m in models for mode in args.modes.split(",")]
    if args.add_static_stock:
        lacking = [(m, mode) for m, mode in cases if (RESULTS / f"{m}_{mode}.json").exists()
                   and "static_stock" not in json.loads((RESULTS / f"{m}_{mode}.json").read_text())["variants"]]
        run_rows(lacking, RESULTS, add_static_stock, again=True,
                 merge=_seconds_added)
    elif args.add_budget:
        cached = [(m, mode) for m, mode in cases if mode == "train" and (RESULTS / f"{m}_{mode}.json").exists()]
        run_rows(cached, RESULTS, add_budget, again=True,
                 merge=_seconds_added)
    elif not args.report_only:
        run_rows(cases, RESULTS, run_dynamic_case, args.again)
    write_report(BENCH_RESULTS / "bench")
    write_between_markers("dynamic-table", inductor_table())
    print(f"dynamic section in {DOC.name} and its table in measured.md: {len(cached_rows())} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
