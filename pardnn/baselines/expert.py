"""The "expert" split: a topological order cut into K contiguous chunks of equal compute.

This is what a person does by hand (pipeline-style model parallelism): walk
the ops in a topological order (`pardnn.analysis.topological_order`, the
graph's own order where it allows) and fill device 0, then device 1, and so
on, each up to its share of the compute, in proportion to its speed. A unit
(colocation group) goes where its first op falls, with its whole compute;
its later members follow it. Pinned units go to their device and are left
out of the chunks.

A chunk ends where the next unit's midpoint would pass the device's target;
the target is recomputed for every new chunk from the compute still to place
and the speeds of the devices still empty, so the last chunk is not left
with the rounding.

``m-expert`` also ends a chunk early when the next op has no memory room on
the device (`common.MemoryTracker`, along the same order), moving the
boundary forward; the remaining compute is then spread over the remaining
devices. The last device takes what is left, or an op goes to the device
with the least shortfall when even that one is full.

>>> from pardnn.ir import GraphBuilder
>>> from pardnn.cluster import Cluster
>>> b = GraphBuilder("chain")
>>> for i, t in enumerate([1, 1, 2, 4]):
...     _ = b.add_node(f"n{i}", time_us=t)
>>> for i in range(3):
...     b.add_edge(f"n{i}", f"n{i + 1}")
>>> place(b.build(), Cluster.homogeneous(2)).assignment.tolist()
[0, 0, 0, 1]
"""

from __future__ import annotations

import numpy as np

from ..analysis import topological_order
from ..cluster import Cluster
from ..ir import OpGraph
from ..placement import Placement
from .common import MemoryTracker, memory_limited, placement, unit_pins


def split(g: OpGraph, cluster: Cluster, *, memory: bool) -> np.ndarray:
    """Device of every op under the contiguous split (see the module docstring)."""
    K = cluster.num_devices
    unit_dev = unit_pins(g, K)
    unit_time = np.bincount(g.unit, weights=g.time_us).tolist() if g.num_nodes else []
    tracker = MemoryTracker(g, cluster, unit_dev) if memory and memory_limited(cluster) else None
    speed = cluster.speed.tolist()
    unit = g.unit.tolist()
    remaining = float(sum(t for u, t in enumerate(unit_time) if unit_dev[u] < 0))
    cur, load = 0, 0.0

    def target(d: int) -> float:
        return remaining * speed[d] / sum(speed[d:])

    goal = target(0)
    dev = [0] * g.num_nodes
    for v in topological_order(g).tolist():
        u = unit[v]
        d = unit_dev[u]
        if d < 0:
            w = unit_time[u]
            while cur < K - 1 and (load > 0 and load + w / 2 > goal
                                   or tracker is not None and not tracker.fits(v, cur)):
                remaining -= load
                cur, load = cur + 1, 0.0
                goal = target(cur)
            d = cur
            if tracker is not None and not tracker.fits(v, d):
                d = tracker.roomiest(v, range(K))
            if d == cur:
                load += w
            else:
                remaining -= w
            unit_dev[u] = d
        dev[v] = d
        if tracker is not None:
            tracker.place(v, d)
    return np.asarray(dev, dtype=np.int64)


def place(g: OpGraph, cluster: Cluster) -> Placement:
    """Contiguous chunks of a topological order, equal compute per unit of speed."""
    return placement(g, cluster, split(g, cluster, memory=False), "expert")


def place_m(g: OpGraph, cluster: Cluster) -> Placement:
    """The contiguous split, ending a chunk early where the next op has no memory room."""
    return placement(g, cluster, split(g, cluster, memory=True), "m-expert")
