"""Compiled inner loops of the slicing and mapping passes (see `pardnn._jit`)."""

from __future__ import annotations

import numpy as np

from .._jit import njit


@njit
def bottom_levels_masked(topo, optr, odst, oc, w, free):
    """Longest path (node + edge weights) starting at each ``free`` node, through free nodes only."""
    V = topo.shape[0]
    bl = np.zeros(V)
    for i in range(V - 1, -1, -1):
        v = topo[i]
        if not free[v]:
            continue
        best = 0.0
        for j in range(optr[v], optr[v + 1]):
            u = odst[j]
            if free[u]:
                x = oc[j] + bl[u]
                if x > best:
                    best = x
        bl[v] = best + w[v]
    return bl


@njit
def walk_path(start, optr, odst, oc, bl, free, cluster, cid):
    """Follow the heaviest free successor from ``start``, claiming nodes for cluster ``cid``."""
    v = start
    n = 0
    while True:
        free[v] = False
        cluster[v] = cid
        n += 1
        best = -1.0
        nxt = -1
        for j in range(optr[v], optr[v + 1]):
            u = odst[j]
            if free[u]:
                x = oc[j] + bl[u]
                if x > best:
                    best = x
                    nxt = u
        if nxt < 0:
            return n
        v = nxt


@njit
def slice_paths(topo, optr, odst, oc, w, K):
    """Primary clusters: K successive critical paths, each computed on the nodes still free.
    Secondary clusters: the heaviest remaining paths, walked greedily in order of bottom level.

    Returns (cluster id per node, number of primary clusters, number of clusters).
    """
    V = topo.shape[0]
    free = np.ones(V, dtype=np.bool_)
    cluster = np.full(V, -1, dtype=np.int64)
    cid = 0
    remaining = V
    for _ in range(K):
        if remaining == 0:
            break
        bl = bottom_levels_masked(topo, optr, odst, oc, w, free)
        start = -1
        best = -1.0
        for i in range(V):           # the first node (in topological order) with the largest bottom level
            v = topo[i]
            if free[v] and bl[v] > best:
                best = bl[v]
                start = v
        remaining -= walk_path(start, optr, odst, oc, bl, free, cluster, cid)
        cid += 1
    num_primary = cid
    if remaining == 0:
        return cluster, num_primary, cid
    bl = bottom_levels_masked(topo, optr, odst, oc, w, free)
    # Secondary paths: start at free nodes in order of decreasing bottom level (ties: topological order).
    pos = np.empty(V, dtype=np.int64)
    for i in range(V):
        pos[topo[i]] = i
    keys = np.empty(V)
    for v in range(V):
        keys[v] = -bl[v] if free[v] else np.inf
    order = np.argsort(keys * 1.0, kind="mergesort")
    for i in range(V):
        v = order[i]
        if not free[v]:
            continue
        walk_path(v, optr, odst, oc, bl, free, cluster, cid)
        cid += 1
    return cluster, num_primary, cid


@njit
def _fen_add(tree, d, L, i, x):
    i += 1
    while i <= L:
        tree[d, i] += x
        i += i & (-i)


@njit
def _fen_prefix(tree, d, i):
    """Sum of levels 0..i-1 on device d."""
    s = 0.0
    while i > 0:
        s += tree[d, i]
        i -= i & (-i)
    return s


@njit
def _find(parent, x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@njit
def map_clusters(cluster, num_primary, num_clusters, level, w, esrc, edst, ec, prim_dev, K, comm_weight,
                 merge_factor):
    """ParDNN's mapping: merge secondary clusters with no parallelism gain, then give each remaining
    secondary cluster to the device with the least load within its level span (plus, weighted by
    ``comm_weight``, the communication it would incur there). Primary cluster ``p`` is on ``prim_dev[p]``.

    Returns the device of every node.
    """
    V = cluster.shape[0]
    E = esrc.shape[0]
    C = num_clusters
    L = 1
    for v in range(V):
        if level[v] + 1 > L:
            L = level[v] + 1
    work = np.zeros(C)
    lmin = np.full(C, L, dtype=np.int64)
    lmax = np.zeros(C, dtype=np.int64)
    for v in range(V):
        c = cluster[v]
        work[c] += w[v]
        if level[v] < lmin[c]:
            lmin[c] = level[v]
        if level[v] > lmax[c]:
            lmax[c] = level[v]
    # --- initial merging: a secondary cluster whose communication with one neighbour cluster
    # outweighs its own work gains nothing from running in parallel: merge it there.
    parent = np.arange(C)
    # communication of each secondary with each neighbour: accumulate per (cluster, neighbour) via sorting
    pair_a = np.empty(2 * E, dtype=np.int64)
    pair_b = np.empty(2 * E, dtype=np.int64)
    pair_c = np.empty(2 * E)
    n = 0
    for e in range(E):
        a = cluster[esrc[e]]
        b = cluster[edst[e]]
        if a != b:
            pair_a[n] = a
            pair_b[n] = b
            pair_c[n] = ec[e]
            n += 1
            pair_a[n] = b
            pair_b[n] = a
            pair_c[n] = ec[e]
            n += 1
    best_nb = np.full(C, -1, dtype=np.int64)
    best_comm = np.zeros(C)
    if n > 0:
        key = pair_a[:n] * C + pair_b[:n]
        order = np.argsort(key, kind="mergesort")
        i = 0
        while i < n:
            k0 = key[order[i]]
            s = 0.0
            j = i
            while j < n and key[order[j]] == k0:
                s += pair_c[order[j]]
                j += 1
            a = pair_a[order[i]]
            b = pair_b[order[i]]
            if s > best_comm[a] or (s == best_comm[a] and best_nb[a] >= 0 and b < best_nb[a]):
                best_comm[a] = s
                best_nb[a] = b
            i = j
    # lightest secondary clusters first
    sec = np.arange(num_primary, C)
    sec_order = sec[np.argsort(work[num_primary:], kind="mergesort")]
    for s in sec_order:
        nb = best_nb[s]
        if nb >= 0 and best_comm[s] * merge_factor >= work[s]:
            rs = _find(parent, s)
            rn = _find(parent, nb)
            if rs != rn:
                # keep primaries as roots
                if rs < num_primary:
                    parent[rn] = rs
                else:
                    parent[rs] = rn
    root = np.empty(C, dtype=np.int64)
    for c in range(C):
        root[c] = _find(parent, c)
    # merged cluster statistics
    rwork = np.zeros(C)
    rlmin = np.full(C, L, dtype=np.int64)
    rlmax = np.zeros(C, dtype=np.int64)
    for c in range(C):
        r = root[c]
        rwork[r] += work[c]
        if lmin[c] < rlmin[r]:
            rlmin[r] = lmin[c]
        if lmax[c] > rlmax[r]:
            rlmax[r] = lmax[c]
    # --- load balancing over levels
    tree = np.zeros((K, L + 1))
    dev = np.full(V, -1, dtype=np.int64)
    cdev = np.full(C, -1, dtype=np.int64)
    for p in range(num_primary):
        cdev[p] = prim_dev[p]
    # members of each root cluster (CSR)
    rcount = np.zeros(C + 1, dtype=np.int64)
    for v in range(V):
        rcount[root[cluster[v]] + 1] += 1
    for c in range(C):
        rcount[c + 1] += rcount[c]
    fill = rcount[:-1].copy()
    members = np.empty(V, dtype=np.int64)
    for v in range(V):
        r = root[cluster[v]]
        members[fill[r]] = v
        fill[r] += 1
    for v in range(V):
        r = root[cluster[v]]
        if r < num_primary:
            dev[v] = prim_dev[r]
            _fen_add(tree, prim_dev[r], L, level[v], w[v])
    # in-CSR and out-CSR by node for communication estimates
    optr = np.zeros(V + 1, dtype=np.int64)
    iptr = np.zeros(V + 1, dtype=np.int64)
    for e in range(E):
        optr[esrc[e] + 1] += 1
        iptr[edst[e] + 1] += 1
    for v in range(V):
        optr[v + 1] += optr[v]
        iptr[v + 1] += iptr[v]
    oe = np.empty(E, dtype=np.int64)
    ie = np.empty(E, dtype=np.int64)
    of = optr[:-1].copy()
    inf_ = iptr[:-1].copy()
    for e in range(E):
        oe[of[esrc[e]]] = e
        of[esrc[e]] += 1
        ie[inf_[edst[e]]] = e
        inf_[edst[e]] += 1
    comm = np.zeros(K)
    for r in range(num_primary, C):
        if root[r] != r:
            continue
        for d in range(K):
            comm[d] = 0.0
        total = 0.0
        for i in range(rcount[r], rcount[r + 1]):
            v = members[i]
            for j in range(optr[v], optr[v + 1]):
                e = oe[j]
                u = edst[e]
                if dev[u] >= 0:
                    comm[dev[u]] += ec[e]
                    total += ec[e]
            for j in range(iptr[v], iptr[v + 1]):
                e = ie[j]
                u = esrc[e]
                if dev[u] >= 0:
                    comm[dev[u]] += ec[e]
                    total += ec[e]
        best = -1
        best_score = 0.0
        best_comm = 0.0
        for d in range(K):
            load = _fen_prefix(tree, d, rlmax[r] + 1) - _fen_prefix(tree, d, rlmin[r])
            incurred = total - comm[d]
            score = load + comm_weight * incurred
            if best < 0 or score < best_score - 1e-9 or (abs(score - best_score) <= 1e-9 and incurred < best_comm):
                best = d
                best_score = score
                best_comm = incurred
        cdev[r] = best
        for i in range(rcount[r], rcount[r + 1]):
            v = members[i]
            dev[v] = best
            _fen_add(tree, best, L, level[v], w[v])
    return dev


@njit
def resolve_units(dev, unit, num_units, w, esrc, edst, ec, pins, K):
    """Put every unit (colocation group) on one device: its pin if it has one, else the device
    holding the most of its members' work plus the communication flowing into them.
    """
    V = dev.shape[0]
    score = np.zeros((num_units, K))
    size = np.zeros(num_units, dtype=np.int64)
    first = np.full(num_units, -1, dtype=np.int64)
    for v in range(V):
        size[unit[v]] += 1
        score[unit[v], dev[v]] += w[v]
        if first[unit[v]] < 0:
            first[unit[v]] = dev[v]
    for e in range(esrc.shape[0]):
        u = unit[edst[e]]
        if size[u] > 1:
            score[u, dev[esrc[e]]] += ec[e]
    udev = np.empty(num_units, dtype=np.int64)
    for u in range(num_units):
        if pins[u] >= 0:
            udev[u] = pins[u]
            continue
        best = first[u]   # ties stay where the group's first member is
        for d in range(K):
            if score[u, d] > score[u, best]:
                best = d
        udev[u] = best
    out = dev.copy()
    for v in range(V):
        if size[unit[v]] > 1 or pins[unit[v]] >= 0:
            out[v] = udev[unit[v]]
    return out
