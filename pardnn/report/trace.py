"""Timelines as Chrome trace-event JSON: what TensorFlow's profiler, Perfetto and ``chrome://tracing`` open.

Two sources, each one *process* of the trace:

* `schedule_events`: the machine model's step (a `pardnn.machine.Schedule`): a track (*thread*) per device
  with a slice per op (name, op type, phase, output bytes), and a track per link (ordered device pair)
  with a slice per transfer (the tensor, its bytes);
* `step_stats_events`: a traced TensorFlow step (``RunMetadata.step_stats``): a track per TensorFlow device
  (each ``dev_stats`` entry, by name) with a slice per executed node, from ``all_start_micros`` for
  ``all_end_rel_micros``, times made relative to the step's first node.

`trace_document` puts any of them in one ``{"traceEvents": [...]}`` object (times in microseconds, the
format's unit). Slices are complete events (``"ph": "X"``); tracks are named by metadata events. The
format: "Trace Event Format", the JSON object form.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from ..ir import OpGraph

PREDICTED_PID = 1
MEASURED_PID = 2


def _meta(pid: int, tid: int | None, what: str, name: str, sort: int | None = None) -> list[dict[str, Any]]:
    ev: dict[str, Any] = {"ph": "M", "pid": pid, "name": what, "args": {"name": name}}
    if tid is not None:
        ev["tid"] = tid
    out = [ev]
    if sort is not None and tid is not None:
        out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": sort}})
    return out


def _process(pid: int, label: str) -> list[dict[str, Any]]:
    return _meta(pid, None, "process_name", label) + [
        {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}}]


def _phase(g: OpGraph, v: int) -> str:
    extra = g.node_extra[v] if g.node_extra else None
    return str(extra.get("phase", "")) if extra else ""


def schedule_events(g: OpGraph, s, device_names: Sequence[str], *, pid: int = PREDICTED_PID,
                    label: str = "predicted (machine model)") -> list[dict[str, Any]]:
    """The machine model's step as trace events: one track per device, then one per link that carried data."""
    K = len(device_names)
    events = _process(pid, label)
    for d, name in enumerate(device_names):
        events += _meta(pid, d, "thread_name", name, sort=d)
    start, finish, dev = s.start_us, s.finish_us, s.device
    out_bytes = g.output_bytes_total
    for v in np.argsort(start, kind="stable"):
        v = int(v)
        events.append({"ph": "X", "pid": pid, "tid": int(dev[v]), "ts": float(start[v]),
                       "dur": float(finish[v] - start[v]), "name": g.names[v], "cat": _phase(g, v) or "op",
                       "args": {"op": g.ops[v], "phase": _phase(g, v), "output_bytes": int(out_bytes[v])}})
    tr = s.transfers
    if len(tr):
        src_dev = dev[tr.src]
        pairs = sorted({(int(a), int(b)) for a, b in zip(src_dev, tr.dst_dev)})
        tid_of = {p: K + i for i, p in enumerate(pairs)}
        for (a, b), tid in tid_of.items():
            events += _meta(pid, tid, "thread_name", f"link {device_names[a]} -> {device_names[b]}", sort=tid)
        for i in np.argsort(tr.start_us, kind="stable"):
            i = int(i)
            p = int(tr.src[i])
            events.append({"ph": "X", "pid": pid, "tid": tid_of[(int(src_dev[i]), int(tr.dst_dev[i]))],
                           "ts": float(tr.start_us[i]), "dur": float(tr.finish_us[i] - tr.start_us[i]),
                           "name": f"{g.names[p]}:{int(tr.port[i])}", "cat": "transfer",
                           "args": {"bytes": int(tr.bytes[i]), "producer": g.names[p], "port": int(tr.port[i]),
                                    "to": device_names[int(tr.dst_dev[i])]}})
    return events


def step_stats_events(step_stats, *, pid: int = MEASURED_PID,
                      label: str = "measured (TensorFlow)") -> list[dict[str, Any]]:
    """A traced TensorFlow step (``RunMetadata.step_stats``) as trace events: one track per device."""
    devs = sorted((d for d in step_stats.dev_stats if d.node_stats), key=lambda d: d.device)
    t0 = min((n.all_start_micros for d in devs for n in d.node_stats), default=0)
    events = _process(pid, label)
    for tid, d in enumerate(devs):
        events += _meta(pid, tid, "thread_name", d.device, sort=tid)
        for n in d.node_stats:
            events.append({"ph": "X", "pid": pid, "tid": tid, "ts": float(n.all_start_micros - t0),
                           "dur": float(max(n.all_end_rel_micros, 0)), "name": n.node_name, "cat": "op",
                           "args": {"label": n.timeline_label}})
    return events


def trace_document(*parts: Iterable[dict[str, Any]], metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """One Chrome trace-event JSON object from the event lists ``parts`` (times in microseconds)."""
    doc: dict[str, Any] = {"traceEvents": [e for part in parts for e in part], "displayTimeUnit": "ms"}
    if metadata:
        doc["otherData"] = dict(metadata)
    return doc
