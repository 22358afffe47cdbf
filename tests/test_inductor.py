"""The Inductor hook, end to end: real compiles on CPU, forward and backward (marked slow: compiles)."""

import json
import logging
import subprocess
import sys

import pytest
import torch
from torch import nn

from benchmarks.zoo import BasicBlock, InceptionBlock, TransformerBlock
from reorder import load_graph
from reorder import inductor as hook
from reorder.timeline import estimate_peak_memory


@pytest.fixture(autouse=True)
def fresh_compiles(monkeypatch):
    import torch._inductor.config as config

    monkeypatch.setattr(config, "force_disable_caches", True)
    torch._dynamo.reset()
    hook.reports.clear()
    yield
    torch._dynamo.reset()


def tiny(name):
    torch.manual_seed(0)
    if name == "residual":
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), BasicBlock(8, 8), BasicBlock(8, 16, 2)), torch.randn(2, 3, 8, 8)
    if name == "inception":
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), InceptionBlock(16, 8)), torch.randn(2, 3, 8, 8)
    return TransformerBlock(dim=32, heads=2), torch.randn(2, 8, 32)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["residual", "inception", "transformer"])
def test_compiled_forward_and_backward_match_eager_with_lower_or_equal_peaks(name):
    model, x = tiny(name)
    reference = [p.detach().clone() for p in model.parameters()]
    x_eager = x.clone().requires_grad_()
    model(x_eager).square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with hook.use():
        compiled = torch.compile(model)
        x_compiled = x.clone().requires_grad_()
        out = compiled(x_compiled)
        out.square().sum().backward()
    # Inductor's fused kernels reassociate float32 sums: the tolerances of PyTorch's own compile tests.
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(x_compiled.grad, x_eager.grad, rtol=1e-3, atol=1e-4)
    for p, g, p0 in zip(model.parameters(), grads, reference):
        torch.testing.assert_close(p.grad, g, rtol=1e-3, atol=1e-4)
        assert torch.equal(p.detach(), p0)
    kinds = {r["graph"].split("_")[-2] for r in hook.reports}
    assert kinds == {"forward", "backward"}
    for report in hook.reports:
        assert {"graph", "nodes", "inductor", "peak", "method", "seconds"} <= set(report)
        assert set(report["inductor"]) == {"baseline", "lpmf", "bfs", "dfs"}
        assert report["estimate_of_incoming_order"] == report["inductor"]["baseline"]  # byte for byte
        assert report["peak"] <= min(report["inductor"].values())


@pytest.mark.slow
def test_a_failing_pass_keeps_inductors_order(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("forced failure")

    monkeypatch.setattr(hook, "reorder_for_peak_memory", broken)
    model, x = tiny("residual")
    model.eval()
    with caplog.at_level(logging.WARNING, logger="reorder"), hook.use(), torch.no_grad():
        out = torch.compile(model)(x)
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    assert any("keeping Inductor's order" in r.getMessage() and "forced failure" in r.getMessage() for r in caplog.records)
    assert hook.reports == []


def test_use_restores_the_config_and_uuid_is_stable():
    import torch._inductor.config as config

    before = (config._post_fusion_custom_pass, config.reorder_for_peak_memory)
    with hook.use(methods=["lpmf"]) as reorder_pass:
        assert config._post_fusion_custom_pass is reorder_pass and config.reorder_for_peak_memory is False
        with hook.use(keep_inductor_pass=True):
            assert config.reorder_for_peak_memory is True
        assert config._post_fusion_custom_pass is reorder_pass
    assert (config._post_fusion_custom_pass, config.reorder_for_peak_memory) == before
    assert hook.ReorderPass(["lpmf"]).uuid() == hook.ReorderPass(["lpmf"]).uuid() != hook.ReorderPass().uuid()
    hook.install()
    assert isinstance(config._post_fusion_custom_pass, hook.ReorderPass)
    hook.uninstall()
    assert (config._post_fusion_custom_pass, config.reorder_for_peak_memory) == before


@pytest.mark.slow
def test_capture_command_writes_graphs_with_inductor_figures(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "from torch import nn\n"
        "torch.manual_seed(0)\n"
        "m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))\n"
        "torch.compile(m)(torch.randn(8, 16)).sum().backward()\n"
    )
    out = tmp_path / "graphs"
    env = {**__import__("os").environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    result = subprocess.run([sys.executable, "-m", "reorder", "capture", str(script), "--out", str(out)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    figures = json.loads((out / "inductor-figures.json").read_text())
    assert len(figures) == 2
    for name, fig in figures.items():
        graph = load_graph(out / f"{name}.json")
        assert estimate_peak_memory(graph).peak == fig["peak"]["baseline"]
        for method in ("lpmf", "bfs", "dfs"):
            order = graph.order_from_names(fig["orders"][f"topological_sort_{method}"])
            assert estimate_peak_memory(graph, order).peak == fig["peak"][f"topological_sort_{method}"]
