"""Time the SPEC §1 simulator on synthetic training graphs of 10k, 50k and 200k nodes.

Prints one row per graph and placement: nodes, edges, transfers and seconds
for the full simulation (schedule + memory sweep) and for the schedule alone.
Run: python benchmarks/simulator_scaling.py [--sizes 10000,50000,200000] [--devices 8]
"""

from __future__ import annotations

import argparse

import numpy as np

from pardnn.cluster import Cluster
from pardnn.frontends.synthetic import transformer_training_graph
from pardnn.machine import simulate

from _timing import best_of


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10000,50000,200000")
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    K = args.devices
    cluster = Cluster.homogeneous(K)
    print(f"{'target':>8} {'nodes':>8} {'edges':>8} {'placement':>11} {'transfers':>9} "
          f"{'full (s)':>9} {'schedule (s)':>12} {'us/node':>8}")
    for n in (int(x) for x in args.sizes.split(",")):
        g = transformer_training_graph(n, seed=0)
        placements = {
            "contiguous": np.arange(g.num_nodes) * K // g.num_nodes,
            "random": np.random.default_rng(0).integers(0, K, g.num_nodes),
        }
        for label, dev in placements.items():
            s = simulate(g, cluster, dev)
            full = best_of(lambda: simulate(g, cluster, dev), args.repeat)
            sched = best_of(lambda: simulate(g, cluster, dev, memory=False), args.repeat)
            print(f"{n:>8} {g.num_nodes:>8} {g.num_edges:>8} {label:>11} {len(s.transfers):>9} "
                  f"{full:>9.2f} {sched:>12.2f} {1e6 * full / g.num_nodes:>8.1f}")


if __name__ == "__main__":
    main()
