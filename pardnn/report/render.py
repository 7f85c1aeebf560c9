"""Assemble a placement's report page (`render_report`); `pardnn.report.bench_page` makes a benchmark's."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import __version__
from ..analysis import phases
from ..bounds import how_far_above
from ..cluster import Cluster
from ..ir import OpGraph
from ..machine import DEVICE, Schedule, simulate
from ..pipeline import PassTiming
from ..placement import Placement
from ..units import format_bytes, format_time, plural
from . import figures as F
from .html import Cell, esc, kv_table, page, para, png_img, section, table
from .measured import MeasuredRun, measured_from_dict
from .measured_section import measured_section
from .summary import Summary, comm_matrix, summarize, top_live

TOP_TENSORS = 8
TOP_WAITS = 10
MAX_VIOLATIONS = 20       # listed in the summary; a line counts the rest


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _cap_text(c: float) -> str:
    return "unlimited" if not math.isfinite(c) else format_bytes(c)


# ---------------------------------------------------------------------------
# sections of the placement report
# ---------------------------------------------------------------------------

def _summary_section(g: OpGraph, cluster: Cluster, summ: Summary) -> str:
    K = cluster.num_devices
    fastest = int(np.argmax(cluster.speed))
    if summ.fits_one_device:
        d = summ.single_device
        speed_text = f"{summ.speedup:.2f}x"
        one_text = f"{format_time(summ.serial_us)} on device {d} ({cluster.devices[d].name})"
    else:
        speed_text = (f"does not fit one device (the step needs {format_bytes(summ.single_device_peak_bytes)} on one "
                      f"device; the largest holds {_cap_text(float(cluster.capacity.max()))})")
        one_text = f"{format_time(summ.serial_us)} on device {fastest} if it had the memory"
    rows = [
        ("graph", summ.graph, "graph", None),
        ("ops / edges", f"{summ.nodes:,} / {summ.edges:,}", "nodes", summ.nodes),
        ("devices", f"{K}", "num_devices", K),
    ]
    if summ.method:
        rows.append(("method", summ.method, "method", None))
    rows += [
        ("predicted step time (makespan)", format_time(summ.makespan_us), "makespan_us", summ.makespan_us),
        ("lower bound on the step time", f"{format_time(summ.lower_bound_us)}: no placement on these devices is "
         f"faster; this placement {how_far_above(summ.makespan_us, summ.lower_bound_us)}", "lower_bound_us",
         summ.lower_bound_us),
        ("one device", one_text, "serial_us", summ.serial_us),
        ("speedup over one device", speed_text, "speedup", summ.speedup),
        ("single-device peak memory", format_bytes(summ.single_device_peak_bytes), "single_device_peak_bytes",
         summ.single_device_peak_bytes),
        ("transfers", f"{summ.transfers:,}", "transfers", summ.transfers),
        ("bytes moved", format_bytes(summ.bytes_moved), "bytes_moved", summ.bytes_moved),
        ("feasible", "yes" if summ.feasible else "NO", "feasible", summ.feasible),
    ]
    parts = [kv_table(rows)]
    if summ.violations:
        parts.append("<ul class=\"bad\">" + "".join(f"<li>{esc(v)}</li>" for v in summ.violations[:MAX_VIOLATIONS])
                     + "</ul>")
        if len(summ.violations) > MAX_VIOLATIONS:
            parts.append(para(f"... and {len(summ.violations) - MAX_VIOLATIONS:,} more violations, "
                              f"{len(summ.violations):,} in all (pardnn simulate --json lists them; the per-device "
                              "table marks every device over its capacity).", "bad"))
    dev_rows, classes = [], []
    for d in summ.devices:
        busy = d.compute_us / summ.makespan_us if summ.makespan_us > 0 else None
        p = f"devices[{d.index}]."
        dev_rows.append([
            Cell(d.index, key=p + "index", value=d.index),
            Cell(d.name, cls="name"),
            Cell(f"{d.ops:,}", key=p + "ops", value=d.ops),
            Cell(format_time(d.compute_us), key=p + "compute_us", value=d.compute_us),
            Cell(_pct(busy)),
            Cell(format_bytes(d.peak_bytes), key=p + "peak_bytes", value=d.peak_bytes),
            Cell(_cap_text(d.capacity_bytes), key=p + "capacity_bytes",
                 value=int(d.capacity_bytes) if math.isfinite(d.capacity_bytes) else "unlimited"),
            Cell(_pct(d.use), cls="bad" if d.use is not None and d.use > 1 else None),
            Cell(format_time(d.peak_time_us), key=p + "peak_time_us", value=d.peak_time_us),
            Cell(format_bytes(d.persistent_bytes), key=p + "persistent_bytes", value=d.persistent_bytes),
            Cell(f"{d.speed:g}"),
        ])
        classes.append("over" if d.use is not None and d.use > 1 else None)
    parts.append("<h3>Per device</h3>")
    parts.append(table(["#", Cell("device", cls="l", header=True), "ops", "compute load", "busy", "peak memory",
                        "capacity", "peak / capacity", "peak at", "persistent", "speed"], dev_rows,
                       row_classes=classes, attrs=' id="devices"'))
    if summ.pass_timings:
        total = sum(t.seconds for t in summ.pass_timings) or 1.0
        rows_t = [[Cell(t.name, cls="l"), Cell(f"{t.seconds:.3f} s", key=f"pass.{t.name}.seconds", value=t.seconds),
                   _pct(t.seconds / total), "-" if t.makespan_us is None else format_time(t.makespan_us)]
                  for t in summ.pass_timings]
        rows_t.append([Cell("total", cls="l"), f"{sum(t.seconds for t in summ.pass_timings):.3f} s", "", ""])
        parts.append("<h3>Pass timings</h3>")
        parts.append(table([Cell("pass", cls="l", header=True), "time", "share", "makespan after"], rows_t,
                           attrs=' id="passes"'))
    return section("summary", "Summary", *parts)


def _chain_table(g: OpGraph, cluster: Cluster, s: Schedule, chain) -> str:
    if len(chain) == 0:
        return ""
    order = np.lexsort((np.arange(len(chain)), -chain.delay_us))[:TOP_WAITS]
    rows = []
    for i in order.tolist():
        u, v = int(chain.src[i]), int(chain.dst[i])
        if chain.kind[i] == DEVICE:
            why = f"device {int(s.device[v])} to finish"
        elif s.device[u] != s.device[v]:
            why = f"input sent from device {int(s.device[u])} to {int(s.device[v])}"
        else:
            why = f"input on device {int(s.device[v])}"
        rows.append([Cell(g.names[v], cls="name"), Cell(why, cls="l"), Cell(g.names[u], cls="name"),
                     format_time(float(chain.delay_us[i])), format_time(float(s.start_us[v]))])
    return ("<h3>Longest waits on the critical chain</h3>" +
            table([Cell("op", cls="l", header=True), Cell("waited for", cls="l", header=True),
                   Cell("op waited on", cls="l", header=True), "wait", "starts at"], rows))


def _timeline_section(g: OpGraph, cluster: Cluster, s: Schedule) -> str:
    chain = s.critical_chain()
    marks = F.chain_marks(g, s, chain)
    ph = phases(g)
    png, notes = F.gantt_png(g, cluster, s, marks, ph)
    on_chain = marks.ops
    chain_compute = float((s.finish_us[on_chain] - s.start_us[on_chain]).sum()) if on_chain.size else 0.0
    device_waits = int((chain.kind == DEVICE).sum()) if len(chain) else 0
    text = (f"Each device's ops over one simulated step, coloured by "
            f"{'training phase' if ph is not None else 'op (the graph records no phases)'}; below them, a lane per "
            "device-to-device link carrying transfers. The black bars mark the critical chain: the chain of waits, "
            "traced back from the op that finishes last, that set the step time "
            f"({on_chain.size:,} ops, {len(marks.transfers):,} transfers, {device_waits:,} waits for a busy device; "
            f"its ops compute for {format_time(chain_compute)} of the {format_time(float(s.makespan_us))} step). "
            "Dashed lines are its hops between devices.")
    parts = [para(text), png_img(png, "Gantt chart of each device's ops and each link's transfers", fig_id="gantt")]
    parts += [para(n, "note") for n in notes]
    parts.append(_chain_table(g, cluster, s, chain))
    return section("timeline", "Timeline", *parts)


def _memory_section(g: OpGraph, cluster: Cluster, s: Schedule) -> str:
    shown, note = F.memory_order(cluster, s)
    parts = [para("Memory in use on each device over the step (SPEC §1: persistent bytes, live outputs, received "
                  "copies and the running op's scratch), against its capacity (dashed). The triangle marks the peak; "
                  "the tables list the largest allocations alive at that instant."),
             png_img(F.memory_png(cluster, s, shown), "memory over time per device", fig_id="memory-plot")]
    if note:
        parts.append(para(f"{note}, here and in the tables: the fullest, by peak over capacity (the summary's "
                          "table lists every device's peak).", "note"))
    blocks = []
    for d in shown.tolist():
        items, n, total = top_live(g, s, d, TOP_TENSORS)
        rows = [[Cell(it.name, cls="name"), Cell(it.kind, cls="l"), Cell(format_bytes(it.bytes), value=it.bytes),
                 f"{format_time(it.alloc_us)} \u2013 {format_time(it.free_us)}"] for it in items]
        rows.append([Cell("persistent (weights, optimizer state)", cls="l"), "", format_bytes(s.persistent_bytes[d]),
                     "whole step"])
        head = (f"{d}: {cluster.devices[d].name}: peak {format_bytes(s.peak_bytes[d])} at "
                f"{format_time(float(s.peak_time_us[d]))}; {n:,} allocations live ({format_bytes(total)})")
        blocks.append(f"<div><h3>{esc(head)}</h3>" + table([Cell("tensor", cls="l", header=True),
                                                            Cell("kind", cls="l", header=True), "bytes", "alive"],
                                                           rows) + "</div>")
    parts.append("<div class=\"grid\">" + "".join(blocks) + "</div>")
    return section("memory", "Memory", *parts)


def _comm_section(cluster: Cluster, s: Schedule) -> str:
    K = cluster.num_devices
    nbytes, count = comm_matrix(s)
    shown, note = F.devices_drawn((nbytes.sum(axis=0) + nbytes.sum(axis=1)).astype(np.float64))
    head = [Cell("from \\ to", cls="l", header=True)] + [str(c) for c in shown] + ["sent"]
    rows = []
    for a in shown.tolist():
        row: list[Any] = [Cell(f"{a}: {cluster.devices[a].name}", cls="l")]
        for c in shown.tolist():
            if a == c:
                row.append("")
                continue
            row.append(Cell(f"{format_bytes(nbytes[a, c])} / {count[a, c]:,}", key=f"comm[{a}][{c}]",
                            value=f"{int(nbytes[a, c])}/{int(count[a, c])}"))
        row.append(format_bytes(nbytes[a].sum()))
        rows.append(row)
    rows.append([Cell("received", cls="l")] + [format_bytes(nbytes[:, c].sum()) for c in shown] +
                [format_bytes(nbytes.sum())])
    parts = [para("Bytes and number of transfers from each device (rows) to each device (columns). A tensor "
                  "crosses once per destination device, however many ops there read it."),
             table(head, rows, attrs=' id="comm-matrix"')]
    if note:
        parts.append(para(f"{note}, here and in the heat map: those that send and receive the most bytes (the "
                          "\"sent\" and \"received\" totals count every device).", "note"))
    if K > 1:
        sub = np.ix_(shown, shown)
        parts.append(png_img(F.comm_png(shown.tolist(), nbytes[sub], count[sub]), "communication matrix",
                             fig_id="comm-plot"))
    return section("communication", "Communication", *parts)


# ---------------------------------------------------------------------------
# the pages
# ---------------------------------------------------------------------------

def render_report(g: OpGraph, cluster: Cluster, placement: Placement | None, schedule: Schedule | None = None, *,
                  timings: Sequence[PassTiming] | None = None, measured: MeasuredRun | dict | None = None,
                  title: str | None = None) -> str:
    """One self-contained HTML page showing a placement: summary, timeline, memory, communication.

    ``schedule`` is the simulator's (it is simulated when None or computed
    without memory). ``timings`` are the pipeline's pass timings (else those
    the placement file recorded). ``measured`` is a `MeasuredRun`, or the
    parsed JSON of ``pardnn run --json``. Needs matplotlib
    (`MissingDependencyError` otherwise).
    """
    F.require_matplotlib()
    if schedule is None or not schedule.memory_checked or schedule.graph is None:
        if placement is None and schedule is None:
            raise ValueError("render_report needs a placement or a schedule")
        schedule = simulate(g, cluster, placement if placement is not None else schedule.device)
    if isinstance(measured, dict):
        measured = measured_from_dict(measured)
    summ = summarize(g, cluster, schedule, placement=placement, timings=timings)
    title = title or f"{g.name} on {plural(cluster.num_devices, 'device')}"
    subtitle = (f"pardnn {__version__} placement report: {g.num_nodes:,} ops on "
                f"{plural(cluster.num_devices, 'device')}, "
                f"predicted step time {format_time(summ.makespan_us)}. "
                + ("Every figure comes from the machine model (docs/machine-model.md)." if measured is None else
                   "Every figure comes from the machine model (docs/machine-model.md), except those of the "
                   "section \u201cPredicted vs measured\u201d, which also shows the run's."))
    sections = [("summary", "Summary", _summary_section(g, cluster, summ)),
                ("timeline", "Timeline", _timeline_section(g, cluster, schedule)),
                ("memory", "Memory", _memory_section(g, cluster, schedule)),
                ("communication", "Communication", _comm_section(cluster, schedule))]
    if measured is not None:
        sections.append(("measured", "Predicted vs measured", measured_section(g, cluster, schedule, summ, measured)))
    return page(title, subtitle, sections)


def save_report(html: str, path: str | Path) -> Path:
    """Write the page atomically."""
    from ..fileio import atomic_write
    return atomic_write(path, html)
