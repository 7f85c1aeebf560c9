"""Shared fixtures of the pass tests: hand-drawn graphs and random cases with their invariants."""

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


def free_links(k: int, **kw) -> Cluster:
    """Communication costs nothing: only compute matters."""
    return Cluster.homogeneous(k, latency_us=0.0, bandwidth_bytes_per_us=1e12, **kw)


def fork():
    """
        a(4) --> b(6) --> c(4) --> d(2)        critical path a b c d = 16
          |                        ^
          +----> e(3) --> f(3) ----+           next path e f = 6
          |
          +----> g(1)                          what is left: g
    levels: a 0 | b e g 1 | c f 2 | d 3
    """
    return tiny([("a", 4), ("b", 6), ("c", 4), ("d", 2), ("e", 3), ("f", 3), ("g", 1)],
                [("a", "b"), ("b", "c"), ("c", "d"), ("a", "e"), ("e", "f"), ("f", "d"), ("a", "g")])


# ---------------------------------------------------------------------------
# Slicing
# ---------------------------------------------------------------------------


@st.composite
def random_cases(draw):
    n = draw(st.integers(2, 24))
    k = draw(st.integers(2, 4))
    b = GraphBuilder("r")
    for i in range(n):
        b.add_node(f"n{i}", time_us=draw(st.sampled_from([0.0, 1.0, 3.0, 10.0, 40.0])),
                   output_bytes=draw(st.sampled_from([0, 100, 5000, 50000])),
                   persistent_bytes=draw(st.sampled_from([0, 0, 0, 2000])),
                   colocation=draw(st.sampled_from([None] * 5 + ["g1", "g2"])),
                   pinned=draw(st.sampled_from([None] * 8 + [0])))
    for j in range(1, n):
        for i in draw(st.lists(st.integers(0, j - 1), max_size=3, unique=True)):
            b.add_edge(f"n{i}", f"n{j}", control=draw(st.booleans()) and draw(st.booleans()))
    g = b.build()
    lat = draw(st.sampled_from([0.0, 5.0, 25.0]))
    bw = draw(st.sampled_from([100.0, 12000.0]))
    return g, Cluster.homogeneous(k, latency_us=lat, bandwidth_bytes_per_us=bw)


def _groups_whole_and_pins_kept(g, dev):
    for members in g.groups:
        assert len(set(dev[members].tolist())) <= 1
    pinned = np.flatnonzero(g.pinned >= 0)
    assert (dev[pinned] == g.pinned[pinned]).all()
