"""Record exact placements on a fixed list of cases, and check that the code still makes them.

A safety net for behaviour-preserving refactors: ``record`` writes, for every
case, a SHA-256 of the assignment and the simulated makespan, peaks and
feasibility; ``check`` re-runs the cases and compares all of that exactly
(byte-identical assignment, identical floats). The placement time is written
for information only and never compared.

Run: python benchmarks/golden_placements.py record OUT.json
     python benchmarks/golden_placements.py check OUT.json    (exit 0 iff every case is the same)

Only the public API is used (``load_graph``, ``Cluster``, ``partition``,
``single_device_peak``, and ``load_input`` for the peer formats).

Cases, in this order, for each graph of GRAPHS (the 7 ``sample_graphs/*.json.gz``
and 3 peer graphs of the bench's ``real`` suite, read from the peer data
directory: $PARDNN_DATA, ../shared/data or /work/shared/data):

* K = 2, 4, 8 x regime loose, tight: method ``pardnn`` (default options);
* K = 4, tight: the baselines of BASELINES.

Every case calls ``partition(g, cluster, method=m, require_feasible=False,
search_capacity=False)`` on ``Cluster.homogeneous(K, memory_bytes=C)``. The
per-device capacity C is the bench's (pardnn/bench.py), computed here from
the graph alone, with P = single_device_peak(g):

* loose: C = int(2 P)
* tight: C = int(max(ceil(1.25 P / K), need)), where need is what the largest
  placement unit (a colocation group, or an ungrouped op) holds plus what the
  largest op holds, each op holding persistent + output + temp bytes:
  need = int(max_unit sum_{v in unit} s(v) + max_v (out(v) + temp(v))),
  s(v) = persistent(v) + out(v) + temp(v), summed as float64.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Callable

import numpy as np

from pardnn import Cluster, load_graph, partition, single_device_peak

REPO = Path(__file__).resolve().parent.parent
KS = (2, 4, 8)
REGIMES = ("loose", "tight")
OURS = "pardnn"
BASELINES = ("heft", "m-etf", "m-sct", "m-topo", "m-metis", "m-cpop", "single")
BASELINE_CASE = (4, "tight")
SAMPLES = ("msr_bert_l3_training", "pardnn_vgg16", "pipedream_gnmt", "pipedream_resnet50",
           "tf_lstm_4l", "tf_resnet14", "tf_transformer_4l")        # sample_graphs/NAME.json.gz
# graphs of the bench's real suite, by file under the peer data directory (pardnn_v1/vgg is left out:
# it converts to the same graph as sample pardnn_vgg16)
PEERS = {
    "msr/layer/gnmt_training": "msr/throughput-inputs/LayerGraphs/gnmt_training.json",  # 192 nodes
    "pipedream/inception_v3": "pipedream/inception_v3/graph.txt",                       # 651 nodes
    "pardnn/widedeep": "pardnn_v1/widedeep/widedeep_dot.dot",                           # 1,749 nodes
}
COMPARED = ("nodes", "capacity_bytes", "assignment_sha256", "makespan_us", "peak_bytes", "feasible", "error")


def find_data_dir() -> Path:
    for c in (os.environ.get("PARDNN_DATA"), REPO.parent / "shared" / "data", "/work/shared/data"):
        if c and (Path(c) / "README.md").exists() and (Path(c) / "msr").is_dir():
            return Path(c)
    sys.exit("golden_placements: the peer data directory is not found; set PARDNN_DATA")


def load_input(path: Path):
    try:
        from pardnn.frontends import load_input as load
    except ImportError:  # the refactor may move it
        from pardnn import load_input as load
    return load(path)


def graphs() -> list[tuple[str, Callable]]:
    out = [(f"sample/{s}", lambda s=s: load_graph(REPO / "sample_graphs" / f"{s}.json.gz")) for s in SAMPLES]
    data = find_data_dir()
    return out + [(name, lambda f=f: load_input(data / f)) for name, f in PEERS.items()]


def cases_of(graph: str) -> list[tuple[str, int, str, str]]:
    cases = [(graph, k, regime, OURS) for k in KS for regime in REGIMES]
    return cases + [(graph, *BASELINE_CASE, m) for m in BASELINES]


def minimum_need(g) -> int:
    """The largest unit's bytes plus the largest op's (see the module docstring)."""
    out = np.bincount(np.repeat(np.arange(g.num_nodes), np.diff(g.port_ptr)), weights=g.port_bytes,
                      minlength=g.num_nodes)
    op = out + g.temp_bytes
    static = g.persistent_bytes + op
    grouped = g.colocation >= 0
    group_max = np.bincount(g.colocation[grouped], weights=static[grouped]).max() if grouped.any() else 0.0
    unit_max = max(float(group_max), float(static[~grouped].max()) if (~grouped).any() else 0.0)
    return int(unit_max + float(op.max())) if g.num_nodes else 0


def capacity(regime: str, peak1: int, k: int, need: int) -> int:
    return int(2 * peak1) if regime == "loose" else int(max(math.ceil(1.25 * peak1 / k), need))


def run_case(g, k: int, regime: str, method: str, peak1: int, need: int) -> dict:
    cap = capacity(regime, peak1, k, need)
    rec = {"nodes": g.num_nodes, "capacity_bytes": cap}
    t0 = time.perf_counter()
    try:
        plan, sched = partition(g, Cluster.homogeneous(k, memory_bytes=cap), method=method,
                                require_feasible=False, search_capacity=False)
    except Exception as exc:  # recorded, so that a case that fails must keep failing the same way
        rec.update(assignment_sha256=None, makespan_us=None, peak_bytes=None, feasible=None,
                   error=f"{type(exc).__name__}: {exc}")
    else:
        a = np.ascontiguousarray(plan.assignment, dtype="<i8")
        rec.update(assignment_sha256=hashlib.sha256(a.tobytes()).hexdigest(),
                   makespan_us=repr(float(sched.makespan_us)),
                   peak_bytes=[int(b) if float(b).is_integer() else repr(float(b)) for b in sched.peak_bytes],
                   feasible=bool(sched.feasible), error=None)
    rec["place_seconds"] = round(time.perf_counter() - t0, 3)
    return rec


def run_all(only: set | None = None):
    """Yield ((graph, K, regime, method), record) for every case (those in ``only`` when given)."""
    for name, load in graphs():
        todo = [c for c in cases_of(name) if only is None or c in only]
        if not todo:
            continue
        g = load()
        peak1, need = single_device_peak(g), minimum_need(g)
        for key in todo:
            yield key, run_case(g, *key[1:], peak1, need)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def label(key) -> str:
    graph, k, regime, method = key
    return f"{graph} K={k} {regime} {method}"


def record(path: Path) -> int:
    t0 = time.perf_counter()
    cases = []
    for key, rec in run_all():
        cases.append({"graph": key[0], "k": key[1], "regime": key[2], "method": key[3], **rec})
        print(f"{label(key)}: {rec['error'] or rec['makespan_us'] + ' us'} ({rec['place_seconds']:.2f} s)",
              flush=True)
    meta = {"python": platform.python_version(), "numpy": np.__version__, "numba": _version("numba"),
            "machine": platform.machine(), "total_seconds": round(time.perf_counter() - t0, 1)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "compared": list(COMPARED), "cases": cases}, indent=1,
                               sort_keys=True) + "\n")
    print(f"recorded {len(cases)} cases in {meta['total_seconds']} s -> {path}")
    return 0


def check(path: Path) -> int:
    t0 = time.perf_counter()
    want = {(c["graph"], c["k"], c["regime"], c["method"]): c for c in json.loads(path.read_text())["cases"]}
    seen, diff = set(), 0
    for key, rec in run_all(set(want)):
        seen.add(key)
        old = want[key]
        bad = [f"{f} {old.get(f)!r} -> {rec[f]!r}" for f in COMPARED if old.get(f) != rec[f]]
        diff += bool(bad)
        print(f"{'DIFFERENT' if bad else 'same'} {label(key)}" + (": " + "; ".join(bad) if bad else "")
              + f" ({rec['place_seconds']:.2f} s)", flush=True)
    for key in (k for k in want if k not in seen):
        diff += 1
        print(f"DIFFERENT {label(key)}: no longer a case of this script")
    print(f"{len(want) - diff} of {len(want)} cases same, {diff} different ({time.perf_counter() - t0:.1f} s)")
    return 0 if diff == 0 else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["record", "check"])
    ap.add_argument("file", type=Path)
    args = ap.parse_args()
    sys.exit(record(args.file) if args.mode == "record" else check(args.file))


if __name__ == "__main__":
    main()
