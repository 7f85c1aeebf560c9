"""Contention-aware list scheduling, compiled: a device per op from HEFT- or ETF-like list schedules.

The Python baselines (`pardnn.baselines.heft`, `etf`) price a cross-device edge as
``latency + bytes / bandwidth`` as if every transfer had its link to itself. The
SPEC §1 machine does not work that way, and neither does this scheduler:

* one transfer per (producer output port, destination device), shared by every
  consumer of that port on the destination: it is reserved once, by the first
  consumer placed there, and later consumers read its arrival;
* a transfer holds its link ``s -> d`` for ``latency + bytes / bandwidth``
  (per-link matrices; ``bandwidth = inf`` costs latency only), from
  ``max(producer finish, link s -> d free)``; links are reserved append-only,
  in the order the scheduler places ops, and the new transfers of one op go in
  SPEC §1.1 rule 9's order (producer finish, then global port);
* a cross-device control edge delays its consumer by the link's latency and
  does not occupy the link (SPEC §1.1 rule 3);
* on a cluster whose transfers run on their devices (``transfer_cpu_us``,
  docs/machine-model.md), the scheduler does not reserve device time for
  sends and receives: it folds them into the link, whose latency and
  bandwidth are then end to end (`pardnn.cluster.Cluster.path_latency`,
  ``path_bandwidth``: latency + twice the CPU part, per byte likewise),
  control edges included. The simulator, which has the last word, runs
  them on the devices;
* an op takes ``time_us / speed[d]`` on device ``d``; HEFT puts it into the
  device's first idle gap long enough after its inputs are there (insertion, as
  published; the simulator too runs an op whenever its device is idle and it is
  ready), or after the device's last op; ETF appends it after the last op.

Two orders (``mode``):

* `HEFT` (0): ops in decreasing upward rank (mean costs, `pardnn.machine.CostModel`;
  a topological order), each to the device where it finishes earliest
  (ties: the lower device). ``cpop`` is this engine with CPOP's order and
  preference (Topcuoglu et al. 2002): ready ops by decreasing upward plus
  downward rank, and every op of the critical path (by mean costs) to the
  fastest device, unless its unit is placed already (or, steered by memory,
  that device lacks room);
* `ETF` (1): among the ready ops (every predecessor placed), the (op, device)
  pair that starts earliest; ties by the larger static level (``etf``) or
  upward rank (``etf-rank``), then the lower op
  id, then the faster device, then the lower one. Each device keeps two heaps
  of its candidates: *pending*, keyed by data-ready time, and *now* (data there
  by the time the device is free), keyed by rank. A link reservation can only make data-ready
  times later, so a heap key is a lower bound and the top is re-evaluated
  lazily (a changed one goes back with its new key); data-ready times are
  cached per (op, device) and recomputed only when a link into the device was
  reserved since. Work: O((V + E) K log V), plus one re-evaluation per stale
  top.

Colocation units: a unit's device is decided when its first member is placed;
the others follow it. A pinned unit is on its pin from the start (clamped to
the last device).

Memory (``use_mem``, a simplified `pardnn.baselines.common.MemoryTracker`):
a device's running total is the persistent bytes of every unit placed there
(pinned units charged up front) plus the outputs of the ops placed there,
each output held until its last consumer has been placed (an output nobody
consumes is not held). A unit not yet placed may go to a device only if that
total plus the unit's persistent bytes, the op's outputs and its temporaries
stays within capacity; received copies are not counted. With no device left,
the op goes where the most room is left (then the lower device). Members of a
placed unit follow it regardless. This steers along the scheduler's order;
the simulator has the last word.

The kernel returns the device, start and finish of every op as the scheduler
predicted them; on a plan where no queue reorders work (a chain, a fan), those
are the simulator's times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._jit import leaf, njit

HEFT, ETF = 0, 1
SHARED, CONTEND, EXACT = 0, 1, 2
"""How a transfer is priced (``contention``): `CONTEND` (True) as above; `SHARED` (False) one transfer per
(port, destination) as above but each with its link to itself; `EXACT` ("exact") as the Python baselines price
it, each edge alone (``latency + bytes / bandwidth`` after its producer ends, the port's other consumers on that
device notwithstanding), every idle gap of HEFT's timelines kept (`MAX_GAPS`). With `EXACT` the plain
``heft``, ``etf``, ``cpop`` and SCT plans are the baselines' own, on graphs of any size."""
PRICINGS = {True: CONTEND, False: SHARED, "exact": EXACT}
MODES = {"heft": HEFT, "etf": ETF, "etf-rank": ETF, "cpop": HEFT}
"""The schedulers by name: ``etf`` breaks ties by Hwang's static level (compute only, as the ``etf``
baseline), ``etf-rank`` by HEFT's upward rank (communication included); ``cpop`` is HEFT's engine in CPOP's
order, with the critical path preferring the fastest device."""


# ---------------------------------------------------------------------------
# Placement-independent arrays
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class ListSchedArrays:
    """What the kernel reads, built once per graph (and cluster, for the ranks)."""

    time_us: np.ndarray
    in_ptr: np.ndarray     # distinct data inputs (consumer, global port) of each node, ports ascending
    in_port: np.ndarray
    in_bytes: np.ndarray   # the largest edge of that port into that consumer
    c_ptr: np.ndarray      # producers of each node's control in-edges
    c_src: np.ndarray
    out_ptr: np.ndarray    # every out-edge's consumer (data and control), for readiness
    out_dst: np.ndarray
    indeg: np.ndarray
    port_owner: np.ndarray
    port_ptr: np.ndarray
    held: np.ndarray       # bytes of each port held until its last consumer is placed (0: no consumer)
    cons: np.ndarray       # distinct consumers of each port
    out_total: np.ndarray
    temp: np.ndarray
    unit: np.ndarray
    unit_pers: np.ndarray
    unit_ptr: np.ndarray
    unit_mem: np.ndarray
    topo: np.ndarray


def _csr_by(keys: np.ndarray, n: int) -> np.ndarray:
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr


def prepare(g) -> ListSchedArrays:
    """The graph's arrays in the kernel's layout (O(E log E), numpy)."""
    from ..analysis import topological_order

    V, P = g.num_nodes, g.num_ports
    data = np.flatnonzero(~g.edge_control)
    dst, pid, nb = g.edge_dst[data], g.edge_port_id[data], g.edge_bytes[data].astype(np.int64)
    order = np.lexsort((pid, dst))
    dst, pid, nb = dst[order], pid[order], nb[order]
    first = np.ones(dst.size, dtype=bool)
    first[1:] = (dst[1:] != dst[:-1]) | (pid[1:] != pid[:-1])
    starts = np.flatnonzero(first)
    in_bytes = np.maximum.reduceat(nb, starts) if starts.size else np.zeros(0, np.int64)
    in_dst, in_port = dst[starts], pid[starts]
    ctrl = np.flatnonzero(g.edge_control)
    corder = ctrl[np.argsort(g.edge_dst[ctrl], kind="stable")]
    optr, oeids = g.out_csr
    cons = np.bincount(in_port, minlength=P).astype(np.int64)
    held = np.where(cons > 0, g.port_alloc_bytes, 0).astype(np.int64)
    uptr, umem = g.unit_members
    return ListSchedArrays(
        time_us=g.time_us.astype(np.float64), in_ptr=_csr_by(in_dst, V), in_port=in_port.astype(np.int64),
        in_bytes=in_bytes.astype(np.float64), c_ptr=_csr_by(g.edge_dst[ctrl], V),
        c_src=g.edge_src[corder].astype(np.int64), out_ptr=optr.astype(np.int64),
        out_dst=g.edge_dst[oeids].astype(np.int64),
        indeg=np.bincount(g.edge_dst, minlength=V).astype(np.int64),
        port_owner=g.port_owner.astype(np.int64), port_ptr=g.port_ptr.astype(np.int64), held=held, cons=cons,
        out_total=g.alloc_bytes_total.astype(np.float64), temp=g.temp_bytes.astype(np.float64),
        unit=g.unit.astype(np.int64),
        unit_pers=np.bincount(g.unit, weights=g.persistent_bytes.astype(np.float64), minlength=g.num_units),
        unit_ptr=uptr.astype(np.int64), unit_mem=umem.astype(np.int64),
        topo=topological_order(g).astype(np.int64))


@njit
def upward_rank(topo, out_ptr, out_dst, out_cost, w):
    """HEFT's ``rank_u``: ``w[v] + max over out-edges (cost + rank_u(successor))``, in reverse topological order."""
    V = topo.shape[0]
    r = np.zeros(V)
    for i in range(V - 1, -1, -1):
        v = topo[i]
        best = 0.0
        for j in range(out_ptr[v], out_ptr[v + 1]):
            x = out_cost[j] + r[out_dst[j]]
            if x > best:
                best = x
        r[v] = best + w[v]
    return r


def ranks(g, cluster, a: ListSchedArrays) -> np.ndarray:
    """Upward ranks with mean costs (`CostModel`, HEFT's definition)."""
    from ..machine import CostModel

    cm = CostModel.build(g, cluster)
    _, oeids = g.out_csr
    return upward_rank(a.topo, a.out_ptr, a.out_dst, cm.c[oeids].astype(np.float64), cm.w)


def static_levels(g, cluster, a: ListSchedArrays) -> np.ndarray:
    """Hwang's static level: the longest compute path from each op to a sink, on the average device."""
    from ..machine import average_time_us

    return upward_rank(a.topo, a.out_ptr, a.out_dst, np.zeros(a.out_dst.shape[0]), average_time_us(g, cluster))


@njit
def priority_order(topo, out_ptr, out_dst, indeg, prio):
    """A topological order that always takes the ready op of the largest ``prio`` (ties: earlier in ``topo``):
    CPOP's order. One row of the schedulers' heaps (`_push`, `_pop`), keyed by (-prio, position in ``topo``)."""
    V = topo.shape[0]
    pos = np.empty(V, dtype=np.int64)
    for i in range(V):
        pos[topo[i]] = i
    left = indeg.copy()
    T = np.empty((1, max(V, 1)))
    Q = np.empty((1, max(V, 1)))
    I = np.empty((1, max(V, 1)), dtype=np.int64)
    n = 0
    out = np.empty(V, dtype=np.int64)
    for v in range(V):
        if left[v] == 0:
            n = _push(T, Q, I, 0, n, -prio[v], pos[v], v)
    for k in range(V):
        v = I[0, 0]
        out[k] = v
        n = _pop(T, Q, I, 0, n)
        for e in range(out_ptr[v], out_ptr[v + 1]):
            w = out_dst[e]
            left[w] -= 1
            if left[w] == 0:
                n = _push(T, Q, I, 0, n, -prio[w], pos[w], w)
    return out


def cpop_plan(g, cluster, a: ListSchedArrays, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CPOP's op order and each op's preferred device (the fastest for the critical path's ops, else -1)."""
    from ..analysis import critical_path
    from ..machine import CostModel

    cm = CostModel.build(g, cluster)
    ptr, eids = g.in_csr
    down = upward_rank(a.topo[::-1].copy(), ptr.astype(np.int64), g.edge_src[eids].astype(np.int64),
                       cm.c[eids].astype(np.float64), cm.w) - cm.w      # rank_d: the longest path into each op
    order = priority_order(a.topo, a.out_ptr, a.out_dst, a.indeg, rank + down)
    prefer = np.full(g.num_nodes, -1, dtype=np.int64)
    _, path = critical_path(g, cm.w, cm.c)
    prefer[np.asarray(path, dtype=np.int64)] = int(np.argmax(cluster.speed))
    return order, prefer


def heft_order(a: ListSchedArrays, rank: np.ndarray) -> np.ndarray:
    """Ops by decreasing rank, ties in topological order (so a topological order)."""
    pos = np.empty(a.topo.size, dtype=np.int64)
    pos[a.topo] = np.arange(a.topo.size)
    return np.lexsort((pos, -rank)).astype(np.int64)


# ---------------------------------------------------------------------------
# Heaps of (t, q, v) in rows of 2-D arrays, one row per device
# ---------------------------------------------------------------------------

@leaf
def _less(T, Q, I, d, a, b):
    if T[d, a] != T[d, b]:
        return T[d, a] < T[d, b]
    if Q[d, a] != Q[d, b]:
        return Q[d, a] < Q[d, b]
    return I[d, a] < I[d, b]


@leaf
def _swap(T, Q, I, d, a, b):
    T[d, a], T[d, b] = T[d, b], T[d, a]
    Q[d, a], Q[d, b] = Q[d, b], Q[d, a]
    I[d, a], I[d, b] = I[d, b], I[d, a]


@leaf
def _push(T, Q, I, d, n, t, q, v):
    j = n
    T[d, j] = t
    Q[d, j] = q
    I[d, j] = v
    while j > 0:
        p = (j - 1) >> 1
        if _less(T, Q, I, d, j, p):
            _swap(T, Q, I, d, j, p)
            j = p
        else:
            break
    return n + 1


@leaf
def _pop(T, Q, I, d, n):
    n -= 1
    T[d, 0] = T[d, n]
    Q[d, 0] = Q[d, n]
    I[d, 0] = I[d, n]
    j = 0
    while True:
        a = 2 * j + 1
        if a >= n:
            break
        c = a
        if a + 1 < n and _less(T, Q, I, d, a + 1, a):
            c = a + 1
        if _less(T, Q, I, d, c, j):
            _swap(T, Q, I, d, c, j)
            j = c
        else:
            break
    return n


@njit
def _grow(T, Q, I):
    K, cap = T.shape
    T2 = np.empty((K, 2 * cap))
    Q2 = np.empty((K, 2 * cap))
    I2 = np.empty((K, 2 * cap), dtype=np.int64)
    T2[:, :cap] = T
    Q2[:, :cap] = Q
    I2[:, :cap] = I
    return T2, Q2, I2


# ---------------------------------------------------------------------------
# Device timelines for HEFT's insertion: idle gaps before the last op, per device
# ---------------------------------------------------------------------------

MAX_GAPS = 512
"""Idle gaps remembered per device; beyond that the earliest is forgotten (ready times only grow, mostly).
The `EXACT` pricing keeps every gap, as the Python baselines do (its arrays grow by doubling from
`FIRST_GAPS`)."""
FIRST_GAPS = 64


@leaf
def _slot(gs, ge, ng, avail, widest, d, ready, dur):
    """Earliest start at or after ``ready`` for ``dur`` on ``d``, and the gap it uses (-1: after the last op)."""
    n = ng[d]
    if n > 0 and dur <= widest[d]:
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) >> 1
            if ge[d, mid] <= ready:
                lo = mid + 1
            else:
                hi = mid
        for j in range(lo, n):
            t = gs[d, j] if gs[d, j] > ready else ready
            if t + dur <= ge[d, j]:
                return t, j
    a = avail[d]
    return (a if a > ready else ready), -1


@leaf
def _take(gs, ge, ng, avail, widest, d, start, dur, j):
    """Occupy ``[start, start + dur)`` on ``d`` (in gap ``j``, or after the last op when ``j < 0``)."""
    end = start + dur
    n = ng[d]
    if j < 0:
        a = avail[d]
        if start > a:
            if n == gs.shape[1]:
                for i in range(n - 1):
                    gs[d, i] = gs[d, i + 1]
                    ge[d, i] = ge[d, i + 1]
                n -= 1
            gs[d, n] = a
            ge[d, n] = start
            ng[d] = n + 1
            if start - a > widest[d]:
                widest[d] = start - a
        avail[d] = end
        return
    lo, hi = gs[d, j], ge[d, j]
    left = start > lo
    right = hi > end
    if left and right:
        if n == gs.shape[1]:    # no room to split: forget the piece before the op
            gs[d, j] = end
            return
        for i in range(n, j + 1, -1):
            gs[d, i] = gs[d, i - 1]
            ge[d, i] = ge[d, i - 1]
        ge[d, j] = start
        gs[d, j + 1] = end
        ge[d, j + 1] = hi
        ng[d] = n + 1
    elif left:
        ge[d, j] = start
    elif right:
        gs[d, j] = end
    else:
        for i in range(j, n - 1):
            gs[d, i] = gs[d, i + 1]
            ge[d, i] = ge[d, i + 1]
        ng[d] = n - 1


# ---------------------------------------------------------------------------
# The scheduler
# ---------------------------------------------------------------------------

@njit
def _sort_inputs(v, in_ptr, in_port, port_owner, finish, perm, key):
    """``perm[in_ptr[v]:in_ptr[v+1]]``: v's data inputs by (producer finish, port) (SPEC §1.1 rule 9's order)."""
    lo, hi = in_ptr[v], in_ptr[v + 1]
    n = hi - lo
    if n <= 24:
        for i in range(lo, hi):     # insertion sort; ports ascend already, so a stable sort by finish suffices
            j = i
            x = i
            fx = finish[port_owner[in_port[x]]]
            while j > lo and finish[port_owner[in_port[perm[j - 1]]]] > fx:
                perm[j] = perm[j - 1]
                j -= 1
            perm[j] = x
        return
    for i in range(n):
        key[i] = finish[port_owner[in_port[lo + i]]]
    o = np.argsort(key[:n], kind="mergesort")
    for i in range(n):
        perm[lo + i] = lo + o[i]


@leaf
def _data_ready(v, d, K, dev, finish, lat, bw, in_ptr, in_port, in_bytes, perm, c_ptr, c_src, port_owner,
                link_free, tr_arr, lf, contend):
    """When every input of ``v`` would be on device ``d`` if ``v`` went there now (tentative transfers included;
    priced as ``contend`` says, `PRICINGS`). ``lf`` is scratch: each source device's link to ``d`` as this
    call books it, set first for the devices of ``v``'s inputs only (O(inputs), not O(K))."""
    for i in range(in_ptr[v], in_ptr[v + 1]):
        s = dev[port_owner[in_port[i]]]
        lf[s] = link_free[s * K + d]
    t = 0.0
    for i in range(in_ptr[v], in_ptr[v + 1]):
        j = perm[i]
        p = in_port[j]
        u = port_owner[p]
        s = dev[u]
        if s == d:
            a = finish[u]
        elif contend == EXACT:      # each edge priced alone (`pardnn.baselines.common.LinkCosts`)
            a = finish[u] + lat[s, d] + in_bytes[j] / bw[s, d]
        else:
            a = tr_arr[p * K + d]
            if a < 0.0:
                st = finish[u] if finish[u] > lf[s] else lf[s]
                a = st + lat[s, d] + in_bytes[j] / bw[s, d]
                if contend == CONTEND:
                    lf[s] = a
        if a > t:
            t = a
    for i in range(c_ptr[v], c_ptr[v + 1]):
        u = c_src[i]
        s = dev[u]
        a = finish[u] if s == d else finish[u] + lat[s, d]
        if a > t:
            t = a
    return t


@leaf
def _reserve(v, d, K, dev, finish, lat, bw, in_ptr, in_port, in_bytes, perm, port_owner, link_free, tr_arr, contend):
    """Reserve the links for the transfers ``v`` on ``d`` starts (those no earlier consumer on ``d`` started);
    unless ``contend`` is `CONTEND` only their arrivals are kept (the links stay free)."""
    n = 0
    for i in range(in_ptr[v], in_ptr[v + 1]):
        j = perm[i]
        p = in_port[j]
        u = port_owner[p]
        s = dev[u]
        if s != d and tr_arr[p * K + d] < 0.0:
            link = s * K + d
            st = finish[u] if finish[u] > link_free[link] else link_free[link]
            a = st + lat[s, d] + in_bytes[j] / bw[s, d]
            if contend == CONTEND:
                link_free[link] = a
            tr_arr[p * K + d] = a
            n += 1
    return n


@leaf
def _room(v, d, use_mem, usage, unit_pers, unit, out_total, temp, cap):
    """Whether ``v`` (its unit not placed yet) fits on ``d`` now (always, without ``use_mem``)."""
    return not use_mem or usage[d] + unit_pers[unit[v]] + out_total[v] + temp[v] <= cap[d]


@leaf
def _charge(v, d, use_mem, first_of_unit, usage, unit_pers, u, port_ptr, held, in_ptr, in_port, cons_left,
            port_owner, dev):
    """Memory bookkeeping of ``v`` placed on ``d`` (see the module docstring)."""
    if not use_mem:
        return
    if first_of_unit:
        usage[d] += unit_pers[u]
    for p in range(port_ptr[v], port_ptr[v + 1]):
        usage[d] += held[p]
    for i in range(in_ptr[v], in_ptr[v + 1]):
        p = in_port[i]
        cons_left[p] -= 1
        if cons_left[p] == 0:
            usage[dev[port_owner[p]]] -= held[p]


@njit(nogil=True)
def list_schedule(mode, order, prio, K, speed, lat, bw, time_us, in_ptr, in_port, in_bytes, c_ptr, c_src,
                  out_ptr, out_dst, indeg, port_owner, port_ptr, held, cons, out_total, temp, unit, unit_pin,
                  unit_pers, unit_ptr, unit_mem, cap, use_mem, prefer, contend, fav):
    """A device per op: ``(dev, start, finish, bound)`` as the scheduler predicts them (see the module docstring);
    ``bound``: whether memory (``use_mem``) ever kept an op off a device it would otherwise have considered.
    When it did not, every decision was the plain schedule's, so the plan is the plain plan.

    ``order`` is HEFT's op order (mode 0); ``prio`` the tie-break rank of ETF (mode 1, larger first).
    ``contend``: the pricing (`CONTEND`, `SHARED` or `EXACT`). ``unit_pin``: each unit's device or -1.
    ``prefer`` (mode 0): each op's preferred device or -1, taken
    when the op's unit is not placed yet (and, with ``use_mem``, the device has room). ``fav`` (mode 1):
    each op's favourite child or -1, for SCT (`sct_schedule_both`); empty for plain ETF.
    """
    V = time_us.shape[0]
    P = port_owner.shape[0]
    NU = unit_pers.shape[0]
    dev = np.full(V, -1, dtype=np.int64)
    start = np.zeros(V)
    finish = np.zeros(V)
    avail = np.zeros(K)
    link_free = np.zeros(K * K)
    tr_arr = np.full(max(P * K, 1), -1.0)
    lf = np.zeros(K)
    perm = np.arange(in_port.shape[0])
    key = np.zeros(in_port.shape[0] + 1)
    inv_speed = 1.0 / speed
    unit_dev = np.full(NU, -1, dtype=np.int64)
    usage = np.zeros(K)
    cons_left = cons.copy()
    bound = False
    for u in range(NU):
        if unit_pin[u] >= 0:
            unit_dev[u] = min(unit_pin[u], K - 1)
            if use_mem:
                usage[unit_dev[u]] += unit_pers[u]
    if mode == 0:
        max_gaps = V + 1 if contend == EXACT else MAX_GAPS
        gs = np.zeros((K, min(FIRST_GAPS, max_gaps)))
        ge = np.zeros((K, min(FIRST_GAPS, max_gaps)))
        ng = np.zeros(K, dtype=np.int64)
        widest = np.zeros(K)
        for idx in range(V):
            v = order[idx]
            u = unit[v]
            _sort_inputs(v, in_ptr, in_port, port_owner, finish, perm, key)
            fixed = unit_dev[u]
            lo, hi = 0, K
            if fixed >= 0:
                lo, hi = fixed, fixed + 1
            elif prefer[v] >= 0 and (not use_mem or
                                     usage[prefer[v]] + unit_pers[u] + out_total[v] + temp[v] <= cap[prefer[v]]):
                fixed = prefer[v]
                lo, hi = fixed, fixed + 1
            room_any = True
            if use_mem and fixed < 0:
                room_any = False
                need = unit_pers[u] + out_total[v] + temp[v]
                for d in range(K):
                    if usage[d] + need <= cap[d]:
                        room_any = True
                        break
                if not room_any:      # nowhere with room: the device with the most room left
                    bound = True
                    bd = 0
                    for d in range(1, K):
                        if cap[d] - usage[d] > cap[bd] - usage[bd]:
                            bd = d
                    lo, hi = bd, bd + 1
            best_f = np.inf
            best_d = -1
            best_s = 0.0
            best_j = -1
            for d in range(lo, hi):
                if use_mem and fixed < 0 and room_any and usage[d] + unit_pers[u] + out_total[v] + temp[v] > cap[d]:
                    bound = True
                    continue
                t = _data_ready(v, d, K, dev, finish, lat, bw, in_ptr, in_port, in_bytes, perm, c_ptr, c_src,
                                port_owner, link_free, tr_arr, lf, contend)
                dur = time_us[v] * inv_speed[d]
                s, j = _slot(gs, ge, ng, avail, widest, d, t, dur)
                f = s + dur
                if f < best_f:
                    best_f, best_d, best_s, best_j = f, d, s, j
            d = best_d
            _reserve(v, d, K, dev, finish, lat, bw, in_ptr, in_port, in_bytes, perm, port_owner, link_free, tr_arr,
                     contend)
            dev[v] = d
            start[v] = best_s
            finish[v] = best_f
            if ng[d] == gs.shape[1] and gs.shape[1] < max_gaps:     # room for one more gap on d
                width = min(2 * gs.shape[1], max_gaps)
                gs2 = np.zeros((K, width))
                ge2 = np.zeros((K, width))
                gs2[:, :gs.shape[1]] = gs
                ge2[:, :ge.shape[1]] = ge
                gs, ge = gs2, ge2
            _take(gs, ge, ng, avail, widest, d, best_s, best_f - best_s, best_j)
            first = unit_dev[u] < 0
            if first:
                unit_dev[u] = d
            _charge(v, d, use_mem, first, usage, unit_pers, u, port_ptr, held, in_ptr, in_port, cons_left,
                    port_owner, dev)
        return dev, start, finish, bound

    # ---- ETF (and SCT) ----
    neg = -prio
    sct = fav.shape[0] > 0
    # SCT (`pardnn.baselines.etf`'s rules): the favourite child each device's last op wants next; urgent ops
    # (inputs there on every device) not bound to a device, keyed by their latest data-ready time, and those
    # bound to each device, keyed by their data-ready time there
    want = np.full(K, -1, dtype=np.int64)
    UT = np.empty((1, V + 1 if sct else 1))
    UQ = np.empty((1, V + 1 if sct else 1))
    UI = np.empty((1, V + 1 if sct else 1), dtype=np.int64)
    un = 0
    OT = np.empty((K, 16))
    OQ = np.empty((K, 16))
    OI = np.empty((K, 16), dtype=np.int64)
    on = np.zeros(K, dtype=np.int64)
    cand_aw = np.zeros(K, dtype=np.bool_)
    pending = indeg.copy()
    is_ready = np.zeros(V, dtype=np.bool_)
    forced = np.full(V, -1, dtype=np.int64)
    blocked = np.zeros(V * K if use_mem else 1, dtype=np.bool_)
    nblocked = np.zeros(V if use_mem else 1, dtype=np.int64)
    dr_val = np.zeros(V * K)
    dr_ver = np.full(V * K, -1, dtype=np.int64)
    lver = np.zeros(K, dtype=np.int64)      # reservations made on links into each device
    cap0 = 16
    while cap0 < 2 * V // max(K, 1) + 16:
        cap0 *= 2
    PT = np.empty((K, cap0))
    PQ = np.empty((K, cap0))
    PI = np.empty((K, cap0), dtype=np.int64)
    NT = np.zeros((K, cap0))
    NQ = np.empty((K, cap0))
    NI = np.empty((K, cap0), dtype=np.int64)
    pn = np.zeros(K, dtype=np.int64)
    nn = np.zeros(K, dtype=np.int64)
    cand_t = np.zeros(K)
    cand_v = np.zeros(K, dtype=np.int64)
    cand_now = np.zeros(K, dtype=np.bool_)
    stack = np.empty(V, dtype=np.int64)
    ns = 0
    for v in range(V):
        if pending[v] == 0:
            stack[ns] = v
            ns += 1
    placed = 0
    while True:
        # make the newly ready ops candidates: on their unit's device, else on every device
        while ns > 0:
            ns -= 1
            v = stack[ns]
            is_ready[v] = True
            _sort_inputs(v, in_ptr, in_port, port_owner, finish, perm, key)
            f = unit_dev[unit[v]]
            for d in range(K):
                if f >= 0 and d != f:
                    continue
                t = _data_ready(v, d, K, dev, finish, lat, bw, in_ptr, in_port, in_bytes, perm, c_ptr, c_src,
                                port_owner, link_free, tr_arr, lf, contend)
                dr_val[v * K + d] = t
                dr_ver[v * K + d] = lver[d]
                if pn[d] == PT.shape[1]:
                    PT, PQ, PI = _grow(PT, PQ, PI)
                pn[d] = _push(PT, PQ, PI, d, pn[d], t, neg[v], v)
            if sct:
                if f >= 0:
                    if on[f] == OT.shape[1]:
                        OT, OQ, OI = _grow(OT, OQ, OI)
                    on[f] = _push(OT, OQ, OI, f, on[f], dr_val[v * K + f], neg[v], v)
                else:
                    t = dr_val[v * K]
                    for d in range(1, K):
                        t = max(t, dr_val[v * K + d])
                    un = _push(UT, UQ, UI, 0, un, t, neg[v], v)
        if placed == V:
            break
        # each device's best candidate, validated lazily
        bd = -1
        for d in range(K):
            cand_v[d] = -1
            while True:
                while pn[d] > 0 and PT[d, 0] <= avail[d]:
                    v = PI[d, 0]
                    pn[d] = _pop(PT, PQ, PI, d, pn[d])
                    if nn[d] == NT.shape[1]:
                        NT, NQ, NI = _grow(NT, NQ, NI)
                    nn[d] = _push(NT, NQ, NI, d, nn[d], 0.0, neg[v], v)
                from_now = nn[d] > 0
                if from_now:
                    v = NI[d, 0]
                    kt = avail[d]
                elif pn[d] > 0:
                    v = PI[d, 0]
                    kt = PT[d, 0]
                else:
                    break
                u = unit[v]
                ok = dev[v] < 0
                if ok:
                    if unit_dev[u] >= 0:
                        ok = unit_dev[u] == d
                    elif forced[v] >= 0:
                        ok = forced[v] == d
                    elif use_mem:
                        ok = not blocked[v * K + d]
                if not ok:
                    if from_now:
                        nn[d] = _pop(NT, NQ, NI, d, nn[d])
                    else:
                        pn[d] = _pop(PT, PQ, PI, d, pn[d])
                    continue
                if dr_ver[v * K + d] != lver[d]:
                    dr_val[v * K + d] = _data_ready(v, d, K, dev, finish, lat, bw, in_ptr, in_port, in_bytes, perm,
                                                    c_ptr, c_src, port_owner, link_free, tr_arr, lf, contend)
                    dr_ver[v * K + d] = lver[d]
                t = dr_val[v * K + d]
                if t > kt:     # stale key: back to pending with the new one
                    if from_now:
                        nn[d] = _pop(NT, NQ, NI, d, nn[d])
                    else:
                        pn[d] = _pop(PT, PQ, PI, d, pn[d])
                    if pn[d] == PT.shape[1]:
                        PT, PQ, PI = _grow(PT, PQ, PI)
                    pn[d] = _push(PT, PQ, PI, d, pn[d], t, neg[v], v)
                    continue
                cand_v[d] = v
                cand_t[d] = kt
                cand_now[d] = from_now
                break
            cand_aw[d] = False
            j = want[d] if sct else -1
            if j >= 0 and is_ready[j] and dev[j] < 0:
                # SCT: d is awake for j, its last op's favourite child, unless j starts earlier elsewhere; it
                # runs j, or an urgent op that can start no later
                o = unit_dev[unit[j]] if unit_dev[unit[j]] >= 0 else forced[j]
                ok = o == d
                if o < 0:
                    ok = _room(j, d, use_mem, usage, unit_pers, unit, out_total, temp, cap)
                    bound = bound or not ok
                tj = max(avail[d], dr_val[j * K + d])
                if ok and o < 0:
                    for e in range(K):
                        if e != d and max(avail[e], dr_val[j * K + e]) < tj - 1e-9:
                            if _room(j, e, use_mem, usage, unit_pers, unit, out_total, temp, cap):
                                ok = False
                                break
                            bound = True
                if ok:
                    bt, bq, bv = tj, neg[j], j
                    while un > 0 and (dev[UI[0, 0]] >= 0 or unit_dev[unit[UI[0, 0]]] >= 0 or forced[UI[0, 0]] >= 0):
                        un = _pop(UT, UQ, UI, 0, un)
                    if un > 0:
                        w = UI[0, 0]
                        if _room(w, d, use_mem, usage, unit_pers, unit, out_total, temp, cap):
                            if max(avail[d], UT[0, 0]) <= bt:
                                bt, bq, bv = max(avail[d], UT[0, 0]), UQ[0, 0], w
                        else:
                            bound = True
                    while on[d] > 0 and dev[OI[d, 0]] >= 0:
                        on[d] = _pop(OT, OQ, OI, d, on[d])
                    if on[d] > 0 and max(avail[d], OT[d, 0]) <= bt:
                        bt, bq, bv = max(avail[d], OT[d, 0]), OQ[d, 0], OI[d, 0]
                    cand_v[d] = bv
                    cand_t[d] = bt
                    cand_aw[d] = True
            if cand_v[d] >= 0:
                if bd < 0:
                    bd = d
                else:
                    a, b = cand_v[d], cand_v[bd]
                    if (cand_t[d] < cand_t[bd] or (cand_t[d] == cand_t[bd] and (
                            neg[a] < neg[b] or (neg[a] == neg[b] and (
                                a < b or (a == b and speed[d] > speed[bd])))))):
                        bd = d
        if bd < 0:      # nothing schedulable: only a cycle leaves ops behind (the graph is verified acyclic)
            break
        d = bd
        v = cand_v[d]
        u = unit[v]
        if use_mem and forced[v] < 0 and unit_dev[u] < 0 and \
                usage[d] + unit_pers[u] + out_total[v] + temp[v] > cap[d]:
            bound = True
            blocked[v * K + d] = True
            nblocked[v] += 1
            if cand_aw[d]:
                pass        # checked for room already: not reached
            elif cand_now[d]:
                nn[d] = _pop(NT, NQ, NI, d, nn[d])
            else:
                pn[d] = _pop(PT, PQ, PI, d, pn[d])
            if nblocked[v] == K:     # no room anywhere: the device with the most room left
                r = 0
                for e in range(1, K):
                    if cap[e] - usage[e] > cap[r] - usage[r]:
                        r = e
                forced[v] = r
                t = _data_ready(v, r, K, dev, finish, lat, bw, in_ptr, in_port, in_bytes, perm, c_ptr, c_src,
                                port_owner, link_free, tr_arr, lf, contend)
                if pn[r] == PT.shape[1]:
                    PT, PQ, PI = _grow(PT, PQ, PI)
                pn[r] = _push(PT, PQ, PI, r, pn[r], t, neg[v], v)
                if sct:
                    if on[r] == OT.shape[1]:
                        OT, OQ, OI = _grow(OT, OQ, OI)
                    on[r] = _push(OT, OQ, OI, r, on[r], t, neg[v], v)
            continue
        if cand_aw[d]:
            pass        # not necessarily a heap's top: its entries are dropped when they surface
        elif cand_now[d]:
            nn[d] = _pop(NT, NQ, NI, d, nn[d])
        else:
            pn[d] = _pop(PT, PQ, PI, d, pn[d])
        if sct:
            for e in range(K):
                if want[e] == v:
                    want[e] = -1
            want[d] = fav[v]
        if _reserve(v, d, K, dev, finish, lat, bw, in_ptr, in_port, in_bytes, perm, port_owner, link_free,
                    tr_arr, contend) > 0:
            lver[d] += 1
        s = cand_t[d]
        dev[v] = d
        start[v] = s
        finish[v] = s + time_us[v] * inv_speed[d]
        avail[d] = finish[v]
        placed += 1
        first = unit_dev[u] < 0
        if first:
            unit_dev[u] = d
            # its ready members: SCT binds them to d; after a memory refusal they may have left d's heaps
            # (blocked, or forced elsewhere), so they are queued there again
            if sct or bound:
                for i in range(unit_ptr[u], unit_ptr[u + 1]):
                    w = unit_mem[i]
                    if w != v and is_ready[w] and dev[w] < 0:
                        if sct:
                            if on[d] == OT.shape[1]:
                                OT, OQ, OI = _grow(OT, OQ, OI)
                            on[d] = _push(OT, OQ, OI, d, on[d], dr_val[w * K + d], neg[w], w)
                        if bound:
                            if pn[d] == PT.shape[1]:
                                PT, PQ, PI = _grow(PT, PQ, PI)
                            pn[d] = _push(PT, PQ, PI, d, pn[d], dr_val[w * K + d], neg[w], w)
        _charge(v, d, use_mem, first, usage, unit_pers, u, port_ptr, held, in_ptr, in_port, cons_left,
                port_owner, dev)
        for j in range(out_ptr[v], out_ptr[v + 1]):
            w = out_dst[j]
            pending[w] -= 1
            if pending[w] == 0:
                stack[ns] = w
                ns += 1
    return dev, start, finish, bound


def schedule(g, cluster, mode: str, *, memory: bool = False, arrays: ListSchedArrays | None = None,
             rank: np.ndarray | None = None, level: np.ndarray | None = None, contention: bool | str = True,
             favourite: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(device, start, finish)`` of every op from the ``mode`` list schedule of ``g`` (a `MODES` name).

    ``memory`` steers by the cluster's capacities (module docstring); ``arrays``, ``rank`` and ``level``
    (from `prepare`, `ranks` and `static_levels`) may be passed in when several schedules share them;
    ``contention``: a `PRICINGS` key; ``favourite`` (``etf`` only): each op's favourite child, for SCT
    (`sct_schedule_both`).
    """
    fav = None if favourite is None else np.asarray(favourite, dtype=np.int64)
    return _run(g, cluster, mode, memory, arrays, rank, level, contention, fav)[:3]


def schedule_both(g, cluster, mode: str, *, arrays: ListSchedArrays | None = None, rank: np.ndarray | None = None,
                  level: np.ndarray | None = None, contention: bool | str = True,
                  favourite: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The devices of the plain and of the memory-aware ``mode`` schedule, ``(plain, aware)``: one run when
    memory never kept an op off a device (the two are then the same plan, decision by decision; the usual
    case when memory is bounded but ample), two otherwise."""
    aware, _, _, bound = _run(g, cluster, mode, True, arrays, rank, level, contention, favourite)
    plain = _run(g, cluster, mode, False, arrays, rank, level, contention, favourite)[0] if bound else aware
    return plain, aware


def sct_schedule_both(g, cluster, favourite: np.ndarray, *, arrays: ListSchedArrays | None = None,
                      level: np.ndarray | None = None, contention: bool | str = False
                      ) -> tuple[np.ndarray, np.ndarray]:
    """SCT's plans, ``(plain, memory-aware)``, from each op's ``favourite`` child (-1: none; see
    `pardnn.baselines.sct.favourite_children`): ETF without link contention in which a device whose last op
    has a ready favourite child that starts no later there than anywhere else runs it, or an urgent op that
    starts no later (`pardnn.baselines.etf`'s rules). With ``contention="exact"`` the plain plan is the ``sct``
    baseline's on any graph (False: on graphs where no port feeds two consumers on one device over edges of
    different sizes and no device has more than `MAX_GAPS` gaps); the memory-aware one uses this module's
    memory bookkeeping, not the ``m-sct`` baseline's. One run when memory never kept an op off a device, as
    `schedule_both`."""
    return schedule_both(g, cluster, "etf", arrays=arrays, level=level, contention=contention,
                         favourite=np.asarray(favourite, dtype=np.int64))


def _run(g, cluster, mode, memory, arrays, rank, level, contention=True, fav=None):
    m = MODES[mode]
    pricing = PRICINGS[contention]
    a = arrays if arrays is not None else prepare(g)
    if mode == "etf":
        prio = level if level is not None else static_levels(g, cluster, a)
    else:
        prio = rank if rank is not None else ranks(g, cluster, a)
    prefer = np.full(g.num_nodes, -1, dtype=np.int64)
    if mode == "cpop":
        order, prefer = cpop_plan(g, cluster, a, prio)
    else:
        order = heft_order(a, prio) if m == HEFT else np.zeros(0, dtype=np.int64)
    K = cluster.num_devices
    pins = np.where(g.unit_pin >= 0, np.minimum(g.unit_pin, K - 1), -1).astype(np.int64)
    return list_schedule(m, order, prio.astype(np.float64), K, cluster.speed, cluster.path_latency,
                         cluster.path_bandwidth, a.time_us, a.in_ptr, a.in_port, a.in_bytes, a.c_ptr, a.c_src,
                         a.out_ptr, a.out_dst, a.indeg, a.port_owner, a.port_ptr, a.held, a.cons, a.out_total,
                         a.temp, a.unit, pins, a.unit_pers, a.unit_ptr, a.unit_mem, cluster.capacity, bool(memory),
                         prefer, pricing, np.empty(0, dtype=np.int64) if fav is None else fav)
