"""The benchmarks' one harness: variants as values, their contexts, and the records read back from results."""

import contextlib
import dataclasses
import json
from pathlib import Path

import pytest

from benchmarks import compile_overhead, fusion_guard, slab
from benchmarks.variants import Variant, eager, hooked, load_records, records_json, stock
from reorder.inductor.session import record_from_dict
from reorder.errors import ReorderError
from reorder.inductor.session import (CacheHitRecord, FallbackRecord, GuardRecord, HookOptions, OrderRecord, Session,
                                      SlabRecord)

ROOT = Path(__file__).resolve().parents[1]
CACHED = ROOT / "benchmarks" / "real" / "results" / "bench"

ORDER = OrderRecord(graph="g0", nodes=5, peak=100, method="lpmf", methods={"baseline": 120, "lpmf": 100},
                    lower_bound=90, optimal=False, seconds=0.5, estimate_of_incoming_order=120,
                    notes={"exact": "budget"}, inductor={"baseline": 120, "lpmf": 110, "bfs": 130, "dfs": 125},
                    inductor_seconds={"lpmf": 0.1, "bfs": 0.1, "dfs": 0.1}, captured="/tmp/g0.json")
SLAB = SlabRecord(graph="g0", pools=(64, 128), pooled=4, individual=1, pool_bytes=192, bound=128, worst_ratio=1.0,
                  estimated_peak=300, stock_estimated_peak=320)
GUARD = GuardRecord(graph="g0", checks=7, blocked=({"nodes": ["a", "b"], "peak": 1, "fused_peak": 2, "bytes": 1},),
                    avoided_by_reordering=2, work=40, budget_exhausted=False, rebuilds=3, seconds=0.25,
                    failed="RuntimeError: x")
RECORDS = (ORDER, SLAB, GUARD, FallbackRecord("g1", "slab", "no pools"), FallbackRecord("g2", "order", "boom"),
           CacheHitRecord(2))


def fake_context(log: list):
    """A context factory that logs what it was given and yields a marker."""

    @contextlib.contextmanager
    def context(config, training):
        log.append(("enter", config, training))
        yield ("recorded", config)
        log.append(("exit", config, training))

    return context


def test_a_variant_enters_its_context_with_its_config_and_the_mode():
    log = []
    variant = Variant("fake", "a fake", fake_context(log), config=("x", 1))
    assert variant.compiled
    with variant.enter(True) as recorded:
        assert log == [("enter", ("x", 1), True)]
        assert recorded == ("recorded", ("x", 1))
    assert log == [("enter", ("x", 1), True), ("exit", ("x", 1), True)]


def test_eager_neither_compiles_nor_records():
    def fn(x):
        return x + 1

    variant = eager()
    assert not variant.compiled and variant.compile(fn) is fn
    with variant.enter(False) as recorded:
        assert recorded is None


def test_hook_variants_are_values_of_their_options():
    guard = hooked("guard", "with the guard", fusion_guard=True, fusion_slack_bytes=1024)
    # without a budget unless one is named: the columns of our order, pools and guard were measured so
    assert guard.config == HookOptions(fusion_guard=True, fusion_slack_bytes=1024, memory_budget=None)
    assert hooked("ours", "a budget", memory_budget=0.5).config == HookOptions(memory_budget=0.5)
    assert guard == hooked("guard", "with the guard", fusion_guard=True, fusion_slack_bytes=1024)
    assert hash(guard) == hash(hooked("guard", "with the guard", fusion_guard=True, fusion_slack_bytes=1024))
    assert guard != hooked("guard", "with the guard", fusion_guard=True)
    capturing = guard.with_hook(capture_dir="/tmp/x")
    assert capturing.config == HookOptions(fusion_guard=True, fusion_slack_bytes=1024, capture_dir=Path("/tmp/x"),
                                           memory_budget=None)
    assert guard.config.capture_dir is None  # the original value is untouched


def test_hook_options_are_checked_when_the_variant_is_made():
    with pytest.raises(ReorderError, match="fusion_slack_fraction"):
        hooked("bad", "bad", fusion_slack_fraction=2.0)


def test_with_hook_refuses_a_variant_without_the_hook():
    with pytest.raises(ValueError, match="'stock'"):
        stock().with_hook(capture_dir="/tmp/x")


def test_stock_changes_are_inductor_config_patched_for_the_block_only():
    from torch._inductor import config

    before = config.memory_planning
    variant = stock("pools", "Inductor's pools", training=False, memory_planning=not before)
    assert variant.config == (("memory_planning", not before),) and not variant.training
    with variant.enter(False) as recorded:
        assert recorded is None and config.memory_planning is (not before)
    assert config.memory_planning is before


def test_each_benchmark_runs_its_variants_from_the_one_harness():
    assert [v.name for v in fusion_guard.VARIANTS] == ["stock", "without", "with"]
    unbudgeted = HookOptions(memory_budget=None)
    assert [v.config for v in fusion_guard.VARIANTS[1:]] == [
        unbudgeted, dataclasses.replace(unbudgeted, fusion_guard=True)]
    assert [v.name for v in slab.VARIANTS] == ["stock", "reorder", "slab", "inductor_pools"]
    assert slab.VARIANTS[2].config == dataclasses.replace(unbudgeted, slab=True)
    assert [v.config for v in compile_overhead.TIMED[1:]] == [
        unbudgeted, dataclasses.replace(unbudgeted, keep_inductor_pass=True)]
    assert compile_overhead.COMPARED.config == dataclasses.replace(unbudgeted, compare=True)


def test_inductor_pools_forces_planning_in_training_and_restores_everything():
    from torch._inductor import config
    from torch._inductor.codegen import memory_planning
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    plan, passes = memory_planning.MemoryPlanner.plan, PythonWrapperCodegen.run_wrapper_ir_passes
    variant = slab.VARIANTS[3]
    with variant.enter(True) as pools:
        assert pools == [] and config.memory_planning is True
        assert memory_planning.MemoryPlanner.plan is not plan
        assert PythonWrapperCodegen.run_wrapper_ir_passes is not passes
    assert memory_planning.MemoryPlanner.plan is plan and PythonWrapperCodegen.run_wrapper_ir_passes is passes
    with variant.enter(False):
        assert PythonWrapperCodegen.run_wrapper_ir_passes is passes  # inference plans on its own


def test_records_round_trip_through_json():
    session = Session(HookOptions())
    for record in RECORDS:
        session.add(record)
    written = json.loads(json.dumps(records_json(session)))
    assert [d["kind"] for d in written] == ["order", "slab", "guard", "fallback", "fallback", "cache_hit"]
    assert load_records({"records": written}) == RECORDS
    assert records_json(None) == []


def test_an_unknown_record_kind_is_named():
    with pytest.raises(ValueError, match="'pool'"):
        record_from_dict({"kind": "pool", "graph": "g"})


def test_old_results_become_the_same_records():
    order = {k: v for k, v in ORDER.to_dict().items() if k != "kind"}
    guard = {k: v for k, v in GUARD.to_dict().items() if k not in ("kind", "graph")}
    plan = {k: v for k, v in SLAB.to_dict().items() if k != "kind"}
    old = json.loads(json.dumps({
        "graphs": [order, {"graph": "g2", "fallback": "boom"}],
        "fusion_guard": [{"graph": "g0", "fusion_guard": guard}],
        "slab_plans": [plan, {"graph": "g1", "fallback": "no pools"}],
    }))
    expected = (ORDER, FallbackRecord("g2", "order", "boom"), GUARD, SLAB, FallbackRecord("g1", "slab", "no pools"))
    assert load_records(old) == expected
    # the slab benchmark's own cache called its list "plans"; a guard that did not fail had no "failed"
    del guard["failed"]
    assert load_records({"plans": [plan], "fusion_guard": [{"graph": "g0", "fusion_guard": guard}]}) == (
        GuardRecord(**{**guard, "graph": "g0", "blocked": GUARD.blocked}), SLAB)


def test_a_cached_real_model_row_reads_as_records():
    row = json.loads((CACHED / "AlbertForQuestionAnswering_train.json").read_text())
    hook = load_records(row["variants"]["hook"])
    assert [type(r) for r in hook] == [OrderRecord, OrderRecord]
    assert [r.inductor["baseline"] for r in hook] == [g["inductor"]["baseline"] for g in row["variants"]["hook"]["graphs"]]
    guards = load_records(row["variants"]["guard"])
    blocked = [len(r.blocked) for r in guards if isinstance(r, GuardRecord)]
    assert sum(blocked) == 7  # the report's "guard blocked" cell for this row
    slabs = [r for r in load_records(row["variants"]["slab"]) if isinstance(r, SlabRecord)]
    assert len(slabs) == 2 and all(isinstance(r.pools, tuple) for r in slabs)
    assert load_records(row["variants"]["eager"]) == ()
