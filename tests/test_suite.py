"""A smoke test of the benchmark suite: one small model through capture, comparison, report."""

import json

import pytest

from benchmarks import suite


@pytest.mark.slow
def test_suite_runs_one_small_model(tmp_path):
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
    # a rerun reads the cache instead of compiling
    before = sorted(p.name for p in cache.iterdir())
    assert suite.main(["--models", "mlp", "--modes", "infer", "--cache", str(cache), "--out", str(out),
                       "--scale", "", "--no-plots"]) == 0
    assert sorted(p.name for p in cache.iterdir()) == before
