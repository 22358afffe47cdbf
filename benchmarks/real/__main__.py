"""``python -m benchmarks.real``: every model in every mode under every variant, cached; then the report.

    python -m benchmarks.real [--models A,B] [--modes infer,train] [--again] [--report-only]

Each (model, mode) row is one process-local run of :func:`~benchmarks.real.run.run_case`
(all variants side by side, same inputs), written to
``benchmarks/real/results/bench/<model>_<mode>.json``; a cached row is not rerun
unless ``--again``. The report (docs/real-models.md, CSV and JSON next to the
rows, one plot per model in docs/img/real/) is rebuilt from the cache.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .models import MODELS
from .report import RESULTS, write_report

MODES = ("infer", "train")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real", description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated (default: all {len(MODELS)})")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--again", action="store_true", help="rerun rows that are cached")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the report from the cache")
    args = parser.parse_args(argv)
    models = args.models.split(",") if args.models else list(MODELS)
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    folder = RESULTS / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        from .run import run_case

        cases = [(m, mode) for m in models for mode in args.modes.split(",")]
        for k, (model, mode) in enumerate(cases, 1):
            path = folder / f"{model}_{mode}.json"
            if path.exists() and not args.again:
                continue
            t0 = time.perf_counter()
            print(f"[{k}/{len(cases)}] {model} {mode} ...", file=sys.stderr, flush=True)
            row = run_case(model, "bench", mode)
            row["seconds"] = time.perf_counter() - t0
            path.write_text(json.dumps(row) + "\n")
            peaks = {v: r["real_peak"] for v, r in row["variants"].items()}
            print(f"    {row['seconds']:.0f}s  real peaks {peaks}", file=sys.stderr, flush=True)
    write_report(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
