"""Device-agnostic cost estimates used by the partitioner's passes before a placement exists.

Slicing, mapping and the list-scheduling baselines need one weight per node
and per edge, in microseconds, with one definition of the average device
(HEFT's, Topcuoglu et al. 2002):

* ``w[v]`` = ``time_us[v] x mean(1 / speed)``: the op's time averaged over
  the devices (`average_time_us`);
* ``c[e]`` = mean latency + bytes x mean (1 / bandwidth) over distinct device
  pairs for a data edge, and the mean latency for a control edge: what the
  edge costs if its two ends end up on different devices.

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

from ..cluster import Cluster
from ..ir import OpGraph


def device_order(cluster: Cluster) -> np.ndarray:
    """Devices fastest first (then most memory, then index): the order placers fill them in."""
    return np.lexsort((np.arange(cluster.num_devices), -cluster.capacity, -cluster.speed))


def average_time_us(g: OpGraph, cluster: Cluster) -> np.ndarray:
    """Each op's time averaged over the cluster's devices: ``time_us x mean(1 / speed)``."""
    return (g.time_us * float(np.mean(1.0 / cluster.speed))).astype(np.float64)


@dataclass(frozen=True, eq=False)
class CostModel:
    w: np.ndarray   # float64 [V]
    c: np.ndarray   # float64 [E]

    @classmethod
    def build(cls, g: OpGraph, cluster: Cluster) -> "CostModel":
        w = average_time_us(g, cluster)
        lat = cluster.mean_latency
        inv_bw = cluster.mean_inv_bandwidth
        c = np.where(g.edge_control, lat, lat + g.edge_bytes * inv_bw)   # all 0 with one device
        return cls(w.astype(np.float64), c.astype(np.float64))

    def comm_by_device(self, g: OpGraph, dev: np.ndarray, K: int) -> np.ndarray:
        """``A[v, d]``: the communication cost of ``v``'s edges whose other end is on device ``d``."""
        # one bincount over both ends, in np.add.at's order (so the sums are the same, bit for bit)
        idx = np.concatenate([g.edge_src * K + dev[g.edge_dst], g.edge_dst * K + dev[g.edge_src]])
        return np.bincount(idx, weights=np.concatenate([self.c, self.c]),
                           minlength=g.num_nodes * K).reshape(g.num_nodes, K)
