"""The benchmark suite: its report from known rows, and one small model through capture, comparison, report."""

import json

import pytest

from benchmarks import suite


def row(graph: str, ours: int, inductor_best: int) -> dict:
    return {"graph": graph, "nodes": 3, "inductor_baseline": inductor_best + 10, "inductor_best": inductor_best,
            "ours": ours, "ratio": ours / inductor_best, "method": "lpmf", "optimum": "-", "slab_bytes": ours,
            "slab_ratio": 1.0, "ours_fast_seconds": 0.001, "inductor_seconds": 0.002, "ours_seconds": 0.003,
            "figures_match": True}


def test_report_counts_the_graphs_we_lower_and_their_geomean(tmp_path):
    suite.write_report(tmp_path, 2, [row("a_infer_0", 50, 100), row("b_infer_0", 100, 100)], [], 1.0)
    report = (tmp_path / "report.md").read_text()
    assert ("Lower than Inductor on 1 of 2 graphs; never higher: True; geomean ratio 0.7071; "
            "torch figures reproduced on every graph: True.") in report
    assert "| a_infer_0 | 2 | 3 | 110 B | 100 B | 50 B | 0.5000 | lpmf | - | 50 B | 1.0000 | 1.0 / 2.0 | 3 |" in report
    assert "Scaling" not in report


def test_report_says_when_a_figure_was_not_reproduced(tmp_path):
    worse = {**row("c_train_1", 120, 100), "figures_match": False}
    suite.write_report(tmp_path, 2, [worse], [], 1.0)
    assert "never higher: False; geomean ratio 1.2000; torch figures reproduced on every graph: False." in (
        (tmp_path / "report.md").read_text())


@pytest.mark.slow
def test_suite_runs_one_small_model(tmp_path, monkeypatch):
    cache, out = tmp_path / "cache", tmp_path / "report"
    assert suite.main(["--models", "mlp", "--modes", "infer,train", "--cache", str(cache), "--out", str(out),
                       "--scale", "1000", "--no-plots"]) == 0
    results = json.loads((out / "results.json").read_text())
    graphs = results["graphs"]
    assert {g["graph"].rsplit("_", 1)[0] for g in graphs} == {"mlp_infer", "mlp_train"}
    for g in graphs:
        assert g["figures_match"]  # torch's functions on the file reproduce what Inductor recorded live
        assert g["ours"] <= g["inductor_best"] and g["slab_bytes"] >= g["slab_bound"]
    assert results["scaling"][0]["nodes"] >= 1000
    report = (out / "report.md").read_text()
    assert "| mlp_infer_0 |" in report and "Scaling" in report
    assert (out / "results.csv").read_text().startswith("graph,")

    def no_capture(*args):
        raise AssertionError(f"recaptured {args[:2]} although its graphs are cached")

    monkeypatch.setattr(suite, "capture", no_capture)  # a rerun reads the cache instead of compiling
    assert suite.main(["--models", "mlp", "--modes", "infer", "--cache", str(cache), "--out", str(out),
                       "--scale", "", "--no-plots"]) == 0
    assert {g["graph"] for g in json.loads((out / "results.json").read_text())["graphs"]} == {
        g["graph"] for g in graphs if g["graph"].startswith("mlp_infer")}
