"""Device-agnostic cost estimates used by the partitioner's passes before a placement exists.

Slicing and mapping need one weight per node and per edge, in microseconds:

* ``w[v]`` = ``time_us[v] / mean speed`` (the op's time on an average device);
* ``c[e]`` = mean latency + bytes x mean (1 / bandwidth) for a data edge, and
  the mean latency for a control edge: what the edge costs if its two ends
  end up on different devices.

>>> from pardnn.ir import GraphBuilder
>>> from pardnn.cluster import Cluster
>>> b = GraphBuilder("t"); _ = b.add_node("a", time_us=10, output_bytes=12000); _ = b.add_node("b", time_us=4)
>>> b.add_edge("a", "b")
>>> cm = CostModel.build(b.build(), Cluster.homogeneous(2, speed=2.0))
>>> cm.w.tolist(), cm.c.tolist()
([5.0, 2.0], [26.0])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cluster import Cluster
from .ir import OpGraph


@dataclass(frozen=True, eq=False)
class CostModel:
    w: np.ndarray   # float64 [V]
    c: np.ndarray   # float64 [E]

    @classmethod
    def build(cls, g: OpGraph, cluster: Cluster) -> "CostModel":
        w = g.time_us / float(cluster.speed.mean())
        lat = cluster.mean_latency
        inv_bw = cluster.mean_inv_bandwidth
        c = np.where(g.edge_control, lat, lat + g.edge_bytes * inv_bw)   # all 0 with one device
        return cls(w.astype(np.float64), c.astype(np.float64))
