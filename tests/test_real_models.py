"""The real-model benchmark's whole path on its smallest model: build, compile with and without the hook, meter, row."""

import pytest

pytest.importorskip("transformers")

from benchmarks.real.report import composition, summary  # noqa: E402
from benchmarks.real.run import run_case  # noqa: E402
from benchmarks.real.variants import VARIANTS  # noqa: E402


@pytest.mark.slow
def test_whole_path_on_the_smallest_model():
    variants = tuple(v for v in VARIANTS if v.name in ("eager", "stock", "hook"))
    row = run_case("BertForMaskedLM", "bench", "train", variants)
    s = summary(row)
    assert set(row["variants"]) == {"eager", "stock", "hook"}
    for name in ("eager", "hook"):  # same loss and gradients as stock, up to float reassociation
        assert row["difference_to_stock"][name] < 1e-4
    stock, hook = row["variants"]["stock"], row["variants"]["hook"]
    assert 0 < hook["real_peak"] <= stock["real_peak"]  # measured, same process, same inputs
    assert s["graphs"] == 2 and s["fallbacks"] == 0  # the forward and the backward graph went through our pass
    assert s["our_estimate"] <= s["inductor_best_estimate"] <= s["inductor_baseline_estimate"]
    for record in (stock, hook):
        assert {"forward", "backward"} <= set(record["phases"])
        assert 0 < record["held_at_backward"] <= record["real_peak"]
        assert sum(record["peak_composition"].values()) == record["real_peak"]
        assert 0 < record["gradient_bytes"] <= row["parameter_bytes"]
    assert composition(row) == [] or composition(row)[0].startswith("parameters and inputs")
