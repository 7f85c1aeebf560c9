"""`pardnn.pipeline` and `pardnn.partitioner`: passes composed, verified between, named when they fail."""

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


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases())
def test_pipeline_places_every_node_keeps_groups_and_is_deterministic(case):
    g, c = case
    opts = PardnnOptions(refine_evals=300)       # the default budget on graphs this small is up to 20,000
    plan, state, _ = run_pardnn(g, c, opts)
    assert plan.assignment.shape == (g.num_nodes,)
    assert ((plan.assignment >= 0) & (plan.assignment < c.num_devices)).all()
    _groups_whole_and_pins_kept(g, plan.assignment)
    assert run_pardnn(g, c, opts)[0].same_as(plan)
    # never slower than putting everything on one device (the mapping tries that plan)
    one = simulate(g, c, np.zeros(g.num_nodes, dtype=np.int64) if not (g.pinned > 0).any() else plan.assignment,
                   memory=False).makespan_us
    assert simulate(g, c, plan, memory=False).makespan_us <= one + 1e-9


# ---------------------------------------------------------------------------
# Memory (step 2)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Broken:
    name: ClassVar[str] = "broken"

    def __call__(self, g, cluster, state):
        raise ZeroDivisionError("oops")


@dataclass(frozen=True)
class _Splitter:
    name: ClassVar[str] = "splitter"

    def __call__(self, g, cluster, state):
        return state.replace(assignment=np.arange(g.num_nodes) % cluster.num_devices)


def test_a_failing_pass_is_named_with_those_before_it():
    g = fork()
    with pytest.raises(PassError, match="pass 'broken' failed after slice, map: ZeroDivisionError: oops"):
        Pipeline((Slice(), Map(), _Broken())).run(g, free_links(2))


def test_verification_between_passes_catches_a_split_group():
    g = tiny([("a", 1, 0, {"colocation": "g"}), ("b", 1, 0, {"colocation": "g"})], [("a", "b")])
    with pytest.raises(PassError, match="pass 'splitter' failed: ValueError: colocation group 'g' is split"):
        Pipeline((_Splitter(),)).run(g, free_links(2))


def test_time_passes_table():
    g = fork()
    _, timings = Pipeline((Slice(), Map(), Refine())).run(g, free_links(2))
    text = format_timings(timings)
    assert [t.name for t in timings] == ["slice", "map", "refine"]
    assert "total" in text and "refine" in text
