"""`pardnn.plan`: the device-count range, the lower bound, and the capacity search's reuse of its brackets."""

from __future__ import annotations

import pytest

from pardnn.cluster import Cluster
from pardnn.machine import single_device_peak
from pardnn.plan import CapacitySearch, PlanSettings, Probe, memory_lower_bound, parse_device_counts, plan_devices

from .helpers import tiny


def threshold(need: int, calls: list[int]):
    """A probe that fits from ``need`` bytes up, recording each capacity it is asked about."""
    def probe(c: int) -> Probe:
        calls.append(c)
        return Probe(c, c >= need, 1.0, min(c, need))
    return probe


def test_device_counts():
    assert parse_device_counts("1..4") == (1, 2, 3, 4)
    assert parse_device_counts("8,1,2,4,2") == (1, 2, 4, 8)
    assert parse_device_counts(" 3 ") == (3,)
    for bad in ("0..3", "4..2", "a", "1,,2", "1..x", "1..5000", "1..100"):
        with pytest.raises(ValueError):
            parse_device_counts(bad)


def test_search_bisects_to_the_tolerance_and_never_answers_below_the_need():
    calls: list[int] = []
    s = CapacitySearch(threshold(700, calls), lower=100, rel_tol=0.05)
    found = s.run([None, lambda: 1000])
    assert found is not None and found.fits
    assert 700 <= found.capacity <= 700 / 0.95 + 1
    assert s.bracket == (100, 1000) and s.probes == len(calls) == len(set(calls))


def test_search_reuses_the_previous_answer_as_its_upper_end():
    """The previous count's answer, already the answer here: two probes (it, and one tolerance under it)."""
    calls: list[int] = []
    s = CapacitySearch(threshold(1000, calls), lower=100, rel_tol=0.05)
    unlimited_asked = []
    found = s.run([1000, lambda: unlimited_asked.append(1) or 5000], just_under=True)
    assert found.capacity == 1000 and calls == [1000, 950] and not unlimited_asked
    # a known fit (the placement at the given memory) is reused without a probe, and a tighter candidate tried
    calls.clear()
    s = CapacitySearch(threshold(300, calls), lower=100, rel_tol=0.05, known={2000: Probe(2000, True, 1.0, 300)})
    found = s.run([400, lambda: 5000], just_under=True)
    assert calls[0] == 400 and 2000 not in calls and found.capacity <= 300 / 0.95 + 1


def test_search_keeps_its_bound_sound_when_the_previous_answer_does_not_fit():
    """pardnn is a heuristic: where the previous count's answer does not fit, it raises the lower end and the
    next candidate (the peak at unlimited memory) is the upper end."""
    calls: list[int] = []
    s = CapacitySearch(threshold(1200, calls), lower=100, rel_tol=0.05)
    found = s.run([1000, lambda: 1500], just_under=True)
    assert calls[:2] == [1000, 1500]
    assert s.bracket == (1000, 1500) and 1200 <= found.capacity <= 1200 / 0.95 + 1
    # nothing known to fit: doubling from the lower end
    calls.clear()
    s = CapacitySearch(threshold(900, calls), lower=100, rel_tol=0.05)
    assert s.run([None]).capacity >= 900 and calls[:4] == [200, 400, 800, 1600]
    assert CapacitySearch(threshold(10 ** 9, []), lower=100).run([None]) is None


def test_lower_bound_is_below_every_fit():
    g = tiny([("v", 1, 0, {"persistent_bytes": 4000, "colocation": "var"}), ("r", 1, 0, {"colocation": "var"}),
              ("a", 10, 1000), ("b", 5, 1000), ("c", 5, 1000), ("d", 1, 1000)],
             [("v", "r"), ("r", "b"), ("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    assert memory_lower_bound(g, 1) == memory_lower_bound(g, 8) == 4000     # the group "var" holds 4000 B
    heavy = tiny([("w", 1, 3000, {"persistent_bytes": 4000}), ("x", 1, 0, {"persistent_bytes": 4000}), ("y", 1, 10)],
                 [("w", "y")])
    assert memory_lower_bound(heavy, 1) == 8000 and memory_lower_bound(heavy, 4) == 4000 + 3000   # w and its output
    plan = plan_devices(g, Cluster.homogeneous(3), PlanSettings(counts=(1, 2, 3)))
    assert plan.single_peak_bytes == single_device_peak(g) == 7000
    assert [r.k for r in plan.rows] == [1, 2, 3] and all(r.fits for r in plan.rows)
    for r in plan.rows:
        assert r.lower_bound_bytes <= r.min_memory_bytes <= 7000


def test_the_default_counts_stop_at_a_smaller_clusters_size():
    """``plan_devices(g, Cluster.homogeneous(4, ...))`` raised "fewer than 8" (the default counts are 1..8),
    where ``pardnn plan --cluster`` caps them; counts given explicitly are still checked."""
    g = tiny([("a", 10, 1000), ("b", 5, 1000), ("c", 5, 1000), ("d", 1, 1000)],
             [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    plan = plan_devices(g, Cluster.homogeneous(4), PlanSettings(search=False))
    assert [r.k for r in plan.rows] == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="the cluster has 4 devices, fewer than 6"):
        plan_devices(g, Cluster.homogeneous(4), PlanSettings(counts=(2, 6)))


def test_pins_make_small_counts_unavailable():
    g = tiny([("a", 10, 1000), ("b", 5, 1000, {"pinned": 2}), ("c", 1, 1000)], [("a", "b"), ("b", "c")])
    plan = plan_devices(g, Cluster.homogeneous(3, memory_bytes=10_000), PlanSettings(counts=(1, 2, 3)))
    # K=1 too (a new user's trial: it said "fits", and "fewest devices that fit: K=1", which partition refuses);
    # its step, pins ignored, stays the reference of the speedups
    assert [r.available for r in plan.rows] == [False, False, True]
    assert all("pins need 3 devices" in r.note for r in plan.rows[:2]) and plan.rows[2].fits
    assert [plan.speedup_bound(r) is None for r in plan.rows] == [True, True, False]
    assert plan.rows[2].speedup == pytest.approx(plan.single_step_us / plan.rows[2].step_us)
    from pardnn.cli.plan import plan_table
    text = plan_table(plan)
    assert "fewest devices that fit: K=3" in text
    alone = plan_devices(g, Cluster.homogeneous(3, memory_bytes=10_000), PlanSettings(counts=(2,)))
    assert "no count asked for has as many devices as the graph's pins need" in plan_table(alone)


def test_candidates_follow_the_previous_answers():
    from pardnn.plan import _candidates

    assert _candidates(None, [], 2, 10, 0.05) == []
    # still falling (1000 at K=1, 520 at K=2): the answer scaled by the counts, a little above it, then 520
    assert _candidates(520, [(1, 1000), (2, 520)], 4, 10, 0.05) == [260, 286, 338, 442, 520]
    # never under the lower bound
    assert _candidates(520, [(1, 1000), (2, 520)], 4, 400, 0.05)[0] == 400
    # stopped falling (within the tolerance): the previous answer only
    assert _candidates(500, [(2, 520), (3, 500)], 4, 10, 0.05) == [500]
