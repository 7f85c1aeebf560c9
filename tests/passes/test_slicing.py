"""`pardnn.passes.slicing`: critical-path slicing on hand-drawn graphs."""

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


def test_slicing_takes_successive_critical_paths_then_the_rest():
    g = fork()
    st_ = Slice()(g, free_links(2), PlanState())
    cl = dict(zip(g.names, st_.paths.path.tolist()))
    assert st_.paths.num_primary == 2 and st_.paths.num_paths == 3
    assert [n for n in g.names if cl[n] == 0] == ["a", "b", "c", "d"]
    assert [n for n in g.names if cl[n] == 1] == ["e", "f"]
    assert cl["g"] == 2


def test_slicing_counts_communication_on_the_path():
    """
    x(5) --(big tensor)--> y(1)        with 1 ms to send the tensor, x -> y is the critical path
    z(5) -------------------> w(2)     without communication z -> w (7) would be
    """
    g = tiny([("x", 5, 10_000), ("y", 1), ("z", 5), ("w", 2)], [("x", "y"), ("z", "w")])
    c = Cluster.homogeneous(2, latency_us=0.0, bandwidth_bytes_per_us=10.0)
    cl = Slice()(g, c, PlanState()).paths.path
    assert cl[g.id("x")] == cl[g.id("y")] == 0
    cl_free = Slice()(g, free_links(2), PlanState()).paths.path
    assert cl_free[g.id("z")] == cl_free[g.id("w")] == 0


# ---------------------------------------------------------------------------
# Mapping
# ---------------------------------------------------------------------------
