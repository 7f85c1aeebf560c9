"""Score pardnn variants on the TUNING suite against cached baseline results.

The baselines do not change while the partitioner is tuned, so their rows are
computed once and kept in a JSONL cache (``--cache``); each run then places
only pardnn (with ``--effort`` / ``--pipeline`` / ``--refine-evals``) and
prints the summary `pardnn bench` would: per regime and K, how often ours is
best or tied, the geomean and worst of ours / the best feasible baseline, and
the time pardnn took. Cases and capacities are `pardnn.bench`'s.

This is the tuning suite only (`pardnn.bench.suite("full")`: the peer graphs,
the samples, synthetic Transformers; with ``--keras`` also the real models
of 1.5k-41k ops in benchmarks/tuning/graphs). The held-out sets (benchmarks/heldout/,
benchmarks/heldout2/) are never read here.

Run from the repository root::

    python benchmarks/tune.py --cache bench-out/baselines.jsonl --baselines-only     # fill the cache (~20 min)
    python benchmarks/tune.py --cache bench-out/baselines.jsonl --effort default --rows pardnn-default.jsonl
    python benchmarks/tune.py --cache bench-out/baselines.jsonl --rows a.jsonl --compare b.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pardnn.bench import GraphSource, bench_cluster, fingerprint, minimum_need, place_and_score, regime_capacity, suite  # noqa: E402
from pardnn.bounds import makespan_lower_bound  # noqa: E402
from pardnn.ir import load_graph  # noqa: E402
from pardnn.machine import single_device_peak  # noqa: E402
from pardnn.methods import METHODS  # noqa: E402

TIE = 1e-9


def cases(args):
    """(name, graph, K, regime, capacity) of every tuning case, duplicates (by fingerprint) dropped."""
    seen = set()
    sizes = tuple(int(x) for x in args.synthetic_sizes.split(",") if x)
    sources = [] if args.keras_only else suite("full", data_dir=Path(args.data),
                                               samples_dir=HERE.parent / "sample_graphs", synthetic_sizes=sizes)
    if args.keras or args.keras_only:      # the tuning suite's real models of 5k-41k ops (benchmarks/tuning/)
        sources += [GraphSource(f.name.split(".")[0], "real", str(f), lambda f=f: load_graph(f))
                    for f in sorted((HERE / "tuning" / "graphs").glob("*.json.gz"))]
    sources += extra_synthetic(args.extra_synthetic, args.extra_seed)
    for src in sources:
        if args.only and not any(s in src.name for s in args.only.split(",")):
            continue
        g = src.load()
        if args.max_nodes and g.num_nodes > args.max_nodes:
            continue
        fp = fingerprint(g)
        if fp in seen:
            continue
        seen.add(fp)
        peak1, need = single_device_peak(g), minimum_need(g)
        for k in (int(x) for x in args.k.split(",")):
            for regime in args.regimes.split(","):
                yield src.name, g, k, regime, regime_capacity(regime, peak1, k, need)


def extra_synthetic(sizes: str, seed: int) -> list[GraphSource]:
    """More tuning graphs of the suite's synthetic family (`transformer_training_graph`), the i-th size with
    seed ``seed + i``: one more draw of each size, so that an A/B comparison rests on more cases than the
    suite's one graph per size. (The held-out set v2's synthetic graphs are another family,
    `wide_training_graph`.)"""
    from pardnn.frontends.synthetic import transformer_training_graph

    out = []
    for i, n in enumerate(int(x) for x in sizes.split(",") if x):
        s = seed + i
        out.append(GraphSource(f"synthetic-{n}-s{s}", "synthetic", f"transformer_training_graph({n}, seed={s})",
                               lambda n=n, s=s: transformer_training_graph(n, seed=s)))
    return out


def read_rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def pardnn_options(args):
    from pardnn.partitioner import PardnnOptions

    kw = {}
    if args.effort:
        kw["effort"] = args.effort
    if args.pipeline:
        kw["pipeline"] = args.pipeline
    if args.refine_evals is not None:
        kw["refine_evals"] = args.refine_evals
    return PardnnOptions(**kw) if kw else None


def place_pardnn(g, cluster, options):
    if options is None:
        return place_and_score(g, cluster, "pardnn")
    from pardnn.api import partition

    t0 = time.perf_counter()
    plan, s = partition(g, cluster, method="pardnn", require_feasible=False, search_capacity=False, options=options)
    return float(s.makespan_us), bool(s.feasible), None, time.perf_counter() - t0, ""


def run(args) -> None:
    cache = Path(args.cache)
    cached = {(r["graph"], r["k"], r["regime"], r["method"]) for r in read_rows(cache)}
    baselines = [m for m in METHODS if m != "pardnn"]
    out = Path(args.rows) if args.rows and not args.baselines_only else None
    if out:
        out.write_text("")
    options = pardnn_options(args)
    for name, g, k, regime, cap in cases(args):
        cluster = bench_cluster(k, cap)
        for m in baselines:
            if (name, k, regime, m) in cached:
                continue
            ms, feas, _, sec, err = place_and_score(g, cluster, m)
            with cache.open("a") as f:
                f.write(json.dumps({"graph": name, "nodes": g.num_nodes, "k": k, "regime": regime, "method": m,
                                    "makespan_us": ms, "feasible": feas, "seconds": sec}) + "\n")
        if out:
            ms, feas, _, sec, err = place_pardnn(g, cluster, options)
            lower = makespan_lower_bound(g, cluster).value_us
            with out.open("a") as f:
                f.write(json.dumps({"graph": name, "nodes": g.num_nodes, "k": k, "regime": regime, "method": "pardnn",
                                    "makespan_us": ms, "feasible": feas, "seconds": sec,
                                    "lower_bound_us": lower}) + "\n")
            print(f"{name:40s} K={k} {regime:5s} {'-' if ms is None else f'{ms / 1000:.3f}'} ms "
                  f"{'ok' if feas else 'OVER'} {sec:.2f} s", flush=True)


def summarise(rows_path: Path, cache: Path) -> dict:
    base: dict = {}
    for r in read_rows(cache):
        if r["feasible"] and r["makespan_us"] is not None:
            key = (r["graph"], r["k"], r["regime"])
            if key not in base or r["makespan_us"] < base[key][0]:
                base[key] = (r["makespan_us"], r["method"])
    out: dict = {}
    for r in read_rows(rows_path):
        key = (r["graph"], r["k"], r["regime"])
        for group in ((r["regime"], r["k"]), (r["regime"], "all")):
            s = out.setdefault(group, {"cases": 0, "compared": 0, "wins": 0, "logs": [], "worst": 0.0,
                                       "only_ours": 0, "missed": 0, "seconds": 0.0, "max_s": 0.0, "lower": []})
            s["cases"] += 1
            if r["feasible"] and r.get("lower_bound_us"):      # rows of earlier rounds have no lower bound
                s["lower"].append(math.log(r["makespan_us"] / r["lower_bound_us"]))
            s["seconds"] += r["seconds"]
            s["max_s"] = max(s["max_s"], r["seconds"])
            b = base.get(key)
            if b is None:
                s["only_ours"] += bool(r["feasible"])
                continue
            if not r["feasible"]:
                s["missed"] += 1
                continue
            ratio = r["makespan_us"] / b[0]
            s["compared"] += 1
            s["wins"] += ratio <= 1 + TIE
            s["logs"].append(math.log(ratio))
            s["worst"] = max(s["worst"], ratio)
    return out


def print_summary(out: dict, label: str) -> None:
    print(f"\n{label}")
    print("| regime | K | cases | compared | ours <= best | geomean | worst | only ours | ours missed | "
          "pardnn s (sum) | max s | ours / lower bound |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (regime, k), s in sorted(out.items(), key=lambda x: (x[0][0], str(x[0][1]))):
        gm = math.exp(sum(s["logs"]) / len(s["logs"])) if s["logs"] else float("nan")
        print(f"| {regime} | {k} | {s['cases']} | {s['compared']} | {s['wins']}/{s['compared']} | {gm:.3f} | "
              f"{s['worst']:.3f} | {s['only_ours']} | {s['missed']} | {s['seconds']:.1f} | {s['max_s']:.2f} | "
              f"{math.exp(sum(s['lower']) / len(s['lower'])) if s['lower'] else float('nan'):.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default="bench-out/baselines.jsonl")
    ap.add_argument("--rows", help="write pardnn's rows here (JSONL)")
    ap.add_argument("--compare", help="a second rows file to summarise beside --rows")
    ap.add_argument("--baselines-only", action="store_true")
    ap.add_argument("--summary-only", action="store_true")
    ap.add_argument("--data", default=str(HERE.parents[1] / "shared" / "data"))
    ap.add_argument("--k", default="2,4,8")
    ap.add_argument("--regimes", default="loose,tight")
    ap.add_argument("--synthetic-sizes", default="10000,50000,200000")
    ap.add_argument("--max-nodes", type=int)
    ap.add_argument("--extra-synthetic", default="",
                    help="sizes of more synthetic tuning graphs, one per size (e.g. 1200,1800,2500,3000,3500,4000)")
    ap.add_argument("--extra-seed", type=int, default=101, help="the first extra graph's seed (then +1 each)")
    ap.add_argument("--keras", action="store_true",
                    help="add the real models of benchmarks/tuning/graphs (1.5k-41k ops; make_tuning.py builds them)")
    ap.add_argument("--keras-only", action="store_true", help="only those models")
    ap.add_argument("--only")
    ap.add_argument("--effort")
    ap.add_argument("--pipeline")
    ap.add_argument("--refine-evals", type=int)
    args = ap.parse_args()
    Path(args.cache).parent.mkdir(parents=True, exist_ok=True)
    if not args.summary_only:
        run(args)
    for path in filter(None, (args.rows, args.compare)):
        print_summary(summarise(Path(path), Path(args.cache)), path)


if __name__ == "__main__":
    main()
