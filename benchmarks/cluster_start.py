"""A start tried for issue 14 and left out: comm-aware clustering, then the clusters placed whole.

Dominant-sequence clustering (Yang and Gerasoulis's DSC, in its simplest form) assumes as many devices as
it likes: in a topological order each op joins the cluster of one of its producers when that starts it no
later than a cluster of its own would (the transfer from that producer is then free, but the cluster runs
its ops one after another), else it opens a new one; a colocation unit stays in one cluster. The clusters
are then placed on the K devices whole, three ways: HEFT and ETF (`pardnn.passes._listsched`, link
contention priced) with each cluster as a unit, and GLB (clusters by start time, each to the device with
the least work). Each plan is simulated (SPEC §1) and set against the partitioner's own plan.

Tuning data only (`tune.py`'s cases; ``--wide``: set v1's ``wide_training_graph(10000, seed=1)``, tuning
data since held-out set v3). Run from the repository root::

    python benchmarks/cluster_start.py --max-nodes 5000 --regimes loose
    python benchmarks/cluster_start.py --wide
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from pardnn import api  # noqa: E402
from pardnn._jit import njit  # noqa: E402
from pardnn.analysis import topological_order  # noqa: E402
from pardnn.bench import bench_cluster, minimum_need, regime_capacity  # noqa: E402
from pardnn.machine import CostModel, simulate, single_device_peak  # noqa: E402
from pardnn.passes import _listsched as L  # noqa: E402


@njit
def _dsc(topo, in_ptr, in_src, in_cost, w, unit, unit_pin):
    """Each op's cluster (the id of its cluster's first op) and finish time on unboundedly many devices."""
    V = topo.shape[0]
    cl = np.full(V, -1, np.int64)
    finish = np.zeros(V)
    ready = np.zeros(V)                       # when each cluster's last op ends
    pin = np.full(V, -1, np.int64)
    ucl = np.full(unit.max() + 1 if V else 0, -1, np.int64)
    for i in range(V):
        v = topo[i]
        u = unit[v]
        c = ucl[u]
        if c < 0:                             # the producer's cluster that starts v earliest, else its own
            best = 0.0
            for j in range(in_ptr[v], in_ptr[v + 1]):
                best = max(best, finish[in_src[j]] + in_cost[j])
            for j in range(in_ptr[v], in_ptr[v + 1]):
                cc = cl[in_src[j]]
                if unit_pin[u] >= 0 and pin[cc] >= 0 and pin[cc] != unit_pin[u]:
                    continue
                s = ready[cc]
                for k in range(in_ptr[v], in_ptr[v + 1]):
                    p = in_src[k]
                    s = max(s, finish[p] if cl[p] == cc else finish[p] + in_cost[k])
                if s < best:
                    best, c = s, cc
            if c < 0:
                c = v
            ucl[u] = c
        s = ready[c]
        for k in range(in_ptr[v], in_ptr[v + 1]):
            p = in_src[k]
            s = max(s, finish[p] if cl[p] == c else finish[p] + in_cost[k])
        cl[v] = c
        finish[v] = s + w[v]
        ready[c] = finish[v]
        if unit_pin[u] >= 0:
            pin[c] = unit_pin[u]
    return cl, finish


def clusters(g, cluster):
    """(cluster per op, 0..n-1; each op's finish time and the span on unboundedly many devices)."""
    cm = CostModel.build(g, cluster)
    ptr, eids = g.in_csr
    cl, fin = _dsc(topological_order(g).astype(np.int64), ptr.astype(np.int64), g.edge_src[eids].astype(np.int64),
                   cm.c[eids].astype(np.float64), cm.w, g.unit.astype(np.int64), g.unit_pin.astype(np.int64))
    return np.unique(cl, return_inverse=True)[1].astype(np.int64), fin


def _pins(g, cl, K):
    pins = np.full(int(cl.max()) + 1, -1, np.int64)
    pn = np.flatnonzero(g.pinned >= 0)
    pins[cl[pn]] = np.minimum(g.pinned[pn], K - 1)
    return pins


def list_placed(g, cluster, mode, cl, memory):
    """The ``mode`` list schedule with each cluster as a unit (its device decided by its first op placed)."""
    a = L.prepare(g)
    n = int(cl.max()) + 1
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(cl, minlength=n), out=ptr[1:])
    a = dataclasses.replace(a, unit=cl, unit_ptr=ptr, unit_mem=np.argsort(cl, kind="stable").astype(np.int64),
                            unit_pers=np.bincount(cl, weights=g.persistent_bytes.astype(np.float64), minlength=n))
    prio = L.static_levels(g, cluster, a) if mode == "etf" else L.ranks(g, cluster, a)
    m = L.MODES[mode]
    order = L.heft_order(a, prio) if m == L.HEFT else np.zeros(0, np.int64)
    return L.list_schedule(m, order, prio.astype(np.float64), cluster.num_devices, cluster.speed, cluster.path_latency,
                           cluster.path_bandwidth, a.time_us, a.in_ptr, a.in_port, a.in_bytes, a.c_ptr, a.c_src,
                           a.out_ptr, a.out_dst, a.indeg, a.port_owner, a.port_ptr, a.held, a.cons, a.out_total,
                           a.temp, a.unit, _pins(g, cl, cluster.num_devices), a.unit_pers, a.unit_ptr, a.unit_mem,
                           cluster.capacity, bool(memory), np.full(g.num_nodes, -1, np.int64), L.CONTEND,
                           np.empty(0, np.int64))[0]


def glb_placed(g, cluster, cl, fin):
    """Clusters by start time, each to the device with the least work so far (pins kept)."""
    w = CostModel.build(g, cluster).w
    n = int(cl.max()) + 1
    start = np.full(n, np.inf)
    np.minimum.at(start, cl, fin - w)
    work = np.bincount(cl, weights=g.time_us, minlength=n)
    pins = _pins(g, cl, cluster.num_devices)
    load = np.zeros(cluster.num_devices)
    cdev = np.zeros(n, np.int64)
    for c in np.lexsort((np.arange(n), start)).tolist():
        d = int(pins[c]) if pins[c] >= 0 else int(np.argmin(load / cluster.speed))
        cdev[c] = d
        load[d] += work[c]
    return cdev[cl]


def cases(args):
    if args.wide:
        from frontends.synthetic_wide import wide_training_graph

        g = wide_training_graph(10000, seed=1)
        for k in (int(x) for x in args.k.split(",")):
            for r in args.regimes.split(","):
                yield "wide-10k-s1", g, k, r, regime_capacity(r, single_device_peak(g), k, minimum_need(g))
        return
    import tune

    yield from tune.cases(argparse.Namespace(keras_only=False, data=args.data, synthetic_sizes="", keras=False,
                                             extra_synthetic="", extra_seed=101, only=args.only,
                                             max_nodes=args.max_nodes, k=args.k, regimes=args.regimes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(HERE.parents[1] / "shared" / "data"))
    ap.add_argument("--max-nodes", type=int, default=5000)
    ap.add_argument("--k", default="2,4,8")
    ap.add_argument("--regimes", default="loose")
    ap.add_argument("--only", default="")
    ap.add_argument("--wide", action="store_true", help="wide_training_graph(10000, seed=1) only")
    args = ap.parse_args()
    ratios = []
    print("| graph | ops | K | regime | clusters | span, any number of devices ms | ours ms | "
          "best cluster plan ms (how) | / ours |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for name, g, k, regime, cap in cases(args):
        c = bench_cluster(k, cap)
        bounded = regime == "tight"
        cl, fin = clusters(g, c)
        plans = {mode: list_placed(g, c, mode, cl, bounded) for mode in ("heft", "etf")}
        plans["glb"] = glb_placed(g, c, cl, fin)
        spans = {}
        for how, dev in plans.items():
            s = simulate(g, c, dev, memory=bounded)
            spans[how] = s.makespan_us if s.feasible else math.inf
        _, ours = api.partition(g, c, require_feasible=False, search_capacity=False)
        how = min(spans, key=spans.get)
        r = spans[how] / ours.makespan_us
        if math.isfinite(r):
            ratios.append(r)
        print(f"| {name} | {g.num_nodes} | {k} | {regime} | {int(cl.max()) + 1} | {fin.max() / 1e3:.2f} | "
              f"{ours.makespan_us / 1e3:.2f} | {spans[how] / 1e3:.2f} ({how}) | {r:.3f} |", flush=True)
    if ratios:
        gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(json.dumps({"cases": len(ratios), "geomean_best_cluster_plan_over_ours": round(gm, 4),
                          "cluster_plan_shorter": sum(x < 1 - 1e-9 for x in ratios), "best": round(min(ratios), 4)}))


if __name__ == "__main__":
    main()
