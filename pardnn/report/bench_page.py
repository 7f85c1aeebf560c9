"""The benchmark's report page: `pardnn bench`'s tables and makespan plot as one self-contained HTML file."""

from __future__ import annotations

import io
from typing import Any

from .. import __version__
from ..units import format_bytes, format_time
from . import figures as F
from .html import Cell, page, para, png_img, section, table


def render_bench_report(result, *, command: str | None = None, title: str | None = None) -> str:
    """The benchmark's page: summary, makespan plot, per-case makespans, placement times, memory scaling."""
    F.require_matplotlib()
    from ..bench import plot_makespans

    sections = []
    ratios = result.ratios()
    summ_rows = []
    for s in result.summary():
        summ_rows.append([s["regime"], s["k"], s["cases"], s["ours_feasible"], s["baseline_feasible"],
                          s["only_ours_feasible"], s["ours_missed"], f"{s['wins']}/{s['compared']}",
                          "-" if s["geomean_ratio"] is None else f"{s['geomean_ratio']:.3f}",
                          "-" if s["worst_ratio"] is None else f"{s['worst_ratio']:.3f}"])
    counts = result.best_baseline_counts()
    intro = (f"Each case is a graph, K devices and a memory regime (loose: capacity 2 x the single-device peak; "
             f"tight: 1.25 x peak / K, at least what the largest group and op need). Every placement is scored by "
             f"the machine model. Ours is {result.ours}; the ratio is ours / the best feasible baseline (below 1: "
             f"ours is faster).")
    sections.append(("summary", "Summary", section(
        "summary", "Summary", para(intro), para(f"Regenerate with: {command}") if command else "",
        table(["regime", "K", "cases", "ours feasible", "any baseline feasible", "only ours feasible", "ours missed",
               "ours <= best", "geomean ratio", "worst ratio"], summ_rows, attrs=' id="bench-summary"'),
        para("Best baseline per case (count): " + (", ".join(f"{m} {n}" for m, n in counts.items()) or "none")))))
    buf = io.BytesIO()
    plotted = plot_makespans(result, buf)
    plot_html = png_img(buf.getvalue(), "makespan relative to the best feasible method", fig_id="makespan-plot") \
        if plotted is not None and buf.getvalue() else para("No rows to plot.", "note")
    sections.append(("makespans", "Makespans", section("makespans", "Makespans", plot_html)))
    methods = sorted({r.method for r in result.rows}, key=lambda m: (m != result.ours, m))
    case_rows = []
    for (graph, k, regime), rows in result.cases().items():
        by = {r.method: r for r in rows}
        cells: list[Any] = [Cell(graph, cls="l"), f"{rows[0].nodes:,}", k, regime, format_bytes(rows[0].capacity_bytes)]
        for m in methods:
            r = by.get(m)
            if r is None:
                cells.append("")
            elif not r.feasible or r.makespan_us is None:
                cells.append(Cell("x", cls="bad", key=f"{graph}|{k}|{regime}|{m}", value="infeasible"))
            else:
                cells.append(Cell(f"{r.makespan_us / 1000:.2f}", key=f"{graph}|{k}|{regime}|{m}", value=r.makespan_us))
        ratio = ratios[(graph, k, regime)][0]
        cells.append("-" if ratio is None else f"{ratio:.3f}")
        case_rows.append(cells)
    sections.append(("cases", "Per case", section(
        "cases", "Per case", para("Makespan in ms; x = infeasible (memory over capacity) or failed."),
        table([Cell("graph", cls="l", header=True), "nodes", "K", "regime", "capacity"] + methods + ["ours/best"],
              case_rows, attrs=' id="bench-cases"'))))
    secs = result.method_seconds()
    if secs:
        gnames = sorted({gn for d in secs.values() for gn in d})
        rows_s = [[Cell(m, cls="l")] + [f"{secs[m][gn]:.2f}" if gn in secs[m] else "-" for gn in gnames]
                  for m in sorted(secs, key=lambda m: (m != result.ours, m))]
        sections.append(("timing", "Placement time", section(
            "timing", "Placement time", para("Seconds to place each synthetic graph (worst case over K and regime)."),
            table([Cell("method", cls="l", header=True)] + gnames, rows_s))))
    if result.scaling:
        grid: dict[tuple, dict[str, float | None]] = {}
        for s in result.scaling:
            grid.setdefault((s.graph, s.k), {})[s.method] = s.min_fraction
        rows_m = [[Cell(gn, cls="l"), k] + ["-" if d.get(m) is None else f"{d[m]:.3f}" for m in methods]
                  for (gn, k), d in grid.items()]
        sections.append(("scaling", "Memory scaling", section(
            "scaling", "Memory scaling",
            para("Smallest feasible capacity as a fraction of the single-device peak (bisection, 2% tolerance; "
                 "- = infeasible even at 2x). Lower is better."),
            table([Cell("graph", cls="l", header=True), "K"] + methods, rows_m))))
    if result.graphs:
        rows_g = [[Cell(x["graph"], cls="l"), x["kind"], f"{x['nodes']:,}", f"{x['edges']:,}",
                   format_time(x["total_time_us"]), format_bytes(x["single_device_peak_bytes"]),
                   Cell(x["origin"], cls="name")] for x in result.graphs]
        sections.append(("graphs", "Graphs", section(
            "graphs", "Graphs", table([Cell("graph", cls="l", header=True), "kind", "nodes", "edges", "compute",
                                       "single-device peak", Cell("origin", cls="l", header=True)], rows_g))))
    title = title or "pardnn benchmark"
    subtitle = (f"pardnn {__version__}: {len(result.graphs)} graphs, {len(methods)} methods, "
                f"{len(result.cases())} cases.")
    return page(title, subtitle, sections)
