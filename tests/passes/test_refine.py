"""`pardnn.passes.refine`: refinement on the critical chain, and its never-worse property."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardnn.cluster import Cluster, Device
from pardnn.errors import PassError
from pardnn.ir import GraphBuilder
from pardnn.machine import EDGE, Evaluator, simulate
from pardnn.partitioner import PardnnOptions, run as run_pardnn
from pardnn.passes.mapping import Map, map_onto
from pardnn.passes.memory import FitMemory, memory_split, potentials
from pardnn.passes.refine import Refine
from pardnn.passes.slicing import Slice
from pardnn.pipeline import Pipeline, PlanState, format_timings

from ..helpers import tiny

from .common import _groups_whole_and_pins_kept, fork, free_links, random_cases  # noqa: F401


def test_critical_chain_follows_the_transfer():
    """
    dev0: a(1) out 1000 B ==> dev1: b(1)      transfer 10 + 1000/100 = 20 us: the chain is one EDGE link
    """
    g = tiny([("a", 1, 1000), ("b", 1)], [("a", "b")])
    c = Cluster.homogeneous(2, latency_us=10.0, bandwidth_bytes_per_us=100.0)
    chain = simulate(g, c, [0, 1], memory=False).critical_chain()
    assert len(chain) == 1
    assert (int(chain.kind[0]), int(chain.src[0]), int(chain.dst[0])) == (EDGE, 0, 1)
    assert chain.delay_us[0] == pytest.approx(20.0)


def test_refine_removes_a_costly_transfer():
    g = tiny([("a", 1, 1000), ("b", 1)], [("a", "b")])
    c = Cluster.homogeneous(2, latency_us=10.0, bandwidth_bytes_per_us=100.0)
    st_ = Refine()(g, c, PlanState(assignment=np.array([0, 1])))
    assert len(set(st_.assignment.tolist())) == 1
    assert st_.makespan_us == 2.0
    assert st_.stats["refine"]["before_us"] == 22.0


def test_refine_moves_an_op_off_a_busy_device():
    """Two independent 10 us ops stuck on one device: one moves to the idle device (20 -> 10 us)."""
    g = tiny([("a", 10), ("b", 10)], [])
    st_ = Refine()(g, free_links(2), PlanState(assignment=np.array([0, 0])))
    assert st_.makespan_us == 10.0 and sorted(st_.assignment.tolist()) == [0, 1]


def test_a_tiny_graph_on_many_devices_tries_one_empty_device_not_each():
    """Moves go to the devices in use and one empty device of each kind (`refine.targets`): two ops stuck on
    one of 1024 alike devices need one move, and the search simulates a few plans, not one per device (it
    tried every device, about K simulations of K x K links each: 35 s for one op at K=1024)."""
    from pardnn.passes.refine import targets

    g = tiny([("a", 10), ("b", 10)], [])
    c = free_links(1024)
    assert targets(c, np.array([5, 5])) == [0, 5]
    mixed = c.with_memory([None] * 512 + [1 << 30] * 512)
    assert targets(mixed, np.array([5, 700])) == [0, 5, 512, 700]
    st_ = Refine()(g, c, PlanState(assignment=np.array([5, 5])))
    assert st_.makespan_us == 10.0 and sorted(st_.assignment.tolist()) == [0, 5]
    assert st_.stats["refine"]["evaluations"] < 20


@pytest.mark.parametrize("fuse", [False, True])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases(), st.integers(0, 2**31 - 1))
def test_refine_never_makes_the_plan_worse(fuse, case, seed):
    """Also with the coarse descent first (``fuse=True``): never worse, groups whole, pins kept."""
    g, c = case
    rng = np.random.default_rng(seed)
    # a legal start: a random device per unit, pins honoured
    udev = rng.integers(0, c.num_devices, int(g.unit.max()) + 1)
    pinned = np.flatnonzero(g.pinned >= 0)
    udev[g.unit[pinned]] = g.pinned[pinned]
    start = udev[g.unit]
    before = simulate(g, c, start, memory=False).makespan_us
    st_ = Refine(max_evals=60, fuse=fuse)(g, c, PlanState(assignment=start))
    after = simulate(g, c, st_.assignment, memory=False).makespan_us
    assert after <= before + 1e-9
    assert st_.makespan_us == pytest.approx(after)
    assert ("coarse_units" in st_.stats["refine"]) == fuse
    _groups_whole_and_pins_kept(g, st_.assignment)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases(), st.sampled_from([0.35, 0.5, 0.7]))
def test_memory_aware_refinement_never_breaks_a_limit(case, scale):
    """Refine(respect_memory=True), kicks included, returns a plan that fits whenever it started from one."""
    from pardnn.machine import single_device_peak

    g, c = case
    cl = c.with_memory(max(1, int(scale * single_device_peak(g))))
    state = FitMemory()(g, cl, Map()(g, cl, Slice()(g, cl, PlanState())))
    if not simulate(g, cl, state.assignment).feasible:
        return
    st_ = Refine(max_evals=120, respect_memory=True)(g, cl, state.replace(alternatives=()))
    assert simulate(g, cl, st_.assignment).feasible


def test_proposals_share_path_segments_instead_of_copying_them():
    """A zig-zag chain across two long paths: every transfer on the critical chain proposes pulling the
    consumer's whole path segment. Proposals must share one array per segment (O(V + E) memory), not copy
    the segment per chain link (O(V^2): 23.8 GB on a 200k-op graph at K=2)."""
    import tracemalloc

    from pardnn.machine import CostModel
    from pardnn.passes.refine import _Mover, propose
    from pardnn.pipeline import Paths

    L = 1500
    nodes = [(f"a{i}", 1, 4000) for i in range(L)] + [(f"b{i}", 1, 4000) for i in range(L)]
    edges = [(f"a{i}", f"a{i + 1}") for i in range(L - 1)] + [(f"b{i}", f"b{i + 1}") for i in range(L - 1)]
    edges += [(f"a{i}", f"b{i + 1}") for i in range(L - 1)] + [(f"b{i}", f"a{i + 1}") for i in range(L - 1)]
    g = tiny(nodes, edges)
    c = Cluster.homogeneous(2, latency_us=10.0, bandwidth_bytes_per_us=100.0)
    dev = np.array([0] * L + [1] * L)
    paths = Paths(path=dev.astype(np.int64), num_primary=2, num_paths=2)
    s = simulate(g, c, dev, memory=False)
    chain = s.critical_chain()
    assert len(chain) > L // 2             # the chain zig-zags through most transfers
    cm = CostModel.build(g, c)
    mover = _Mover(g, paths)
    tracemalloc.start()
    moves = propose(g, c, cm, s, chain, mover, top_links=g.num_nodes, every_target=True)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    pulls = [m for m in moves if m.label == "pull path"]
    assert pulls and all(len(m.nodes) == L for m in pulls)
    # one segment copied per link would be > L * L * 28 bytes (63 MB); shared, a few MB at most
    assert peak < 8 * 2**20, peak


def _two_ops_two_weights(*, a_bytes, w_us, w_bytes, capacity, pin_a=False):
    """Ops a and b (10 us each; b holds 500 B) on dev0, w1 and w2 on dev1, two free links: (graph, cluster,
    the start, which fits)."""
    b = GraphBuilder("r")
    b.add_node("a", time_us=10.0, persistent_bytes=a_bytes, pinned=0 if pin_a else None)
    b.add_node("b", time_us=10.0, persistent_bytes=500)
    b.add_node("w1", time_us=w_us, persistent_bytes=w_bytes)
    b.add_node("w2", time_us=w_us, persistent_bytes=w_bytes)
    g = b.build()
    c = free_links(2, memory_bytes=capacity)
    start = PlanState(assignment=np.array([0, 0, 1, 1]))
    assert simulate(g, c, start.assignment).feasible
    return g, c, start


def test_a_move_that_breaks_a_limit_is_repaired_before_it_is_judged():
    """
    dev0: a(10) b(10), each holding 500 B     dev1: w1 w2 (0 us), each holding 400 B     capacity 1000 B

    The step is 20 us. Moving a or b to the idle dev1 halves it but puts 1300 B there, and moving a
    weight alone does not shorten the step: no single move helps. With the repair, step 2's exact
    moves shed dev1's overflow without moving the op back: one weight goes to dev0 (900 B on each).
    """
    g, c, start = _two_ops_two_weights(a_bytes=500, w_us=0.0, w_bytes=400, capacity=1000)
    stuck = Refine(respect_memory=True, repair=False, kicks=False, max_evals=50)(g, c, start)
    assert stuck.makespan_us == 20.0
    fixed = Refine(respect_memory=True, kicks=False, max_evals=50)(g, c, start)
    assert fixed.makespan_us == 10.0
    dev = fixed.assignment
    assert dev[0] != dev[1] and sorted(dev.tolist()) == [0, 0, 1, 1]
    assert simulate(g, c, dev).feasible


def test_the_repair_never_moves_back_what_the_move_moved():
    """
    dev0: a(10 us, 300 B, pinned) b(10 us, 500 B)     dev1: w1 w2 (4.5 us, 200 B each)     capacity 800 B

    The step is 20 us. Moving b to dev1 breaks its limit (900 B), and the cheapest unit per byte to shed
    there is b itself (10 us for 500 B against 4.5 us for 200 B): moving it back would undo the move.
    Frozen, it stays, w1 goes to dev0, and the step is 14.5 us. Each repair takes one simulation of the
    budget.
    """
    g, c, start = _two_ops_two_weights(a_bytes=300, w_us=4.5, w_bytes=200, capacity=800, pin_a=True)
    out = Refine(respect_memory=True, kicks=False, max_evals=50)(g, c, start)
    assert out.makespan_us == 14.5
    assert out.stats["refine"]["repaired"] >= 1
    assert simulate(g, c, out.assignment).feasible
    # the budget holds with repairs: none starts once it is spent (a move's quick check and its simulation
    # count one each and go together, so a search may end one over)
    for budget in range(1, 8):
        st_ = Refine(respect_memory=True, kicks=False, max_evals=budget)(g, c, start)
        assert st_.stats["refine"]["evaluations"] <= budget + 1, budget


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases(), st.sampled_from([0.35, 0.5, 0.7, None]), st.sampled_from([7, 40, 301]),
       st.sampled_from([True, "auto"]))
def test_remembering_what_was_simulated_changes_nothing_but_the_time(case, scale, evals, respect):
    """The memo of quick makespans and of rejected (plan, trial) judgements spares repeated simulations
    but counts them all: the plan and every figure (evaluations, accepted moves, repairs, kicks) are
    those of the search that simulates everything, whatever the budget (small ones end mid-repair)."""
    from pardnn.machine import single_device_peak

    g, c = case
    cl = c if scale is None else c.with_memory(max(1, int(scale * single_device_peak(g))))
    state = FitMemory()(g, cl, Map()(g, cl, Slice()(g, cl, PlanState())))
    runs = [Refine(max_evals=evals, respect_memory=respect, remember=r)(g, cl, state) for r in (True, False)]
    assert np.array_equal(runs[0].assignment, runs[1].assignment)
    assert _figures(runs[0]) == _figures(runs[1])


def _figures(state):
    """The refine pass's figures but ``simulated`` (how many evaluations ran the simulator: the memo's
    whole point is to make that smaller)."""
    return {k: v for k, v in state.stats["refine"].items() if k != "simulated"}


@pytest.mark.parametrize("k,evals", [(2, 1000), (4, 1000), (2, 20), (2, 23), (3, 56), (3, 200)])
def test_remembering_changes_nothing_on_a_sample_under_tight_memory(k, evals):
    """The same on a shipped sample (GNMT, 93 ops) under tight memory, where moves are repaired and
    searches are kicked back to plans they judged before: identical figures, fewer simulations. The
    small budgets run out right after a remembered pair's simulation, where its repair must then be
    left out as it would have been: budgets where a wrong count shows (a sweep of 227 budgets on three
    samples at K = 2-4 found no difference)."""
    from pathlib import Path

    from pardnn.bench import bench_cluster, minimum_need, regime_capacity
    from pardnn.ir import load_graph
    from pardnn.machine import single_device_peak
    from pardnn.pipeline import parse_pipeline

    g = load_graph(Path(__file__).parents[2] / "sample_graphs" / "pipedream_gnmt.json.gz")
    cl = bench_cluster(k, regime_capacity("tight", single_device_peak(g), k, minimum_need(g)))
    state, _ = parse_pipeline("slice,map,memory").run(g, cl, PlanState())
    runs = [Refine(max_evals=evals, respect_memory=True, remember=r)(g, cl, state) for r in (True, False)]
    assert np.array_equal(runs[0].assignment, runs[1].assignment)
    assert _figures(runs[0]) == _figures(runs[1])
    sims = [r.stats["refine"]["simulated"] for r in runs]
    assert sims[0] <= sims[1] <= runs[1].stats["refine"]["evaluations"]
    if evals >= 1000:
        assert runs[0].stats["refine"]["repairs"] > 0 and sims[0] < sims[1]


def _seeded_graph(rng):
    """A random training-like graph and cluster (as `random_cases`, from a numpy generator)."""
    n, k = int(rng.integers(2, 40)), int(rng.integers(2, 5))
    b = GraphBuilder("r")
    for i in range(n):
        b.add_node(f"n{i}", time_us=float(rng.choice([0.0, 1.0, 3.0, 10.0, 40.0])),
                   output_bytes=int(rng.choice([0, 100, 5000, 50000])),
                   persistent_bytes=int(rng.choice([0, 0, 0, 2000])),
                   colocation=([None] * 5 + ["g1", "g2"])[int(rng.integers(0, 7))],
                   pinned=([None] * 8 + [0])[int(rng.integers(0, 9))])
    for j in range(1, n):
        for i in rng.choice(j, size=min(j, int(rng.integers(0, 4))), replace=False).tolist():
            b.add_edge(f"n{i}", f"n{j}", control=bool(rng.random() < 0.25))
    return b.build(), Cluster.homogeneous(k, latency_us=float(rng.choice([0.0, 5.0, 25.0])),
                                          bandwidth_bytes_per_us=float(rng.choice([100.0, 12000.0])))


@pytest.mark.parametrize("cases", [30, pytest.param(60, marks=pytest.mark.slow)])
def test_remembering_changes_nothing_over_a_fixed_sweep_of_graphs_starts_and_budgets(cases):
    """The same comparison over a fixed sweep, with starts that fit and starts that do not, so that under
    ``respect_memory="auto"`` one search checks memory and the next does not (a rejection for memory is
    then no rejection: the memo keys on it), and budgets that end anywhere in a search."""
    from pardnn.machine import single_device_peak
    from pardnn.pipeline import parse_pipeline

    rng = np.random.default_rng(20261126)
    compared = mixed = 0
    for _ in range(cases):
        g, c = _seeded_graph(rng)
        scale = (0.35, 0.5, 0.7, None)[int(rng.integers(0, 4))]
        cl = c if scale is None else c.with_memory(max(1, int(scale * single_device_peak(g))))
        spec = ("slice,map,seed", "slice,map,seed,memory", "slice,map,memory")[int(rng.integers(0, 3))]
        state, _ = parse_pipeline(spec).run(g, cl, PlanState())
        fits = {bool(simulate(g, cl, d, memory=True).feasible) for d in (state.assignment, *state.alternatives)}
        mixed += len(fits) == 2
        for respect in ("auto", True):
            for evals in (7, 40, 400, 1500):
                on, off = (Refine(max_evals=evals, respect_memory=respect, remember=r)(g, cl, state)
                           for r in (True, False))
                assert np.array_equal(on.assignment, off.assignment), (spec, respect, evals)
                assert _figures(on) == _figures(off), (spec, respect, evals)
                compared += 1
    assert compared == 8 * cases and mixed >= cases // 12, mixed     # 2 of the first 30 cases, 5 of 60


@pytest.mark.parametrize("cases", [20, pytest.param(40, marks=pytest.mark.slow)])
def test_leaving_out_a_replayed_search_changes_nothing_but_the_time(cases):
    """When the best start's search ended on its own with its best plan where its first descent ended,
    searching on from that plan with the rest of the budget would replay it (the same descent, the same
    seeded kicks): the pass leaves that search out. Over a fixed sweep of graphs, memory limits (so that
    some starts fit and some do not), efforts and budgets, the plan and its step time are those of the pass
    that runs the replay, the evaluations never more, and the replay is left out in many cases."""
    from pardnn.machine import single_device_peak
    from pardnn.pipeline import parse_pipeline

    rng = np.random.default_rng(20261128)
    compared = skipped = 0
    for case in range(cases):
        g, c = _seeded_graph(rng)
        scale = (0.35, 0.5, 0.7, None)[case % 4]
        cl = c if scale is None else c.with_memory(max(1, int(scale * single_device_peak(g))))
        spec = ("slice,map,seed", "slice,map,seed,memory", "slice,map,memory")[case % 3]
        state, _ = parse_pipeline(spec).run(g, cl, PlanState())
        for respect, evals, effort, stale in (("auto", 60, "default", 30), (True, 600, "default", 30),
                                              ("auto", 3000, "default", 2), (False, 400, "fast", 30),
                                              (True, 2000, "best", 1), (False, 2000, "default", 1)):
            on, off = (Refine(max_evals=evals, respect_memory=respect, effort=effort, stale_kicks=stale,
                              skip_replays=r)(g, cl, state) for r in (True, False))
            assert np.array_equal(on.assignment, off.assignment), (case, respect, evals, effort)
            assert on.makespan_us == off.makespan_us
            used = [x.stats["refine"].get("evaluations", 0) for x in (on, off)]
            assert used[0] <= used[1]
            skipped += used[0] < used[1]
            compared += 1
    assert compared == 6 * cases and skipped >= 3 * cases // 4, skipped   # 17 of 120, 38 of 240


@pytest.mark.parametrize("cases", [20, pytest.param(40, marks=pytest.mark.slow)])
def test_the_plan_is_the_same_on_any_number_of_threads(cases):
    """The starts' searches run on threads at once (each with its own memo; the rejections shared): the
    plan and every figure but ``simulated`` are those of the searches run one after the other, with and
    without memory limits, memos and repairs, at budgets that end anywhere in a search."""
    from pardnn.machine import single_device_peak
    from pardnn.pipeline import parse_pipeline

    rng = np.random.default_rng(20261127)
    several = 0
    for case in range(cases):
        g, c = _seeded_graph(rng)
        scale = (0.35, 0.5, 0.7, None)[case % 4]
        cl = c if scale is None else c.with_memory(max(1, int(scale * single_device_peak(g))))
        state, _ = parse_pipeline(("slice,map,seed", "slice,map,seed,memory")[case % 2]).run(g, cl, PlanState())
        several += len(state.alternatives) > 0
        for respect, evals, remember in (("auto", 40, True), (True, 400, True), ("auto", 1500, False)):
            one, many = (Refine(max_evals=evals, respect_memory=respect, remember=remember, threads=t)(g, cl, state)
                         for t in (1, 3))
            assert np.array_equal(one.assignment, many.assignment), (case, respect, evals)
            assert _figures(one) == _figures(many), (case, respect, evals)
    assert several >= 3 * cases // 5, several    # cases with two or more starts (14 of 20): threads run at once


@pytest.mark.parametrize("k", [2, 3, 4])
def test_the_plan_is_the_same_on_any_number_of_threads_on_a_sample_at_the_default_budget(k):
    """The same through the whole default pipeline on a sample (GNMT, 93 ops) under tight memory, at the
    default budgets: there the first search starts from the schedule the pass already simulated, and the
    searches run long enough that sharing one memo between threads corrupted the process (review)."""
    from pathlib import Path

    from pardnn.bench import bench_cluster, minimum_need, regime_capacity
    from pardnn.ir import load_graph
    from pardnn.machine import single_device_peak
    from pardnn.pipeline import parse_pipeline

    g = load_graph(Path(__file__).parents[2] / "sample_graphs" / "pipedream_gnmt.json.gz")
    cl = bench_cluster(k, regime_capacity("tight", single_device_peak(g), k, minimum_need(g)))
    runs = []
    for t in (1, 3):
        state, _ = parse_pipeline(f"slice,map,seed,refine{{threads={t}}},memory,refine-mem{{threads={t}}},best").run(
            g, cl, PlanState())
        runs.append(state)
    assert np.array_equal(runs[0].assignment, runs[1].assignment)
    for name in ("refine", "refine-mem"):
        one, many = ({k: v for k, v in r.stats.get(name, {}).items() if k != "simulated"} for r in runs)
        assert one == many, name
    assert runs[0].stats["refine"]["starts"] > 1


def test_an_interrupt_ends_every_search_of_the_threads_at_once(monkeypatch):
    """Ctrl-C reaches the thread that waits for the searches (here: one search raises it). The other running
    search stops at its next move instead of spending its share (seconds here), and so does any a freed
    thread takes up before the rest are cancelled."""
    import threading
    import time
    from pathlib import Path

    from pardnn.ir import load_graph
    from pardnn.pipeline import parse_pipeline

    g = load_graph(Path(__file__).parents[2] / "sample_graphs" / "tf_transformer_4l.json.gz")
    cl = Cluster.homogeneous(4)
    state, _ = parse_pipeline("slice,map,seed").run(g, cl, PlanState())
    starts = [state.assignment] + [np.roll(state.assignment, i) % 4 for i in (1, 2, 3)]
    state = state.replace(alternatives=tuple(starts[1:]))
    real = Refine._search
    ran, lock = [], threading.Lock()

    def search(self, *args, **kwargs):
        with lock:
            i = len(ran)
            ran.append(None)
        if i == 0:
            time.sleep(0.3)
            raise KeyboardInterrupt
        ran[i] = real(self, *args, **kwargs)
        return ran[i]

    monkeypatch.setattr(Refine, "_search", search)
    budget = 400_000        # a share of 50,000 simulations per start: seconds of work
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        Refine(max_evals=budget, threads=2, stale_kicks=10**9)(g, cl, state)     # kicks until the budget ends
    took = time.perf_counter() - t0
    # the other searches (one running, perhaps one a freed thread took up) stopped well within their share
    done = [r["evaluations"] for r in ran[1:] if r is not None]
    assert 1 <= len(done) <= 3 and max(done) < budget // 80, done
    assert took < 5, took


def test_remembering_keeps_apart_searches_that_check_memory_and_searches_that_do_not():
    """A review's case: two starts, one that fits and one that does not, under ``respect_memory="auto"``; the
    first search rejects moves for memory, the second must not take those rejections for its own."""
    from pardnn.machine import single_device_peak

    b = GraphBuilder("r")
    for i, (t, pb) in enumerate([(0, 0), (0, 0), (0, 2000), (0, 0), (0, 0), (1, 2000)]):
        b.add_node(f"n{i}", time_us=float(t), output_bytes=0, persistent_bytes=pb)
    for s, d, ctl in [(0, 1, 0), (0, 3, 0), (1, 3, 0), (2, 3, 0), (0, 5, 0), (3, 5, 1)]:
        b.add_edge(f"n{s}", f"n{d}", control=bool(ctl))
    g = b.build()
    cl = Cluster.homogeneous(2, latency_us=5.0, bandwidth_bytes_per_us=100.0).with_memory(
        int(0.5 * single_device_peak(g)))
    state = FitMemory()(g, cl, Map()(g, cl, Slice()(g, cl, PlanState())))
    assert {bool(simulate(g, cl, d).feasible) for d in (state.assignment, *state.alternatives)} == {True, False}
    on, off = (Refine(max_evals=301, respect_memory="auto", remember=r)(g, cl, state) for r in (True, False))
    assert np.array_equal(on.assignment, off.assignment)
    assert _figures(on) == _figures(off)


def test_the_compiled_move_loop_tries_moves_exactly_as_one_at_a_time():
    """`Evaluator.first_shorter` (every quick simulation of a neighbourhood in one compiled call) against the
    loop it replaced: apply each move, skip those that change nothing, simulate the rest until one is
    shorter or the limit is reached. Same move found, same makespan, same count, same place to go on
    from; with a memo, each remembered key is the assignment's own (the keys are updated per move)."""
    from pardnn.machine.evaluator import new_memo
    from pardnn.machine.kernel import assignment_key
    from pardnn.passes.refine import _Move, _Mover, path_moves, unit_moves

    rng = np.random.default_rng(1126)
    found = limited = 0
    for _ in range(40):
        g, c = _seeded_graph(rng)
        state, _ = Pipeline([Slice(), Map()]).run(g, c, PlanState())
        mover = _Mover(g, state.paths)
        cm = __import__("pardnn.machine", fromlist=["CostModel"]).CostModel.build(g, c)
        dev = state.assignment.copy()
        moves = path_moves(g, c, cm, dev, mover) + unit_moves(g, c, cm, dev, mover)
        moves += [_Move(0.0, (int(v),), int(dev[v]), "no change") for v in rng.choice(g.num_nodes, 3)]
        moves += [_Move(0.0, tuple(int(v) for v in rng.choice(g.num_nodes, 4)), int(rng.integers(c.num_devices)),
                        "nodes, some twice") for _ in range(3)]
        moves = [moves[i] for i in rng.permutation(len(moves))]
        batch = mover.expand(moves)
        for m, i in zip(moves, range(len(moves))):      # the same ops as `_Mover.apply` moves
            trial = mover.apply(dev, m.nodes, m.target)
            ops = batch[1][batch[0][i]:batch[0][i + 1]]
            units = np.unique(mover.unit[np.asarray(m.nodes, dtype=np.int64)])
            units = units[~mover.pinned_unit[units]]    # each unpinned unit once, ascending, members in order
            assert ops.tolist() == [int(v) for u in units.tolist() for v in mover.members(u)]
            assert batch[2][i] == m.target
            if trial is None:
                assert np.all(dev[ops] == m.target)
            else:
                assert set(np.flatnonzero(trial != dev)) <= set(ops.tolist())
                assert np.all(trial[ops] == m.target)
        ref = Evaluator(g, c)
        cur_ms = ref.quick_makespan(dev) * float(rng.choice([0.9, 1.0, 1.2]))
        first, limit = int(rng.integers(0, max(1, len(moves)))), int(rng.integers(1, 12))
        want, count, ms_want, nxt_want = -1, 0, float("inf"), len(moves)
        for i in range(first, len(moves)):
            if count >= limit:
                nxt_want = i
                break
            trial = mover.apply(dev, moves[i].nodes, moves[i].target)
            if trial is None:
                continue
            count += 1
            ms = ref.quick_makespan(trial)
            if ms < cur_ms - 1e-9:
                want, ms_want, nxt_want = i, ms, i + 1
                break
        memo = new_memo()
        for m_ in (None, memo, memo):          # no memo, a fresh one, the same one again (every trial in it)
            ev = Evaluator(g, c, memo=m_)
            i, ms, nxt = ev.first_shorter(dev, batch, first, limit, cur_ms)
            assert (i, nxt, ev.evaluations) == (want, nxt_want, count)
            assert ms == ms_want if i >= 0 else ms == float("inf")
        distinct = set()
        for i in range(first, nxt_want):
            trial = mover.apply(dev, moves[i].nodes, moves[i].target)
            if trial is not None:
                distinct.add(trial.tobytes())
                with np.errstate(over="ignore"):
                    assert memo[tuple(np.uint64(x) for x in assignment_key(trial, c.num_devices))] == Evaluator(g, c).quick_makespan(trial)
        assert ev.simulations == 0 and len(memo) == len(distinct)     # two moves may give one assignment
        found += want >= 0
        limited += want < 0 and nxt_want < len(moves)
    assert found >= 5 and limited >= 5      # both ends of the loop were reached


def _one_move_at_a_time(self, g, cluster, cm, mover, ev, cur, s, budget, check_memory, kinds, totals, rejected=None,
                        stop=None):
    """`Refine._descend` as it was before its quick simulations moved into one compiled call (commit 85ad177):
    each move applied in Python and simulated with `Evaluator.quick_makespan`. The oracle of the test below."""
    from pardnn.machine.evaluator import digest
    from pardnn.passes.refine import LADDER, path_moves, propose, unit_moves

    cur_ms = float(s.makespan_us)
    here = None
    stage = 0
    K = cluster.num_devices
    while ev.evaluations < budget and totals["accepted"] < self.max_rounds and stage < len(LADDER):
        totals["rounds"] += 1
        if stage == 0:
            moves = propose(g, cluster, cm, s, s.critical_chain(), mover, top_links=self.top_links)
        elif stage == 1:
            moves = propose(g, cluster, cm, s, s.critical_chain(), mover, top_links=g.num_nodes, every_target=True)
        elif stage == 2:
            moves = path_moves(g, cluster, cm, cur, mover)
        else:
            moves = unit_moves(g, cluster, cm, cur, mover)
        gained = False
        misses = 0
        patience = self.patience if stage == 0 else self.wide_patience if stage == 1 else None
        for m in moves:
            if ev.evaluations >= budget or (patience is not None and misses >= patience):
                break
            trial = mover.apply(cur, m.nodes, m.target)
            if trial is None:
                continue
            if ev.quick_makespan(trial) >= cur_ms - 1e-9:
                misses += 1
                continue
            key = None
            if rejected is not None:
                if here is None:
                    here = digest(cur, K) + (b"m" if check_memory else b"q")
                key = here + digest(trial, K)
                known = rejected.get(key)
                if known is not None:
                    gate, sims, repaired = known
                    ev.evaluations += 1
                    if gate and ev.evaluations < budget:
                        ev.evaluations += sims
                        totals["repairs"] += repaired
                    misses += 1
                    continue
            s2 = ev.schedule(trial, memory=check_memory)
            fixed = None
            gate = bool(check_memory and self.repair and not s2.feasible and s2.makespan_us < cur_ms - 1e-9)
            tried, sims = False, 0
            if gate and ev.evaluations < budget:
                tried, e0 = True, ev.evaluations
                fixed = self._repair_move(g, cluster, cm, mover, ev, cur, trial, s2)
                sims = ev.evaluations - e0
                if fixed is not None:
                    trial, s2 = fixed
                    totals["repairs"] += 1
            if s2.makespan_us < cur_ms - 1e-9 and (not check_memory or s2.feasible):
                cur, s, cur_ms = trial, s2, float(s2.makespan_us)
                here = None
                totals["accepted"] += 1
                totals["repaired"] += fixed is not None
                kinds[m.label] = kinds.get(m.label, 0) + 1
                gained = True
                misses = 0
            else:
                misses += 1
                if key is not None and (tried or not gate):
                    rejected[key] = (gate, sims, int(fixed is not None))
        stage = 0 if gained else stage + 1
    return cur, s, cur_ms


def test_the_descent_is_the_one_move_at_a_time_descent_over_a_fixed_sweep(monkeypatch):
    """The whole pass against its one-move-at-a-time oracle (`_one_move_at_a_time`): seeded graphs, starts
    that fit and starts that do not, memory checked or not, budgets that end anywhere (in a batch of moves,
    after an accepted move in mid-batch), small patiences (stage 0's early end) and chunks of 2 moves, so
    that a neighbourhood spans many batches. Same plan, same figures but ``simulated``."""
    import pardnn.passes.refine as refine_mod
    from pardnn.machine import single_device_peak
    from pardnn.pipeline import parse_pipeline

    rng = np.random.default_rng(112601)
    compared = accepted = 0
    for case in range(150):
        g, c = _seeded_graph(rng)
        scale = (0.35, 0.5, 0.6, 0.7, None)[int(rng.integers(0, 5))]
        cl = c if scale is None else c.with_memory(max(1, int(scale * single_device_peak(g))))
        spec = ("slice,map,seed", "slice,map,seed,memory", "slice,map,memory")[int(rng.integers(0, 3))]
        state, _ = parse_pipeline(spec).run(g, cl, PlanState())
        respect = ("auto", True, True, False)[case % 4]
        evals = int(rng.choice([7, 25, 60, 400]))
        patience = int(rng.choice([1, 3, 24]))
        wide = (None, 1, 6)[int(rng.integers(0, 3))]
        chunk = int(rng.choice([2, 64]))
        monkeypatch.setattr(refine_mod, "MOVE_CHUNK", chunk)
        new = Refine(max_evals=evals, respect_memory=respect, patience=patience, wide_patience=wide)(g, cl, state)
        with monkeypatch.context() as mp:
            mp.setattr(Refine, "_descend", _one_move_at_a_time)
            old = Refine(max_evals=evals, respect_memory=respect, patience=patience, wide_patience=wide)(g, cl, state)
        if "refine" not in old.stats:
            continue
        assert np.array_equal(new.assignment, old.assignment), (case, respect, evals, patience, wide, chunk)
        assert _figures(new) == _figures(old), (case, respect, evals, patience, wide, chunk)
        compared += 1
        accepted += old.stats["refine"].get("accepted", 0) > 0
    assert compared >= 100 and accepted >= 50


def test_a_stop_ends_the_search_within_its_current_neighbourhood(monkeypatch):
    """Set while the move loop walks a neighbourhood batch by batch, the stop signal ends the search before
    the next batch of moves is simulated (not only at the next neighbourhood or kick)."""
    import threading
    from pathlib import Path

    import pardnn.passes.refine as refine_mod
    from pardnn.ir import load_graph
    from pardnn.machine import CostModel, Evaluator
    from pardnn.pipeline import parse_pipeline

    g = load_graph(Path(__file__).parents[2] / "sample_graphs" / "tf_transformer_4l.json.gz")
    cl = Cluster.homogeneous(4)
    state, _ = parse_pipeline("slice,map").run(g, cl, PlanState())
    stop, calls = threading.Event(), []
    real = Evaluator.first_shorter

    def first_shorter(self, *args, **kwargs):
        calls.append(None)
        out = real(self, *args, **kwargs)
        stop.set()
        return out

    monkeypatch.setattr(Evaluator, "first_shorter", first_shorter)
    monkeypatch.setattr(refine_mod, "MOVE_CHUNK", 2)     # a neighbourhood of many small batches
    r = Refine(patience=10**6)
    out = r._search(g, cl, CostModel.build(g, cl), refine_mod._Mover(g, state.paths), state.assignment, 10**6,
                    False, stop=stop)
    assert len(calls) == 1 and out["evaluations"] <= 4, (len(calls), out["evaluations"])   # start, batch, judged


def test_coarse_units_join_each_single_consumer_op_to_its_consumers_unit():
    """First round: ``a`` and ``b`` feed only ``c``: one coarse unit. ``c`` has two consumers in two units
    and stays apart from them. ``e`` feeds only ``s``, whose colocation group holds ``r``, which ``q`` alone
    feeds: one unit of four. Second round: ``x`` feeds ``y`` and ``z``, two ops of one group: it joins
    them. A pinned op is never joined (it would pin what it joins), nor is ``w``, whose one consumer is
    pinned."""
    from pardnn.passes.refine import fused_units

    g = tiny([("a", 1), ("b", 1), ("c", 1), ("d", 1), ("e", 1), ("p", 1, 0, {"pinned": 0}), ("q", 1),
              ("r", 1, 0, {"colocation": "g"}), ("s", 1, 0, {"colocation": "g"}), ("x", 1),
              ("y", 1, 0, {"colocation": "h"}), ("z", 1, 0, {"colocation": "h"}), ("w", 1)],
             [("a", "c"), ("b", "c"), ("c", "d"), ("c", "e"), ("p", "d"), ("q", "r"), ("e", "s"), ("x", "y"),
              ("x", "z"), ("w", "p")])
    unit, ptr, members, pinned = fused_units(g)
    groups = sorted(sorted(g.names[v] for v in members[ptr[u]:ptr[u + 1]]) for u in range(len(ptr) - 1))
    assert groups == [["a", "b", "c"], ["d"], ["e", "q", "r", "s"], ["p"], ["w"], ["x", "y", "z"]]
    assert [bool(pinned[unit[g.id(n)]]) for n in ("a", "d", "p", "q")] == [False, False, True, False]
    assert all((unit[members[ptr[u]:ptr[u + 1]]] == u).all() for u in range(len(ptr) - 1))


def test_two_level_refinement_is_the_same_on_threads_with_memos_and_without_replays():
    """With the coarse descent first, the plan is the same on one thread or three, with or without the
    memo, and with or without the replayed search left out (which never runs the coarse descent again)."""
    from pardnn.machine import single_device_peak
    from pardnn.pipeline import parse_pipeline

    rng = np.random.default_rng(20261129)
    several = coarser = 0
    for case in range(24):
        g, c = _seeded_graph(rng)
        scale = (0.5, None)[case % 2]
        cl = c if scale is None else c.with_memory(max(1, int(scale * single_device_peak(g))))
        state, _ = parse_pipeline("slice,map,seed").run(g, cl, PlanState())
        several += len(state.alternatives) > 0
        for evals in (40, 600):
            base = Refine(max_evals=evals, fuse=True, threads=1)(g, cl, state)
            coarser += base.stats["refine"]["coarse_units"] < g.num_units
            for other in (Refine(max_evals=evals, fuse=True, threads=3), Refine(max_evals=evals, fuse=True,
                          threads=1, remember=False), Refine(max_evals=evals, fuse=True, threads=1,
                                                             skip_replays=False)):
                run = other(g, cl, state)
                assert np.array_equal(base.assignment, run.assignment), (case, evals, other)
                assert base.makespan_us == run.makespan_us
    assert several >= 8 and coarser >= 20


def test_the_coarse_descent_runs_by_default_on_large_graphs_in_step_1_only(monkeypatch):
    """``fuse="auto"``: step 1's refinement descends with coarse units first on graphs from `FUSE_FROM`
    nodes plus edges; memory-aware refinement (after step 2) and smaller graphs do not."""
    from pardnn.passes import refine as refine_mod

    g = tiny([("a", 5, 100), ("b", 5, 100), ("c", 5, 100), ("d", 5)], [("a", "b"), ("b", "c"), ("a", "d")])
    c = Cluster.homogeneous(2, latency_us=5.0, bandwidth_bytes_per_us=100.0)
    start = PlanState(assignment=np.array([0, 1, 0, 1]))
    assert "coarse_units" not in Refine(max_evals=20)(g, c, start).stats["refine"]
    monkeypatch.setattr(refine_mod, "FUSE_FROM", g.num_nodes + g.num_edges)
    assert Refine(max_evals=20)(g, c, start).stats["refine"]["coarse_units"] == 3
    assert "coarse_units" not in Refine(max_evals=20, respect_memory=True)(
        g, c.with_memory(10**9), start).stats["refine"]
    for bad in ("maybe", 1):
        with pytest.raises(ValueError, match="fuse"):
            Refine(fuse=bad)


def test_successive_halving_splits_a_quarter_among_the_starts_unless_the_plan_overflows(monkeypatch):
    """Step 1's searches from several starts share ``first_share`` (0.25) of the budget, the best of them gets
    the rest; half is shared when the plan breaks a memory limit (step 2 rewrites it) and in ``refine-mem``.
    The budgets the searches are given are checked, with an explicit budget and with the default one."""
    from pathlib import Path

    from pardnn.ir import load_graph
    from pardnn.machine import single_device_peak
    from pardnn.pipeline import parse_pipeline

    g = load_graph(Path(__file__).parents[2] / "sample_graphs" / "tf_transformer_4l.json.gz")
    loose = Cluster.homogeneous(4)
    state, _ = parse_pipeline("slice,map").run(g, loose, PlanState())
    starts = [np.roll(state.assignment, i) % 4 for i in (1, 2, 3)]
    state = state.replace(alternatives=tuple(starts))
    real, given = Refine._search, []

    def search(self, g_, cluster, cm, mover, start, budget, *args, **kwargs):
        given.append(budget)
        return real(self, g_, cluster, cm, mover, start, budget, *args, **kwargs)

    monkeypatch.setattr(Refine, "_search", search)

    def shares(refine, cluster):
        given.clear()
        figures = refine(g, cluster, state).stats["refine"]
        assert figures["starts"] == 4 and figures["evaluations"] <= figures["budget"] + 1
        assert given[:4] == [figures["start_share"]] * 4      # the starts' searches, then the best one's
        return figures["start_share"], figures["budget"]

    assert shares(Refine(max_evals=400, threads=1), loose) == (400 // 4 // 4, 400)
    assert shares(Refine(max_evals=400, threads=1, first_share=0.5), loose) == (50, 400)
    tight = Cluster.homogeneous(4, memory_bytes=single_device_peak(g) // 8)
    assert not simulate(g, tight, state.assignment).feasible
    assert shares(Refine(max_evals=400, threads=1), tight) == (50, 400)
    share, budget = shares(Refine(threads=1, kicks=False), loose)          # the default budget, by size
    assert share == int(budget * 0.25) // 4 and budget > 400
    share, budget = shares(Refine(threads=1, kicks=False), tight)
    assert share == int(budget * 0.5) // 4
    assert parse_pipeline("refine-mem").passes[0].first_share == 0.5
    assert str(parse_pipeline("refine{first_share=0.25}")) == "refine"


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1", "true", "many"])
def test_first_share_out_of_range_is_refused(value):
    from pardnn.pipeline import parse_pipeline

    with pytest.raises(ValueError, match="first_share"):
        parse_pipeline(f"refine{{first_share={value}}}")


@pytest.mark.parametrize("value", ["0", "-3", "2.5", "true"])
def test_wide_patience_must_be_a_positive_whole_number(value):
    from pardnn.pipeline import parse_pipeline

    with pytest.raises(ValueError, match="wide_patience"):
        parse_pipeline(f"refine{{wide_patience={value}}}")


def test_a_wide_round_ends_after_wide_patience_misses(monkeypatch):
    """A round of the second neighbourhood (the whole chain, every target) tries at most ``wide_patience``
    rejected moves in a row before the search proposes again; with none it may walk the whole list."""
    from pathlib import Path

    from pardnn.ir import load_graph
    from pardnn.passes import refine as R
    from pardnn.pipeline import parse_pipeline

    g = load_graph(Path(__file__).parents[2] / "sample_graphs" / "pardnn_vgg16.json.gz")
    cl = Cluster.homogeneous(2)
    state, _ = parse_pipeline("slice,map").run(g, cl, PlanState())
    state = state.replace(alternatives=())      # one search, from the mapped plan
    real_propose, real_paths, real_first = R.propose, R.path_moves, R.Evaluator.first_shorter
    events = []

    def propose(*a, **k):
        events.append(("wide" if k.get("every_target") else "chain", None))
        return real_propose(*a, **k)

    def path_moves(*a, **k):
        events.append(("paths", None))
        return real_paths(*a, **k)

    def first_shorter(self, dev, moves, first, limit, cur_ms, *a, **k):
        out = real_first(self, dev, moves, first, limit, cur_ms, *a, **k)
        events.append(("try", (limit, out[0])))
        return out

    monkeypatch.setattr(R, "propose", propose)
    monkeypatch.setattr(R, "path_moves", path_moves)
    monkeypatch.setattr(R.Evaluator, "first_shorter", first_shorter)
    firsts, paths = {}, {}
    for wide in (2, None):
        events.clear()
        Refine(max_evals=2000, threads=1, kicks=False, fuse=False, wide_patience=wide)(g, cl, state)
        # the limit of the first try of each wide round
        firsts[wide], paths[wide] = ([events[j + 1][1][0] for j, (kind, _) in enumerate(events[:-1])
                                      if kind == stage and events[j + 1][0] == "try"] for stage in ("wide", "paths"))
    assert firsts[2] and max(firsts[2]) <= 2
    assert firsts[None] and max(firsts[None]) > 2
    assert paths[2] and max(paths[2]) > 2        # the paths neighbourhood is not cut short


def _propose_one_by_one(g, cluster, cm, s, chain, mover, *, top_links=64, every_target=False):
    """`refine.propose` as it was before it was built with numpy (commit 7044416): one `_Move` per candidate,
    sorted by a Python key. The oracle of the test below."""
    from pardnn.machine import DEVICE
    from pardnn.passes.refine import PATH_GAIN_SHARE, _Move, free_at, targets

    K = cluster.num_devices
    dev = s.device
    if len(chain) == 0:
        return []
    pick = np.argsort(-chain.delay_us, kind="stable")[:top_links]
    pick = pick[chain.delay_us[pick] > 0]
    A = cm.comm_by_device(g, dev, K)
    moves = []
    dev_links = pick[chain.kind[pick] == DEVICE]
    frees = free_at(s, K, s.ready_us[chain.dst[dev_links]]) if dev_links.size else None
    row = {int(i): r for r, i in enumerate(dev_links.tolist())}
    segments: dict = {}
    to = targets(cluster, dev)
    for i in pick.tolist():
        p, c, delay = int(chain.src[i]), int(chain.dst[i]), float(chain.delay_us[i])
        if chain.kind[i] == EDGE:
            a, b = int(dev[p]), int(dev[c])
            if a == b:
                continue
            moves.append(_Move(delay - (A[c, b] - A[c, a]), (c,), a, "pull consumer"))
            moves.append(_Move(delay - (A[p, a] - A[p, b]), (p,), b, "push producer"))
            seg = mover.path_segment(c, dev, segments)
            if seg.size > 1:
                moves.append(_Move(delay, seg, a, "pull path"))
            if every_target:
                for e in to:
                    if e not in (a, b):
                        moves.append(_Move(delay - (A[c, b] - A[c, e]) - delay, (c,), e, "move consumer"))
        else:
            here = int(dev[c])
            wait_free = frees[row[i]] - s.ready_us[c]
            for e in to:
                if e == here:
                    continue
                gain = delay - (A[c, here] - A[c, e]) - wait_free[e]
                moves.append(_Move(gain, (c,), e, "switch node"))
                seg = mover.path_segment(c, dev, segments)
                if seg.size > 1:
                    moves.append(_Move(gain * PATH_GAIN_SHARE, seg, e, "switch path"))
    def head(m):        # the first four nodes
        return m.nodes[:4] if isinstance(m.nodes, tuple) else tuple(m.nodes[:4].tolist())

    def key(m):         # the same nodes to the same device (long node lists by ends and size)
        n = m.nodes if isinstance(m.nodes, tuple) else tuple(m.nodes.tolist())
        return (n if len(n) < 8 else (n[0], len(n), n[-1])), m.target

    moves.sort(key=lambda m: (-m.gain, m.target, head(m), m.label))
    out, seen = [], set()
    for m in moves:
        if m.gain <= 0 and not every_target:
            continue
        if key(m) not in seen:
            seen.add(key(m))
            out.append(m)
    return out


def test_proposals_are_those_of_one_move_at_a_time_over_a_fixed_sweep():
    """`propose` lists the same moves in the same order, with the same gains bit for bit, as the
    one-object-per-candidate version it replaced, on random graphs (groups, pins, control edges), random
    and mapped plans, both neighbourhoods and short link lists; path segments stay shared arrays."""
    from pardnn.machine import CostModel
    from pardnn.passes.refine import _Mover, propose
    from pardnn.pipeline import parse_pipeline

    rng = np.random.default_rng(20261129)
    compared = moves = 0
    for _ in range(80):
        g, c = _seeded_graph(rng)
        state, _ = parse_pipeline("slice,map").run(g, c, PlanState())
        cm = CostModel.build(g, c)
        mover = _Mover(g, state.paths if rng.random() < 0.8 else None)
        for plan in range(3):
            dev = state.assignment if plan == 0 else rng.integers(0, c.num_devices, g.num_units)[g.unit]
            s = simulate(g, c, dev, memory=False)
            chain = s.critical_chain()
            for top, wide in ((64, False), (g.num_nodes, True), (2, False), (3, True)):
                new = propose(g, c, cm, s, chain, mover, top_links=top, every_target=wide)
                old = _propose_one_by_one(g, c, cm, s, chain, mover, top_links=top, every_target=wide)
                assert [(float(m.gain), tuple(np.asarray(m.nodes).tolist()), m.target, m.label) for m in new] == \
                       [(float(m.gain), tuple(np.asarray(m.nodes).tolist()), m.target, m.label) for m in old]
                compared += 1
                moves += len(new)
    assert compared == 960 and moves > 5000
