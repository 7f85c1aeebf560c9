"""Placement time and step time at each ``--effort`` on the shipped samples (graphs of up to ~5k ops).

One process; every compiled kernel is warmed on the first graph before anything is timed. Memory is
unlimited (the loose regime's step 1 decides), K = 2, 4, 8 on `pardnn.bench.bench_cluster`. The time is
`pardnn.partitioner.run` (steps 1 and 2; no reading, no start-up): what ``placement time`` reports.

Run from the repository root::

    python benchmarks/effort_time.py [--k 2,4,8] [--efforts fast,default,best]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pardnn import partitioner  # noqa: E402
from pardnn.bench import bench_cluster, minimum_need, regime_capacity  # noqa: E402
from pardnn.ir import load_graph  # noqa: E402
from pardnn.machine import single_device_peak  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", default="2,4,8")
    ap.add_argument("--efforts", default="fast,default,best")
    args = ap.parse_args()
    efforts = args.efforts.split(",")
    graphs = [load_graph(f) for f in sorted((HERE.parent / "sample_graphs").glob("*.json.gz"))]
    graphs.sort(key=lambda g: g.num_nodes)
    partitioner.run(graphs[0], bench_cluster(2, 10**15), partitioner.PardnnOptions(effort="fast"))   # warm-up
    print("| graph | ops | K | " + " | ".join(f"{e} s | {e} ms" for e in efforts) + " |")
    print("|---|---:|---:|" + "---:|---:|" * len(efforts))
    worst = {e: 0.0 for e in efforts}
    for g in graphs:
        cap = regime_capacity("loose", single_device_peak(g), 2, minimum_need(g))
        for k in (int(x) for x in args.k.split(",")):
            cells = []
            for e in efforts:
                t0 = time.perf_counter()
                plan, state, _ = partitioner.run(g, bench_cluster(k, cap), partitioner.PardnnOptions(effort=e))
                dt = time.perf_counter() - t0
                worst[e] = max(worst[e], dt)
                cells.append(f"{dt:.2f} | {state.makespan_us / 1000:.3f}")
            print(f"| {g.name} | {g.num_nodes:,} | {k} | " + " | ".join(cells) + " |", flush=True)
    print("\nworst placement time: " + ", ".join(f"{e} {worst[e]:.2f} s" for e in efforts))


if __name__ == "__main__":
    main()
