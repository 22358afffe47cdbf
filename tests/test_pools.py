"""Pools over time (reorder.planning.pools) on plain records: nothing here compiles or imports Inductor."""

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reorder.errors import PlanError
from reorder.planning import SlabPlan, align
from reorder.planning.pools import (ALIGNMENT, BufferGroup, GroupKind, Pool, chained_components, choose_layout,
                                    plan_pools, replayed_peak)

POOLED, INDIVIDUAL, EXTERN, FREED_INPUT = (GroupKind.POOLED, GroupKind.INDIVIDUAL, GroupKind.EXTERN,
                                          GroupKind.FREED_INPUT)


def group(name, begin, end, nbytes, kind=POOLED, device="cpu"):
    return BufferGroup(name, nbytes, align(nbytes, ALIGNMENT), begin, end, device, kind)


def pooled(*spans, device="cpu"):
    """Pooled groups ``g0, g1, ...`` from ``(begin, end, bytes)``."""
    return [group(f"g{i}", b, e, z, device=device) for i, (b, e, z) in enumerate(spans)]


def live_total(spans, step):
    return sum(z for b, e, z in spans if b <= step < e)


def brute_peak(horizon, spans):
    """The replay, step by step: the most bytes live at one step."""
    return max((live_total(spans, t) for t in range(horizon + 1)), default=0)


def layout_spans(layout, groups):
    """Every allocation the program makes with ``layout``: its pools, and every other group on its own."""
    in_pools = {i for p in layout.pools for i in p.members}
    singles = [(g.begin, g.end, g.nbytes) for i, g in enumerate(groups) if i not in in_pools]
    return singles + [(p.begin, p.end, p.nbytes) for p in layout.pools]


def idle_bytes(layout, groups, step):
    return sum(p.nbytes - sum(groups[i].size for i in p.members if groups[i].live_at(step))
               for p in layout.pools if p.begin <= step < p.end)


# --- named cases ------------------------------------------------------------------------------------------------


def test_chained_lifetimes_share_a_pool_and_gaps_split_pools():
    starts, ends = [6, 1, 2, 4], [9, 3, 5, 7]
    assert chained_components(range(4), starts, ends) == [[1, 2, 3, 0]]
    starts, ends = [1, 2, 4, 6], [3, 4, 6, 8]
    # half-open: one freed where the next is allocated does not chain (no kernel runs between)...
    assert chained_components(range(4), starts, ends) == [[0, 1], [2], [3]]
    # ...unless touching ranges are chained on purpose
    assert chained_components(range(4), starts, ends, touching=True) == [[0, 1, 2, 3]]


def test_pools_are_validated_and_as_small_as_the_live_bytes_when_nothing_else_is_allocated():
    # a chain a -> b -> c with a short-lived d beside them: peak live is a + b + d = 320 at step 2
    groups = pooled((1, 3, 128), (2, 4, 128), (2, 3, 64), (3, 5, 64))
    layout = plan_pools(groups, 6)
    layout.validate(groups)
    assert layout.individual == ()
    [pool] = layout.pools
    assert pool.members == (0, 1, 2, 3) and (pool.begin, pool.end) == (1, 5)
    assert pool.nbytes == 320 == pool.plan.tensor_bound == layout.bound
    assert layout.estimated_peak == layout.stock_estimated_peak == 320


def test_groups_leave_the_pool_while_the_pooled_peak_would_exceed_stock():
    # an early large temporary and a late small one, chained by a long small one; saved outputs grow late:
    # one pool would hold 1024 while the outputs peak, so the large one is allocated on its own
    groups = pooled((1, 3, 1024), (1, 7, 64), (5, 7, 64)) + [group("out", 4, 9, 1024, INDIVIDUAL)]
    layout = plan_pools(groups, 9)
    layout.validate(groups)
    assert layout.stock_estimated_peak == 1024 + 128
    assert layout.individual == (0,)
    assert layout.estimated_peak == 1024 + 128
    assert [p.nbytes for p in layout.pools] == [128]
    # without the outputs, all three share one pool: 1024 + 64 live at step 1, then 128 at steps 5-6
    alone = plan_pools(groups[:3], 9)
    assert alone.individual == () and [p.nbytes for p in alone.pools] == [1088]


@pytest.mark.parametrize("kind", [INDIVIDUAL, EXTERN])
def test_every_kind_allocated_late_counts_in_the_replay(kind):
    groups = pooled((1, 3, 1024), (1, 7, 64), (5, 7, 64)) + [group("late", 4, 9, 1024, kind)]
    layout = plan_pools(groups, 9)
    layout.validate(groups)
    assert layout.individual == (0,)  # the same decision, whichever kind holds the late bytes


def test_an_input_freed_part_way_counts_in_the_replay():
    # a backward's saved activation (2048 B) is live until step 3; a large temporary comes only at step 5:
    # pooled with the long small one, its bytes would be held under the input at step 1 (2048 + 1088)
    groups = pooled((1, 7, 64), (5, 7, 1024)) + [group("saved", 0, 3, 2048, FREED_INPUT)]
    layout = plan_pools(groups, 8)
    layout.validate(groups)
    assert layout.stock_estimated_peak == 2048 + 64
    assert layout.individual == (1,) and [p.members for p in layout.pools] == [(0,)]
    assert plan_pools(groups[:2], 8).individual == ()  # without the input, one pool of 1088 is no worse


def test_no_pool_holds_dead_bytes_where_an_extern_kernel_may_allocate_scratch():
    # a (1024 B, steps 1-2) and b (64 B, steps 1-5) chain into one 1088-byte pool; the replayed peak is
    # 1088 at step 1 either way, but at step 4 an extern kernel runs (an attention fallback, say): the
    # pool would still hold a's 1024 dead bytes under whatever scratch that kernel allocates
    groups = pooled((1, 3, 1024), (1, 6, 64))
    free = plan_pools(groups, 7)
    assert free.individual == () and free.estimated_peak == free.stock_estimated_peak == 1088
    guarded = plan_pools(groups, 7, foreign_steps=[4])
    guarded.validate(groups)
    assert guarded.individual == (0,)  # the bytes idle at step 4 leave the pool
    assert [p.members for p in guarded.pools] == [(1,)] and guarded.pools[0].nbytes == 64
    # a foreign step where every pooled byte is live changes nothing
    assert plan_pools(groups, 7, foreign_steps=[1, 2]).individual == ()


def test_touching_ranges_share_a_pool_only_when_asked_and_the_fewer_allocations_win_a_tie():
    groups = pooled((1, 3, 256), (3, 5, 256), (5, 7, 256))
    apart, touching = plan_pools(groups, 8, touching=False), plan_pools(groups, 8, touching=True)
    assert [p.members for p in apart.pools] == [(0,), (1,), (2,)]
    assert [p.members for p in touching.pools] == [(0, 1, 2)]
    assert [p.plan.offsets for p in touching.pools] == [(0, 0, 0)]  # each reuses the bytes of the one before
    assert apart.estimated_peak == touching.estimated_peak == 256
    assert choose_layout(groups, 8) == touching
    # where touching costs bytes (a pool held across a step it could have freed), the lower peak wins
    groups = pooled((1, 3, 256), (3, 5, 64), (5, 7, 256)) + [group("out", 3, 5, 1024, INDIVIDUAL)]
    best = choose_layout(groups, 8)
    assert best.estimated_peak == min(plan_pools(groups, 8, touching=t).estimated_peak for t in (True, False))


def test_devices_get_separate_pools():
    groups = [group("a", 1, 3, 64, device="cpu"), group("b", 1, 3, 64, device="cuda:0"),
              group("c", 2, 4, 64, device="cpu")]
    layout = plan_pools(groups, 4)
    layout.validate(groups)
    assert [(p.device, p.members) for p in layout.pools] == [("cpu", (0, 2)), ("cuda:0", (1,))]


def test_zero_byte_groups_are_left_individual_and_cost_nothing():
    groups = pooled((1, 3, 0), (1, 3, 64))
    layout = plan_pools(groups, 4)
    assert layout.individual == (0,) and [p.members for p in layout.pools] == [(1,)]
    assert layout.allocations == 2


def test_records_and_horizons_that_break_an_invariant_are_refused_with_their_name():
    with pytest.raises(PlanError, match="'a'.*empty"):
        group("a", 3, 3, 64)
    with pytest.raises(PlanError, match="'b'.*nbytes 100"):
        BufferGroup("b", 100, 64, 1, 2, "cpu", POOLED)
    with pytest.raises(PlanError, match="'c'.*after the horizon 4"):
        plan_pools([group("c", 1, 5, 64)], 4)


def pool_of(groups, members, offsets, device="cpu"):
    """A pool of ``members`` at ``offsets``, planned by hand."""
    plan = SlabPlan.of_intervals([groups[i].name for i in members], [groups[i].begin for i in members],
                                 [groups[i].end for i in members], [groups[i].size for i in members], offsets)
    return Pool(device, tuple(members), dataclasses.replace(plan, alignment=ALIGNMENT))


def test_validate_refuses_each_broken_invariant():
    groups = pooled((1, 3, 64), (2, 4, 64), (6, 8, 64))
    layout = plan_pools(groups, 8)
    layout.validate(groups)
    assert [p.members for p in layout.pools] == [(0, 1), (2,)]
    first, second = layout.pools

    def broken(*pools, **changes):
        return dataclasses.replace(layout, pools=pools, **changes)

    with pytest.raises(PlanError, match="'g0' and 'g1' share bytes"):
        broken(pool_of(groups, [0, 1], [0, 0]), second).validate(groups)
    with pytest.raises(PlanError, match="each pooled group once"):
        broken(first).validate(groups)
    with pytest.raises(PlanError, match="leave a gap"):
        broken(pool_of(groups, [0, 2], [0, 0]), pool_of(groups, [1], [0])).validate(groups)
    with pytest.raises(PlanError, match="devices other than cuda:0"):
        broken(first, pool_of(groups, [2], [0], device="cuda:0")).validate(groups)
    with pytest.raises(PlanError, match="does not hold its members"):
        layout.validate(groups[:2] + [group("g2", 6, 8, 128)])  # g2 grew: its pool was planned for 64 bytes
    with pytest.raises(PlanError, match="above stock"):
        broken(first, second, estimated_peak=layout.stock_estimated_peak + 1).validate(groups)


def test_replayed_peak_is_the_first_step_of_the_highest_total():
    assert replayed_peak(5, [(0, 2, 10), (1, 3, 5), (3, 5, 15)]) == (15, 1)
    assert replayed_peak(3, []) == (0, 0)


# --- properties on random programs ------------------------------------------------------------------------------


@st.composite
def programs(draw):
    """Random groups of every kind on two devices, a horizon, foreign steps and the touching flag."""
    horizon = draw(st.integers(2, 12))
    groups = []
    for i in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from([POOLED, POOLED, POOLED, INDIVIDUAL, EXTERN, FREED_INPUT]))
        begin = 0 if kind is FREED_INPUT else draw(st.integers(1 if kind is POOLED else 0, horizon - 1))
        end = draw(st.integers(begin + 1, horizon))
        nbytes = draw(st.sampled_from([0, 8, 64, 100, 640, 1000, 4096]))
        groups.append(group(f"g{i}", begin, end, nbytes, kind, draw(st.sampled_from(["cpu", "cpu", "cuda:0"]))))
    foreign = draw(st.lists(st.integers(0, horizon), max_size=3))
    return groups, horizon, foreign, draw(st.booleans())


@settings(max_examples=150)
@given(programs())
def test_random_layouts_are_sound_and_never_replay_above_stock(program):
    groups, horizon, foreign, touching = program
    layout = plan_pools(groups, horizon, foreign, touching)
    layout.validate(groups)
    # the replay, recomputed step by step
    assert layout.stock_estimated_peak == brute_peak(horizon, [(g.begin, g.end, g.nbytes) for g in groups])
    assert layout.estimated_peak == brute_peak(horizon, layout_spans(layout, groups))
    assert layout.estimated_peak <= layout.stock_estimated_peak
    # no two members of a pool live at a common step share a byte (checked pairwise, not by SlabPlan.validate)
    for p in layout.pools:
        assert {groups[i].device for i in p.members} == {p.device}
        placed = list(zip(p.members, p.plan.offsets, strict=True))
        for (i, oi), (j, oj) in itertools.combinations(placed, 2):
            a, b = groups[i], groups[j]
            if a.begin < b.end and b.begin < a.end:
                assert oi + a.size <= oj or oj + b.size <= oi, (a, b, oi, oj)
        assert all(o + groups[i].size <= p.nbytes for i, o in placed)
    # the foreign-step rule: at each foreign step, the pools live hold only bytes of members live there
    for step in foreign:
        assert idle_bytes(layout, groups, step) == 0
    # only pooled groups are placed, each once
    placed = sorted([i for p in layout.pools for i in p.members] + list(layout.individual))
    assert placed == [i for i, g in enumerate(groups) if g.kind is POOLED]


@settings(max_examples=60)
@given(programs())
def test_the_chosen_layout_is_the_better_of_touching_and_not(program):
    groups, horizon, foreign, _ = program
    layouts = [plan_pools(groups, horizon, foreign, touching) for touching in (True, False)]
    best = choose_layout(groups, horizon, foreign)
    assert (best.estimated_peak, best.allocations) == min((lay.estimated_peak, lay.allocations) for lay in layouts)
