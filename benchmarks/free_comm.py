"""How much of the step time over the bound is communication: pardnn placed again with transfers free.

For each graph and K (loose memory, `pardnn.bench`'s capacity), pardnn places the graph twice: on the
bench cluster (25 us, 12 GB/s) and on the same cluster with no latency and a bandwidth of 1e12 bytes/us
(a transfer then costs nothing). The free figure is the shorter of the plan made for that cluster and
the bench plan run on it. The issue's bound
max(critical path, work / K, largest unit) and the sound lower bound (`pardnn.bounds`) price no transfer,
so the second figure is the part of the gap that is not communication: the FIFO executor of SPEC §1 and
the graph's shape. ETF and HEFT are placed the same way for comparison (``--methods``).

Under SPEC §1's first-come executor a faster transfer can make a plan slower (an anomaly: lstm-4l at K=4,
1.101 free against 1.098), so a case's free figure is an estimate of what free transfers allow, not a
bound on it. An analysis, not a tuning run: it changes nothing and no setting is chosen from it.

Run from the repository root (about 1 min per 10k-op graph at K = 2, 4, 8)::

    python benchmarks/free_comm.py benchmarks/tuning/graphs/tune-keras-mobilenet.json.gz
    python benchmarks/free_comm.py --heldout3 --methods pardnn
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pardnn import Cluster, load_graph, partition  # noqa: E402
from pardnn.bench import minimum_need, regime_capacity  # noqa: E402
from pardnn.bounds import makespan_lower_bound  # noqa: E402
from pardnn.machine import simulate, single_device_peak  # noqa: E402

sys.path.insert(0, str(HERE / "heldout"))
from run_heldout import physical_bound  # noqa: E402

FREE = dict(latency_us=0.0, bandwidth_bytes_per_us=1e12)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="*", help="pardnn.graph files")
    ap.add_argument("--heldout3", action="store_true", help="every graph of benchmarks/heldout3/graphs")
    ap.add_argument("--k", default="2,4,8")
    ap.add_argument("--methods", default="pardnn,etf,heft")
    args = ap.parse_args(argv)
    loaders = [lambda p=Path(p): load_graph(p) for p in args.graphs]
    if args.heldout3:       # its files, then its generated graphs (benchmarks/heldout3/SHA256SUMS freezes both)
        sys.path.insert(0, str(HERE / "heldout3"))
        import make_heldout3 as v3

        loaders += [lambda p=p: load_graph(p) for p in sorted((HERE / "heldout3" / "graphs").glob("*.json.gz"))]
        loaders += [lambda n=n: v3.synthetic_graph(n) for n in v3.SYNTHETIC_SIZES]
    methods = args.methods.split(",")
    logs: dict = {}
    print(f"{'graph':30s} {'K':>2s} {'method':7s} {'/bound':>7s} {'free':>7s} {'/lower':>7s} {'free':>7s} {'s':>6s}")
    for load in loaders:
        g = load()
        peak1, need = single_device_peak(g), minimum_need(g)
        for k in (int(x) for x in args.k.split(",")):
            cap = int(regime_capacity("loose", peak1, k, need))
            bound = physical_bound(g, k)
            clusters = (Cluster.homogeneous(k, memory_bytes=cap), Cluster.homogeneous(k, memory_bytes=cap, **FREE))
            lower = makespan_lower_bound(g, clusters[0]).value_us     # prices no transfer: the same on both
            for m in methods:
                t0 = time.perf_counter()
                plans = [partition(g, c, method=m, require_feasible=False, search_capacity=False)
                         for c in clusters]
                # the free figure is the better of the plan made for free transfers and the bench plan run with
                # them (a search for one cluster is not a search for the other: either can be the shorter)
                ms = [plans[0][1].makespan_us,
                      min(plans[1][1].makespan_us, simulate(g, clusters[1], plans[0][0]).makespan_us)]
                sec = time.perf_counter() - t0
                for key, x in (("bound", ms[0] / bound), ("bound-free", ms[1] / bound),
                               ("lower", ms[0] / lower), ("lower-free", ms[1] / lower)):
                    logs.setdefault((m, key), []).append(math.log(x))
                print(f"{g.name[:30]:30s} {k:2d} {m:7s} {ms[0] / bound:7.3f} {ms[1] / bound:7.3f} "
                      f"{ms[0] / lower:7.3f} {ms[1] / lower:7.3f} {sec:6.1f}", flush=True)
    for m in methods:
        row = " ".join(f"{key} {math.exp(sum(v) / len(v)):.3f}" for (mm, key), v in logs.items() if mm == m)
        print(f"geomean {m}: {row}")


if __name__ == "__main__":
    main()
