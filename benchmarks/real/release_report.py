"""The real-model rows under each torch release side by side: the report's section "Across torch releases".

``python -m benchmarks.real`` writes its rows under the running release's
folder (:func:`~benchmarks.real.tables.release_folder`): ``results/bench`` for
the report's own release, ``results/bench-torch2.15`` for 2.15. This section
sets every row measured under another release beside the report's row of the
same model and mode: each variant's real peak under both, and the change. A
change of more than :data:`NOTABLE` is a row a reader must be told about: its
cause, found by reading both releases' generated code, is in :data:`CAUSES`,
and a notable change without a cause is listed as unexplained.
"""

from __future__ import annotations

from pathlib import Path

from .tables import REPORT_RELEASE, RESULTS, cached_rows

__all__ = ["CAUSES", "NOTABLE", "compared_rows", "releases_section"]

#: A relative change of a real peak between releases that needs its cause stated.
NOTABLE = 0.01

#: Why a release changes a row's real peaks by more than :data:`NOTABLE`, by (release, benchmark, model, mode):
#: benchmark "bench" (the main table) or "budget" (whose rows have mode "train").
CAUSES: dict[tuple[str, str, str, str], str] = {
    ("2.15", "bench", "ConvNextForImageClassification", "train"): (
        "a change in torch, not in the hook: every compiled variant, stock's included, goes from 5.00 to 11.07 MB "
        "(ours from 4.93 and stock with layout_optimization=False from 4.60: the 2.13 row was measured again with "
        "the step's second call, which compiles again, under the variant; 2.15's read stock's program, measured "
        "before that), above eager's "
        "10.87 MB (the same on both releases). 2.13's lowering hands the backward of each depthwise "
        "7×7 convolution a contiguous output gradient and its input in N, H, C, W order; 2.15's hands both over "
        "channels-last, and ATen's CPU `convolution_backward` then allocates temporaries of 256 times the "
        "weight's bytes while it runs (6,422,528 B for the 128-channel stage, 3,211,264 B and 1,605,632 B for "
        "the others; the profiler's allocation events, `aten::convolution_backward` their parent). The compiled "
        "backward's operator temporaries go from 262,656 B to 6,448,128 B; its own buffers fall from 626,216 B "
        "to 232,488 B."),
    **{("2.15", "bench", model, "train"): (
        f"not a change in torch: the row was measured again under {REPORT_RELEASE} with the step's second call "
        f"under the variant, and 2.15's before that. This row's second call compiles again; run outside the "
        f"hook's context it compiled stock's program, which the 2.15 row's hook, slab and guard measured "
        f"(stock's {stock}). Under {REPORT_RELEASE} ours measure {ours}.")
       for model, stock, ours in (
           ("ViTForImageClassification", "10.64 MB", "9.85 MB (hook, slab and guard)"),
           ("SwinForImageClassification", "11.90 MB", "10.84 MB with the hook and the guard, 10.70 MB with the slab"),
           ("ResNetForImageClassification", "4.25 MB", "4.09 MB with the guard (the hook's and the slab's are "
                                                       "stock's to 256 B), and stock with layout_optimization=False "
                                                       "(the same fix) 3.60 MB"))},
    ("2.15", "bench", "EfficientNetForImageClassification", "train"): (
        "the same change in torch as ConvNeXt's: every compiled variant, stock's included, goes from 16.86 to "
        "30.24 MB, above eager's 23.23 MB (the same on both releases). Under 2.15 the backward of the depthwise "
        "convolutions allocates temporaries of 256 times the weight's bytes inside `aten::convolution_backward` "
        "(14,745,600 B beside a 57,600 B weight gradient, then 8,601,600 B twice, 6,144,000 B and 5,308,416 B)."),
    ("2.15", "budget", "ConvNextForImageClassification", "train"): (
        "the main table's ConvNeXt change in torch, at every point: stock's step goes from 5.00 to 11.07 MB, ours "
        "from 4.99 to 11.00 MB at 1.0 and from 3.14 to 9.12 MB at 0.855 and below, Inductor's budget from 3.81 to "
        "9.64 MB. The depthwise convolutions' backward allocates the same 256-times-the-weight temporaries inside "
        "`aten::convolution_backward` whichever partition runs; the partitions are the same, and our lowest point "
        "stays below Inductor's by the same half megabyte."),
    ("2.15", "budget", "EfficientNetForImageClassification", "train"): (
        "the main table's EfficientNet change in torch, at every point: stock's step goes from 16.86 to 30.24 MB, "
        "ours at 0.893 (the fraction both releases ran) from 13.69 to 27.01 MB, Inductor's budget from 13.69 to "
        "27.01 MB (the depthwise convolutions' backward temporaries, 13.4 MB more at every point). The partitions "
        "are the same."),
    ("2.15", "budget", "MobileNetV2ForImageClassification", "train"): (
        "every point of ours and stock's is the same to the byte; Inductor's own budget at 0.699 and 0.548 goes "
        "from 13.97 to 10.24 MB. Its partition is the same on both releases (7,942,316 B held when the backward "
        "starts, under both), so the change is in the code 2.15 generates for that backward, which allocates "
        "3.74 MB less at its peak; which change of 2.15's code generation does it was not traced. Ours at 0.699 "
        "(10.23 MB) stays below it."),
    ("2.15", "budget", "MobileBertForQuestionAnswering", "train"): (
        "at 0.762 our partition is the same on both releases (estimated step peak 13,281,280 B, 2 segments at "
        "price 1), but 2.15's min-cut partitioner, given the same checkpoint policies, saves the second layer's "
        "input (8 × 128 × 256 floats) where 2.13 saves the embedding output of the same size. The embedding "
        "output then dies in the forward, and 2.15's wrapper hands its storage to a later matrix product "
        "(`buf57 = reinterpret_tensor(buf7, ...)  # reuse`) where 2.13's allocates a new megabyte: the compiled "
        "forward's peak falls from 13,271,040 B to 12,238,924 B, and the real peak with it (13.27 → 12.24 MB). "
        "Every other point of the row is the same to the byte, or 4 bytes lower."),
}

#: The main table's variants, in its column order.
VARIANTS = ("eager", "stock", "hook", "slab", "guard", "memory_planning")


def _rows(folder: Path) -> dict[tuple[str, str], dict]:
    """``folder``'s cached rows by (model, mode)."""
    return {(row["model"], row.get("mode", "train")): row for row in cached_rows(folder)}


def compared_rows(name: str = "bench", results: Path = RESULTS) -> dict[str, list[dict]]:
    """For each other release with rows in ``results/<name>-torch<release>``: ``{"model", "mode", "peaks":
    {variant: (ours, theirs)}, "largest_change", "changed_most"}`` per row measured under both (``ours``: the
    report's release, ``results/<name>``; variants measured under both, in the report's row's order)."""
    base = _rows(results / name)
    compared = {}
    for folder in sorted(results.glob(f"{name}-torch*")):
        release = folder.name.removeprefix(f"{name}-torch")
        rows = []
        for key, row in _rows(folder).items():
            if key not in base:
                continue
            peaks = {v: (measured["real_peak"], row["variants"][v]["real_peak"])
                     for v, measured in base[key]["variants"].items() if v in row["variants"]}
            changes = {v: abs(new - old) / old for v, (old, new) in peaks.items() if old}
            changed_most = max(changes, key=changes.get, default=None)
            rows.append({"model": key[0], "mode": key[1], "peaks": peaks,
                         "largest_change": changes.get(changed_most, 0.0), "changed_most": changed_most})
        compared[release] = rows
    return compared


def _cell(pair: tuple[int, int] | None) -> str:
    if pair is None:
        return ""
    old, new = pair
    change = (new - old) / old * 100 if old else 0.0
    return f"{old / 1e6:.2f} → {new / 1e6:.2f} ({change:+.1f}%)" if new != old else f"{old / 1e6:.2f} (same)"


def _lowest(peaks: dict[str, tuple[int, int]], prefix: str) -> tuple[int, int] | None:
    """The lowest real peak of the variants named ``prefix ...`` under each release."""
    pairs = [pair for v, pair in peaks.items() if v.startswith(prefix + " ")]
    return (min(p[0] for p in pairs), min(p[1] for p in pairs)) if pairs else None


def _main_table(rows: list[dict]) -> list[str]:
    shown = [v for v in VARIANTS if any(v in r["peaks"] for r in rows)]
    lines = ["| model | mode | " + " | ".join(shown) + " |", "|---|---|" + "---|" * len(shown)]
    lines += [f"| {r['model']} | {r['mode']} | " + " | ".join(_cell(r["peaks"].get(v)) for v in shown) + " |"
              for r in rows]
    return lines


def _budget_table(rows: list[dict]) -> list[str]:
    lines = ["| model | points | same to the byte | stock | ours, lowest | Inductor's, lowest |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        same = sum(old == new for old, new in r["peaks"].values())
        lines.append(f"| {r['model']} | {len(r['peaks'])} | {same} | {_cell(r['peaks'].get('stock'))} | "
                     f"{_cell(_lowest(r['peaks'], 'ours'))} | {_cell(_lowest(r['peaks'], 'inductor'))} |")
    return lines


def _explained(release: str, name: str, rows: list[dict]) -> list[str]:
    notable = [r for r in rows if r["largest_change"] > NOTABLE]
    same = sum(r["largest_change"] == 0 for r in rows)
    lines = ["", f"{len(rows)} rows measured under both; {same} with every real peak the same to the byte, "
             f"{len(notable)} with a change above {NOTABLE:.0%}."]
    for r in notable:
        cause = CAUSES.get((release, name, r["model"], r["mode"]), "not explained yet")
        lines.append(f"- **{r['model']} {r['mode']}** (up to {r['largest_change']:.1%}, {r['changed_most']}): "
                     f"{cause}")
    return [*lines, ""]


def releases_section(results: Path = RESULTS) -> list[str]:
    """The section's markdown lines: the main table's and the budget section's rows under each other release
    beside the report's own (none where no other release's rows are cached)."""
    main, budget = compared_rows("bench", results), compared_rows("budget", results)
    if not any(main.values()) and not any(budget.values()):
        return []
    lines = ["## Across torch releases", "",
             f"The rows above were measured under torch {REPORT_RELEASE}. The tables below are the same benchmarks "
             f"run under another release, in a virtual environment with that torch (`python -m benchmarks.real` "
             f"and `python -m benchmarks.real.budget`; rows in `benchmarks/real/results/bench-torch<release>/` and "
             f"`budget-torch<release>/`): real allocated peaks (MB) under {REPORT_RELEASE} → under that release. "
             f"A change above {NOTABLE:.0%} is explained below its table.", ""]
    for release in sorted({*main, *budget}):
        if main.get(release):
            lines += [f"### Main table: torch {release} beside {REPORT_RELEASE}", "", *_main_table(main[release]),
                      *_explained(release, "bench", main[release])]
        if budget.get(release):
            lines += [f"### Memory budget: torch {release} beside {REPORT_RELEASE}", "",
                      "Every fraction both releases ran (ours and Inductor's `activation_memory_budget`); the lowest "
                      "real peak of each over those points.", "", *_budget_table(budget[release]),
                      *_explained(release, "budget", budget[release])]
    return lines
