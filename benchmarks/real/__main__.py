"""``python -m benchmarks.real``: every model in every mode under every variant, cached; then the report.

    python -m benchmarks.real [--models A,B] [--modes infer,train] [--again] [--report-only]
    python -m benchmarks.real --size full --variants hook   # full depth, at the estimate level
    python -m benchmarks.real --models A --variants stock,slab --again   # rerun some variants of a cached row
    python -m benchmarks.real --size full --models A --modes train --capture-only   # graphs and estimates only

A rerun of some ``--variants`` replaces those variants in the cached row and keeps the others.
The memory-budget section (every training row at several budgets, ours against Inductor's
``activation_memory_budget``) has its own runner: ``python -m benchmarks.real.budget``.

Each (model, mode) row is one process-local run of :func:`~benchmarks.real.run.run_case`
(all variants side by side, same inputs), written to
``benchmarks/real/results/bench/<model>_<mode>.json``, and the hook's graphs
(with Inductor's figures) to ``benchmarks/real/graphs/bench/<model>_<mode>/``,
where ``python -m benchmarks.optimum`` records their optima; a cached row is not rerun
unless ``--again``. The report (docs/real-models.md, CSV and JSON next to the
rows, one plot per model in docs/img/real/) is rebuilt from the cache. Under
another torch release than the report's (``tables.REPORT_RELEASE``), rows and
graphs go to ``bench-torch<release>/`` instead, and the report's section
"Across torch releases" sets them beside its own rows.
"""

from __future__ import annotations

import argparse
import sys
import time

from .models import MODELS, SIZES
from .report import write_report
from .tables import GRAPHS, RESULTS, release_folder
from .variants import VARIANTS

MODES = ("infer", "train")


def _merged(cached: dict, rerun: dict) -> dict:
    """``cached`` with the variants of ``rerun`` (a subset, rerun side by side with stock) replacing its own."""
    merged = {**cached, "variants": {**cached["variants"], **rerun["variants"]},
              "difference_to_stock": {**cached.get("difference_to_stock", {}), **rerun["difference_to_stock"]}}
    merged["seconds"] = cached.get("seconds", 0.0)  # the full row's time stays the row's time
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real", description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated (default: all {len(MODELS)})")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--size", default="bench", choices=SIZES,
                        help="bench: small widths, every variant; full: the published configurations")
    parser.add_argument("--variants", help=f"comma-separated subset of {', '.join(v.name for v in VARIANTS)}")
    parser.add_argument("--again", action="store_true", help="rerun rows that are cached")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the report from the cache")
    parser.add_argument("--capture-only", action="store_true",
                        help="compile and run one step under the hook, write its graphs (the estimate level); "
                             "no timing, no real peak")
    args = parser.parse_args(argv)
    models = args.models.split(",") if args.models else list(MODELS)
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    variants = VARIANTS if not args.variants else tuple(v for v in VARIANTS if v.name in args.variants.split(","))
    folder = RESULTS / release_folder(args.size)
    folder.mkdir(parents=True, exist_ok=True)
    if args.capture_only:
        from .run import capture_case

        for model in models:
            for mode in args.modes.split(","):
                directory = GRAPHS.parent / release_folder(args.size) / f"{model}_{mode}"
                t0 = time.perf_counter()
                print(f"capturing {model} {mode} ({args.size}) ...", file=sys.stderr, flush=True)
                graphs = capture_case(model, args.size, mode, directory)
                print(f"    {time.perf_counter() - t0:.0f}s  {len(graphs)} graphs in {directory}", file=sys.stderr,
                      flush=True)
    elif not args.report_only:
        from .rows import run_rows
        from .run import run_case

        run_rows([(m, mode) for m in models for mode in args.modes.split(",")], folder,
                 lambda model, mode: run_case(model, args.size, mode, variants,
                                              capture_dir=GRAPHS.parent / release_folder(args.size) /
                                              f"{model}_{mode}"),
                 args.again, _merged if args.variants else None,
                 lambda row: f"real peaks {({v: r['real_peak'] for v, r in row['variants'].items()})}")
    if folder.name == "bench":  # the report's own rows; another release's sit beside them (see the report)
        write_report(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
