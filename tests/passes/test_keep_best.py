"""The ``best`` pass and the refinement's effort setting."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardnn.baselines import PLACERS
from pardnn.cluster import Cluster, Device
from pardnn.machine import simulate, single_device_peak
from pardnn.partitioner import PardnnOptions, default_spec, run as run_pardnn
from pardnn.passes.keep_best import KeepBest, final_key, plan_key
from pardnn.passes.refine import EFFORTS, Refine, default_budget
from pardnn.pipeline import PlanState

from ..helpers import tiny
from .common import free_links, random_cases


def test_best_keeps_a_faster_start():
    """Two independent 10 us ops: the current plan stacks them (20 us); the recorded start splits them."""
    g = tiny([("a", 10), ("b", 10)], [])
    c = free_links(2)
    state = PlanState(assignment=np.array([0, 0]), starts=(("split", np.array([0, 1])),))
    out = KeepBest()(g, c, state)
    assert out.assignment.tolist() == [0, 1] and out.makespan_us == 10.0
    assert out.stats["best"]["kept"] == "split"


def test_best_uses_a_recorded_score_only_for_the_plan_it_was_recorded_for():
    """`PlanState.start_keys` spares the best pass a simulation for a start scored when it was recorded. Two
    starts can share a name (a pipeline that seeds twice): the score recorded for the second "incoming"
    plan (worse than the current one) must not hide the first "incoming" plan, which is faster."""
    g = tiny([("a", 10), ("b", 10)], [])
    c = free_links(2)
    fast, slow = np.array([0, 1]), np.array([1, 1])
    recorded = plan_key(simulate(g, c, slow), False)
    state = PlanState(assignment=np.array([0, 0]), starts=(("incoming", fast), ("incoming", slow)),
                      start_keys={"incoming": (recorded, slow)})
    out = KeepBest()(g, c, state)
    assert out.assignment.tolist() == [0, 1] and out.stats["best"]["kept"] == "incoming"


def test_best_prefers_a_plan_that_fits_over_a_faster_one_that_does_not():
    """a -> b, each with 600 B of weights: on one device of 1000 B they do not fit, however fast that is."""
    g = tiny([("a", 10, 8, {"persistent_bytes": 600}), ("b", 10, 8, {"persistent_bytes": 600})], [("a", "b")])
    c = Cluster.homogeneous(2, memory_bytes=1000, latency_us=100.0, bandwidth_bytes_per_us=1.0)
    one = np.array([0, 0])
    split = np.array([0, 1])
    assert not simulate(g, c, one).feasible and simulate(g, c, split).feasible
    assert simulate(g, c, one).makespan_us < simulate(g, c, split).makespan_us
    out = KeepBest()(g, c, PlanState(assignment=one, starts=(("split", split),)))
    assert out.assignment.tolist() == split.tolist()
    # and a faster plan that fits is never replaced by a slower start
    back = KeepBest()(g, c, PlanState(assignment=split, starts=(("one", one),)))
    assert back.assignment.tolist() == split.tolist() and back.stats["best"]["kept"] == "current"


def test_effort_orders_the_budget_and_is_named_in_the_spec():
    g = tiny([(f"n{i}", 1) for i in range(50)], [(f"n{i}", f"n{i + 1}") for i in range(49)])
    budgets = {e: default_budget(g, floor=EFFORTS[e].floor, boost=EFFORTS[e].boost, work=EFFORTS[e].work,
                                 ceiling=EFFORTS[e].ceiling)
               for e in EFFORTS}
    assert budgets["fast"] < budgets["default"] <= budgets["best"]
    # step 1's budgets too, with the mid-size boost, at every size; the default's stays flat while it ramps
    for n in (50, 2_000, 6_000, 9_000, 12_000, 30_000, 120_000, 300_000):
        big = SimpleNamespace(num_nodes=n, num_edges=n)
        one = {e: default_budget(big, floor=EFFORTS[e].floor, boost=EFFORTS[e].boost, work=EFFORTS[e].work,
                                 ceiling=EFFORTS[e].ceiling, mid_boost=EFFORTS[e].mid_boost,
                                 mid_extra=EFFORTS[e].mid_extra) for e in EFFORTS}
        assert one["fast"] < one["default"] <= one["best"], (n, one)
    d = EFFORTS["default"]
    flat = {default_budget(SimpleNamespace(num_nodes=n, num_edges=0), floor=d.floor, boost=d.boost, work=d.work,
                           ceiling=d.ceiling, mid_boost=d.mid_boost) for n in (12_000, 15_000, 20_000, 24_000)}
    assert flat == {625}
    assert default_budget(SimpleNamespace(num_nodes=50_000, num_edges=0), floor=d.floor, boost=d.boost, work=d.work,
                          ceiling=d.ceiling, mid_boost=d.mid_boost) == 300    # 3 x 5e6 / 50k, twice the plain boost
    # with step 1's extra on mid-sized graphs: four times that from 24k to 150k nodes plus edges, ramping up
    # from 12k and down to none at 200k; the graphs up to 12k and from 200k on keep their budget
    extra = [default_budget(SimpleNamespace(num_nodes=n, num_edges=0), floor=d.floor, boost=d.boost, work=d.work,
                            ceiling=d.ceiling, mid_boost=d.mid_boost, mid_extra=d.mid_extra)
             for n in (5_000, 12_000, 18_000, 24_000, 50_000, 150_000, 175_000, 200_000, 500_000)]
    assert extra == [1500, 625, 1562, 2500, 1200, 400, 200, 65, 30]
    # the memory-aware refinement's budgets are ordered the same way, at every size
    for n in (50, 2_000, 9_000, 20_000, 120_000, 300_000):
        big = SimpleNamespace(num_nodes=n, num_edges=n)
        mem = {e: default_budget(big, floor=round(0.4 * EFFORTS[e].floor), boost=EFFORTS[e].mem_boost,
                                 work=EFFORTS[e].mem_work, ceiling=EFFORTS[e].mem_ceiling,
                                 mid_boost=EFFORTS[e].mem_mid_boost) for e in EFFORTS}
        assert mem["fast"] < mem["default"] <= mem["best"], (n, mem)
    assert default_spec(PardnnOptions(effort="fast")) == \
        "slice,map,seed{schedulers=heft+cpop+metis},refine{effort=fast},memory,refine-mem{effort=fast},best"
    with pytest.raises(ValueError, match="unknown effort 'hard'"):
        Refine(effort="hard")(g, free_links(2), PlanState(assignment=np.zeros(50, dtype=np.int64)))


def test_each_effort_is_deterministic_and_fast_spends_less():
    # four chains of 30 ops, joined at the end: room for refinement on 4 devices
    nodes = [(f"c{j}_{i}", 1 + (i * 7 + j) % 5, 1000) for j in range(4) for i in range(30)] + [("end", 1)]
    edges = [(f"c{j}_{i}", f"c{j}_{i + 1}") for j in range(4) for i in range(29)] + \
        [(f"c{j}_29", "end") for j in range(4)]
    g = tiny(nodes, edges)
    c = Cluster.homogeneous(4, latency_us=1.0, bandwidth_bytes_per_us=1000.0)
    runs = {e: run_pardnn(g, c, PardnnOptions(effort=e)) for e in ("fast", "default")}
    for e, (plan, state, _) in runs.items():
        assert run_pardnn(g, c, PardnnOptions(effort=e))[0].same_as(plan)
    assert runs["fast"][1].stats["refine"]["budget"] < runs["default"][1].stats["refine"]["budget"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases(), st.sampled_from([None, 0.3, 0.6, 1.2]))
def test_the_pipeline_is_never_worse_than_any_of_its_starts(case, scale):
    """The mapped plan and every seed (list schedules, the METIS cut) are starts; the result beats or ties each of them
    by the machine model's order (fits first, then step time; else less overflow), with and without
    memory limits. Among them are the plain plans of the HEFT, ETF, CPOP, SCT and METIS baselines, so the
    result is never worse than theirs either."""
    g, c = case
    if scale is not None:
        cap = max(1, int(scale * single_device_peak(g)))
        c = Cluster(tuple(Device(d.name, memory_bytes=cap) for d in c.devices), c.latency_us,
                    c.bandwidth_bytes_per_us)
    plan, state, _ = run_pardnn(g, c, PardnnOptions(refine_evals=60))
    assert "incoming" in {label for label, _ in state.starts}    # seeds equal to it are not listed twice
    bounded = scale is not None
    final = final_key(simulate(g, c, plan.assignment), bounded)
    for label, dev in state.starts:
        assert final <= final_key(simulate(g, c, dev), bounded), label
    for name in ("heft", "etf", "cpop", "sct", "metis"):
        assert final <= final_key(simulate(g, c, PLACERS[name](g, c).assignment), bounded), name


def test_when_nothing_fits_the_plan_needing_the_least_more_memory_per_device_is_kept():
    """x's 120-byte output read on both devices: all on one device is 120 bytes over (2.2x its 100), split is
    70 over on each (1.7x). Less total overflow is the first; the user needs 1.7x the memory for the second
    and 2.2x for the first, so the second is kept."""
    g = tiny([("x", 1, 120), ("y", 1, 0, {"persistent_bytes": 50}), ("z", 1, 0, {"persistent_bytes": 50})],
             [("x", "y"), ("x", "z")])
    c = Cluster.homogeneous(2, 100)
    one, split = np.array([0, 0, 0]), np.array([0, 0, 1])
    s1, s2 = simulate(g, c, one), simulate(g, c, split)
    assert s1.overflow().tolist() == [120, 0] and s2.overflow().tolist() == [70, 70]
    assert plan_key(s1, True) < plan_key(s2, True) and final_key(s2, True) < final_key(s1, True)
    out = KeepBest()(g, c, PlanState(assignment=one, starts=(("split", split),)))
    assert out.assignment.tolist() == split.tolist() and out.stats["best"]["kept"] == "split"
    # recorded scores (by `plan_key`, where the first is better) do not hide the split plan
    out = KeepBest()(g, c, PlanState(assignment=one, starts=(("split", split),),
                                     start_keys={"split": (plan_key(s2, True), split)}))
    assert out.assignment.tolist() == split.tolist()


@pytest.mark.parametrize("effort", ["fast", "default", "best"])
def test_every_effort_spec_parses_and_round_trips(effort):
    from pardnn.pipeline import parse_pipeline

    spec = default_spec(PardnnOptions(effort=effort))
    assert str(parse_pipeline(spec)) == spec


def _four_chains():
    """Four chains of 30 ops joined at the end, one chain per device: (graph, start, a cluster where it fits,
    one where it does not)."""
    nodes = [(f"c{j}_{i}", 1 + (i * 7 + j) % 5, 1000) for j in range(4) for i in range(30)] + [("end", 1)]
    edges = [(f"c{j}_{i}", f"c{j}_{i + 1}") for j in range(4) for i in range(29)] + \
        [(f"c{j}_29", "end") for j in range(4)]
    g = tiny(nodes, edges)
    start = PlanState(assignment=np.arange(g.num_nodes, dtype=np.int64) % 4)
    roomy = Cluster.homogeneous(4, 10**9, latency_us=1.0, bandwidth_bytes_per_us=1000.0)
    tight = Cluster.homogeneous(4, 2000, latency_us=1.0, bandwidth_bytes_per_us=1000.0)
    return g, start, roomy, tight


def test_a_plan_over_memory_gets_a_smaller_floor(monkeypatch):
    """Where the floor binds (a graph this size at a tiny ``work``), step 1 refines a plan that breaks a memory
    limit with ``overflow_share`` of the floor: step 2 rewrites it anyway. A plan that fits keeps the whole floor."""
    import dataclasses

    from pardnn.passes import refine as refine_mod

    monkeypatch.setitem(refine_mod.EFFORTS, "default", dataclasses.replace(EFFORTS["default"], work=1.0))
    g, start, roomy, tight = _four_chains()
    assert simulate(g, roomy, start.assignment).feasible and not simulate(g, tight, start.assignment).feasible
    floor = EFFORTS["default"].floor
    assert Refine()(g, roomy, start).stats["refine"]["budget"] == floor
    assert Refine()(g, tight, start).stats["refine"]["budget"] == round(0.4 * floor)
    assert Refine(overflow_share=1.0)(g, tight, start).stats["refine"]["budget"] == floor


def test_the_mid_size_boost_is_for_plans_that_fit(monkeypatch):
    """On a mid-sized graph (here the sizes are scaled down) step 1 gets ``mid_boost`` and ``mid_extra``,
    unless its plan breaks a memory limit: step 2 rewrites that plan, so it keeps the plain ``boost``.
    `refine-mem` never takes them; it has its own, ``mem_mid_boost``."""
    import dataclasses

    from pardnn.passes import make_pass
    from pardnn.passes import refine as refine_mod

    e = dataclasses.replace(EFFORTS["default"], work=1.0e4, mem_work=1.0e4, floor=1, boost=1.5, mid_boost=3.0,
                            mem_boost=1.5, mem_mid_boost=None, mid_extra=1.0)
    monkeypatch.setitem(refine_mod.EFFORTS, "default", e)
    monkeypatch.setattr(refine_mod, "MID_BOOST_FROM", 10.0)
    monkeypatch.setattr(refine_mod, "MID_BOOST_FULL_FROM", 20.0)
    g, start, roomy, tight = _four_chains()     # 121 nodes + 120 edges
    assert Refine()(g, roomy, start).stats["refine"]["budget"] == int(3.0 * 1e4 / 241)
    # ``mid_extra`` on top, for step 1 on a plan that fits only, and only up to its sizes
    monkeypatch.setitem(refine_mod.EFFORTS, "default", dataclasses.replace(e, mid_extra=2.0))
    assert Refine()(g, roomy, start).stats["refine"]["budget"] == int(2.0 * 3.0 * 1e4 / 241)
    assert Refine()(g, tight, start).stats["refine"]["budget"] == int(1.5 * 1e4 / 241)
    assert make_pass("refine-mem")(g, roomy, start.replace(changed=True)).stats["refine"]["budget"] == \
        int(1.5 * 1e4 / 241)
    assert Refine(boost=1.5)(g, roomy, start).stats["refine"]["budget"] == int(1.5 * 1e4 / 241)
    monkeypatch.setattr(refine_mod, "MID_EXTRA_FULL_UP_TO", 100.0)
    monkeypatch.setattr(refine_mod, "MID_EXTRA_NONE_FROM", 200.0)
    assert Refine()(g, roomy, start).stats["refine"]["budget"] == int(3.0 * 1e4 / 241)
    monkeypatch.setitem(refine_mod.EFFORTS, "default", e)
    assert Refine()(g, tight, start).stats["refine"]["budget"] == int(1.5 * 1e4 / 241)
    assert make_pass("refine-mem")(g, roomy, start.replace(changed=True)).stats["refine"]["budget"] == \
        int(1.5 * 1e4 / 241)
    # `refine-mem` takes its own mid-size boost when the effort has one
    monkeypatch.setitem(refine_mod.EFFORTS, "default", dataclasses.replace(e, mem_mid_boost=2.5))
    assert make_pass("refine-mem")(g, roomy, start.replace(changed=True)).stats["refine"]["budget"] == \
        int(2.5 * 1e4 / 241)
    assert Refine()(g, roomy, start).stats["refine"]["budget"] == int(3.0 * 1e4 / 241)
    monkeypatch.setitem(refine_mod.EFFORTS, "default", e)
    # an explicit boost replaces both
    assert Refine(boost=1.5)(g, roomy, start).stats["refine"]["budget"] == int(1.5 * 1e4 / 241)


def test_the_memory_aware_refinement_takes_the_efforts_mem_boost(monkeypatch):
    """`refine-mem`'s budget is ``mem_boost`` x ``mem_work`` / (V+E) on graphs below the taper, step 1's ``boost``
    x ``work`` / (V+E); an explicit ``boost`` option overrides either (a tiny ``work`` keeps the ceilings out of it)."""
    import dataclasses

    from pardnn.passes import make_pass
    from pardnn.passes import refine as refine_mod

    e = dataclasses.replace(EFFORTS["default"], work=1.0e5, mem_work=2.0e5, floor=1, boost=1.5, mem_boost=2.0)
    monkeypatch.setitem(refine_mod.EFFORTS, "default", e)
    g = tiny([(f"n{i}", 1 + i % 3, 10) for i in range(40)], [(f"n{i}", f"n{i + 1}") for i in range(39)])
    start = PlanState(assignment=np.arange(g.num_nodes, dtype=np.int64) % 2)
    c = Cluster.homogeneous(2, 10**9, latency_us=1.0, bandwidth_bytes_per_us=1000.0)
    size = g.num_nodes + g.num_edges
    assert Refine()(g, c, start).stats["refine"]["budget"] == int(1.5 * 1.0e5 / size)
    mem = make_pass("refine-mem")(g, c, start.replace(changed=True))
    assert mem.stats["refine"]["budget"] == int(2.0 * 2.0e5 / size)
    assert make_pass("refine-mem", boost=1.0)(g, c, start.replace(changed=True)).stats["refine"]["budget"] == \
        int(2.0e5 / size)


def test_refine_mem_is_skipped_where_its_budget_is_under_the_efforts_minimum(monkeypatch):
    """`refine-mem` with a budget by size under ``mem_min`` simulations does nothing (no simulation, the plan
    unchanged, the reason in its figures); at or above it, or with an explicit ``max_evals``, it runs. Step 1's
    refinement never takes the minimum. (A tiny ``mem_work`` stands in for a graph of 150k+ ops.)"""
    import dataclasses

    from pardnn.passes import make_pass
    from pardnn.passes import refine as refine_mod

    g, start, roomy, _ = _four_chains()     # 121 nodes + 120 edges
    calls = []
    real = refine_mod.simulate
    monkeypatch.setattr(refine_mod, "simulate", lambda *a, **k: calls.append(1) or real(*a, **k))
    for mem_min, skipped in ((11, True), (10, False)):
        e = dataclasses.replace(EFFORTS["default"], work=2.41e3, mem_work=2.41e3, mem_boost=1.0, boost=1.0,
                                mid_boost=None, floor=1, mem_min=mem_min)     # a budget of 10 simulations
        monkeypatch.setitem(refine_mod.EFFORTS, "default", e)
        calls.clear()
        out = make_pass("refine-mem")(g, roomy, start.replace(changed=True))
        fig = out.stats["refine"]
        assert fig["budget"] == 10
        assert ("skipped" in fig) == skipped
        if skipped:
            assert "under the 11" in fig["skipped"] and not calls
            assert np.array_equal(out.assignment, start.assignment)
        else:
            assert fig["evaluations"] >= 1
        assert "skipped" not in Refine()(g, roomy, start).stats["refine"]       # step 1 runs
        assert "skipped" not in make_pass("refine-mem", max_evals=5)(g, roomy, start.replace(changed=True)
                                                                     ).stats["refine"]
