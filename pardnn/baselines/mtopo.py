"""m-TOPO (Baechi, SoCC 2020): fill devices in topological order up to a memory share.

Ops are taken in a topological order; a colocation group is placed whole when
its first member comes up. Each device is filled up to its share of the
graph's static memory (persistent + outputs + temporaries; capacity-weighted
across devices) before the next device is opened. A group that would overflow
a device's capacity skips to the next device with room. Pinned ops, and the
groups that hold them, go to their device regardless of the order.
"""

from __future__ import annotations

import numpy as np

from ..analysis import topological_order
from ..cluster import Cluster
from ..ir import OpGraph
from ..placement import Placement
from .common import capacity_shares


def static_memory(g: OpGraph) -> np.ndarray:
    """A per-node upper bound on what it ever holds: persistent + all outputs + temp."""
    return (g.persistent_bytes + g.alloc_bytes_total + g.temp_bytes).astype(np.float64)


def unit_order(g: OpGraph) -> np.ndarray:
    """Placement units (groups contracted) in order of their first member in a topological order."""
    topo = topological_order(g)
    units = g.unit[topo]
    _, first = np.unique(units, return_index=True)
    return units[np.sort(first)]


def place(g: OpGraph, cluster: Cluster) -> Placement:
    """Place ``g`` with m-TOPO. Always returns a placement; the simulator judges feasibility."""
    K = cluster.num_devices
    mem = static_memory(g)
    unit_mem = np.bincount(g.unit, weights=mem)
    pins = g.unit_pin
    cap = cluster.capacity
    share = np.minimum(float(unit_mem.sum()) * capacity_shares(cluster), cap)
    used = np.zeros(K)
    unit_dev = np.full(unit_mem.size, -1, dtype=np.int64)
    # Pinned units first: they take their device's memory whatever the order.
    for u in np.flatnonzero(pins >= 0).tolist():
        d = int(min(pins[u], K - 1))
        unit_dev[u] = d
        used[d] += unit_mem[u]
    current = 0
    for u in unit_order(g).tolist():
        if unit_dev[u] >= 0:
            continue
        m = unit_mem[u]
        while current < K - 1 and used[current] + m > share[current] and used[current] > 0:
            current += 1
        d = current
        if used[d] + m > cap[d]:
            room = np.flatnonzero(used + m <= cap)
            d = int(room[0]) if room.size else int(np.argmax(cap - used))
        unit_dev[u] = d
        used[d] += m
    return Placement(unit_dev[g.unit], cluster.names, g.name, meta={"method": "m-topo"})
