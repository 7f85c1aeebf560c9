"""Single device: every op on the device with the most memory (ties: the fastest, then the lowest index).

Pinned units still go to their pinned device. The placement is returned even
when it does not fit; the simulator reports the overflow.
"""

from __future__ import annotations

import numpy as np

from ..cluster import Cluster
from ..ir import OpGraph
from ..placement import Placement
from .common import placement, unit_pins


def best_device(cluster: Cluster) -> int:
    """The device with the most memory, then the fastest, then the lowest index."""
    K = cluster.num_devices
    return int(min(range(K), key=lambda d: (-cluster.capacity[d], -cluster.speed[d], d)))


def place(g: OpGraph, cluster: Cluster) -> Placement:
    """All ops on `best_device`, except pinned units."""
    pins = np.asarray(unit_pins(g, cluster.num_devices), dtype=np.int64)
    unit_dev = np.where(pins >= 0, pins, best_device(cluster))
    return placement(g, cluster, unit_dev[g.unit] if g.num_nodes else np.zeros(0), "single")
