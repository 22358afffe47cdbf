"""The Inductor hook, end to end: real compiles on CPU, forward and backward (marked slow: compiles)."""

import json
import logging
import os
import re
import subprocess
import sys

import pytest
import torch
from torch._inductor.custom_graph_pass import CustomSchedulerPass

from helpers import assert_close_to_eager
from helpers import tiny_model as tiny
from reorder import load_graph
from reorder import inductor as hook
from reorder.inductor import reorder_pass
from reorder.inductor.session import HookOptions, Session
from reorder.schedulers import reorder_for_peak_memory
from reorder.timeline import estimate_peak_memory


pytestmark = pytest.mark.usefixtures("fresh_compiles")


def training_step(model, x, compiled):
    """One step of ``compiled`` (the model or its compiled program): output, input gradient, parameter gradients."""
    model.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_()
    out = compiled(x)
    out.square().sum().backward()
    return [out.detach(), x.grad, *(p.grad for p in model.parameters())]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["residual", "inception", "transformer"])
def test_compiled_forward_and_backward_equal_stock_inductor_with_lower_or_equal_peaks(name):
    model, x = tiny(name)
    reference = [p.detach().clone() for p in model.parameters()]
    eager = training_step(model, x, model)
    stock = training_step(model, x, torch.compile(model))
    torch._dynamo.reset()
    with hook.use(compare=True, memory_budget=None) as session:  # our order alone: the same kernels as stock's
        ours = training_step(model, x, torch.compile(model))
    # the same kernels in another order: bitwise equal to stock Inductor, tensor by tensor
    for what, mine, theirs in zip(["output", "input grad", *(n for n, _ in model.named_parameters())], ours, stock,
                                  strict=True):
        assert torch.equal(mine, theirs), what
    # against eager, a tolerance scaled to the magnitude (kernels may sum in another order than eager mode,
    # depending on the CPU); the parameter gradients as one vector: a bias that feeds a batch norm (inception's
    # first convolution) has a gradient that is zero up to the rounding of the terms it sums, so its own
    # magnitude is no scale
    assert_close_to_eager(ours[0], eager[0], "output")
    assert_close_to_eager(ours[1], eager[1], "input grad")
    assert_close_to_eager(torch.cat([g.flatten() for g in ours[2:]]), torch.cat([g.flatten() for g in eager[2:]]),
                          "parameter grads")
    for p, p0 in zip(model.parameters(), reference, strict=True):
        assert torch.equal(p.detach(), p0)
    assert {r.graph.split("_")[-2] for r in session.graphs} == {"forward", "backward"}
    assert not session.fallbacks
    for record in session.graphs:
        assert set(record.inductor) == {"baseline", "lpmf", "bfs", "dfs"}
        assert record.estimate_of_incoming_order == record.inductor["baseline"]  # byte for byte
        assert record.peak <= min(record.inductor.values())
        assert 0 < record.held_at_end <= record.peak
        for m in ("lpmf", "bfs", "dfs"):  # our ports found Inductor's own orders, so its candidates never won
            assert record.methods[m] == record.inductor[m]


@pytest.mark.slow
def test_with_the_loss_outside_the_graph_the_hook_frees_the_tangent_no_later_than_stock():
    """Inductor's model never frees a backward's tangents, so orders it rates equal (or ours, rated lower)
    could hold the incoming gradient longer than stock's and allocate more in a real step."""
    from reorder.measure import measure

    model, x = tiny("transformer")

    def step(compiled):
        model.zero_grad(set_to_none=True)
        compiled(x.clone().requires_grad_()).square().sum().backward()  # the loss is eager

    stock = torch.compile(model)
    step(stock)
    stock_peak = measure(lambda: step(stock), "cpu").peak
    torch._dynamo.reset()
    with hook.use(memory_budget=None) as session:  # the order pass alone (the default budget's order: its own test)
        ours = torch.compile(model)
        step(ours)
    [backward] = [r for r in session.graphs if "backward" in r.graph]
    assert backward.peak_tangents_freed <= backward.peak_tangents_freed_of_stock_order
    assert backward.peak <= backward.methods["bfs"]  # never above stock's choice in Inductor's model
    assert measure(lambda: step(ours), "cpu").peak <= stock_peak


class Recorder(CustomSchedulerPass):
    """A user's own post-fusion pass: it records that it ran and changes nothing."""

    def __init__(self):
        self.calls = 0

    def __call__(self, nodes):
        self.calls += 1
        return nodes

    def uuid(self):
        return "user-pass-1"


@pytest.mark.slow
def test_a_failing_pass_falls_back_to_inductors_own_after_the_users_pass(monkeypatch, config_patch, caplog):
    import torch._inductor.config as config

    def broken(*args, **kwargs):
        raise RuntimeError("forced failure")

    inductor_runs = []
    real_inductor_reorder = reorder_pass.inductor_reorder
    monkeypatch.setattr(reorder_pass, "reorder_for_peak_memory", broken)
    monkeypatch.setattr(reorder_pass, "inductor_reorder", lambda nodes: inductor_runs.append(len(nodes)) or
                        real_inductor_reorder(nodes))
    user_pass = Recorder()
    config_patch(config, _post_fusion_custom_pass=user_pass)
    model, x = tiny("residual")
    model.eval()
    with caplog.at_level(logging.WARNING, logger="reorder"), hook.use() as session, torch.no_grad():
        assert config.reorder_for_peak_memory is False
        out = torch.compile(model)(x)
    with torch.no_grad():
        assert_close_to_eager(out, model(x), "output")
    assert user_pass.calls == 1 and len(inductor_runs) == 1  # theirs, then (ours failing) Inductor's own pass
    assert any("running Inductor's own reorder_for_peak_memory" in r.getMessage() and "forced failure" in r.getMessage()
               for r in caplog.records)
    assert [(r.stage, r.reason) for r in session.fallbacks] == [("order", "RuntimeError: forced failure")]
    assert not session.graphs
    assert config._post_fusion_custom_pass is user_pass and config.reorder_for_peak_memory is True


def test_install_composes_with_the_users_pass_and_uninstall_restores_it(config_patch):
    import torch._inductor.config as config

    user_pass = Recorder()
    config_patch(config, _post_fusion_custom_pass=user_pass)
    before = (config._post_fusion_custom_pass, config.reorder_for_peak_memory, config.force_disable_caches)
    with hook.use(methods=["lpmf"]) as outer:
        ours = config._post_fusion_custom_pass
        assert isinstance(ours, hook.ReorderPass) and ours.session is outer and ours.previous is user_pass
        assert outer.options == HookOptions(methods=("lpmf",))
        assert config.reorder_for_peak_memory is False and ours.inductor_fallback
        assert "user-pass-1" in ours.uuid()
        with hook.use(keep_inductor_pass=True, capture_dir="/tmp/unused") as inner:
            assert inner is not outer
            assert config._post_fusion_custom_pass.session is inner
            assert config._post_fusion_custom_pass.previous is ours
            assert not config._post_fusion_custom_pass.inductor_fallback
            assert config.reorder_for_peak_memory is False  # kept as the outer install left it
            assert config.force_disable_caches is True  # a cache hit would capture nothing
        assert config._post_fusion_custom_pass is ours and not inner.live and outer.live
    assert (config._post_fusion_custom_pass, config.reorder_for_peak_memory, config.force_disable_caches) == before
    session = hook.install()
    assert config._post_fusion_custom_pass.session is session
    assert hook.uninstall() is session and not session.live
    assert (config._post_fusion_custom_pass, config.reorder_for_peak_memory, config.force_disable_caches) == before
    assert hook.uninstall() is None  # nothing left to undo: nothing changes


def test_uuid_is_stable_and_follows_the_options_that_change_the_result():
    def make(**fields):
        return hook.ReorderPass(Session(HookOptions(**fields)))

    assert make(methods=["lpmf"]).uuid() == make(methods=["lpmf"]).uuid() != make().uuid()
    assert make().uuid() != make(compare=True).uuid()
    assert make().uuid() != make(slab=True).uuid() != make(poison=True).uuid()
    assert make().uuid() == make(capture_dir="/tmp/x").uuid()  # writing files changes no order
    assert make().uuid() != hook.ReorderPass(Session(), inductor_fallback=True).uuid()


def test_the_result_depends_on_counts_not_the_clock(monkeypatch):
    """A clock that races (a loaded machine) changes nothing unless the safety cap is hit, and then it says so."""
    import time as real_time

    from benchmarks.synthetic import layered_graph

    graph = layered_graph(600, 12, seed=3)
    calm = reorder_for_peak_memory(graph)
    ticks = iter(range(0, 10**9, 1000))
    monkeypatch.setattr(real_time, "perf_counter", lambda: float(next(ticks)))
    raced = reorder_for_peak_memory(graph)
    assert raced.order == calm.order and raced.peaks == calm.peaks and "safety_cap" not in raced.notes
    capped = reorder_for_peak_memory(graph, max_seconds=60)
    assert "wall-clock cap of 60 s reached; skipped" in capped.notes["safety_cap"]


@pytest.mark.slow
@pytest.mark.slow
def test_capture_writes_graphs_even_when_inductors_cache_is_warm(tmp_path):
    """``reorder capture`` on an ordinary script: run from another folder, with its own arguments, importing a
    module beside it (as ``python train.py`` would find it), after a plain run has warmed Inductor's cache."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "models.py").write_text(
        "from torch import nn\n\n"
        "def mlp():\n"
        "    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))\n")
    script = project / "train.py"
    script.write_text(
        "import sys\n"
        "import torch\n"
        "from models import mlp\n"
        "assert sys.argv[1:] == ['--epochs', '1'], sys.argv\n"
        "torch.manual_seed(0)\n"
        "torch.compile(mlp())(torch.randn(8, 16)).sum().backward()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_FORCE_DISABLE_CACHES"}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "cache")
    subprocess.run([sys.executable, str(script), "--epochs", "1"], env=env, check=True, capture_output=True,
                   timeout=600, cwd=elsewhere)  # warm it
    out = tmp_path / "graphs"
    result = subprocess.run([sys.executable, "-m", "reorder", "capture", str(script), "--epochs", "1", "--out",
                             str(out)], capture_output=True, text=True, env=env, timeout=600, cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith(f"wrote 2 graphs and inductor-figures.json to {out} ")
    rows = [line for line in result.stdout.splitlines() if line.startswith("model__")]
    assert len(rows) == 2 and all(len(re.findall(r"\d+(?:\.\d\d)? (?:B|kB|MB|GB)\b", row)) == 3 for row in rows), rows
    figures = json.loads((out / "inductor-figures.json").read_text())
    assert len(figures) == 2 and len(list(out.glob("*.json"))) == 3
    for name, fig in figures.items():
        graph = load_graph(out / f"{name}.json")
        assert estimate_peak_memory(graph).peak == fig["peak"]["baseline"]
        for method in ("lpmf", "bfs", "dfs"):
            order = graph.order_from_names(fig["orders"][f"topological_sort_{method}"])
            assert estimate_peak_memory(graph, order).peak == fig["peak"][f"topological_sort_{method}"]


def test_capture_says_when_nothing_was_captured(tmp_path, capsys):
    from reorder.cli import main

    script = tmp_path / "eager.py"
    script.write_text("import torch\nprint(torch.ones(2).sum())\n")
    assert main(["capture", str(script), "--out", str(tmp_path / "graphs")]) == 2
    assert "no graph reached Inductor's scheduler" in capsys.readouterr().err


@pytest.mark.slow
def test_a_mutated_freeable_input_follows_inductors_figures():
    """Inductor forwards readers of a rename only among scheduler buffers: a mutated freeable input dies
    after its last direct reader. Our estimate and DFS order on the real nodes must say the same."""
    import torch._inductor.config as config
    from torch._inductor.compile_fx import compile_fx_inner
    from torch.fx.experimental.proxy_tensor import make_fx

    from reorder.inductor.adapter import graph_from_scheduler
    from reorder.inductor.figures import inductor_figures
    from reorder.schedulers import bfs_order, dfs_order, lpmf_order

    seen = {}

    class Check(Recorder):
        def __call__(self, nodes):
            graph, state = graph_from_scheduler(nodes, "mutating")
            figures = inductor_figures(graph, nodes, state)
            seen["freeable"] = sorted(state.freeable)
            seen["renamed"] = dict(state.mutation_real_name)
            seen["peaks"] = (estimate_peak_memory(graph).peak, figures["peak"]["baseline"])
            seen["orders"] = {m: (fn(graph), figures["orders"][m])
                              for m, fn in (("lpmf", lpmf_order), ("bfs", bfs_order), ("dfs", dfs_order))}
            return nodes

    def program(x, buf):
        buf.mul_(2)
        a = torch.mm(x, x)
        b = torch.mm(a, a)
        c = torch.mm(buf, b)
        d = torch.mm(x * 3, buf)
        return (c, torch.mm(d, d))

    x, buf = torch.randn(64, 64), torch.randn(64, 64)
    gm = make_fx(program)(x, buf)  # placeholders x_1, buf_1: freeable under Inductor's naming rule
    with config.patch(_post_fusion_custom_pass=Check()), torch.no_grad():
        compiled = compile_fx_inner(gm, [x, buf.clone()])
    assert seen["freeable"] == ["buf_1", "x_1"] and "buf_1" in seen["renamed"].values()
    ours, theirs = seen["peaks"]
    assert ours == theirs == 49152
    for method, (mine, inductors) in seen["orders"].items():
        assert mine == inductors, method
    expected, got = buf.clone(), buf.clone()
    for what, mine, theirs in zip(["c", "d @ d"], compiled([x, got]), program(x, expected), strict=True):
        assert_close_to_eager(mine, theirs, what)
    assert_close_to_eager(got, expected, "the mutated input")


@pytest.mark.slow
def test_the_hook_runs_the_optimal_method_when_asked():
    pytest.importorskip("ortools")
    model, x = tiny("inception")
    with torch.no_grad(), hook.use(methods=["lpmf", "refine", "optimal:effort=5"]) as session:
        out = torch.compile(model)(x)
        expected = model(x)
    assert_close_to_eager(out, expected, "output")
    [record] = session.graphs
    assert not session.fallbacks and "optimal" in record.methods
    assert record.lower_bound <= record.peak == min(record.methods.values())
    assert record.optimal == (record.lower_bound == record.peak)
