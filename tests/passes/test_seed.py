"""`pardnn.passes.seed`, its list schedulers (`pardnn.passes._listsched`) and its METIS start: valid plans,
link reservations as the simulator makes them, and a seeded plan never worse than any start."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardnn.baselines import PLACERS, metis
from pardnn.cluster import Cluster, Device
from pardnn.machine import rule_violations, simulate, single_device_peak
from pardnn.passes import _cuts, _listsched
from pardnn.passes.keep_best import plan_key
from pardnn.passes.seed import Seed
from pardnn.pipeline import PlanState, parse_pipeline

from ..helpers import tiny
from .common import random_cases

SCHEDULERS = [("heft", False), ("etf", False), ("cpop", False), ("heft", True), ("etf", True), ("cpop", True)]


def legal_start(g, c, seed: int) -> np.ndarray:
    """A random device per unit, pins honoured."""
    rng = np.random.default_rng(seed)
    udev = rng.integers(0, c.num_devices, g.num_units)
    pinned = g.unit_pin >= 0
    udev[pinned] = g.unit_pin[pinned]
    return udev[g.unit]


def chains(n: int, length: int, t: float = 10.0, nbytes: int = 100):
    """``n`` independent chains of ``length`` ops of ``t`` us."""
    nodes = [(f"c{i}_{j}", t, nbytes) for i in range(n) for j in range(length)]
    edges = [(f"c{i}_{j}", f"c{i}_{j + 1}") for i in range(n) for j in range(length - 1)]
    return tiny(nodes, edges)


def pinned_fan(n: int, nbytes: int):
    """``n`` producers pinned to device 0 (one tensor each) feeding one 20 us consumer each."""
    nodes = ([("src", 1, 0, {"pinned": 0})] + [(f"p{i}", 1, nbytes, {"pinned": 0}) for i in range(n)]
             + [(f"c{i}", 20) for i in range(n)])
    edges = [("src", f"p{i}") for i in range(n)] + [(f"p{i}", f"c{i}") for i in range(n)]
    return tiny(nodes, edges)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases(), st.sampled_from([None, 0.3, 0.7]))
def test_list_schedules_are_valid_and_deterministic(case, scale):
    g, c = case
    if scale is not None:
        c = c.with_memory(int(scale * single_device_peak(g)) + 1)
    for mode, memory in SCHEDULERS:
        dev, start, finish = _listsched.schedule(g, c, mode, memory=memory)
        assert dev.shape == (g.num_nodes,) and dev.min() >= 0 and dev.max() < c.num_devices
        assert rule_violations(g, dev) == []
        assert np.all(finish >= start)
        again, _, _ = _listsched.schedule(g, c, mode, memory=memory)
        assert np.array_equal(dev, again)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases(), st.integers(0, 2**31 - 1), st.sampled_from([None, 0.5]))
def test_seed_keeps_the_best_start(case, seed, scale):
    g, c = case
    if scale is not None:
        c = c.with_memory(int(scale * single_device_peak(g)) + 1)
    start = legal_start(g, c, seed)
    out = Seed()(g, c, PlanState(assignment=start))
    assert rule_violations(g, out.assignment) == []
    s = simulate(g, c, out.assignment)
    assert out.makespan_us == pytest.approx(s.makespan_us)
    figures = out.stats["seed"]["starts"]
    assert set(figures) >= {"incoming", "heft", "etf", "cpop", "metis"}
    # the METIS start is the metis baseline's plan (m-metis's under memory limits)
    for label in ("metis",) if scale is None else ("metis", "m-metis"):
        base = simulate(g, c, PLACERS[label](g, c).assignment)
        assert figures[label]["makespan_us"] == pytest.approx(base.makespan_us)
    # the chosen plan is the best of the starts it chooses among (not of those recorded for the best pass only)
    chosen_among = [f for f in figures.values() if not f.get("recorded_only")]
    if scale is None:
        assert all(s.makespan_us <= f["makespan_us"] + 1e-9 for f in chosen_among)
    else:   # feasible first, then the shortest
        assert {"m-heft", "m-metis"} <= set(figures)
        assert s.feasible or not any(f["feasible"] for f in chosen_among)
        mine = (not s.feasible, float(s.overflow().sum()), s.makespan_us - 1e-9)
        assert all(mine <= (not f["feasible"], f["overflow_bytes"], f["makespan_us"]) for f in chosen_among)
    if out.stats["seed"]["chosen"] != "incoming":
        assert any(np.array_equal(a, start) for a in out.alternatives)
    # the same state on one thread and on several (the starts, then their simulations, computed at once)
    for threads in (1, 3):
        again = Seed(threads=threads)(g, c, PlanState(assignment=start))
        assert np.array_equal(out.assignment, again.assignment)
        assert len(out.alternatives) == len(again.alternatives) <= Seed().max_alternatives
        assert all(np.array_equal(a, b) for a, b in zip(out.alternatives, again.alternatives))
        assert [label for label, _ in out.starts] == [label for label, _ in again.starts]
        assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(out.starts, again.starts))
        strip = lambda f: {k: {x: y for x, y in v.items() if x != "seconds"} for k, v in f.items()}  # noqa: E731
        assert strip(again.stats["seed"]["starts"]) == strip(figures)
        assert list(again.stats["seed"]["starts"]) == list(figures)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases(), st.sampled_from([None, 0.5]), st.booleans())
def test_the_metis_starts_are_metis_own_partition_and_the_best_of_its_variants(case, scale, memory):
    g, c = case
    bounded = scale is not None
    if bounded:
        c = c.with_memory(int(scale * single_device_peak(g)) + 1)
    base = PLACERS["m-metis" if memory else "metis"](g, c).assignment
    runs = metis.variants(8)
    assert runs[0] == (0, None) and len(set(runs)) == 8
    plans = metis.assignments(g, c, memory=memory, runs=runs)
    assert np.array_equal(plans[0], base)
    keys = [plan_key(simulate(g, c, p, memory=bounded), bounded) for p in plans]
    first = min(range(8), key=lambda i: (keys[i], i))
    own, best, which, sims = Seed()._metis(g, c, memory, bounded, 8)
    assert np.array_equal(own, base) and which == first and np.array_equal(best, plans[first])
    # the schedules of the two, handed on so that the pass does not simulate them again
    assert set(sims) == {0, first}
    for j, s in sims.items():
        assert np.array_equal(s.device, plans[j]) and plan_key(s, bounded) == keys[j]
    assert Seed()._metis(g, c, memory, bounded, 1)[2:] == (0, {})
    # the pass: METIS's own partition, then the best variant, recorded with its index
    label = "m-metis" if memory else "metis"
    stats = Seed(memory=memory)(g, c, PlanState(assignment=base)).stats["seed"]["starts"]
    labels = [k for k in stats if "metis" in k]
    assert labels == [label, f"{label}-var"]
    assert stats[f"{label}-var"]["metis_variant"] == first
    assert stats[f"{label}-var"]["makespan_us"] == pytest.approx(simulate(g, c, plans[first]).makespan_us)
    # no variants above the size limit, nor with metis_variants=1
    for seed in (Seed(memory=memory, metis_variants_max_nodes=g.num_nodes - 1), Seed(memory=memory, metis_variants=1)):
        assert [k for k in seed(g, c, PlanState(assignment=base)).stats["seed"]["starts"] if "metis" in k] == [label]


def test_independent_chains_spread_over_four_devices():
    """8 chains of 5 x 10 us: 400 us on one device, 100 us with two chains per device."""
    g = chains(8, 5)
    c = Cluster.homogeneous(4)
    one = np.zeros(g.num_nodes, dtype=np.int64)
    assert simulate(g, c, one).makespan_us == 400.0
    for mode in ("heft", "etf"):
        dev, _, finish = _listsched.schedule(g, c, mode)
        assert simulate(g, c, dev).makespan_us == pytest.approx(100.0) == finish.max()
    out = Seed()(g, c, PlanState(assignment=one))
    assert out.makespan_us == pytest.approx(100.0)
    assert out.stats["seed"]["chosen"] == "heft"
    assert len(out.alternatives) >= 1 and np.array_equal(out.alternatives[0], one)


def test_predicted_times_are_the_simulators_on_a_fan():
    """a's one tensor feeds six consumers: one transfer (12 + 5 us) per destination device, shared by its
    consumers there."""
    g = tiny([("a", 1, 12000)] + [(f"b{i}", 10) for i in range(6)], [("a", f"b{i}") for i in range(6)])
    c = Cluster.homogeneous(4, latency_us=5.0, bandwidth_bytes_per_us=1000.0)
    for mode in ("heft", "etf"):
        dev, start, finish = _listsched.schedule(g, c, mode)
        s = simulate(g, c, dev)
        assert np.allclose(start, s.start_us) and np.allclose(finish, s.finish_us)
        assert len(s.transfers) == len(set(dev[1:7].tolist()) - {dev[0]})


def test_a_cross_device_control_edge_costs_latency_only():
    """a (device 0) -control-> b (device 1): b starts at 3 + 5 us, and no transfer is made."""
    g = tiny([("a", 3, 10**6, {"pinned": 0}), ("b", 2, 0, {"pinned": 1})], [("a", "b", {"control": True})])
    c = Cluster.homogeneous(2, latency_us=5.0, bandwidth_bytes_per_us=1.0)
    for mode in ("heft", "etf"):
        dev, start, finish = _listsched.schedule(g, c, mode)
        s = simulate(g, c, dev)
        assert start.tolist() == s.start_us.tolist() == [0.0, 8.0] and len(s.transfers) == 0


def test_link_reservation_avoids_an_overloaded_link():
    """12 tensors of 40 kB leave device 0 (45 us each on a 1 GB/s link) for 20 us consumers.

    Priced per edge, every remote device looks equally good, so a contention-blind list scheduler sends
    the tensors round robin and they queue on the links (160 us). Reserving the links shows a transfer
    waiting for the one before it: more consumers stay on device 0 (133 us), and the scheduler's own
    times are the simulator's.
    """
    g = pinned_fan(12, 40000)
    c = Cluster.homogeneous(4, latency_us=5.0, bandwidth_bytes_per_us=1000.0)
    for mode in ("heft", "etf"):
        dev, start, finish = _listsched.schedule(g, c, mode)
        s = simulate(g, c, dev)
        assert np.allclose(finish, s.finish_us)
        blind = simulate(g, c, PLACERS[mode](g, c).assignment)
        assert s.makespan_us == pytest.approx(133.0) and blind.makespan_us == pytest.approx(160.0)
        free = simulate(g, c, _listsched.schedule(g, c, mode, contention=False)[0])
        assert free.makespan_us == pytest.approx(160.0)      # without contention the kernel is as blind


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases(), st.integers(0, 2**31 - 1))
def test_the_compiled_sct_makes_the_sct_baselines_plan(case, draw):
    """`_listsched.sct_schedule_both` is SCT's favourite-aware ETF compiled: given the same favourite children
    (the LP's, and a random matching that wakes devices more often), its plain plan is the plan of
    `pardnn.baselines.etf.schedule` with those favourites, so the ``sct`` start is the ``sct`` baseline."""
    from pardnn.baselines import etf, sct

    g, c = case
    src, dst, _, _ = sct.lp_edges(g, c)
    order = np.random.default_rng(draw).permutation(src.size)
    for fav in (sct.favourite_children(g, c),
                sct.match_favourites(src, dst, order, np.full(g.num_nodes, -1, dtype=np.int64))):
        plain, aware = _listsched.sct_schedule_both(g, c, fav)
        assert np.array_equal(plain, etf.schedule(g, c, memory=False, favourite=fav.tolist()))
        assert plain is aware       # no memory limit: one run
    if g.num_nodes:
        tight = c.with_memory(int(0.5 * single_device_peak(g)) + 1)
        plain, aware = _listsched.sct_schedule_both(g, tight, fav)
        assert np.array_equal(plain, etf.schedule(g, tight, memory=False, favourite=fav.tolist()))
        assert rule_violations(g, aware) == []


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases())
def test_without_contention_the_kernel_makes_the_python_baselines_plans(case):
    """``contention=False`` prices each transfer as if it had its link to itself, as the Python baselines
    price them: on these small graphs the compiled HEFT, ETF and CPOP then make the ``heft``, ``etf`` and
    ``cpop`` baselines' plans (the seed pass's ``-nc`` starts), and with ``contention="exact"`` (the ``-x``
    starts) always. Memory-aware plans may differ: the kernel's memory bookkeeping is a simplified
    `MemoryTracker` (`_listsched`'s docstring)."""
    g, c = case
    for mode in ("heft", "etf", "cpop"):
        base = PLACERS[mode](g, c).assignment
        for contention in (False, "exact"):
            assert np.array_equal(_listsched.schedule(g, c, mode, contention=contention)[0], base), mode


def _layered(rng, n: int, width: int):
    """A random layered DAG of ``n`` ops, each output read by up to three ops of later layers, every edge
    carrying its own byte count (edges of one output may carry different amounts, as in profiled graphs)."""
    from pardnn.ir import GraphBuilder

    b = GraphBuilder("layered")
    for v in range(n):
        b.add_node(f"n{v}", "Op", time_us=float(rng.integers(1, 50)), output_bytes=int(rng.integers(1, 10**6)))
    for v in range(width, n):
        layer = v - v % width       # the first op of v's layer: v reads ops of the four layers before
        for u in set(rng.integers(max(0, layer - 4 * width), layer, 3).tolist()):
            b.add_edge(f"n{u}", f"n{v}", bytes=int(rng.choice([0, 1000, 10**5, 10**6])))
    return b.build()


@pytest.mark.parametrize("n, width, k, latency, bandwidth, with_sct", [
    (300, 6, 2, 20.0, 5e3, True), (3000, 40, 4, 20.0, 5e3, False), (4000, 2, 2, 100.0, 1e4, True)])
def test_the_exact_pricing_makes_the_baselines_plans_on_larger_graphs(n, width, k, latency, bandwidth, with_sct):
    """``contention="exact"`` on graphs the property test above does not reach: an output read by several ops
    over edges of different sizes (each edge priced alone, not one transfer per output and device), and
    thousands of ops; on the last a device keeps more idle gaps than `_listsched.MAX_GAPS`. The plain HEFT,
    ETF, CPOP and SCT plans are the baselines' (the ``-x`` starts); without it some are not. (SCT's LP takes
    about 47 s on the wide graph, so SCT is checked on the other two.)"""
    from pardnn.baselines import sct

    g = _layered(np.random.default_rng(k), n, width)
    c = Cluster.homogeneous(k, latency_us=latency, bandwidth_bytes_per_us=bandwidth)
    differ = 0
    for mode in ("heft", "etf", "cpop"):
        base = PLACERS[mode](g, c).assignment
        assert np.array_equal(_listsched.schedule(g, c, mode, contention="exact")[0], base), mode
        differ += not np.array_equal(_listsched.schedule(g, c, mode, contention=False)[0], base)
    if not with_sct:
        assert differ > 0
        # the seed pass records them as starts for the ``best`` pass
        out = Seed(schedulers="heft+etf+cpop")(g, c, PlanState(assignment=np.zeros(g.num_nodes, dtype=np.int64)))
        figures, plans = out.stats["seed"]["starts"], dict(out.starts)
        for mode in ("heft", "etf", "cpop"):
            label = figures[f"{mode}-x"].get("same_as", f"{mode}-x")
            assert np.array_equal(plans[label], PLACERS[mode](g, c).assignment), mode
            assert (label == f"{mode}-x") == figures[label].get("recorded_only", False)
        return
    fav = sct.favourite_children(g, c)
    ours = _listsched.schedule(g, c, "etf", contention="exact", favourite=fav)[0]
    assert np.array_equal(ours, PLACERS["sct"](g, c).assignment)
    assert np.array_equal(_listsched.sct_schedule_both(g, c, fav, contention="exact")[0], ours)
    assert differ > 0 or n == 300


def test_speeds_units_and_pins():
    """A faster device takes the longer work; a colocation group stays whole; a pinned unit stays put.

    HEFT puts everything on the fast device (31.25 us); ETF, by earliest start, runs c on the slow one (40 us).
    """
    g = tiny([("a", 40, 10, {"colocation": "g"}), ("b", 40, 10, {"colocation": "g"}), ("c", 40, 10),
              ("d", 5, 10, {"pinned": 1})], [("a", "b")])
    c = Cluster((Device("/device:GPU:0", speed=1.0), Device("/device:GPU:1", speed=4.0)), 0.0, 1e12)
    for mode in ("heft", "etf"):
        dev, start, finish = _listsched.schedule(g, c, mode)
        assert dev[0] == dev[1] == 1 and dev[3] == 1      # the group goes where it runs 4x faster
        assert rule_violations(g, dev) == []
        assert finish.max() == simulate(g, c, dev).makespan_us == {"heft": 31.25, "etf": 40.0}[mode]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases(), st.sampled_from([0.2, 0.5, 1.0, 3.0]))
def test_schedule_both_gives_each_plan_as_its_own_run_would(case, scale):
    """`schedule_both` runs the memory-aware schedule and reuses it as the plain one when memory never kept an
    op off a device: both plans must be what `schedule` gives with memory off and on, however tight."""
    g, c = case
    c = c.with_memory(int(scale * single_device_peak(g)) + 1)
    for mode in ("heft", "etf", "cpop"):
        plain, aware = _listsched.schedule_both(g, c, mode)
        assert np.array_equal(plain, _listsched.schedule(g, c, mode, memory=False)[0])
        assert np.array_equal(aware, _listsched.schedule(g, c, mode, memory=True)[0])


def test_schedule_both_runs_once_when_memory_never_binds(monkeypatch):
    """With memory to spare the memory-aware run is the plain plan and no second run is made; once memory keeps
    an op off a device, the plain plan comes from a run of its own."""
    g = tiny([("a", 10, 0, {"persistent_bytes": 100}), ("b", 1, 0, {"persistent_bytes": 100}), ("c", 10)],
             [("b", "c")])
    g3 = tiny([(x, 10, 0, {"persistent_bytes": 100}) for x in "abc"], [])
    calls = []
    real = _listsched.list_schedule
    monkeypatch.setattr(_listsched, "list_schedule", lambda *a: calls.append(a[-4]) or real(*a))
    for mode in ("heft", "etf"):
        calls.clear()
        roomy = Cluster.homogeneous(2, memory_bytes=10_000, latency_us=0.0, bandwidth_bytes_per_us=1e12)
        plain, aware = _listsched.schedule_both(g, roomy, mode)
        assert calls == [True] and plain is aware
        calls.clear()
        # three 100-byte weights on two devices of 150 bytes: one of them finds no room anywhere
        full = Cluster.homogeneous(2, memory_bytes=150, latency_us=0.0, bandwidth_bytes_per_us=1e12)
        plain, aware = _listsched.schedule_both(g3, full, mode)
        assert calls == [True, False]


def test_memory_aware_schedule_moves_off_a_full_device():
    """Two independent 100-byte-weight ops on devices of 150 bytes: without memory both would pick device 0
    (no link cost difference and ETF's first device); with memory they split."""
    g = tiny([("a", 10, 0, {"persistent_bytes": 100}), ("b", 1, 0, {"persistent_bytes": 100}), ("c", 10)],
             [("b", "c")])
    c = Cluster.homogeneous(2, memory_bytes=150, latency_us=0.0, bandwidth_bytes_per_us=1e12)
    for mode in ("heft", "etf"):
        dev, _, _ = _listsched.schedule(g, c, mode, memory=True)
        assert dev[0] != dev[1]
        assert simulate(g, c, dev).feasible


def test_seed_options_and_registry():
    p = parse_pipeline("slice,map,seed{schedulers=etf,memory=false,keep_within=0.5},refine")
    seed = p.passes[2]
    assert isinstance(seed, Seed) and seed.schedulers == "etf" and seed.memory is False
    g = chains(4, 3)
    c = Cluster.homogeneous(2)
    zero = PlanState(assignment=np.zeros(g.num_nodes, dtype=np.int64))
    out = seed(g, c, zero)
    assert set(out.stats["seed"]["starts"]) == {"incoming", "etf", "etf-nc", "etf-x"}
    for contention, labels in ((True, {"etf"}), (False, {"etf-nc"})):
        out = replace(seed, contention=contention)(g, c, zero)
        assert set(out.stats["seed"]["starts"]) == {"incoming", "etf-x"} | labels
        out = replace(seed, contention=contention, exact_max_nodes=g.num_nodes - 1)(g, c, zero)
        assert set(out.stats["seed"]["starts"]) == {"incoming"} | labels
    assert set(Seed(schedulers="metis+sct")(g, c, zero).stats["seed"]["starts"]) == \
        {"incoming", "metis", "metis-var", "sct", "sct-x"}
    # a scheduler named twice runs once, also above the variants' size limit
    assert list(Seed(schedulers="metis+heft+metis")(g, c, zero).stats["seed"]["starts"]) == \
        ["incoming", "metis", "metis-var", "heft", "heft-nc", "heft-x"]
    out = Seed(schedulers="metis+metis", metis_variants_max_nodes=g.num_nodes - 1)(g, c, zero)
    assert list(out.stats["seed"]["starts"]) == ["incoming", "metis"]
    assert np.array_equal(dict(out.starts).get("metis", zero.assignment), PLACERS["metis"](g, c).assignment)
    with pytest.raises(ValueError, match="unknown scheduler"):
        Seed(schedulers="sjf")(g, c, zero)
    with pytest.raises(ValueError, match="contention must be"):
        Seed(contention="sometimes")(g, c, zero)
    state, _ = p.run(g, c)
    assert rule_violations(g, state.assignment) == []
    one = Cluster.homogeneous(1)
    st1 = Seed()(g, one, PlanState(assignment=np.zeros(g.num_nodes, dtype=np.int64)))
    assert st1.stats["seed"]["skipped"]


def test_the_sct_start_is_the_sct_baselines_plan_and_stays_out_of_large_graphs():
    """``sct`` seeds with Baechi's SCT (and ``m-sct`` under memory limits): the plain plan is the one the
    baseline `pardnn.baselines.sct` places, the memory-aware one `_listsched.sct_schedule_both`'s; above
    ``sct_max_nodes`` ops it is left out (its LP grows too slow)."""
    from pardnn.baselines import sct

    g = chains(4, 3)
    start = PlanState(assignment=np.zeros(g.num_nodes, dtype=np.int64))
    c = Cluster.homogeneous(2)
    out = Seed(schedulers="sct")(g, c, start)
    assert set(out.stats["seed"]["starts"]) == {"incoming", "sct", "sct-x"}
    assert np.array_equal(dict(out.starts)["sct"], sct.place(g, c).assignment)
    assert out.stats["seed"]["starts"]["sct-x"]["same_as"] == "sct"
    tight = c.with_memory(int(single_device_peak(g) * 0.7))
    out = Seed(schedulers="sct")(g, tight, start)
    figures = out.stats["seed"]["starts"]
    label = figures["m-sct"].get("same_as", "m-sct")     # a plan equal to an earlier one is recorded once
    aware = _listsched.sct_schedule_both(g, tight, sct.favourite_children(g, tight))[1]
    assert np.array_equal(dict(out.starts)[label], aware)
    out = Seed(schedulers="heft+sct", sct_max_nodes=g.num_nodes - 1)(g, c, start)
    assert set(out.stats["seed"]["starts"]) == {"incoming", "heft", "heft-nc", "heft-x"}
    out = Seed(schedulers="sct", sct_max_nodes=g.num_nodes - 1)(g, c, start)    # nothing else named: HEFT
    assert set(out.stats["seed"]["starts"]) == {"incoming", "heft", "heft-nc", "heft-x"}
    out = Seed(schedulers="etf", etf_max_nodes=g.num_nodes - 1)(g, c, start)    # the same for ETF, and
    assert set(out.stats["seed"]["starts"]) == {"incoming", "heft", "heft-x"}     # no -nc twin on large graphs
    out = Seed(schedulers="etf", etf_max_nodes=g.num_nodes - 1, exact_max_nodes=g.num_nodes - 1)(g, c, start)
    assert set(out.stats["seed"]["starts"]) == {"incoming", "heft"}


def test_cpop_runs_the_critical_path_on_the_fastest_device_in_priority_order():
    """A long chain (the critical path) and short side ops: CPOP puts the whole chain on the fast device, even its
    first op, which HEFT's earliest-finish rule might send elsewhere; the order is topological and takes the
    ready op of the larger upward + downward rank first."""
    nodes = [(f"a{i}", 50, 10) for i in range(6)] + [(f"s{i}", 5, 10) for i in range(6)]
    edges = [(f"a{i}", f"a{i + 1}") for i in range(5)] + [(f"a{i}", f"s{i}") for i in range(6)]
    g = tiny(nodes, edges)
    c = Cluster((Device("/device:GPU:0", speed=1.0), Device("/device:GPU:1", speed=2.0)), 25.0, 12000.0)
    a = _listsched.prepare(g)
    rank = _listsched.ranks(g, c, a)
    order, prefer = _listsched.cpop_plan(g, c, a, rank)
    chain = [g.id(f"a{i}") for i in range(6)] + [g.id("s5")]       # the critical path ends in the last side op
    assert sorted(order.tolist()) == list(range(g.num_nodes))
    pos = np.empty(g.num_nodes, dtype=np.int64)
    pos[order] = np.arange(g.num_nodes)
    assert all(pos[s] < pos[d] for s, d in zip(g.edge_src, g.edge_dst))        # topological
    assert pos[g.id("a1")] < pos[g.id("s0")]                                  # the critical path first
    assert set(np.flatnonzero(prefer >= 0).tolist()) == set(chain) and set(prefer[chain].tolist()) == {1}
    dev, _, finish = _listsched.schedule(g, c, "cpop")
    assert set(dev[chain].tolist()) == {1} and rule_violations(g, dev) == []
    assert finish.max() <= simulate(g, c, dev).makespan_us + 1e-6


def test_a_balanced_cut_of_two_towers_is_a_start():
    """Two towers of 20 ops exchange 1 MB per op inside a tower and 1 byte between them at the end.

    On a 1 GB/s link with 50 us latency, every op-level split costs far more than it gains; one tower per
    device nearly halves the step. The METIS start is exactly that cut, whatever the list schedulers find.
    """
    nodes = [(f"t{j}_{i}", 10, 10**6 if i < 19 else 1) for j in range(2) for i in range(20)] + [("end", 1, 1)]
    edges = [(f"t{j}_{i}", f"t{j}_{i + 1}") for j in range(2) for i in range(19)] + \
        [(f"t{j}_19", "end") for j in range(2)]
    g = tiny(nodes, edges)
    c = Cluster.homogeneous(2, latency_us=50.0, bandwidth_bytes_per_us=1000.0)
    one = np.zeros(g.num_nodes, dtype=np.int64)
    out = Seed(schedulers="metis")(g, c, PlanState(assignment=one))
    dev = out.assignment
    assert out.stats["seed"]["chosen"] == "metis"
    assert len(set(dev[:20].tolist())) == 1 and len(set(dev[20:40].tolist())) == 1 and dev[0] != dev[20]
    # a tower (200 us), one 1-byte transfer (50 us latency + 0.001 us), the end op (1 us): against 401 us
    assert simulate(g, c, one).makespan_us == 401.0
    assert out.makespan_us == pytest.approx(200 + 50 + 0.001 + 1)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases(), st.sampled_from([0.3, 0.6, 3.0]))
def test_each_start_is_its_own_schedulers_plan_in_the_documented_order(case, scale):
    """Under memory limits every scheduler runs plain and memory-aware: the start named ``heft`` is the plain
    HEFT plan and ``m-heft`` the memory-aware one (likewise ETF and CPOP), ``heft-nc`` and ``m-heft-nc`` the
    same without link contention, and the starts' figures come in the order the pass documents: the incoming
    plan, then ``schedulers`` in order (``metis`` followed by ``metis-var``), then the list schedulers again
    without contention, then the ``m-`` variants of all of those (the order breaks ties between equal plans)."""
    g, c = case
    c = c.with_memory(int(scale * single_device_peak(g)) + 1)
    seed = Seed()
    start = legal_start(g, c, 0)
    out = seed(g, c, PlanState(assignment=start))
    figures, plans = out.stats["seed"]["starts"], dict(out.starts)

    def plan(label):        # a start equal to an earlier one is filed as ``same_as`` it
        return start if label == "incoming" else plans[label] if label in plans else plan(figures[label]["same_as"])

    for mode in ("heft", "etf", "cpop"):
        for tag, contention in (("", True), ("-nc", False)):
            assert np.array_equal(plan(mode + tag), _listsched.schedule(g, c, mode, contention=contention)[0])
            assert np.array_equal(plan(f"m-{mode}{tag}"),
                                  _listsched.schedule(g, c, mode, memory=True, contention=contention)[0])
    labels = ["incoming"] + [label for label, *_ in seed._starts(True, False, g.num_nodes <= seed.sct_max_nodes,
                                                                 True, cuts=False)]
    assert labels == ["incoming", "heft", "etf", "cpop", "metis", "metis-var", "sct", "heft-nc", "etf-nc",
                      "cpop-nc", "m-heft", "m-etf", "m-cpop", "m-metis", "m-metis-var", "m-sct", "m-heft-nc",
                      "m-etf-nc", "m-cpop-nc"]
    labels = ["incoming"] + [label for label, *_ in seed._starts(True, False, g.num_nodes <= seed.sct_max_nodes,
                                                                 True, True)]
    assert labels[-5:] == ["heft-x", "etf-x", "cpop-x", "sct-x", "cut"]
    assert list(out.stats["seed"]["starts"]) == labels
    # the ``-x`` starts are the baselines' plain plans, recorded for the ``best`` pass and never chosen here;
    # so is the ``cut`` start, the best of `_cuts.cut_plans` (the incoming plan when there is none)
    for mode in ("heft", "etf", "cpop", "sct"):
        assert np.array_equal(plan(f"{mode}-x"), PLACERS[mode](g, c).assignment), mode
        assert out.stats["seed"]["chosen"] != f"{mode}-x"
    cuts = _cuts.cut_plans(g, c) or [start]
    assert any(np.array_equal(plan("cut"), p) for p in cuts) and out.stats["seed"]["chosen"] != "cut"
    best = min(plan_key(simulate(g, c, p), True) for p in cuts)
    assert plan_key(simulate(g, c, plan("cut")), True) == best


def test_counts_that_would_run_without_end_are_bounded():
    """``metis_variants=1e15`` grew to 18 GB in a minute (the variants' list); ``cut_choices=1e15`` ran a
    loop of 1e15 turns, all past the first few repeating the last plan."""
    with pytest.raises(ValueError, match="metis_variants must be at most 256"):
        Seed(metis_variants=257)
    assert Seed(metis_variants=256).metis_variants == 256
    g = tiny([(f"n{i}", 1.0 + i % 3, 100 * (1 + i % 7)) for i in range(40)],
             [(f"n{i}", f"n{i + 1}") for i in range(39)] + [(f"n{i}", f"n{i + 2}") for i in range(0, 38, 5)])
    c = Cluster.homogeneous(3)
    plans = _cuts.cut_plans(g, c, choices=10**15)
    assert plans and all(np.array_equal(a, b) for a, b in zip(plans, _cuts.cut_plans(g, c, choices=10**4)))
    assert len(plans) == len(_cuts.cut_plans(g, c, choices=10**4))


def test_sct_lp_iterations_must_be_positive_or_none():
    assert Seed(sct_lp_iterations=None).sct_lp_iterations is None
    for bad in (0, -1.0, True, "x"):
        with pytest.raises(ValueError, match="sct_lp_iterations"):
            Seed(sct_lp_iterations=bad)


def test_an_sct_lp_given_up_is_said_and_its_favourites_matched_greedily(monkeypatch):
    """With every LP given up at once (a limit of one iteration), the ``sct`` starts are SCT's schedules of the
    greedy favourites, and the figures say so; without a limit they are the baselines' and say nothing."""
    from pardnn.baselines import sct

    g = _layered(np.random.default_rng(1), 200, 8)
    c = Cluster.homogeneous(2, latency_us=20.0, bandwidth_bytes_per_us=5e3)
    start = PlanState(assignment=np.zeros(g.num_nodes, dtype=np.int64))
    plain = Seed(schedulers="sct", sct_lp_iterations=None)(g, c, start)
    figures, plans = plain.stats["seed"]["starts"], dict(plain.starts)
    assert not any("lp" in f for f in figures.values())
    assert np.array_equal(plans[figures["sct-x"].get("same_as", "sct-x")], PLACERS["sct"](g, c).assignment)
    monkeypatch.setattr(sct, "MIN_ITERATION_LIMIT", 1)
    out = Seed(schedulers="sct", sct_lp_iterations=1e-9)(g, c, start)
    figures, plans = out.stats["seed"]["starts"], dict(out.starts)
    fv = sct.favourites(g, c, iterations_per_variable=1e-9)
    assert fv.capped == 1
    want = _listsched.sct_schedule_both(g, c, fv.child)[0]
    assert np.array_equal(plans[figures["sct"].get("same_as", "sct")], want)
    assert "iteration limit" in figures["sct"]["lp"] and "iteration limit" in figures["sct-x"]["lp"]
    assert not np.array_equal(want, _listsched.sct_schedule_both(g, c, sct.favourite_children(g, c))[0])


def test_the_default_limit_gives_up_the_lp_of_a_random_layered_graph():
    """The graph that made the limit: 3000 ops, each reading three ops of the four layers before. HiGHS needs
    167k iterations (about a minute) for its LP; at the default limit (one per variable, 11.8k) the seed
    pass gives it up and says so. The DL graphs of the tuning suite need at most 0.57 per variable."""
    g = _layered(np.random.default_rng(4), 3000, 40)
    c = Cluster.homogeneous(4, latency_us=20.0, bandwidth_bytes_per_us=5e3)
    out = Seed(schedulers="sct")(g, c, PlanState(assignment=np.zeros(g.num_nodes, dtype=np.int64)))
    assert out.stats["seed"]["starts"]["sct"]["lp"].startswith("1 of 1 LPs reached the iteration limit")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases())
def test_cut_plans_are_consecutive_segments_with_units_whole_and_pins_kept(case):
    """Each `_cuts.cut_plans` plan keeps colocation units whole and pins where they are, and walked in the
    order of the units' first ops, the unpinned ops' devices never go down (segment j on device j); the
    plans are distinct and the same on every call."""
    g, c = case
    plans = _cuts.cut_plans(g, c)
    assert len(plans) <= 4
    assert all(not any(np.array_equal(a, b) for b in plans[:i]) for i, a in enumerate(plans))
    again = _cuts.cut_plans(g, c)
    assert len(again) == len(plans) and all(np.array_equal(a, b) for a, b in zip(plans, again))
    from pardnn.analysis import topological_order
    pos = np.empty(g.num_nodes, dtype=np.int64)
    pos[topological_order(g)] = np.arange(g.num_nodes)
    first = np.full(g.num_units, g.num_nodes)
    np.minimum.at(first, g.unit, pos)
    walk = np.lexsort((pos, first[g.unit]))
    free = walk[g.unit_pin[g.unit[walk]] < 0]
    for dev in plans:
        assert rule_violations(g, dev) == []
        assert (np.diff(dev[free]) >= 0).all()


def test_a_chain_is_cut_once_where_the_fewest_bytes_cross():
    """ResNet18's inference step (torchvision, exported by torch 2.14.1 with ``dynamo=True``, imported with
    ``--batch-size 8``; found by a new user's trial) on 2 devices of 64 MiB: refinement from the other starts
    ends at 634.3 us in three stages; the ``cut`` start is one cut, 608.0 us, and the result takes it."""
    from pardnn import partitioner
    from pardnn.ir import load_graph
    from pardnn.partitioner import PardnnOptions

    from ..conftest import REPO

    g = load_graph(REPO / "tests" / "data" / "resnet18_inference_b8.json.gz")
    c = Cluster.homogeneous(2, 64 * 2**20)
    plan, state, _ = partitioner.run(g, c)
    s = simulate(g, c, plan)
    assert s.feasible and s.makespan_us == pytest.approx(608.0, abs=0.05)
    assert state.stats["best"]["kept"] == "cut" and len(s.transfers) == 1
    spec = "slice,map,seed{schedulers=heft+etf+cpop+metis+sct},refine,memory,refine-mem,best"
    plan, state, _ = partitioner.run(g, c, PardnnOptions(pipeline=spec))
    without = simulate(g, c, plan)
    assert without.feasible and without.makespan_us > s.makespan_us * 1.04


def test_a_uniform_chain_is_cut_in_the_middle():
    """Every cut of a uniform chain moves the same bytes: the ties go to the balanced place (the review found
    them at the window's edge, where 100 ops of 1 MB of weights each overflowed 60 MB devices)."""
    from pardnn.ir import GraphBuilder

    b = GraphBuilder("uniform")
    for i in range(100):
        b.add_node(f"n{i}", time_us=1.0, output_bytes=1000, persistent_bytes=10**6)
    for i in range(99):
        b.add_edge(f"n{i}", f"n{i + 1}")
    g = b.build()
    c = Cluster.homogeneous(2, 60 * 10**6)
    plans = _cuts.cut_plans(g, c)
    assert [int(p.sum()) for p in plans] == [50, 51, 49, 52]
    assert all(simulate(g, c, p).feasible for p in plans)
