"""The report's "Predicted against measured" section: a measured run (`pardnn.report.measured`) beside the model.

Step times, each device's busy time, and, when the run carries the traced
step's ops (``measured_timeline``, from ``pardnn run --json`` on TensorFlow),
both timelines on one time axis with where they part: each device's busy and
idle time, its longest idle gap, the op that ends its step, and the ops that
ran longest beyond their prediction.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..analysis import phases
from ..cluster import Cluster
from ..ir import OpGraph
from ..machine import Schedule
from ..units import format_time
from . import figures as F
from .html import Cell, kv_table, para, png_img, section, table
from .measured import MeasuredRun
from .summary import Summary
from .timeline import covered_time, idle_gaps

TOP_DEPARTURES = 10


def _op_categories(g: OpGraph, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Node ids of ``names`` (-1 where the graph has no such op) and their colour categories (`_palette`)."""
    index = g.index
    ids = np.fromiter((index.get(n, -1) for n in names), dtype=np.int64, count=len(names))
    ph = phases(g)
    unknown = len(F.PHASE_COLORS) - 1 if ph is not None else 1
    cat = np.full(ids.size, unknown, dtype=np.int64)
    known = ids >= 0
    cat[known] = ph[ids[known]] if ph is not None else 0
    return ids, cat


def _palette(g: OpGraph, cats: Sequence[np.ndarray]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    """Colours by category and the legend of the categories present: phases as in the Timeline, grey for
    measured ops the graph does not have."""
    if phases(g) is not None:
        colors, labels = F.PHASE_COLORS, F.PHASE_LABELS
    else:
        colors, labels = (F.OP_COLOR, F.PHASE_COLORS[-1]), ("op (the graph has no phase information)",
                                                            "not an op of this graph")
    present = np.zeros(len(colors), dtype=bool)
    for c in cats:
        present |= np.bincount(c, minlength=len(colors))[:len(colors)] > 0
    return colors, [(c, lab) for c, lab, p in zip(colors, labels, present) if p]


def _measured_timeline(g: OpGraph, cluster: Cluster, s: Schedule, run: MeasuredRun) -> list[str]:
    """The traced step's timeline under the predicted one, and where they part: per device busy and idle time and
    the longest gap, then the ops that ran longest beyond their prediction."""
    if not run.lanes:
        return [para(f"No measured timeline: {run.no_lanes}.", "note")]
    K = cluster.num_devices
    ph = phases(g)
    pred_cat = ph if ph is not None else np.zeros(g.num_nodes, dtype=np.int64)
    lanes = run.lanes
    cats = [_op_categories(g, lane.ops) for lane in lanes]
    colors, legend = _palette(g, [pred_cat] + [c for _, c in cats])
    traced_us = max(float(lane.finish_us.max()) for lane in lanes if lane.ops)
    span = max(float(s.makespan_us), traced_us)
    pred_lanes = [F.Lane(f"{d}: {cluster.devices[d].name}", s.start_us[s.device == d], s.finish_us[s.device == d],
                         pred_cat[s.device == d]) for d in range(K)]
    meas_lanes = [F.Lane(f"{lane.index if lane.index is not None else '-'}: {lane.name}", lane.start_us,
                         lane.finish_us, c) for lane, (_, c) in zip(lanes, cats)]
    png = F.timelines_png([(f"predicted (machine model): step {format_time(float(s.makespan_us))}", pred_lanes),
                           (f"measured (the traced step): its ops span {format_time(traced_us)}", meas_lanes)],
                          colors, legend, span)
    matched = sum(int((ids >= 0).sum()) for ids, _ in cats)
    total = sum(len(lane.ops) for lane in lanes)
    parts = [para("The step TensorFlow traced (RunMetadata step stats: each op of the graph from its start to its "
                  "end, on the device it ran on) under the machine model's step, on one time axis and coloured "
                  "by phase as in the Timeline. The traced step runs with tracing on, so it is usually slower "
                  "than the median measured step; its idle time shows waits (transfers, feeds, TensorFlow's "
                  "scheduling) the model predicts differently."),
             png_img(png, "predicted and measured timelines per device", fig_id="measured-timeline")]
    if matched < total:
        parts.append(para(f"{total - matched:,} of the {total:,} measured ops are not ops of this graph (grey); "
                          "is the run of another model?", "note"))
    rows = []
    for row, lane in enumerate(lanes):
        d = lane.index
        p = f"measured_lane[{row}]."
        on = (s.device == d) if d is not None and 0 <= d < K else np.zeros(g.num_nodes, dtype=bool)
        p_busy = float((s.finish_us[on] - s.start_us[on]).sum())
        p_idle = float(s.makespan_us) - covered_time(s.start_us[on], s.finish_us[on])
        fin = lane.finish_us
        m_busy = float(lane.dur_us.sum())
        m_idle = traced_us - covered_time(lane.start_us, fin)
        gap_text, last = "-", "-"
        if lane.ops:
            a, b = idle_gaps(lane.start_us, fin)
            if a.size:
                i = int(np.argmax(b - a))
                before = lane.ops[int(np.flatnonzero(fin == a[i])[0])]      # the gap's ends are these ops' times
                after = lane.ops[int(np.flatnonzero(lane.start_us == b[i])[0])]
                gap_text = (f"{format_time(float(b[i] - a[i]))} at {format_time(float(a[i]))}, after {before}, "
                            f"before {after}")
            last = lane.ops[int(np.argmax(fin))]
        rows.append([Cell(d if d is not None else "-"), Cell(lane.name, cls="name"),
                     Cell(f"{len(lane.ops):,}", key=p + "ops", value=len(lane.ops)),
                     format_time(p_busy), Cell(format_time(m_busy), key=p + "busy_us", value=m_busy),
                     format_time(p_idle), Cell(format_time(m_idle), key=p + "idle_us", value=m_idle),
                     Cell(gap_text, key=p + "longest_gap", cls="name"),
                     Cell(format_time(float(fin.max())) if lane.ops else "-", key=p + "end_us",
                          value=float(fin.max()) if lane.ops else None),
                     Cell(last, key=p + "last_op", cls="name")])
    parts.append("<h3>Per device: the timelines side by side</h3>")
    parts.append(table(["#", Cell("device", cls="l", header=True), "measured ops", "predicted busy",
                        "measured busy", "predicted idle", "measured idle",
                        Cell("longest measured gap", cls="l", header=True), "measured end",
                        Cell("last op to finish", cls="l", header=True)], rows, attrs=' id="measured-lanes"'))
    parts.append(_departures(g, s, lanes, cats))
    return parts


def _departures(g: OpGraph, s: Schedule, lanes, cats) -> str:
    """The ops whose measured time exceeds the predicted one the most."""
    ids = np.concatenate([i for i, _ in cats])
    start = np.concatenate([lane.start_us for lane in lanes])
    dur = np.concatenate([lane.dur_us for lane in lanes])
    names = [n for lane in lanes for n in lane.ops]
    keep = np.flatnonzero(ids >= 0)
    if keep.size == 0:
        return ""
    excess = dur[keep] - (s.finish_us - s.start_us)[ids[keep]]
    keep, excess = keep[excess > 0], excess[excess > 0]
    if keep.size == 0:
        return para("No op of the graph ran longer than its prediction.", "note")
    order = keep[np.lexsort((keep, -excess))][:TOP_DEPARTURES]
    rows = []
    for r, i in enumerate(order.tolist()):
        v = int(ids[i])
        rows.append([Cell(names[i], cls="name", key=f"departure[{r}].op"), Cell(int(s.device[v])),
                     format_time(float(s.start_us[v])), format_time(float(start[i])),
                     format_time(float(s.finish_us[v] - s.start_us[v])),
                     Cell(format_time(float(dur[i])), key=f"departure[{r}].measured_us", value=float(dur[i]))])
    return ("<h3>Ops that ran longest beyond their prediction</h3>" +
            table([Cell("op", cls="l", header=True), "device", "predicted start", "measured start",
                   "predicted time", "measured time"], rows, attrs=' id="departures"'))


def measured_section(g: OpGraph, cluster: Cluster, s: Schedule, summ: Summary, run: MeasuredRun) -> str:
    rows = [("measured step time", format_time(run.measured_us), "measured_us", run.measured_us),
            ("predicted step time (this report)", format_time(summ.makespan_us), "predicted_us", summ.makespan_us)]
    if run.predicted_us is not None and abs(run.predicted_us - summ.makespan_us) > 1e-3 * max(1.0, summ.makespan_us):
        rows.append(("predicted at run time", format_time(run.predicted_us), "run_predicted_us", run.predicted_us))
    ratio = run.measured_us / summ.makespan_us if summ.makespan_us > 0 else None
    rows.append(("measured / predicted", "-" if ratio is None else f"{ratio:.3f}", "measured_over_predicted", ratio))
    if run.whole_model_us is not None:
        rows.append(("whole model in one session", format_time(run.whole_model_us), "whole_model_us",
                     run.whole_model_us))
    if run.steps is not None:
        rows.append(("timed steps", str(run.steps), "steps", run.steps))
    if run.outputs_match is not None:
        rows.append(("outputs match the unplaced model", "yes" if run.outputs_match else "NO", "outputs_match",
                     run.outputs_match))
    if run.cost_model:
        rows.append(("op costs of the prediction", run.cost_model, None, None))
    parts = [para(f"From {run.source}."), kv_table(rows)]
    labels, pred, meas = ["step"], [summ.makespan_us], [run.measured_us]
    if run.devices:
        load = {d.index: d for d in summ.devices}
        dev_rows = []
        for md in run.devices:
            p = load.get(md.index)
            dev_rows.append([Cell(md.index if md.index is not None else "-"), Cell(md.name, cls="name"),
                             "-" if p is None else format_time(p.compute_us),
                             Cell(format_time(md.measured_us), key=f"measured[{md.index}]", value=md.measured_us),
                             "-" if p is None or p.compute_us <= 0 else f"{md.measured_us / p.compute_us:.3f}"])
            labels.append(f"device {md.index}" if md.index is not None else md.name)
            pred.append(None if p is None else p.compute_us)
            meas.append(md.measured_us)
        parts.append("<h3>Per device: busy time</h3>")
        parts.append(table(["#", Cell("device", cls="l", header=True), "predicted compute", "measured compute",
                            "measured / predicted"], dev_rows, attrs=' id="measured-devices"'))
    else:
        parts.append(para("The run reports no per-device times.", "note"))
    parts.append(png_img(F.measured_png(labels, pred, meas), "predicted against measured", fig_id="measured-plot"))
    parts.append("<h3>Timelines: predicted over measured</h3>")
    parts += _measured_timeline(g, cluster, s, run)
    return section("measured", "Predicted against measured", *parts)
