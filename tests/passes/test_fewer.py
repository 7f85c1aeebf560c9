"""The ``fewer`` pass: the pipeline on the faster half of the devices, its plan a start at K."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from pardnn.cluster import Cluster, Device
from pardnn.machine import simulate
from pardnn.passes.fewer import Fewer, faster_half, sub_cluster
from pardnn.pipeline import PlanState, parse_pipeline

from ..helpers import tiny
from .common import random_cases

WITH = "slice,map,seed,refine,memory,refine-mem,fewer,best"
WITHOUT = "slice,map,seed,refine,memory,refine-mem,best"


def star(n: int = 6, big: int = 4_000_000):
    """A root feeding ``n`` branches of 30 us that each send 4 MB (333 us at 12 GB/s) to one sink: on more
    than one device, the transfers cost more than the parallelism buys."""
    nodes = [("root", 1.0, big)] + [(f"b{i}", 30.0, big) for i in range(n)] + [("sink", 1.0, 8)]
    edges = [("root", f"b{i}") for i in range(n)] + [(f"b{i}", "sink") for i in range(n)]
    return tiny(nodes, edges)


def test_the_faster_half_and_its_links():
    c = Cluster((Device("a", 10, 1.0), Device("b", 10, 2.0), Device("c", 20, 1.0), Device("d", None, 2.0)))
    assert faster_half(c, 0.5).tolist() == [1, 3]           # the fast ones (d, unlimited, before b)
    assert faster_half(Cluster.homogeneous(5), 0.5).tolist() == [0, 1, 2]      # rounded up
    assert faster_half(Cluster.homogeneous(2), 0.5).tolist() == [0]
    sub = sub_cluster(c, np.array([1, 3]))
    assert sub.names == ("b", "d") and sub.speed.tolist() == [2.0, 2.0]
    assert sub.latency_us == c.latency_us and sub.bandwidth_bytes_per_us == c.bandwidth_bytes_per_us


def test_where_transfers_cost_more_than_parallelism_the_bound_shows_no_half_can_do_better():
    """On the star every split costs a 333 us transfer, so one device is best (1 + 6 x 30 + 1 us). The
    lower bound prices that (a join's inputs cross or run one after another with it), so the pass sees
    that the plan already reaches the bound on 2 devices and does not run; the plan is the star on one
    device, as the pipeline on the half gives."""
    g = star()
    c = Cluster.homogeneous(4)
    st, _ = parse_pipeline(WITH).run(g, c, PlanState())
    half, _ = parse_pipeline(WITHOUT).run(g, sub_cluster(c, np.arange(2)), PlanState())
    assert st.stats["fewer"] == {"skipped": "the plan is no longer than the lower bound on 2 devices (182.0 us)"}
    got = simulate(g, c, st.assignment).makespan_us
    assert got <= simulate(g, sub_cluster(c, np.arange(2)), half.assignment).makespan_us + 1e-9
    assert got == pytest.approx(182.0)


def found():
    """A graph a random search found (seed 237) where the pipeline gave 104.2 us on 4 devices and 96.0 us on 2:
    tensors of 400 kB (33 us at 12 GB/s) around ops of 1-40 us."""
    t = {0: 3, 1: 1, 2: 1, 3: 40, 4: 40, 5: 1, 6: 1, 7: 1, 8: 3, 9: 10, 10: 40, 11: 1, 12: 1, 13: 3, 14: 3, 15: 1}
    b = {0: 100, 1: 400000, 2: 100, 3: 5000, 4: 50000, 5: 400000, 6: 100, 7: 400000, 8: 5000, 9: 100, 10: 50000,
         11: 100, 12: 50000, 13: 400000, 14: 400000, 15: 400000}
    edges = [(0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (0, 4), (0, 5), (3, 6), (4, 6), (5, 7), (1, 8), (4, 8), (7, 9),
             (2, 10), (4, 11), (5, 11), (11, 12), (4, 13), (2, 14), (13, 14), (1, 15), (13, 15)]
    return tiny([(f"n{i}", float(t[i]), b[i]) for i in range(16)], [(f"n{a}", f"n{z}") for a, z in edges])


def test_the_plan_on_the_half_is_kept_where_it_is_shorter():
    g, c = found(), Cluster.homogeneous(4)
    alone, _ = parse_pipeline(WITHOUT).run(g, c, PlanState())
    st, _ = parse_pipeline(WITH).run(g, c, PlanState())
    half, _ = parse_pipeline(WITHOUT).run(g, sub_cluster(c, np.arange(2)), PlanState())
    on_half = simulate(g, c, half.assignment).makespan_us
    assert st.stats["fewer"]["devices"] == 2 and st.stats["fewer"]["makespan_us"] == pytest.approx(on_half)
    got = simulate(g, c, st.assignment).makespan_us
    assert got <= min(on_half, simulate(g, c, alone.assignment).makespan_us) + 1e-9
    if simulate(g, c, alone.assignment).makespan_us > on_half:      # 104.2 against 96.0 us when it was written
        assert st.stats["best"]["kept"] == "fewer" and got == pytest.approx(on_half)


def idle_then_used():
    """A graph a random search found (seed 38): on 4 devices the pipeline gives 89.0 us and its plan on 2
    devices 96.0 us, but refined on all 4 from that 2-device plan, 87.0 us."""
    t = [1, 3, 3, 1, 3, 10, 3, 10, 1, 40, 1, 1, 10, 40, 10, 3]
    b = [400000, 5000, 50000, 5000, 50000, 100, 100, 100, 400000, 50000, 50000, 50000, 5000, 5000, 100, 50000]
    edges = [(2, 4), (1, 6), (3, 6), (4, 8), (6, 8), (5, 9), (7, 9), (5, 10), (9, 10), (1, 11), (10, 11), (0, 12),
             (1, 12), (2, 12), (4, 12), (8, 12), (1, 13), (0, 14), (10, 14), (12, 14), (13, 14), (10, 15)]
    return tiny([(f"n{i}", float(t[i]), b[i]) for i in range(16)], [(f"n{a}", f"n{z}") for a, z in edges])


def test_the_half_plan_refined_on_all_devices_is_a_second_start(caplog):
    """With ``refine`` (the default), the passes after the seed pass run again on all K devices from the
    half's plan alone, and their plan is a second start: here shorter than both the pipeline's and the half's
    (87.0 us against 89.0 and 96.0). Without it, the half's plan is the only start the pass adds."""
    import logging

    g, c = idle_then_used(), Cluster.homogeneous(4)
    plain, _ = parse_pipeline(WITHOUT).run(g, c, PlanState())
    off, _ = parse_pipeline(WITH.replace("fewer", "fewer{refine=false}")).run(g, c, PlanState())
    with caplog.at_level(logging.INFO, logger="pardnn"):
        st, _ = parse_pipeline(WITH).run(g, c, PlanState())
    f = st.stats["fewer"]
    assert "refined_makespan_us" not in off.stats["fewer"] and "fewer-refined" not in dict(off.starts)
    assert f["refined_makespan_us"] < min(f["makespan_us"], simulate(g, c, plain.assignment).makespan_us) - 1e-9
    assert st.stats["best"]["kept"] == "fewer-refined"
    assert simulate(g, c, st.assignment).makespan_us == pytest.approx(f["refined_makespan_us"])
    assert f["refined_makespan_us"] == pytest.approx(87.0) and f["makespan_us"] == pytest.approx(96.0)
    assert any(r.getMessage().startswith("fewer at K: refined on all 4 devices, 0.087 ms, a start for best")
               for r in caplog.records)
    # the refinement ran from the half's plan: the passes after the seed pass, the same as running them alone
    from pardnn.passes.fewer import after_seed
    inner, _ = Fewer().inner(parse_pipeline(WITH), WITH.split(",").index("fewer"))
    assert str(after_seed(inner)) == "refine,memory,refine-mem,best"
    assert after_seed(Fewer().inner(parse_pipeline("slice,map,seed,fewer,best"), 3)[0]) is None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases())
def test_never_worse_than_the_pipeline_on_the_faster_half(case):
    """The property the pass is for: with it, the plan at K is never longer than the pipeline's plan on the
    K/2 fastest devices, run at K (unlimited memory: the half holds the step)."""
    g, c = case
    st, _ = parse_pipeline(WITH).run(g, c, PlanState())
    keep = faster_half(c, 0.5)
    half, _ = parse_pipeline(WITHOUT).run(g, sub_cluster(c, keep), PlanState())
    assert simulate(g, c, st.assignment).makespan_us <= simulate(g, c, keep[half.assignment]).makespan_us + 1e-6


def test_skipped_where_the_half_cannot_hold_the_step_or_lacks_a_pinned_device():
    g = star()
    peak = 4_000_000 * 8
    tight = Cluster.homogeneous(4, memory_bytes=int(1.25 * peak / 4))
    st, _ = parse_pipeline(WITH).run(g, tight, PlanState())
    assert "hold less than the step's peak on one" in st.stats["fewer"]["skipped"]
    pinned = tiny([("a", 1.0, 0, {"pinned": 1}), ("b", 1.0, 0, {"pinned": 2}), ("c", 1.0, 0, {"pinned": 3})],
                  [("a", "b"), ("b", "c")])
    st, _ = parse_pipeline(WITH).run(pinned, Cluster.homogeneous(4), PlanState())
    assert st.stats["fewer"]["skipped"] == "nodes are pinned to 3 devices, more than the 2 it would place on"
    st, _ = parse_pipeline("slice,map,seed,refine,fewer{max_nodes=3},best").run(g, Cluster.homogeneous(4),
                                                                                PlanState())
    assert st.stats["fewer"]["skipped"] == "more than 3 ops"
    st, _ = parse_pipeline(WITH).run(g, Cluster.homogeneous(1), PlanState())
    assert st.stats["fewer"]["skipped"] == "1 device"


def test_skipped_where_the_plan_already_beats_every_plan_on_the_half():
    """Four chains of 100 us with nothing between them: one per device takes 100 us, and no plan on two
    devices can take less than the work over two, 200 us (the sound lower bound), so the half is not run."""
    g = tiny([(f"{c}{i}", 25.0, 8) for c in "abcd" for i in range(4)],
             [(f"{c}{i}", f"{c}{i + 1}") for c in "abcd" for i in range(3)])
    st, _ = parse_pipeline(WITH).run(g, Cluster.homogeneous(4), PlanState())
    assert simulate(g, Cluster.homogeneous(4), st.assignment).makespan_us == pytest.approx(100.0)
    assert "no longer than the lower bound on 2 devices (200.0 us)" in st.stats["fewer"]["skipped"]


def test_best_effort_runs_it_and_the_default_does_not():
    from pardnn.partitioner import PardnnOptions, default_spec
    assert default_spec(PardnnOptions(effort="best")).endswith(",refine-mem{effort=best},fewer,rerun,best")
    assert "fewer" not in default_spec(PardnnOptions()) and "fewer" not in default_spec(PardnnOptions(effort="fast"))
    # without the best pass the start would be made and never read (the time doubled for nothing)
    assert "fewer" not in default_spec(PardnnOptions(effort="best", seed=False))


def test_options_are_checked():
    for bad in ({"share": 1.0}, {"share": 0}, {"effort": "huge"}, {"max_nodes": -1}):
        with pytest.raises(ValueError):
            Fewer(**bad)
    assert "fewer" not in Fewer().spec() and Fewer().spec().startswith("slice,map,seed")
    # each pass's own rule before check_pass_options', whose "0 or more" would admit 0
    for bad in (-0.5, "x", True):
        with pytest.raises(ValueError, match="share must be above 0 and below 1"):
            Fewer(share=bad)


def test_a_plan_among_the_alternatives_is_still_recorded_as_a_start():
    """The ``best`` pass weighs the current plan and the starts, not the alternatives (refinement's other
    starts): a half's plan that is only an alternative was taken for a start and dropped, and the result was
    the longer current plan."""
    from pardnn.passes.keep_best import KeepBest
    g, c = found(), Cluster.homogeneous(4)
    fewer = Fewer()
    keep = faster_half(c, 0.5)
    inner, _ = parse_pipeline(fewer.spec()).run(g, sub_cluster(c, keep), PlanState())
    half = keep[inner.assignment]
    spread = np.arange(g.num_nodes, dtype=np.int64) % 4      # a plan that pays for its transfers
    assert simulate(g, c, spread).makespan_us > simulate(g, c, half).makespan_us
    state = PlanState(assignment=spread, alternatives=(half.copy(),))
    st = KeepBest()(g, c, fewer(g, c, state))
    assert "same_as_a_start" not in st.stats["fewer"]
    assert simulate(g, c, st.assignment).makespan_us == pytest.approx(simulate(g, c, half).makespan_us)


def test_the_skips_say_why():
    """Each skip names its own reason: an empty graph was "4 devices", a cluster under ``min_devices`` only
    its count."""
    from pardnn.ir import GraphBuilder
    empty = GraphBuilder("e").build()
    assert Fewer()(empty, Cluster.homogeneous(4), PlanState(assignment=np.zeros(0, np.int64))).stats["fewer"] == \
        {"skipped": "no ops"}
    g = star()
    st = Fewer(min_devices=8)(g, Cluster.homogeneous(4), PlanState(assignment=np.zeros(g.num_nodes, np.int64)))
    assert st.stats["fewer"]["skipped"] == "4 devices, fewer than min_devices=8"


def test_pinned_devices_are_in_the_half_and_the_pins_are_renumbered_for_it():
    """A pin kept the pass from running unless the pinned device was in the faster half at the same index:
    every Keras graph pins its variables to device 0, so on a cluster whose device 0 is slow it never ran.
    Now the half holds every pinned device (then the fastest others), its pipeline sees the pins renumbered,
    and the plan at K keeps the original pins."""
    from pardnn.passes.fewer import half_with_pins, pins_within
    slow0 = Cluster(tuple(Device(f"d{i}", None, s) for i, s in enumerate((1.0, 2.0, 2.0, 2.0))))
    g = tiny([("w", 1.0, 4_000_000, {"pinned": 0})] + [(f"b{i}", 30.0, 4_000_000) for i in range(4)]
             + [("sink", 1.0, 8)], [("w", f"b{i}") for i in range(4)] + [(f"b{i}", "sink") for i in range(4)])
    assert faster_half(slow0, 0.5).tolist() == [1, 2]
    keep = half_with_pins(g, slow0, 0.5)
    assert keep.tolist() == [0, 1]
    assert pins_within(g, keep) is g                       # device 0 is index 0 of the half
    st, _ = parse_pipeline(WITH).run(g, slow0, PlanState())
    f = st.stats["fewer"]
    assert "skipped" not in f and f["devices"] == 2
    assert st.assignment[g.pinned >= 0].tolist() == [0]
    sub = sub_cluster(slow0, keep)
    half, _ = parse_pipeline(WITHOUT).run(g, sub, PlanState())
    assert simulate(g, slow0, st.assignment).makespan_us <= \
        simulate(g, slow0, keep[half.assignment]).makespan_us + 1e-6
    # a pin to device 3, the half's index 1: renumbered on a copy, the graph itself unchanged
    c = Cluster(tuple(Device(f"d{i}", None, s) for i, s in enumerate((2.0, 1.0, 1.0, 2.0))))
    pinned = tiny([("a", 1.0), ("b", 1.0, 0, {"pinned": 3})], [("a", "b")])
    keep = half_with_pins(pinned, c, 0.5)
    assert keep.tolist() == [0, 3]
    assert pins_within(pinned, keep).pinned.tolist() == [-1, 1] and pinned.pinned.tolist() == [-1, 3]
    st = Fewer()(pinned, c, PlanState(assignment=np.array([1, 3], np.int64)))     # a slow start, over the bound
    assert "skipped" not in st.stats["fewer"] and st.starts
    for _, dev in st.starts:
        assert dev[1] == 3
    # a pin outside the faster half takes the place of its slowest device
    assert half_with_pins(tiny([("a", 1.0, 0, {"pinned": 2})], []), c, 0.5).tolist() == [0, 2]
    assert half_with_pins(tiny([("a", 1.0, 0, {"pinned": 1}), ("b", 1.0, 0, {"pinned": 2})], []), c,
                          0.5).tolist() == [1, 2]


def test_in_a_pipeline_it_runs_the_passes_before_it_with_their_options():
    """On the half it runs what its pipeline ran before it and the best pass after it, options and all: with
    refinement left out (``--refine-evals 0``), the half is not refined either (it ran the default pipeline
    of its effort, refinement included, for 80% of the time)."""
    g, c = found(), Cluster.homogeneous(4)
    keep = faster_half(c, 0.5)
    for before in ("slice,map,seed,memory", "slice,map{comm_weight=0},seed,refine{max_evals=5},memory"):
        st, _ = parse_pipeline(before + ",fewer,best").run(g, c, PlanState())
        half, _ = parse_pipeline(before + ",best").run(g, sub_cluster(c, keep), PlanState())
        assert st.stats["fewer"]["makespan_us"] == pytest.approx(simulate(g, c, keep[half.assignment]).makespan_us)
    from pardnn.partitioner import PardnnOptions, default_spec
    assert "refine" not in default_spec(PardnnOptions(effort="best", refine_evals=0))


def test_without_a_best_pass_after_it_it_is_skipped():
    g, c = found(), Cluster.homogeneous(4)
    st, _ = parse_pipeline("slice,map,fewer").run(g, c, PlanState())
    assert st.stats["fewer"] == {"skipped": "no best pass after it"}


def test_recursive_tries_the_half_of_the_half():
    """With ``recursive`` the pipeline on the half has the pass too: on 8 devices the found graph is tried on
    4 (104.2 us, as on 8) and, within that, on 2, whose 96.0 us plan comes back; without it, 104.2 us."""
    g, c = found(), Cluster.homogeneous(8)
    st, _ = parse_pipeline("slice,map,seed,refine,fewer{recursive=true},best").run(g, c, PlanState())
    assert st.stats["fewer"]["devices"] == 4
    assert simulate(g, c, st.assignment).makespan_us == pytest.approx(96.0166666)
    flat, _ = parse_pipeline("slice,map,seed,refine,fewer,best").run(g, c, PlanState())
    assert simulate(g, c, flat.assignment).makespan_us == pytest.approx(104.175)


def test_its_log_lines_and_errors_name_it_first(caplog):
    import logging

    from pardnn.errors import PassError
    g, c = found(), Cluster.homogeneous(4)
    with caplog.at_level(logging.INFO, logger="pardnn"):
        parse_pipeline("slice,map,seed,fewer,best").run(g, c, PlanState())
    lines = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("pass fewer > seed") for m in lines) and any(m.startswith("pass fewer ") for m in lines)
    assert any(m.startswith("fewer: on 2 of 4 devices, ") for m in lines)
    # a pass that fails on the half is named as the half's
    with pytest.raises(PassError, match="pass 'fewer > best' needs assignment"):
        from pardnn.pipeline import Pipeline
        from pardnn.passes.keep_best import KeepBest
        p = parse_pipeline("slice,map,fewer,best")
        Pipeline((p.passes[0], p.passes[2], KeepBest()), labels=("slice", "fewer", "best")).run(g, c, PlanState(
            assignment=np.zeros(g.num_nodes, np.int64)))


def test_a_second_entry_has_figures_of_its_own(caplog):
    """Two ``fewer`` entries: the second's figures are its own, not merged into the first's (the first's
    ``skipped`` stayed, and the second, which ran, was logged as skipped)."""
    import logging

    g, c = found(), Cluster.homogeneous(4)
    with caplog.at_level(logging.INFO, logger="pardnn"):
        st, _ = parse_pipeline("slice,map,seed,fewer{min_devices=100},fewer,best").run(g, c, PlanState())
    assert "skipped" not in st.stats["fewer"] and st.stats["fewer"]["devices"] == 2
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fewer: ")]
    assert lines[0].startswith("fewer: skipped: 4 devices") and lines[1].startswith("fewer: on 2 of 4 devices")


def test_an_error_on_the_half_is_named_once(monkeypatch):
    """A pardnn error (not a PassError) in a pass on the half names that pass once, as the half's: it was
    'bad (in pass 'fewer > refine') (in pass 'fewer')', and once more for each level of ``recursive``."""
    from pardnn.errors import InputError, OutOfMemory
    from pardnn.passes.refine import Refine

    g = found()
    for exc, kind in ((InputError("bad"), InputError), (MemoryError(), OutOfMemory)):
        def refine(self, g, cluster, state, exc=exc):
            if cluster.num_devices == 2:
                raise exc
            return state
        monkeypatch.setattr(Refine, "__call__", refine)
        for spec, k, named in (("fewer", 4, "fewer > refine"), ("fewer{recursive=true}", 8, "fewer > fewer > refine")):
            with pytest.raises(kind) as info:
                parse_pipeline(f"slice,map,seed,refine,{spec},best").run(g, Cluster.homogeneous(k), PlanState())
            assert str(info.value).count("in pass") == 1 and f"in pass '{named}'" in str(info.value), info.value
