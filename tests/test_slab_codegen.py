"""Slab pools in compiled code: the pool planner on plain data, the run-time check, and real compiles (slow)."""

import logging
import re

import pytest
import torch

from helpers import tiny_model as tiny
from reorder import inductor as hook
from reorder.errors import PlanError, SlabCheckError
from reorder.inductor import slab
from reorder.inductor.slab_check import slab_claim, slab_open, slab_release
from reorder.planning import SlabPlan


def test_chained_lifetimes_share_a_pool_and_gaps_split_pools():
    starts, ends = [6, 1, 2, 4], [9, 3, 5, 7]
    assert slab.chained_components(range(4), starts, ends) == [[1, 2, 3, 0]]
    # half-open lifetimes: one freed where the next is allocated does not chain (no kernel runs between)
    starts, ends = [1, 2, 4, 6], [3, 4, 6, 8]
    assert slab.chained_components(range(4), starts, ends) == [[0, 1], [2], [3]]


def test_pools_are_validated_and_as_small_as_the_live_bytes_when_nothing_else_is_allocated():
    # a chain a -> b -> c with a short-lived d beside them: peak live is a + b + d = 320 at step 2
    layout = slab.plan_pools([1, 2, 2, 3], [3, 4, 3, 5], [128, 128, 64, 64], ["cpu"] * 4, [], 6)
    assert layout.individual == []
    [pool] = layout.pools
    pool.plan.validate()
    assert pool.plan.slab_bytes == 320 == pool.plan.tensor_bound
    assert layout.estimated_peak == layout.stock_estimated_peak == 320


def test_groups_leave_the_pool_while_the_pooled_peak_would_exceed_stock():
    # an early large temporary and a late small one, chained by a long small one; saved outputs grow late:
    # one pool would hold 1024 while the outputs peak, so the large one is allocated on its own
    outside = [(4, 9, 1024)]
    layout = slab.plan_pools([1, 1, 5], [3, 7, 7], [1024, 64, 64], ["cpu"] * 3, outside, 8)
    assert layout.stock_estimated_peak == 1024 + 128
    assert layout.individual == [0]
    assert layout.estimated_peak <= layout.stock_estimated_peak
    assert [p.plan.slab_bytes for p in layout.pools] == [128]


def test_no_pool_holds_dead_bytes_where_an_extern_kernel_may_allocate_scratch():
    # a (1024 B, steps 1-2) and b (64 B, steps 1-5) chain into one 1088-byte pool; the replayed peak is
    # 1088 at step 1 either way, but at step 4 an extern kernel runs (an attention fallback, say): the
    # pool would still hold a's 1024 dead bytes under whatever scratch that kernel allocates
    pooled = slab.plan_pools([1, 1], [3, 6], [1024, 64], ["cpu"] * 2, [], 7)
    assert pooled.individual == [] and pooled.estimated_peak == pooled.stock_estimated_peak == 1088
    guarded = slab.plan_pools([1, 1], [3, 6], [1024, 64], ["cpu"] * 2, [], 7, foreign_steps=[4])
    assert guarded.individual == [0]  # the bytes idle at step 4 leave the pool
    assert [p.members for p in guarded.pools] == [[1]] and guarded.pools[0].plan.slab_bytes == 64


def test_is_foreign_call_tells_calls_from_bookkeeping_lines():
    assert slab.is_foreign_call("buf3 = torch.ops.aten.sort.default(buf2)")
    assert not slab.is_foreign_call("assert_size_stride(buf2, (8, 16), (16, 1), 'input')")
    assert not slab.is_foreign_call("del buf2")
    assert not slab.is_foreign_call("# Topologically Sorted Source Nodes: [x]")


def test_devices_get_separate_pools():
    layout = slab.plan_pools([1, 1], [3, 3], [64, 64], ["cpu", "cuda:0"], [], 4)
    assert sorted(p.members for p in layout.pools) == [[0], [1]]


def test_run_time_check_names_overlapping_buffers_and_poisons_dead_ones():
    pool = torch.zeros(256, dtype=torch.uint8)
    slab_open(pool)
    slab_claim(pool, "buf1", 0, 128)
    with pytest.raises(SlabCheckError, match="'buf2'.*'buf1'"):
        slab_claim(pool, "buf2", 64, 128)
    view = pool[:128].view(torch.float32)
    slab_release(pool, "buf1", 0, 128)
    assert torch.isnan(view).all()
    slab_claim(pool, "buf2", 64, 128)  # buf1 is dead: its bytes are free again
    with pytest.raises(SlabCheckError, match="outside its pool"):
        slab_claim(pool, "buf3", 192, 128)


def test_the_slab_option_is_in_the_uuid_and_uninstall_restores_the_wrapper_pass():
    import torch._inductor.config as config
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    original = vars(PythonWrapperCodegen)["run_wrapper_ir_passes"]
    before = config._post_fusion_custom_pass
    with hook.use():
        plain_uuid = config._post_fusion_custom_pass.uuid()
    with hook.use(slab=True):
        assert vars(PythonWrapperCodegen)["run_wrapper_ir_passes"] is not original
        pooled_uuid = config._post_fusion_custom_pass.uuid()
        with hook.use(slab=True, poison=True):
            checked_uuid = config._post_fusion_custom_pass.uuid()
    assert len({plain_uuid, pooled_uuid, checked_uuid}) == 3
    assert vars(PythonWrapperCodegen)["run_wrapper_ir_passes"] is original
    assert config._post_fusion_custom_pass is before


def test_the_cpp_wrapper_keeps_inductors_allocation_with_a_warning(caplog):
    from types import SimpleNamespace

    from torch._inductor.virtualized import V

    calls = []
    patched = slab._patched_ir_passes(lambda wrapper, is_inference: calls.append(is_inference), slab.SlabOptions())
    slab.plans.clear()
    with caplog.at_level(logging.WARNING, logger="reorder"), V.set_graph_handler(SimpleNamespace(cpp_wrapper=True)):
        patched(SimpleNamespace(lines=[]), False)
    assert calls == [False]  # Inductor's own passes ran, as the user's compile would have
    assert "C++ wrapper" in slab.plans[-1]["fallback"]
    assert any("slab off" in r.getMessage() and "C++ wrapper" in r.getMessage() for r in caplog.records)


# --- real compiles -------------------------------------------------------------------------------------------




def step(model, compiled, x, training):
    """Outputs (and gradients of the input and every parameter, in training), detached."""
    if not training:
        with torch.no_grad():
            return [compiled(x)]
    model.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_()
    out = compiled(x)
    out.square().sum().backward()
    return [out.detach(), x.grad] + [p.grad for p in model.parameters()]


def measured(model, compiled, x, training):
    from reorder.measure import measure

    return measure(lambda: step(model, compiled, x, training), "cpu")


ALLOCATION = re.compile(r"^\s*\w+ = empty_strided_cpu\(", re.M)


@pytest.mark.slow
@pytest.mark.parametrize("name, training", [("residual", False), ("residual", True), ("inception", False),
                                            ("inception", True), ("transformer", False), ("transformer", True)])
def test_compiled_code_runs_in_our_pools_with_stock_results_and_allocations(name, training, fresh_compiles):
    """Every block in inference and in a training step (a forward graph, whose saved activations are
    outputs, and a backward graph)."""
    from torch._inductor.utils import run_and_get_code

    model, x = tiny(name)
    model.train(training)
    stock = torch.compile(model)
    expected, stock_code = run_and_get_code(lambda: step(model, stock, x, training))
    stock_run = measured(model, stock, x, training)
    torch._dynamo.reset()
    # stock's choice of order (Inductor's three methods), so the pools alone make the difference
    with hook.use(slab=True, poison=True, methods=["lpmf", "bfs", "dfs"]):
        pooled = torch.compile(model)
        got, code = run_and_get_code(lambda: step(model, pooled, x, training))
    for a, b in zip(got, expected):
        assert torch.equal(a, b)  # bitwise: same kernels, same inputs; poison never reached a live buffer
    assert len(slab.plans) == (2 if training else 1)
    assert all("fallback" not in p for p in slab.plans)
    assert sum(p["pooled"] for p in slab.plans) > 0
    for p in slab.plans:
        assert p["estimated_peak"] <= p["stock_estimated_peak"]
    pool_lines = sum(len(re.findall(r"^\s*pool\d+ = empty_strided_cpu\(", c, re.M)) for c in code)
    assert pool_lines == sum(len(p["pools"]) for p in slab.plans)
    # allocations per call: the generated code's allocation lines are the only difference from stock
    # (the poison checks allocate nothing). Pools over time can take more allocation calls than stock's
    # one-by-one buffers (Inception and transformer training graphs: a few more); the count is exact.
    ours = sum(len(ALLOCATION.findall(c)) for c in code)
    theirs = sum(len(ALLOCATION.findall(c)) for c in stock_code)
    pooled_run = measured(model, pooled, x, training)
    assert pooled_run.allocations == stock_run.allocations - (theirs - ours)
    assert pooled_run.peak <= stock_run.peak  # the real allocated peak, not only the replay


@pytest.mark.slow
def test_symbolic_sizes_fall_back_to_inductors_allocation_with_a_warning(fresh_compiles, caplog):
    model, x = tiny("transformer")
    model.eval()
    with torch.no_grad():
        expected = torch.compile(model, dynamic=True)(x)
    torch._dynamo.reset()
    with caplog.at_level(logging.WARNING, logger="reorder"), hook.use(slab=True), torch.no_grad():
        got = torch.compile(model, dynamic=True)(x)
    assert torch.equal(got, expected)
    [plan] = slab.plans
    assert "symbolic size" in plan["fallback"]
    assert any(plan["graph"] in r.getMessage() and "symbolic size" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_a_broken_plan_is_refused_before_codegen_and_caught_at_run_time_by_poison_mode(fresh_compiles, monkeypatch,
                                                                                         caplog):
    model, x = tiny("residual")
    model.eval()
    monkeypatch.setattr(slab, "search", lambda starts, ends, sizes, **kwargs: [0] * len(sizes))
    with caplog.at_level(logging.WARNING, logger="reorder"), hook.use(slab=True), torch.no_grad():
        torch.compile(model)(x)  # every buffer at offset 0: validation refuses it, the graph falls back
    assert "share bytes" in slab.plans[-1]["fallback"]
    assert any("slab off" in r.getMessage() for r in caplog.records)
    torch._dynamo.reset()
    monkeypatch.setattr(SlabPlan, "validate", lambda self: None)
    with hook.use(slab=True, poison=True), torch.no_grad():
        compiled = torch.compile(model)
        with pytest.raises(SlabCheckError, match=r"buffer 'buf\d+' .* overlaps live buffer 'buf\d+'"):
            compiled(x)
    assert issubclass(SlabCheckError, PlanError)
