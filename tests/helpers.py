"""Test helpers: tiny graphs from literal lists, and a slow reference simulator.

`reference_simulate` is a second, deliberately plain implementation of the
SPEC §1 machine model (no numpy, no clever indexing, memory by brute force
at every event instant). The property tests check that `pardnn.machine`
agrees with it exactly on random graphs.
"""

from __future__ import annotations

from collections import defaultdict

from pardnn.cluster import Cluster
from pardnn.ir import GraphBuilder, OpGraph


def consistent_pin(group_pin: dict, group: str | None, pin: int | None) -> int | None:
    """A random graph's pin that agrees with its group's earlier pin (a group pinned to two devices is bad input)."""
    if group is None or pin is None:
        return pin
    return group_pin.setdefault(group, pin)


def tiny(nodes, edges, name: str = "tiny") -> OpGraph:
    """Build a graph from literal lists.

    ``nodes``: ``(name, time_us)`` or ``(name, time_us, output_bytes)`` or
    ``(name, time_us, output_bytes, {extra fields})``.
    ``edges``: ``(src, dst)`` or ``(src, dst, {port/bytes/control})``.
    """
    b = GraphBuilder(name)
    for spec in nodes:
        n, t = spec[0], spec[1]
        out = spec[2] if len(spec) > 2 else 0
        extra = spec[3] if len(spec) > 3 else {}
        b.add_node(n, extra.pop("op", "Op"), time_us=t, output_bytes=out, **extra)
    for spec in edges:
        kw = spec[2] if len(spec) > 2 else {}
        b.add_edge(spec[0], spec[1], **kw)
    return b.build()


def reference_simulate(g: OpGraph, cluster: Cluster, dev: list[int]):
    """A plain SPEC §1 simulator: returns (makespan, start, finish, transfers, peaks).

    ``transfers`` maps (producer, port, destination) to (start, finish, bytes).
    """
    V = g.num_nodes
    K = cluster.num_devices
    dur = [float(g.time_us[v]) / float(cluster.speed[dev[v]]) for v in range(V)]
    edges = [(int(g.edge_src[e]), int(g.edge_dst[e]), int(g.edge_port[e]), int(g.edge_bytes[e]),
              bool(g.edge_control[e])) for e in range(g.num_edges)]
    # transfers: key -> bytes (largest edge), consumers
    tbytes: dict = {}
    tcons: dict = defaultdict(list)
    for s, d, p, b, c in edges:
        if not c and dev[s] != dev[d]:
            key = (s, p, dev[d])
            tbytes[key] = max(tbytes.get(key, 0), b)
            tcons[key].append(d)
    need = [0] * V
    for s, d, p, b, c in edges:
        need[d] += 1
    got = [0] * V
    ready_at = [None] * V
    start = [None] * V
    finish = [None] * V
    busy_until = [0.0] * K
    running = [None] * K
    tstate: dict = {}   # key -> [sendable, start, finish]
    link_busy: dict = {}
    control_arrivals = []   # (time, consumer)
    for v in range(V):
        if need[v] == 0:
            ready_at[v] = 0.0
    t = 0.0
    done_ops = 0

    def satisfy(u, now):
        got[u] += 1
        if got[u] == need[u]:
            ready_at[u] = now

    while True:
        # rounds at instant t
        while True:
            progressed = False
            # 1. op finishes
            for d in range(K):
                v = running[d]
                if v is not None and finish[v] == t:
                    running[d] = None
                    progressed = True
                    for s, dd, p, b, c in edges:
                        if s != v:
                            continue
                        if dev[dd] == dev[v]:
                            satisfy(dd, t)
                        elif c:
                            control_arrivals.append((t + float(cluster.latency[dev[v], dev[dd]]), dd))
                    for key in tbytes:
                        if key[0] == v:
                            tstate[key] = [t, None, None]
            # 2. transfer arrivals
            for key, st in tstate.items():
                if st[2] is not None and st[2] == t and not st[3:]:
                    st.append("arrived")
                    link_busy[(dev[key[0]], key[2])] = False
                    progressed = True
                    for u in tcons[key]:
                        satisfy(u, t)
            # 3. control arrivals
            for item in list(control_arrivals):
                if item[0] == t:
                    control_arrivals.remove(item)
                    satisfy(item[1], t)
                    progressed = True
            # 4. transfer starts: per link, earliest sendable, then producer, port, destination
            for a in range(K):
                for c_ in range(K):
                    if a == c_ or link_busy.get((a, c_)):
                        continue
                    waiting = [k for k, st in tstate.items() if st[1] is None and dev[k[0]] == a and k[2] == c_]
                    if waiting:
                        k = min(waiting, key=lambda k: (tstate[k][0], k[0], k[1], k[2]))
                        b = tbytes[k]
                        dt = float(cluster.latency[a, c_]) + b / float(cluster.bandwidth[a, c_])
                        tstate[k][1] = t
                        tstate[k][2] = t + dt
                        link_busy[(a, c_)] = True
                        progressed = True
            # 5. device picks
            for d in range(K):
                if running[d] is not None:
                    continue
                cands = [v for v in range(V) if dev[v] == d and start[v] is None and ready_at[v] is not None]
                if cands:
                    v = min(cands, key=lambda v: (ready_at[v], v))
                    start[v] = t
                    finish[v] = t + dur[v]
                    running[d] = v
                    done_ops += 1
                    progressed = True
            pending_now = any(running[d] is not None and finish[running[d]] == t for d in range(K)) or any(
                st[2] == t and not st[3:] for st in tstate.values()) or any(c[0] == t for c in control_arrivals)
            if not pending_now:
                break
        future = [finish[running[d]] for d in range(K) if running[d] is not None]
        future += [st[2] for st in tstate.values() if st[2] is not None and not st[3:]]
        future += [c[0] for c in control_arrivals]
        if not future:
            break
        t = min(future)
    makespan = max([f for f in finish if f is not None] + [st[2] for st in tstate.values()] + [0.0])

    # Memory by brute force at every instant. A forwarded output ((consumer, port) -> the (producer, port)
    # whose buffer it reuses, from the edges' "forwarded_as") allocates nothing and keeps that buffer alive
    # as long as it is needed itself: the producer's copy on the same device, else the received copy.
    forwards = {}
    for e in range(g.num_edges):
        extra = g.edge_extra[e] if g.edge_extra else None
        if extra and extra.get("forwarded_as") is not None:
            forwards[(int(g.edge_dst[e]), extra["forwarded_as"])] = (int(g.edge_src[e]), int(g.edge_port[e]))

    def needed_until(v, p):
        free = finish[v]
        for s, d, pp, b, c in edges:
            if s == v and pp == p and not c and dev[d] == dev[v]:
                free = max(free, finish[d])
        for key, st in tstate.items():
            if key[0] == v and key[1] == p:
                free = max(free, st[2])
        for (u, q), (s, sp) in forwards.items():
            if (s, sp) == (v, p) and dev[u] == dev[v]:
                free = max(free, needed_until(u, q))
        return free

    items = []   # (device, alloc, free, bytes)
    for v in range(V):
        for p in range(int(g.port_ptr[v + 1] - g.port_ptr[v])):
            size = 0 if (v, p) in forwards else int(g.port_bytes[g.port_ptr[v] + p])
            items.append((dev[v], start[v], needed_until(v, p), size))
        if g.temp_bytes[v]:
            items.append((dev[v], start[v], finish[v], int(g.temp_bytes[v])))
    for key, st in tstate.items():
        free = max([st[2]] + [finish[u] for u in tcons[key]])
        for (u, q), (s, sp) in forwards.items():
            if (s, sp) == key[:2] and dev[u] == key[2]:
                free = max(free, needed_until(u, q))
        items.append((key[2], st[1], free, tbytes[key]))
    peaks = []
    for d in range(K):
        base = sum(int(g.persistent_bytes[v]) for v in range(V) if dev[v] == d)
        instants = sorted({it[1] for it in items if it[0] == d} | {0.0})
        best = base
        for x in instants:
            level = base + sum(it[3] for it in items if it[0] == d and it[1] <= x and (
                it[2] > x or (it[2] == x and it[1] == x)))
            best = max(best, level)
        peaks.append(best)
    transfers = {k: (st[1], st[2], tbytes[k]) for k, st in tstate.items()}
    return makespan, start, finish, transfers, peaks
