"""The report's section that sets rows measured under another torch release beside the report's own."""

import json

from benchmarks.real import release_report
from benchmarks.real.release_report import compared_rows, releases_section


def write_row(folder, name, model, mode, peaks):
    folder.mkdir(parents=True, exist_ok=True)
    row = {"model": model, "mode": mode, "variants": {v: {"real_peak": p} for v, p in peaks.items()}}
    (folder / f"{name}.json").write_text(json.dumps(row))


def test_rows_under_another_release_stand_beside_the_reports_and_big_changes_need_a_cause(tmp_path, monkeypatch):
    write_row(tmp_path / "bench", "Bert_train", "Bert", "train", {"stock": 4_000_000, "hook": 4_000_000,
                                                                  "slab": 3_000_000})
    write_row(tmp_path / "bench", "ViT_infer", "ViT", "infer", {"stock": 2_000_000, "slab": 1_000_000})
    write_row(tmp_path / "bench", "T5_train", "T5", "train", {"stock": 1_000_000})  # not rerun: not compared
    write_row(tmp_path / "bench-torch2.15", "Bert_train", "Bert", "train", {"stock": 4_000_000, "hook": 4_000_000,
                                                                            "slab": 3_030_000})
    write_row(tmp_path / "bench-torch2.15", "ViT_infer", "ViT", "infer", {"stock": 2_000_000, "slab": 1_005_000})
    (tmp_path / "bench-torch2.15" / "summary.json").write_text("[]")  # the runner's other files are not rows
    [bert, vit] = compared_rows("bench", tmp_path)["2.15"]
    assert bert["peaks"] == {"stock": (4_000_000, 4_000_000), "hook": (4_000_000, 4_000_000),
                             "slab": (3_000_000, 3_030_000)}
    assert (bert["largest_change"], bert["changed_most"]) == (0.01, "slab") and vit["largest_change"] == 0.005
    lines = releases_section(tmp_path)
    assert "| Bert | train | 4.00 (same) | 4.00 (same) | 3.00 → 3.03 (+1.0%) |" in lines
    assert "2 rows measured under both; 0 with every real peak the same to the byte, 0 with a change above 1%." \
        in lines  # exactly 1% is not above it
    write_row(tmp_path / "bench-torch2.15", "ViT_infer", "ViT", "infer", {"stock": 2_000_000, "slab": 1_100_000})
    assert "- **ViT infer** (up to 10.0%, slab): not explained yet" in releases_section(tmp_path)
    monkeypatch.setitem(release_report.CAUSES, ("2.15", "bench", "ViT", "infer"), "a fusion 2.15 no longer makes")
    assert "- **ViT infer** (up to 10.0%, slab): a fusion 2.15 no longer makes" in releases_section(tmp_path)
    assert releases_section(tmp_path / "nothing") == []


def test_budget_rows_compare_every_point_both_releases_ran_and_their_lowest(tmp_path):
    mb = 1_000_000
    write_row(tmp_path / "budget", "Bert", "Bert", "train", {"stock": 40 * mb, "ours 1": 38 * mb, "ours 0.9": 30 * mb,
                                                             "inductor 0.9": 36 * mb})
    write_row(tmp_path / "budget-torch2.15", "Bert", "Bert", "train", {
        "stock": 40 * mb, "ours 1": 38 * mb, "ours 0.8": 28 * mb, "ours 0.9": 30 * mb, "inductor 0.9": 35 * mb})
    lines = releases_section(tmp_path)  # 0.8 ran under 2.15 only: not a point of both
    assert "| Bert | 4 | 3 | 40.00 (same) | 30.00 (same) | 36.00 → 35.00 (-2.8%) |" in lines
    assert "- **Bert train** (up to 2.8%, inductor 0.9): not explained yet" in lines
