"""What the baseline placers share: units and pins, link costs, and a memory tracker.

Every placer moves *units* (colocation groups contracted, `OpGraph.unit`).
A unit with a pinned member goes to that member's device (`unit_pins`).

`LinkCosts` prices an edge with the cluster's link model (``latency +
bytes / bandwidth`` between two devices, 0 on one device, latency only for a
control edge), the way the SPEC §1 simulator does, but per edge and without
link queueing, as list schedulers always have.

`MemoryTracker` is how the memory-aware variants ("m-...") decide whether a
device has room for an op. It follows the placer's own processing order as
Baechi's m-ETF does: a device holds the persistent bytes of every unit placed
on it, and every tensor it produced or received until all consumers of that
tensor have been placed; an op needs room for its outputs, its temporaries,
the copies of remote inputs it makes the device receive, and its unit's
persistent bytes when the unit is new there. A device without room is
skipped; when no device has room the op goes where the shortfall is least
(`MemoryTracker.roomiest`). This is an estimate along the placer's order,
not a guarantee: the simulator has the last word.

>>> from pardnn.ir import GraphBuilder
>>> from pardnn.cluster import Cluster
>>> b = GraphBuilder("t")
>>> _ = b.add_node("a", time_us=1, output_bytes=100)
>>> _ = b.add_node("b", time_us=1, output_bytes=10)
>>> b.add_edge("a", "b")
>>> g = b.build()
>>> m = MemoryTracker(g, Cluster.homogeneous(2, memory_bytes=150), unit_pins(g, 2))
>>> m.need(0, 0), m.fits(0, 0)
(100.0, True)
>>> _ = m.place(0, 0)
>>> m.need(1, 1), m.fits(1, 1)         # its output, plus a copy of a's output
(110.0, True)
>>> sorted(m.place(1, 1)), m.usage      # a's last consumer placed: both copies freed
([0, 1], [0.0, 0.0])
"""

from __future__ import annotations

import numpy as np

from ..cluster import Cluster
from ..ir import OpGraph
from ..placement import Placement


def unit_pins(g: OpGraph, num_devices: int) -> list[int]:
    """The pinned device of each unit, or -1 (a unit takes the pin of any member).

    Pins beyond the cluster are clamped to its last device (the API rejects
    them before a placer runs; this only keeps a placer total).
    """
    pins = g.unit_pin
    return np.where(pins >= 0, np.minimum(pins, num_devices - 1), -1).tolist()


def capacity_shares(cluster: Cluster) -> np.ndarray:
    """Each device's share (summing to 1) of the cluster's memory; unlimited counts as the largest finite one,
    and a device of 0 bytes as one of 1 (METIS refuses a target of 0: an internal error)."""
    cap = cluster.capacity
    finite = np.isfinite(cap)
    if not finite.any():
        return np.full(cap.size, 1.0 / cap.size)
    w = np.maximum(np.where(finite, cap, max(float(cap[finite].max()), 1.0)), 1.0)
    return w / w.sum() if w.sum() > 0 else np.full(cap.size, 1.0 / cap.size)


def speed_shares(cluster: Cluster) -> np.ndarray:
    """Each device's share (summing to 1) of the cluster's compute speed."""
    return cluster.speed / cluster.speed.sum()


def memory_limited(cluster: Cluster) -> bool:
    """Whether any device has a finite capacity (else the m- variants equal the plain ones)."""
    return bool(np.isfinite(cluster.capacity).any())


def placement(g: OpGraph, cluster: Cluster, assignment, method: str, **meta) -> Placement:
    return Placement(np.asarray(assignment, dtype=np.int64), cluster.names, g.name, meta={"method": method, **meta})


class LinkCosts:
    """Edge costs under the cluster's link model, and data-ready times of an op on every device."""

    def __init__(self, g: OpGraph, cluster: Cluster):
        K = cluster.num_devices
        self.K = K
        lat, bw = cluster.path_latency, cluster.path_bandwidth
        inv = np.where(np.isfinite(bw), 1.0 / bw, 0.0)
        off = ~np.eye(K, dtype=bool)
        self.uniform = K < 2 or (np.ptp(lat[off]) == 0 and np.ptp(inv[off]) == 0)
        self.lat0 = float(lat[off][0]) if K > 1 else 0.0
        self.inv0 = float(inv[off][0]) if K > 1 else 0.0
        self.lat = lat.tolist()
        self.inv = inv.tolist()
        ptr, eids = g.in_csr
        self.in_ptr = ptr.tolist()
        self.in_src = g.edge_src[eids].tolist()
        self.in_bytes = np.where(g.edge_control, 0, g.edge_bytes)[eids].astype(np.float64).tolist()

    def data_ready(self, v: int, dev: list[int], fin: list[float]) -> list[float]:
        """Earliest time every input of ``v`` is on each device (all predecessors placed)."""
        K = self.K
        lo, hi = self.in_ptr[v], self.in_ptr[v + 1]
        src, nb = self.in_src, self.in_bytes
        if self.uniform:
            local = [0.0] * K
            remote = [0.0] * K     # best arrival elsewhere of data from each source device
            lat, inv = self.lat0, self.inv0
            for i in range(lo, hi):
                u = src[i]
                s = dev[u]
                f = fin[u]
                if f > local[s]:
                    local[s] = f
                r = f + lat + nb[i] * inv
                if r > remote[s]:
                    remote[s] = r
            if hi - lo == 0:
                return local
            best = max(range(K), key=remote.__getitem__)
            top1 = remote[best]
            top2 = max((remote[d] for d in range(K) if d != best), default=0.0)
            out = [0.0] * K
            for d in range(K):
                r = top2 if d == best else top1
                out[d] = local[d] if local[d] > r else r
            return out
        out = [0.0] * K
        lat, inv = self.lat, self.inv
        for i in range(lo, hi):
            u = src[i]
            s = dev[u]
            f = fin[u]
            b = nb[i]
            ls, vs = lat[s], inv[s]
            for d in range(K):
                t = f if d == s else f + ls[d] + b * vs[d]
                if t > out[d]:
                    out[d] = t
        return out


class MemoryTracker:
    """Device memory along a placer's processing order (see the module docstring).

    Mutable, and owned by one placer call. Units with a pinned member are
    charged their persistent bytes up front, on their device.
    """

    def __init__(self, g: OpGraph, cluster: Cluster, pins: list[int]):
        K = cluster.num_devices
        self.cap = cluster.capacity.tolist()
        self.usage = [0.0] * K
        self.unit = g.unit.tolist()
        self.unit_pers = np.bincount(g.unit, weights=g.persistent_bytes.astype(np.float64)).tolist()
        self.unit_charged = [False] * len(self.unit_pers)
        self.port_ptr = g.port_ptr.tolist()
        self.port_bytes = g.port_bytes.astype(np.float64).tolist()          # a received copy's size
        self.own_bytes = g.port_alloc_bytes.astype(np.float64).tolist()     # the producer's copy (0: forwarded)
        self.out_total = g.alloc_bytes_total.astype(np.float64).tolist()
        self.temp = g.temp_bytes.astype(np.float64).tolist()
        data = ~g.edge_control
        pid = g.edge_port_id
        self.consumers = np.bincount(pid[data], minlength=g.num_ports).tolist()
        ptr, eids = g.in_csr
        eids = eids[data[eids]]
        counts = np.bincount(g.edge_dst[eids], minlength=g.num_nodes)
        self.in_ptr = np.concatenate([[0], np.cumsum(counts)]).tolist()
        self.in_port = pid[eids].tolist()
        self.owner = g.port_owner.tolist()
        self.received: dict[int, list[int]] = {}
        self.dev = [-1] * g.num_nodes
        # An upper bound of need(v, d) for every d: every distinct input received.
        in_bytes = np.zeros(g.num_nodes)
        if eids.size:
            pairs = np.unique(np.stack([g.edge_dst[eids], pid[eids]], axis=1), axis=0)
            np.add.at(in_bytes, pairs[:, 0], g.port_bytes[pairs[:, 1]])
        self.need_bound = (g.alloc_bytes_total + g.temp_bytes + np.asarray(self.unit_pers)[g.unit]
                           + in_bytes).tolist() if g.num_nodes else []
        for u, d in enumerate(pins):
            if d >= 0:
                self.usage[d] += self.unit_pers[u]
                self.unit_charged[u] = True

    def need(self, v: int, d: int) -> float:
        """Bytes ``v`` would add to device ``d`` at its start."""
        u = self.unit[v]
        n = self.out_total[v] + self.temp[v] + (0.0 if self.unit_charged[u] else self.unit_pers[u])
        dev, pb, rec = self.dev, self.port_bytes, self.received
        seen = None
        for i in range(self.in_ptr[v], self.in_ptr[v + 1]):
            p = self.in_port[i]
            if dev[self.owner[p]] == d or d in rec.get(p, ()):
                continue
            if seen is None:
                seen = {p}
            elif p in seen:
                continue
            else:
                seen.add(p)
            n += pb[p]
        return n

    def room(self, v: int, d: int) -> float:
        return self.cap[d] - self.usage[d] - self.need(v, d)

    def fits(self, v: int, d: int) -> bool:
        if self.usage[d] + self.need_bound[v] <= self.cap[d]:
            return True
        return self.room(v, d) >= 0

    def needs(self, v: int) -> list[float]:
        """`need` of ``v`` on every device, in one pass over its inputs."""
        K = len(self.usage)
        u = self.unit[v]
        base = self.out_total[v] + self.temp[v] + (0.0 if self.unit_charged[u] else self.unit_pers[u])
        local = [0.0] * K
        total = 0.0
        dev, pb, rec, owner = self.dev, self.port_bytes, self.received, self.owner
        seen: set[int] = set()
        for i in range(self.in_ptr[v], self.in_ptr[v + 1]):
            p = self.in_port[i]
            if p in seen:
                continue
            seen.add(p)
            b = pb[p]
            total += b
            local[dev[owner[p]]] += b
            for e in rec.get(p, ()):
                local[e] += b
        return [base + total - x for x in local]

    def devices_with_room(self, v: int) -> list[int]:
        """The devices that can take ``v`` now."""
        cap, usage, bound = self.cap, self.usage, self.need_bound[v]
        if all(usage[d] + bound <= cap[d] for d in range(len(cap))):
            return list(range(len(cap)))
        need = self.needs(v)
        return [d for d in range(len(cap)) if usage[d] + need[d] <= cap[d]]

    def roomiest(self, v: int, devices) -> int:
        """The device among ``devices`` with the most room left after ``v`` (ties: the first)."""
        best, best_room = -1, -np.inf
        for d in devices:
            r = self.room(v, d)
            if r > best_room:
                best, best_room = d, r
        return best

    def place(self, v: int, d: int) -> set[int]:
        """Account for ``v`` placed on ``d``; return the devices whose usage went down."""
        u = self.unit[v]
        usage = self.usage
        if not self.unit_charged[u]:
            usage[d] += self.unit_pers[u]
            self.unit_charged[u] = True
        self.dev[v] = d
        pb, own, cons = self.port_bytes, self.own_bytes, self.consumers
        for p in range(self.port_ptr[v], self.port_ptr[v + 1]):
            if cons[p]:
                usage[d] += own[p]
        freed: set[int] = set()
        dev, rec, owner = self.dev, self.received, self.owner
        for i in range(self.in_ptr[v], self.in_ptr[v + 1]):
            p = self.in_port[i]
            s = dev[owner[p]]
            if s != d:
                copies = rec.setdefault(p, [])
                if d not in copies:
                    copies.append(d)
                    usage[d] += pb[p]
            cons[p] -= 1
            if cons[p] == 0:
                usage[s] -= own[p]
                freed.add(s)
                for e in rec.pop(p, ()):
                    usage[e] -= pb[p]
                    freed.add(e)
        return freed
