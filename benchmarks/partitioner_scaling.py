"""Time the pardnn pipeline on synthetic training graphs of growing size, pass by pass.

Each (size, regime) runs in a fresh process, so the peak RSS printed is that
run's own. K = 8 identical devices; `loose` is 2 x the single-device peak per
device (step 1 decides, step 2 has nothing to do), `tight` is 1.25 x the
peak / K (SPEC bench regimes), so both steps run.

Run: python benchmarks/partitioner_scaling.py [--sizes 10000,50000,200000] [--devices 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
from pardnn import partitioner
from pardnn.bench import bench_cluster, minimum_need, regime_capacity
from pardnn.frontends.synthetic import transformer_training_graph
from pardnn.machine import simulate, single_device_peak

n, regime, k = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
g = transformer_training_graph(n, seed=0)
cluster = bench_cluster(k, regime_capacity(regime, single_device_peak(g), k, minimum_need(g)))
t0 = time.perf_counter()
plan, state, timings = partitioner.run(g, cluster)
seconds = time.perf_counter() - t0
s = simulate(g, cluster, plan)
print(json.dumps({"nodes": g.num_nodes, "edges": g.num_edges, "seconds": seconds,
                  "passes": {t.name: t.seconds for t in timings}, "makespan_ms": s.makespan_us / 1000,
                  "feasible": bool(s.feasible), "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,50000,200000")
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--regimes", default="loose,tight")
    args = ap.parse_args()
    passes = ["slice", "map", "refine", "memory", "refine-mem"]
    print("| regime | nodes | edges | " + " | ".join(passes) + " | total s | step 1 s | makespan ms | feasible | "
          "peak RSS MB |")
    print("|---|---:|---:|" + "---:|" * len(passes) + "---:|---:|---:|---|---:|")
    for regime in args.regimes.split(","):
        for n in (int(x) for x in args.sizes.split(",")):
            out = subprocess.run([sys.executable, "-c", CHILD, str(n), regime, str(args.devices)],
                                 capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            p = r["passes"]
            step1 = sum(p.get(x, 0.0) for x in ("slice", "map", "refine"))
            print(f"| {regime} | {r['nodes']:,} | {r['edges']:,} | "
                  + " | ".join(f"{p.get(x, 0.0):.2f}" for x in passes)
                  + f" | {r['seconds']:.2f} | {step1:.2f} | {r['makespan_ms']:.1f} | {'yes' if r['feasible'] else 'NO'}"
                  f" | {r['rss_mb']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
