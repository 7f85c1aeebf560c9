"""Transfers that run on their devices (`Cluster.transfer_cpu_us`), worked out by hand, plus invariants.

Links of 10 us latency and 100 bytes/us as in test_schedule; each end of a
transfer runs ``7 + bytes / 200`` us: 12 us for 1000 B.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from pardnn.cluster import Cluster, Device, Link
from pardnn.machine import simulate

from ..helpers import tiny
from .test_schedule import placed_graphs


def cpu_cluster(k: int = 2, *, cpu_us: float = 7.0, cpu_bw: float | None = 200.0, links=None) -> Cluster:
    devs = tuple(Device(f"/job:worker/replica:0/task:{i}/device:CPU:0", None, 1.0) for i in range(k))
    return Cluster(devs, 10.0, 100.0, links, transfer_cpu_us=cpu_us, transfer_cpu_bytes_per_us=cpu_bw)


def test_one_transfer_runs_on_both_ends():
    """
    dev0: a(5) --1000 B--> b(3) :dev1

    a 0-5; its send on dev0 5-17 (7 + 1000/200); the link 17-37 (10 + 1000/100);
    the receive on dev1 37-49; b 49-52. Without the endpoint cost: b 25-28.
    """
    g = tiny([("a", 5, 1000), ("b", 3)], [("a", "b")])
    s = simulate(g, cpu_cluster(), [0, 1])
    t = s.transfers
    assert t.send_start_us.tolist() == [5] and t.start_us.tolist() == [17] and t.finish_us.tolist() == [37]
    assert t.recv_start_us.tolist() == [37] and t.arrival_us.tolist() == [49]
    assert s.start_us.tolist() == [0, 49] and s.makespan_us == 52
    assert s.input_arrivals().tolist() == [49]
    plain = simulate(g, Cluster(s.cluster.devices, 10.0, 100.0), [0, 1])
    assert plain.makespan_us == 28 and plain.transfers.arrival_us.tolist() == [25]
    assert plain.transfers.send_start_us.tolist() == [-1] and plain.transfers.recv_start_us.tolist() == [-1]


def test_sends_and_receives_wait_for_their_devices():
    """
    dev0: a(5) --1000 B--> b(3) :dev1
          a --> c(20) :dev0          dev1: d(60), ready at 0

    at 5, c and a's send are both ready on dev0: the op goes first (c 5-25), the send 25-37;
    the link 37-57; dev1 runs d until 60, so the receive runs 60-72; b 72-75.
    """
    g = tiny([("a", 5, 1000), ("c", 20), ("d", 60), ("b", 3)], [("a", "b"), ("a", "c")])
    s = simulate(g, cpu_cluster(), [0, 0, 1, 1])
    t = s.transfers
    assert (t.send_start_us[0], t.start_us[0], t.finish_us[0], t.recv_start_us[0], t.arrival_us[0]) == \
        (25, 37, 57, 60, 72)
    assert dict(zip(g.names, s.start_us.tolist())) == {"a": 0, "c": 5, "d": 0, "b": 72}
    assert s.makespan_us == 75


def test_a_link_overrides_the_cluster_and_a_fixed_cost_alone_works():
    """Link 0 -> 1 runs 3 us at each end (no per-byte part); 1 -> 0 takes the cluster's 0 (SPEC §1).

    a(1) --100 B--> b(1) :dev1 --100 B--> c(1) :dev0
    a 0-1, send 1-4, link 4-15, receive 15-18, b 18-19, link 19-30 (no CPU), c 30-31.
    """
    links = ((None, Link(10.0, 100.0, 3.0)), (None, None))
    c = cpu_cluster(cpu_us=0.0, cpu_bw=None, links=links)
    assert c.transfer_cpu.tolist() == [[0, 3], [0, 0]] and np.isinf(c.transfer_cpu_bandwidth).all()
    g = tiny([("a", 1, 100), ("b", 1, 100), ("c", 1)], [("a", "b"), ("b", "c")])
    s = simulate(g, c, [0, 1, 0])
    assert s.start_us.tolist() == [0, 18, 30] and s.makespan_us == 31
    assert s.transfers.arrival_us.tolist() == [18, 30]


def test_no_endpoint_cost_is_spec_exactly_and_path_costs_fold_it_in():
    plain = Cluster.homogeneous(2, latency_us=10.0, bandwidth_bytes_per_us=100.0)
    assert not plain.has_transfer_cpu and plain.path_latency is plain.latency
    c = cpu_cluster()
    assert c.has_transfer_cpu
    # end to end a 1000 B transfer takes 12 + 20 + 12 = 44 us: latency 10 + 2 x 7, 1/bw 1/100 + 2/200
    assert c.path_latency[0, 1] == 24.0 and c.path_bandwidth[0, 1] == pytest.approx(50.0)
    assert c.mean_latency == 24.0 and c.mean_inv_bandwidth == pytest.approx(1 / 50)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placed_graphs())
def test_each_device_runs_one_thing_at_a_time_and_transfers_go_send_link_receive(case):
    g, c0, dev = case
    c = Cluster(c0.devices, c0.latency_us, c0.bandwidth_bytes_per_us, transfer_cpu_us=4.0,
                transfer_cpu_bytes_per_us=50.0)
    s = simulate(g, c, dev)
    t = s.transfers
    cpu = 4.0 + t.bytes / 50.0
    prod_finish = s.finish_us[t.src]
    assert (t.send_start_us >= prod_finish - 1e-9).all()
    assert (t.start_us >= t.send_start_us + cpu - 1e-9).all()
    assert t.finish_us == pytest.approx(t.start_us + c.latency_us + t.bytes / c.bandwidth_bytes_per_us)
    assert (t.recv_start_us >= t.finish_us - 1e-9).all()
    assert t.arrival_us == pytest.approx(t.recv_start_us + cpu)
    arr = s.input_arrivals()
    assert (s.start_us[g.edge_dst] >= arr - 1e-9).all()
    assert s.makespan_us >= max(s.finish_us.max(initial=0), t.arrival_us.max(initial=0)) - 1e-9
    for d in range(c.num_devices):      # ops, sends and receives never overlap on a device
        on = s.device == d
        snd = t.src_dev == d
        rcv = t.dst_dev == d
        a = np.concatenate([s.start_us[on], t.send_start_us[snd], t.recv_start_us[rcv]])
        b = np.concatenate([s.finish_us[on], t.send_start_us[snd] + cpu[snd], t.recv_start_us[rcv] + cpu[rcv]])
        order = np.lexsort((b, a))
        assert (a[order][1:] >= b[order][:-1] - 1e-9).all()
    # memory peaks are computed and consistent with the timelines
    for d in range(c.num_devices):
        _, level = s.timeline(d)
        assert level.max() == s.peak_bytes[d]
