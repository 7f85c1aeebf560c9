"""Placement time and peak RSS against the number of devices, for small graphs on many devices.

A new user's trial found a one-op graph took 35 s on 1,024 devices and did not finish on 4,096: each
trial simulation sized its link state K x K, refinement tried every device, and each list scheduler's
data-ready time read all K links into a device. This prints, per graph and K, the whole `pardnn
partition` command (a fresh process each: its wall time, its peak RSS from ``os.wait4``, the predicted
step). Graphs: one op; a 20-op fan-out and fan-in; the VGG-16 sample (687 ops). Run from the repository
root::

    python benchmarks/many_devices.py                     # K = 8, 64, 256, 1024, 4096
    python benchmarks/many_devices.py --devices 64,1024 --timeout 120
    python benchmarks/many_devices.py --twins --devices 256,1024   # Cluster.twins alone, with per-link entries

The command is ``python -c "from pardnn.cli import main; main()"``, run in the current directory, so the
directory it runs in picks the code: for a before/after pair, run this script (from this checkout) in a
checkout of the older commit, e.g. ``cd ../old && python ../pardnn/benchmarks/many_devices.py``. The first
run after a checkout's code changed includes numba's compile (20-30 s).
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

ROOT = Path(__file__).resolve().parent.parent


def graphs(d: Path) -> list[tuple[str, Path]]:
    one = {"format": "pardnn.graph", "version": 1, "name": "one-op",
           "nodes": [{"name": "a", "time_us": 10, "output_bytes": [100]}], "edges": []}
    fan = {"format": "pardnn.graph", "version": 1, "name": "fan-20",
           "nodes": [{"name": f"n{i}", "time_us": 10 + i, "output_bytes": [1000]} for i in range(20)],
           "edges": [{"src": "n0", "dst": f"n{i}"} for i in range(1, 19)]
           + [{"src": f"n{i}", "dst": "n19"} for i in range(1, 19)]}
    out = []
    for doc in (one, fan):
        p = d / f"{doc['name']}.json"
        p.write_text(json.dumps(doc))
        out.append((doc["name"], p))
    out.append(("vgg16 (687 ops)", ROOT / "sample_graphs" / "pardnn_vgg16.json.gz"))
    return out


def run(cmd: list[str], timeout: float) -> tuple[str, float, float, int | None]:
    """(stdout, wall seconds, peak RSS in MB, exit code; None when stopped at ``timeout``)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, text=True)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                p.kill()
                _, status, usage = os.wait4(p.pid, 0)
                return "", time.perf_counter() - t0, usage.ru_maxrss / 1024, None
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        out.seek(0)
        return out.read(), wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def twins_rows(ks: list[int]) -> None:
    """Seconds `Cluster.twins` takes (in this process) on clusters with per-link entries, where each pair
    of devices must be checked: a ring (no two devices alike) and nodes of 8 (a class per node)."""
    from dataclasses import replace

    from pardnn.cluster import Cluster, Link

    print("| cluster | K | classes | Cluster.twins s |")
    print("|---|---:|---:|---:|")
    for name, pick in (("ring", lambda a, b, K: Link(5.0, 100.0) if (a - b) % K in (1, K - 1) else None),
                       ("nodes of 8", lambda a, b, K: Link(1.0, 100000.0) if a // 8 == b // 8 else None)):
        for k in ks:
            c = replace(Cluster.homogeneous(k), links=tuple(tuple(pick(a, b, k) for b in range(k)) for a in range(k)))
            c.latency, c.bandwidth          # the matrices are built before the clock starts
            t0 = time.perf_counter()
            classes = len(set(c.twins.tolist()))
            print(f"| {name} | {k} | {classes} | {time.perf_counter() - t0:.2f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="8,64,256,1024,4096")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before a run is stopped")
    ap.add_argument("--twins", action="store_true", help="time Cluster.twins alone (ring, nodes of 8)")
    args = ap.parse_args()
    if args.twins:
        twins_rows([int(x) for x in args.devices.split(",")])
        return
    print("| graph | K | pardnn partition s | peak RSS MB | predicted step ms |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for name, path in graphs(d):
            for k in (int(x) for x in args.devices.split(",")):
                cmd = [sys.executable, "-c", "from pardnn.cli import main; main()", "partition", str(path),
                       "--devices", str(k), "--json", "-o", str(d / "out.json")]
                text, wall, rss, code = run(cmd, args.timeout)
                if code is None:
                    print(f"| {name} | {k} | > {args.timeout:.0f} (stopped) | {rss:.0f} | - |", flush=True)
                    continue
                if code != 0:
                    raise SystemExit(f"{' '.join(cmd)} exited {code}")
                step = json.loads(text)["makespan_us"] / 1e3
                print(f"| {name} | {k} | {wall:.2f} | {rss:.0f} | {step:.3f} |", flush=True)


if __name__ == "__main__":
    main()
