"""The smallest memory per device at which pardnn's placement fits, with and without forwarded outputs.

Issue 15: ops that reuse an input's buffer (``forwarded_as`` edges, docs/machine-model.md) used to count a
buffer of their own. For each graph file and K, this finds by bisection (2% tolerance, `pardnn.bench`'s
`min_feasible_fraction`) the smallest per-device capacity at which ``pardnn`` (default options) returns a
feasible placement, twice:

* ``before``: the graph with every ``forwarded_as`` mark dropped (the old model: each view its own buffer);
* ``after``: the graph as the frontend wrote it.

Capacities are printed in MiB and as a fraction of each version's own single-device peak, and of the
*after* peak (what TensorFlow's allocator measures, within the fidelity table's ratio).

Run from the repository root::

    python benchmarks/memory_min.py GRAPH.json.gz [...] --devices 2,4,8
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pardnn.bench import min_feasible_fraction, minimum_need  # noqa: E402
from pardnn.ir import FORWARDED_AS, load_graph  # noqa: E402
from pardnn.machine import single_device_peak  # noqa: E402

MIB = 1 << 20


def without_forwards(g):
    """``g`` with every ``forwarded_as`` mark dropped (the other edge fields kept)."""
    if not g.edge_extra:
        return g
    extra = tuple(({k: v for k, v in x.items() if k != FORWARDED_AS} or None) if x else None for x in g.edge_extra)
    return dataclasses.replace(g, edge_extra=extra if any(extra) else ())


def smallest(g, k: int) -> tuple[float | None, int]:
    """(smallest capacity / peak, peak) of ``g`` at ``k`` devices."""
    peak = single_device_peak(g)
    lo = max(0.02, minimum_need(g) / peak) if peak else 1.0
    frac, _ = min_feasible_fraction(g, "pardnn", k, peak, lo=min(lo, 1.0), hi=1.0)
    return frac, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--devices", default="2,4,8")
    args = ap.parse_args()
    ks = [int(x) for x in args.devices.split(",")]
    print("| graph | ops | forwarded outputs | K | single-device peak MiB before | after | "
          "smallest MiB/device before | after | after / before | after / after-peak | s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in args.graphs:
        g = load_graph(path)
        old = without_forwards(g)
        n_fwd = int((g.port_forward >= 0).sum())
        name = Path(path).name.split(".")[0]
        for k in ks:
            t0 = time.perf_counter()
            fb, pb = smallest(old, k)
            fa, pa = smallest(g, k)
            sec = time.perf_counter() - t0
            mb = fb * pb / MIB if fb is not None else None
            ma = fa * pa / MIB if fa is not None else None

            def f(x, spec=".1f"):
                return "-" if x is None else format(x, spec)

            ratio = ma / mb if ma is not None and mb else None
            print(f"| {name} | {g.num_nodes} | {n_fwd} | {k} | {pb / MIB:.1f} | {pa / MIB:.1f} | {f(mb)} | "
                  f"{f(ma)} | {f(ratio, '.3f')} | {f(fa, '.3f')} | {sec:.0f} |", flush=True)


if __name__ == "__main__":
    main()
