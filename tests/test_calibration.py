"""`pardnn.calibration`: the least-squares link fit and device speeds, on synthetic timings (numpy only)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pardnn.calibration import FAST_BANDWIDTH, calibrated_cluster, fit_link, speeds
from pardnn.cluster import cluster_from_dict

SIZES = [4 << 10, 256 << 10, 2 << 20, 8 << 20]


def timings(latency, bandwidth, overhead=0.0, counts=(1, 4), noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    xs, cs, ts = [], [], []
    for n in SIZES:
        for c in counts:
            xs.append(n)
            cs.append(c)
            ts.append(overhead + c * (latency + n / bandwidth) + noise * rng.standard_normal())
    return xs, ts, cs


@pytest.mark.parametrize("latency,bandwidth,overhead", [(25.0, 12000.0, 0.0), (150.0, 1100.0, 500.0),
                                                        (0.0, 300.0, 40.0)])
def test_the_fit_recovers_latency_bandwidth_and_step_overhead_exactly(latency, bandwidth, overhead):
    xs, ts, cs = timings(latency, bandwidth, overhead)
    f = fit_link(xs, ts, cs)
    assert f.latency_us == pytest.approx(latency, abs=1e-6)
    assert f.bandwidth_bytes_per_us == pytest.approx(bandwidth, rel=1e-9)
    assert f.overhead_us == pytest.approx(overhead, abs=1e-6)
    assert f.max_residual_us < 1e-6 and f.slope_positive
    assert f.sizes == tuple(xs) and f.counts == tuple(cs)


def test_with_noise_the_fit_stays_close_and_reports_its_residuals():
    xs, ts, cs = timings(100.0, 1000.0, 400.0, noise=20.0, seed=3)
    f = fit_link(xs, ts, cs)
    assert f.bandwidth_bytes_per_us == pytest.approx(1000.0, rel=0.02)
    assert abs(f.latency_us - 100.0) < 40 and abs(f.overhead_us - 400.0) < 80
    fitted = [f.overhead_us + c * (f.latency_us + n / f.bandwidth_bytes_per_us) for n, c in zip(xs, cs)]
    assert np.allclose(np.array(ts) - fitted, f.residuals_us)
    assert 0 < f.max_residual_us < 200 and f.relative_residual == pytest.approx(f.max_residual_us / max(ts))


def test_the_fit_weighs_times_relatively_so_small_transfers_set_the_latency():
    # 5% noise in proportion to each time, as measured steps have: the 8 MiB steps' noise (about 1 ms) would
    # swamp a 60 us latency in an absolute fit; relative to each time, the 4-byte steps set it
    rng = np.random.default_rng(7)
    xs, cs, ts = [], [], []
    for n in [4, 4 << 10, 256 << 10, 2 << 20, 8 << 20]:
        for c in (1, 4):
            xs.append(n)
            cs.append(c)
            ts.append((200.0 + c * (60.0 + n / 2000.0)) * (1 + 0.05 * rng.standard_normal()))
    f = fit_link(xs, ts, cs)
    assert f.latency_us == pytest.approx(60.0, rel=0.3)
    assert f.bandwidth_bytes_per_us == pytest.approx(2000.0, rel=0.1)


def test_one_count_puts_the_whole_intercept_in_the_latency():
    xs, ts, _ = timings(30.0, 500.0, 0.0, counts=(1,))
    f = fit_link(xs, ts)
    assert f.overhead_us == 0.0 and f.latency_us == pytest.approx(30.0) and f.bandwidth_bytes_per_us == \
        pytest.approx(500.0)


def test_bytes_that_cost_nothing_give_a_free_link_and_times_never_go_negative():
    f = fit_link([4096, 8 << 20, 4096, 8 << 20], [12.0, 11.0, 13.0, 12.5])      # no slope to find
    assert f.bandwidth_bytes_per_us == FAST_BANDWIDTH and not f.slope_positive
    g = fit_link([1000, 2000, 3000], [0.0, 5.0, 10.0])                           # a negative intercept
    assert g.latency_us == 0.0 and g.overhead_us == 0.0 and g.bandwidth_bytes_per_us > 0


@pytest.mark.parametrize("sizes,times,counts,msg", [
    ([1000, 1000], [1.0, 2.0], None, "at least two sizes"),
    ([1000, 2000], [1.0], None, "same length"),
    ([1000, 2000], [1.0, math.nan], None, "finite"),
    ([1000, 2000], [1.0, 2.0], [0, 1], "counts at least 1"),
])
def test_bad_timings_are_refused(sizes, times, counts, msg):
    with pytest.raises(ValueError, match=msg):
        fit_link(sizes, times, counts)


def test_the_calibrated_cluster_has_measured_speeds_links_and_median_defaults():
    fits = [[None, fit_link(*timings(20.0, 1000.0))], [fit_link(*timings(40.0, 3000.0)), None]]
    assert speeds([10.0, 5.0]) == [1.0, 2.0]
    c = calibrated_cluster(["/job:w/task:0/device:GPU:0", "/job:w/task:1/device:GPU:0"], [10.0, 5.0], fits,
                           [None, 1 << 30])
    assert not c.has_transfer_cpu                                 # GPUs' links are as fitted
    assert [d.speed for d in c.devices] == [1.0, 2.0] and c.devices[1].memory_bytes == 1 << 30
    assert c.latency[0, 1] == pytest.approx(fits[0][1].latency_us, rel=1e-9)
    assert c.bandwidth[1, 0] == pytest.approx(3000.0, rel=1e-6)
    assert c.latency_us == pytest.approx((fits[0][1].latency_us + fits[1][0].latency_us) / 2)
    again = cluster_from_dict(c.to_dict())                        # what `pardnn calibrate -o` writes loads back
    assert again.to_dict() == c.to_dict()
    with pytest.raises(ValueError, match="positive"):
        speeds([1.0, 0.0])


def test_cpu_tasks_links_run_half_their_fitted_time_on_each_end():
    """Two CPU tasks: gRPC's time is the cores' work; an idle transfer is still predicted as measured."""
    fits = [[None, fit_link(*timings(20.0, 1000.0))], [fit_link(*timings(40.0, 3000.0)), None]]
    names = ["/job:w/replica:0/task:0/device:CPU:0", "/job:w/replica:0/task:1/device:CPU:0"]
    c = calibrated_cluster(names, [10.0, 10.0], fits)
    assert c.has_transfer_cpu and c.latency[0, 1] == 0.0 and c.bandwidth[0, 1] == FAST_BANDWIDTH
    assert c.transfer_cpu[0, 1] == pytest.approx(fits[0][1].latency_us / 2)
    assert c.transfer_cpu_bandwidth[1, 0] == pytest.approx(2 * 3000.0, rel=1e-6)
    # one idle transfer of 1 MB from task 0 to task 1: send + link + receive = the fitted time
    from pardnn.ir import GraphBuilder
    from pardnn.machine import simulate
    b = GraphBuilder("t")
    b.add_node("a", time_us=0.0, output_bytes=1_000_000)
    b.add_node("b", time_us=0.0)
    b.add_edge("a", "b")
    s = simulate(b.build(), c, [0, 1])
    assert s.makespan_us == pytest.approx(fits[0][1].latency_us + 1_000_000 / 1000.0, rel=1e-5)
    assert cluster_from_dict(c.to_dict()).to_dict() == c.to_dict()
    # CPUs of one process (logical devices) pass tensors by reference: as fitted
    local = calibrated_cluster(["/device:CPU:0", "/device:CPU:1"], [10.0, 10.0], fits)
    assert not local.has_transfer_cpu and local.latency[0, 1] == pytest.approx(fits[0][1].latency_us)
