"""``reorder compare``: time alignment, argument splitting, verdicts, and whole runs of small scripts."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from reorder import compare as compare_module
from reorder.cli import COMPARE_OPTIONS, main, parse_arguments
from reorder.script import split_script_args
from reorder.compare import (Comparison, Variant, VariantRun, _label_raises, _sentence, _step_peak, align_times,
                             draw_comparison, parse_variants, thin, ties)
from reorder.inductor.session import HookOptions
from reorder.errors import ReorderError

from helpers import ROOT


def test_align_times_matches_marks_and_spreads_points_by_event_between_them():
    # marks at 2 and 4 in the run match 10 and 12 in the reference; the run ends at 6, the reference at 20
    placed = align_times([1.0, 1.5, 2.0, 3.9, 5.0], [2.0, 4.0], [10.0, 12.0], end=6.0, reference_end=20.0)
    assert placed == [2.5, 7.5, 10.5, 11.5, 16.0]  # two points before 2 share 0..10; then one per stretch
    assert placed == sorted(placed)


def test_align_times_compresses_an_idle_stretch_by_order_of_events():
    # a run idle from 0.1 to 9.0 (one allocation, then nothing) lines up with a reference that allocated steadily
    placed = align_times([0.0, 0.1, 9.0, 9.5], [], [], end=10.0, reference_end=4.0)
    assert placed == [0.5, 1.5, 2.5, 3.5]


def test_align_times_matches_only_the_marks_both_runs_have_and_drops_backward_pairs():
    assert align_times([0.5, 1.5, 2.5], [1.0, 2.0, 3.0], [10.0], end=4.0, reference_end=20.0) == [5.0, 12.5, 17.5]
    assert align_times([0.5, 1.5], [1.0, 0.5], [1.0, 2.0], end=2.0, reference_end=4.0) == [0.5, 2.5]


def test_split_script_args_takes_our_options_and_leaves_the_script_its_own():
    ours, script = split_script_args(["--epochs", "2", "--out", "d", "--json", "--variants=stock,slab", "--",
                                      "--out", "x"], COMPARE_OPTIONS)
    assert ours == {"--out": "d", "--json": True, "--variants": "stock,slab"}
    assert script == ["--epochs", "2", "--out", "x"]
    with pytest.raises(ReorderError, match="--device needs a value"):
        split_script_args(["--device"], COMPARE_OPTIONS)


@pytest.mark.parametrize("argv, script_args, ours", [
    (["s.py", "--", "--out", "x", "--variants", "stock"], ["--out", "x", "--variants", "stock"], {}),
    (["s.py", "--steps", "3", "--", "--out", "x"], ["--steps", "3", "--out", "x"], {}),
    (["s.py", "--out", "mine", "--", "--out", "x"], ["--out", "x"], {"--out": "mine"}),
    (["--variants", "stock", "--", "s.py", "--out", "x"], ["--out", "x"], {}),
    (["s.py", "--json", "--"], [], {"--json": True}),
])
def test_everything_after_dash_dash_reaches_the_script(argv, script_args, ours):
    args = parse_arguments(["compare", *argv])
    found, theirs = split_script_args(args.script_args, COMPARE_OPTIONS)
    assert (args.script, theirs, found) == ("s.py", script_args, ours)


def test_compare_hands_the_script_what_follows_dash_dash_and_keeps_its_own_defaults(monkeypatch, capsys):
    seen = {}

    def fake_compare(script, args, variants, device, out):
        seen.update(script=script, args=args, variants=variants, out=out)
        return Comparison(script, tuple(args), device, (VariantRun("stock", peak=10),), "stock", "one sentence.")

    monkeypatch.setattr(compare_module, "compare", fake_compare)
    assert main(["compare", "tiny_main.py", "--", "--out", "myout2", "--variants", "stock"]) == 0
    assert seen == {"script": "tiny_main.py", "args": ["--out", "myout2", "--variants", "stock"],
                    "variants": ["stock", "hook", "slab", "guard"], "out": "compare-out"}
    assert capsys.readouterr().out.splitlines()[-1] == "one sentence."


def test_capture_hands_the_script_what_follows_dash_dash(tmp_path, capsys):
    seen = tmp_path / "argv.json"
    script = tmp_path / "tiny_main.py"
    script.write_text(f"import json, sys\njson.dump(sys.argv[1:], open({str(seen)!r}, 'w'))\n")
    assert main(["capture", str(script), "--", "--out", "capt2"]) == 2  # it compiles nothing
    assert json.loads(seen.read_text()) == ["--out", "capt2"]
    assert not (tmp_path / "capt2").exists() and "compiles at the first call" not in capsys.readouterr().out


@pytest.mark.parametrize("command", ["capture", "compare"])
def test_a_folder_named_as_the_script_is_called_a_folder(tmp_path, capsys, command):
    assert main([command, str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"reorder: error: {tmp_path} is a folder; name the Python file to run (as "
                                       f"'python SCRIPT.py' would)\n")


def test_thin_keeps_the_peak_every_deep_dip_and_both_ends():
    curve = [(float(t), 100 + t % 7) for t in range(10_000)]
    curve[4321] = (4321.0, 10)  # a dip
    curve[7000] = (7000.0, 999)  # the peak
    thinned = thin(curve, points=50)
    assert len(thinned) <= 102
    assert thinned[0] == curve[0] and thinned[-1] == curve[-1]
    assert (4321.0, 10) in thinned and (7000.0, 999) in thinned
    assert [t for t, _ in thinned] == sorted(t for t, _ in thinned)


def test_thin_gives_the_same_shape_for_the_same_events_at_other_times():
    values = [100 + (k * 37) % 101 for k in range(5_000)]
    fast = [(k * 1e-3, v) for k, v in enumerate(values)]
    slow = [(k * 1e-3 + (2.0 if k > 1_000 else 0.0) + (k % 3) * 1e-4, v) for k, v in enumerate(values)]
    assert [v for _, v in thin(fast, 40)] == [v for _, v in thin(slow, 40)]


def _run(variant, values, marks=(0.5, 1.0, 1.5, 2.0)):
    curve = tuple((0.01 * k, v) for k, v in enumerate(values))
    return VariantRun(variant, peak=max(values), step_peak=max(values), marks=marks, curve=curve,
                      last_step_start=1.5, step_curve=tuple(p for p in curve if p[0] >= 1.5), step_base=0)


def test_ties_group_the_runs_whose_curves_are_the_same():
    stock, hook, slab = _run("stock", [1, 5, 2]), _run("hook", [1, 5, 2]), _run("slab", [1, 4, 2])
    assert [[r.variant for r in group] for group in ties([stock, slab, hook])] == [["stock", "hook"], ["slab"]]


def test_the_plot_draws_tied_variants_as_one_named_line_and_every_line_to_the_end():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    rising = [k for k in range(200)]
    runs = (_run("stock", rising), _run("hook", rising), _run("slab", [k // 2 for k in range(120)]))
    fig = draw_comparison(Comparison("s.py", (), "cpu", runs, "stock", ""))
    try:
        whole = fig.axes[0]
        labels = [t.get_text() for t in whole.get_legend().get_texts()]
        assert labels == ["stock, hook (same curve): peak 199.00 bytes", "slab: peak 59.00 bytes"]
        lines = [line for line in whole.get_lines() if line.get_linestyle() != "None"]
        assert len(lines) == 2 and lines[0].get_linewidth() > lines[1].get_linewidth()
        # slab's last event is at 1.19 s, before its last compiled call ends at 2.0: drawn to the end all the same
        assert [line.get_xdata()[-1] for line in lines] == [5.0, 5.0]
        assert len([line for line in whole.get_lines() if line.get_marker() not in ("None", "")]) == 2  # peaks
    finally:
        plt.close(fig)


def test_the_plot_and_the_table_put_each_variants_real_peak_beside_its_step_time():
    """A budget trades memory for time: the third panel has one named point per variant, its real peak against its
    last step's compiled seconds, and the table a column of those seconds."""
    pytest.importorskip("matplotlib")
    import dataclasses

    import matplotlib.pyplot as plt

    runs = (dataclasses.replace(_run("stock", [3_000_000] * 160 + [5_000_000] * 40), step_seconds=0.10),
            dataclasses.replace(_run("budget:0.5", [3_000_000] * 160 + [4_000_000] * 40), step_seconds=0.125))
    comparison = Comparison("s.py", (), "cpu", runs, "stock", "")
    fig = draw_comparison(comparison)
    try:
        cost = fig.axes[2]
        points = [(line.get_xdata()[0], line.get_ydata()[0]) for line in cost.get_lines()]
        assert points == [(0.10, 5.0), (0.125, 4.0)] and cost.get_ylabel() == "real peak (MB)"
        assert [t.get_text() for t in cost.texts] == ["stock", "budget:0.5"]
    finally:
        plt.close(fig)
    header, _, stock, budget = comparison.table().splitlines()
    assert "last step s" in header and "0.100" in stock.split() and "0.125" in budget.split()


@pytest.mark.parametrize("spec, hook, functorch", [
    ("stock", None, ()), ("slab", {"slab": True}, ()), ("budget:0.5", {"memory_budget": 0.5}, ()),
    ("budget:1", {"memory_budget": 1.0}, ()), ("budget:12MB", {"memory_budget": 12_000_000}, ()),
    ("budget:1.5MiB", {"memory_budget": 1_572_864}, ()), ("budget:4096B", {"memory_budget": 4096}, ()),
    ("inductor-budget:0", None, (("activation_memory_budget", 0.0),)),
    ("budget:0.5x4", {"memory_budget": 0.5, "region_calls": 4}, ()),
    ("budget:12MBx2", {"memory_budget": 12_000_000, "region_calls": 2}, ()),
    ("budget:0.5+held=4096", {"memory_budget": 0.5, "held_outside": 4096}, ()),
    ("budget:0.5x4+held=0/8MB/1.5KiB", {"memory_budget": 0.5, "region_calls": 4,
                                         "held_outside": (0, 8_000_000, 1536)}, ()),
    ("budget:0.5+held=0:0/40MB/1MB;1:4", {"memory_budget": 0.5,
                                          "held_outside": {0: (0, 40_000_000, 1_000_000), 1: 4}}, ()),
    ("budget:0.5x3+held=0/8MB/1MB+2MB+3", {"memory_budget": 0.5, "region_calls": 3,
                                           "held_outside": (0, 8_000_000, (1_000_000, 2_000_000, 3))}, ()),
    ("budget:0.9+allocated", {"memory_budget": 0.9, "fusion_guard_allocated": True}, ()),
    ("budget:0.5x3+held=1/2/3+4+allocated", {"memory_budget": 0.5, "region_calls": 3, "held_outside": (1, 2, (3, 4)),
                                             "fusion_guard_allocated": True}, ()),
])
def test_variant_specs_name_hook_options_or_inductors_own_budget(spec, hook, functorch):
    variant = Variant.parse(spec)
    assert (variant.spec, variant.hook, variant.functorch) == (spec, hook, functorch)
    if hook is not None:
        HookOptions(**hook)  # every spec's options are valid hook options


@pytest.mark.parametrize("spec, message", [
    ("budget:2", "a budget without a unit is a fraction of stock's estimated step peak, in (0, 1]"),
    ("budget:0", "a budget without a unit is a fraction"),
    ("budget:12XB", "or bytes with a unit (B, KB, MB, GB, KiB, MiB, GiB)"),
    ("budget:0.1B", "a budget in bytes must be at least 1 B"),
    ("inductor-budget:1.5", "Inductor's activation_memory_budget is a fraction in [0, 1]"),
    ("budget", "known variants are"),
    ("budget:0.5x0", "'xN' after a budget is how many times each compiled region runs a step"),
    ("budget:0.5xfour", "(region_calls), an int >= 1"),
    ("budget:0.5+held=1/2", "one amount, or three separated by '/'"),
    ("budget:0.5+held=a:5", "by region, 'R:' before each"),
    ("budget:0.5+held=0:1/2", "by region, 'R:' before each"),
    ("budget:0.5+held=0:1:2", "by region, 'R:' before each"),
    ("budget:0.5+held=0:1;0:2", "each region once"),
    ("budget:0.5+held=-5", "each a whole number of bytes or with a unit"),
    ("budget:0.5+held=0.5B", "each a whole number of bytes"),
    ("budget:0.5+held=1+2/3/4", "the last one per backward call, separated by '+'"),
    ("budget:0.5+held=1+2", "the last one per backward call"),
    ("budget:0.5+held=1/2/3+", "each a whole number of bytes"),
    ("budget:0.5+outside=5", "'+held=' takes the bytes the step's eager code holds"),
    ("budget:0.5+allocated+held=5", "'+held=' takes the bytes the step's eager code holds"),
    ("budget:+allocated", "a budget is a fraction of stock's estimated step peak in (0, 1]"),
])
def test_bad_variant_specs_are_one_line_naming_the_spec(spec, message):
    with pytest.raises(ReorderError) as caught:
        parse_variants(f"stock,{spec}")
    assert str(caught.value).startswith(f"--variants 'stock,{spec}': variant {spec!r}: ")
    assert message in str(caught.value)


def test_a_variant_named_twice_is_refused():
    with pytest.raises(ReorderError, match="named twice"):
        parse_variants("stock,budget:0.5,budget:0.5")


def test_a_variants_context_sets_inductors_budget_and_puts_it_back():
    from torch._functorch import config as functorch_config

    before = functorch_config.activation_memory_budget
    with Variant.parse("inductor-budget:0.25").context() as session:
        assert session is None and functorch_config.activation_memory_budget == 0.25
    assert functorch_config.activation_memory_budget == before
    with Variant.parse("budget:0.5").context() as session:
        assert session.options.memory_budget == 0.5


def test_step_peak_is_measured_above_the_live_bytes_where_the_step_starts():
    curve = [(0.0, 100), (1.0, 300), (2.0, 150), (3.0, 400), (4.0, 160)]
    assert _step_peak(curve, 2.5) == 400 - 150
    assert _step_peak(curve, 0.0) == 400
    assert _step_peak(curve, None) is None


def test_sentence_names_the_lowest_variant_or_says_none_beats_stock():
    stock, slab = VariantRun("stock", peak=1000), VariantRun("slab", peak=900)
    failed = VariantRun("guard", error="boom")
    assert _sentence([stock, slab, failed], "stock") == (
        "slab has the lowest real peak: 900 B against stock's 1.00 kB, 100 B (10.0%) less.")
    higher = VariantRun("hook", peak=1200)
    assert _sentence([stock, higher], "stock") == (
        "No variant beats stock: its real peak (1.00 kB) is the lowest; hook comes closest at 1.20 kB.")


def test_sentence_says_when_variants_tie():
    runs = [VariantRun(v, peak=1000) for v in ("stock", "hook", "slab", "guard")]
    assert _sentence(runs, "stock") == ("stock, hook, slab and guard tie: each measured a real peak of 1.00 kB. "
                                        "No variant lowers this script's real peak.")
    runs[3] = VariantRun("guard", peak=1200)
    assert _sentence(runs, "stock") == ("stock, hook and slab tie: each measured a real peak of 1.00 kB; guard "
                                        "measured more.")


def test_sentence_names_every_variant_that_ties_for_the_lowest_below_stock():
    """Under the default budget of 1.0 the hook guards a training step's fusions, so hook and guard often measure
    the same bytes: the sentence names both, not whichever ran first."""
    runs = [VariantRun("stock", peak=1000), VariantRun("hook", peak=900), VariantRun("slab", peak=950),
            VariantRun("guard", peak=900)]
    assert _sentence(runs, "stock") == (
        "hook and guard tie for the lowest real peak: 900 B each against stock's 1.00 kB, 100 B (10.0%) less.")


def test_names_of_points_drawn_together_are_raised_apart():
    """train_albert.py under the default budget: hook and guard at 24,850,144 B and about 0.025 s; stock and slab
    stand apart; a third point on the same spot goes one line higher still."""
    points = [(0.026, 28_471_008), (0.026, 24_850_144), (0.029, 26_138_848), (0.025, 24_850_144)]
    assert _label_raises(points) == [0, 0, 0, 1]
    assert _label_raises([*points, (0.0255, 24_900_000)]) == [0, 0, 0, 1, 2]
    assert _label_raises([]) == []


def test_sentence_without_stock_says_so_and_names_the_lowest():
    assert _sentence([VariantRun("hook", peak=1000), VariantRun("slab", peak=900)], None) == (
        "stock was not among the variants, so nothing is measured against it; the lowest real peak is slab's, 900 B.")
    assert _sentence([VariantRun("stock", error="boom"), VariantRun("slab", peak=900)], None) == (
        "stock did not run through, so no variant can be compared with it.")


def _reorder(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reorder", *args], capture_output=True, text=True, cwd=cwd,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def test_a_script_that_compiles_nothing_is_one_line_and_exit_2(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("import torch\nprint(torch.ones(3).sum())\n")
    done = _reorder("compare", str(script), "--variants", "stock", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"reorder: error: {script} compiled nothing (does it call torch.compile and run the compiled function?)")


def test_an_out_that_is_a_file_is_one_line_and_exit_2(tmp_path):
    script, taken = tmp_path / "plain.py", tmp_path / "taken"
    script.write_text("pass\n")
    taken.write_text("")
    done = _reorder("compare", str(script), "--variants", "stock", "--out", str(taken), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"reorder: error: --out {taken}: a file is there; name a folder"


def test_unknown_variant_is_one_line_and_exit_2(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("pass\n")
    done = _reorder("compare", str(script), "--variants", "stock,fast", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == ("reorder: error: --variants 'stock,fast': variant 'fast': known variants are stock, "
                                   "hook, slab, guard, budget:FRACTION, budget:BYTES (with a unit: 12MB, 1.5GiB), "
                                   "either followed by xCALLS, +held=BYTES and +allocated, and "
                                   "inductor-budget:FRACTION")


TRAINING_SCRIPT = textwrap.dedent('''
    import os
    import sys

    import torch

    from helper_model import make_model  # a module beside the script, as `python train.py` finds it

    if os.environ.get("REORDER_VARIANT") == "guard":
        raise RuntimeError("this script refuses the guard")
    steps = int(sys.argv[1])
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    body = torch.compile(model)
    loss_of = torch.compile(lambda y: (y * y).mean())
    x = torch.randn(64, 256)
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss_of(body(x)).backward()
        optimizer.step()
''')


@pytest.mark.slow
def test_compare_runs_every_variant_in_its_own_process_and_reports_failures_as_rows(tmp_path):
    (tmp_path / "helper_model.py").write_text(
        "import torch\n\ndef make_model():\n    return torch.nn.Sequential(torch.nn.Linear(256, 512), "
        "torch.nn.ReLU(), torch.nn.Linear(512, 256))\n")
    (tmp_path / "train.py").write_text(TRAINING_SCRIPT)
    out = tmp_path / "out"
    done = _reorder("compare", "train.py", "2", "--variants", "stock,slab,guard,budget:0.5", "--out", str(out),
                    "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    runs = {r["variant"]: r for r in data["runs"]}
    assert list(runs) == ["stock", "slab", "guard", "budget:0.5"]
    assert runs["budget:0.5"]["error"] is None and runs["budget:0.5"]["fallbacks"] == []
    assert runs["budget:0.5"]["graphs"] >= 3
    # what our stages took of each compile: the budget's partition, orders and guard; stock runs none of ours
    assert runs["budget:0.5"]["stage_seconds"] > 0 and runs["slab"]["stage_seconds"] > 0
    assert runs["stock"]["stage_seconds"] is None
    assert data["reference"] == "stock"
    assert runs["guard"]["error"].startswith("train.py raised RuntimeError: this script refuses the guard (line 10 of ")
    # what each run printed stays beside the figures: the failed run's traceback too
    assert runs["guard"]["log"] == str(out / "guard.log") and runs["budget:0.5"]["log"] == str(out / "budget_0.5.log")
    guard_log = (out / "guard.log").read_text()
    assert "Traceback" in guard_log and runs["guard"]["error"] in guard_log
    assert (out / "budget_0.5.log").exists() and (out / "stock.log").exists()
    for name in ("stock", "slab"):
        run = runs[name]
        assert run["error"] is None
        assert run["graphs"] >= 3  # the body's forward and backward, and the loss's (forward and backward)
        assert run["compiled_calls"] >= 4 * 2  # two steps, each two compiled functions, forward and backward
        assert run["peak"] >= 2 * 256 * 512 * 4  # the first layer's weight gradient, at least, is allocated
        assert 0 < run["step_peak"] <= run["peak"]
        assert max(b for _, b in run["curve"]) == run["peak"]
        assert len(run["marks"]) == 2 * run["compiled_calls"]
    assert runs["slab"]["against_reference"] == pytest.approx(runs["slab"]["peak"] / runs["stock"]["peak"] - 1)
    assert data["sentence"] == _sentence([VariantRun(n, r["error"], r["peak"]) for n, r in runs.items()], "stock")
    assert (out / "compare.png").stat().st_size > 10_000
    assert json.loads((out / "compare.json").read_text())["runs"][0]["variant"] == "stock"


def test_the_last_step_begins_at_its_first_compiled_forward_call():
    """A model compiled in several graphs (a graph break, a layer at a time) calls several forwards a step: the
    last step begins at the first of them, not at the last forward call (on a Wav2Vec2 script of 11 graphs that
    put the last step at its 28th call of 33, a column 29 times higher for a variant 27% lower overall)."""
    from reorder.compare import last_step_start
    from reorder.measure import Region

    def calls(kinds):
        return [Region(f"CompiledFxGraph{' (backward)' if k == 'B' else ''}", t, t + 0.5, 0, 0, 0)
                for t, k in enumerate(kinds)]

    assert last_step_start(calls("FFFBBFFFBB")) == 5
    assert last_step_start(calls("FBFBFB")) == 4
    assert last_step_start(calls("FFFBBFFF")) == 5  # a step without its backward yet: its forwards
    assert last_step_start(calls("FFFF")) == 3  # inference: the last call
    assert last_step_start(calls("")) is None and last_step_start(calls("B")) is None

