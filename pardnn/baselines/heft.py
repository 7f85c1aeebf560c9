"""HEFT and CPOP (Topcuoglu, Hariri & Wu, IEEE TPDS 2002), with m- variants.

Both price an op by its mean compute time over the devices (``w``) and an
edge by its mean communication cost over distinct device pairs (``c``; a
control edge costs latency), and rank ops by

* upward rank ``rank_u(v) = w(v) + max over successors s of (c(v,s) + rank_u(s))``;
* downward rank ``rank_d(v) = max over predecessors u of (rank_d(u) + w(u) + c(u,v))``.

HEFT takes ops in decreasing ``rank_u`` (a topological order; ties by graph
order) and puts each on the device where it *finishes* earliest, searching
the device's idle gaps (insertion-based, as published) after the op's inputs
arrive there. CPOP takes ready ops by decreasing ``rank_u + rank_d``; ops on
the critical path (the path of maximal priority) go to the critical-path
device, the one that runs that path fastest; other ops go where they finish
earliest.

Constraints: a unit (colocation group) is placed when its first member is,
and the rest follow it; pinned units stay on their device. The m- variants
skip devices without memory room (`common.MemoryTracker`, along the placer's
own order) and, when nothing has room, use the device with the least
shortfall; a critical-path op without room on the critical-path device is
placed by earliest finish instead.

The insertion search is exact: it scans a device's idle gaps from the op's
data-ready time on, and skips the scan when the op is longer than any gap the
device ever had. On the 200k-op synthetic graph it looks at 31 gaps per
(op, device) on average on 2 devices (at most 730) and 1.6 on 8.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right

import numpy as np

from ..analysis import bottom_levels, critical_path, top_levels, topological_order
from ..cluster import Cluster
from ..ir import OpGraph
from ..machine import CostModel
from ..placement import Placement
from .common import LinkCosts, MemoryTracker, memory_limited, placement, unit_pins

def ranks(g: OpGraph, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """``(rank_u, rank_d)`` with mean compute and communication costs (Topcuoglu et al.)."""
    cm = CostModel.build(g, cluster)
    w, c = cm.w, cm.c
    return bottom_levels(g, w, c), top_levels(g, w, c)


class _Timeline:
    """Each device's busy intervals, as idle gaps before its last op plus the time it becomes free."""

    def __init__(self, K: int, insertion: bool):
        self.insertion = insertion
        self.gap_start: list[list[float]] = [[] for _ in range(K)]
        self.gap_end: list[list[float]] = [[] for _ in range(K)]
        self.avail = [0.0] * K
        self.widest = [0.0] * K       # no gap on the device was ever longer

    def slot(self, d: int, ready: float, dur: float) -> tuple[float, int]:
        """Earliest start at or after ``ready`` for ``dur`` on ``d``, and the gap used (-1: append)."""
        if self.insertion and dur <= self.widest[d]:
            gs, ge = self.gap_start[d], self.gap_end[d]
            for j in range(bisect_right(ge, ready), len(ge)):
                t = gs[j] if gs[j] > ready else ready
                if t + dur <= ge[j]:
                    return t, j
        a = self.avail[d]
        return (a if a > ready else ready), -1

    def take(self, d: int, start: float, dur: float, gap: int) -> None:
        end = start + dur
        if gap < 0:
            a = self.avail[d]
            if self.insertion and start > a:
                self.gap_start[d].append(a)
                self.gap_end[d].append(start)
                self.widest[d] = max(self.widest[d], start - a)
            self.avail[d] = end
            return
        gs, ge = self.gap_start[d], self.gap_end[d]
        lo, hi = gs[gap], ge[gap]
        pieces = [(s, e) for s, e in ((lo, start), (end, hi)) if e > s]
        gs[gap:gap + 1] = [s for s, _ in pieces]
        ge[gap:gap + 1] = [e for _, e in pieces]


class _Eft:
    """Earliest-finish-time device choice with units, pins and (optionally) memory room."""

    def __init__(self, g: OpGraph, cluster: Cluster, memory: bool, insertion: bool = True):
        K = cluster.num_devices
        self.K = K
        self.time = g.time_us.tolist()
        self.inv_speed = (1.0 / cluster.speed).tolist()
        self.unit = g.unit.tolist()
        self.unit_dev = unit_pins(g, K)
        self.links = LinkCosts(g, cluster)
        self.tracker = MemoryTracker(g, cluster, self.unit_dev) if memory and memory_limited(cluster) else None
        self.timeline = _Timeline(K, insertion)
        self.dev = [-1] * g.num_nodes
        self.fin = [0.0] * g.num_nodes

    def allowed(self, v: int, prefer: int = -1) -> list[int]:
        """Devices ``v`` may use: its unit's, else ``prefer`` if it has room, else every device with room."""
        f = self.unit_dev[self.unit[v]]
        if f >= 0:
            return [f]
        m = self.tracker
        if prefer >= 0 and (m is None or m.fits(v, prefer)):
            return [prefer]
        if m is None:
            return list(range(self.K))
        return m.devices_with_room(v) or [m.roomiest(v, range(self.K))]

    def place(self, v: int, prefer: int = -1) -> int:
        """Put ``v`` (all predecessors placed) where it finishes earliest among `allowed` devices."""
        ready = self.links.data_ready(v, self.dev, self.fin)
        t = self.time[v]
        best = None
        for d in self.allowed(v, prefer):
            dur = t * self.inv_speed[d]
            start, gap = self.timeline.slot(d, ready[d], dur)
            key = (start + dur, d)
            if best is None or key < best[0]:
                best = (key, start, dur, gap)
        (finish, d), start, dur, gap = best
        self.timeline.take(d, start, dur, gap)
        self.dev[v] = d
        self.fin[v] = finish
        u = self.unit[v]
        if self.unit_dev[u] < 0:
            self.unit_dev[u] = d
        if self.tracker is not None:
            self.tracker.place(v, d)
        return d


def heft_order(g: OpGraph, rank_u: np.ndarray) -> np.ndarray:
    """Ops by decreasing upward rank, ties in topological order (so the order is topological)."""
    pos = np.empty(g.num_nodes, dtype=np.int64)
    pos[topological_order(g)] = np.arange(g.num_nodes)
    return np.lexsort((pos, -rank_u))


def heft(g: OpGraph, cluster: Cluster, *, memory: bool, insertion: bool = True) -> np.ndarray:
    rank_u, _ = ranks(g, cluster)
    eft = _Eft(g, cluster, memory, insertion)
    for v in heft_order(g, rank_u).tolist():
        eft.place(v)
    return np.asarray(eft.dev, dtype=np.int64)


def cpop(g: OpGraph, cluster: Cluster, *, memory: bool, insertion: bool = True) -> np.ndarray:
    if g.num_nodes == 0:
        return np.zeros(0, dtype=np.int64)
    rank_u, rank_d = ranks(g, cluster)
    prio = rank_u + rank_d
    cm = CostModel.build(g, cluster)
    _, path = critical_path(g, cm.w, cm.c)
    on_cp = np.zeros(g.num_nodes, dtype=bool)
    on_cp[path] = True
    # The device that runs the whole critical path fastest: the fastest one (ties: the lower index).
    cp_dev = int(np.argmax(cluster.speed))
    pos = np.empty(g.num_nodes, dtype=np.int64)
    pos[topological_order(g)] = np.arange(g.num_nodes)
    eft = _Eft(g, cluster, memory, insertion)
    ptr, eids = g.out_csr
    ptr_l, succ = ptr.tolist(), g.edge_dst[eids].tolist()
    indeg = np.bincount(g.edge_dst, minlength=g.num_nodes).tolist()
    neg, posl, cp = (-prio).tolist(), pos.tolist(), on_cp.tolist()
    queue = [(neg[v], posl[v], v) for v in range(g.num_nodes) if indeg[v] == 0]
    heapq.heapify(queue)
    while queue:
        _, _, v = heapq.heappop(queue)
        eft.place(v, cp_dev if cp[v] else -1)
        for s in succ[ptr_l[v]:ptr_l[v + 1]]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(queue, (neg[s], posl[s], s))
    return np.asarray(eft.dev, dtype=np.int64)


def place(g: OpGraph, cluster: Cluster) -> Placement:
    """HEFT: upward-rank order, earliest finish time with insertion; memory ignored."""
    return placement(g, cluster, heft(g, cluster, memory=False), "heft")


def place_m(g: OpGraph, cluster: Cluster) -> Placement:
    """m-HEFT: HEFT that skips devices without memory room."""
    return placement(g, cluster, heft(g, cluster, memory=True), "m-heft")


def place_cpop(g: OpGraph, cluster: Cluster) -> Placement:
    """CPOP: critical path on one device, the rest by earliest finish time; memory ignored."""
    return placement(g, cluster, cpop(g, cluster, memory=False), "cpop")


def place_m_cpop(g: OpGraph, cluster: Cluster) -> Placement:
    """m-CPOP: CPOP that skips devices without memory room."""
    return placement(g, cluster, cpop(g, cluster, memory=True), "m-cpop")
