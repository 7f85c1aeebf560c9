"""ParDNN step 2: meet every device's memory limit with the least damage to step time.

The pass works on the simulator's own memory model (SPEC §1), not a second
one: each iteration simulates the plan, finds every device whose peak
exceeds its capacity, and moves units (colocation groups or single ops) off
it.

*Memory potential.* At a device's peak instant ``t``, a unit would free:
its persistent bytes; its outputs alive at ``t`` whose consumers on that
device all belong to the unit (otherwise a copy would come straight back);
received copies alive at ``t`` that only the unit consumes there; and the
temp of a member running at ``t``.

*Heuristic I (``knapsack``).* Each overflow is a 0-1 min-knapsack: free at
least the overflow at the least cost. Greedy by least cost per byte freed,
the cost being the unit's compute plus the communication its move adds
(ParDNN's "disturbance to step 1"), each unit going to the cheapest device
that keeps room for it. Then re-simulate and repeat.

*Heuristic II (``residual``).* For large graphs: move long-lived bytes in
bulk (persistent weights and stashed activations, by bytes x lifetime per
unit of cost) until each overloaded device's estimate fits with a margin,
and when a device stays over, split its run of ops at the peak (the later
half of its ops that are alive at the peak go to the device with the most
room). Fewer, larger moves, so fewer simulations.

``auto`` picks I below ``knapsack_max_nodes`` and II above it, where a round
still takes I's exact moves once the overflow is at most
``knapsack_overflow_share`` of the capacity (bulk moves overshoot near the
end). When no move helps, the pass leaves the least-overflowing plan it saw
and the caller reports the shortfall.

*Candidates.* The pass repairs several starting plans (the seed pass's
first-ranked start, the step-1 plan, the path split, on small graphs the
all-on-one-device plan, and while nothing fits the other starts) and keeps
the fastest that fits; a fitting candidate bounds the others' repairs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..analysis import layer_anchors
from ..cluster import Cluster
from ..ir import OpGraph
from ..machine import OUTPUT, RECEIVED, TEMP, CostModel, Evaluator, Schedule, device_order
from ..pipeline import PlanState, check_pass_options
from ._kernels import unit_comm_sums
from ._threads import THREADS_FROM, Background, workers_for

HEURISTICS = ("auto", "knapsack", "residual")

# Tuning constants of the repair loop (`FitMemory._repair`)
SPLIT_AFTER_STUCK = 2
"""Rounds in a row without less overflow, after which the worst device's run is split at its peak."""
GIVE_UP_AFTER_STUCK = 4
"""Rounds in a row without less overflow, after which the repair stops (the best plan seen is kept)."""
BOUND_SLACK = 1.5
"""A repair stops once its plan's step is this many times the fastest fitting candidate's: the memory-aware
refinement after step 2 wins back up to about a third of a step (tuning suite: nasnetalarge K=8 tight,
463 -> 334 ms), so a candidate within that may still end first."""


def potentials(g: OpGraph, s: Schedule, d: int, t: float) -> np.ndarray:
    """Bytes each unit would stop holding on device ``d`` at time ``t`` if it moved away.

    Every sum is of whole bytes (exact in float64 below 2**53), so accumulating with `np.bincount` gives
    the same numbers in any order."""
    unit = g.unit
    nu = g.num_units
    on_d = s.device == d
    pot = np.bincount(unit[on_d], weights=g.persistent_bytes[on_d].astype(np.float64), minlength=nu)
    m = s.live_at(d, t)
    # outputs whose same-device consumers all sit in the producer's unit
    data = ~g.edge_control
    src_d = s.device[g.edge_src] == d
    dst_d = s.device[g.edge_dst] == d
    local = data & src_d & dst_d
    shared_port = np.zeros(g.num_ports, dtype=bool)
    ext = local & (unit[g.edge_src] != unit[g.edge_dst])
    shared_port[g.edge_port_id[ext]] = True
    out = np.flatnonzero(m.kind == OUTPUT)
    if out.size:
        owner = m.ref[out]
        pid = m.output_port_ids(g, out)
        keep = ~shared_port[pid]
        pot += np.bincount(unit[owner[keep]], weights=m.bytes[out[keep]].astype(np.float64), minlength=nu)
    tmp = np.flatnonzero(m.kind == TEMP)
    if tmp.size:
        pot += np.bincount(unit[m.ref[tmp]], weights=m.bytes[tmp].astype(np.float64), minlength=nu)
    rec = np.flatnonzero(m.kind == RECEIVED)
    if rec.size:
        xe = np.flatnonzero(data & dst_d & ~src_d)
        tid = s.transfer_rows(g.edge_port_id[xe], np.full(xe.size, d))
        # the single consuming unit of each transfer row (-1: none here; -2: several units consume it)
        cu = unit[g.edge_dst[xe]]
        lo = np.full(len(s.transfers), np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(len(s.transfers), -1, dtype=np.int64)
        np.minimum.at(lo, tid, cu)
        np.maximum.at(hi, tid, cu)
        cons = np.where(hi < 0, -1, np.where(lo == hi, hi, -2))
        rows = m.ref[rec]
        sole = cons[rows] >= 0
        pot += np.bincount(cons[rows[sole]], weights=m.bytes[rec[sole]].astype(np.float64), minlength=nu)
    return pot


class _Units:
    """Per-unit arrays the moves need: members, work, footprint, internal communication, pins."""

    def __init__(self, g: OpGraph, cm: CostModel):
        self.unit = g.unit
        n = self.n = g.num_units
        self.ptr, self.members_sorted = g.unit_members
        self.work = np.bincount(self.unit, weights=cm.w, minlength=n)
        pers = np.bincount(self.unit, weights=g.persistent_bytes.astype(np.float64), minlength=n)
        biggest = np.zeros(n)
        np.maximum.at(biggest, self.unit, (g.alloc_bytes_total + g.temp_bytes).astype(np.float64))
        self.footprint = pers + biggest           # what the unit surely needs wherever it goes
        internal = self.unit[g.edge_src] == self.unit[g.edge_dst]
        self.internal_c = np.bincount(self.unit[g.edge_src[internal]], weights=cm.c[internal], minlength=n)
        self.pinned = g.unit_pin >= 0


def _comm_sums(units: _Units, A: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Row ``i``: per device ``e``, ``A[members of cand[i], e].sum()``, the same sum bit for bit as a row of
    a contiguous copy (a unit of one op reads its row as is). Moving unit ``u`` from its device ``here``
    to ``e`` adds ``sums[here] - sums[e] - 2 * internal_c[u]`` of communication (negative: saved).
    """
    return unit_comm_sums(np.ascontiguousarray(A, dtype=np.float64), units.ptr, units.members_sorted,
                          np.ascontiguousarray(cand, dtype=np.int64))


def knapsack_moves(g: OpGraph, cluster: Cluster, cm: CostModel, units: _Units, s: Schedule,
                   *, margin: float = 0.05, max_candidates: int = 1500,
                   frozen: np.ndarray | None = None) -> list[tuple[int, int]]:
    """Heuristic I: for each overloaded device, the cheapest units per byte freed at its peak.

    A target must have room for the unit's persistent bytes at its own peak,
    and for the rest of what the unit frees at the instant of the overflow.
    Units marked in ``frozen`` (a bool per unit) never move.
    """
    K = cluster.num_devices
    dev = s.device
    over = s.overflow()
    cap = cluster.capacity
    room_peak = cap - s.peak_bytes
    A = cm.comm_by_device(g, dev, K)
    pers = np.bincount(g.unit, weights=g.persistent_bytes.astype(np.float64), minlength=units.n)
    moves: list[tuple[int, int]] = []
    movable = ~units.pinned
    if frozen is not None:
        frozen = np.asarray(frozen)
        if frozen.dtype != bool or frozen.shape != (units.n,):
            raise ValueError(f"frozen must be {units.n} booleans, one per unit; got {frozen.dtype} {frozen.shape}")
        movable = movable & ~frozen      # before the candidate cap: a frozen unit takes no candidate's place
    taken = np.zeros(units.n, dtype=bool)
    for d in np.argsort(-over, kind="stable").tolist():
        if over[d] <= 0:
            break
        t = float(s.peak_time_us[d])
        pot = potentials(g, s, d, t)
        cand = np.flatnonzero((pot > 0) & movable)
        if cand.size == 0:
            continue
        if cand.size > max_candidates:   # keep the most promising by bytes per unit of work
            score = pot[cand] / (units.work[cand] + 1.0)
            cand = np.sort(cand[np.argsort(-score, kind="stable")[:max_candidates]])
        room_t = cap - s.levels_at(t)
        # each candidate's cheapest target with room (the first on ties), ranked by cost per byte freed
        cand = cand[~taken[cand]]
        ok = ((np.arange(K) != d)[None, :] & (room_peak[None, :] >= pers[cand][:, None])
              & (room_t[None, :] >= pot[cand][:, None]))
        some = ok.any(axis=1)
        cand, ok = cand[some], ok[some]
        if cand.size == 0:
            continue
        sums = _comm_sums(units, A, cand)
        here = dev[units.members_sorted[units.ptr[cand]]]
        rows = np.arange(cand.size)
        cost = np.maximum(units.work[cand][:, None]
                          + ((sums[rows, here][:, None] - sums) - (2 * units.internal_c[cand])[:, None]), 1e-3)
        cost[~ok] = np.inf
        target = np.argmin(cost, axis=1)
        ratio = cost[rows, target] / pot[cand]
        freed = 0.0
        for i in np.lexsort((cand, ratio)).tolist():
            u, e = int(cand[i]), int(target[i])
            if freed >= over[d] * (1 + margin):
                break
            if room_peak[e] < pers[u] or room_t[e] < pot[u]:
                continue
            moves.append((u, e))
            taken[u] = True
            room_peak[e] -= pers[u]
            room_t[e] -= pot[u]
            freed += pot[u]
    return moves


def residual_moves(g: OpGraph, cluster: Cluster, cm: CostModel, units: _Units, s: Schedule,
                   *, margin: float = 0.25) -> list[tuple[int, int]]:
    """Heuristic II: move long-lived bytes in bulk: persistent and long-lifetime tensors first."""
    dev = s.device
    over = s.overflow()
    room = cluster.capacity - s.peak_bytes
    m = s.memory
    span = max(float(s.makespan_us), 1e-9)
    # bytes x lifetime fraction per unit, on its own device
    life = np.clip((m.free_us - m.alloc_us) / span, 0.0, 1.0)
    owner_unit = np.where(m.kind == RECEIVED, -1, g.unit[np.where(m.kind == RECEIVED, 0, m.ref)])
    area = np.zeros(units.n)
    own = owner_unit >= 0
    np.add.at(area, owner_unit[own], (m.bytes[own] * life[own]).astype(np.float64))
    area += np.bincount(g.unit, weights=g.persistent_bytes.astype(np.float64), minlength=units.n)
    udev = np.full(units.n, -1, dtype=np.int64)
    udev[g.unit] = dev
    moves: list[tuple[int, int]] = []
    for d in np.argsort(-over, kind="stable").tolist():
        if over[d] <= 0:
            break
        cand = np.flatnonzero((udev == d) & (area > 0) & ~units.pinned)
        if cand.size == 0:
            continue
        ratio = (units.work[cand] + 1.0) / area[cand]
        order = cand[np.argsort(ratio, kind="stable")]
        freed = 0.0
        enough = float(over[d] * (1 + margin))
        rooms = room.tolist()
        devs = range(len(rooms))
        for u, fp, a in zip(order.tolist(), units.footprint[order].tolist(), area[order].tolist()):
            if freed >= enough:
                break
            e = max(devs, key=rooms.__getitem__)      # the first device with the most room, as np.argmax
            if e == d or rooms[e] < fp:
                break
            moves.append((u, e))
            rooms[e] -= fp
            freed += a
        room = np.array(rooms)
    return moves


def apply_moves(units: _Units, dev: np.ndarray, moves: list[tuple[int, int]]) -> np.ndarray:
    """A copy of ``dev`` with each moved unit's members on its new device (a unit moved twice: the last)."""
    if not moves:
        return dev.copy()
    mu, me = np.array(moves, dtype=np.int64).T
    target = np.full(units.n, -1, dtype=np.int64)
    _, last = np.unique(mu[::-1], return_index=True)
    keep = mu.size - 1 - last
    target[mu[keep]] = me[keep]
    to = target[units.unit]
    return np.where(to >= 0, to, dev)


def split_at_peak(g: OpGraph, cluster: Cluster, s: Schedule, d: int) -> list[tuple[int, int]]:
    """Split device ``d``'s run of ops at its peak: the later half of the ops alive at the peak leave."""
    t = float(s.peak_time_us[d])
    on = np.flatnonzero((s.device == d) & (s.finish_us >= t))
    if on.size < 2:
        return []
    room = cluster.capacity - s.peak_bytes
    room[d] = -np.inf
    e = int(np.argmax(room))
    later = on[np.argsort(s.start_us[on], kind="stable")][on.size // 2:]
    pinned = g.unit_pin >= 0
    return [(int(u), e) for u in np.unique(g.unit[later]).tolist() if not pinned[u]]


def _stage_order(g: OpGraph) -> np.ndarray:
    """Nodes by layer anchor (`pardnn.analysis.layer_anchors`), ties by node id: the split's order."""
    return np.lexsort((np.arange(g.num_nodes), layer_anchors(g)))


class _Stages:
    """Units in stage order (by `pardnn.analysis.layer_anchors`, or ``order``), and the assignment a list
    of cuts gives: device ``devices[i]`` (the fastest first) gets units ``[ends[i-1], ends[i])``, the last
    device the rest; pinned units stay on their pins."""

    def __init__(self, g: OpGraph, cluster: Cluster, order: np.ndarray | None = None):
        order = _stage_order(g) if order is None else order
        units_in_order = g.unit[order]
        _, first = np.unique(units_in_order, return_index=True)
        self.seq = units_in_order[np.sort(first)]        # units by first appearance
        self.n = self.seq.size
        self.devices = device_order(cluster)
        self.nd = len(self.devices)
        pos = np.empty(g.num_units, dtype=np.int64)
        pos[self.seq] = np.arange(self.n)
        self.upos = pos[g.unit]                          # stage position of each node's unit
        self.pins = g.unit_pin[g.unit]
        self.pinned = self.pins >= 0

    def assignment(self, ends: np.ndarray) -> np.ndarray:
        stage = np.searchsorted(ends, self.upos, side="right")
        dev = self.devices[np.minimum(stage, self.nd - 1)]
        dev[self.pinned] = self.pins[self.pinned]
        return dev


def memory_split(g: OpGraph, cluster: Cluster, ev: Evaluator, *, order: np.ndarray | None = None,
                 rounds: int = 12, fill: float = 0.995, sequential_max_nodes: int = 30_000,
                 stop: threading.Event | None = None) -> np.ndarray:
    """Heuristic II's "split the path": cut the units into contiguous stages, one per device (the fastest
    first), each as long as the *simulated* peak of its device allows. Units are ordered by
    `pardnn.analysis.layer_anchors`, so a layer's forward, backward and update ops share a stage and
    stashed activations stay on the device that made them.

    Device ``i`` gets units ``[c_i, c_{i+1})``; the last device gets the rest. All cuts move together:
    each round simulates the whole split once and sets every stage's length (in bytes the units
    allocate) to where its device's peak would reach ``fill`` of its capacity, by the secant through the
    stage's last two (length, peak) points (proportionally at first, by bisection when the secant
    leaves the bracket seen so far). The rounds stop when every device fits or the cuts stop moving;
    the split with the least overflow (then the shortest step) is returned. A round is one simulation,
    so the split costs about ``rounds`` simulations whatever the number of devices.

    When that does not fit, on graphs up to ``sequential_max_nodes`` (where simulations are cheap) the
    cuts are placed one at a time instead (`sequential_split`, about six simulations a cut): the rounds
    can circle where units are few and lumpy, and the greedy split, even when it overflows, leaves the
    overflow on the last device, where the repair's moves find room more easily.

    Once ``stop`` is set (the pass ends with an error or a Ctrl-C while the split is made on a thread), no
    more simulations begin and the best split so far is returned.
    """

    order = _stage_order(g) if order is None else order     # computed once, for the fallback too
    st = _Stages(g, cluster, order)
    seq, n, devices, nd, assignment = st.seq, st.n, st.devices, st.nd, st.assignment
    cap = cluster.capacity
    if nd == 1 or n == 0:
        return assignment(np.zeros(0, dtype=np.int64))
    # a unit's length: the bytes its ops hold (persistent, outputs, temps), at least 1
    size = g.persistent_bytes.astype(np.float64) + g.alloc_bytes_total + g.temp_bytes
    length = np.bincount(g.unit, weights=size, minlength=g.num_units)[seq] + 1.0
    cum = np.concatenate([[0.0], np.cumsum(length)])

    first_end = np.arange(1, nd)

    def cuts(lengths: np.ndarray) -> np.ndarray:
        """Unit cuts whose stages' lengths are about ``lengths``; every stage but the last gets at least one
        unit while units are left (the cuts strictly increase up to ``n``)."""
        ends = np.searchsorted(cum, np.cumsum(lengths), side="right") - 1
        ends = np.maximum.accumulate(np.maximum(ends - first_end, 0)) + first_end
        return np.minimum(ends, n)

    lens = np.full(nd - 1, cum[-1] / nd)
    seen: list[list[tuple[float, float]]] = [[] for _ in range(nd - 1)]   # (length, peak) per stage
    fit_hi = np.zeros(nd - 1)                        # the longest length seen to fit, per stage
    over_lo = np.full(nd - 1, np.inf)                # the shortest seen to overflow
    best = None
    ends = cuts(lens)
    for _ in range(rounds):
        if stop is not None and stop.is_set():
            return assignment(ends) if best is None else best[1]
        dev = assignment(ends)
        s = ev.schedule(dev, memory=True)
        key = s.shortfall_key()
        if best is None or key < best[0]:
            best = (key, dev)
        if s.feasible:
            break
        starts = np.concatenate([[0], ends[:-1]])
        actual = cum[ends] - cum[starts]
        for i in range(nd - 1):
            d = int(devices[i])
            L, p, target = float(actual[i]), float(s.peak_bytes[d]), fill * float(cap[d])
            if p <= cap[d]:
                fit_hi[i] = max(fit_hi[i], L)
            else:
                over_lo[i] = min(over_lo[i], L)
            prev = [q for q in seen[i] if abs(q[0] - L) > 1e-9 * max(L, 1.0)]
            seen[i].append((L, p))
            if prev and (p - prev[-1][1]) * (L - prev[-1][0]) > 0:
                slope = (p - prev[-1][1]) / (L - prev[-1][0])
                want = L + (target - p) / slope
            else:
                want = L * target / max(p, 1.0)
            want = min(max(want, 0.5 * L), 2.0 * L)
            lo, hi = fit_hi[i], over_lo[i]
            if not lo < want < hi:
                want = 0.5 * (lo + hi) if np.isfinite(hi) else max(want, lo)
            lens[i] = max(want, 1.0)
        new = cuts(lens)
        if np.array_equal(new, ends):
            # the lengths moved less than a unit: shift each boundary by one unit towards the device
            # with more room, relative to its capacity
            finite = np.isfinite(cap[devices])
            rel = np.full(nd, -np.inf)          # an unlimited device always has room
            with np.errstate(divide="ignore", invalid="ignore"):    # a device of 0 bytes: inf (nan when empty)
                rel[finite] = (s.peak_bytes[devices][finite] - cap[devices][finite]) / cap[devices][finite]
            lo = np.concatenate([[0], ends[:-1]])
            hi = np.concatenate([ends[1:], [n]])
            new = ends - ((rel[:-1] > rel[1:]) & (ends - 1 > lo)) + ((rel[1:] > rel[:-1]) & (ends + 1 < hi))
            if np.array_equal(new, ends):
                break
        ends = new
    if best[0][0] > 0 and g.num_nodes <= sequential_max_nodes:
        return sequential_split(g, cluster, ev, order=order, stop=stop)
    return best[1]


def sequential_split(g: OpGraph, cluster: Cluster, ev: Evaluator, *, order: np.ndarray | None = None,
                     rel_tol: float = 0.01, stop: threading.Event | None = None) -> np.ndarray:
    """`memory_split` one cut at a time: each cut as late as the *simulated* peak of its device allows
    (greedy, so it finds a fitting contiguous split whenever the peaks grow with the stages; about six
    simulations a cut).

    Device ``i`` gets units ``[c_i, c_{i+1})``. To place the cut ``c_{i+1}``, everything after it is
    parked on the next device and device ``i``'s peak is simulated: the search starts from an equal
    share of what is left and gallops, then bisects to ``rel_tol`` of the units left, so each cut costs
    a handful of simulations rather than log V.
    """

    st = _Stages(g, cluster, order)
    n, devices, nd = st.n, st.devices, st.nd

    def assignment(ends: list[int]) -> np.ndarray:
        return st.assignment(np.asarray(ends, dtype=np.int64))

    ends: list[int] = []
    start = 0
    for i in range(nd - 1):
        if start >= n:
            ends.append(n)
            continue
        d = devices[i]

        def fits(c: int) -> bool:
            if stop is not None and stop.is_set():     # (`memory_split`'s stop: the result is not used)
                return False
            s = ev.schedule(assignment(ends + [c] + [n] * (nd - i - 1)), memory=True)
            return bool(s.peak_bytes[d] <= cluster.capacity[d])

        guess = min(n, start + max(1, (n - start) // (nd - i)))
        tol = max(1, int(rel_tol * (n - start)))
        if fits(guess):
            lo, step = guess, max(1, (n - guess) // 8)
            hi = n + 1
            while lo < n:
                probe = min(n, lo + step)
                if fits(probe):
                    lo, step = probe, step * 2
                else:
                    hi = probe
                    break
        else:
            hi, step = guess, max(1, (guess - start) // 8)
            lo = start
            while hi - step > start + 1:
                probe = hi - step
                if fits(probe):
                    lo = probe
                    break
                hi, step = probe, step * 2
        while hi - lo > tol and hi <= n:
            mid = (lo + hi) // 2
            if mid <= start:
                break
            if fits(mid):
                lo = mid
            else:
                hi = mid
        cut = max(lo, start + 1)
        ends.append(cut)
        start = cut
    return assignment(ends)


@dataclass(frozen=True)
class FitMemory:
    name: ClassVar[str] = "memory"
    requires: ClassVar[tuple[str, ...]] = ("assignment",)
    heuristic: str = "auto"
    """knapsack (ParDNN's heuristic I), residual (heuristic II) or auto (by graph size)."""
    knapsack_max_nodes: int = 30_000
    """auto uses the knapsack up to this many nodes."""
    knapsack_overflow_share: float = 0.10
    """Above ``knapsack_max_nodes``, auto still takes the knapsack's moves in a round where the overflow is at
    most this share of the devices' capacity (`_exact`)."""
    max_iterations: int = 60
    """Rounds of moves the repair may make from each candidate plan."""
    compact_fallback: bool = True
    """On graphs up to ``knapsack_max_nodes``, also repair the all-on-the-fastest-device plan and keep the best."""
    split_fallback: bool = True
    """Also repair heuristic II's path split (`memory_split`) as a candidate."""
    first_starts: int = 1
    """Repair this many of the pipeline's starts first, even when a plan already fits (the seed pass's ranking:
    plans that fit by step time, then the least overflowing; a start equal to the incoming plan is skipped);
    the rest only while none does."""
    threads: int | None = None
    """2 or more: make the path split (a pure function of the graph and the cluster: about 12 simulations, up
    to a hundred or so with the cut-by-cut fallback up to 30k ops) on a thread of its own while the first
    candidates are repaired; None: so on graphs of
    `_threads.THREADS_FROM` to `_threads.THREADS_UP_TO` nodes plus edges with 2 or more usable CPUs. The plan
    and the figures are the same either way."""

    def __post_init__(self) -> None:
        if self.heuristic not in HEURISTICS:
            raise ValueError(f"unknown memory heuristic {self.heuristic!r}; choose one of {', '.join(HEURISTICS)}")
        check_pass_options(self)

    def __call__(self, g: OpGraph, cluster: Cluster, state: PlanState) -> PlanState:
        if state.assignment is None:
            raise ValueError("the memory pass needs an assignment: run the map pass first")
        if not np.isfinite(cluster.capacity).any():
            return state.with_stats(self.name, skipped="unlimited memory", units_moved=0)
        heuristic = self.heuristic
        if heuristic == "auto":
            heuristic = "knapsack" if g.num_nodes <= self.knapsack_max_nodes else "residual"
        ev = Evaluator(g, cluster)
        cm = CostModel.build(g, cluster)
        units = _Units(g, cm)
        dev0 = state.assignment.copy()
        s0 = ev.schedule(dev0, memory=True)
        start_over = float(s0.overflow().sum())
        if s0.feasible:
            return state.with_stats(self.name, heuristic=heuristic, units_moved=0, overflow_before=0.0,
                                    overflow_after=0.0, feasible=True, evaluations=ev.evaluations)
        spent: dict[str, int] = {}         # simulations each candidate took
        candidates: dict[str, tuple] = {}  # (shortfall key, assignment, schedule or None) of each

        def rank(key: tuple) -> tuple:
            """The candidates' order: those that fit first (by step time), then by shortfall; the first on ties."""
            return (key[0] > 0, key)

        def fits_in() -> float:
            """The step time of the fastest candidate that fits so far (inf when none does)."""
            return min((v[0][1] for v in candidates.values() if v[0][0] <= 0), default=np.inf)

        def counted(label: str, start, kind: str = heuristic, s: Schedule | None = None) -> None:
            """Repair ``start`` (a plan, or a function making one) as candidate ``label`` (made unique: two
            starts can share a name when a pipeline seeds twice)."""
            base, i = label, 2
            while label in candidates:
                label, i = f"{base} ({i})", i + 1
            e0 = ev.evaluations
            start = start() if callable(start) else start
            key, dev, sched = self._repair(g, cluster, cm, units, ev, start, kind, s, bound=fits_in())
            spent[label] = ev.evaluations - e0
            # only the leading candidate keeps its schedule (at 200k ops each holds tens of MB)
            lead = min(candidates, key=lambda k: rank(candidates[k][0]), default=None)
            if lead is None or rank(key) < rank(candidates[lead][0]):
                if lead is not None:
                    candidates[lead] = candidates[lead][:2] + (None,)
            else:
                sched = None
            candidates[label] = (key, dev, sched)

        # The pipeline's starts (the mapped plan before refinement, the list-scheduling seeds), in the seed
        # pass's order: plans that fit by step time, then the others by total overflow; one equal to the plan
        # step 2 received is skipped. A plan refined for step time alone can be far harder to repair than a
        # memory-aware seed, so the first `first_starts` of them are repaired first, and their step time
        # bounds the other candidates' repairs.
        starts = [(label, start) for label, start in state.starts if not np.array_equal(start, dev0)]
        # candidate B's path split depends on nothing the repairs do: on large graphs it is made meanwhile,
        # with its own evaluator (whose simulations count as the candidate's)
        split_ev = Evaluator(g, cluster)
        halt = threading.Event()
        split_job = Background(lambda: memory_split(g, cluster, split_ev, stop=halt),
                               self.split_fallback and workers_for(2, self.threads, g, smallest=THREADS_FROM) > 1,
                               halt)
        with split_job:
            for label, start in starts[:self.first_starts]:
                counted(f"start {label}", start.copy())
            # candidate A: repair the step-1 plan by moves
            counted("repair", dev0, s=s0)
            del s0          # (its tens of MB at 200k ops)
            # candidate B: heuristic II's path split, then the same repair
            if self.split_fallback:
                counted("split", split_job.result)
                spent["split"] += split_ev.evaluations
        # candidate C (small graphs): everything on the fastest device, then the same repair. When memory
        # binds everywhere, shedding the cheapest bytes (weights and optimizer state with little compute)
        # from a serial plan can beat repairing a parallel one that pays in transfers.
        if self.compact_fallback and g.num_nodes <= self.knapsack_max_nodes:
            pins = g.unit_pin[g.unit]
            counted("compact", np.where(pins >= 0, pins, int(device_order(cluster)[0])), "knapsack")
        # candidate D: while nothing fits, the other starts, repaired the same way, until one fits
        for label, start in starts[self.first_starts:]:
            if np.isfinite(fits_in()):
                break
            counted(f"start {label}", start.copy())
        # the fastest feasible plan, else the least overflowing
        name, (key, dev, s) = min(candidates.items(), key=lambda kv: rank(kv[1][0]))
        moved = int(np.count_nonzero(dev != dev0))
        # the other plans that fit are handed on: the memory-aware refinement starts from each of them
        others = sorted((v[0][1], k) for k, v in candidates.items() if k != name and v[0][0] <= 0)
        alternatives = tuple(candidates[k][1] for _, k in others)
        return state.replace(assignment=dev, makespan_us=float(s.makespan_us),
                             alternatives=alternatives).with_stats(
            self.name, heuristic=heuristic, chosen=name, units_moved=moved, overflow_before=start_over,
            overflow_after=key[0], feasible=bool(s.feasible), evaluations=ev.evaluations + split_ev.evaluations,
            candidates={k: {"overflow": v[0][0], "makespan_us": v[0][1], "evaluations": spent[k]}
                        for k, v in candidates.items()})

    def _exact(self, heuristic: str, cluster: Cluster, s: Schedule) -> bool:
        """Whether this round takes heuristic I's moves: always for ``knapsack``; with ``residual`` chosen by
        ``auto`` (on large graphs), once the overflow is at most `knapsack_overflow_share` of the capacity,
        where a few exact moves fit the plan and bulk moves would overshoot and stir it up. A ``residual``
        the user asked for stays residual."""
        if heuristic == "knapsack":
            return True
        if self.heuristic != "auto":
            return False
        cap = cluster.capacity[np.isfinite(cluster.capacity)]
        return float(s.overflow().sum()) <= self.knapsack_overflow_share * float(cap.sum())

    def _repair(self, g, cluster, cm, units, ev, dev, heuristic, s=None, bound=np.inf):
        """Run the move loop from ``dev`` (whose schedule ``s`` is, when given); return (key, assignment,
        schedule) of the best plan seen.

        When a round of moves does not reduce the overflow, the worst device's run of ops is split at
        its peak instead (heuristic II's second half). The repair stops once its plan's step reaches
        `BOUND_SLACK` x ``bound`` (the fastest fitting candidate's): moves that shed memory seldom shorten
        the step, and refinement wins back less than that.
        """
        if s is None:
            s = ev.schedule(dev, memory=True)
        best = (s.shortfall_key(), dev, s)
        stuck = 0
        for _ in range(self.max_iterations):
            if s.feasible or s.makespan_us >= BOUND_SLACK * bound:
                break
            moves = (knapsack_moves if self._exact(heuristic, cluster, s) else residual_moves)(g, cluster, cm, units, s)
            if not moves or stuck >= SPLIT_AFTER_STUCK:
                split = split_at_peak(g, cluster, s, int(np.argmax(s.overflow())))
                moves = split or moves
            if not moves:
                break
            trial = apply_moves(units, dev, moves)
            s2 = ev.schedule(trial, memory=True)
            if s2.shortfall_key() < best[0]:
                best = (s2.shortfall_key(), trial, s2)
                stuck = 0
            else:
                stuck += 1
                if stuck > GIVE_UP_AFTER_STUCK:
                    break
            dev, s = trial, s2
        return best
