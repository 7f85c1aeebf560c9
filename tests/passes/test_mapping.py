"""`pardnn.passes.mapping`: level-aware mapping on hand-drawn graphs."""

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


def test_level_aware_balancing_sends_a_cluster_where_its_levels_are_least_loaded():
    """g (level 1) sees loads b=6 on device 0 and e=3 on device 1 at its level: it goes to device 1."""
    g = fork()
    c = free_links(2)
    state = Slice()(g, c, PlanState())
    dev = dict(zip(g.names, map_onto(g, c, state, 2, comm_weight=0.0, merge_factor=1.0).tolist()))
    assert dev["a"] == dev["b"] == dev["c"] == dev["d"]
    assert dev["e"] == dev["f"] != dev["a"]
    assert dev["g"] == dev["e"]


def test_secondary_cluster_without_parallelism_gain_merges_with_its_neighbour():
    """With 10 us per cut edge, g (1 us of work) talks more to a's cluster than it could overlap: merged."""
    g = fork()
    c = Cluster.homogeneous(2, latency_us=10.0, bandwidth_bytes_per_us=1e12)
    state = Slice()(g, c, PlanState())
    dev = map_onto(g, c, state, 2, comm_weight=0.0, merge_factor=1.0)
    assert dev[g.id("g")] == dev[g.id("a")]


def test_map_chooses_fewer_devices_when_communication_dominates():
    """Every cut edge costs 1 s: one device is fastest, and the mapping sees it."""
    g = fork()
    c = Cluster.homogeneous(4, latency_us=1e6)
    st_ = Map()(g, c, Slice()(g, c, PlanState()))
    assert st_.stats["map"]["k_chosen"] == 1 and len(set(st_.assignment.tolist())) == 1
    assert st_.makespan_us == pytest.approx(float(g.time_us.sum()))


def test_map_keeps_groups_whole_and_honours_pins():
    b = GraphBuilder("groups")
    for n, t, grp, pin in [("v", 1, "var", None), ("r1", 5, "var", None), ("x", 5, None, None),
                           ("r2", 5, "var", None), ("p", 1, None, 1)]:
        b.add_node(n, time_us=t, colocation=grp, pinned=pin)
    for s_, d in [("v", "r1"), ("v", "r2"), ("x", "r2"), ("r1", "p")]:
        b.add_edge(s_, d)
    g = b.build()
    c = free_links(2)
    st_ = Map()(g, c, Slice()(g, c, PlanState()))
    dev = dict(zip(g.names, st_.assignment.tolist()))
    assert dev["v"] == dev["r1"] == dev["r2"]
    assert dev["p"] == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases(), st.sampled_from([None, 0.4, 1.0]))
def test_map_is_the_same_on_any_number_of_threads(case, scale):
    """The candidate plans (every k up to K, groups kept and split) and their simulations run on threads at
    once: the plan, the alternatives and every figure are those of one thread."""
    from pardnn.machine import single_device_peak

    g, c = case
    if scale is not None:
        c = c.with_memory(max(1, int(scale * single_device_peak(g))))
    sliced = Slice()(g, c, PlanState())
    one, many = (Map(threads=t)(g, c, sliced) for t in (1, 3))
    assert np.array_equal(one.assignment, many.assignment) and one.makespan_us == many.makespan_us
    assert len(one.alternatives) == len(many.alternatives)
    assert all(np.array_equal(a, b) for a, b in zip(one.alternatives, many.alternatives))
    assert one.stats["map"] == many.stats["map"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases(), st.sampled_from([0.3, 0.5, 1.0]))
def test_under_memory_limits_map_keeps_the_candidate_that_overflows_least(case, scale):
    """Every k up to K (groups kept and split), simulated with memory: the plan kept is the least
    overflowing, then the shortest, then the smaller k (groups kept first)."""
    from pardnn.machine import single_device_peak

    g, c = case
    c = c.with_memory(max(1, int(scale * single_device_peak(g))))
    sliced = Slice()(g, c, PlanState())
    out = Map()(g, c, sliced)
    P = max(1, sliced.paths.num_primary)
    best = min((simulate(g, c, map_onto(g, c, sliced, k, comm_weight=1.0, merge_factor=1.0, split_groups=sg),
                         memory=True).shortfall_key(), k, sg)
               for sg in ((False, True) if g.group_names else (False,)) for k in range(1, P + 1))
    assert simulate(g, c, out.assignment, memory=True).shortfall_key() == best[0]
    assert (out.stats["map"]["k_chosen"], out.stats["map"]["groups_split"]) == best[1:]


def test_a_pin_outside_the_cluster_is_an_error_naming_the_node_not_a_crash():
    """A library caller that skips the API's checks: the map pass simulates its candidates through the
    checked path, so a pin beyond the last device is a PlacementError naming the node (an unchecked kernel
    call read and wrote out of bounds)."""
    from pardnn.errors import PlacementError

    b = GraphBuilder("pins")
    for i in range(6):
        b.add_node(f"n{i}", time_us=5, pinned=5 if i == 3 else None)
    for i in range(5):
        b.add_edge(f"n{i}", f"n{i + 1}")
    g = b.build()
    c = Cluster.homogeneous(2)
    sliced = Slice()(g, c, PlanState())
    for _ in range(50):
        with pytest.raises(PlacementError, match="n3"):
            Map(threads=1)(g, c, sliced)


# ---------------------------------------------------------------------------
# Refinement
# ---------------------------------------------------------------------------


def test_heterogeneous_devices_get_the_heaviest_path():
    """A fast device (speed 4) and a slow one: the critical path goes to the fast one."""
    g = fork()
    c = Cluster((Device("slow", None, 1.0), Device("fast", None, 4.0)), 0.0, 1e12)
    plan, _, _ = run_pardnn(g, c)
    assert plan.assignment[g.id("b")] == 1
