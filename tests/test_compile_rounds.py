"""Compile seconds of the real-model rows in rounds of fresh processes (benchmarks/real/compile_rounds.py): which
variants each section times, the rounds cached as they finish and resumed, and the reports that read them."""

import json

import pytest

from benchmarks.real import compile_report
from benchmarks.real.budget_report import budget_row, compile_costs
from benchmarks.real.compile_report import CompileRounds
from benchmarks.real.compile_rounds import held_spec, measure_rows, variants_of
from benchmarks.real.report import ESTIMATES, _round_counts, markdown, summary
from test_real_models import budget_cached, cached


def quiet(text: str) -> None:
    pass


class Stopped(Exception):
    """The run stopped (a machine going down, a user's Ctrl-C) between two compiles."""


def test_a_budget_rows_variants_are_stock_ours_at_one_and_at_its_lowest_and_inductors_there():
    """GPT-2's step runs two compiled regions, so our budgets carry what stock's step held beside each
    (``held_outside`` by region, as ``reorder compare`` writes it); Inductor's budget takes no such option."""
    assert variants_of("budget", "ViTForImageClassification", "train") == [
        "stock", "budget:1", "budget:0.547", "inductor-budget:0.547"]
    gpt = budget_cached("GPT2LMHeadModel")
    held = "+held=0:0/40980556/8;1:0/8/8"
    assert held_spec(gpt["held_outside"]) == held
    assert variants_of("budget", "GPT2LMHeadModel", "train") == [
        "stock", f"budget:1{held}", f"budget:{min(gpt['fractions']):g}{held}",
        f"inductor-budget:{min(gpt['fractions']):g}"]
    assert variants_of("budget", "GPT2LMHeadModel", "infer") is None  # no budget in inference
    assert variants_of("main", "GPT2LMHeadModel", "infer") == ["stock", "hook", "slab", "guard"]
    from reorder.compare import parse_variants

    assert [v.hook["held_outside"] for v in parse_variants(variants_of("budget", "GPT2LMHeadModel", "train"))
            if v.hook] == [{0: (0, 40980556, 8), 1: (0, 8, 8)}] * 2  # what the budget's row compiled ours with


def test_rounds_are_cached_as_they_finish_resumed_and_measured_anew_when_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(compile_report, "COMPILE", tmp_path)
    compiled, stop_at = [], [6]

    def compile_one(model, mode, variant):
        compiled.append((model, mode, variant))
        if len(compiled) == stop_at[0]:  # the second round's second compile: the run stops here
            raise Stopped
        return {"compile_seconds": 10.0 + len(compiled), "stage_seconds": None, "real_peak": 1}

    with pytest.raises(Stopped):
        measure_rows("main", ["AlbertForMaskedLM"], ["infer"], 2, False, quiet, compile_one)
    path = tmp_path / "main" / "AlbertForMaskedLM_infer.json"
    kept = json.loads(path.read_text())
    assert kept["variants"] == ["stock", "hook", "slab", "guard"] and len(kept["rounds"]) == 1  # the first round
    assert [v for _, _, v in compiled] == ["stock", "hook", "slab", "guard", "stock", "hook"]
    compiled.clear()
    stop_at[0] = None
    measure_rows("main", ["AlbertForMaskedLM"], ["infer"], 2, False, quiet, compile_one)
    assert [v for _, _, v in compiled] == ["stock", "hook", "slab", "guard"]  # only the missing round
    rounds = CompileRounds.of(json.loads(path.read_text()))
    assert rounds.count == 2 and rounds.seconds["stock"] == (11.0, 11.0)
    measure_rows("main", ["AlbertForMaskedLM"], ["infer"], 2, False, quiet, compile_one)
    assert len(compiled) == 4  # cached
    measure_rows("main", ["AlbertForMaskedLM"], ["infer"], 1, True, quiet, compile_one)
    assert len(compiled) == 8 and CompileRounds.of(json.loads(path.read_text())).count == 1  # anew


def test_the_main_tables_compile_seconds_are_the_fresh_processes_medians():
    """The row's own compile seconds (one process: the hook's 35.31 s after stock's 24.07 s) give way to the
    medians of the rounds, and each of ours gets its extra over stock's compile of the same round."""
    row = cached("AlbertForQuestionAnswering_train")
    rounds = CompileRounds.of({"variants": ["stock", "hook", "slab", "guard"], "rounds": [
        {"stock": {"compile_seconds": 20.0}, "hook": {"compile_seconds": 21.0}, "slab": {"compile_seconds": 23.0},
         "guard": {"error": "ran past 1800 s"}},
        {"stock": {"compile_seconds": 30.0}, "hook": {"compile_seconds": 30.0}, "slab": {"compile_seconds": 33.0},
         "guard": {"compile_seconds": 33.0}}]})
    cells = markdown(ESTIMATES, [summary(row, rounds)])[2].split(" | ")
    header = markdown(ESTIMATES, [])[0].split(" | ")
    assert cells[header.index("compile s stock / hook / slab / guard")] == "25.0 / 25.5 / 28.0 / 33.0"
    assert cells[header.index("compile extra hook / slab / guard")] == "+2% / +12% / +10%"
    assert summary(row).run("hook").compile_seconds == row["variants"]["hook"]["compile_seconds"]  # without
    other = cached("ViTForImageClassification_train")
    assert _round_counts([summary(row, rounds), summary(other)]) == "2 rounds on 1 of 2 rows"
    single = CompileRounds.of({"variants": ["stock"], "rounds": [{"stock": {"compile_seconds": 20.0}}]})
    assert _round_counts([summary(row, rounds), summary(other, single)]) == "1 to 2 rounds on 2 of 2 rows"
    assert _round_counts([summary(other, single)]) == "1 round on 1 of 1 rows"
    assert _round_counts([summary(other)]) == "no row has rounds yet"


def test_the_budgets_compile_costs_set_ours_beside_stocks_and_inductors_compile_of_the_same_round():
    row = budget_cached("ViTForImageClassification")
    rounds = CompileRounds.of({"variants": ["stock", "budget:1", "budget:0.547", "inductor-budget:0.547"], "rounds": [
        {"stock": {"compile_seconds": 20.0, "kernels_built": 23},
         "budget:1": {"compile_seconds": 21.0, "stage_seconds": 0.4, "kernels_built": 24},
         "budget:0.547": {"compile_seconds": 26.0, "stage_seconds": 2.0, "kernels_built": 40},
         "inductor-budget:0.547": {"compile_seconds": 25.0}},  # measured before kernels were counted
        {"stock": {"compile_seconds": 30.0, "kernels_built": 23},
         "budget:1": {"compile_seconds": 30.0, "stage_seconds": 0.6, "kernels_built": 24},
         "budget:0.547": {"compile_seconds": 36.0, "stage_seconds": 3.0, "kernels_built": 41},
         "inductor-budget:0.547": {"compile_seconds": 33.0}}]})
    header, _, line = compile_costs([budget_row(row, rounds), budget_row(row)])  # a row without rounds: none
    cells = line.strip("| ").split(" | ")
    assert cells[:4] == ["ViTForImageClassification", "25.0", "2", "-10%"]  # 9.58 MB against stock's 10.64 MB
    # ours at 1.0: 21/20 and 30/30; its stages 0.4/20 and 0.6/30; at 0.547: 26/20 and 36/30, its stages 2/20 and
    # 3/30; Inductor's at 0.547: 25/20 and 33/30 (medians of the rounds' ratios)
    # the kernels each built: one count where the rounds agree, each round's where not, none for Inductor's
    assert cells[5:] == ["+2%", "2%", "0.547", "+25%", "10%", "+18%", "23 / 24 / 40, 41 / -"]
    assert compile_costs([budget_row(row)]) == []
    assert compile_report.compile_table(rounds)[4:6] == ["| stock | 20.0 / 30.0 | 25.0 |  |  | 23 |",
                                                          "| budget:1 | 21.0 / 30.0 | 25.5 | +2% | 2% | 24 |"]


def test_the_kernels_built_are_counted_in_a_cache_folder_of_the_processs_own(monkeypatch):
    """Inductor reads ``TORCHINDUCTOR_CACHE_DIR`` at every compile: the block's kernels land in a folder of its own,
    counted by their shared objects wherever Inductor puts them, and the folder goes with the block."""
    import os
    from pathlib import Path

    from benchmarks.real.compile_once import kernels_counted

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/elsewhere")
    with kernels_counted() as kernels_built:
        folder = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
        assert folder != Path("/elsewhere") and kernels_built() == 0
        (folder / "tmpa" / "ab").mkdir(parents=True)
        for name in ("tmpa/ab/cab.main.cpp", "tmpa/ab/cab.main.so", "tmpa/cd.so"):
            (folder / name).write_text("")
        assert kernels_built() == 2
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/elsewhere" and not folder.exists()
