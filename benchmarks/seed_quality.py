"""The seed pass's list schedulers against the Python list-scheduling baselines, on the tuning suite.

For every graph of ``pardnn.bench.suite(--suite)`` (never the held-out set) and K in ``--ks``, with loose
memory (`pardnn.bench.regime_capacity("loose")`, `bench_cluster`), prints the simulated step time (ms) of

* ``ls-heft``, ``ls-etf``, ``ls-etf-rank``: the contention-aware list schedulers of
  `pardnn.passes._listsched` (ETF's ties by static level, or by upward rank);
* ``heft``, ``etf``, ``cpop``: the Python baselines (`pardnn.baselines.PLACERS`), which price each edge
  on its own (no link queueing);

and the seconds each took to place (ours: `prepare` + ranks + the kernel, per plan). A summary per K
follows: the geometric mean of best-of-ours / best-of-baselines and how often ours is at least as good.
Then the timing of our schedulers on ``transformer_training_graph(200000, seed=0)`` at K=8: the first call
in this process (numba compilation, or loading it from the on-disk cache) and the best of three after it.

Run: python benchmarks/seed_quality.py [--suite full] [--ks 2,4,8] [--max-nodes 60000] [--data DIR]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from pardnn.baselines import PLACERS
from pardnn.bench import bench_cluster, fingerprint, minimum_need, regime_capacity, suite
from pardnn.cluster import Cluster
from pardnn.machine import simulate, single_device_peak
from pardnn.passes import _listsched

from _timing import best_of

ROOT = Path(__file__).resolve().parent.parent
OURS = ("ls-heft", "ls-etf", "ls-etf-rank")
BASELINES = ("heft", "etf", "cpop")


def ours(g, cluster, mode: str) -> tuple[np.ndarray, float]:
    t0 = time.perf_counter()
    dev, _, _ = _listsched.schedule(g, cluster, mode)
    return dev, time.perf_counter() - t0


def run_case(g, cluster) -> dict[str, tuple[float, bool, float]]:
    """Per method: (makespan us, feasible, seconds)."""
    out = {}
    for name in OURS:
        dev, secs = ours(g, cluster, name[3:])
        s = simulate(g, cluster, dev)
        out[name] = (float(s.makespan_us), s.feasible, secs)
    for name in BASELINES:
        t0 = time.perf_counter()
        dev = PLACERS[name](g, cluster).assignment
        secs = time.perf_counter() - t0
        s = simulate(g, cluster, dev)
        out[name] = (float(s.makespan_us), s.feasible, secs)
    return out


def time_large(k: int = 8, n: int = 200_000) -> None:
    from pardnn.frontends.synthetic import transformer_training_graph

    g = transformer_training_graph(n, seed=0)
    cluster = Cluster.homogeneous(k, int(2 * single_device_peak(g)))
    print(f"\ntransformer_training_graph({n}, seed=0): {g.num_nodes:,} ops, {g.num_edges:,} edges, K={k}, loose memory")
    t0 = time.perf_counter()
    a = _listsched.prepare(g)
    t_prep = time.perf_counter() - t0
    t0 = time.perf_counter()
    r = _listsched.ranks(g, cluster, a)
    lv = _listsched.static_levels(g, cluster, a)
    t_rank = time.perf_counter() - t0
    print(f"  prepare {t_prep:.3f} s, ranks and static levels {t_rank:.3f} s (shared by every plan of one graph)")
    for mode in ("heft", "etf", "etf-rank"):
        for mem in (False, True):
            t0 = time.perf_counter()
            dev, _, fin = _listsched.schedule(g, cluster, mode, memory=mem, arrays=a, rank=r, level=lv)
            first = time.perf_counter() - t0
            best = best_of(lambda: _listsched.schedule(g, cluster, mode, memory=mem, arrays=a, rank=r,
                                                      level=lv), 3)
            ms = simulate(g, cluster, dev, memory=False).makespan_us
            label = ("m-" if mem else "") + mode
            print(f"  {label:<7} first call {first:6.3f} s (compile or cache load included), then best of 3 "
                  f"{best:.3f} s; simulated makespan {ms / 1000:.2f} ms (predicted {fin.max() / 1000:.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default="full")
    ap.add_argument("--ks", default="2,4,8")
    ap.add_argument("--max-nodes", type=int, default=60_000,
                    help="skip graphs larger than this (the Python baselines take seconds per case)")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--only", default="", help="comma-separated graph names to run (default: all)")
    ap.add_argument("--no-large", action="store_true", help="skip the 200k-op timing")
    args = ap.parse_args()
    data = args.data if args.data.is_dir() else Path("/work/shared/data")
    ks = [int(x) for x in args.ks.split(",")]
    only = set(filter(None, args.only.split(",")))
    sources = suite(args.suite, data_dir=data, samples_dir=ROOT / "sample_graphs")
    methods = OURS + BASELINES
    t0 = time.perf_counter()      # compile (or load from numba's cache) before timing anything
    for mode in ("heft", "etf"):
        for mem in (False, True):
            _listsched.schedule(sources[0].load(), Cluster.homogeneous(2, 1), mode, memory=mem)
    print(f"warm-up (numba compile or cache load): {time.perf_counter() - t0:.2f} s")
    print(f"simulated makespan in ms (seconds to place), loose memory; * marks the best of the row")
    print(f"{'graph':<34} {'ops':>7} {'K':>2} " + " ".join(f"{m:>17}" for m in methods))
    ratios: dict[int, list[float]] = {k: [] for k in ks}
    seen = set()
    for source in sources:
        if only and source.name not in only:
            continue
        g = source.load()
        if g.num_nodes > args.max_nodes:
            continue
        fp = fingerprint(g)
        if fp in seen:
            continue
        seen.add(fp)
        peak1, need = single_device_peak(g), minimum_need(g)
        for k in ks:
            cluster = bench_cluster(k, regime_capacity("loose", peak1, k, need))
            res = run_case(g, cluster)
            best = min(v[0] for v in res.values())
            cells = []
            for m in methods:
                ms, ok, secs = res[m]
                mark = "*" if ms <= best + 1e-9 else " "
                cells.append(f"{ms / 1000:9.2f}{mark}({secs:5.2f})" + ("" if ok else "!"))
            print(f"{source.name[:34]:<34} {g.num_nodes:>7} {k:>2} " + " ".join(f"{c:>17}" for c in cells), flush=True)
            mine = min(res[m][0] for m in OURS)
            theirs = min(res[m][0] for m in BASELINES)
            if mine > 0 and theirs > 0:
                ratios[k].append(mine / theirs)
    print(f"\n{'K':>3} {'cases':>5} {'ours<=base':>10} {'geomean ours/base':>18} {'best':>6} {'worst':>6}")
    for k in ks:
        r = ratios[k]
        if not r:
            continue
        wins = sum(1 for x in r if x <= 1.0 + 1e-9)
        gm = math.exp(sum(math.log(x) for x in r) / len(r))
        print(f"{k:>3} {len(r):>5} {wins:>6}/{len(r):<3} {gm:>18.3f} {min(r):>6.3f} {max(r):>6.3f}")
    if not args.no_large:
        time_large()


if __name__ == "__main__":
    main()
