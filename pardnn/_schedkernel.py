"""The event loop of the SPEC §1 simulator, as a compiled kernel.

All queues are binary heaps kept in preallocated numpy arrays:

* one ready queue per device, keyed (ready time, node id), stored in one
  array partitioned by device (each op sits in exactly one device's queue);
* one send queue per directed link, keyed (sendable time, transfer id),
  stored the same way (transfer ids are ordered by producer, port,
  destination, so the id breaks ties as SPEC §1.1 rule 9 asks);
* one event heap keyed (time, kind, id): kind 0 op finish, 1 transfer
  arrival, 2 control arrival, which is the order SPEC §1.1 rule 1 processes
  events at one instant.

The caller (`pardnn.machine`) builds the CSR arrays and interprets results.
"""

from __future__ import annotations

import numpy as np

from ._jit import njit


@njit
def _less3(t1, k1, i1, t2, k2, i2):
    if t1 != t2:
        return t1 < t2
    if k1 != k2:
        return k1 < k2
    return i1 < i2


@njit
def _ev_push(et, ek, ei, n, t, k, i):
    j = n
    et[j] = t
    ek[j] = k
    ei[j] = i
    while j > 0:
        p = (j - 1) >> 1
        if _less3(et[j], ek[j], ei[j], et[p], ek[p], ei[p]):
            et[j], et[p] = et[p], et[j]
            ek[j], ek[p] = ek[p], ek[j]
            ei[j], ei[p] = ei[p], ei[j]
            j = p
        else:
            break
    return n + 1


@njit
def _ev_pop(et, ek, ei, n):
    """Remove the root; the caller has read it. Returns the new size."""
    n -= 1
    et[0] = et[n]
    ek[0] = ek[n]
    ei[0] = ei[n]
    j = 0
    while True:
        a = 2 * j + 1
        if a >= n:
            break
        b = a + 1
        c = a
        if b < n and _less3(et[b], ek[b], ei[b], et[a], ek[a], ei[a]):
            c = b
        if _less3(et[c], ek[c], ei[c], et[j], ek[j], ei[j]):
            et[j], et[c] = et[c], et[j]
            ek[j], ek[c] = ek[c], ek[j]
            ei[j], ei[c] = ei[c], ei[j]
            j = c
        else:
            break
    return n


@njit
def _q_push(qt, qi, base, n, t, i):
    """Push (t, i) on the heap occupying ``qt[base:base+n]``; return the new size."""
    j = n
    qt[base + j] = t
    qi[base + j] = i
    while j > 0:
        p = (j - 1) >> 1
        a = base + j
        b = base + p
        if qt[a] < qt[b] or (qt[a] == qt[b] and qi[a] < qi[b]):
            qt[a], qt[b] = qt[b], qt[a]
            qi[a], qi[b] = qi[b], qi[a]
            j = p
        else:
            break
    return n + 1


@njit
def _q_pop(qt, qi, base, n):
    """Pop the smallest (t, i) of the heap at ``base``; return (i, new size)."""
    top = qi[base]
    n -= 1
    qt[base] = qt[base + n]
    qi[base] = qi[base + n]
    j = 0
    while True:
        a = 2 * j + 1
        if a >= n:
            break
        c = a
        if a + 1 < n:
            x = base + a + 1
            y = base + a
            if qt[x] < qt[y] or (qt[x] == qt[y] and qi[x] < qi[y]):
                c = a + 1
        x = base + c
        y = base + j
        if qt[x] < qt[y] or (qt[x] == qt[y] and qi[x] < qi[y]):
            qt[x], qt[y] = qt[y], qt[x]
            qi[x], qi[y] = qi[y], qi[x]
            j = c
        else:
            break
    return top, n


@njit
def run_events(K, dev, dur, indeg, lptr, ldst, tptr, tlink, tdur, tcptr, tcdst, cptr, cdst, clat):
    """Simulate one step; return (start, finish, ready, tstart, tfinish)."""
    V = dev.shape[0]
    T = tdur.shape[0]
    L = K * K
    start = np.zeros(V)
    finish = np.zeros(V)
    ready = np.zeros(V)
    tstart = np.zeros(T)
    tfinish = np.zeros(T)
    pending = indeg.copy()
    # Ready queues, partitioned by device.
    roff = np.zeros(K + 1, dtype=np.int64)
    for v in range(V):
        roff[dev[v] + 1] += 1
    for d in range(K):
        roff[d + 1] += roff[d]
    rq_t = np.zeros(V)
    rq_i = np.zeros(V, dtype=np.int64)
    rq_n = np.zeros(K, dtype=np.int64)
    # Send queues, partitioned by link.
    loff = np.zeros(L + 1, dtype=np.int64)
    for t in range(T):
        loff[tlink[t] + 1] += 1
    for link in range(L):
        loff[link + 1] += loff[link]
    lq_t = np.zeros(max(T, 1))
    lq_i = np.zeros(max(T, 1), dtype=np.int64)
    lq_n = np.zeros(L, dtype=np.int64)
    # Events.
    cap = V + T + cdst.shape[0] + 1
    et = np.zeros(cap)
    ek = np.zeros(cap, dtype=np.int64)
    ei = np.zeros(cap, dtype=np.int64)
    en = 0
    busy = np.zeros(K, dtype=np.bool_)
    lbusy = np.zeros(L, dtype=np.bool_)
    dflag = np.zeros(K, dtype=np.bool_)
    dlist = np.zeros(K, dtype=np.int64)
    dn = 0
    lflag = np.zeros(L, dtype=np.bool_)
    llist = np.zeros(L, dtype=np.int64)
    ln = 0
    for v in range(V):
        if pending[v] == 0:
            d = dev[v]
            rq_n[d] = _q_push(rq_t, rq_i, roff[d], rq_n[d], 0.0, v)
    for d in range(K):
        dflag[d] = True
        dlist[dn] = d
        dn += 1
    now = 0.0
    while True:
        # Idle devices start their earliest-ready op; idle links their first transfer.
        for j in range(dn):
            d = dlist[j]
            dflag[d] = False
            if not busy[d] and rq_n[d] > 0:
                v, rq_n[d] = _q_pop(rq_t, rq_i, roff[d], rq_n[d])
                busy[d] = True
                start[v] = now
                f = now + dur[v]
                finish[v] = f
                en = _ev_push(et, ek, ei, en, f, 0, v)
        dn = 0
        for j in range(ln):
            link = llist[j]
            lflag[link] = False
            if not lbusy[link] and lq_n[link] > 0:
                t, lq_n[link] = _q_pop(lq_t, lq_i, loff[link], lq_n[link])
                lbusy[link] = True
                tstart[t] = now
                f = now + tdur[t]
                tfinish[t] = f
                en = _ev_push(et, ek, ei, en, f, 1, t)
        ln = 0
        if en == 0:
            break
        now = et[0]
        while en > 0 and et[0] == now:
            kind = ek[0]
            x = ei[0]
            en = _ev_pop(et, ek, ei, en)
            if kind == 0:
                d = dev[x]
                busy[d] = False
                if not dflag[d]:
                    dflag[d] = True
                    dlist[dn] = d
                    dn += 1
                for i in range(lptr[x], lptr[x + 1]):
                    u = ldst[i]
                    pending[u] -= 1
                    if pending[u] == 0:
                        du = dev[u]
                        ready[u] = now
                        rq_n[du] = _q_push(rq_t, rq_i, roff[du], rq_n[du], now, u)
                        if not dflag[du]:
                            dflag[du] = True
                            dlist[dn] = du
                            dn += 1
                for t in range(tptr[x], tptr[x + 1]):
                    link = tlink[t]
                    lq_n[link] = _q_push(lq_t, lq_i, loff[link], lq_n[link], now, t)
                    if not lflag[link]:
                        lflag[link] = True
                        llist[ln] = link
                        ln += 1
                for i in range(cptr[x], cptr[x + 1]):
                    en = _ev_push(et, ek, ei, en, now + clat[i], 2, cdst[i])
            elif kind == 1:
                link = tlink[x]
                lbusy[link] = False
                if not lflag[link]:
                    lflag[link] = True
                    llist[ln] = link
                    ln += 1
                for i in range(tcptr[x], tcptr[x + 1]):
                    u = tcdst[i]
                    pending[u] -= 1
                    if pending[u] == 0:
                        du = dev[u]
                        ready[u] = now
                        rq_n[du] = _q_push(rq_t, rq_i, roff[du], rq_n[du], now, u)
                        if not dflag[du]:
                            dflag[du] = True
                            dlist[dn] = du
                            dn += 1
            else:
                pending[x] -= 1
                if pending[x] == 0:
                    du = dev[x]
                    ready[x] = now
                    rq_n[du] = _q_push(rq_t, rq_i, roff[du], rq_n[du], now, x)
                    if not dflag[du]:
                        dflag[du] = True
                        dlist[dn] = du
                        dn += 1
    return start, finish, ready, tstart, tfinish
