"""Pictures and the demo: files a person can open."""

import json
import shutil

import pytest
from helpers import GRAPHS

from reorder import load_graph, reorder_for_peak_memory
from reorder.cli import main

pytest.importorskip("matplotlib")

import matplotlib  # noqa: E402  (after the skip: matplotlib is optional)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.cbook import STEP_LOOKUP_MAP  # noqa: E402
from matplotlib.path import Path  # noqa: E402

from reorder.plot import plot_live_bytes  # noqa: E402


def test_the_legend_hides_no_step_of_any_line():
    """On gpt_train_1 the orders differ only in the first ten steps, where a legend inside the axes used to sit."""
    graph = load_graph(GRAPHS / "gpt_train_1.json")
    result = reorder_for_peak_memory(graph)
    fig, ax = plt.subplots(figsize=(10, 4), constrained_layout=True)
    plot_live_bytes(graph, {"baseline": list(range(graph.num_nodes)), result.method: result.order}, ax,
                    result.lower_bound)
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    lines = ax.get_lines()
    assert len(lines) == 5  # two step lines, their peak markers, the lower bound
    for line in lines:
        x, y = line.get_xydata().T
        if line.get_drawstyle() != "default":
            x, y = STEP_LOOKUP_MAP[line.get_drawstyle()](x, y)  # the segments as drawn
        drawn = Path(list(zip(x, y, strict=True))).transformed(line.get_transform())
        assert not drawn.intersects_bbox(legend, filled=False), line.get_label()
    plt.close(fig)


def is_png(path):
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_plot_command_writes_a_png(tmp_path, capsys):
    out = tmp_path / "vgg.png"
    assert main(["plot", str(GRAPHS / "vgg16_train_1.json"), "--out", str(out)]) == 0
    assert is_png(out)
    assert "peak 73.59 MB -> 72.34 MB (exact), slab 72.34 MB" in capsys.readouterr().out


def test_demo_reorders_plans_and_draws(tmp_path, capsys):
    folder = tmp_path / "graphs"
    folder.mkdir()
    for name in ("mlp_train_1", "gpt_train_1"):
        shutil.copy(GRAPHS / f"{name}.json", folder)
    optima = json.loads((GRAPHS / "optima.json").read_text())
    (folder / "optima.json").write_text(json.dumps({"gpt_train_1": optima["gpt_train_1"]}))
    assert main(["demo", str(folder), "--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "ours <= Inductor's best on every graph: True; lower by at least 0.01% on 1 of 2." in text
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith(("mlp_train_1", "gpt_train_1"))}
    assert "41.96 MB (proven)" in rows["gpt_train_1"] and "6.43 MB (proven)" in rows["mlp_train_1"]
    assert "Inductor best: the lowest peak of" in text and "optimal" not in text.splitlines()[0]
    records = json.loads((tmp_path / "out" / "demo.json").read_text())
    assert {r["graph"] for r in records} == {"mlp_train_1", "gpt_train_1"}
    assert {r["graph"]: r["optimum"] and r["optimum"]["peak"] for r in records} == {
        "gpt_train_1": 41963520, "mlp_train_1": None}
    assert all(r["slab_bytes"] >= r["slab_lower_bound"] for r in records)
    assert is_png(tmp_path / "out" / "gpt_train_1.png")


def test_the_readme_states_the_demos_own_figures(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    records = json.loads((tmp_path / "out" / "demo.json").read_text())
    readme = " ".join((GRAPHS.parent.parent.parent / "README.md").read_text().split())
    lowered = sorted((r for r in records if r["inductor_best"] - r["ours"] >= 1e-4 * r["inductor_best"]),
                     key=lambda r: r["ours"] / r["inductor_best"])
    named = ", ".join(f"{r['graph']} −{100 * (1 - r['ours'] / r['inductor_best']):.2f}%" for r in lowered)
    assert all(r["ours"] <= r["inductor_best"] for r in records)
    assert all(r["optimal"] or (r["optimum"] and r["optimum"]["proven"] and r["ours"] <= r["optimum"]["peak"])
               for r in records)
    assert (f"ours is never higher, lower by at least 0.01% on {len(lowered)} of {len(records)} ({named}), and "
            f"proven optimal on all {len(records)}") in readme
