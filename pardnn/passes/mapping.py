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
* Colocation groups: a group whose members all lie in one path moves with
  it; a group split across paths is balanced as a cluster of its own; a
  pinned group goes to its pin.

Going beyond the paper, the pass maps onto the fastest ``k`` devices for
every ``k`` up to K (``try_fewer_devices``): when communication dominates,
fewer devices are faster, and one device is the limit. Each candidate is
simulated (SPEC §1) and the fastest kept; with memory limits, the one
that overflows least (then the fastest), which step 2 then repairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..analysis import topological_levels
from ..cluster import Cluster
from ..machine import CostModel, device_order, simulate
from ..ir import OpGraph
from ..pipeline import PlanState, check_pass_options
from ..units import is_number
from ._kernels import map_clusters, resolve_units, straddling
from ._threads import THREADS_FROM, map_in_order, workers_for


def group_aware_clusters(g: OpGraph, cluster_of: np.ndarray, num_primary: int,
                         w: np.ndarray) -> tuple[np.ndarray, int]:
    """Clusters for the mapping, with colocation groups that straddle slicing paths taken out.

    A group whose members all lie in one path stays there. A group split across paths becomes a
    secondary cluster of its own (its level span covers all its members), so load balancing places the
    group as a whole instead of one path dragging it along. Secondary clusters are renumbered heaviest
    first, the order load balancing takes them in. Returns (cluster per node, number of clusters).
    """
    unit = g.unit
    straddle = straddling(unit, g.num_units, cluster_of)
    out = cluster_of.copy()
    next_id = int(cluster_of.max()) + 1 if g.num_nodes else 0
    out[straddle] = next_id + unit[straddle]
    # renumber: primaries keep 0..P-1 (even when a primary lost every member); secondaries, old and new,
    # follow heaviest first
    sec = out >= num_primary
    old = out[sec]
    work_of = np.bincount(old, weights=w[sec])       # each cluster's sum in node order, as np.unique's would be
    ids = np.flatnonzero(np.bincount(old))           # the secondary clusters, ascending
    work = work_of[ids]
    rank = np.empty(work_of.size, dtype=np.int64)
    rank[ids[np.lexsort((ids, -work))]] = np.arange(ids.size)
    out[sec] = num_primary + rank[old]
    return out, int(num_primary + ids.size)


def map_onto(g: OpGraph, cluster: Cluster, state: PlanState, k: int, *, comm_weight: float,
             merge_factor: float, cm: CostModel | None = None, split_groups: bool = True) -> np.ndarray:
    """Device per node when the first ``k`` primary clusters anchor the ``k`` fastest devices.

    With ``split_groups``, groups straddling paths are balanced as clusters of their own
    (`group_aware_clusters`); without, they stay in their paths and follow the majority of their work.
    """
    cm = cm or CostModel.build(g, cluster)
    cl = state.paths
    devices = device_order(cluster)[:k]
    if split_groups:
        clusters, n_clusters = group_aware_clusters(g, cl.path, k, cm.w)
    else:
        clusters, n_clusters = cl.path, cl.num_paths
    prim_work = np.bincount(clusters, weights=cm.w, minlength=n_clusters)[:k]
    prim_dev = np.empty(k, dtype=np.int64)
    prim_dev[np.argsort(-prim_work, kind="stable")] = np.arange(k)   # heaviest primary -> fastest device
    local = map_clusters(clusters, k, n_clusters, topological_levels(g), cm.w, g.edge_src, g.edge_dst, cm.c,
                         prim_dev, k, comm_weight, merge_factor)
    dev = devices[local]
    pins = g.unit_pin
    return resolve_units(dev, g.unit, g.num_units, cm.w, g.edge_src, g.edge_dst,
                         cm.c, pins, cluster.num_devices)


def check_comm_weight(w: object, what: str = "comm_weight") -> None:
    """Refuse a communication weight that is not a finite number, 0 or more (``PardnnOptions`` checks its
    own with this too): -1 or NaN mapped without a word."""
    if not is_number(w) or not 0 <= w < math.inf:
        raise ValueError(f"{what} must be a finite number, 0 or more, got {w!r}")


@dataclass(frozen=True)
class Map:
    name: ClassVar[str] = "map"
    requires: ClassVar[tuple[str, ...]] = ("paths",)
    makes: ClassVar[tuple[str, ...]] = ("assignment",)
    comm_weight: float = 1.0
    """Weight of the communication a cluster would incur on a device, next to that device's load."""
    merge_factor: float = 1.0
    """Merge a secondary cluster into a neighbour when communication x this >= its work."""
    try_fewer_devices: bool = True
    """Also map onto the fastest 1..K-1 devices and keep the fastest plan."""
    alternatives: int = 3
    """Hand this many runner-up plans to refinement as extra starting points."""
    threads: int | None = None
    """Compute and simulate the candidate plans on this many threads at once; None: as many as there are
    plans, at most the CPUs this process may use, on graphs of `_threads.THREADS_FROM` to `THREADS_UP_TO`
    nodes plus edges (one thread outside); 1 or less: one after the other. The plan is the same either way."""

    def __post_init__(self) -> None:
        check_pass_options(self)        # comm_weight by the float rule, in `check_comm_weight`'s words

    def __call__(self, g: OpGraph, cluster: Cluster, state: PlanState) -> PlanState:
        if state.paths is None:
            raise ValueError("map needs slicing paths: run the slice pass first")
        cm = CostModel.build(g, cluster)
        P = max(1, state.paths.num_primary)
        ks = range(1, P + 1) if self.try_fewer_devices else [P]
        bounded = bool(np.isfinite(cluster.capacity).any())
        # the plans, then their simulations, on threads at once (the kernels release Python's lock; each is a
        # pure function of its inputs, so the figures are the same on any number of threads)
        cases = [(k, split_groups) for split_groups in ((False, True) if g.group_names else (False,)) for k in ks]
        threads = workers_for(len(cases), self.threads, g, smallest=THREADS_FROM)
        topological_levels(g)       # cached on the graph: computed here once, not by two threads at once
        plans = [(k, split_groups, dev) for (k, split_groups), dev in zip(cases, map_in_order(
            lambda c: map_onto(g, cluster, state, c[0], comm_weight=self.comm_weight, merge_factor=self.merge_factor,
                               cm=cm, split_groups=c[1]), cases, threads))]
        # a plan met before (often k = 1 with and without split groups) is not simulated again
        first = [next(j for j in range(i + 1) if np.array_equal(plans[j][2], plans[i][2])) for i in range(len(plans))]
        runs = [i for i in range(len(plans)) if first[i] == i]

        def score(i: int) -> tuple[tuple, float]:
            """With memory limits, least overflow first, then the shortest step (the schedule is not kept:
            at 200k ops and K=16, sixteen of them would be half a gigabyte)."""
            s = simulate(g, cluster, plans[i][2], memory=bounded)
            return (s.shortfall_key() if bounded else (0.0, float(s.makespan_us))), float(s.makespan_us)

        threads = workers_for(len(runs), self.threads, g, smallest=THREADS_FROM)
        scores = dict(zip(runs, map_in_order(score, runs, threads)))
        results = []
        tried = {}
        for i, (k, split_groups, dev) in enumerate(plans):
            key, tried[(k, split_groups)] = scores[first[i]]
            results.append((key, k, split_groups, dev))
        results.sort(key=lambda r: (r[0], r[1], r[2]))
        key, k, split_groups, dev = results[0]
        alts = []
        for r in results[1:]:
            if len(alts) >= self.alternatives:
                break
            if not any(np.array_equal(r[3], a) for a in [dev] + alts):
                alts.append(r[3])
        return state.replace(assignment=dev, makespan_us=key[1], alternatives=tuple(alts)).with_stats(
            self.name, devices_used=int(np.unique(dev).size), k_chosen=k, groups_split=split_groups,
            overflow_bytes=key[0], makespan_by_k={f"{a[0]}{'g' if a[1] else ''}": b for a, b in tried.items()})
