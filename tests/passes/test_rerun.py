"""The ``rerun`` pass: the passes before it again at the default effort, so ``--effort best`` is never worse."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardnn.cluster import Cluster
from pardnn.machine import simulate
from pardnn.partitioner import PardnnOptions, default_spec, run
from pardnn.passes.keep_best import final_key
from pardnn.passes.rerun import Rerun
from pardnn.pipeline import PlanState, parse_pipeline

from ..helpers import tiny
from .common import random_cases
from .test_fewer import found, star


def test_it_runs_the_default_effort_of_the_passes_before_it():
    """At ``best`` it runs what ``--effort default`` runs, with the user's other options: the same spec."""
    for kw in ({}, {"refine_evals": 40}, {"memory_heuristic": "residual"}, {"comm_weight": 0.5}):
        p = parse_pipeline(default_spec(PardnnOptions(effort="best", **kw)))
        i = p.labels.index("rerun")
        inner = p.passes[i].inside(p, i).keywords["inner"]
        assert str(inner) == default_spec(PardnnOptions(**kw)), kw
        assert inner.within == "rerun"
    # a list of schedulers of the user's own is kept; an effort's preset becomes this effort's
    p = parse_pipeline("slice,map,seed{schedulers=heft},refine{max_evals=5,effort=best},rerun,best")
    assert str(p.passes[4].inside(p, 4).keywords["inner"]) == "slice,map,seed{schedulers=heft},refine{max_evals=5},best"
    assert "rerun" not in default_spec(PardnnOptions()) and "rerun" not in default_spec(PardnnOptions(effort="fast"))
    assert "rerun" not in default_spec(PardnnOptions(effort="best", seed=False))     # no best pass to weigh it


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases(), st.sampled_from([None, 0.6, 1.0]))
def test_best_is_never_worse_than_default(case, share):
    """The property the pass is for: the best effort's plan is never worse than the default effort's, in the
    order the user is handed plans (fits first, then the shorter step), memory limits or not."""
    g, c = case
    if share is not None:
        from pardnn.machine import single_device_peak
        c = Cluster.homogeneous(c.num_devices, memory_bytes=max(1, int(share * single_device_peak(g))))
    bounded = bool(np.isfinite(c.capacity).any())
    got = [final_key(simulate(g, c, run(g, c, PardnnOptions(effort=e))[0].assignment, memory=bounded), bounded)
           for e in ("default", "best")]
    assert got[1] <= got[0]


def drawn():
    """A random graph (numpy seed 55) where the best effort without this pass gave 246.3 us on 3 devices and
    the default effort 228.8 us: the best effort's other starts led its refinement elsewhere."""
    t = [40, 10, 1, 40, 10, 3, 10, 1, 40, 10, 3, 3, 1, 3, 10, 3, 40, 3, 40, 10, 10, 10, 1, 10, 10, 40, 40, 10, 10, 1, 3]
    b = [400000, 400000, 100, 100, 5000, 400000, 50000, 400000, 100, 5000, 5000, 50000, 100, 5000, 100, 400000,
         50000, 50000, 400000, 5000, 5000, 50000, 100, 100, 5000, 50000, 50000, 100, 5000, 400000, 5000]
    edges = [(0, 1), (1, 2), (0, 3), (1, 4), (3, 4), (4, 5), (1, 5), (3, 6), (5, 6), (5, 7), (5, 8), (6, 8), (2, 9),
             (1, 9), (1, 10), (9, 11), (1, 11), (10, 12), (0, 12), (0, 13), (4, 14), (3, 14), (9, 15), (15, 16),
             (12, 16), (14, 17), (16, 18), (13, 18), (5, 19), (2, 19), (13, 20), (9, 20), (5, 21), (17, 22),
             (21, 22), (17, 23), (11, 23), (10, 24), (8, 25), (9, 26), (4, 26), (23, 27), (6, 28), (15, 28),
             (18, 29), (21, 30), (23, 30)]
    return tiny([(f"n{i}", float(t[i]), b[i]) for i in range(len(t))], [(f"n{a}", f"n{z}") for a, z in edges])


def test_where_the_default_effort_is_shorter_best_keeps_its_plan():
    g, c = drawn(), Cluster.homogeneous(3)
    default = simulate(g, c, run(g, c, PardnnOptions())[0].assignment).makespan_us
    best = simulate(g, c, run(g, c, PardnnOptions(effort="best"))[0].assignment).makespan_us
    without = default_spec(PardnnOptions(effort="best")).replace(",rerun", "")
    alone = simulate(g, c, run(g, c, PardnnOptions(pipeline=without))[0].assignment).makespan_us
    assert best <= min(default, alone) + 1e-9
    if alone > default:       # 246.3 against 228.8 us when it was written
        assert best == pytest.approx(default)


def test_the_default_plan_is_kept_where_it_is_shorter():
    """A hand-made pipeline whose own plan is poor (no refinement) keeps the rerun's refined one."""
    g, c = found(), Cluster.homogeneous(4)
    st_, _ = parse_pipeline("slice,map,rerun,best").run(g, c, PlanState())
    assert st_.stats["rerun"]["makespan_us"] <= simulate(g, c, st_.assignment).makespan_us + 1e-9
    # outside a pipeline: the default pipeline of its effort
    alone = Rerun()(g, c, PlanState(assignment=np.zeros(g.num_nodes, np.int64)))
    default, _, _ = run(g, c, PardnnOptions())
    assert alone.starts[-1][0] == "rerun"
    assert np.array_equal(alone.starts[-1][1], default.assignment)


def test_skips():
    g, c = star(), Cluster.homogeneous(4)
    st_, _ = parse_pipeline("slice,map,rerun").run(g, c, PlanState())
    assert st_.stats["rerun"] == {"skipped": "no best pass after it"}
    # four chains of 100 us on four devices: 100 us is the lower bound, nothing can beat it
    chains = tiny([(f"{x}{i}", 25.0, 8) for x in "abcd" for i in range(4)],
                  [(f"{x}{i}", f"{x}{i + 1}") for x in "abcd" for i in range(3)])
    st_, _ = parse_pipeline("slice,map,seed,refine,rerun,best").run(chains, c, PlanState())
    assert "no longer than the lower bound" in st_.stats["rerun"]["skipped"]
    with pytest.raises(ValueError, match="unknown effort"):
        Rerun(effort="huge")
