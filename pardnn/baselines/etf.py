"""ETF and m-ETF (Hwang et al. 1989; Baechi, SoCC 2020): earliest task first list scheduling.

Repeatedly schedule the (ready op, device) pair with the earliest start time,
where an op is ready once all its predecessors are scheduled, and its start
time on device ``d`` is ``max(d free, every input arrived on d)`` under the
cluster's link model. Ties go to the op with the larger static level (longest
compute path to a sink, Hwang's rule), then to the lower op id, the faster
device, the lower device index. The schedule is only the placer's own
estimate; the placement it implies is what the simulator scores.

Constraints: a unit (colocation group) is placed when its first member is
scheduled and its other members then go to that device; a pinned unit is on
its device from the start. m-ETF skips devices without memory room
(`common.MemoryTracker`, Baechi's accounting along the schedule); an op that
fits nowhere goes where the shortfall is least. With unlimited memory m-ETF
is ETF.

The same engine runs SCT (`pardnn.baselines.sct`): given favourite children,
a device whose last op has a ready favourite child that starts earliest there
waits for it, taking only *urgent* ops (ready on every device) meanwhile.

Speed: each ready op enters one heap per device it may use; each step
re-evaluates only devices whose candidates changed. 200k ops on 8 devices
take 5-10 s on a shared 2-core machine (`benchmarks/baseline_speed.py`).
"""

from __future__ import annotations

import heapq

import numpy as np

from ..analysis import bottom_levels
from ..cluster import Cluster
from ..ir import OpGraph
from ..machine import average_time_us
from ..placement import Placement
from .common import LinkCosts, MemoryTracker, memory_limited, placement, unit_pins

_EPS = 1e-9


def static_levels(g: OpGraph, cluster: Cluster) -> np.ndarray:
    """Hwang's static level: the longest compute path from each op to a sink (mean device speed)."""
    return bottom_levels(g, average_time_us(g, cluster))


class _Engine:
    """One list-scheduling run. Mutable, private to a single `schedule` call.

    ``only[v]`` is the one device a ready op may use (its unit's, or where it
    was forced for lack of room anywhere), -1 for any, and ``K`` once ``v`` is
    scheduled, so that ``only[v] < 0 or only[v] == d`` says whether a heap
    entry of ``v`` on device ``d`` is still live.
    """

    def __init__(self, g: OpGraph, cluster: Cluster, memory: bool, favourite: list[int] | None):
        K = cluster.num_devices
        V = g.num_nodes
        self.K, self.V = K, V
        self.time = g.time_us.tolist()
        self.inv_speed = (1.0 / cluster.speed).tolist()
        self.neg_prio = (-static_levels(g, cluster)).tolist()
        self.unit = g.unit.tolist()
        self.unit_dev = unit_pins(g, K)
        self.links = LinkCosts(g, cluster)
        self.tracker = MemoryTracker(g, cluster, self.unit_dev) if memory and memory_limited(cluster) else None
        self.fav = favourite
        self.refused = False
        """Whether memory ever kept an op off a device. Only `fits` consults memory (`block` and `unblock`
        follow a refusal), so a run without one made every decision the run without memory makes."""
        ptr, eids = g.out_csr
        self.out_ptr = ptr.tolist()
        self.out_dst = g.edge_dst[eids].tolist()
        self.indeg = np.bincount(g.edge_dst, minlength=V).tolist()
        self.dev = [-1] * V
        self.fin = [0.0] * V
        self.only = [-1] * V
        self.dr: list[list[float] | None] = [None] * V
        self.avail = [0.0] * K
        self.want = [-1] * K          # SCT: favourite child of the device's last op
        self.pend: list[list] = [[] for _ in range(K)]   # (data ready on d, -prio, op)
        self.now: list[list] = [[] for _ in range(K)]    # (-prio, op): inputs there by the time d is free
        self.blocked: list[list] = [[] for _ in range(K)]  # (need, op): no room on d when last looked
        self.block_mask = [0] * V
        self.full_mask = (1 << K) - 1
        self.prop: list[tuple | None] = [None] * K
        self.dirty = [True] * K
        self.ready_members: dict[int, list[int]] = {}
        self.grouped = (np.bincount(g.unit) > 1).tolist() if V else []
        # SCT: urgent ops (inputs on every device), free ones globally and restricted ones per device.
        self.urgent: list = []
        self.urgent_only: list[list] = [[] for _ in range(K)]

    # ---- queues ----------------------------------------------------------------
    def fits(self, v: int, d: int) -> bool:
        if self.tracker is None or self.only[v] >= 0 or self.tracker.fits(v, d):
            return True
        self.refused = True
        return False

    def make_ready(self, v: int) -> None:
        dr = self.links.data_ready(v, self.dev, self.fin)
        self.dr[v] = dr
        u = self.unit[v]
        if self.grouped[u]:
            self.ready_members.setdefault(u, []).append(v)
        f = self.only[v] = self.unit_dev[u]
        if f >= 0:
            self.restrict(v, f)
            return
        key = (self.neg_prio[v], v)
        for d, pend in enumerate(self.pend):
            heapq.heappush(pend, (dr[d],) + key)
            if not self.dirty[d]:
                self.offer(v, d)
        if self.fav is not None:
            heapq.heappush(self.urgent, (max(dr),) + key)

    def restrict(self, v: int, d: int) -> None:
        """``v`` may only use ``d`` from now on: queue it there."""
        self.only[v] = d
        heapq.heappush(self.pend[d], (self.dr[v][d], self.neg_prio[v], v))
        self.dirty[d] = True
        if self.fav is not None:
            heapq.heappush(self.urgent_only[d], (self.dr[v][d], self.neg_prio[v], v))

    def offer(self, v: int, d: int) -> None:
        """Keep ``d``'s cached proposal current after queueing ``v`` there."""
        cand = (max(self.dr[v][d], self.avail[d]), self.neg_prio[v], v)
        p = self.prop[d]
        if p is None or cand < p:
            if self.fits(v, d):
                self.prop[d] = cand
            else:
                self.dirty[d] = True

    def block(self, v: int, d: int) -> None:
        heapq.heappush(self.blocked[d], (self.tracker.need(v, d), v))
        self.block_mask[v] |= 1 << d
        if self.block_mask[v] == self.full_mask:
            # No room anywhere: go where the shortfall is least.
            self.restrict(v, self.tracker.roomiest(v, range(self.K)))

    def unblock(self, d: int) -> None:
        q = self.blocked[d]
        room = self.tracker.cap[d] - self.tracker.usage[d]
        while q and q[0][0] <= room:
            _, v = heapq.heappop(q)
            if self.block_mask[v] >> d & 1:
                self.block_mask[v] &= ~(1 << d)
                if self.only[v] < 0:
                    heapq.heappush(self.pend[d], (self.dr[v][d], self.neg_prio[v], v))
                    self.dirty[d] = True

    # ---- proposals ---------------------------------------------------------------
    def etf_proposal(self, d: int) -> tuple | None:
        """The best (start, -prio, op) for device ``d``, cleaning stale heap tops on the way."""
        a = self.avail[d]
        pend, now, only = self.pend[d], self.now[d], self.only
        pop, push = heapq.heappop, heapq.heappush
        while pend and pend[0][0] <= a:
            _, negp, v = pop(pend)
            o = only[v]
            if o < 0 or o == d:
                push(now, (negp, v))
        top = self.runnable_top(now, d)     # (-prio, op): ready now, starts when d is free
        if top is not None:
            return (a, top[0], top[1])
        return self.runnable_top(pend, d)   # (data ready, -prio, op)

    def runnable_top(self, heap: list[tuple], d: int) -> tuple | None:
        """The top of one of ``d``'s heaps (entries end with the op) once its op may run on ``d``:
        tops that may not are dropped (and blocked there when memory is what they lack). None when
        the heap runs out.
        """
        only = self.only
        while heap:
            top = heap[0]
            v = top[-1]
            o = only[v]
            if o == d or o < 0 and self.fits(v, d):
                return top
            heapq.heappop(heap)
            if o < 0:
                self.block(v, d)
        return None

    def awake_proposal(self, d: int, j: int) -> tuple | None:
        """SCT: what ``d`` runs next if it is awake for ``j``, its last op's favourite child (ready)."""
        o = self.only[j]
        if not (o == d or o < 0 and self.fits(j, d)):
            return None
        dr = self.dr[j]
        avail = self.avail
        t_j = max(avail[d], dr[d])
        if o < 0:
            for e in range(self.K):
                if e != d and max(avail[e], dr[e]) < t_j - _EPS and self.fits(j, e):
                    return None     # j starts earlier elsewhere: d is not awake
        best = (t_j, self.neg_prio[j], j)
        only = self.only
        for q, shared in ((self.urgent, True), (self.urgent_only[d], False)):
            while q and (only[q[0][2]] >= 0 if shared else only[q[0][2]] != d):
                heapq.heappop(q)    # scheduled, or now queued on one device only
            if q and self.fits(q[0][2], d):
                t, negp, u = q[0]
                if max(avail[d], t) <= best[0]:      # an urgent op goes first (Hanen & Munier)
                    best = (max(avail[d], t), negp, u)
        return best

    # ---- main loop -------------------------------------------------------------------
    def run(self) -> list[int]:
        for v in range(self.V):
            if self.indeg[v] == 0:
                self.make_ready(v)
        done = 0
        while done < self.V:
            cands = self.candidates()
            while not cands:
                # Forcing an op onto a device already looked at this round dirties it again.
                if not any(self.dirty):
                    raise RuntimeError("list scheduling stalled: no ready op (is the graph a DAG?)")
                cands = self.candidates()
            start, _, v, dur, d = min(cands)
            self.commit(v, d, start, dur)
            done += 1
        return self.dev

    def candidates(self) -> list[tuple]:
        """Each device's proposal as ``(start, -prio, op, duration there, device)``."""
        cands = []
        time, inv_speed, dirty, prop, want, dr = self.time, self.inv_speed, self.dirty, self.prop, self.want, self.dr
        for d in range(self.K):
            if dirty[d]:
                dirty[d] = False
                prop[d] = self.etf_proposal(d)
            p = prop[d]
            j = want[d]
            if j >= 0 and dr[j] is not None:
                p = self.awake_proposal(d, j) or p
            if p is not None:
                cands.append((p[0], p[1], p[2], time[p[2]] * inv_speed[d], d))
        return cands

    def commit(self, v: int, d: int, start: float, dur: float) -> None:
        K = self.K
        self.dev[v] = d
        self.only[v] = K
        self.fin[v] = start + dur
        self.avail[d] = start + dur
        self.dirty[d] = True
        prop, dirty = self.prop, self.dirty
        for e in range(K):
            p = prop[e]
            if p is not None and p[2] == v:
                dirty[e] = True
        if self.fav is not None:
            for e in range(K):
                if self.want[e] == v:
                    self.want[e] = -1
            self.want[d] = self.fav[v]
        u = self.unit[v]
        if self.unit_dev[u] < 0:
            self.unit_dev[u] = d
            if self.grouped[u]:
                for w in self.ready_members.get(u, ()):
                    if self.dev[w] < 0:
                        self.restrict(w, d)
                for e in range(K):
                    p = prop[e]
                    if p is not None and self.unit[p[2]] == u:
                        dirty[e] = True
        if self.tracker is not None:
            for e in self.tracker.place(v, d):
                self.unblock(e)
        indeg = self.indeg
        for i in range(self.out_ptr[v], self.out_ptr[v + 1]):
            w = self.out_dst[i]
            indeg[w] -= 1
            if indeg[w] == 0:
                self.make_ready(w)


def schedule(g: OpGraph, cluster: Cluster, *, memory: bool, favourite: list[int] | None = None) -> np.ndarray:
    """Device of every op under ETF (or SCT when ``favourite`` children are given)."""
    if g.num_nodes == 0:
        return np.zeros(0, dtype=np.int64)
    return np.asarray(_Engine(g, cluster, memory, favourite).run(), dtype=np.int64)


def schedule_both(g: OpGraph, cluster: Cluster, *, favourite: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(`schedule` without memory, with memory), each the same plan as its own call. The plan without
    memory is not computed again when memory never kept an op off a device (it is then the same plan)."""
    if g.num_nodes == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    engine = _Engine(g, cluster, True, favourite)
    with_memory = np.asarray(engine.run(), dtype=np.int64)
    if not engine.refused:
        return with_memory.copy(), with_memory
    return schedule(g, cluster, memory=False, favourite=favourite), with_memory


def place(g: OpGraph, cluster: Cluster) -> Placement:
    """ETF: earliest start time list scheduling, memory ignored."""
    return placement(g, cluster, schedule(g, cluster, memory=False), "etf")


def place_m(g: OpGraph, cluster: Cluster) -> Placement:
    """m-ETF: ETF that skips devices without memory room (Baechi)."""
    return placement(g, cluster, schedule(g, cluster, memory=True), "m-etf")
