"""The held-out table of issue 14: pardnn and every baseline on the frozen held-out set.

Run from the repository root (under ``nice``; the full set takes long)::

    python benchmarks/heldout/run_heldout.py                          # every graph, K = 2, 4, 8, loose + tight
    python benchmarks/heldout/run_heldout.py --max-nodes 50000        # skip the largest graphs
    python benchmarks/heldout/run_heldout.py --rows out.jsonl --resume  # keep going after an interruption
    python benchmarks/heldout/run_heldout.py --set heldout2 --rows v2.jsonl  # held-out set v2 (benchmarks/heldout2/)

Cases, capacities, cluster and scoring are `pardnn.bench`'s (``regime_capacity``,
``minimum_need``, ``bench_cluster``, ``place_and_score``), so the numbers
compare with the tuning suite's table in benchmarks/RESULTS.md. Before
anything runs, every graph is checked against SHA256SUMS (a changed graph
is not the held-out set; ``--no-check`` skips that, for experiments only).

This set is for *measuring*, never for tuning: do not choose options,
thresholds or passes by looking at these numbers (benchmarks/heldout/README.md).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from check_frozen import SETS, load_set, read_sums  # noqa: E402
from make_heldout import SUMS, sha256_file, synthetic_graph, synthetic_name  # noqa: E402,F401

from pardnn.bench import bench_cluster, minimum_need, place_and_score, regime_capacity  # noqa: E402
from pardnn.bounds import makespan_lower_bound  # noqa: E402
from pardnn.ir import load_graph, save_graph  # noqa: E402
from pardnn.machine import single_device_peak  # noqa: E402

try:
    from pardnn.methods import DEFAULT_METHOD, method_names
except ImportError:  # pragma: no cover - after a refactor the registry may live in the api
    from pardnn.api import DEFAULT_METHOD, method_names  # type: ignore


def load_frozen(digest: str, label: str, check: bool, heldout=None):
    """The graph of one SHA256SUMS line of set ``heldout`` (a `load_set` module; v1 by default), verified."""
    heldout = heldout or load_set()
    if label.startswith("synthetic:"):
        n = int(label.split("-")[-1].rstrip("k")) * 1000
        g = heldout.synthetic_graph(n)
        if check:
            with tempfile.TemporaryDirectory() as d:
                got = sha256_file(save_graph(g, Path(d) / f"{heldout.synthetic_name(n)}.json"))
    else:
        path = heldout.HERE / label
        got = sha256_file(path) if check else digest
        g = load_graph(path)
    if check and got != digest:
        raise SystemExit(f"{label}: SHA-256 {got} differs from the frozen {digest}: not the held-out set "
                         f"(see {heldout.HERE.relative_to(HERE.parents[1])}/README.md)")
    return g


def graph_name(label: str) -> str:
    return label.split(":", 1)[1] if label.startswith("synthetic:") else Path(label).name.split(".")[0]


def physical_bound(g, k: int) -> float:
    """max(compute critical path, total work / K, largest colocation unit's work), in us (speed 1 devices)."""
    w = np.asarray(g.time_us, dtype=np.float64)
    n = g.num_nodes
    indeg = np.bincount(g.edge_dst, minlength=n)
    order = np.argsort(g.edge_src, kind="stable")
    esrc, edst = g.edge_src[order], g.edge_dst[order]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(esrc, minlength=n), out=ptr[1:])
    finish = w.copy()                       # longest path ending at v, v included
    start = np.zeros(n)
    stack = list(np.flatnonzero(indeg == 0))
    indeg = indeg.copy()
    edst_l, ptr_l, w_l = edst.tolist(), ptr.tolist(), w.tolist()
    start_l = start.tolist()
    fin_l = [0.0] * n
    while stack:
        v = stack.pop()
        f = start_l[v] + w_l[v]
        fin_l[v] = f
        for i in range(ptr_l[v], ptr_l[v + 1]):
            u = edst_l[i]
            if f > start_l[u]:
                start_l[u] = f
            indeg[u] -= 1
            if indeg[u] == 0:
                stack.append(u)
    cp = max(fin_l) if n else 0.0
    unit_work = float(np.bincount(g.unit, weights=w).max()) if n else 0.0
    return max(cp, float(w.sum()) / k, unit_work)


def _score_with_options(g, cluster, effort: str | None, pipeline: str | None):
    """`place_and_score` for pardnn at a given ``--effort`` or ``--pipeline`` (the same call, with options)."""
    from pardnn.api import partition
    from pardnn.partitioner import PardnnOptions

    t0 = time.perf_counter()
    plan, s = partition(g, cluster, require_feasible=False, search_capacity=False,
                        options=PardnnOptions(effort=effort or "default", pipeline=pipeline))
    return (float(s.makespan_us), bool(s.feasible), float(np.max(s.peak_bytes / cluster.capacity)),
            time.perf_counter() - t0, "")


def run(args) -> list[dict]:
    methods = method_names() if not args.methods else args.methods.split(",")
    ours = DEFAULT_METHOD
    done: set[tuple] = set()
    rows: list[dict] = []
    out = Path(args.rows) if args.rows else None
    if out and args.resume and out.exists():
        rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
        done = {(r["graph"], r["k"], r["regime"], r["method"]) for r in rows}
    elif out:
        out.write_text("")
    heldout = load_set(args.set)
    for digest, label in read_sums(Path(args.sums) if args.sums else heldout.SUMS):
        name = graph_name(label)
        if args.only and not any(s in name for s in args.only.split(",")):
            continue
        if args.skip and any(s in name for s in args.skip.split(",")):
            print(f"{name}: skipped (--skip)", flush=True)
            continue
        t0 = time.perf_counter()
        g = load_frozen(digest, label, not args.no_check, heldout)
        if args.max_nodes and g.num_nodes > args.max_nodes:
            print(f"{name}: {g.num_nodes} ops > --max-nodes {args.max_nodes}, skipped", flush=True)
            continue
        peak1, need = single_device_peak(g), minimum_need(g)
        for k in args.k:
            bound = physical_bound(g, k)
            lower = makespan_lower_bound(g, bench_cluster(k, None)).value_us   # memory plays no part in it
            for regime in args.regimes:
                cap = regime_capacity(regime, peak1, k, need)
                cluster = bench_cluster(k, cap)
                for m in methods:
                    if (name, k, regime, m) in done:
                        continue
                    makespan, feasible, frac, seconds, err = (
                        place_and_score(g, cluster, m) if not ((args.effort or args.pipeline) and m == ours)
                        else _score_with_options(g, cluster, args.effort, args.pipeline))
                    row = {"graph": name, "nodes": g.num_nodes, "edges": g.num_edges, "k": k, "regime": regime,
                           "capacity_bytes": cap, "method": m, "ours": m == ours, "makespan_us": makespan,
                           "feasible": bool(feasible), "peak_fraction": frac, "place_seconds": seconds,
                           "bound_us": bound, "lower_bound_us": lower, "error": err[:200]}
                    rows.append(row)
                    if out:
                        with open(out, "a") as fh:
                            fh.write(json.dumps(row) + "\n")
        print(f"{name}: {g.num_nodes} ops, {len(args.k) * len(args.regimes)} cases, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    return rows


def _gm(xs):
    return float(np.exp(np.mean(np.log(xs)))) if xs else None


def tables(rows: list[dict], ours: str = DEFAULT_METHOD) -> str:
    cases: dict[tuple, list[dict]] = {}
    for r in rows:
        cases.setdefault((r["graph"], r["k"], r["regime"]), []).append(r)
    per_case = []
    for (graph, k, regime), rs in cases.items():
        mine = next((r for r in rs if r["method"] == ours), None)
        base = [r for r in rs if r["method"] != ours and r["feasible"] and r["makespan_us"] is not None]
        best = min(base, key=lambda r: (r["makespan_us"], r["method"])) if base else None
        ok = mine is not None and mine["feasible"] and mine["makespan_us"] is not None
        ratio = mine["makespan_us"] / best["makespan_us"] if ok and best else None
        to_bound = mine["makespan_us"] / mine["bound_us"] if ok and mine["bound_us"] > 0 else None
        lower = mine.get("lower_bound_us") if mine else None     # rows of earlier rounds have none
        to_lower = mine["makespan_us"] / lower if ok and lower else None
        per_case.append({"graph": graph, "nodes": rs[0]["nodes"], "k": k, "regime": regime, "ours_ok": ok,
                         "base_ok": bool(best), "ours_ms": mine["makespan_us"] / 1e3 if ok else None,
                         "best": best["method"] if best else None,
                         "best_ms": best["makespan_us"] / 1e3 if best else None, "ratio": ratio,
                         "to_bound": to_bound, "bound_ms": rs[0]["bound_us"] / 1e3, "to_lower": to_lower,
                         "lower_ms": lower / 1e3 if lower else None,
                         "ours_s": mine["place_seconds"] if mine else None})
    out = ["| regime | K | cases | ours feasible | any baseline feasible | only ours feasible | compared | "
           "ours best-or-tied | geomean ours/best | worst ours/best | geomean ours/bound | worst ours/bound | "
           "geomean ours/lower bound | worst ours/lower bound |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    groups: dict[tuple, list[dict]] = {}
    for c in per_case:
        groups.setdefault((c["regime"], str(c["k"])), []).append(c)
        groups.setdefault((c["regime"], "all"), []).append(c)
    for (regime, k), cs in sorted(groups.items(), key=lambda x: (x[0][0], x[0][1] == "all", int(x[0][1])
                                                                 if x[0][1] != "all" else 0)):
        rs = [c["ratio"] for c in cs if c["ratio"] is not None]
        bs = [c["to_bound"] for c in cs if c["to_bound"] is not None]
        ls = [c["to_lower"] for c in cs if c["to_lower"] is not None]
        wins = sum(1 for x in rs if x <= 1 + 1e-9)
        only = sum(1 for c in cs if c["ours_ok"] and not c["base_ok"])
        out.append(f"| {regime} | {k} | {len(cs)} | {sum(c['ours_ok'] for c in cs)} | "
                   f"{sum(c['base_ok'] for c in cs)} | {only} | {len(rs)} | {wins}/{len(rs)} | "
                   f"{_f(_gm(rs))} | {_f(max(rs) if rs else None)} | {_f(_gm(bs))} | "
                   f"{_f(max(bs) if bs else None)} | {_f(_gm(ls))} | {_f(max(ls) if ls else None)} |")
    out += ["", "Per case (makespan in ms; bound = max(critical path, work / K, largest colocation unit's work), "
            "the issue's; lower bound = `pardnn.bounds.makespan_lower_bound`, which also counts where the work "
            "can run):", "",
            "| graph | ops | K | regime | ours | best baseline | best ms | ours/best | bound | ours/bound | "
            "lower bound | ours/lower bound | ours s |",
            "|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in per_case:
        out.append(f"| {c['graph']} | {c['nodes']} | {c['k']} | {c['regime']} | {_f(c['ours_ms'], 2, 'x')} | "
                   f"{c['best'] or '-'} | {_f(c['best_ms'], 2)} | {_f(c['ratio'])} | {_f(c['bound_ms'], 2)} | "
                   f"{_f(c['to_bound'])} | {_f(c['lower_ms'], 2)} | {_f(c['to_lower'])} | {_f(c['ours_s'], 1)} |")
    return "\n".join(out) + "\n"


def _f(x, nd: int = 3, none: str = "-") -> str:
    return none if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4, 8])
    ap.add_argument("--regimes", type=lambda s: s.split(","), default=["loose", "tight"])
    ap.add_argument("--methods", help="comma-separated methods (default: pardnn and every baseline)")
    ap.add_argument("--only", help="comma-separated substrings: run only graphs whose name has one")
    ap.add_argument("--skip", help="comma-separated substrings: skip graphs whose name has one")
    ap.add_argument("--max-nodes", type=int, help="skip graphs with more ops")
    ap.add_argument("--rows", help="append every row to this JSON-lines file")
    ap.add_argument("--resume", action="store_true", help="with --rows: keep its rows and run only the rest")
    ap.add_argument("--table-only", action="store_true", help="with --rows: print the table of its rows, run nothing")
    ap.add_argument("--effort", choices=["fast", "default", "best"], help="pardnn's --effort (default: its default)")
    ap.add_argument("--pipeline", help="pardnn's --pipeline (on sets v1 and v2 only: they are tuning data "
                    "since set v3 was frozen; a v3 table is run with the defaults)")
    ap.add_argument("--baseline-rows", help="take the baselines' rows from this file (theirs do not change when "
                    "pardnn does); --rows then holds pardnn's")
    ap.add_argument("--set", default="heldout", choices=SETS, help="which held-out set (default: v1, heldout)")
    ap.add_argument("--sums", help="another checksum list (to try this script on graphs outside the set)")
    ap.add_argument("--no-check", action="store_true", help="do not verify the graphs against SHA256SUMS")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.table_only:
        rows = [json.loads(line) for line in Path(args.rows).read_text().splitlines() if line.strip()]
    else:
        rows = run(args)
    if args.baseline_rows:
        ours = {(r["graph"], r["k"], r["regime"]) for r in rows if r["method"] == DEFAULT_METHOD}
        rows = [r for r in rows if r["method"] == DEFAULT_METHOD] + [
            r for r in (json.loads(line) for line in Path(args.baseline_rows).read_text().splitlines() if line.strip())
            if r["method"] != DEFAULT_METHOD and (r["graph"], r["k"], r["regime"]) in ours]
    print(f"\n{len(rows)} rows; {time.perf_counter() - t0:.0f} s on {platform.node()} "
          f"({platform.processor() or platform.machine()})\n")
    print(tables(rows))


if __name__ == "__main__":
    main()
