"""Time the pardnn pipeline, and its peak memory, on synthetic training graphs of growing size and K.

Every (size, K, regime) runs in a fresh process, so the peak RSS printed is
that run's own (``os.wait4``'s ``ru_maxrss`` of the child). `loose` is 2 x
the single-device peak per device (step 1 decides, step 2 has nothing to
do), `tight` is 1.25 x the peak / K (SPEC bench regimes), so both steps run.

Two modes:

* default: the child generates the graph in memory and times
  `pardnn.partitioner.run` pass by pass;
* ``--cli``: the graph is written once as ``.json.gz`` and the child is
  ``pardnn partition FILE --devices K --memory CAP -o OUT``, the whole command
  a user runs (start-up, reading, steps 1 and 2, the final check, writing).

Run from the repository root::

    python benchmarks/partitioner_scaling.py --sizes 10000,50000,200000 --devices 8
    python benchmarks/partitioner_scaling.py --sizes 200000 --devices 2,4,8,16 --regimes loose,tight
    python benchmarks/partitioner_scaling.py --cli --sizes 10000,50000,200000,500000 --devices 8 --effort default
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PASSES = ["slice", "map", "seed", "refine", "memory", "refine-mem", "best"]

CHILD = r"""
import json, resource, sys, time
from pardnn import partitioner
from pardnn.bench import bench_cluster, minimum_need, regime_capacity
from pardnn.frontends.synthetic import transformer_training_graph
from pardnn.machine import simulate, single_device_peak

n, regime, k, effort = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
g = transformer_training_graph(n, seed=0)
cluster = bench_cluster(k, regime_capacity(regime, single_device_peak(g), k, minimum_need(g)))
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
plan, state, timings = partitioner.run(g, cluster, partitioner.PardnnOptions(effort=effort))
seconds = time.perf_counter() - t0
s = simulate(g, cluster, plan)
print(json.dumps({"nodes": g.num_nodes, "edges": g.num_edges, "seconds": seconds, "rss_graph_mb": rss0,
                  "passes": {t.name: t.seconds for t in timings}, "makespan_ms": s.makespan_us / 1000,
                  "feasible": bool(s.feasible)}))
"""

WRITE = r"""
import sys
from pardnn.bench import minimum_need, regime_capacity
from pardnn.frontends.synthetic import transformer_training_graph
from pardnn.ir import save_graph
from pardnn.machine import single_device_peak
n, path = int(sys.argv[1]), sys.argv[2]
g = transformer_training_graph(n, seed=0)
save_graph(g, path)
peak, need = single_device_peak(g), minimum_need(g)
print(g.num_nodes, g.num_edges, peak, need)
"""


def run_child(cmd: list[str]) -> tuple[str, float, float, int]:
    """(stdout, wall seconds, peak RSS in MB, exit code) of one child process."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, text=True)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if p.returncode not in (0, 4):     # 4: the plan does not fit (tight regime); still a timing
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}")
    return text, wall, usage.ru_maxrss / 1024, p.returncode


def in_process(args) -> None:
    print("| regime | K | nodes | edges | " + " | ".join(PASSES) + " | total s | makespan ms | feasible | "
          "graph RSS MB | peak RSS MB |")
    print("|---|---:|---:|---:|" + "---:|" * len(PASSES) + "---:|---:|---|---:|---:|")
    for regime in args.regimes.split(","):
        for n in (int(x) for x in args.sizes.split(",")):
            for k in (int(x) for x in args.devices.split(",")):
                out, _, rss, _ = run_child([sys.executable, "-c", CHILD, str(n), regime, str(k), args.effort])
                r = json.loads(out.strip().splitlines()[-1])
                p = r["passes"]
                print(f"| {regime} | {k} | {r['nodes']:,} | {r['edges']:,} | "
                      + " | ".join(f"{p[x]:.2f}" if x in p else "-" for x in PASSES)
                      + f" | {r['seconds']:.2f} | {r['makespan_ms']:.1f} | {'yes' if r['feasible'] else 'NO'}"
                      f" | {r['rss_graph_mb']:.0f} | {rss:.0f} |", flush=True)


def cli(args) -> None:
    pardnn = str(Path(sys.executable).with_name("pardnn"))
    print("| regime | K | nodes | edges | file MB | pardnn partition s | peak RSS MB | exit |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        for n in (int(x) for x in args.sizes.split(",")):
            path = Path(d) / f"synthetic-{n}.json.gz"
            V, E, peak, need = map(int, subprocess.run([sys.executable, "-c", WRITE, str(n), str(path)],
                                                       capture_output=True, text=True, check=True).stdout.split())
            for regime in args.regimes.split(","):
                for k in (int(x) for x in args.devices.split(",")):
                    cap = 2 * peak if regime == "loose" else max(-(-5 * peak // (4 * k)), need)
                    cmd = [pardnn, "partition", str(path), "--devices", str(k), "--memory", str(cap),
                           "--bandwidth", "12GB/s", "--latency", "25us", "--effort", args.effort,
                           "--allow-infeasible", "--no-capacity-search", "-o", str(Path(d) / "out.json")]
                    _, wall, rss, code = run_child(cmd)
                    print(f"| {regime} | {k} | {V:,} | {E:,} | {path.stat().st_size / 2**20:.1f} | {wall:.2f} | "
                          f"{rss:.0f} | {code} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,50000,200000")
    ap.add_argument("--devices", default="8", help="comma list of K")
    ap.add_argument("--regimes", default="loose,tight")
    ap.add_argument("--effort", default="default", choices=["fast", "default", "best"])
    ap.add_argument("--cli", action="store_true", help="time the whole `pardnn partition` command on a file")
    args = ap.parse_args()
    (cli if args.cli else in_process)(args)


if __name__ == "__main__":
    main()
