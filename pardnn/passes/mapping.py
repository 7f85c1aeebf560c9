"""Mapping (ParDNN step 1.2): clusters to devices.

* Primary cluster ``p`` goes to its own device (the heaviest primary to the
  fastest device on a heterogeneous cluster).
* Initial merging: a secondary cluster whose communication with one
  neighbouring cluster outweighs its own work has no parallelism gain and
  joins that neighbour.
* Level-aware load balancing: every other secondary cluster, heaviest first,
  goes to the device with the least load within the cluster's span of
  topological levels, counted with one Fenwick tree per device (O(log L) per
  query), plus (``comm_weight``) the communication it would incur there.
  ParDNN breaks ties by that communication; ``comm_weight=0`` is exactly
  that, and the default 1.0 weighs it in fully, which places better on
  communication-heavy graphs.
* Colocation groups then go whole to the device holding most of their work
  and inbound communication; pinned groups to their pin.

Going beyond the paper, the pass maps onto the fastest ``k`` devices for
every ``k`` up to K (``try_fewer_devices``): when communication dominates,
fewer devices are faster, and one device is the limit. Each candidate is
simulated (SPEC §1) and the fastest kept; with memory limits, the one
that overflows least (then the fastest), which step 2 then repairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..analysis import topological_levels
from ..baselines.mtopo import unit_pins
from ..cluster import Cluster
from ..costs import CostModel
from ..evaluate import Evaluator
from ..ir import OpGraph
from .memory import shortfall_key
from ..pipeline import PlanState
from ._kernels import map_clusters, resolve_units


def device_order(cluster: Cluster) -> np.ndarray:
    """Devices fastest first (then most memory, then index)."""
    return np.lexsort((np.arange(cluster.num_devices), -cluster.capacity, -cluster.speed))


def map_onto(g: OpGraph, cluster: Cluster, state: PlanState, k: int, *, comm_weight: float,
             merge_factor: float, cm: CostModel | None = None) -> np.ndarray:
    """Device per node when the first ``k`` primary clusters anchor the ``k`` fastest devices."""
    cm = cm or CostModel.build(g, cluster)
    cl = state.clustering
    devices = device_order(cluster)[:k]
    prim_work = np.bincount(cl.cluster, weights=cm.w, minlength=cl.num_clusters)[:k]
    prim_dev = np.empty(k, dtype=np.int64)
    prim_dev[np.argsort(-prim_work, kind="stable")] = np.arange(k)   # heaviest primary -> fastest device
    local = map_clusters(cl.cluster, k, cl.num_clusters, topological_levels(g), cm.w, g.edge_src, g.edge_dst, cm.c,
                         prim_dev, k, comm_weight, merge_factor)
    dev = devices[local]
    pins = unit_pins(g)
    return resolve_units(dev, g.unit, int(g.unit.max()) + 1 if g.num_nodes else 0, cm.w, g.edge_src, g.edge_dst,
                         cm.c, pins, cluster.num_devices)


@dataclass(frozen=True)
class Map:
    name: ClassVar[str] = "map"
    comm_weight: float = 1.0
    """Weight of the communication a cluster would incur on a device, next to that device's load."""
    merge_factor: float = 1.0
    """Merge a secondary cluster into a neighbour when communication x this >= its work."""
    try_fewer_devices: bool = True
    """Also map onto the fastest 1..K-1 devices and keep the fastest plan."""

    def __call__(self, g: OpGraph, cluster: Cluster, state: PlanState) -> PlanState:
        if state.clustering is None:
            raise ValueError("map needs a clustering: run the slice pass first")
        cm = CostModel.build(g, cluster)
        ev = Evaluator(g, cluster)
        P = max(1, state.clustering.num_primary)
        ks = range(1, P + 1) if self.try_fewer_devices else [P]
        bounded = bool(np.isfinite(cluster.capacity).any())
        best = None
        tried = {}
        for k in ks:
            dev = map_onto(g, cluster, state, k, comm_weight=self.comm_weight, merge_factor=self.merge_factor, cm=cm)
            s = ev.schedule(dev, memory=bounded)
            # with memory limits: least overflow first, then the shortest step
            key = shortfall_key(s) if bounded else (0.0, float(s.makespan_us))
            tried[k] = float(s.makespan_us)
            if best is None or key < best[0]:
                best = (key, k, dev, float(s.makespan_us))
        key, k, dev, ms = best
        return state.replace(assignment=dev, makespan_us=ms).with_stats(
            self.name, devices_used=int(np.unique(dev).size), k_chosen=k, overflow_bytes=key[0],
            makespan_by_k={int(a): float(b) for a, b in tried.items()})
