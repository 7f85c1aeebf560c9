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

The event loop is a compiled kernel (`pardnn.machine.kernel`, numba);
everything around it is vectorised numpy. It handles 200,000 nodes in a
fraction of a second.

A `Schedule` answers every question the passes, baselines and the report
ask of a simulated step (when each input arrived, which transfer row carries
a tensor to a device, what is alive at an instant, the critical chain, which
rules a placement breaks), so none of them needs the kernel's layout.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field, fields
from functools import cached_property

import numpy as np

from ..analysis import topological_order
from ..cluster import Cluster, check_cluster
from ..errors import PlacementError
from ..ir import OpGraph, check_graph
from ..placement import Placement, device_indices
from ..units import format_bytes
from .._jit import njit
from .kernel import run_kernel

# Memory item kinds
OUTPUT, RECEIVED, TEMP = 0, 1, 2
# Critical-chain link kinds: the op waited for an input, or for its device
EDGE, DEVICE = 0, 1
_KIND_NAMES = ("output", "received copy", "temp")


@dataclass(frozen=True, eq=False)
class Transfers:
    """One row per cross-device tensor transfer (producer, port, destination).

    ``start_us``..``finish_us`` is its time on the link. On a cluster whose transfers run on their devices
    (`pardnn.cluster.Cluster.transfer_cpu_us`), ``send_start_us`` is when its send started on the source
    device and ``recv_start_us`` when its receive started on the destination, and ``arrival_us`` (when
    its consumers may use it) is that receive's finish; elsewhere both starts are -1 and ``arrival_us`` is
    ``finish_us``.
    """

    src: np.ndarray        # producer node id
    port: np.ndarray       # output port of the producer
    src_dev: np.ndarray
    dst_dev: np.ndarray
    bytes: np.ndarray
    start_us: np.ndarray
    finish_us: np.ndarray
    arrival_us: np.ndarray
    send_start_us: np.ndarray
    recv_start_us: np.ndarray

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

    def subset(self, rows: np.ndarray) -> "MemoryItems":
        """The items at ``rows`` (indexes or a mask), in their order."""
        return MemoryItems(*(getattr(self, f.name)[rows] for f in fields(self)))

    def output_port_ids(self, g: OpGraph, rows: np.ndarray) -> np.ndarray:
        """The global port id (`OpGraph.port_ptr` numbering) of the OUTPUT items at ``rows``."""
        return g.port_ptr[self.ref[rows]] + self.port[rows]


@dataclass(frozen=True)
class Violation:
    """One way a placement breaks the machine model's constraints."""

    kind: str                 # "memory", "pinned" or "colocation"
    message: str
    device: int | None = None
    bytes_over: int = 0
    time_us: float | None = None


@dataclass(frozen=True, eq=False)
class Chain:
    """The critical chain, from the last op backwards: parallel arrays, one entry per link."""

    kind: np.ndarray      # EDGE (waited for an input) or DEVICE (waited for its device)
    src: np.ndarray       # the op waited for
    dst: np.ndarray       # the op that waited
    delay_us: np.ndarray  # how long the link held dst back

    def __len__(self) -> int:
        return int(self.kind.shape[0])


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
    broken_rules: tuple[Violation, ...] = ()   # the pins and groups the placement breaks (`rule_violations`)
    graph: OpGraph | None = field(default=None, repr=False)
    memory_checked: bool = True    # peaks were computed (simulate(memory=True))
    cluster: Cluster | None = field(default=None, repr=False)

    @cached_property
    def violations(self) -> tuple[Violation, ...]:
        """How the placement breaks the machine model: memory first (the device furthest over first), then
        pins, then groups. Worded on first use: a search simulates thousands of plans that break a limit
        and reads only `feasible` of most."""
        if self.feasible:
            return ()
        if self.cluster is None:
            raise ValueError("this schedule does not know its cluster")
        if not self.memory_checked:
            return self.broken_rules
        return tuple(_memory_violations(self.cluster, self.capacity, self.peak_bytes, self.peak_time_us)) \
            + self.broken_rules

    @cached_property
    def memory(self) -> MemoryItems:
        """Every allocation of the step with its lifetime (built on first use)."""
        return _memory_items(self._graph(), self)

    def _graph(self) -> OpGraph:
        if self.graph is None:
            raise ValueError("this schedule does not know its graph")
        return self.graph

    def transfer_rows(self, port_ids: np.ndarray, dst_devices: np.ndarray) -> np.ndarray:
        """The row of `transfers` that carries global port ``port_ids[i]`` to device ``dst_devices[i]``.

        Every pair asked for must have crossed (a data edge between devices);
        rows are sorted by (global port, destination), one per pair.
        """
        g, K = self._graph(), self.num_devices
        tr = self.transfers
        key = (g.port_ptr[tr.src] + tr.port) * K + tr.dst_dev
        return np.searchsorted(key, np.asarray(port_ids) * K + np.asarray(dst_devices))

    def input_arrivals(self) -> np.ndarray:
        """When each edge's input reached its consumer (SPEC §1: local, transfer or control arrival)."""
        g = self._graph()
        if self.cluster is None:
            raise ValueError("this schedule does not know its cluster")
        dev = self.device
        src, dst = g.edge_src, g.edge_dst
        arr = self.finish_us[src].copy()
        cross = dev[src] != dev[dst]
        ctrl = cross & g.edge_control
        arr[ctrl] += self.cluster.latency[dev[src[ctrl]], dev[dst[ctrl]]]
        data = np.flatnonzero(cross & ~g.edge_control)
        if data.size:
            rows = np.minimum(self.transfer_rows(g.edge_port_id[data], dev[dst[data]]),
                              max(len(self.transfers) - 1, 0))
            arr[data] = self.transfers.arrival_us[rows]
        return arr

    def critical_chain(self) -> "Chain":
        """The chain of waits that ends at the op finishing last, traced backwards (see `Chain`)."""
        return _critical_chain(self._graph(), self)

    @property
    def feasible(self) -> bool:
        return not self.broken_rules and not (self.memory_checked and bool((self.peak_bytes > self.capacity).any()))

    @property
    def num_devices(self) -> int:
        return int(self.peak_bytes.shape[0])

    def overflow(self) -> np.ndarray:
        """Bytes over capacity per device (0 where it fits)."""
        over = self.peak_bytes - self.capacity
        return np.where(over > 0, over, 0.0)

    def shortfall_key(self) -> tuple[float, float]:
        """The order of plans when memory binds: less total overflow first, then the shorter step."""
        return float(self.overflow().sum()), float(self.makespan_us)

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
        t, level = _device_levels(self.memory, device)
        base = int(self.persistent_bytes[device])
        if t.size == 0:
            return np.array([0.0]), np.array([base])
        return np.concatenate([[0.0], t]), np.concatenate([[base], base + level])

    def levels_at(self, time_us: float) -> np.ndarray:
        """Bytes each device holds just after the instant ``time_us`` (its allocations and frees done,
        persistent included): every device's `timeline` read at that time, in one pass over the items."""
        m = self.memory
        alive = (m.alloc_us <= time_us) & (m.free_us > time_us)
        held = np.bincount(m.device[alive], weights=m.bytes[alive].astype(np.float64), minlength=self.num_devices)
        return self.persistent_bytes.astype(np.float64) + held

    def live_at(self, device: int, time_us: float) -> MemoryItems:
        """The items occupying ``device`` at ``time_us`` (frees at that instant done first)."""
        m = self.memory
        alive = (m.device == device) & (m.alloc_us <= time_us) & (
            (m.free_us > time_us) | ((m.free_us == time_us) & (m.alloc_us == time_us)))
        return m.subset(np.flatnonzero(alive))


def check_arguments(g: object, cluster: object, fn: str) -> None:
    """A `TypeError` naming ``fn``'s argument where ``g`` is no `OpGraph` (`check_graph`) or ``cluster`` no
    `Cluster` (`check_cluster`)."""
    check_graph(g, fn)
    check_cluster(cluster, fn)


def _as_assignment(g: OpGraph, cluster: Cluster, placement: Placement | np.ndarray) -> np.ndarray:
    dev = placement.assignment if isinstance(placement, Placement) else device_indices(placement)
    if dev.shape != (g.num_nodes,):
        raise PlacementError(f"placement has {dev.size} entries but graph {g.name!r} has {g.num_nodes} nodes")
    K = cluster.num_devices
    if dev.size and (dev.min() < 0 or dev.max() >= K):
        v = int(np.flatnonzero((dev < 0) | (dev >= K))[0])
        raise PlacementError(f"node {g.names[v]!r} is placed on device {dev[v]}, "
                             f"but the cluster has {K} devices (0..{K - 1})")
    return dev.astype(np.int64, copy=False)


def _memory_items(g: OpGraph, s: Schedule) -> MemoryItems:
    """Every allocation with its lifetime (SPEC §1 memory rules, §1.1 rules 4-7)."""
    dev, start, finish, tr = s.device, s.start_us, s.finish_us, s.transfers
    src, dst = g.edge_src, g.edge_dst
    data = ~g.edge_control
    pid = g.edge_port_id
    owner = g.port_owner
    t_pid = g.port_ptr[tr.src] + tr.port
    # Outputs: from the producer's start until every same-device consumer has
    # finished and every transfer of the tensor has arrived; a tensor with no
    # consumers dies when its producer finishes.
    out_free = finish[owner].copy()
    same = data & (dev[src] == dev[dst])
    np.maximum.at(out_free, pid[same], finish[dst[same]])
    if len(tr):
        np.maximum.at(out_free, t_pid, tr.finish_us)
    # Received copies: from the transfer's start until every consumer there has finished.
    rec_free = tr.finish_us.copy()
    xd = np.flatnonzero(data & (dev[src] != dev[dst]))
    if xd.size:
        np.maximum.at(rec_free, s.transfer_rows(pid[xd], dev[dst[xd]]), finish[dst[xd]])
    # A forwarded output allocates nothing and keeps the buffer it forwards (the producer's copy on the
    # same device, else the received copy) until it is freed itself: deepest forwards of a chain first.
    for level in _forward_levels(g)[::-1]:
        e = g.port_forward[level]
        local = dev[src[e]] == dev[dst[e]]
        np.maximum.at(out_free, pid[e[local]], out_free[level[local]])
        far = ~local
        if far.any():
            np.maximum.at(rec_free, s.transfer_rows(pid[e[far]], dev[dst[e[far]]]), out_free[level[far]])
    tmp = np.flatnonzero(g.temp_bytes > 0)
    own = g.port_alloc_bytes
    outs = np.flatnonzero(own > 0)
    port_index = outs - g.port_ptr[owner[outs]]
    rec = np.flatnonzero(tr.bytes > 0)
    return MemoryItems(
        device=np.concatenate([dev[owner[outs]], tr.dst_dev[rec], dev[tmp]]),
        alloc_us=np.concatenate([start[owner[outs]], tr.start_us[rec], start[tmp]]),
        free_us=np.concatenate([out_free[outs], rec_free[rec], finish[tmp]]),
        bytes=np.concatenate([own[outs], tr.bytes[rec], g.temp_bytes[tmp]]),
        kind=np.concatenate([np.full(outs.size, OUTPUT), np.full(rec.size, RECEIVED), np.full(tmp.size, TEMP)]),
        ref=np.concatenate([owner[outs], rec, tmp]),
        port=np.concatenate([port_index, tr.port[rec], np.zeros(tmp.size, np.int64)]),
    )


def _forward_levels(g: OpGraph) -> list[np.ndarray]:
    """The forwarded ports grouped by depth: level 0 forwards a buffer of its own producer's making, level
    ``i`` forwards an output of level ``i - 1`` (a chain of forwards). Placement-independent; cached."""
    cached = g.__dict__.get("_forward_levels")
    if cached is not None:
        return cached
    fwd = g.port_forward
    ports = np.flatnonzero(fwd >= 0)
    levels: list[np.ndarray] = []
    if ports.size:
        source = g.edge_port_id[fwd[ports]]          # the port each forwarded port forwards
        depth = np.zeros(g.num_ports, dtype=np.int64)
        for _ in range(ports.size + 1):              # longest chain first settles; a DAG has no cycle
            new = np.where(fwd[source] >= 0, depth[source] + 1, 0)
            if np.array_equal(new, depth[ports]):
                break
            depth[ports] = new
        d = depth[ports]
        levels = [ports[d == i] for i in range(int(d.max()) + 1)]
    object.__setattr__(g, "_forward_levels", levels)
    return levels


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
    _, time, key, delta = _sorted_events(m.subset(sel))
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


def _memory_violations(cluster: Cluster, cap: np.ndarray, peak: np.ndarray, peak_t: np.ndarray) -> list[Violation]:
    """Each device over its capacity ``cap``, the one furthest over first."""
    out: list[Violation] = []
    over = np.flatnonzero(peak > cap)
    for d in over[np.argsort(cap[over] - peak[over], kind="stable")]:     # the device furthest over first
        d = int(d)
        over = int(peak[d] - cap[d])
        out.append(Violation("memory", f"device {d} ({cluster.devices[d].name}) needs {format_bytes(int(peak[d]))} at "
                                       f"t={peak_t[d]:.1f}us but has {format_bytes(int(cap[d]))}: {over} bytes short",
                             device=d, bytes_over=over, time_us=float(peak_t[d])))
    return out


def rule_violations(g: OpGraph, dev: np.ndarray) -> list[Violation]:
    """The pin and colocation rules ``dev`` breaks (at most 20 of each listed, then a count)."""
    out: list[Violation] = []
    pins = g.pinned_nodes
    pinned = pins[g.pinned[pins] != dev[pins]]
    for v in pinned[:20].tolist():
        out.append(Violation("pinned", f"node {g.names[v]!r} is pinned to device {int(g.pinned[v])} "
                                       f"but placed on device {int(dev[v])}", device=int(dev[v])))
    if pinned.size > 20:
        out.append(Violation("pinned", f"... and {pinned.size - 20} more pinned nodes off their device"))
    grouped = g.grouped_nodes
    # the common case first: every member on its group's first member's device (O(V), no ufunc.at)
    if grouped.size and (dev[grouped] != dev[g.unit_first[grouped]]).any():
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


RECENT_SCHEDULES = 8
"""Schedules `simulate` remembers per graph (at most `RECENT_BYTES` of arrays): passes often simulate a
plan they were handed (a start the seed pass scored, a plan step 2 repaired, the plan refinement
returned), and a repeat then costs no simulation: 6 of 72 in the 200k-op tight K=8 placement. The byte cap
keeps the memo's share of the process's memory small (about 50-70 MB of RSS at 200k ops)."""
RECENT_BYTES = 48 * 2**20
_RECENT = "_sim_recent"
_RECENT_LOCK = threading.Lock()


def digest(dev: np.ndarray, num_devices: int) -> bytes:
    """A 128-bit digest of an assignment onto ``num_devices`` devices (one byte per op up to 256 of them, so
    that hashing costs little next to a simulation; any integer dtype gives the same key)."""
    small = np.uint8 if num_devices <= 256 else np.int64
    return hashlib.blake2b(np.ascontiguousarray(dev, dtype=small).data, digest_size=16).digest()


def simulate(g: OpGraph, cluster: Cluster, placement: Placement | np.ndarray, *,
             memory: bool = True) -> Schedule:
    """Simulate one step of ``g`` placed by ``placement`` on ``cluster`` (SPEC §1).

    With ``memory=False`` only the schedule is computed (peaks are just the
    persistent bytes, and only pin and colocation violations are reported);
    the partitioner uses that when it needs nothing but the makespan.

    The same graph, cluster object, memory flag and assignment as one of the last few calls give that
    call's schedule again (a new `Schedule` whose ``device`` is this call's array, its other arrays the
    same read-only ones) without simulating.
    """
    check_arguments(g, cluster, "simulate")
    dev = _as_assignment(g, cluster, placement)
    key = digest(dev, cluster.num_devices)      # then whole arrays compared only where the digests match
    with _RECENT_LOCK:      # refinement's searches simulate on several threads at once
        recent = g.__dict__.get(_RECENT)
        if recent is None:
            recent = []
            object.__setattr__(g, _RECENT, recent)
        for i, (c, m, k, d, s, _) in enumerate(recent):
            if k == key and c is cluster and m == memory and np.array_equal(d, dev):
                recent.insert(0, recent.pop(i))
                return _with_device(s, dev)
    s = _simulate(g, cluster, dev, memory)
    size = dev.nbytes + s.start_us.nbytes * 3 + sum(getattr(s.transfers, f).nbytes for f in _TRANSFER_FIELDS)
    with _RECENT_LOCK:
        recent.insert(0, (cluster, memory, key, dev.copy(), _with_device(s, s.device), size))
        held = 0
        for i, entry in enumerate(recent):
            held += entry[5]
            if i >= RECENT_SCHEDULES or (i > 0 and held > RECENT_BYTES):
                del recent[i:]
                break
    return s


def _with_device(s: Schedule, dev: np.ndarray) -> Schedule:
    """A new `Schedule` with ``s``'s fields (its arrays shared, read-only) and ``dev`` as its ``device``;
    what ``s`` has worked out on first use (`Schedule.memory`, `Schedule.violations`) is worked out anew.
    (`dataclasses.replace` does the same through the constructor, at several times the cost.)"""
    out = object.__new__(Schedule)
    out.__dict__.update({f: v for f, v in s.__dict__.items() if f in _SCHEDULE_FIELDS})
    object.__setattr__(out, "device", dev)
    return out


def _simulate(g: OpGraph, cluster: Cluster, dev: np.ndarray, memory: bool) -> Schedule:
    topological_order(g)    # (cached) a cycle, in a graph built with verify=False, is a GraphError naming a node
    K = cluster.num_devices
    run = run_kernel(g, cluster, dev, memory)
    order = np.lexsort((run.tr_dst, run.tr_pid))                 # canonical: producer, port, destination
    tr_src = g.port_owner[run.tr_pid[order]]
    transfers = Transfers(tr_src, run.tr_pid[order] - g.port_ptr[tr_src], dev[tr_src], run.tr_dst[order],
                          run.tr_bytes[order], run.tr_start[order], run.tr_finish[order], run.tr_arrive[order],
                          run.tr_send_start[order], run.tr_recv_start[order])
    persistent = np.zeros(K, dtype=np.int64)
    np.add.at(persistent, dev, g.persistent_bytes)
    peak = persistent + run.transient if memory else persistent.copy()
    peak_t = run.peak_t if memory else np.zeros(K)
    s = Schedule(run.makespan_us, dev, run.start, run.finish, run.ready, transfers, persistent, peak, peak_t,
                 cluster.capacity.copy(), tuple(rule_violations(g, dev)), g, memory, cluster)
    # a schedule is a value (the memo hands the same arrays to every caller): its arrays are read-only,
    # all but ``device``, which is the caller's own assignment
    for a in (s.start_us, s.finish_us, s.ready_us, s.persistent_bytes, s.peak_bytes, s.peak_time_us, s.capacity,
              *(getattr(transfers, f) for f in _TRANSFER_FIELDS)):
        a.flags.writeable = False
    return s


_TRANSFER_FIELDS = tuple(f.name for f in fields(Transfers))
_SCHEDULE_FIELDS = frozenset(f.name for f in fields(Schedule))


def single_device_peak(g: OpGraph) -> int:
    """Peak memory with every op on one device, pins ignored (SPEC §1.1 rule 10)."""
    check_graph(g, "single_device_peak")
    one = Cluster.homogeneous(1)     # a new cluster each time: not worth a place in the memo
    return int(_simulate(g, one, np.zeros(g.num_nodes, dtype=np.int64), True).peak_bytes[0])


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


def _critical_chain(g: OpGraph, s: Schedule) -> Chain:
    """The chain of waits that ends at the op finishing last, traced backwards.

    At each op: if it started later than it became ready, it waited for the
    op that ran before it on its device; otherwise for its last input (the
    in-edge whose input arrived last, the first such edge on ties).
    """
    V = g.num_nodes
    if V == 0:
        return Chain(*(np.empty(0, dtype=t) for t in (np.int64, np.int64, np.int64, np.float64)))
    dev, start, finish, ready = s.device, s.start_us, s.finish_us, s.ready_us
    order = np.lexsort((start, dev))
    prev = np.full(V, -1, dtype=np.int64)
    same = dev[order[1:]] == dev[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    arr = np.asarray(s.input_arrivals(), dtype=np.float64)
    last_in = _last_inputs(V, g.edge_dst.astype(np.int64, copy=False), arr)
    waited = start > ready + 1e-9
    kinds, srcs, dsts, delays = _trace_chain(int(np.argmax(finish)), waited, prev, last_in,
                                             g.edge_src.astype(np.int64), start, ready, finish, arr)
    return Chain(kinds, srcs, dsts, delays)


@njit
def _last_inputs(V, dst, arr):
    """Per node, its in-edge whose input arrived last (the lowest edge id on ties), or -1."""
    last = np.full(V, -1, dtype=np.int64)
    for e in range(dst.shape[0]):
        v = dst[e]
        if last[v] < 0 or arr[e] > arr[last[v]]:
            last[v] = e
    return last


@njit
def _trace_chain(v, waited, prev, last_in, edge_src, start, ready, finish, arr):
    """The backward walk of `_critical_chain`, compiled: one step per link of the chain."""
    V = waited.shape[0]
    kinds = np.empty(V, dtype=np.int64)
    srcs = np.empty(V, dtype=np.int64)
    dsts = np.empty(V, dtype=np.int64)
    delays = np.empty(V, dtype=np.float64)
    seen = np.zeros(V, dtype=np.bool_)
    n = 0
    while not seen[v]:
        seen[v] = True
        if waited[v] and prev[v] >= 0:
            u = prev[v]
            kinds[n] = DEVICE
            srcs[n] = u
            dsts[n] = v
            delays[n] = start[v] - ready[v]
            n += 1
            v = u
            continue
        e = last_in[v]
        if e < 0:
            break
        u = edge_src[e]
        kinds[n] = EDGE
        srcs[n] = u
        dsts[n] = v
        delays[n] = arr[e] - finish[u]
        n += 1
        v = u
    return kinds[:n].copy(), srcs[:n].copy(), dsts[:n].copy(), delays[:n].copy()
