"""The SPEC §1 simulator as one compiled kernel: schedule and memory peaks in a single pass.

The graph's structure is prepared once (`StaticArrays`); a simulation then
takes only the device of each op. The queues live in numpy arrays sized
before the run (a pre-pass counts the transfers each link will carry):

* one ready queue per device, keyed (ready time, op id), in one array
  partitioned by device;
* one send queue per directed link, keyed (sendable time, producer's global
  port x K + destination), which is SPEC §1.1 rule 9's order;
* one event heap keyed (time, kind, id): kind 0 op finish, 1 transfer
  arrival, 2 control arrival (rule 1's order at one instant).

Ready and send queues only ever receive entries of the current instant, so
each is a FIFO of past instants plus a small heap of the current one
(`_mq_push`): the same order as one heap, without its log-depth pops on
queues thousands deep. Scratch arrays are left uninitialised where every
slot is written before it is read: filling them cost more than the
simulation's own work on large graphs.

Memory is reference counted: a producer's tensor is freed when its last
same-device consumer finishes and its last transfer arrives; a received copy
when its last consumer there finishes. A forwarded output (an op that reuses
an input's buffer, `OpGraph.port_forward`) allocates nothing; its consumer
keeps its hold on that input's buffer (the producer's copy or the received
one) until the forwarded output is released in turn, so chains of forwards
free the one buffer they share at the end of the chain. Frees and allocations are gathered
per instant and committed when time moves on: the level at an instant is
``before - frees of older items + allocations`` (frees first, rule 5, and a
zero-length item still counts), which is the peak candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._jit import HAVE_NUMBA, leaf, njit


@dataclass(frozen=True, eq=False)
class StaticArrays:
    """The placement-independent arrays of a graph, in the layout the kernel reads."""

    time_us: np.ndarray
    temp: np.ndarray
    port_ptr: np.ndarray
    port_bytes: np.ndarray
    port_owner: np.ndarray
    own_bytes: np.ndarray  # what each port allocates on its producer's device (0 where it forwards an input)
    fwd: np.ndarray       # per port: the data edge (kernel order) whose buffer it forwards, or -1
    pptr: np.ndarray      # data out-edges grouped by global port id: pptr[p]..pptr[p+1]
    d_dst: np.ndarray     # consumer of each data out-edge (that order)
    d_pid: np.ndarray     # its global port id
    d_bytes: np.ndarray
    iptr: np.ndarray      # data in-edges of each node: indexes into the data-edge order
    i_edge: np.ndarray
    i_pid: np.ndarray     # the global port id of each of those in-edges (that order)
    i_fwd: np.ndarray     # whether its consumer forwards it
    cptr: np.ndarray      # control out-edges grouped by source
    c_dst: np.ndarray
    indeg: np.ndarray     # all in-edges (data + control)


def static_arrays(g) -> StaticArrays:
    data = np.flatnonzero(~g.edge_control)
    pid = g.edge_port_id[data]
    order = data[np.lexsort((g.edge_dst[data], pid))]
    opid = g.edge_port_id[order]
    P = g.num_ports
    pptr = np.zeros(P + 1, dtype=np.int64)
    np.cumsum(np.bincount(opid, minlength=P), out=pptr[1:])
    dst = g.edge_dst[order]
    V = g.num_nodes
    iorder = np.argsort(dst, kind="stable")
    iptr = np.zeros(V + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=V), out=iptr[1:])
    ctrl = np.flatnonzero(g.edge_control)
    corder = ctrl[np.argsort(g.edge_src[ctrl], kind="stable")]
    cptr = np.zeros(V + 1, dtype=np.int64)
    np.cumsum(np.bincount(g.edge_src[ctrl], minlength=V), out=cptr[1:])
    # forwarded outputs, in the kernel's data-edge order
    kpos = np.full(g.num_edges, -1, dtype=np.int64)
    kpos[order] = np.arange(order.size)
    gfwd = g.port_forward
    fwd = np.full(gfwd.size, -1, dtype=np.int64)
    fwd[gfwd >= 0] = kpos[gfwd[gfwd >= 0]]
    efwd = np.zeros(order.size, dtype=np.bool_)
    efwd[fwd[fwd >= 0]] = True
    return StaticArrays(
        time_us=g.time_us.astype(np.float64), temp=g.temp_bytes.astype(np.int64),
        port_ptr=g.port_ptr.astype(np.int64), port_bytes=g.port_bytes.astype(np.int64),
        port_owner=g.port_owner.astype(np.int64), pptr=pptr, d_dst=dst.astype(np.int64), d_pid=opid.astype(np.int64),
        d_bytes=g.edge_bytes[order].astype(np.int64), iptr=iptr, i_edge=iorder.astype(np.int64),
        i_pid=opid[iorder].astype(np.int64), i_fwd=efwd[iorder].copy(),
        cptr=cptr, c_dst=g.edge_dst[corder].astype(np.int64),
        indeg=np.bincount(g.edge_dst, minlength=V).astype(np.int64),
        own_bytes=g.port_alloc_bytes.astype(np.int64), fwd=fwd)


@njit
def _h3_new(cap):
    """Arrays for heaps of (t, k, i) entries, ``cap`` entries in all (uninitialised: a heap writes an
    entry before it reads it, and filling the arrays would cost a simulation more than its heaps do)."""
    return np.empty(cap), np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64)


@leaf
def _h3_less(ht, hk, hi, a, b):
    """Whether heap entry ``a`` comes before entry ``b``: (t, k, i) in lexicographic order."""
    if ht[a] != ht[b]:
        return ht[a] < ht[b]
    if hk[a] != hk[b]:
        return hk[a] < hk[b]
    return hi[a] < hi[b]


@leaf
def _h3_swap(ht, hk, hi, a, b):
    ht[a], ht[b] = ht[b], ht[a]
    hk[a], hk[b] = hk[b], hk[a]
    hi[a], hi[b] = hi[b], hi[a]


@leaf
def _h3_push(ht, hk, hi, base, n, t, k, i):
    """Push (t, k; payload i) on the heap at ``base`` ordered by (t, k, i)."""
    j = n
    ht[base + j] = t
    hk[base + j] = k
    hi[base + j] = i
    while j > 0:
        p = (j - 1) >> 1
        if _h3_less(ht, hk, hi, base + j, base + p):
            _h3_swap(ht, hk, hi, base + j, base + p)
            j = p
        else:
            break
    return n + 1


@leaf
def _h3_pop(ht, hk, hi, base, n):
    """Drop the root of the heap at ``base`` (read it first); return the new size."""
    n -= 1
    ht[base] = ht[base + n]
    hk[base] = hk[base + n]
    hi[base] = hi[base + n]
    j = 0
    while True:
        a = 2 * j + 1
        if a >= n:
            break
        c = a
        if a + 1 < n and _h3_less(ht, hk, hi, base + a + 1, base + a):
            c = a + 1
        if _h3_less(ht, hk, hi, base + c, base + j):
            _h3_swap(ht, hk, hi, base + c, base + j)
            j = c
        else:
            break
    return n


# ---------------------------------------------------------------------------
# Queues whose pushes never go back in time
# ---------------------------------------------------------------------------
# The ready queues and the send queues are keyed (time, key), and every push comes at the current
# instant, which only grows. So a queue is a FIFO of the entries of past instants, already in order,
# and a small heap (by key) of the entries of its latest instant; that heap goes to the FIFO's tail
# in key order when an entry of a later instant arrives. The FIFO's head, when there is one, comes
# first (its instants are older). Pops return the same entries in the same order as one heap keyed
# (time, key) would, at O(1) for most pushes and pops: a ready queue holds hundreds to thousands of
# ops on wide graphs, where a heap's pops dominated the simulation.
#
# Several queues share arrays: queue q owns slots base..base + (entries it will ever get) - 1 in
# ``fifo``, ``hk`` and ``hi``; ``qs[q]`` is (FIFO head, FIFO tail, heap size), ``qt[q]`` the heap's
# instant. Each entry enters the FIFO at most once, so it needs no wrap-around.

@njit
def _mq_new(cap, nq):
    """Arrays for ``nq`` empty queues with ``cap`` slots in all: (fifo, hk, hi, qs, qt); the slots are
    uninitialised (each is written before it is read)."""
    return (np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64),
            np.zeros((nq, 3), dtype=np.int64), np.zeros(nq))


@leaf
def _h2_push(hk, hi, base, n, k, i):
    """Push key ``k`` (payload ``i``) on the min-heap of ``n`` entries at ``base``; return the new size."""
    j = n
    while j > 0:
        p = (j - 1) >> 1
        if hk[base + p] <= k:
            break
        hk[base + j] = hk[base + p]
        hi[base + j] = hi[base + p]
        j = p
    hk[base + j] = k
    hi[base + j] = i
    return n + 1


@leaf
def _h2_pop(hk, hi, base, n):
    """Drop the root of the min-heap of ``n`` entries at ``base`` (read it first); return the new size."""
    n -= 1
    k = hk[base + n]
    i = hi[base + n]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= n:
            break
        if c + 1 < n and hk[base + c + 1] < hk[base + c]:
            c += 1
        if k <= hk[base + c]:
            break
        hk[base + j] = hk[base + c]
        hi[base + j] = hi[base + c]
        j = c
    hk[base + j] = k
    hi[base + j] = i
    return n


@leaf
def _mq_push(fifo, hk, hi, qs, qt, base, q, t, k, i):
    """Push payload ``i`` keyed (``t``, ``k``) on queue ``q``; ``t`` is at least every earlier push's."""
    n = qs[q, 2]
    if n > 0 and t != qt[q]:
        tail = qs[q, 1]
        while n > 0:
            fifo[base + tail] = hi[base]
            tail += 1
            n = _h2_pop(hk, hi, base, n)
        qs[q, 1] = tail
    qt[q] = t
    qs[q, 2] = _h2_push(hk, hi, base, n, k, i)


@leaf
def _mq_pop(fifo, hk, hi, qs, base, q):
    """Take the first entry of queue ``q`` (which has one) and return its payload."""
    h = qs[q, 0]
    if h < qs[q, 1]:
        qs[q, 0] = h + 1
        return fifo[base + h]
    x = hi[base]
    qs[q, 2] = _h2_pop(hk, hi, base, qs[q, 2])
    return x


@leaf
def _mq_empty(qs, q):
    return qs[q, 0] == qs[q, 1] and qs[q, 2] == 0


@njit
def _worklist(n):
    """An empty worklist of items 0..n-1 for `_enlist`: (flag per item, items); its length is kept by the caller."""
    return np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.int64)


@leaf
def _enlist(flag, items, n, x):
    """Append ``x`` to the worklist ``items[:n]`` unless ``flag[x]`` says it is there; return the new length."""
    if not flag[x]:
        flag[x] = True
        items[n] = x
        n += 1
    return n


@leaf
def _free(dev_d, nbytes, alloc_t, now, f_old, f_new, touched, tlist, tn):
    if nbytes <= 0:
        return tn
    if alloc_t < now:
        f_old[dev_d] += nbytes
    else:
        f_new[dev_d] += nbytes
    return _enlist(touched, tlist, tn, dev_d)


@leaf
def _alloc(dev_d, nbytes, alloc, touched, tlist, tn):
    if nbytes <= 0:
        return tn
    alloc[dev_d] += nbytes
    return _enlist(touched, tlist, tn, dev_d)


@leaf
def _drop(p, dev, port_owner, port_bytes, start, fwd, edge_tid, d_pid, port_rem, rec_rem, tr_dst, tr_bytes,
          tr_start, now, f_old, f_new, touched, tlist, tn):
    """Port ``p`` is no longer needed (its count reached 0): free its buffer, or, when it forwards an input,
    release the hold on that input's buffer, and so on down a chain of forwards. Returns the new ``tn``."""
    while True:
        e = fwd[p]
        if e < 0:
            o = port_owner[p]
            return _free(dev[o], port_bytes[p], start[o], now, f_old, f_new, touched, tlist, tn)
        t = edge_tid[e]
        if t >= 0:      # it forwards a received copy
            rec_rem[t] -= 1
            if rec_rem[t] == 0:
                tn = _free(tr_dst[t], tr_bytes[t], tr_start[t], now, f_old, f_new, touched, tlist, tn)
            return tn
        p = d_pid[e]    # it forwards the producer's own copy: one hold less on that port
        port_rem[p] -= 1
        if port_rem[p] != 0:
            return tn


@leaf
def _input_done(u, du, now, pending, ready, rq_f, rq_k, rq_i, rq_s, rq_t, roff, dflag, dlist, dn):
    """One input of op ``u`` (on device ``du``) is there; the last makes it ready. Returns the new ``dn``."""
    pending[u] -= 1
    if pending[u] != 0:
        return dn
    ready[u] = now
    _mq_push(rq_f, rq_k, rq_i, rq_s, rq_t, roff[du], du, now, u, u)
    return _enlist(dflag, dlist, dn, du)


@njit(nogil=True)
def simulate_kernel(K, dev, speed, lat, bw, time_us, temp, port_ptr, port_bytes, port_owner, pptr, d_dst, d_pid,
                    d_bytes, iptr, i_edge, i_pid, i_fwd, cptr, c_dst, indeg, own_bytes, fwd, want_mem, ecpu, ecbw,
                    endpoint):
    """One step. Returns (start, finish, ready, tr_pid, tr_dst, tr_bytes, tr_start, tr_finish, tr_arrive,
    tr_send_start, tr_recv_start, peak, peak_t).

    With ``endpoint``, each transfer of link (a, c) first runs ``ecpu[a, c] + bytes / ecbw[a, c]`` on device
    a (a *send*, queued there like an op, keyed after the ops ready at the same instant, sends in SPEC §1.1
    rule 9's order), then takes the link, then runs as long on device c (a *receive*, keyed after the
    sends); its consumers there are ready when the receive finishes (``tr_arrive``). Sends and receives
    are numbered ``V + t`` and ``V + TMAX + t`` in the ready queues and the event heap. Without it, the
    kernel is SPEC §1's exactly (``tr_arrive`` = ``tr_finish``, the send and receive starts -1).
    """
    V = dev.shape[0]
    P = port_bytes.shape[0]
    ED = d_dst.shape[0]
    start = np.zeros(V)
    finish = np.zeros(V)
    ready = np.zeros(V)
    pending = indeg.copy()
    # ready queues partitioned by device (ops, and with ``endpoint`` the sends and receives there)
    roff = np.zeros(K + 1, dtype=np.int64)
    for v in range(V):
        roff[dev[v] + 1] += 1
    # links: ``elink[e]`` is the link of data edge ``e`` when it crosses devices, link ``l`` runs from
    # ``lsrc[l]`` to ``ldst[l]``. With few devices (K x K within the edges' count) link (a, c) is a * K + c;
    # with many, only the links that will carry a transfer are numbered, by source device (a pass over the
    # ports grouped by their device), so the link state stays O(V + E) whatever K. The pass also counts
    # the transfers each link will carry (for its send queue's slots): one per (port, device) with a cross
    # edge. Links are independent, so their numbering changes no result.
    tmark = np.full(K, -1, dtype=np.int64)
    elink = np.empty(max(ED, 1), dtype=np.int64)
    if K * K <= max(ED, 64):
        NL = K * K
        lsrc = np.empty(NL, dtype=np.int64)
        ldst = np.empty(NL, dtype=np.int64)
        for link in range(NL):
            lsrc[link] = link // K
            ldst[link] = link % K
        lcount = np.zeros(NL + 1, dtype=np.int64)
        for p in range(P):
            a = dev[port_owner[p]]
            for e in range(pptr[p], pptr[p + 1]):
                c = dev[d_dst[e]]
                if c != a:
                    elink[e] = a * K + c
                    if tmark[c] != p:
                        tmark[c] = p
                        lcount[a * K + c + 1] += 1
    else:
        pcount = np.zeros(K + 1, dtype=np.int64)
        for p in range(P):
            pcount[dev[port_owner[p]] + 1] += 1
        for d in range(K):
            pcount[d + 1] += pcount[d]
        porder = np.empty(max(P, 1), dtype=np.int64)
        for p in range(P):
            a = dev[port_owner[p]]
            porder[pcount[a]] = p
            pcount[a] += 1
        lsrc = np.empty(max(ED, 1), dtype=np.int64)
        ldst = np.empty(max(ED, 1), dtype=np.int64)
        lcount = np.zeros(max(ED, 1) + 1, dtype=np.int64)
        lown = np.full(K, -1, dtype=np.int64)      # the source device whose link to c ``lid[c]`` is
        lid = np.empty(K, dtype=np.int64)
        NL = 0
        for j in range(P):
            p = porder[j]
            a = dev[port_owner[p]]
            for e in range(pptr[p], pptr[p + 1]):
                c = dev[d_dst[e]]
                if c == a:
                    continue
                if lown[c] != a:
                    lown[c] = a
                    lid[c] = NL
                    lsrc[NL] = a
                    ldst[NL] = c
                    NL += 1
                elink[e] = lid[c]
                if tmark[c] != p:
                    tmark[c] = p
                    lcount[lid[c] + 1] += 1
    # transfers: one per (port, device) with a cross edge, as the pass counted
    TMAX = max(lcount[:NL + 1].sum(), 1)
    tr_pid = np.empty(TMAX, dtype=np.int64)     # set when the transfer is made
    tr_dst = np.empty(TMAX, dtype=np.int64)
    tr_link = np.empty(TMAX, dtype=np.int64)
    tr_bytes = np.empty(TMAX, dtype=np.int64)
    tr_start = np.empty(TMAX)                   # set when it takes its link
    tr_finish = np.empty(TMAX)
    tr_arrive = np.empty(TMAX)
    tr_sstart = np.full(TMAX, -1.0)
    tr_rstart = np.full(TMAX, -1.0)
    rec_rem = np.empty(TMAX, dtype=np.int64)
    edge_tid = np.full(max(ED, 1), -1, dtype=np.int64)
    nt = 0
    if endpoint:
        for link in range(NL):
            roff[lsrc[link] + 1] += lcount[link + 1]
            roff[ldst[link] + 1] += lcount[link + 1]
    for d in range(K):
        roff[d + 1] += roff[d]
    rq_f, rq_k, rq_i, rq_s, rq_t = _mq_new(max(roff[K], 1), K)
    for link in range(NL):
        lcount[link + 1] += lcount[link]
    tmark[:] = -1
    lbase = lcount[:NL].copy()
    pool_f, pool_k, pool_i, lq_s, lq_t = _mq_new(max(lcount[NL], 1), NL)
    # events
    # in flight at once: one op, send or receive per device (``busy``), one transfer per link
    # (``lbusy``), and at most one control arrival per control edge
    et, ek, ei = _h3_new(K + NL + c_dst.shape[0] + 1)
    skey = V                # ready-queue keys of sends: after every op, by (port x K + destination)
    rkey = V + P * K        # of receives: after every send, by transfer
    en = 0
    busy = np.zeros(K, dtype=np.bool_)
    lbusy = np.zeros(NL, dtype=np.bool_)
    dflag, dlist = _worklist(K)     # devices to look at for starts
    dn = 0
    lflag, llist = _worklist(NL)     # links to look at for starts
    ln = 0
    # memory
    port_rem = np.empty(max(P, 1), dtype=np.int64)     # set when the port's producer finishes
    cur = np.zeros(K, dtype=np.int64)
    f_old = np.zeros(K, dtype=np.int64)
    f_new = np.zeros(K, dtype=np.int64)
    alloc = np.zeros(K, dtype=np.int64)
    touched, tlist = _worklist(K)   # devices whose memory changed this instant
    tn = 0
    peak = np.zeros(K, dtype=np.int64)
    peak_t = np.zeros(K)
    tslot = np.zeros(K, dtype=np.int64)
    for v in range(V):
        if pending[v] == 0:
            d = dev[v]
            _mq_push(rq_f, rq_k, rq_i, rq_s, rq_t, roff[d], d, 0.0, v, v)
    for d in range(K):
        dn = _enlist(dflag, dlist, dn, d)
    now = 0.0
    while True:
        # starts: idle devices take their earliest-ready op, idle links their first transfer
        for j in range(dn):
            d = dlist[j]
            dflag[d] = False
            if not busy[d] and not _mq_empty(rq_s, d):
                v = _mq_pop(rq_f, rq_k, rq_i, rq_s, roff[d], d)
                busy[d] = True
                if v >= V:      # a send or a receive (``endpoint``)
                    t = (v - V) % TMAX
                    a = dev[port_owner[tr_pid[t]]]
                    c = tr_dst[t]
                    if v < V + TMAX:
                        tr_sstart[t] = now
                    else:
                        tr_rstart[t] = now
                    en = _h3_push(et, ek, ei, 0, en, now + ecpu[a, c] + tr_bytes[t] / ecbw[a, c], 0, v)
                    continue
                start[v] = now
                f = now + time_us[v] / speed[d]
                finish[v] = f
                en = _h3_push(et, ek, ei, 0, en, f, 0, v)
                if want_mem:
                    for p in range(port_ptr[v], port_ptr[v + 1]):
                        tn = _alloc(d, own_bytes[p], alloc, touched, tlist, tn)
                    tn = _alloc(d, temp[v], alloc, touched, tlist, tn)
        dn = 0
        for j in range(ln):
            link = llist[j]
            lflag[link] = False
            if not lbusy[link] and not _mq_empty(lq_s, link):
                t = _mq_pop(pool_f, pool_k, pool_i, lq_s, lbase[link], link)
                lbusy[link] = True
                tr_start[t] = now
                a = lsrc[link]
                c = ldst[link]
                f = now + lat[a, c] + tr_bytes[t] / bw[a, c]
                tr_finish[t] = f
                tr_arrive[t] = f
                en = _h3_push(et, ek, ei, 0, en, f, 1, t)
                if want_mem:
                    tn = _alloc(c, tr_bytes[t], alloc, touched, tlist, tn)
        ln = 0
        if en == 0 or et[0] != now:
            # the instant is over: commit its memory changes
            for j in range(tn):
                d = tlist[j]
                touched[d] = False
                lvl = cur[d] - f_old[d] + alloc[d]
                if lvl > peak[d]:
                    peak[d] = lvl
                    peak_t[d] = now
                cur[d] = lvl - f_new[d]
                f_old[d] = 0
                f_new[d] = 0
                alloc[d] = 0
            tn = 0
            if en == 0:
                break
            now = et[0]
        while en > 0 and et[0] == now:
            kind = ek[0]
            x = ei[0]
            en = _h3_pop(et, ek, ei, 0, en)
            if kind == 0 and x >= V:     # a send or a receive finished (``endpoint``)
                t = (x - V) % TMAX
                p = tr_pid[t]
                c = tr_dst[t]
                a = dev[port_owner[p]]
                if x < V + TMAX:
                    busy[a] = False
                    dn = _enlist(dflag, dlist, dn, a)
                    link = tr_link[t]
                    _mq_push(pool_f, pool_k, pool_i, lq_s, lq_t, lbase[link], link, now, p * K + c, t)
                    ln = _enlist(lflag, llist, ln, link)
                else:
                    busy[c] = False
                    dn = _enlist(dflag, dlist, dn, c)
                    tr_arrive[t] = now
                    for e in range(pptr[p], pptr[p + 1]):
                        u = d_dst[e]
                        if dev[u] == c:
                            dn = _input_done(u, c, now, pending, ready, rq_f, rq_k, rq_i, rq_s, rq_t, roff, dflag,
                                             dlist, dn)
            elif kind == 0:
                dx = dev[x]
                busy[dx] = False
                dn = _enlist(dflag, dlist, dn, dx)
                if want_mem:
                    tn = _free(dx, temp[x], start[x], now, f_old, f_new, touched, tlist, tn)
                    # as a consumer: release the tensors it read
                    for i in range(iptr[x], iptr[x + 1]):
                        if i_fwd[i]:    # forwarded: the hold passes to x's output (released in `_drop`)
                            continue
                        t = edge_tid[i_edge[i]]
                        if t < 0:   # a same-device input: the producer's own copy
                            p = i_pid[i]
                            port_rem[p] -= 1
                            if port_rem[p] == 0:
                                tn = _drop(p, dev, port_owner, port_bytes, start, fwd, edge_tid, d_pid, port_rem,
                                           rec_rem, tr_dst, tr_bytes, tr_start, now, f_old, f_new, touched, tlist, tn)
                        else:
                            rec_rem[t] -= 1
                            if rec_rem[t] == 0:
                                tn = _free(dx, tr_bytes[t], tr_start[t], now, f_old, f_new, touched, tlist, tn)
                # as a producer: wake local consumers, create one transfer per (port, device)
                for p in range(port_ptr[x], port_ptr[x + 1]):
                    nlocal = 0
                    nt0 = nt
                    for e in range(pptr[p], pptr[p + 1]):
                        u = d_dst[e]
                        du = dev[u]
                        if du == dx:
                            nlocal += 1
                            dn = _input_done(u, du, now, pending, ready, rq_f, rq_k, rq_i, rq_s, rq_t, roff,
                                             dflag, dlist, dn)
                        else:
                            if tmark[du] != p:
                                tmark[du] = p
                                tslot[du] = nt
                                tr_pid[nt] = p
                                tr_dst[nt] = du
                                tr_link[nt] = elink[e]
                                tr_bytes[nt] = d_bytes[e]
                                rec_rem[nt] = 0
                                nt += 1
                            t = tslot[du]
                            if d_bytes[e] > tr_bytes[t]:
                                tr_bytes[t] = d_bytes[e]
                            edge_tid[e] = t
                            rec_rem[t] += 1
                    # queue the transfers just made (each on its own link, or as a send keyed by its
                    # destination: the order of these pushes does not matter)
                    for t in range(nt0, nt):
                        d = tr_dst[t]
                        tmark[d] = -1
                        if endpoint:    # the send runs on this device first
                            _mq_push(rq_f, rq_k, rq_i, rq_s, rq_t, roff[dx], dx, now, skey + p * K + d, V + t)
                            dn = _enlist(dflag, dlist, dn, dx)
                        else:
                            link = tr_link[t]
                            _mq_push(pool_f, pool_k, pool_i, lq_s, lq_t, lbase[link], link, now, p * K + d, t)
                            ln = _enlist(lflag, llist, ln, link)
                    port_rem[p] = nlocal + nt - nt0
                    if want_mem and port_rem[p] == 0:
                        tn = _drop(p, dev, port_owner, port_bytes, start, fwd, edge_tid, d_pid, port_rem, rec_rem,
                                   tr_dst, tr_bytes, tr_start, now, f_old, f_new, touched, tlist, tn)
                for i in range(cptr[x], cptr[x + 1]):
                    u = c_dst[i]
                    du = dev[u]
                    if du == dx:
                        dn = _input_done(u, du, now, pending, ready, rq_f, rq_k, rq_i, rq_s, rq_t, roff,
                                         dflag, dlist, dn)
                    else:
                        en = _h3_push(et, ek, ei, 0, en, now + lat[dx, du], 2, u)
            elif kind == 1:
                t = x
                p = tr_pid[t]
                c = tr_dst[t]
                link = tr_link[t]
                lbusy[link] = False
                ln = _enlist(lflag, llist, ln, link)
                port_rem[p] -= 1
                if want_mem and port_rem[p] == 0:
                    tn = _drop(p, dev, port_owner, port_bytes, start, fwd, edge_tid, d_pid, port_rem, rec_rem,
                               tr_dst, tr_bytes, tr_start, now, f_old, f_new, touched, tlist, tn)
                if endpoint:    # the receive runs on the destination before its consumers may start
                    _mq_push(rq_f, rq_k, rq_i, rq_s, rq_t, roff[c], c, now, rkey + t, V + TMAX + t)
                    dn = _enlist(dflag, dlist, dn, c)
                    continue
                for e in range(pptr[p], pptr[p + 1]):
                    u = d_dst[e]
                    if dev[u] == c:
                        dn = _input_done(u, c, now, pending, ready, rq_f, rq_k, rq_i, rq_s, rq_t, roff,
                                         dflag, dlist, dn)
            else:
                dn = _input_done(x, dev[x], now, pending, ready, rq_f, rq_k, rq_i, rq_s, rq_t, roff, dflag, dlist, dn)
    return (start, finish, ready, tr_pid[:nt].copy(), tr_dst[:nt].copy(), tr_bytes[:nt].copy(),
            tr_start[:nt].copy(), tr_finish[:nt].copy(), tr_arrive[:nt].copy(), tr_sstart[:nt].copy(),
            tr_rstart[:nt].copy(), peak, peak_t)


# ---------------------------------------------------------------------------
# The one way to call the kernel
# ---------------------------------------------------------------------------

_STATIC = "_sim_static"


def static_of(g) -> StaticArrays:
    """``g``'s `StaticArrays`, built once and cached on the graph."""
    sa = g.__dict__.get(_STATIC)
    if sa is None:
        sa = static_arrays(g)
        object.__setattr__(g, _STATIC, sa)
    return sa


@dataclass(frozen=True, eq=False)
class KernelRun:
    """What one kernel call returns, by name (transfers in the kernel's order, not yet canonical)."""

    start: np.ndarray
    finish: np.ndarray
    ready: np.ndarray
    tr_pid: np.ndarray      # global port id of each transfer
    tr_dst: np.ndarray      # destination device
    tr_bytes: np.ndarray
    tr_start: np.ndarray
    tr_finish: np.ndarray   # when it leaves the link
    tr_arrive: np.ndarray   # when its consumers may use it (its receive's finish with endpoint CPU, else tr_finish)
    tr_send_start: np.ndarray   # its send's start on the source device (-1 without endpoint CPU)
    tr_recv_start: np.ndarray   # its receive's start on the destination (-1 without endpoint CPU)
    transient: np.ndarray   # per device: peak of non-persistent bytes (zeros without memory)
    peak_t: np.ndarray      # per device: first instant of that peak

    @property
    def makespan_us(self) -> float:
        """The step's end: the last op's finish or the last transfer's arrival."""
        return max(float(self.finish.max()) if self.finish.size else 0.0,
                   float(self.tr_arrive.max()) if self.tr_arrive.size else 0.0)


def _kernel_args(g, cluster) -> tuple[tuple, tuple]:
    """The kernel's arguments other than the assignment and the memory flag: those before the flag (the
    cluster's speeds and links, the graph's `StaticArrays`) and those after it (endpoint CPU)."""
    sa = static_of(g)
    return ((cluster.speed, cluster.latency, cluster.bandwidth, sa.time_us, sa.temp, sa.port_ptr, sa.port_bytes,
             sa.port_owner, sa.pptr, sa.d_dst, sa.d_pid, sa.d_bytes, sa.iptr, sa.i_edge, sa.i_pid, sa.i_fwd,
             sa.cptr, sa.c_dst, sa.indeg, sa.own_bytes, sa.fwd),
            (cluster.transfer_cpu, cluster.transfer_cpu_bandwidth, cluster.has_transfer_cpu))


def run_kernel(g, cluster, dev: np.ndarray, memory: bool) -> KernelRun:
    """Simulate ``g`` with op ``v`` on device ``dev[v]`` of ``cluster`` (SPEC §1); peaks only with ``memory``."""
    before, after = _kernel_args(g, cluster)
    return KernelRun(*simulate_kernel(cluster.num_devices, dev, *before, memory, *after))


# ---------------------------------------------------------------------------
# Many trial assignments in one call: the refinement's quick simulations
# ---------------------------------------------------------------------------
#
# A search proposes moves (some ops to one device) and takes the first that shortens the step. Each trial
# called from Python cost a copy of the plan, a digest and the kernel's 27-argument dispatch, up to half
# the time of a simulation on graphs under 5k ops; `first_shorter` runs a whole list of moves in one call.
# Its memo is keyed by a Zobrist hash (128 bits: the XOR of a mixed (op, device) key per op), which a move
# updates from the plan's in time proportional to the ops it moves.

_KEY_HI = 0x6A09E667F3BCC909    # the second half of a key: the same mix from another offset


@leaf
def _mix(x):
    """splitmix64's finaliser: a uint64 to a well-spread uint64 (wrapping arithmetic)."""
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@leaf
def _op_key(v, d, K):
    x = np.uint64(v) * np.uint64(K) + np.uint64(d)
    return _mix(x), _mix(x ^ np.uint64(_KEY_HI))


@njit
def assignment_key(dev, K):
    """The 128-bit key (two uint64) of an assignment onto ``K`` devices: XOR over ops of a mixed (op, device)."""
    lo = np.uint64(0)
    hi = np.uint64(0)
    for v in range(dev.shape[0]):
        a, b = _op_key(v, dev[v], K)
        lo ^= a
        hi ^= b
    return lo, hi


@leaf
def _move_key(K, dev, mnodes, lo_j, hi_j, t, lo, hi):
    """Whether moving ops ``mnodes[lo_j:hi_j]`` to device ``t`` changes ``dev``, and the key of the
    assignment it makes, from ``dev``'s key ``(lo, hi)``."""
    changed = False
    for j in range(lo_j, hi_j):
        v = mnodes[j]
        d = dev[v]
        if d != t:
            changed = True
            a, b = _op_key(v, d, K)
            x, y = _op_key(v, t, K)
            lo ^= a ^ x
            hi ^= b ^ y
    return changed, lo, hi


@njit(nogil=True)
def _trial_makespan(K, dev, trial, mnodes, lo_j, hi_j, t, before, after):
    """The quick makespan of ``dev`` with ops ``mnodes[lo_j:hi_j]`` on device ``t``, simulated on ``trial``
    (a copy of ``dev``, as it was again on return); ``before``, ``after``: the kernel's other arguments
    (`_kernel_args`)."""
    for j in range(lo_j, hi_j):
        trial[mnodes[j]] = t
    r = simulate_kernel(K, trial, *before, False, *after)
    for j in range(lo_j, hi_j):
        trial[mnodes[j]] = dev[mnodes[j]]
    ms = 0.0
    for f in r[1]:
        ms = max(ms, f)
    for f in r[8]:
        ms = max(ms, f)
    return ms


@njit(nogil=True)
def _first_shorter(K, dev, mptr, mnodes, mtarget, first, limit, cur_ms, memo, use_memo, before, after):
    trial = dev.copy()
    lo0, hi0 = assignment_key(dev, K)
    count = 0
    sims = 0
    n = mtarget.shape[0]
    for i in range(first, n):
        if count >= limit:
            return -1, count, np.inf, i, sims
        changed, lo, hi = _move_key(K, dev, mnodes, mptr[i], mptr[i + 1], mtarget[i], lo0, hi0)
        if not changed:
            continue
        count += 1
        key = (lo, hi)
        if use_memo and key in memo:
            ms = memo[key]
        else:
            sims += 1
            ms = _trial_makespan(K, dev, trial, mnodes, mptr[i], mptr[i + 1], mtarget[i], before, after)
            if use_memo:
                memo[key] = ms
        if ms < cur_ms - 1e-9:
            return i, count, ms, i + 1, sims
    return -1, count, np.inf, n, sims


if HAVE_NUMBA:
    from numba import types as _types
    from numba.typed import Dict as _Dict

    _MEMO_KEY = _types.UniTuple(_types.uint64, 2)

    @njit
    def _empty_memo():
        """A typed dict made in compiled code, which numba caches on disk: ``Dict.empty`` called from
        Python compiles the dict's constructor anew in every process (0.15-0.35 s of each command that
        refines a plan)."""
        return _Dict.empty(key_type=_MEMO_KEY, value_type=_types.float64)


def new_memo():
    """An empty memo for `first_shorter` and `Evaluator.quick_makespan`: makespan by `assignment_key` (a
    numba typed dict, which compiled code can use; a plain dict when the kernels run as plain Python)."""
    if not HAVE_NUMBA:
        return {}
    return _empty_memo()


def first_shorter(g, cluster, dev: np.ndarray, mptr: np.ndarray, mnodes: np.ndarray, mtarget: np.ndarray,
                  first: int, limit: int, cur_ms: float, memo=None) -> tuple[int, int, float, int, int]:
    """Try moves ``first, first + 1, ...`` on ``dev`` in turn: move ``i`` puts ops
    ``mnodes[mptr[i]:mptr[i + 1]]`` (each listed once) on device ``mtarget[i]``. A move that changes nothing is skipped and not
    counted; every other is simulated (without memory; from ``memo`` when it holds the assignment) and
    counted. Returns ``(i, counted, makespan, next)``: the first move whose makespan is under ``cur_ms``
    (``i = -1`` when none is before ``limit`` moves were counted or the list ends), the moves counted
    (``i`` included), its makespan, where to go on from, and how many were simulated (not in ``memo``)."""
    before, after = _kernel_args(g, cluster)
    use = memo is not None
    with np.errstate(over="ignore"):     # the keys' wrapping arithmetic, when run as plain Python
        i, count, ms, nxt, sims = _first_shorter(cluster.num_devices, dev, mptr, mnodes, mtarget, first, limit,
                                                 cur_ms, memo if use else new_memo(), use, before, after)
    return int(i), int(count), float(ms), int(nxt), int(sims)


# ---------------------------------------------------------------------------
# The same search on several threads at once: strands
# ---------------------------------------------------------------------------
#
# A search takes the first move that shortens the step; most moves tried do not. `first_shorter_strands`
# lists the moves `first_shorter` would try (those that change the plan, up to its limit) and deals them
# out to S strands, strand s trying the s-th, (s + S)-th, ... in order on a thread of its own. A strand
# that finds a shorter step records the move; a strand stops before any move after a move another strand
# found. The answer is the first move found: every move before it was tried (by its strand) and was not
# shorter, so it is `first_shorter`'s answer, and counted as `first_shorter` counts. While strands run
# they only read the memo (a typed dict takes no concurrent writes); each keeps what it simulated, and the
# memo takes it in afterwards.


@njit(nogil=True)
def _changed_moves(K, dev, mptr, mnodes, mtarget, first, limit):
    """The moves from ``first`` on that change ``dev``, up to ``limit`` of them: their indices, the keys of
    the assignments they make, and where `_first_shorter` would go on from when none is shorter."""
    n = mtarget.shape[0]
    size = max(0, min(limit, n - first))
    idx = np.empty(size, dtype=np.int64)
    klo = np.empty(size, dtype=np.uint64)
    khi = np.empty(size, dtype=np.uint64)
    lo0, hi0 = assignment_key(dev, K)
    count = 0
    i = min(first, n)       # (from past the end: none, and on from the end, as `_first_shorter`)
    while i < n and count < limit:
        changed, lo, hi = _move_key(K, dev, mnodes, mptr[i], mptr[i + 1], mtarget[i], lo0, hi0)
        if changed:
            idx[count] = i
            klo[count] = lo
            khi[count] = hi
            count += 1
        i += 1
    return idx[:count], klo[:count], khi[:count], i


@njit(nogil=True)
def _strand(K, dev, mptr, mnodes, mtarget, idx, klo, khi, s, S, found, found_ms, cur_ms, memo, use_memo,
            new_lo, new_hi, new_ms, before, after):
    """Strand ``s`` of ``S``: moves ``idx[s::S]`` in turn, until one is shorter (``found[s]``, ``found_ms[s]``
    set) or another strand has found one before the next. Returns (new memo entries, simulations)."""
    trial = dev.copy()
    nnew = 0
    sims = 0
    for c in range(s, idx.shape[0], S):
        i = idx[c]
        ahead = False
        for o in range(S):
            if o != s and found[o] < i:
                ahead = True
        if ahead:
            break
        key = (klo[c], khi[c])
        if use_memo and key in memo:
            ms = memo[key]
        else:
            sims += 1
            ms = _trial_makespan(K, dev, trial, mnodes, mptr[i], mptr[i + 1], mtarget[i], before, after)
            new_lo[nnew] = key[0]
            new_hi[nnew] = key[1]
            new_ms[nnew] = ms
            nnew += 1
        if ms < cur_ms - 1e-9:
            found_ms[s] = ms
            found[s] = i
            break
    return nnew, sims


@njit
def _memo_put(memo, lo, hi, ms, n):
    for j in range(n):
        memo[(lo[j], hi[j])] = ms[j]


def first_shorter_strands(g, cluster, dev: np.ndarray, mptr: np.ndarray, mnodes: np.ndarray, mtarget: np.ndarray,
                          first: int, limit: int, cur_ms: float, memo, strands: int,
                          run_on) -> tuple[int, int, float, int, int]:
    """`first_shorter`'s answer (the same tuple), its moves tried on ``strands`` strands at once:
    ``run_on(fn, S)`` calls ``fn(s)`` for s = 0 .. S-1 on threads at once and returns the results in order
    (`pardnn.passes._threads.run_strands`). The simulations counted include the strands' tries after the
    answer."""
    before, after = _kernel_args(g, cluster)
    K = cluster.num_devices
    use = memo is not None
    memo_ = memo if use else new_memo()
    with np.errstate(over="ignore"):
        idx, klo, khi, end = _changed_moves(K, dev, mptr, mnodes, mtarget, first, limit)
    n_idx = idx.shape[0]
    S = max(1, min(int(strands), n_idx))
    big = mtarget.shape[0] + 1
    found = np.full(S, big, dtype=np.int64)
    found_ms = np.full(S, np.inf)
    per = -(-n_idx // S)        # the moves of the strand with the most
    news = [(np.empty(per, np.uint64), np.empty(per, np.uint64), np.empty(per)) for _ in range(S)]

    def strand(s: int) -> tuple[int, int]:
        lo, hi, ms = news[s]
        return _strand(K, dev, mptr, mnodes, mtarget, idx, klo, khi, s, S, found, found_ms, cur_ms, memo_, use,
                       lo, hi, ms, before, after)

    done = run_on(strand, S)
    sims = 0
    for s, (nnew, n_sims) in enumerate(done):
        sims += n_sims
        if use and nnew:
            _memo_put(memo_, *news[s], nnew)
    s = int(np.argmin(found))
    if found[s] < big:
        i = int(found[s])
        return i, int(np.searchsorted(idx, i)) + 1, float(found_ms[s]), i + 1, sims
    return -1, n_idx, float("inf"), int(end), sims

