"""The SPEC §1 simulator on tiny graphs worked out by hand, plus properties.

Every hand case uses links of 10 us latency and 100 bytes/us, so a transfer
of B bytes takes 10 + B/100 us.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pardnn.analysis import critical_path
from pardnn.cluster import Cluster, Device, Link
from pardnn.errors import GraphError, PlacementError
from pardnn.ir import GraphBuilder
from pardnn.machine import simulate, single_device_peak

from ..helpers import reference_simulate, tiny


def cluster(k: int = 2, *, memory=None, speeds=None, links=None) -> Cluster:
    speeds = speeds or [1.0] * k
    devs = tuple(Device(f"/device:GPU:{i}", memory, speeds[i]) for i in range(k))
    return Cluster(devs, latency_us=10.0, bandwidth_bytes_per_us=100.0, links=links)


# ---------------------------------------------------------------------------
# Schedules
# ---------------------------------------------------------------------------

def test_chain_on_one_device_and_frees_before_allocations():
    """
    a(2) --> b(3) --> c(4)          all on device 0
    outputs 100, 200, 300 B; b holds 1000 B persistent

    t=0 a starts: 100          t=2 b starts: +200 = 300
    t=5 b ends, frees a (-100) BEFORE c allocates (+300): 500 (not 600)
    t=9 c ends: b's and c's outputs freed
    """
    g = tiny([("a", 2, 100), ("b", 3, 200, {"persistent_bytes": 1000}), ("c", 4, 300)],
             [("a", "b"), ("b", "c")])
    s = simulate(g, cluster(1), [0, 0, 0])
    assert s.makespan_us == 9
    assert s.start_us.tolist() == [0, 2, 5]
    assert s.finish_us.tolist() == [2, 5, 9]
    assert len(s.transfers) == 0
    assert s.peak_bytes.tolist() == [1500]
    assert s.peak_time_us.tolist() == [5]
    times, level = s.timeline(0)
    assert times.tolist() == [0, 0, 2, 5, 9]
    assert level.tolist() == [1000, 1100, 1300, 1500, 1000]


def test_fifo_earliest_ready_beats_file_order():
    """
    a(1) --> p(10)        one device; file order a, b, q, p
    b(3) --> q(2)

    t=0: a, b ready -> a (file order); t=1 b; p ready at 1, q at 4
    t=4: p (ready 1) before q (ready 4), though q is earlier in the file
    """
    g = tiny([("a", 1), ("b", 3), ("q", 2), ("p", 10)], [("a", "p"), ("b", "q")])
    s = simulate(g, cluster(1), [0, 0, 0, 0])
    assert dict(zip(g.names, s.start_us.tolist())) == {"a": 0, "b": 1, "p": 4, "q": 14}
    assert s.makespan_us == 16


def test_fifo_ties_go_to_file_order():
    """
       r(1)            one device, file order r, y, x
      /    \\           x and y both become ready at t=1: y first
    x(5)   y(5)
    """
    g = tiny([("r", 1), ("y", 5), ("x", 5)], [("r", "x"), ("r", "y")])
    s = simulate(g, cluster(1), [0, 0, 0])
    assert dict(zip(g.names, s.start_us.tolist())) == {"r": 0, "y": 1, "x": 6}


def test_one_transfer_per_producer_port_and_device():
    """
    dev0: a(1) out 1000 B --+--> b(1) dev1
                            +--> c(1) dev1      one transfer to dev1 serves b and c
                            +--> d(1) dev2      another to dev2, on another link

    both transfers: start 1, take 10 + 1000/100 = 20, arrive 21 (links overlap)
    dev1: b 21-22, c 22-23; dev2: d 21-22
    memory: a's output lives 0..21 on dev0; the copy on dev1 from 1 until c ends (23)
    """
    g = tiny([("a", 1, 1000), ("b", 1), ("c", 1), ("d", 1)], [("a", "b"), ("a", "c"), ("a", "d")])
    s = simulate(g, cluster(3), [0, 1, 1, 2])
    assert len(s.transfers) == 2
    assert s.transfers.dst_dev.tolist() == [1, 2]
    assert s.transfers.start_us.tolist() == [1, 1]
    assert s.transfers.finish_us.tolist() == [21, 21]
    assert dict(zip(g.names, s.start_us.tolist())) == {"a": 0, "b": 21, "c": 22, "d": 21}
    assert s.makespan_us == 23
    assert s.peak_bytes.tolist() == [1000, 1000, 1000]
    items = s.memory
    copy1 = np.flatnonzero((items.kind == 1) & (items.device == 1))[0]
    assert (items.alloc_us[copy1], items.free_us[copy1]) == (1, 23)
    out_a = np.flatnonzero((items.kind == 0) & (items.ref == 0))[0]
    assert (items.alloc_us[out_a], items.free_us[out_a]) == (0, 21)


def test_two_ports_are_two_transfers_serialised_by_port():
    """
    dev0: a(1) outputs [1000, 500]:  port 0 --> b(1) dev1,  port 1 --> c(1) dev1

    both sendable at t=1 on link (0,1): port 0 first (1 -> 21), port 1 next (21 -> 36)
    """
    g = tiny([("a", 1, [1000, 500]), ("b", 1), ("c", 1)], [("a", "b"), ("a", "c", {"port": 1})])
    s = simulate(g, cluster(2), [0, 1, 1])
    assert s.transfers.port.tolist() == [0, 1]
    assert s.transfers.start_us.tolist() == [1, 21]
    assert s.transfers.finish_us.tolist() == [21, 36]
    assert dict(zip(g.names, s.start_us.tolist())) == {"a": 0, "b": 21, "c": 36}


def test_link_serialises_in_sendable_order_and_directions_are_independent():
    """
    dev0: p(1) -> q(1)  both output 1000 B       dev1: u(1) out 1000 B
    p --> r (dev1),  q --> s (dev1),  u --> w (dev0)

    link 0->1: p's tensor 1 -> 21; q's sendable at 2 but waits: 21 -> 41
    link 1->0: u's tensor 1 -> 21, in parallel
    """
    g = tiny([("p", 1, 1000), ("q", 1, 1000), ("u", 1, 1000), ("r", 1), ("s", 1), ("w", 1)],
             [("p", "q", {"bytes": 0}), ("p", "r"), ("q", "s"), ("u", "w")])
    # p -> q carries no bytes; q waits for p on its own device anyway
    s = simulate(g, cluster(2), [0, 0, 1, 1, 1, 0])
    rows = {(g.names[int(src)], int(d)): (a, b) for src, d, a, b in
            zip(s.transfers.src, s.transfers.dst_dev, s.transfers.start_us, s.transfers.finish_us)}
    assert rows == {("p", 1): (1, 21), ("q", 1): (21, 41), ("u", 0): (1, 21)}
    assert s.makespan_us == 42


def test_same_instant_transfers_go_in_producer_file_order():
    """
    dev0: q(0) out 1000, p(0) out 500     (file order q, p; both zero-duration sources)
    q --> x (dev1), p --> y (dev1)

    both finish, and become sendable, at t=0: q's first (0 -> 20), then p's (20 -> 35)
    """
    g = tiny([("q", 0, 1000), ("p", 0, 500), ("x", 1), ("y", 1)], [("q", "x"), ("p", "y")])
    s = simulate(g, cluster(2), [0, 0, 1, 1])
    assert [g.names[int(v)] for v in s.transfers.src] == ["q", "p"]
    assert s.transfers.start_us.tolist() == [0, 20]
    assert s.transfers.finish_us.tolist() == [20, 35]
    assert dict(zip(g.names, s.start_us.tolist()))["y"] == 35


def test_control_edge_costs_latency_but_no_transfer_or_memory():
    """
    dev0: a(5) out 100 B  ==control==>  b(1) dev1

    b waits for a plus 10 us latency: starts at 15. No transfer. a's output has
    only a control successor, so it dies when a finishes (t=5).
    """
    g = tiny([("a", 5, 100), ("b", 1)], [("a", "b", {"control": True})])
    s = simulate(g, cluster(2), [0, 1])
    assert len(s.transfers) == 0
    assert s.start_us.tolist() == [0, 15]
    assert s.makespan_us == 16
    assert s.peak_bytes.tolist() == [100, 0]
    out_a = np.flatnonzero(s.memory.kind == 0)[0]
    assert s.memory.free_us[out_a] == 5


def test_same_device_control_edge_only_orders():
    g = tiny([("a", 5), ("b", 1)], [("a", "b", {"control": True})])
    s = simulate(g, cluster(2), [0, 0])
    assert s.start_us.tolist() == [0, 5]


def test_zero_duration_ops_release_successors_in_later_rounds_of_the_same_instant():
    """
    s(0) --> t(2)        one device, s, u sources
    u(1)

    file order s, u, t: at t=0 s runs and ends; t becomes ready at 0 in a later
    round, tying with u (ready 0): u goes first by file order (u before t).
    file order s, t, u: t wins the tie instead.
    """
    g1 = tiny([("s", 0), ("u", 1), ("t", 2)], [("s", "t")])
    s1 = simulate(g1, cluster(1), [0, 0, 0])
    assert dict(zip(g1.names, s1.start_us.tolist())) == {"s": 0, "u": 0, "t": 1}
    g2 = tiny([("s", 0), ("t", 2), ("u", 1)], [("s", "t")])
    s2 = simulate(g2, cluster(1), [0, 0, 0])
    assert dict(zip(g2.names, s2.start_us.tolist())) == {"s": 0, "t": 0, "u": 2}


def test_zero_duration_op_counts_at_its_instant():
    """
    z(0) with output 70 B and temp 30 B, alone: peak 100 at t=0 though it lives no time.
    """
    g = tiny([("z", 0, 70, {"temp_bytes": 30})], [])
    s = simulate(g, cluster(1), [0])
    assert s.peak_bytes.tolist() == [100]
    assert s.timeline(0)[1].tolist() == [0, 100, 0]


def test_temp_bytes_live_while_the_op_runs():
    """
    a(2, temp 50, out 10) --> b(3, temp 40, out 0)

    t=0..2: 10 + 50 = 60;  t=2..5: a's 10 + b's 40 = 50  -> peak 60 at 0
    """
    g = tiny([("a", 2, 10, {"temp_bytes": 50}), ("b", 3, 0, {"temp_bytes": 40})], [("a", "b")])
    s = simulate(g, cluster(1), [0, 0])
    assert s.peak_bytes.tolist() == [60]
    assert s.timeline(0)[1].tolist() == [0, 60, 50, 0]


def test_largest_edge_bytes_sets_the_transfer_and_the_copy():
    """
    dev0: a(1) out 1000 --(300 B)--> b dev1
                        --(800 B)--> c dev1      one transfer of 800 B: 1 -> 19
    """
    g = tiny([("a", 1, 1000), ("b", 1), ("c", 1)], [("a", "b", {"bytes": 300}), ("a", "c", {"bytes": 800})])
    s = simulate(g, cluster(2), [0, 1, 1])
    assert s.transfers.bytes.tolist() == [800]
    assert s.transfers.finish_us.tolist() == [19]
    assert s.peak_bytes.tolist() == [1000, 800]


def test_port_missing_from_output_bytes_takes_largest_edge():
    b = GraphBuilder("ports")
    b.add_node("a", time_us=1, output_bytes=[10])
    b.add_node("b", time_us=1)
    b.add_node("c", time_us=1)
    b.add_edge("a", "b", port=2, bytes=70)
    b.add_edge("a", "c", port=2, bytes=90)
    g = b.build()
    assert g.output_bytes_of(0) == [10, 0, 90]
    s = simulate(g, cluster(1), [0, 0, 0])
    assert s.peak_bytes.tolist() == [100]


def test_device_speed_scales_compute():
    g = tiny([("a", 10), ("b", 10)], [])
    s = simulate(g, cluster(2, speeds=[1.0, 2.0]), [0, 1])
    assert s.finish_us.tolist() == [10, 5]


def test_links_matrix_overrides_a_pair():
    """dev0 -> dev1 is fast (1 us, 1000 B/us); dev0 -> dev2 keeps the defaults."""
    fast = Link(1.0, 1000.0)
    links = ((None, fast, None), (None, None, None), (None, None, None))
    g = tiny([("a", 1, 1000), ("b", 1), ("c", 1)], [("a", "b"), ("a", "c")])
    s = simulate(g, cluster(3, links=links), [0, 1, 2])
    assert s.transfers.finish_us.tolist() == [1 + 1 + 1, 1 + 10 + 10]


def test_bandwidth_anomaly_exists_under_fifo():
    """More bandwidth can make a FIFO list schedule longer (Graham's anomaly).

    dev0: a(1) out 1000 B ----------------------------> x(100) on dev1
    dev1: y0(20) --> y1(50) ==control==> z(100) on dev0

    slow link (50 B/us):   x arrives at 31; y1 runs 20-70, x 70-170; z 80-180 -> 180
    fast link (1000 B/us): x arrives at 12, is ready before y1 (20), runs first
                           20-120; y1 120-170; z 180-280 -> 280

    So "more bandwidth never hurts" cannot hold for every placement; the
    property test below checks it whenever the per-device order is unchanged.
    """
    g = tiny([("a", 1, 1000), ("y0", 20), ("y1", 50), ("x", 100), ("z", 100)],
             [("a", "x"), ("y0", "y1"), ("y1", "z", {"control": True})])
    dev = [0, 1, 1, 1, 0]
    slow = Cluster.homogeneous(2, latency_us=10.0, bandwidth_bytes_per_us=50.0)
    fast = Cluster.homogeneous(2, latency_us=10.0, bandwidth_bytes_per_us=1000.0)
    assert simulate(g, slow, dev).makespan_us == 180
    assert simulate(g, fast, dev).makespan_us == 280


# ---------------------------------------------------------------------------
# Constraints
# ---------------------------------------------------------------------------

def test_violations_name_what_is_wrong():
    g = tiny([("v", 1, 0, {"persistent_bytes": 600, "colocation": "var"}),
              ("read", 1, 0, {"colocation": "var"}),
              ("pin", 1, 0, {"pinned": 1})], [("v", "read")])
    s = simulate(g, cluster(2, memory=500), [0, 1, 0])
    kinds = sorted(v.kind for v in s.violations)
    assert kinds == ["colocation", "memory", "pinned"]
    mem = next(v for v in s.violations if v.kind == "memory")
    assert mem.device == 0 and mem.bytes_over == 100
    assert "100 bytes short" in mem.message
    assert not s.feasible
    assert s.memory_shortfall() == 100
    ok = simulate(g, cluster(2, memory=600), [1, 1, 1])
    assert ok.feasible and ok.violations == ()


def test_the_device_furthest_over_comes_first():
    """Commands name ``violations[0]`` in their one-line error beside the worst device's shortfall; it named
    the lowest-numbered device over its capacity, not necessarily the worst."""
    g = tiny([("a", 1, 0, {"persistent_bytes": 600}), ("b", 1, 0, {"persistent_bytes": 900}),
              ("c", 1, 0, {"persistent_bytes": 700})], [])
    s = simulate(g, cluster(3, memory=500), [0, 1, 2])
    assert [v.device for v in s.violations] == [1, 2, 0]
    assert s.violations[0].bytes_over == s.memory_shortfall() == 400


def test_split_colocation_groups_are_all_named():
    """`rule_violations` first checks every member against its group's first member; where any differs it
    names each split group: the same set as splitting the groups by hand, on random assignments."""
    from pardnn.machine.schedule import rule_violations

    names = [(f"n{i}", 1, 0, {"colocation": f"g{i % 5}"} if i % 3 else {}) for i in range(30)]
    g = tiny(names, [])
    rng = np.random.default_rng(7)
    for t in range(200):
        dev = rng.integers(0, 1 + (t % 3), size=30) if t % 4 else np.zeros(30, dtype=np.int64)
        want = {f"g{k}" for k in range(5) if len({int(dev[i]) for i in range(30) if i % 3 and i % 5 == k}) > 1}
        got = {v.message.split("'")[1] for v in rule_violations(g, dev) if v.kind == "colocation"}
        assert got == want


def test_feasible_is_read_without_wording_the_violations_and_agrees_with_them():
    """`Schedule.feasible` reads the peaks and a check of pins and groups; the violations are worded only when
    asked for. On random plans of a graph with pins, groups and weights, with and without memory and at
    capacities either side of the peaks, the two agree, and the list is what `rule_violations` and the
    peaks say, worst device first."""
    from pardnn.machine.schedule import rule_violations

    names = [(f"n{i}", 1 + i % 4, 100 * (i % 7), {"colocation": f"g{i % 4}"} if i % 3 == 0 else
              {"pinned": i % 3} if i % 11 == 1 else {"persistent_bytes": 50 * (i % 5)}) for i in range(40)]
    g = tiny(names, [(f"n{i}", f"n{j}") for i in range(40) for j in (i + 1, i + 7) if j < 40])
    rng = np.random.default_rng(11)
    seen = set()
    for t in range(300):
        k = 2 + t % 3
        dev = rng.integers(0, k, size=40)
        if t % 2:       # keep the rules: groups whole, pins kept
            dev = dev[g.unit_first]
            dev[g.pinned >= 0] = g.pinned[g.pinned >= 0] % k
        memory = bool(t % 5)
        peak = simulate(g, cluster(k), dev, memory=True).peak_bytes
        cap = int(rng.choice([int(peak.max()), int(peak.max()) - 1, int(peak.min()), 10**9]))
        s = simulate(g, cluster(k, memory=cap), dev, memory=memory)
        feasible = s.feasible
        assert "violations" not in s.__dict__       # read without wording them
        kept = not rule_violations(g, dev)
        over = sorted((int(b - cap), -d) for d, b in enumerate(s.peak_bytes) if memory and b > cap)[::-1]
        assert feasible == (kept and not over) == (s.violations == ())
        assert [(v.bytes_over, -v.device) for v in s.violations if v.kind == "memory"] == over
        assert [v.message for v in s.violations if v.kind != "memory"] == [v.message for v in rule_violations(g, dev)]
        seen.add((s.feasible, kept, bool(over)))
    assert len(seen) == 4


def test_the_violations_are_those_of_the_plan_simulated_even_if_the_callers_array_changes_after():
    """`Schedule.device` is the caller's own array; the violations, worded later, are still those of the plan
    that was simulated (a review found them worded from the array as it was when first asked for)."""
    g = tiny([("a", 1, 0, {"pinned": 0}), ("b", 1, 0, {"colocation": "g"}), ("c", 1, 0, {"colocation": "g"})], [])
    dev = np.array([1, 0, 1])
    s = simulate(g, cluster(2), dev)
    dev[:] = [0, 0, 0]
    assert not s.feasible
    assert sorted(v.kind for v in s.violations) == ["colocation", "pinned"]


def test_a_remembered_schedule_comes_back_with_the_callers_array_and_nothing_worked_out_before():
    """`simulate` hands a repeat its remembered schedule again (`_with_device`): the new caller's array as its
    ``device``, the same step, and what an earlier caller's copy worked out on first use (its memory items,
    its violations) not carried over."""
    g = tiny([("a", 1, 500), ("b", 2, 700), ("c", 1, 0, {"persistent_bytes": 900})], [("a", "b"), ("a", "c")])
    c = cluster(2, memory=1000)
    first = np.array([0, 1, 1])
    s1 = simulate(g, c, first)
    _ = s1.memory, s1.violations
    again = first.copy()
    s2 = simulate(g, c, again)
    assert s2 is not s1 and s2.device is again and s1.device is first
    assert "memory" not in s2.__dict__ and "violations" not in s2.__dict__
    assert s2.makespan_us == s1.makespan_us and s2.start_us is s1.start_us
    assert [v.message for v in s2.violations] == [v.message for v in s1.violations] and not s2.feasible
    assert np.array_equal(s2.memory.bytes, s1.memory.bytes)


def test_a_graph_with_a_cycle_is_refused_not_simulated():
    """A library trial: a cyclic graph built with ``verify=False`` simulated to a 0 us step, feasible, with no
    op run; now the simulator names a node on the cycle, as `verify` and the partitioner's passes do."""
    b = GraphBuilder("cyc")
    for n in "pqr":
        b.add_node(n, time_us=1.0)
    for u, v in ("pq", "qr", "rp"):
        b.add_edge(u, v)
    g = b.build(verify=False)
    with pytest.raises(GraphError, match="graph 'cyc' has a cycle through node 'p'"):
        simulate(g, cluster(1), [0, 0, 0])


def test_placement_out_of_range_is_rejected():
    g = tiny([("a", 1)], [])
    with pytest.raises(PlacementError, match="device 3"):
        simulate(g, cluster(2), [3])


def test_single_device_peak_ignores_pins():
    g = tiny([("a", 1, 10, {"pinned": 3}), ("b", 1, 20)], [("a", "b")])
    assert single_device_peak(g) == 30


def test_predicted_block_matches_spec():
    g = tiny([("a", 1.5, 8)], [])
    s = simulate(g, cluster(1), [0])
    assert s.predicted() == {"makespan_us": 1.5, "peak_bytes": [8], "feasible": True}


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------

@st.composite
def placed_graphs(draw, max_nodes: int = 14, max_devices: int = 3, with_forwards: bool = True,
                  varied_links: bool = False):
    n = draw(st.integers(1, max_nodes))
    k = draw(st.integers(1, max_devices))
    b = GraphBuilder("random")
    ports = []
    for i in range(n):
        ports.append(draw(st.integers(1, 2)))
        b.add_node(f"n{i}", time_us=draw(st.sampled_from([0.0, 1.0, 2.0, 3.5, 5.0, 8.0])),
                   output_bytes=[draw(st.sampled_from([0, 100, 250, 1000])) for _ in range(ports[i])],
                   temp_bytes=draw(st.sampled_from([0, 0, 40])),
                   persistent_bytes=draw(st.sampled_from([0, 0, 500])))
    for j in range(1, n):
        free_ports = list(range(ports[j]))      # output ports of n{j} that may still forward an input
        for i in draw(st.lists(st.integers(0, j - 1), max_size=3, unique=True)):
            control = draw(st.booleans()) and draw(st.booleans())
            port = draw(st.integers(0, 1))
            nbytes = draw(st.sampled_from([None, None, 50, 700]))
            extra = {}
            if with_forwards and not control and free_ports and draw(st.booleans()):
                extra["forwarded_as"] = free_ports.pop(draw(st.integers(0, len(free_ports) - 1)))
            b.add_edge(f"n{i}", f"n{j}", port=port, bytes=nbytes, control=control, **extra)
    g = b.build()
    dev = draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
    lat = draw(st.sampled_from([0.0, 5.0, 10.0]))
    bw = draw(st.sampled_from([10.0, 100.0, 1000.0]))
    speeds = draw(st.lists(st.sampled_from([1.0, 2.0]), min_size=k, max_size=k))
    links = None
    if varied_links:        # each directed link its own latency and bandwidth
        costs = draw(st.lists(st.tuples(st.sampled_from([0.0, 3.0, 10.0]), st.sampled_from([10.0, 100.0, 1000.0])),
                              min_size=k * k, max_size=k * k))
        links = tuple(tuple(Link(*costs[a * k + b]) if a != b else None for b in range(k)) for a in range(k))
    c = Cluster(tuple(Device(f"/device:GPU:{i}", None, speeds[i]) for i in range(k)), lat, bw, links=links)
    return g, c, dev


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placed_graphs())
def test_agrees_with_the_reference_simulator(case):
    _agrees_with_the_reference(case)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placed_graphs(max_devices=12, varied_links=True))
def test_agrees_with_the_reference_simulator_on_many_devices(case):
    """With more links than edges, the kernel numbers only the links in use (its other path); each link its
    own costs, so a link taken for another shows."""
    _agrees_with_the_reference(case)


def _agrees_with_the_reference(case):
    g, c, dev = case
    s = simulate(g, c, dev)
    makespan, start, finish, transfers, peaks = reference_simulate(g, c, dev)
    assert s.makespan_us == pytest.approx(makespan, abs=1e-9)
    assert s.start_us.tolist() == pytest.approx(start, abs=1e-9)
    assert s.finish_us.tolist() == pytest.approx(finish, abs=1e-9)
    got = {(int(a), int(p), int(d)): (x, y, int(nb)) for a, p, d, x, y, nb in
           zip(s.transfers.src, s.transfers.port, s.transfers.dst_dev, s.transfers.start_us,
               s.transfers.finish_us, s.transfers.bytes)}
    assert set(got) == set(transfers)
    for key, (x, y, nb) in transfers.items():
        assert got[key][0] == pytest.approx(x) and got[key][1] == pytest.approx(y) and got[key][2] == nb
    assert s.peak_bytes.tolist() == peaks


@settings(max_examples=200, deadline=None)
@given(placed_graphs())
def test_makespan_at_least_the_compute_critical_path(case):
    g, c, dev = case
    c1 = Cluster(tuple(Device(d.name, None, 1.0) for d in c.devices), c.latency_us, c.bandwidth_bytes_per_us)
    s = simulate(g, c1, dev)
    cp, _ = critical_path(g)
    assert s.makespan_us >= cp - 1e-9


@settings(max_examples=200, deadline=None)
@given(placed_graphs())
def test_one_device_needs_no_transfers_and_never_idles(case):
    g, c, _ = case
    one = Cluster.homogeneous(1, latency_us=c.latency_us, bandwidth_bytes_per_us=c.bandwidth_bytes_per_us)
    s = simulate(g, one, [0] * g.num_nodes)
    assert len(s.transfers) == 0
    assert s.makespan_us == pytest.approx(float(g.time_us.sum()))


def _orders(s):
    """Each device's run order and each link's send order. An op of 0 us and the op after it start at the
    same instant, so a device's order is by start, then finish (by start alone, a stable sort put them
    in id order whichever ran first: `test_orders_tell_apart_a_zero_time_op_run_before_or_after`)."""
    per_dev = []
    for d in range(s.num_devices):
        on = np.flatnonzero(s.device == d)
        per_dev.append(tuple(on[np.lexsort((s.finish_us[on], s.start_us[on]))]))
    t = s.transfers
    per_link = sorted(zip(t.src_dev.tolist(), t.dst_dev.tolist(), t.start_us.tolist(), t.src.tolist(),
                          t.port.tolist()))
    links: dict = {}
    for a, c_, _, src, port in per_link:
        links.setdefault((a, c_), []).append((src, port))
    return per_dev, links


def test_orders_tell_apart_a_zero_time_op_run_before_or_after():
    """Hypothesis's case: with 1.5x the bandwidth, n3's inputs arrive first and device 1 runs n3 (1 us) before
    n8 (0 us), which it ran first before, so the step grows from 4.0 to 4.033 us. Both orders start the two
    ops at 3.0 us in the slower run, so only start then finish tells the orders apart."""
    t = [1, 1, 0, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0]
    src = [1, 2, 0, 0, 7, 1, 0, 1, 2, 0, 1, 0, 8]
    dst = [3, 3, 7, 8, 8, 8, 10, 10, 10, 11, 11, 12, 12]
    eb = [50, 1000, 0, 0, 0, 0, 0, 0, 1000, 0, 0, 0, 50]
    b = GraphBuilder("anomaly")
    for i in range(13):
        b.add_node(f"n{i}", time_us=float(t[i]), output_bytes=1000 if i == 2 else 0)
    for a, z, e in zip(src, dst, eb):
        b.add_edge(f"n{a}", f"n{z}", bytes=e)
    g = b.build()
    dev = [0, 0, 0, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0]
    c = Cluster((Device("a", None, 2.0), Device("b", None, 1.0)), 0.0, 1000.0)
    s0, s1 = simulate(g, c, dev), simulate(g, Cluster(c.devices, 0.0, 1500.0), dev)
    assert s1.makespan_us > s0.makespan_us
    assert _orders(s0)[0][1] != _orders(s1)[0][1]


@settings(max_examples=300, deadline=None)
@given(placed_graphs(), st.sampled_from([1.5, 2.0, 10.0]))
def test_more_bandwidth_never_hurts_when_the_orders_are_unchanged(case, factor):
    """Under a fixed placement, more bandwidth never lengthens the step unless it
    changes the order in which a device runs its ops or a link sends its tensors
    (then FIFO's list-scheduling anomaly can strike: see the hand case above)."""
    g, c, dev = case
    faster = Cluster(c.devices, c.latency_us, c.bandwidth_bytes_per_us * factor)
    s0, s1 = simulate(g, c, dev), simulate(g, faster, dev)
    assume(_orders(s0) == _orders(s1))
    assert s1.makespan_us <= s0.makespan_us + 1e-9


@settings(max_examples=200, deadline=None)
@given(placed_graphs())
def test_timelines_and_kernel_peaks_agree(case):
    """The kernel's reference-counted peaks equal the maxima of the item-by-item timelines."""
    g, c, dev = case
    s = simulate(g, c, dev)
    for d in range(c.num_devices):
        times, level = s.timeline(d)
        assert int(level.max()) == int(s.peak_bytes[d])
        if s.peak_bytes[d] > s.persistent_bytes[d]:
            assert times[int(np.argmax(level))] == s.peak_time_us[d]


@settings(max_examples=200, deadline=None)
@given(placed_graphs())
def test_levels_at_reads_every_timeline_after_the_instant(case):
    """`Schedule.levels_at` is each device's timeline read just after an instant: at every event time
    (zero-length items freed again), between events and before the first."""
    g, c, dev = case
    s = simulate(g, c, dev)
    lines = [s.timeline(d) for d in range(c.num_devices)]
    times = np.unique(np.concatenate([t for t, _ in lines]))
    for t in np.concatenate([times, (times[:-1] + times[1:]) / 2, [-1.0]]).tolist():
        want = [float(level[max(int(np.searchsorted(tl, t, side="right")) - 1, 0)]) for tl, level in lines]
        assert s.levels_at(t).tolist() == want


def test_a_repeated_simulation_is_remembered_not_rerun(monkeypatch):
    """The same graph, cluster object, memory flag and assignment give the same schedule again without running
    the kernel; a changed assignment (even the caller's own array, changed in place), another cluster object or
    the other memory flag simulate anew."""
    from pardnn.machine import schedule as sched

    g = tiny([("a", 2.0, 100), ("b", 3.0, 50), ("c", 1.0, 10)], [("a", "b"), ("a", "c")])
    c = cluster(2)
    calls = []
    real = sched.run_kernel
    monkeypatch.setattr(sched, "run_kernel", lambda *a: calls.append(1) or real(*a))
    dev = np.array([0, 1, 0])
    first = simulate(g, c, dev)
    again = simulate(g, c, np.array([0, 1, 0]))
    assert len(calls) == 1
    assert again.makespan_us == first.makespan_us and again.peak_bytes.tolist() == first.peak_bytes.tolist()
    assert again.start_us.tolist() == first.start_us.tolist() and len(again.transfers) == len(first.transfers)
    assert again.device.tolist() == [0, 1, 0]
    from dataclasses import fields
    first.memory                                 # built on first use: each schedule builds its own
    assert all(getattr(again, f.name) is getattr(first, f.name) for f in fields(first) if f.name != "device")
    assert "memory" not in again.__dict__ and again.memory.bytes.tolist() == first.memory.bytes.tolist()
    dev[1] = 0                                   # the first caller's array, changed in place
    one = simulate(g, c, dev)
    assert len(calls) == 2 and len(one.transfers) == 0 and one.makespan_us == 6.0
    simulate(g, c, np.array([0, 1, 0]), memory=False)
    simulate(g, cluster(2), np.array([0, 1, 0]))
    assert len(calls) == 4
    assert simulate(g, c, np.array([0, 1, 0])).makespan_us == first.makespan_us and len(calls) == 4
    # what every caller shares cannot be changed by one of them
    for arr in (again.start_us, again.peak_bytes, again.transfers.finish_us):
        with pytest.raises(ValueError, match="read-only"):
            arr[:] = 0


def test_simulate_from_several_threads_at_once_keeps_its_recent_schedules_consistent(monkeypatch):
    """Refinement's searches call `simulate` on one graph from several threads; its per-graph list of
    recent schedules is changed under a lock (without one, a thread's ``pop`` of the index it found
    raised IndexError once another thread had trimmed the list: 2-3 times per run of this test)."""
    import sys
    import threading
    from pathlib import Path

    import pardnn.machine.schedule as sched
    from pardnn.ir import load_graph

    g = load_graph(Path(__file__).parents[2] / "sample_graphs" / "pipedream_gnmt.json.gz")
    c = Cluster.homogeneous(4, latency_us=25.0, bandwidth_bytes_per_us=12000.0)
    rng = np.random.default_rng(0)
    plans = [rng.integers(0, 4, g.num_nodes) for _ in range(3)] + [np.full(g.num_nodes, d) for d in range(4)]
    want = [simulate(g, c, p, memory=False).makespan_us for p in plans]
    monkeypatch.setattr(sched, "RECENT_BYTES", 13000)       # room for about three schedules, as on large graphs
    errors: list = []

    def work(seed: int) -> None:
        r = np.random.default_rng(seed)
        try:
            for _ in range(3000):
                i = int(r.integers(0, len(plans)))
                s = simulate(g, c, plans[i], memory=False)
                assert np.array_equal(s.device, plans[i]) and s.makespan_us == want[i]
        except Exception as e:      # noqa: BLE001 - reported below, with the thread's other failures
            errors.append(repr(e))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placed_graphs(), st.data())
def test_ops_on_either_of_two_empty_twins_are_simulated_alike(case, data):
    """`Cluster.twins`' promise, which lets refinement try one empty twin of each class: the ops moved to
    one or the other of two interchangeable empty devices run at the same times, and the two devices' peaks
    swap."""
    g, c, dev = case
    k = c.num_devices
    c2 = Cluster(c.devices + tuple(Device(f"/device:GPU:{k + i}", None, 1.0) for i in range(2)),
                 c.latency_us, c.bandwidth_bytes_per_us)
    assert c2.twins[k] == c2.twins[k + 1]
    moved = np.array(data.draw(st.lists(st.booleans(), min_size=g.num_nodes, max_size=g.num_nodes)))
    d1, d2 = np.array(dev), np.array(dev)
    d1[moved], d2[moved] = k, k + 1
    s1, s2 = simulate(g, c2, d1), simulate(g, c2, d2)
    assert s1.makespan_us == s2.makespan_us
    assert s1.start_us.tolist() == s2.start_us.tolist() and s1.finish_us.tolist() == s2.finish_us.tolist()
    p1, p2 = s1.peak_bytes.copy(), s2.peak_bytes.copy()
    p2[[k, k + 1]] = p2[[k + 1, k]]
    assert p1.tolist() == p2.tolist()
