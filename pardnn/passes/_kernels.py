"""Compiled inner loops of the slicing and mapping passes (see `pardnn._jit`)."""

from __future__ import annotations

import numpy as np

from .._jit import leaf, njit


@leaf
def _heaviest_free_successor(v, optr, odst, oc, bl, free, floor):
    """The free successor ``u`` of ``v`` with the largest ``oc + bl[u]`` above ``floor`` (the first on
    ties), and that value: ``(value, u)``, or ``(floor, -1)`` when there is none.
    """
    best = floor
    nxt = -1
    for j in range(optr[v], optr[v + 1]):
        u = odst[j]
        if free[u]:
            x = oc[j] + bl[u]
            if x > best:
                best = x
                nxt = u
    return best, nxt


@njit
def bottom_levels_masked(topo, optr, odst, oc, w, free):
    """Longest path (node + edge weights) starting at each ``free`` node, through free nodes only."""
    V = topo.shape[0]
    bl = np.zeros(V)
    for i in range(V - 1, -1, -1):
        v = topo[i]
        if not free[v]:
            continue
        best, _ = _heaviest_free_successor(v, optr, odst, oc, bl, free, 0.0)
        bl[v] = best + w[v]
    return bl


@leaf
def walk_path(start, optr, odst, oc, bl, free, cluster, cid):
    """Follow the heaviest free successor from ``start``, claiming nodes for cluster ``cid``."""
    v = start
    n = 0
    while True:
        free[v] = False
        cluster[v] = cid
        n += 1
        _, nxt = _heaviest_free_successor(v, optr, odst, oc, bl, free, -1.0)
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


@leaf
def _fen_add(tree, d, L, i, x):
    i += 1
    while i <= L:
        tree[d, i] += x
        i += i & (-i)


@leaf
def _fen_prefix(tree, d, i):
    """Sum of levels 0..i-1 on device d."""
    s = 0.0
    while i > 0:
        s += tree[d, i]
        i -= i & (-i)
    return s


@njit
def _group_spans(group, num_groups, L, w, lo, hi):
    """Per group: the total ``w`` of its items, the least ``lo`` and the greatest ``hi`` (``L`` and 0
    for a group with no items). Item ``i`` is in group ``group[i]``.
    """
    work = np.zeros(num_groups)
    gmin = np.full(num_groups, L, dtype=np.int64)
    gmax = np.zeros(num_groups, dtype=np.int64)
    for i in range(group.shape[0]):
        c = group[i]
        work[c] += w[i]
        if lo[i] < gmin[c]:
            gmin[c] = lo[i]
        if hi[i] > gmax[c]:
            gmax[c] = hi[i]
    return work, gmin, gmax


@njit
def _csr(key, n):
    """Items ``0..len(key)-1`` grouped by key, each group in item order: ``items[ptr[k]:ptr[k + 1]]``
    are the items with key ``k`` (``0 <= k < n``). Returns ``(ptr, items)``.
    """
    ptr = np.zeros(n + 1, dtype=np.int64)
    for i in range(key.shape[0]):
        ptr[key[i] + 1] += 1
    for k in range(n):
        ptr[k + 1] += ptr[k]
    fill = ptr[:-1].copy()
    items = np.empty(key.shape[0], dtype=np.int64)
    for i in range(key.shape[0]):
        items[fill[key[i]]] = i
        fill[key[i]] += 1
    return ptr, items


@leaf
def _add_placed_comm(v, ptr, eids, other, dev, ec, comm, total):
    """Add the communication of ``v``'s edges ``eids[ptr[v]:ptr[v + 1]]`` whose other end (``other[e]``)
    is placed to ``comm``, by that end's device, and to ``total``; return the new total.
    """
    for j in range(ptr[v], ptr[v + 1]):
        e = eids[j]
        u = other[e]
        if dev[u] >= 0:
            comm[dev[u]] += ec[e]
            total += ec[e]
    return total


@leaf
def _find(parent, x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@njit(nogil=True)
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
    work, lmin, lmax = _group_spans(cluster, C, L, w, level, level)
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
    # per cluster a, the communication s with each neighbour b (summed in edge order); the neighbour
    # with the most, the lowest id on ties, when that is more than 0
    aptr, pairs = _csr(pair_a[:n], C)
    acc = np.zeros(C)
    seen = np.full(C, -1, dtype=np.int64)
    for a in range(C):
        for j in range(aptr[a], aptr[a + 1]):
            i = pairs[j]
            acc[pair_b[i]] += pair_c[i]
        for j in range(aptr[a], aptr[a + 1]):
            b = pair_b[pairs[j]]
            if seen[b] == a:
                continue
            seen[b] = a
            s = acc[b]
            if s > best_comm[a] or (s == best_comm[a] and best_nb[a] >= 0 and b < best_nb[a]):
                best_comm[a] = s
                best_nb[a] = b
        for j in range(aptr[a], aptr[a + 1]):
            acc[pair_b[pairs[j]]] = 0.0
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
    rwork, rlmin, rlmax = _group_spans(root, C, L, work, lmin, lmax)
    # --- load balancing over levels
    tree = np.zeros((K, L + 1))
    dev = np.full(V, -1, dtype=np.int64)
    cdev = np.full(C, -1, dtype=np.int64)
    for p in range(num_primary):
        cdev[p] = prim_dev[p]
    # members of each root cluster (CSR)
    rcount, members = _csr(root[cluster], C)
    for v in range(V):
        r = root[cluster[v]]
        if r < num_primary:
            dev[v] = prim_dev[r]
            _fen_add(tree, prim_dev[r], L, level[v], w[v])
    # out-edges and in-edges of each node (CSR) for communication estimates
    optr, oe = _csr(esrc, V)
    iptr, ie = _csr(edst, V)
    comm = np.zeros(K)
    for r in range(num_primary, C):
        if root[r] != r:
            continue
        for d in range(K):
            comm[d] = 0.0
        total = 0.0
        for i in range(rcount[r], rcount[r + 1]):
            v = members[i]
            total = _add_placed_comm(v, optr, oe, edst, dev, ec, comm, total)
            total = _add_placed_comm(v, iptr, ie, esrc, dev, ec, comm, total)
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
def straddling(unit, num_units, cluster_of):
    """Whether each node's unit has members in more than one cluster (``cluster_of``)."""
    lo = np.zeros(num_units, dtype=np.int64)
    hi = np.zeros(num_units, dtype=np.int64)
    seen = np.zeros(num_units, dtype=np.bool_)
    for v in range(unit.shape[0]):
        u = unit[v]
        c = cluster_of[v]
        if not seen[u]:
            seen[u] = True
            lo[u] = c
            hi[u] = c
        elif c < lo[u]:
            lo[u] = c
        elif c > hi[u]:
            hi[u] = c
    out = np.empty(unit.shape[0], dtype=np.bool_)
    for v in range(unit.shape[0]):
        out[v] = lo[unit[v]] != hi[unit[v]]
    return out


@njit(nogil=True)
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


@leaf
def _block_sum(a, lo, n):
    """numpy's pairwise sum of ``a[lo:lo + n]`` for ``n <= 128``: a plain loop below 8, else eight
    accumulators over whole blocks of eight, then the rest one by one."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[lo + i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    m = n - n % 8
    i = 8
    while i < m:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@leaf
def _pairwise_sum(a, n, los, ns, stage, vals):
    """``a[:n].sum()`` bit for bit as numpy sums a contiguous float64 row (its ``pairwise_sum``): above 128
    elements, the sum of the two halves (the first a multiple of 8 long), each summed the same way. The
    recursion runs on an explicit stack (``los``, ``ns``, ``stage``, ``vals``, 64 deep), since numba's
    cache cannot reload a recursive function."""
    if n <= 128:
        return _block_sum(a, 0, n)
    top = 0
    los[0] = 0
    ns[0] = n
    while True:
        m = ns[top]
        if m > 128:         # descend into the left half
            stage[top] = 1
            half = m // 2
            half -= half % 8
            los[top + 1] = los[top]
            ns[top + 1] = half
            top += 1
            continue
        v = _block_sum(a, los[top], m)
        while True:         # hand v up: a left half waits for its right, a right half completes its parent
            top -= 1
            if top < 0:
                return v
            if stage[top] == 1:
                vals[top] = v
                stage[top] = 2
                half = ns[top] // 2
                half -= half % 8
                los[top + 1] = los[top] + half
                ns[top + 1] = ns[top] - half
                top += 1
                break
            v = vals[top] + v


@njit
def unit_comm_sums(A, ptr, members, cand):
    """Row ``i``: per device ``e``, the sum of ``A[v, e]`` over the members ``v`` of unit ``cand[i]``
    (``members[ptr[u]:ptr[u + 1]]``), the same sum bit for bit as numpy's of a contiguous copy of them
    (a unit of one op: its row as is)."""
    n = cand.shape[0]
    K = A.shape[1]
    out = np.empty((n, K))
    longest = 1
    for i in range(n):
        longest = max(longest, ptr[cand[i] + 1] - ptr[cand[i]])
    buf = np.empty(longest)
    los = np.empty(64, dtype=np.int64)
    ns = np.empty(64, dtype=np.int64)
    stage = np.empty(64, dtype=np.int64)
    vals = np.empty(64)
    for i in range(n):
        lo = ptr[cand[i]]
        m = ptr[cand[i] + 1] - lo
        if m == 1:
            for e in range(K):
                out[i, e] = A[members[lo], e]
            continue
        for e in range(K):
            for j in range(m):
                buf[j] = A[members[lo + j], e]
            # numpy's reduction starts from its identity, +0.0: a sum of negative zeros is +0.0
            out[i, e] = 0.0 + _pairwise_sum(buf, m, los, ns, stage, vals)
    return out
