"""MSR device-placement JSON (Tarnawski et al., NeurIPS 2020) to ``pardnn.graph``.

Each file is one placement problem: nodes with CPU and accelerator latencies,
an accelerator memory ``size``, a ``colorClass`` (nodes of one class must
share a device), and edges with a transfer ``cost`` and a ``size``. Rules:

* **time**: ``time_us`` = ``fpgaLatency`` x 1000. LayerGraphs are in
  milliseconds (their values equal PipeDream's per-layer ms). OperatorGraphs
  do not state a unit; their edge costs are milliseconds at 2 GiB/s
  (``cost = size x 1000 / 2^31``), so milliseconds are assumed for the
  latencies too. The CPU latency is kept as ``cpu_latency_ms``.
* **memory**: MSR's model holds each node's ``size`` on its device for the
  whole step, so ``size`` becomes ``persistent_bytes``. Outputs add no further
  memory on the producer (``output_bytes`` 0); each edge carries its ``size``,
  so a copy sent to another device is counted there.
* **colocation**: a ``colorClass`` with two or more members becomes the group
  ``color:<class>``.
* **phase**: ``isBackwardNode`` (``true``/``1``) gives ``backward``, else
  ``forward``.
* **names**: the node ``name``; a repeated name gets ``#<id>`` appended.
* The header's accelerator memory and count are kept in the graph's
  ``msr_problem`` field.

Nodes are written in topological order (by level, then id).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from pardnn.analysis import topologically_sorted
from pardnn.errors import InputError
from pardnn.fileio import read_json
from pardnn.ir import GraphBuilder, OpGraph


def _flag(x) -> bool:
    return bool(x) if not isinstance(x, str) else x.lower() in ("1", "true")


def _number(value, what: str) -> float:
    """A finite number from a field (MSR files write numbers; a numeric string is taken as one)."""
    if isinstance(value, bool):
        raise ValueError(what)
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(what) from None
    if not math.isfinite(x):
        raise ValueError(what)
    return x


def _id(value) -> int:
    """A node id: an integer (or a number or string that reads as one)."""
    if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():     # 1.7 read as 1
        raise ValueError("id")
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError("id") from None


def load_msr(path: str | Path, *, name: str | None = None) -> OpGraph:
    p = Path(path)
    d = read_json(p)
    if not isinstance(d, dict) or "nodes" not in d or "edges" not in d:
        raise InputError(f"{p}: not an MSR placement problem (expected \"nodes\" and \"edges\")")
    nodes, edges = d["nodes"], d["edges"]
    for key, items in (("nodes", nodes), ("edges", edges)):
        if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
            raise InputError(f"{p}: \"{key}\" must be a list of objects")
    try:
        ids = [_id(n["id"]) for n in nodes]
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{p}: every node needs an integer \"id\"") from None
    for n, nid in zip(nodes, ids):
        cls = n.get("colorClass")
        if cls is not None and (isinstance(cls, bool) or not isinstance(cls, (str, int, float))):
            raise InputError(f"{p}: node id {nid}: colorClass must be a string or a number, got {cls!r}")
    classes = Counter(n.get("colorClass") for n in nodes)
    names = Counter(str(n.get("name", n["id"])) for n in nodes)
    model = name or p.name.split(".")[0]
    b = GraphBuilder(f"msr-{model}", source=str(p))
    b.meta = {"source_format": "msr", "source_file": p.name,
              "msr_problem": {k: d[k] for k in ("maxSizePerFPGA", "maxFPGAs", "maxCPUs") if k in d}}
    by_id: dict[int, str] = {}
    for n, nid in zip(nodes, ids):
        nm = str(n.get("name", nid))
        if names[nm] > 1:
            nm = f"{nm}#{nid}"
        if nid in by_id:
            raise InputError(f"{p}: node id {nid} appears twice")
        by_id[nid] = nm
        try:
            t = _number(n.get("fpgaLatency", 0.0), "fpgaLatency") * 1000.0
            size = _number(n.get("size", 0.0), "size")
            cpu = _number(n.get("cpuLatency", 0.0), "cpuLatency")
        except ValueError as exc:
            raise InputError(f"{p}: node {nm!r}: {exc} must be a finite number") from None
        cls = n.get("colorClass")
        b.add_node(nm, nm.rstrip("0123456789") or "op", time_us=t, output_bytes=[0], persistent_bytes=size,
                   colocation=f"color:{cls}" if cls is not None and classes[cls] > 1 else None,
                   phase="backward" if _flag(n.get("isBackwardNode", False)) else "forward",
                   cpu_latency_ms=cpu)
    for i, e in enumerate(edges):
        try:
            s, t = by_id[_id(e["sourceId"])], by_id[_id(e["destId"])]
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{p}: edges[{i}] names an unknown node id "
                             f"({e.get('sourceId')!r} -> {e.get('destId')!r})") from None
        try:
            size = _number(e.get("size", 0.0), "size")
        except ValueError:
            raise InputError(f"{p}: edges[{i}] ({s!r} -> {t!r}): size must be a finite number") from None
        b.add_edge(s, t, bytes=size)
    return topologically_sorted(b.build())
