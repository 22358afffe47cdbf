"""``python -m benchmarks.real.dynamic``: real models compiled once with ``dynamic=True``, run at several sizes.

    python -m benchmarks.real.dynamic [--models A,B] [--modes infer,train] [--again] [--report-only]
    python -m benchmarks.real.dynamic --add-static-stock   # the stock-per-size reference for cached rows

Each (model, mode) row is one process-local run of :func:`run_dynamic_case`:
text models at four sequence lengths (batch 8), image models at four batch
sizes. Per row and size, the real allocated peak (:func:`reorder.measure.measure`,
one call) of

* **stock**: ``torch.compile(step, dynamic=True)``, compiled once;
* **hook**: the same under ``reorder.inductor.use(compare=True)`` (our order;
  its graphs are written to ``benchmarks/real/graphs/dynamic/<model>_<mode>/``
  in our format, symbols and ranges included);
* **slab**: the same under ``use(slab=True)`` (our order, our pools, their
  offsets expressions in the size symbols);
* **static slab** (the reference): ``use(slab=True)`` compiled for that one
  size (``dynamic=False``), a fresh compile per size;
* **static stock**: stock compiled for that one size, which says how much of
  a gap between the two slabs is what compiling once costs Inductor itself.

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

from ..variants import load_records, records_json
from .models import MODELS, build_model, make_inputs
from .rows import run_rows
from .run import _difference, _tensors

__all__ = ["DYNAMIC_ROWS", "DynamicRow", "dynamic_section", "run_dynamic_case"]

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "dynamic"
GRAPHS = HERE / "graphs" / "dynamic"
IMAGES = HERE.parents[1] / "docs" / "img" / "real" / "dynamic"


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

VARIANTS = ("stock", "hook", "slab")


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
        outputs = [t.detach().clone() for t in _tensors(self.run(inputs))]
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


def _context(variant: str, capture_dir: Path | None):
    import contextlib

    from reorder import inductor

    if variant == "stock":
        return contextlib.nullcontext()
    if variant == "hook":
        return inductor.use(compare=True, capture_dir=capture_dir)
    return inductor.use(slab=True)


def _unique_graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


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
        t0 = time.perf_counter()
        stepper = Stepper(base, mode, dynamic=True)
        before = _unique_graphs()
        peaks, outputs[variant] = {}, {}
        with _context(variant, capture) as session:
            for size in spec.sizes:
                outputs[variant][size] = stepper.step(inputs_at(size))  # the first size compiles
                peaks[str(size)] = stepper.peak(inputs_at(size))
        row["variants"][variant] = {"real_peak": peaks, "compiles": _unique_graphs() - before,
                                    "seconds": time.perf_counter() - t0, "records": records_json(session)}
        print(f"    {variant}: {peaks} ({row['variants'][variant]['compiles']} graphs compiled, "
              f"{row['variants'][variant]['seconds']:.0f}s)", file=sys.stderr, flush=True)
        del stepper
    for variant in VARIANTS[1:]:
        row["difference_to_stock"][variant] = {str(size): _difference(outputs[variant][size], outputs["stock"][size])
                                               for size in spec.sizes}
    for reference in STATIC:
        row["variants"][reference] = run_static(name, mode, reference)
    torch._dynamo.reset()
    return row


def add_static_stock(name: str, mode: str) -> dict:
    """A cached row with the stock-per-size reference added (rows cached before it was measured)."""
    row = json.loads((RESULTS / f"{name}_{mode}.json").read_text())
    row["variants"]["static_stock"] = run_static(name, mode, "static_stock")
    return row


# ---------------------------------------------------------------------------------------------------------------
# The report.


def _rows() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*_*.json"))]


def _mb(n: int | None) -> str:
    return "" if n is None else f"{n / 1e6:.2f}"


def slab_fallbacks(row: dict) -> list[str]:
    """The slab variant's fallback records of a row, as ``graph: reason``."""
    from reorder.inductor.session import FallbackRecord

    return [f"{r.graph}: {r.reason}" for r in load_records(row["variants"]["slab"]) if isinstance(r, FallbackRecord)]


def stacked_pools(row: dict) -> int:
    """Pools of the slab variant whose offsets are expressions in the size symbols."""
    from reorder.inductor.session import SlabRecord

    return sum(r.stacked for r in load_records(row["variants"]["slab"]) if isinstance(r, SlabRecord))


def worst_pool_ratio(row: dict) -> float:
    """The largest pool's slab over its own live-bytes bound, at the worst evaluation point of any graph of the
    slab variant (1.000: every pool at its bound at every point)."""
    from reorder.inductor.session import SlabRecord

    ratios = [at["worst_ratio"] for r in load_records(row["variants"]["slab"]) if isinstance(r, SlabRecord)
              for at in (r.peaks_at or {}).values()]
    return max(ratios, default=1.0)


def plot(row: dict, path: Path) -> bool:
    """Two panels against size: the real peak of every variant (log-log), and each one's peak relative to stock's
    at that size; the legend below both (False without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    sizes = row["sizes"]
    stock = [row["variants"]["stock"]["real_peak"][str(s)] for s in sizes]
    fig, (absolute, relative) = plt.subplots(1, 2, figsize=(10, 4.2))
    styles = {"stock": ("stock, compiled once", "-", "o"), "hook": ("hook, compiled once", "--", "s"),
              "slab": ("slab, compiled once", "-", "^"), "static_slab": ("slab compiled per size", ":", "x"),
              "static_stock": ("stock compiled per size", ":", "+")}
    for variant, (label, line, marker) in styles.items():
        if variant not in row["variants"]:
            continue
        peaks = [row["variants"][variant]["real_peak"][str(s)] for s in sizes]
        absolute.plot(sizes, [p / 1e6 for p in peaks], line, marker=marker, label=label)
        relative.plot(sizes, [100 * (p / q - 1) for p, q in zip(peaks, stock, strict=True)], line, marker=marker)
    axis = row["axis"] + (" length (batch 8)" if row["axis"] == "sequence" else " size")
    for ax in (absolute, relative):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_xlabel(axis)
        ax.grid(True, alpha=0.3)
    absolute.set_yscale("log")
    absolute.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    absolute.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    absolute.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    absolute.set_ylabel("real allocated peak (MB)")
    relative.set_ylabel("real peak against stock compiled once (%)")
    relative.axhline(0, color="black", linewidth=0.6)
    fig.suptitle(f"{row['model']} {row['mode']}: torch.compile(dynamic=True) once, every size")
    fig.legend(loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def dynamic_section() -> list[str]:
    """The report's dynamic-shapes section from the cached rows (empty without any), with a plot per row."""
    rows = _rows()
    if not rows:
        return []
    lines = ["## Dynamic shapes (compiled once, `dynamic=True`)", "",
             "Generated by `python -m benchmarks.real.dynamic`. Each variant compiles the step **once** with "
             "`torch.compile(step, dynamic=True)` at the first size and runs it at every size; the reference, "
             "**static slab**, is `use(slab=True)` compiled for that one size (`dynamic=False`). Real allocated "
             "peaks (MB) from the allocator's events, one call, variants side by side in one process. Text models "
             "vary the sequence length (batch 8), image models the batch size. Compiles: Dynamo graphs each "
             "compiled-once variant compiled over all sizes (stock / hook / slab). Difference: the largest "
             "difference of any output or gradient of hook or slab against stock at that size, relative to the "
             "tensor's magnitude (0: bitwise).", "",
             "| model | mode | size | stock | hook | slab | static slab | static stock | slab/stock | slab/static | "
             "stock/static stock | compiles | slab fallbacks | difference |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    worst_stock, worst_static, fallbacks = 0.0, 0.0, 0
    for row in rows:
        v = row["variants"]
        compiles = " / ".join(str(v[name]["compiles"]) for name in VARIANTS)
        falls = slab_fallbacks(row)
        fallbacks += len(falls)
        for size in row["sizes"]:
            key = str(size)
            peak = {name: v[name]["real_peak"][key] if name in v else None
                    for name in (*VARIANTS, "static_slab", "static_stock")}
            to_stock, to_static = peak["slab"] / peak["stock"], peak["slab"] / peak["static_slab"]
            stock_gap = "" if peak["static_stock"] is None else f"{peak['stock'] / peak['static_stock']:.3f}"
            worst_stock, worst_static = max(worst_stock, to_stock), max(worst_static, to_static)
            difference = max((d[key] for d in row["difference_to_stock"].values() if d[key] is not None),
                             default=None)
            lines.append(f"| {row['model']} | {row['mode']} | {size} | {_mb(peak['stock'])} | {_mb(peak['hook'])} | "
                         f"{_mb(peak['slab'])} | {_mb(peak['static_slab'])} | {_mb(peak['static_stock'])} | "
                         f"{to_stock:.3f} | {to_static:.3f} | {stock_gap} | {compiles} | {len(falls)} | "
                         f"{'' if difference is None else f'{difference:.1e}'} |")
    lines += ["", f"Across the {len(rows)} rows: slab/stock at most {worst_stock:.3f}, slab/static slab at most "
                  f"{worst_static:.3f}, {fallbacks} slab fallbacks. *static stock*: stock compiled for that one "
                  f"size; stock/static stock is what compiling once for every size costs Inductor itself.", ""]
    for row in rows:
        path = IMAGES / f"{row['model']}_{row['mode']}.png"
        if plot(row, path):
            lines.append(f"![{row['model']} {row['mode']}](img/real/dynamic/{path.name})")
    return lines + [""]


def inductor_table() -> list[str]:
    """The condensed table docs/inductor.md shows: per row, the slab against stock and against the slab compiled
    per size, at each size; compiles; fallbacks; pools whose offsets are expressions."""
    rows = _rows()
    lines = ["Measured with `python -m benchmarks.real.dynamic` (docs/real-models.md has every figure and a plot per "
             "row): each step compiled **once** with `dynamic=True` at the first size, run at four sizes (text: "
             "sequence length, batch 8; images: batch size); real allocated peaks from the allocator's events, "
             "variants side by side in one process. *static slab*: `use(slab=True)` compiled for that one size; *static "
             "stock*: stock compiled for that one size (what compiling once costs Inductor itself).", "",
             "| model | mode | sizes | stock MB | slab / stock | slab / static slab | stock / static stock | "
             "compiles stock / hook / slab | slab fallbacks | stacked pools | worst pool / bound |",
             "|---|---|---|---|---|---|---|---|---:|---:|---:|"]
    for row in rows:
        v = row["variants"]
        keys = [str(size) for size in row["sizes"]]
        ratio = lambda a, b: " / ".join(f"{v[a]['real_peak'][k] / v[b]['real_peak'][k]:.3f}" for k in keys)
        lines.append(f"| {row['model']} | {row['mode']} | {', '.join(keys)} ({row['axis']}) | "
                     f"{' / '.join(_mb(v['stock']['real_peak'][k]) for k in keys)} | {ratio('slab', 'stock')} | "
                     f"{ratio('slab', 'static_slab')} | "
                     f"{ratio('stock', 'static_stock') if 'static_stock' in v else ''} | "
                     f"{' / '.join(str(v[n]['compiles']) for n in VARIANTS)} | "
                     f"{len(slab_fallbacks(row))} | {stacked_pools(row)} | {worst_pool_ratio(row):.3f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real.dynamic", description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated (default: {', '.join(DYNAMIC_ROWS)})")
    parser.add_argument("--modes", default="infer,train")
    parser.add_argument("--again", action="store_true", help="rerun rows that are cached")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the report from the cache")
    parser.add_argument("--add-static-stock", action="store_true",
                        help="measure stock compiled per size for cached rows that lack it, and add it")
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
                 merge=lambda cached, new: {**new, "seconds": cached.get("seconds", 0.0) + new["seconds"]})
    elif not args.report_only:
        run_rows(cases, RESULTS, run_dynamic_case, args.again)
    from .report import DOC, RESULTS as BENCH_RESULTS, write_between_markers, write_report

    write_report(BENCH_RESULTS / "bench")
    write_between_markers("dynamic-table", inductor_table())
    print(f"dynamic section in {DOC.name} and its table in inductor.md: {len(_rows())} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
