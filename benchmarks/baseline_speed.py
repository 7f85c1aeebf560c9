"""Time every baseline placer on synthetic training graphs (placement time only, not simulation).

Prints one row per placer and one column per graph size: the seconds
``place(g, cluster)`` took (best of ``--repeat``). The cluster has ``--devices``
identical devices with the memory regime ``--regime``: ``tight`` (1.25 x the
single-device peak / K, the bench's hardest case, where the m- variants do
the most bookkeeping), ``loose`` (2 x the peak) or ``none`` (unlimited).

Run: python benchmarks/baseline_speed.py [--sizes 10000,50000,200000] [--devices 8] [--regime tight]
"""

from __future__ import annotations

import argparse

from pardnn.baselines import PLACERS
from pardnn.cluster import Cluster
from pardnn.frontends.synthetic import transformer_training_graph
from pardnn.machine import single_device_peak

from _timing import best_of


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,50000,200000")
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--regime", choices=["tight", "loose", "none"], default="tight")
    ap.add_argument("--placers", default=",".join(PLACERS), help="comma-separated placer names")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    K = args.devices
    names = args.placers.split(",")
    sizes = [int(x) for x in args.sizes.split(",")]
    results: dict[str, list[float]] = {n: [] for n in names}
    header = []
    for n in sizes:
        g = transformer_training_graph(n, seed=0)
        header.append(f"{g.num_nodes:,} ops")
        if args.regime == "none":
            cluster = Cluster.homogeneous(K)
        else:
            factor = 1.25 / K if args.regime == "tight" else 2.0
            cluster = Cluster.homogeneous(K, int(factor * single_device_peak(g)))
        for name in names:
            results[name].append(best_of(lambda: PLACERS[name](g, cluster), args.repeat))
    print(f"placement time in seconds, K={K}, memory regime {args.regime!r}")
    print(f"{'placer':<10}" + "".join(f"{h:>14}" for h in header))
    for name in names:
        print(f"{name:<10}" + "".join(f"{t:>14.2f}" for t in results[name]))


if __name__ == "__main__":
    main()
