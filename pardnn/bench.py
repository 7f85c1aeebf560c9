"""`pardnn bench`: every placer on a suite of graphs, scored by the one machine model.

A *case* is a graph, a device count K and a memory regime:

* ``loose``: each device holds twice the graph's single-device peak (SPEC
  §1.1 rule 10), so memory never binds and the question is step time;
* ``tight``: each device holds 1.25 x the single-device peak / K, but at
  least what the largest colocation group plus the largest op need (so a
  feasible placement can exist).

Every placer places the graph; the simulator scores the placement (makespan,
feasibility, peak memory against capacity); the placement time is wall time.
Per case the ratio of ours (the default method) to the best *feasible*
baseline is reported. Separately, the memory-scaling figure: for each method,
the smallest capacity (as a fraction of the single-device peak, found by
bisection) at which it still returns a feasible placement.
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from .api import partition
from .baselines.mtopo import static_memory
from .cluster import Cluster
from .errors import InfeasibleError, InputError, PardnnError
from .fileio import atomic_write, write_json
from .ir import OpGraph, load_graph
from .machine import single_device_peak
from .progress import Progress

log = logging.getLogger("pardnn.bench")

REGIMES = ("loose", "tight")


@dataclass(frozen=True)
class GraphSource:
    """A graph of the suite, loaded on demand."""

    name: str
    kind: str                      # "real", "sample" or "synthetic"
    origin: str                    # the file it comes from, or the generator call
    load: Callable[[], OpGraph] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Row:
    """One placer on one case."""

    graph: str
    kind: str
    nodes: int
    k: int
    regime: str
    capacity_bytes: int
    method: str
    makespan_us: float | None
    feasible: bool
    peak_fraction: float | None     # worst device's peak / its capacity
    place_seconds: float | None
    error: str = ""


@dataclass(frozen=True)
class ScalingRow:
    graph: str
    k: int
    method: str
    min_fraction: float | None     # smallest feasible capacity / single-device peak (None: not even at 2x)
    makespan_us: float | None      # the step time at that capacity


# ---------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------

def _real_files(data: Path) -> list[Path]:
    files = sorted(data.glob("msr/*-inputs/*/*.json"))
    files += sorted(data.glob("pipedream/*/graph*.txt"))
    files += [data / "pardnn_v1/vgg/vgg_dot.dot", data / "pardnn_v1/resnet/resnet.dot",
              data / "pardnn_v1/widedeep/widedeep_dot.dot",
              data / "pardnn_v1/inception/sub_20_1799/20_1799.dot.gz"]
    # pardnn_v1/nmt has no durations or sizes, and pardnn/ holds node lists without graphs: neither converts
    return [f for f in files if f.exists()]


def _real_name(path: Path, data: Path) -> str:
    rel = path.relative_to(data).as_posix()
    for a, b in (("msr/throughput-inputs/", "msr/"), ("msr/latency-inputs/", "msr-latency/"),
                 ("OperatorGraphs/", "op/"), ("LayerGraphs/", "layer/"), ("/graph.txt", ""),
                 ("/graph_copy.txt", "-copy"), (".json", ""), (".dot.gz", ""), (".dot", ""), ("pardnn_v1/", "pardnn/")):
        rel = rel.replace(a, b)
    return rel


def suite(name: str, *, data_dir: Path | None = None, samples_dir: Path | None = None,
          synthetic_sizes: Sequence[int] = (10_000, 50_000, 200_000)) -> list[GraphSource]:
    """The graphs of a named suite: ``quick``, ``real``, ``samples``, ``synthetic`` or ``full``."""
    from .frontends import load_input
    from .frontends.synthetic import transformer_training_graph

    out: list[GraphSource] = []
    if name in ("real", "full"):
        if data_dir is None or not data_dir.is_dir():
            raise InputError(f"the {name!r} suite needs the peer data directory (--data); {data_dir} not found")
        for f in _real_files(data_dir):
            out.append(GraphSource(_real_name(f, data_dir), "real", str(f), lambda f=f: load_input(f)))
    if name in ("samples", "quick", "full") and samples_dir is not None:
        for f in sorted(samples_dir.glob("*.json.gz")):
            out.append(GraphSource(f.name.split(".")[0], "sample", str(f), lambda f=f: load_graph(f)))
    sizes = (10_000,) if name == "quick" else synthetic_sizes if name in ("synthetic", "full") else ()
    for n in sizes:
        out.append(GraphSource(f"synthetic-{n // 1000}k", "synthetic", f"transformer_training_graph({n}, seed=0)",
                               lambda n=n: transformer_training_graph(n, seed=0)))
    if not out:
        raise PardnnError(f"unknown or empty suite {name!r}; choose quick, real, samples, synthetic or full")
    return out


def fingerprint(g: OpGraph) -> str:
    """A hash of the graph's structure and costs (names ignored), to drop duplicates."""
    h = hashlib.sha1()
    for a in (g.time_us, g.temp_bytes, g.persistent_bytes, g.port_ptr, g.port_bytes, g.edge_src, g.edge_dst,
              g.edge_bytes, g.edge_control, g.colocation):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------
# Capacities
# ---------------------------------------------------------------------------

def minimum_need(g: OpGraph) -> int:
    """What the largest colocation group plus the largest op need (static estimate)."""
    mem = static_memory(g)
    unit_need = float(np.bincount(g.unit, weights=mem).max()) if g.num_nodes else 0.0
    op_need = float((g.alloc_bytes_total + g.temp_bytes).max()) if g.num_nodes else 0.0
    return int(unit_need + op_need)


def regime_capacity(regime: str, peak1: int, k: int, need: int) -> int:
    if regime == "loose":
        return int(2 * peak1)
    if regime == "tight":
        return int(max(math.ceil(1.25 * peak1 / k), need))
    raise ValueError(f"unknown regime {regime!r}")


def bench_cluster(k: int, capacity: int) -> Cluster:
    """The benchmark machine: K equal devices, 25 us latency, 12 GB/s links (SPEC §3 example)."""
    return Cluster.homogeneous(k, memory_bytes=capacity)


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------

def place_and_score(g: OpGraph, cluster: Cluster, method: str) -> tuple[float | None, bool, float | None, float,
                                                                         str]:
    """(makespan, feasible, worst peak/capacity, seconds, error) of one method on one cluster.

    The placement comes from `pardnn.api.partition`, as on the command line (default options, no capacity
    search); ``seconds`` is that call's time (the placement and its final simulation).
    """
    timings: list = []
    t0 = time.perf_counter()
    try:
        plan, s = partition(g, cluster, method=method, require_feasible=False, search_capacity=False,
                            timings=timings)
    except InfeasibleError as exc:
        return None, False, None, time.perf_counter() - t0, f"infeasible: {exc}"
    except PardnnError as exc:
        return None, False, None, time.perf_counter() - t0, str(exc)
    seconds = time.perf_counter() - t0
    frac = float(np.max(s.peak_bytes / cluster.capacity))
    return float(s.makespan_us), s.feasible, frac, seconds, ""


def run_case(g: OpGraph, source: GraphSource, k: int, regime: str, capacity: int,
             methods: Iterable[str]) -> list[Row]:
    cluster = bench_cluster(k, capacity)
    rows = []
    for m in methods:
        makespan, feasible, frac, seconds, err = place_and_score(g, cluster, m)
        rows.append(Row(source.name, source.kind, g.num_nodes, k, regime, capacity, m, makespan, feasible, frac,
                        seconds, err))
    return rows


def min_feasible_fraction(g: OpGraph, method: str, k: int, peak1: int, *, lo: float, hi: float = 2.0,
                          rel_tol: float = 0.02) -> tuple[float | None, float | None]:
    """Smallest capacity / peak1 in [lo, hi] at which ``method`` is feasible, by bisection.

    Feasibility of a heuristic need not be monotone in the capacity; bisection
    then finds one boundary, which is what a user searching the same way finds.
    """
    def feasible(frac: float) -> tuple[bool, float | None]:
        cap = int(math.ceil(frac * peak1))
        makespan, ok, _, _, _ = place_and_score(g, bench_cluster(k, cap), method)
        return ok, makespan

    ok, makespan = feasible(hi)
    if not ok:
        return None, None
    best = (hi, makespan)
    ok_lo, ms_lo = feasible(lo)
    if ok_lo:
        return lo, ms_lo
    while hi - lo > rel_tol * hi:
        mid = (lo + hi) / 2
        ok, makespan = feasible(mid)
        if ok:
            hi, best = mid, (mid, makespan)
        else:
            lo = mid
    return best


@dataclass
class BenchResult:
    rows: list[Row]
    scaling: list[ScalingRow]
    ours: str
    graphs: list[dict]

    # ---- summaries -----------------------------------------------------------
    def cases(self) -> dict[tuple, list[Row]]:
        out: dict[tuple, list[Row]] = {}
        for r in self.rows:
            out.setdefault((r.graph, r.k, r.regime), []).append(r)
        return out

    def ratios(self) -> dict[tuple, tuple[float | None, str | None]]:
        """Per case: ours / best feasible baseline makespan (None when either is missing), and that baseline."""
        out = {}
        for key, rows in self.cases().items():
            mine = next((r for r in rows if r.method == self.ours), None)
            base = [r for r in rows if r.method != self.ours and r.feasible and r.makespan_us is not None]
            if not base:
                out[key] = (None, None)
                continue
            best = min(base, key=lambda r: (r.makespan_us, r.method))
            if mine is None or not mine.feasible or mine.makespan_us is None:
                out[key] = (None, best.method)
                continue
            out[key] = (mine.makespan_us / best.makespan_us, best.method)
        return out

    def summary(self) -> list[dict]:
        """Per regime and K: cases, ours feasible, baselines feasible, wins (ours <= best), geomean ratio."""
        ratios = self.ratios()
        groups: dict[tuple, list] = {}
        for (graph, k, regime), rows in self.cases().items():
            groups.setdefault((regime, k), []).append(((graph, k, regime), rows))
            groups.setdefault((regime, "all"), []).append(((graph, k, regime), rows))
        out = []
        for (regime, k), items in sorted(groups.items(), key=lambda x: (x[0][0], str(x[0][1]))):
            rs = [ratios[key][0] for key, _ in items if ratios[key][0] is not None]
            ours_ok = sum(1 for _, rows in items if any(r.method == self.ours and r.feasible for r in rows))
            base_ok = sum(1 for _, rows in items if any(r.method != self.ours and r.feasible for r in rows))
            only_ours = sum(1 for _, rows in items
                            if any(r.method == self.ours and r.feasible for r in rows)
                            and not any(r.method != self.ours and r.feasible for r in rows))
            missed = sum(1 for _, rows in items
                         if not any(r.method == self.ours and r.feasible for r in rows)
                         and any(r.method != self.ours and r.feasible for r in rows))
            out.append({
                "regime": regime, "k": k, "cases": len(items), "ours_feasible": ours_ok,
                "baseline_feasible": base_ok, "only_ours_feasible": only_ours, "ours_missed": missed,
                "compared": len(rs), "wins": sum(1 for x in rs if x <= 1.0 + 1e-9),
                "win_rate": (sum(1 for x in rs if x <= 1.0 + 1e-9) / len(rs)) if rs else None,
                "geomean_ratio": float(np.exp(np.mean(np.log(rs)))) if rs else None,
                "worst_ratio": max(rs) if rs else None,
            })
        return out

    def best_baseline_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, (ratio, best) in self.ratios().items():
            if best:
                counts[best] = counts.get(best, 0) + 1
        return dict(sorted(counts.items(), key=lambda x: -x[1]))

    def method_seconds(self) -> dict[str, dict[str, float]]:
        """Placement seconds per method on each synthetic graph (max over its cases)."""
        out: dict[str, dict[str, float]] = {}
        for r in self.rows:
            if r.kind == "synthetic" and r.place_seconds is not None:
                d = out.setdefault(r.method, {})
                d[r.graph] = max(d.get(r.graph, 0.0), r.place_seconds)
        return out


def run_bench(sources: Sequence[GraphSource], *, methods: Sequence[str], ks: Sequence[int] = (2, 4, 8),
              regimes: Sequence[str] = REGIMES, ours: str, scaling: bool = True, scaling_max_nodes: int = 20_000,
              max_nodes: int | None = None, scaling_graphs: Sequence[str] | None = None,
              progress: Progress | None = None) -> BenchResult:
    """Every method on every source, K and regime; ``scaling`` adds the capacity bisection on graphs up to
    ``scaling_max_nodes`` (only those named in ``scaling_graphs`` when given)."""
    progress = progress or Progress.off()
    rows: list[Row] = []
    scal: list[ScalingRow] = []
    graphs: list[dict] = []
    seen: dict[str, str] = {}
    for source in progress.iterate(sources, desc="graphs"):
        t0 = time.perf_counter()
        g = source.load()
        if max_nodes is not None and g.num_nodes > max_nodes:
            continue
        fp = fingerprint(g)
        if fp in seen:
            log.info("%s: same graph as %s, skipped", source.name, seen[fp])
            continue
        seen[fp] = source.name
        peak1 = single_device_peak(g)
        need = minimum_need(g)
        graphs.append({"graph": source.name, "kind": source.kind, "origin": source.origin, "nodes": g.num_nodes,
                       "edges": g.num_edges, "single_device_peak_bytes": peak1, "minimum_need_bytes": need,
                       "total_time_us": float(g.time_us.sum())})
        for k in ks:
            for regime in regimes:
                rows.extend(run_case(g, source, k, regime, regime_capacity(regime, peak1, k, need), methods))
            if scaling and g.num_nodes <= scaling_max_nodes and (scaling_graphs is None
                                                                 or source.name in scaling_graphs):
                lo = max(need / peak1, 1.0 / k) if peak1 else 1.0 / k
                for m in methods:
                    frac, ms = min_feasible_fraction(g, m, k, peak1, lo=min(lo, 2.0))
                    scal.append(ScalingRow(source.name, k, m, frac, ms))
        log.info("bench %s (%d ops): %d cases in %.2f s", source.name, g.num_nodes, len(ks) * len(regimes),
                 time.perf_counter() - t0)
    return BenchResult(rows, scal, ours, graphs)


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------

def _fmt_ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f}"


def case_tables(result: BenchResult) -> str:
    """One small table per case (the `pardnn bench` stdout)."""
    ratios = result.ratios()
    out = io.StringIO()
    for (graph, k, regime), rows in result.cases().items():
        r0 = rows[0]
        ratio, best = ratios[(graph, k, regime)]
        tail = f"ours/best = {ratio:.3f} (best baseline {best})" if ratio is not None else (
            f"best baseline {best}; ours infeasible" if best else "no feasible baseline")
        out.write(f"\n{graph} ({r0.nodes:,} ops)  K={k}  {regime}  capacity {r0.capacity_bytes / 2**20:.1f} MiB  "
                  f"{tail}\n")
        out.write(f"  {'method':<10} {'makespan ms':>12} {'feasible':>8} {'peak/cap':>9} {'place s':>8}\n")
        for r in sorted(rows, key=lambda r: (r.makespan_us is None, not r.feasible, r.makespan_us or 0, r.method)):
            mark = " *" if r.method == result.ours else ""
            frac = "-" if r.peak_fraction is None else f"{r.peak_fraction:.2f}"
            secs = "-" if r.place_seconds is None else f"{r.place_seconds:.2f}"
            out.write(f"  {r.method + mark:<10} {_fmt_ms(r.makespan_us):>12} {('yes' if r.feasible else 'NO'):>8} "
                      f"{frac:>9} {secs:>8}{('  ' + r.error[:60]) if r.error else ''}\n")
    return out.getvalue()


def summary_table(result: BenchResult) -> str:
    out = io.StringIO()
    out.write(f"{'regime':<6} {'K':>3} {'cases':>5} {'ours ok':>7} {'base ok':>7} {'only ours':>9} {'missed':>6} "
              f"{'wins':>9} {'geomean':>8} {'worst':>6}\n")
    for s in result.summary():
        wins = f"{s['wins']}/{s['compared']}"
        gm = "-" if s["geomean_ratio"] is None else f"{s['geomean_ratio']:.3f}"
        worst = "-" if s["worst_ratio"] is None else f"{s['worst_ratio']:.2f}"
        out.write(f"{s['regime']:<6} {str(s['k']):>3} {s['cases']:>5} {s['ours_feasible']:>7} "
                  f"{s['baseline_feasible']:>7} {s['only_ours_feasible']:>9} {s['ours_missed']:>6} {wins:>9} "
                  f"{gm:>8} {worst:>6}\n")
    return out.getvalue()


def write_outputs(result: BenchResult, outdir: Path) -> list[Path]:
    """CSV and JSON of every row, the scaling table, and the makespan plot (when matplotlib is there); the
    first write makes ``outdir`` (removed again, in an output transaction, when the transaction fails)."""
    paths = []
    buf = io.StringIO()
    w = csv.writer(buf)
    fields = list(Row.__dataclass_fields__)
    w.writerow(fields + ["ratio_to_best_baseline"])
    ratios = result.ratios()
    for r in result.rows:
        ratio = ratios[(r.graph, r.k, r.regime)][0] if r.method == result.ours else None
        w.writerow([getattr(r, f) for f in fields] + [ratio])
    paths.append(atomic_write(outdir / "results.csv", buf.getvalue()))
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(list(ScalingRow.__dataclass_fields__))
    for s in result.scaling:
        w.writerow([getattr(s, f) for f in ScalingRow.__dataclass_fields__])
    paths.append(atomic_write(outdir / "scaling.csv", buf.getvalue()))
    paths.append(write_json(outdir / "results.json", {
        "ours": result.ours, "graphs": result.graphs, "summary": result.summary(),
        "best_baseline_counts": result.best_baseline_counts(),
        "rows": [asdict(r) for r in result.rows], "scaling": [asdict(s) for s in result.scaling]}, indent=1))
    png = plot_makespans(result, outdir / "makespan.png")
    if png:
        paths.append(png)
    return paths


# matplotlib's ten colours, then tab20's ten lighter tones: a colour of its own for each of up to 20 methods
# (`--list-methods` has 15; the default cycle of ten gave m-sct pardnn's blue and m-topo cpop's orange)
METHOD_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
                 "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
                 "#dbdb8d", "#9edae5")


def method_colors(methods: Sequence[str]) -> dict[str, str]:
    """A colour per method, in the order given; distinct for up to ``len(METHOD_COLORS)`` methods, then cycled.

    >>> method_colors(["pardnn", "heft"])
    {'pardnn': '#1f77b4', 'heft': '#ff7f0e'}
    """
    return {m: METHOD_COLORS[i % len(METHOD_COLORS)] for i, m in enumerate(methods)}


def makespan_figure(result: BenchResult):
    """The figure of `plot_makespans` (a pyplot figure, or None without rows or matplotlib); close it after use."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed (pip install 'pardnn[bench]'): no plot")
        return None
    regimes = [r for r in REGIMES if any(x.regime == r for x in result.rows)]
    if not regimes:
        return None
    methods = sorted({r.method for r in result.rows}, key=lambda m: (m != result.ours, m))
    colors = method_colors(methods)
    fig, axes = plt.subplots(len(regimes), 1, figsize=(max(8, 0.45 * len(result.graphs) + 3) + 1.6,
                                                       4.2 * len(regimes)), squeeze=False)
    for ax, regime in zip(axes[:, 0], regimes):
        k = max(r.k for r in result.rows if r.regime == regime)
        graphs = [gname for gname in dict.fromkeys(r.graph for r in result.rows if r.regime == regime and r.k == k)]
        width = 0.8 / max(1, len(methods))
        for i, m in enumerate(methods):
            vals = []
            for gname in graphs:
                rows = [r for r in result.rows if r.graph == gname and r.k == k and r.regime == regime]
                best = min((r.makespan_us for r in rows if r.feasible and r.makespan_us), default=None)
                mine = next((r for r in rows if r.method == m), None)
                ok = mine is not None and mine.feasible and mine.makespan_us and best
                vals.append(mine.makespan_us / best if ok else np.nan)
            ax.bar(np.arange(len(graphs)) + i * width, vals, width, label=m, color=colors[m],
                   edgecolor="black" if m == result.ours else None, linewidth=0.8)
        ax.set_xticks(np.arange(len(graphs)) + 0.4 - width / 2)
        ax.set_xticklabels(graphs, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("makespan / best feasible")
        ax.set_ylim(0.9, 2.0)
        ax.axhline(1.0, color="grey", linewidth=0.6)
        ax.set_title(f"{regime} memory, K={k} (missing bar: infeasible; clipped at 2x)")
        # beside the axes, not over them: bars clipped at 2x reach the top, where a legend inside would hide them
        ax.legend(ncol=1, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return fig


def plot_makespans(result: BenchResult, path: Path | io.BytesIO) -> Path | io.BytesIO | None:
    """Makespan of each method relative to the best feasible one, per graph (loose regime, largest K)."""
    fig = makespan_figure(result)
    if fig is None:
        return None
    import matplotlib.pyplot as plt
    to_file = isinstance(path, (str, Path))      # else a file object: the HTML report's plot
    buf = io.BytesIO() if to_file else path
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return atomic_write(path, buf.getvalue()) if to_file else path


def markdown_report(result: BenchResult, *, command: str, machine: str = "") -> str:
    """The `benchmarks/RESULTS.md` text: summary, per-case ratios, timing and scaling tables."""
    out = io.StringIO()
    ratios = result.ratios()
    out.write("# Benchmark results\n\n")
    out.write(f"Regenerate with `{command}`. {machine}\n\n")
    out.write("Each case is a graph, K devices and a memory regime. `loose`: capacity = 2 x the single-device "
              "peak. `tight`: 1.25 x peak / K, but at least what the largest colocation group plus the largest "
              "op need. Every placement is scored by the SPEC §1 simulator (25 us, 12 GB/s links). "
              f"`ours` is `{result.ours}`; the ratio is ours / the best feasible baseline "
              "(below 1: we win).\n\n")
    out.write("## Summary\n\n| regime | K | cases | ours feasible | any baseline feasible | only ours feasible | "
              "ours missed | ours <= best | geomean ratio | worst ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    for s in result.summary():
        gm = "-" if s["geomean_ratio"] is None else f"{s['geomean_ratio']:.3f}"
        worst = "-" if s["worst_ratio"] is None else f"{s['worst_ratio']:.3f}"
        out.write(f"| {s['regime']} | {s['k']} | {s['cases']} | {s['ours_feasible']} | {s['baseline_feasible']} | "
                  f"{s['only_ours_feasible']} | {s['ours_missed']} | {s['wins']}/{s['compared']} | {gm} | {worst} |\n")
    out.write("\nBest baseline per case (count): " + ", ".join(f"{m} {n}" for m, n in
                                                               result.best_baseline_counts().items()) + "\n\n")
    secs = result.method_seconds()
    if secs:
        gnames = sorted({g for d in secs.values() for g in d}, key=lambda x: int(x.split("-")[1].rstrip("k")))
        out.write("## Placement time on the synthetic graphs (seconds, worst case over K and regime)\n\n")
        out.write("| method | " + " | ".join(gnames) + " |\n|---|" + "---:|" * len(gnames) + "\n")
        for m in sorted(secs, key=lambda m: (m != result.ours, m)):
            out.write(f"| {m} | " + " | ".join(f"{secs[m].get(gname, float('nan')):.2f}" for gname in gnames) + " |\n")
        out.write("\n")
    out.write("## Per case\n\nMakespan in ms; `x` = infeasible (memory over capacity) or failed.\n\n")
    methods = sorted({r.method for r in result.rows}, key=lambda m: (m != result.ours, m))
    out.write("| graph | nodes | K | regime | " + " | ".join(methods) + " | ours/best |\n|---|---:|---:|---|"
              + "---:|" * len(methods) + "---:|\n")
    for (graph, k, regime), rows in result.cases().items():
        by = {r.method: r for r in rows}
        cells = []
        for m in methods:
            r = by.get(m)
            cells.append("" if r is None else ("x" if not r.feasible or r.makespan_us is None
                                               else f"{r.makespan_us / 1000:.2f}"))
        ratio = ratios[(graph, k, regime)][0]
        out.write(f"| {graph} | {rows[0].nodes} | {k} | {regime} | " + " | ".join(cells) +
                  f" | {'-' if ratio is None else f'{ratio:.3f}'} |\n")
    if result.scaling:
        out.write("\n## Memory scaling: smallest feasible capacity / single-device peak\n\n")
        out.write("Found by bisection (2% tolerance) between the lower bound and 2.0; `-` = infeasible even at 2x. "
                  "Lower is better.\n\n")
        out.write("| graph | K | " + " | ".join(methods) + " |\n|---|---:|" + "---:|" * len(methods) + "\n")
        table: dict[tuple, dict[str, float | None]] = {}
        for s in result.scaling:
            table.setdefault((s.graph, s.k), {})[s.method] = s.min_fraction
        for (graph, k), d in table.items():
            out.write(f"| {graph} | {k} | " + " | ".join(
                "-" if d.get(m) is None else f"{d[m]:.3f}" for m in methods) + " |\n")
    return out.getvalue()
