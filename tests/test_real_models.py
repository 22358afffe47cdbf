"""The real-model benchmark: its report's cells from known cached rows, in both file formats, and its whole path."""

import contextlib
import dataclasses
import json
import types
from pathlib import Path

import pytest
import torch

from benchmarks.real.compile_report import rounds_of
from benchmarks.real.report import (ESTIMATES, GUARD, PEAKS, SLAB, Summary, composition, markdown, summary,
                                    write_summaries)
from benchmarks.real.variants import HOOK, NO_LAYOUT_OPTIMIZATION, VARIANTS
from benchmarks.variants import load_records
from reorder.inductor.session import HookOptions, PartitionRecord

ROOT = Path(__file__).resolve().parents[1]
CACHED = ROOT / "benchmarks" / "real" / "results" / "bench"


def cached(name: str) -> dict:
    return json.loads((CACHED / f"{name}.json").read_text())


def in_new_format(row: dict) -> dict:
    """The row as a current run writes it: each variant's records as ``to_dict()`` under ``"records"``."""
    variants = {}
    for name, run in row["variants"].items():
        kept = {k: v for k, v in run.items() if k not in ("graphs", "fusion_guard", "slab_plans")}
        variants[name] = {**kept, "records": [r.to_dict() for r in load_records(run)]}
    return json.loads(json.dumps({**row, "variants": variants}))


def test_the_variants_are_the_columns_of_the_report():
    assert [v.name for v in VARIANTS] == ["eager", "stock", "hook", "slab", "guard", "memory_planning"]
    assert not VARIANTS[0].compiled and all(v.compiled for v in VARIANTS[1:])
    # without a budget (use()'s default of 1.0 is the budget section's point at 1.0); the estimates table needs
    # Inductor's figures
    assert HOOK.config == HookOptions(compare=True, memory_budget=None)
    assert [v.config for v in VARIANTS[3:5]] == [HookOptions(slab=True, memory_budget=None),
                                                 HookOptions(fusion_guard=True, memory_budget=None)]
    assert [v.name for v in VARIANTS if not v.training] == ["memory_planning"]
    assert VARIANTS[5].config == (("memory_planning", True),)
    assert NO_LAYOUT_OPTIMIZATION.config == (("layout_optimization", False),)


def test_report_cells_of_a_known_row():
    s = summary(cached("AlbertForQuestionAnswering_train"))
    assert markdown(PEAKS, [s])[2] == ("| AlbertForQuestionAnswering | train | 34.41 | 21.52 | 20.11 | 20.10 | 19.06 |  "
                                       "| 0.934 | 0.934 | 0.886 | 1.0e-06 | 3.8e-02 |")
    assert markdown(ESTIMATES, [s])[2] == ("| AlbertForQuestionAnswering | train | 2 | 28.34 | 24.79 | 23.38 | "
                                           "23.38 (proven) | 21.52 | 0.031 | 24.07 / 35.31 / 14.15 / 17.82 |  | "
                                           "110 / 134 | 0.85 | 7 | 0.527 |")
    assert markdown(SLAB, [s])[2] == ("| AlbertForQuestionAnswering | train | 0.934 | 1.000 |  | 0.52 | 0.52 | "
                                      "110 / 134 | -21.2 |")
    assert markdown(GUARD, [s])[2] == ("| AlbertForQuestionAnswering | train | 7 | 13 | 23.38 -> 22.33 | "
                                       "20.11 -> 19.06 | 0.049 / 0.0695 | 0.527 |")


def test_table_header_and_alignment_come_from_the_columns():
    header, alignment = markdown(SLAB, [])
    assert header == ("| model | mode | slab/stock | slab/hook | pools/stock | largest pool MB | live-bytes bound MB | "
                      "allocations stock / slab | compile added s |")
    assert alignment == "|---|---|" + "---:|" * 7


def test_both_file_formats_give_the_same_summary():
    for name in ("AlbertForQuestionAnswering_train", "DebertaV2ForQuestionAnswering_infer", "GPT2LMHeadModel_train"):
        old = cached(name)
        new = in_new_format(old)
        assert "graphs" not in new["variants"]["hook"] and new["variants"]["hook"]["records"]
        assert summary(new) == summary(old)


def test_summary_json_keeps_its_flat_columns(tmp_path):
    """As the report writes them: each row's compile seconds the medians of its fresh processes' rounds."""
    rows = [summary(row, rounds_of("main", row["model"], row["mode"]))
            for row in map(cached, ("AlbertForMaskedLM_infer", "AlbertForMaskedLM_train"))]
    write_summaries(tmp_path, rows)
    written = json.loads((tmp_path / "summary.json").read_text())
    published = json.loads((CACHED / "summary.json").read_text())[:2]
    assert written == published
    header = (tmp_path / "summary.csv").read_text().splitlines()[0].split(",")
    assert header[:6] == ["model", "mode", "batch", "parameter_bytes", "input_bytes", "eager_real_peak"]
    assert "memory_planning_real_peak" in header  # the inference row's variant, though training has none


def test_a_summary_without_a_variant_leaves_its_cells_empty():
    s = summary(cached("AlbertForMaskedLM_train"))
    assert isinstance(s, Summary) and s.peak("memory_planning") is None and s.peak_ratio("memory_planning") is None
    assert markdown(PEAKS, [s])[2].split(" | ")[7] == ""  # the pools column


def test_composition_of_a_row_with_a_gap():
    assert composition(cached("ViTForImageClassification_infer")) == [
        "parameters and inputs (allocated before the step, not in the peak above it): 2.12 MB",
        "live at the peak, allocated compiled: 1.88 MB",
        "live at the peak, allocated compiled (operator temporaries): 0.03 MB",
        "with layout_optimization=False the real peak is 1.90 MB (0.00 MB of channels-last copies and "
        "layout-dependent buffers)",
    ]


def test_no_composition_where_the_estimate_meets_the_real_peak():
    row = cached("AlbertForMaskedLM_infer")  # stock 20.74 MB, largest graph estimate 20.74 MB
    assert composition(row) == []
    assert composition(in_new_format(row)) == []


@pytest.mark.slow
def test_whole_path_on_the_smallest_model():
    pytest.importorskip("transformers")
    from benchmarks.real.tables import GAP
    from benchmarks.real.run import run_case

    variants = tuple(v for v in VARIANTS if v.name in ("eager", "stock", "hook"))
    row = json.loads(json.dumps(run_case("BertForMaskedLM", "bench", "train", variants)))
    s = summary(row)
    assert set(row["variants"]) == {"eager", "stock", "hook"}
    for name in ("eager", "hook"):  # same loss and gradients as stock, up to float reassociation
        assert row["difference_to_stock"][name] < 1e-4
    stock, hook = row["variants"]["stock"], row["variants"]["hook"]
    assert 0 < hook["real_peak"] <= stock["real_peak"]  # measured, same process, same inputs
    assert [r["kind"] for r in hook["records"]] == ["order", "order"]  # the forward and the backward graph
    assert stock["records"] == [] and row["variants"]["eager"]["records"] == []
    assert s.graphs == 2 and s.fallbacks == 0
    assert s.our_estimate <= s.inductor_best_estimate <= s.inductor_baseline_estimate
    for record in (stock, hook):
        assert {"forward", "backward"} <= set(record["phases"])
        assert 0 < record["held_at_backward"] <= record["real_peak"]
        assert sum(record["peak_composition"].values()) == record["real_peak"]
        assert 0 < record["gradient_bytes"] <= row["parameter_bytes"]
    parts = composition(row)
    assert bool(parts) == (abs(stock["real_peak"] - s.inductor_best_estimate) > GAP * s.inductor_best_estimate)
    if parts:
        assert parts[0] == (f"parameters and inputs (allocated before the step, not in the peak above it): "
                            f"{(row['parameter_bytes'] + row['input_bytes']) / 1e6:.2f} MB")
        assert f"gradients: {stock['gradient_bytes'] / 1e6:.2f} MB" in parts


class _CountsItsCalls(torch.nn.Module):
    """A step whose second call compiles again: Dynamo guards on ``calls``, which each call changes (the
    second compile makes it a symbol, so later calls reuse it)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return types.SimpleNamespace(loss=(self.linear(x).relu() * self.calls).sum())


@pytest.mark.slow
def test_a_second_call_that_compiles_again_is_compiled_under_the_variant():
    """The steady calls and the measured one run what the last compile made: a second call that compiles again
    outside the hook's context would be stock's program, measured under the hook's name (the main table's ViT,
    Swin, ConvNeXt and ResNet training rows read stock's peaks so)."""
    from benchmarks.real.run import run_variant

    sessions = []

    def context(config, training):
        @contextlib.contextmanager
        def recording():
            with HOOK.context(config, training) as session:
                sessions.append(session)
                yield session
        return recording()

    variant = dataclasses.replace(HOOK, context=context)
    record, _ = run_variant(_CountsItsCalls(), {"x": torch.randn(8, 16)}, "train", variant, steady_calls=1)
    ordered = [r.graph for s in sessions for r in s.graphs]
    assert len(sessions) == 2 and len(ordered) == 4, ordered  # both compiles' forward and backward
    assert [r["kind"] for r in record["records"]] == ["order", "order"]  # the record keeps the first call's


# --- the memory-budget section (benchmarks/real/budget.py) -----------------------------------------------------------


def budget_cached(name: str) -> dict:
    return json.loads((CACHED.parent / "budget" / f"{name}.json").read_text())


def test_the_gpu_table_reads_the_allocators_peaks_of_each_point(tmp_path):
    """A row measured with ``--device cuda``: stock, our 1.0 and lowest point, Inductor's at that fraction and its
    lowest, each as allocated / reserved MB with the change of the allocated peak against stock's."""
    from benchmarks.real.budget_report import cuda_table

    def variant(kind, fraction, allocated, reserved, seconds):
        return {"kind": kind, "fraction": fraction, "real_peak": allocated, "step_seconds": seconds,
                "cuda": {"max_memory_allocated": allocated, "max_memory_reserved": reserved}}

    row = {"model": "Tiny", "gpu": "NVIDIA H200", "torch": "2.15.0+cu130", "variants": {
        "stock": variant("stock", None, 20_000_000, 22_020_096, 0.010),
        "ours 1": variant("ours", 1.0, 19_000_000, 20_971_520, 0.010),
        "ours 0.6": variant("ours", 0.6, 12_000_000, 14_680_064, 0.012),
        "inductor 0.6": variant("inductor", 0.6, 15_000_000, 16_777_216, 0.013)}}
    (tmp_path / "Tiny.json").write_text(json.dumps(row))
    assert cuda_table([tmp_path])[2:] == [
        "| model | GPU, torch | stock | ours 1.0 | ours lowest | Inductor's at that fraction | Inductor's lowest |",
        "|---|---|---|---|---|---|---|",
        "| Tiny | NVIDIA H200, torch 2.15.0+cu130 | 20.00 / 22.02, 10.0 ms | 19.00 / 20.97 (-5.0%), 10.0 ms | "
        "0.6: 12.00 / 14.68 (-40.0%), 12.0 ms | 15.00 / 16.78 (-25.0%), 13.0 ms | "
        "0.6: 15.00 / 16.78 (-25.0%), 13.0 ms |"]
    assert cuda_table([tmp_path / "none"]) == []


def test_budget_fractions_run_from_one_to_the_lowest_point_of_the_regions_that_have_one():
    from benchmarks.real.budget import fractions_for, frontier_fractions, variants_for

    def region(stock, lowest):
        return PartitionRecord(graph="g", nodes=1, budget=1.0, budget_bytes=stock, stock_peak=stock, peak=stock,
                               feasible=True, source="inductor", saved_bytes=0, stock_saved_bytes=0, recomputed=0,
                               stock_recomputed=0, recomputed_flops=0, stock_recomputed_flops=0,
                               frontier=((1, lowest),) if lowest else ())

    assert fractions_for([region(1000, 600)]) == [1.0, 0.9, 0.8, 0.7, 0.6]
    assert fractions_for([region(1000, 600), region(1000, None)]) == [1.0, 0.9, 0.8, 0.7, 0.6]  # a loss alone
    assert fractions_for([region(1000, 600), region(1000, 800)], points=3) == [1.0, 0.9, 0.8]
    assert fractions_for([region(1000, None)]) == [1.0]
    two_points = dataclasses.replace(region(1000, 600), frontier=((1, 850), (2, 601)))
    assert frontier_fractions([two_points, region(3000, 2400), region(1000, None)]) == [1.0, 0.85, 0.8, 0.601]
    kinds = [(kind, f) for kind, f, _ in variants_for([1.0, 0.85, 0.8])]
    assert kinds == [("stock", None), ("ours", 1.0), ("ours", 0.85), ("ours", 0.8), ("inductor", 0.9),
                     ("inductor", 0.85), ("inductor", 0.8), *(("inductor", f / 10) for f in range(7, -1, -1))]


def test_ours_count_what_later_regions_hold_only_where_the_step_runs_several():
    from benchmarks.real.budget import held_beside_regions, row_held_outside, variants_for
    from reorder.measure import MemoryMeasurement

    def measured(*regions):
        return MemoryMeasurement("cpu", 0, 0, 0, 0, (), outside_by_region=regions)

    assert held_beside_regions(measured({"forward": 0, "between": 4, "backward": 4})) is None
    assert held_beside_regions(measured()) is None
    two = held_beside_regions(measured({"forward": 1, "between": 900, "backward": 20},
                                       {"forward": 0, "between": 4, "backward": 4}))
    assert two == {0: (1, 900, 20), 1: (0, 4, 4)}
    options = {kind: v.config for kind, _, v in variants_for([1.0, 0.5], two)[:3]}
    assert options["ours"].held_outside == two and options["ours"].held_outside_of(1) == (0, 4, 4)
    assert all(v.config.held_outside == (0, 0, 0) for kind, _, v in variants_for([0.5]) if kind == "ours")
    cached = json.loads(json.dumps({"held_outside": {str(k): list(v) for k, v in two.items()}}))
    assert row_held_outside(cached) == two and row_held_outside({}) is None  # what refresh_records compiles with


def test_a_refreshed_record_is_the_same_program_whatever_the_step_model_now_estimates_for_it():
    """Refreshing a row's records keeps a point whose partition, orders and real peak are the cached ones; the
    plan once held the partition's estimated step peak, so a change to the step model that moved only the
    estimates called every point another program and left its records stale."""
    from benchmarks.real.budget import _plan

    partition = {"kind": "partition", "source": "price 1/2", "peak": 900, "saved_bytes": 400, "recomputed": 7}
    order = {"kind": "order", "nodes": 12, "peak": 700, "method": "lpmf"}
    cached = [partition, order, {"kind": "guard"}]
    assert _plan([{**partition, "peak": 850}, order]) == _plan(cached)
    assert _plan([{**partition, "saved_bytes": 404}, order]) != _plan(cached)
    assert _plan([{**partition, "source": "inductor budget 0.5"}, order]) != _plan(cached)
    assert _plan([partition, {**order, "method": "bfs"}]) != _plan(cached)
    assert _plan([partition, {**order, "peak": 701}]) != _plan(cached)


def test_budget_checks_of_a_known_row():
    from benchmarks.real.budget_report import budget_row, time_ratio

    cached = budget_cached("ViTForImageClassification")
    row = budget_row(cached)
    assert [p.fraction for p in row.ours] == [1.0, 0.9, 0.8, 0.749, 0.547]  # one per point of its frontier
    assert [p.real_peak for p in row.ours] == [9578288, 9302400, 7440848, 7437616, 4793200]
    assert row.stock.real_peak == 10637776 and row.within_budget and row.full_not_above_stock
    assert all(p.feasible and p.real_peak <= p.budget_bytes * 1.02 for p in row.ours)
    assert round(row.saving, 3) == 0.549 and row.lowest.fraction == 0.547
    theirs = row.inductor[0]
    best = row.dominating(theirs)
    assert best.real_peak <= theirs.real_peak and time_ratio(best, theirs) <= 1.05
    # the checks fail where a row does: in an earlier run 0.774's partition, estimated 0.55 MB below 0.887's,
    # measured 0.33 MB above it; a point that far above the one before it makes the row not monotone
    assert row.monotone
    cached["variants"]["ours 0.749"]["real_peak"] = 7440848 + 330000
    assert not budget_row(cached).monotone


def test_inductors_budget_on_its_own_grid_is_set_beside_ours():
    """A row whose Inductor points cover 0.9, 0.8, ..., 0.0 says so; our lowest is compared with the lowest of all
    of Inductor's points, and each of Inductor's fractions gets a line of the row's table, ours left empty where
    we did not run."""
    from benchmarks.real.budget_report import INDUCTOR_GRID, _detail, budget_row

    cached = budget_cached("ViTForImageClassification")
    ours = set(cached["fractions"])
    cached["variants"] = {name: v for name, v in cached["variants"].items()  # Inductor's at our fractions only
                          if v["kind"] != "inductor" or v["fraction"] in ours}
    row = budget_row(cached)
    assert not row.on_the_grid and row.lowest_not_above_inductors
    theirs = next(v for v in cached["variants"].values() if v["kind"] == "inductor")
    for f in INDUCTOR_GRID:
        cached["variants"][f"inductor {f:g}"] = {**theirs, "fraction": f}
    row = budget_row(cached)
    assert row.on_the_grid and row.lowest_not_above_inductors and row.matched[1] == len((ours - {1.0}) | {
        *INDUCTOR_GRID})
    lines = _detail(row)
    assert "| 0 |  |  |  |  |  |  | " in next(line for line in lines if line.startswith("| 0 |"))
    assert len([line for line in lines if line.startswith("| 0.")]) == len((ours | {*INDUCTOR_GRID}) - {0.0, 1.0})
    cached["variants"]["inductor 0"]["real_peak"] = row.lowest.real_peak - 1
    assert budget_row(cached).lowest_not_above_inductors is False


def test_a_step_of_two_regions_is_judged_by_the_region_where_its_estimate_peaks():
    """GPT-2's step is compiled in two regions: the model and the loss, which runs between the model's forward and
    backward, on what the model saved (``held_before``) and the logits it handed on. Given what stock's step held
    beside each region (``held_outside`` by region, the row's ``held_outside``), the model region's estimate is
    the step's: the real peak to the byte at every point but the lowest fraction's, where the loss region's budget
    falls below its stock estimate and its partition changes (estimated 8 KB below stock's, measured 520 KB above
    the model region's estimate): above the budget, so not met, as the meter says. The step's budget and estimate
    are the highest of its regions' (each has its own budget: a fraction of its own stock estimate), and its
    verdict is its highest estimate against the step's budget. The loss region, compiled after the other, is not
    checked on its compiled graphs (their inputs include the logits, which Inductor's model of them leaves
    out)."""
    from benchmarks.real.budget_report import budget_row

    cached = budget_cached("GPT2LMHeadModel")
    assert cached["held_outside"] == {"0": [0, 40980556, 8], "1": [0, 8, 8]}
    row = budget_row(cached)
    at = {p.fraction: p for p in row.ours}
    assert (at[1.0].budget_bytes, at[1.0].estimate, at[1.0].real_peak) == (59454540, 59454540, 59454540)
    assert all(p.real_peak == p.estimate == p.compiled_estimate for p in row.ours if p.fraction >= 0.699)
    lowest = at[0.698]
    assert (lowest.estimate, lowest.compiled_estimate, lowest.real_peak) == (41504844, 41504844, 42024988)
    assert not lowest.feasible and lowest.real_peak > lowest.budget_bytes
    regions = [r for r in cached["variants"]["ours 0.716"]["records"] if r["kind"] == "partition"]
    assert [(r["budget_bytes"], r["compiled_peak"], r["feasible"]) for r in regions] == [
        (42569450, 42554444, True), (42566520, None, True)]
    assert row.within_budget and row.verdicts_agree
    regions[1]["peak"] = 49_000_000  # the step's highest estimate above its budget: not met, as the meter would
    assert not next(p for p in budget_row(cached).ours if p.fraction == 0.716).feasible


def test_a_budget_the_compiled_graphs_exceed_is_not_called_met():
    """ALBERT-MLM at 0.913: the plan's estimate (38.01 MB) meets the budget (39.25 MB); the code Inductor generated
    from it allocates 40.54 MB (read from its lines), and the step measures 40.54 MB, 8 B more. The record says not
    met, so the row is within budget; with the plan's verdict alone it was not."""
    from benchmarks.real.budget_report import budget_row

    cached = budget_cached("AlbertForMaskedLM")
    row = budget_row(cached)
    point = next(p for p in row.ours if p.fraction == 0.913)
    assert point.estimate <= point.budget_bytes < point.compiled_estimate and not point.feasible
    assert point.real_peak > point.budget_bytes * 1.02 and row.within_budget
    assert all(abs(e) < 0.005 for e in row.compiled_errors())  # the generated code's replay within 0.5% of the meter
    for record in cached["variants"]["ours 0.913"]["records"]:
        if record["kind"] == "partition":
            record["feasible"], record["compiled_peak"] = True, None
    assert not budget_row(cached).within_budget


def test_our_differences_to_stock_are_judged_against_eagers_on_the_same_step():
    """The tolerance is the main table's: eager's largest difference to stock on the same training step."""
    from benchmarks.real.budget_report import budget_row, eager_difference

    cached = budget_cached("ViTForImageClassification")
    eager = json.loads((CACHED.parent / "bench" / "ViTForImageClassification_train.json").read_text())
    assert eager_difference("ViTForImageClassification", "bench") == eager["difference_to_stock"]["eager"] > 0
    ours = [v for v in cached["variants"].values() if v["kind"] == "ours"]
    for v in ours:
        v["difference_to_stock"] = eager["difference_to_stock"]["eager"]
    assert budget_row(cached).as_close_as_eager
    ours[-1]["difference_to_stock"] *= 1.5
    assert budget_row(cached).as_close_as_eager is False
    cached["model"] = "NotMeasured"
    assert budget_row(cached).eager_difference is None and budget_row(cached).as_close_as_eager is None


def test_accuracy_is_judged_by_pytorchs_rule_against_a_float64_reference():
    """A gradient that is zero in exact arithmetic holds only rounding: two correct programs differ there by 100%
    of its magnitude (the relative difference says 1.4), but each is about as far from the exact value as the
    other, which PyTorch's rule asks. A real error on a large gradient fails it."""
    import torch

    from benchmarks.real.run import as_accurate, difference

    reference = [torch.tensor([73.5, -12.25], dtype=torch.float64), torch.zeros(4, dtype=torch.float64)]
    stock = [torch.tensor([73.5, -12.25]), torch.tensor([1e-6, -1e-6, 0.0, 5e-7])]
    ours = [torch.tensor([73.5, -12.25]), torch.tensor([-1.4e-6, 1e-6, 2e-7, 0.0])]
    assert difference(ours, stock) > 1.17  # relative to the tensor's own magnitude: larger than eager's
    passed, ratio = as_accurate(ours, stock, reference)
    assert passed and 1 < ratio < 2
    wrong = [torch.tensor([73.5 * 1.01, -12.25]), ours[1]]
    assert as_accurate(wrong, stock, reference) == (False, float("inf"))  # stock is exact there, ours is not
    assert as_accurate(ours[:1], stock, reference) is None


def test_a_float64_reference_is_the_same_step_in_float64():
    import types

    import torch

    from benchmarks.real.run import float64_reference

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 2)

        def forward(self, x, labels):
            return types.SimpleNamespace(loss=((self.linear(x) - labels) ** 2).sum())

    torch.manual_seed(0)
    model = Model()
    inputs = {"x": torch.randn(4, 3), "labels": torch.randn(4, 2)}
    loss, weight, bias = float64_reference(model, inputs)
    assert loss.dtype == weight.dtype == torch.float64 and model.linear.weight.grad is None  # a copy ran
    model(**inputs).loss.backward()
    assert torch.allclose(weight.float(), model.linear.weight.grad, rtol=1e-5)
    assert torch.allclose(bias.float(), model.linear.bias.grad, rtol=1e-5)


def test_a_rows_accuracy_verdict_is_every_point_of_ours():
    from benchmarks.real.budget_report import budget_row

    cached = budget_cached("ViTForImageClassification")
    row = budget_row(cached)
    assert row.as_accurate_as_stock and row.error_to_stocks == max(p.error_to_stocks for p in row.ours)
    cached["variants"]["ours 0.749"]["as_accurate_as_stock"] = False
    assert budget_row(cached).as_accurate_as_stock is False
    del cached["variants"]["ours 0.749"]["as_accurate_as_stock"]  # a point measured before the rule
    assert budget_row(cached).as_accurate_as_stock is None


def test_the_dynamic_sections_budget_table_gives_each_size_against_stock():
    """The training rows' budget compiled once with dynamic shapes: a line per size with stock's and the budget's
    real peaks, their ratio, the difference to stock's and, on the first size, the records' verdict; rows
    without the variant (inference, rows measured before it) are left out, and no row with it leaves no table."""
    from benchmarks.real.dynamic_report import budget_table

    budget = {"fraction": 0.5, "real_peak": {"32": 800_000, "64": 1_000_000},
              "difference_to_stock": {"32": 0.0, "64": 2.5e-7},
              "records": [{"kind": "partition", "feasible": False}, {"kind": "order"}]}
    row = {"model": "M", "mode": "train", "sizes": [32, 64],
           "variants": {"stock": {"real_peak": {"32": 1_000_000, "64": 2_000_000}}, "budget": budget}}
    inference = {"model": "M", "mode": "infer", "sizes": [32], "variants": {"stock": {"real_peak": {"32": 1}}}}
    lines = budget_table([row, inference])
    assert "memory_budget=0.5" in lines[0]
    assert lines[-3:] == ["| M | 32 | 1.00 | 0.80 | 0.800 | 0.0e+00 | not met |",
                          "| M | 64 | 2.00 | 1.00 | 0.500 | 2.5e-07 |  |", ""]
    assert budget_table([inference]) == []
