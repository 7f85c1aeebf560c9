"""The machine model of SPEC §1: one step of a placed graph, simulated.

Every number pardnn reports (predicted step time, per-device peak memory,
feasibility) comes from `simulate`. The model has two independent halves:

* the **schedule** — an event-driven list scheduler: each device runs one op
  at a time, picking the ready op that became ready earliest (ties by file
  order); one transfer per (producer, port, destination device), serialised
  per directed device pair in sendable order; control edges cost latency;
* the **memory sweep** — memory never delays an op in this model, so peaks
  are computed after the schedule by sorting allocation and free events per
  device (vectorised with numpy).

The event loop is a compiled kernel (`pardnn._schedkernel`, numba); everything
around it is vectorised numpy. It handles 200,000 nodes in a fraction of a
second.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .cluster import Cluster
from .errors import PlacementError
from .ir import OpGraph
from ._schedkernel import run_events
from .placement import Placement

# Memory item kinds
OUTPUT, RECEIVED, TEMP = 0, 1, 2
_KIND_NAMES = ("output", "received copy", "temp")


@dataclass(frozen=True, eq=False)
class Transfers:
    """One row per cross-device tensor transfer (producer, port, destination)."""

    src: np.ndarray        # producer node id
    port: np.ndarray       # output port of the producer
    src_dev: np.ndarray
    dst_dev: np.ndarray
    bytes: np.ndarray
    start_us: np.ndarray
    finish_us: np.ndarray

    def __len__(self) -> int:
        return int(self.src.shape[0])


@dataclass(frozen=True, eq=False)
class MemoryItems:
    """Every allocation of the step: outputs, received copies and temporaries.

    An item occupies ``bytes`` on ``device`` from ``alloc_us`` until
    ``free_us`` (SPEC §1 memory rules). ``ref`` is the node id (outputs,
    temps) or the transfer row (received copies).
    """

    device: np.ndarray
    alloc_us: np.ndarray
    free_us: np.ndarray
    bytes: np.ndarray
    kind: np.ndarray
    ref: np.ndarray
    port: np.ndarray


@dataclass(frozen=True)
class Violation:
    """One way a placement breaks the machine model's constraints."""

    kind: str                 # "memory", "pinned" or "colocation"
    message: str
    device: int | None = None
    bytes_over: int = 0
    time_us: float | None = None


@dataclass(frozen=True, eq=False)
class Schedule:
    """The simulated step: times, transfers, memory peaks and violations."""

    makespan_us: float
    device: np.ndarray          # device of each node
    start_us: np.ndarray
    finish_us: np.ndarray
    ready_us: np.ndarray           # when each op became ready (all inputs there)
    transfers: Transfers
    persistent_bytes: np.ndarray   # per device
    peak_bytes: np.ndarray         # per device (persistent included)
    peak_time_us: np.ndarray       # per device: first instant the peak is reached
    capacity: np.ndarray           # per device (inf = unlimited)
    violations: tuple[Violation, ...] = ()
    memory: MemoryItems | None = field(default=None, repr=False)

    @property
    def feasible(self) -> bool:
        return not self.violations

    @property
    def num_devices(self) -> int:
        return int(self.peak_bytes.shape[0])

    def predicted(self) -> dict:
        """The ``predicted`` block of a placement file (SPEC §4)."""
        return {"makespan_us": round(float(self.makespan_us), 6),
                "peak_bytes": [int(x) for x in self.peak_bytes],
                "feasible": self.feasible}

    def memory_shortfall(self) -> int:
        """Bytes by which the worst device exceeds its capacity (0 when all fit)."""
        over = self.peak_bytes - self.capacity
        return int(max(0.0, float(np.max(over)))) if over.size else 0

    def bytes_moved(self) -> int:
        return int(self.transfers.bytes.sum())

    def compute_load_us(self) -> np.ndarray:
        """Busy time of each device."""
        return np.bincount(self.device, weights=self.finish_us - self.start_us, minlength=self.num_devices)

    def timeline(self, device: int) -> tuple[np.ndarray, np.ndarray]:
        """Memory of ``device`` over the step as a step function ``(times, bytes)``.

        ``bytes[i]`` holds from ``times[i]`` until ``times[i+1]``; allocations
        and frees at one instant are merged (frees first, SPEC §1.1 rule 5),
        and a zero-length allocation shows as its own point.
        """
        if self.memory is None:
            raise ValueError("this schedule was simulated with memory=False")
        t, level = _device_levels(self.memory, device)
        base = int(self.persistent_bytes[device])
        if t.size == 0:
            return np.array([0.0]), np.array([base])
        return np.concatenate([[0.0], t]), np.concatenate([[base], base + level])

    def live_at(self, device: int, time_us: float) -> MemoryItems:
        """The items occupying ``device`` at ``time_us`` (frees at that instant done first)."""
        m = self.memory
        if m is None:
            raise ValueError("this schedule was simulated with memory=False")
        alive = (m.device == device) & (m.alloc_us <= time_us) & (
            (m.free_us > time_us) | ((m.free_us == time_us) & (m.alloc_us == time_us)))
        idx = np.flatnonzero(alive)
        return MemoryItems(*(getattr(m, f)[idx] for f in ("device", "alloc_us", "free_us", "bytes", "kind", "ref",
                                                          "port")))


def _as_assignment(g: OpGraph, cluster: Cluster, placement: Placement | np.ndarray) -> np.ndarray:
    dev = placement.assignment if isinstance(placement, Placement) else np.asarray(placement, dtype=np.int64)
    if dev.shape != (g.num_nodes,):
        raise PlacementError(f"placement has {dev.size} entries but graph {g.name!r} has {g.num_nodes} nodes")
    K = cluster.num_devices
    if dev.size and (dev.min() < 0 or dev.max() >= K):
        v = int(np.flatnonzero((dev < 0) | (dev >= K))[0])
        raise PlacementError(f"node {g.names[v]!r} is placed on device {dev[v]}, "
                             f"but the cluster has {K} devices (0..{K - 1})")
    return dev.astype(np.int64, copy=False)


def _ptr(keys: np.ndarray, n: int) -> np.ndarray:
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr


@dataclass(frozen=True, eq=False)
class _Plan:
    """Placement-dependent arrays the event loop and the memory sweep share."""

    xdata: np.ndarray      # bool per edge: data edge across devices
    local: np.ndarray      # bool per edge: both ends on one device
    edge_tid: np.ndarray   # transfer row of each cross data edge (-1 otherwise)
    t_pid: np.ndarray      # global port id of each transfer
    t_src: np.ndarray
    t_dst: np.ndarray      # destination device
    t_bytes: np.ndarray
    t_dur: np.ndarray


def _plan(g: OpGraph, cluster: Cluster, dev: np.ndarray) -> _Plan:
    K = cluster.num_devices
    sd, dd = dev[g.edge_src], dev[g.edge_dst]
    cross = sd != dd
    xdata = cross & ~g.edge_control
    pid = g.edge_port_id
    key = pid[xdata] * K + dd[xdata]
    uniq, inv = np.unique(key, return_inverse=True)   # sorted: producer, port, destination
    t_pid, t_dst = uniq // K, uniq % K
    t_src = g.port_owner[t_pid] if uniq.size else np.empty(0, dtype=np.int64)
    t_bytes = np.zeros(uniq.size, dtype=np.int64)
    np.maximum.at(t_bytes, inv, g.edge_bytes[xdata])   # SPEC §1.1 rule 4: the largest
    t_sdev = dev[t_src]
    t_dur = cluster.latency[t_sdev, t_dst] + t_bytes / cluster.bandwidth[t_sdev, t_dst]
    edge_tid = np.full(g.num_edges, -1, dtype=np.int64)
    edge_tid[xdata] = inv
    return _Plan(xdata, ~cross, edge_tid, t_pid, t_src, t_dst, t_bytes, t_dur)


def _schedule(g: OpGraph, cluster: Cluster, dev: np.ndarray, plan: _Plan):
    """Run the event loop; return op start/finish and transfer start/finish arrays."""
    V, K = g.num_nodes, cluster.num_devices
    src, dst = g.edge_src, g.edge_dst
    dur = g.time_us / cluster.speed[dev]
    # Same-device successors (data and control), grouped by producer.
    loc = np.flatnonzero(plan.local)
    order = loc[np.argsort(src[loc], kind="stable")]
    lptr = _ptr(src[loc], V)
    ldst = dst[order]
    # Transfers launched by each producer (rows are sorted by producer already).
    T = int(plan.t_src.shape[0])
    tptr = np.searchsorted(plan.t_src, np.arange(V + 1)).astype(np.int64)
    tlink = (dev[plan.t_src] * K + plan.t_dst).astype(np.int64)
    # Consumers served by each transfer (one entry per edge).
    xe = np.flatnonzero(plan.xdata)
    xorder = xe[np.argsort(plan.edge_tid[xe], kind="stable")]
    tcptr = _ptr(plan.edge_tid[xe], T)
    tcdst = dst[xorder]
    # Cross-device control edges: arrive after the pair's latency.
    xc = np.flatnonzero(~plan.local & g.edge_control)
    corder = xc[np.argsort(src[xc], kind="stable")]
    cptr = _ptr(src[xc], V)
    cdst = dst[corder]
    clat = cluster.latency[dev[src[corder]], dev[dst[corder]]]
    indeg = np.bincount(dst, minlength=V).astype(np.int64)
    return run_events(K, dev, dur, indeg, lptr, ldst, tptr, tlink, plan.t_dur.astype(np.float64), tcptr, tcdst,
                      cptr, cdst, clat.astype(np.float64))


def _memory_items(g: OpGraph, dev: np.ndarray, plan: _Plan, start: np.ndarray, finish: np.ndarray,
                  tstart: np.ndarray, tfinish: np.ndarray) -> MemoryItems:
    """Every allocation with its lifetime (SPEC §1 memory rules, §1.1 rules 4-7)."""
    src, dst = g.edge_src, g.edge_dst
    data = ~g.edge_control
    pid = g.edge_port_id
    owner = g.port_owner
    # Outputs: from the producer's start until every same-device consumer has
    # finished and every transfer of the tensor has arrived; a tensor with no
    # consumers dies when its producer finishes.
    out_free = finish[owner].copy()
    same = plan.local & data
    np.maximum.at(out_free, pid[same], finish[dst[same]])
    if plan.t_pid.size:
        np.maximum.at(out_free, plan.t_pid, tfinish)
    # Received copies: from the transfer's start until every consumer there has finished.
    rec_free = tfinish.copy()
    xd = plan.xdata
    if xd.any():
        np.maximum.at(rec_free, plan.edge_tid[xd], finish[dst[xd]])
    tmp = np.flatnonzero(g.temp_bytes > 0)
    outs = np.flatnonzero(g.port_bytes > 0)
    port_index = outs - g.port_ptr[owner[outs]]
    rec = np.flatnonzero(plan.t_bytes > 0)
    return MemoryItems(
        device=np.concatenate([dev[owner[outs]], plan.t_dst[rec], dev[tmp]]),
        alloc_us=np.concatenate([start[owner[outs]], tstart[rec], start[tmp]]),
        free_us=np.concatenate([out_free[outs], rec_free[rec], finish[tmp]]),
        bytes=np.concatenate([g.port_bytes[outs], plan.t_bytes[rec], g.temp_bytes[tmp]]),
        kind=np.concatenate([np.full(outs.size, OUTPUT), np.full(rec.size, RECEIVED), np.full(tmp.size, TEMP)]),
        ref=np.concatenate([owner[outs], rec, tmp]),
        port=np.concatenate([port_index, plan.t_pid[rec] - g.port_ptr[plan.t_src[rec]], np.zeros(tmp.size, np.int64)]),
    )


def _sorted_events(m: MemoryItems) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Allocation and free events sorted by (device, time, order): ``(device, time, key, delta)``.

    Order at one instant (``key``): 0 frees of items allocated earlier, 1
    allocations, 2 frees of items allocated at that same instant (a
    zero-length item still counts at its instant, SPEC §1.1 rule 5).
    """
    n = m.bytes.shape[0]
    same = m.free_us == m.alloc_us
    dev = np.concatenate([m.device, m.device])
    time = np.concatenate([m.alloc_us, m.free_us])
    key = np.concatenate([np.ones(n, np.int8), np.where(same, 2, 0).astype(np.int8)])
    delta = np.concatenate([m.bytes, -m.bytes])
    order = np.lexsort((key, time, dev))
    return dev[order], time[order], key[order], delta[order]


def _device_levels(m: MemoryItems, device: int) -> tuple[np.ndarray, np.ndarray]:
    """Times and non-persistent levels of one device, one point per instant.

    Where zero-length items exist at an instant, a second point at the same
    time holds the level while they are alive (a spike of zero width).
    """
    sel = m.device == device
    _, time, key, delta = _sorted_events(MemoryItems(
        *(getattr(m, f)[sel] for f in ("device", "alloc_us", "free_us", "bytes", "kind", "ref", "port"))))
    if time.size == 0:
        return time, delta
    level = np.cumsum(delta)
    same_next = np.zeros(time.size, dtype=bool)
    same_next[:-1] = time[1:] == time[:-1]
    run_end = ~same_next
    next_key = np.append(key[1:], 0)
    spike = (key == 1) & same_next & (next_key == 2)
    keep = run_end | spike
    return time[keep], level[keep]


def _peaks(m: MemoryItems, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Peak non-persistent bytes and the first instant it is reached, per device."""
    dev, time, _, delta = _sorted_events(m)
    peak = np.zeros(K, dtype=np.int64)
    peak_t = np.zeros(K, dtype=np.float64)
    if dev.size == 0:
        return peak, peak_t
    level = np.cumsum(delta)
    bounds = np.searchsorted(dev, np.arange(K + 1))
    offset = np.where(bounds[:-1] > 0, level[np.maximum(bounds[:-1] - 1, 0)], 0)
    for d in range(K):
        lo, hi = bounds[d], bounds[d + 1]
        if hi <= lo:
            continue
        seg = level[lo:hi] - offset[d]
        k = int(np.argmax(seg))
        if seg[k] > 0:
            peak[d] = seg[k]
            peak_t[d] = time[lo + k]
    return peak, peak_t


def _violations(g: OpGraph, cluster: Cluster, dev: np.ndarray, peak: np.ndarray,
                peak_t: np.ndarray) -> list[Violation]:
    out: list[Violation] = []
    cap = cluster.capacity
    for d in np.flatnonzero(peak > cap):
        d = int(d)
        over = int(peak[d] - cap[d])
        out.append(Violation("memory", f"device {d} ({cluster.devices[d].name}) needs {int(peak[d])} bytes at "
                                       f"t={peak_t[d]:.1f}us but has {int(cap[d])}: {over} bytes short",
                             device=d, bytes_over=over, time_us=float(peak_t[d])))
    pinned = np.flatnonzero((g.pinned >= 0) & (g.pinned != dev))
    for v in pinned[:20].tolist():
        out.append(Violation("pinned", f"node {g.names[v]!r} is pinned to device {int(g.pinned[v])} "
                                       f"but placed on device {int(dev[v])}", device=int(dev[v])))
    if pinned.size > 20:
        out.append(Violation("pinned", f"... and {pinned.size - 20} more pinned nodes off their device"))
    grouped = np.flatnonzero(g.colocation >= 0)
    if grouped.size:
        n = len(g.group_names)
        lo = np.full(n, np.iinfo(np.int64).max)
        hi = np.full(n, -1)
        np.minimum.at(lo, g.colocation[grouped], dev[grouped])
        np.maximum.at(hi, g.colocation[grouped], dev[grouped])
        split = np.flatnonzero((hi >= 0) & (lo != hi))
        for gid in split[:20].tolist():
            devs = sorted(set(dev[g.groups[gid]].tolist()))
            out.append(Violation("colocation", f"colocation group {g.group_names[gid]!r} is split across "
                                               f"devices {devs}"))
        if split.size > 20:
            out.append(Violation("colocation", f"... and {split.size - 20} more split colocation groups"))
    return out


def simulate(g: OpGraph, cluster: Cluster, placement: Placement | np.ndarray, *,
             memory: bool = True) -> Schedule:
    """Simulate one step of ``g`` placed by ``placement`` on ``cluster`` (SPEC §1).

    With ``memory=False`` only the schedule is computed (peaks are zero and
    only pin and colocation violations are reported); the partitioner uses
    that when it needs nothing but the makespan.
    """
    dev = _as_assignment(g, cluster, placement)
    K = cluster.num_devices
    plan = _plan(g, cluster, dev)
    start, finish, ready, tstart, tfinish = _schedule(g, cluster, dev, plan)
    makespan = max(float(finish.max()) if finish.size else 0.0, float(tfinish.max()) if tfinish.size else 0.0)
    transfers = Transfers(plan.t_src, plan.t_pid - g.port_ptr[plan.t_src], dev[plan.t_src], plan.t_dst,
                          plan.t_bytes, tstart, tfinish)
    persistent = np.zeros(K, dtype=np.int64)
    np.add.at(persistent, dev, g.persistent_bytes)
    items = None
    peak = persistent.copy()
    peak_t = np.zeros(K)
    if memory:
        items = _memory_items(g, dev, plan, start, finish, tstart, tfinish)
        transient, peak_t = _peaks(items, K)
        peak = persistent + transient
    violations = _violations(g, cluster, dev, peak if memory else np.zeros(K, np.int64), peak_t)
    return Schedule(makespan, dev, start, finish, ready, transfers, persistent, peak, peak_t, cluster.capacity.copy(),
                    tuple(violations), items)


def single_device_peak(g: OpGraph) -> int:
    """Peak memory with every op on one device, pins ignored (SPEC §1.1 rule 10)."""
    one = Cluster.homogeneous(1)
    return int(simulate(g, one, np.zeros(g.num_nodes, dtype=np.int64)).peak_bytes[0])


def describe_item(g: OpGraph, s: Schedule, items: MemoryItems, i: int) -> str:
    """A one-line description of memory item ``i`` of ``items`` (for reports)."""
    kind = int(items.kind[i])
    ref = int(items.ref[i])
    if kind == RECEIVED:
        producer = int(s.transfers.src[ref])
        return f"{g.names[producer]}:{int(items.port[i])} (received copy)"
    if kind == TEMP:
        return f"{g.names[ref]} (temp)"
    return f"{g.names[ref]}:{int(items.port[i])}"
