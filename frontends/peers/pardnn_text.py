"""ParDNN's text inputs to ``pardnn.graph``.

ParDNN's partitioner read a TensorFlow op graph as a DOT edge list, with
tensor sizes and op durations in side files. `load_pardnn_dot` reads:

* **the DOT file**: ``"a" -> "b"``, ``a->b``, ``"a":1 -> "b"`` (output port 1),
  ``"^a" -> "b"`` (a control edge from ``a``), node declarations
  ``"a" [label=...]``, with or without a ``digraph {`` wrapper;
* **tensor sizes** (``tensors_sz*.txt``): ``"name": B,`` or ``"name":: B``,
  the size in bytes of each op's first output;
* **durations**, either ParDNN's averaged table (``name::us``, matched
  case-insensitively, as its names are lowercased) or TensorFlow timelines
  (Chrome-trace JSON, one step each). From a timeline an op's time is the sum
  of its GPU kernels on the ``stream:all`` row where it has any, else its
  compute-row time; several timelines are combined with ParDNN's robust
  average (`pardnn.frontends.common.robust_average`).

Side files are found next to the DOT file (``tensors_sz*.txt``,
``profs/*.json*``, ``time_steps_32/nodes_average_durations.txt``) or in a
sibling ``full/`` directory (the Inception subgraph), unless given.

Rules for what the files leave open:

* **missing durations**: 1 us, ParDNN's own rule; such nodes are marked
  ``"profiled": false``;
* **unknown sizes** (``-1`` or absent): 0 bytes. Sizes are as recorded, with
  unknown (batch) dimensions counted as 1; a size below -1 is an error, as is
  a duration that is negative or not finite, and a DOT line that is neither
  an edge, a node nor a statement without one (docs/formats.md);
* **variables**: a node with no inputs whose successors include ``X/read``,
  ``X/Assign``, ``X/Read/ReadVariableOp`` or ``X/IsInitialized/...`` (or whose
  timeline op type is a variable op). Its ``persistent_bytes`` is the largest
  size of it and its readers (resource handles record 1 byte);
* **colocation**: a variable and every op that consumes it directly form a
  group (``var:X``) — TensorFlow places ref and resource consumers with their
  variable. An optimizer ``Apply*`` op joins the groups of all variables it
  updates (the variable and its slots); any other op consuming several
  variables (``save/SaveV2``) joins only its first one's group;
* **aliasing**: ops in a variable's group return views of the variable, so
  their outputs add no memory on their device (``output_bytes`` 0) while their
  edges still carry the size, so a copy sent elsewhere is counted there;
* **loops**: edges out of ``NextIteration`` ops are while-loop back edges and
  are cut, so the graph is a DAG; the count is kept in ``cut_back_edges``;
* **the step only**: the DOT files hold the whole TensorFlow graph, with the
  variable initialisers, ``save/`` and ``init`` ops that a training step never
  runs (their outputs would be weight-sized tensors in the model). When a
  profile exists, only the ops it saw run and every op feeding them are kept;
  the number removed is kept in ``pruned_nodes``. ``keep_unexecuted=True``
  keeps the whole graph, as ParDNN did.
"""

from __future__ import annotations

import logging
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Iterable

from pardnn.analysis import topologically_sorted
from pardnn.errors import InputError
from pardnn.fileio import read_json, read_text
from pardnn.ir import GraphBuilder, OpGraph

from ..common import robust_average

log = logging.getLogger("pardnn.frontends.peers")
_VAR_OPS = {"VariableV2", "Variable", "VarHandleOp", "VariableV1"}
_SIZE_LINE = re.compile(r'^\s*"(.*)"\s*:{1,2}\s*(-?\d+)\s*,?\s*$')
_ENDPOINT = re.compile(r'^\s*(?:"((?:[^"\\]|\\.)*)"|(\^?[\w.][\w./\\-]*))(?::(\d+))?\s*$')
"""A node: a quoted name, or an unquoted one of letters, digits, ``_ . / \\ -`` (a TensorFlow op's name), with
``^`` before it for a control input; then an optional ``:port``."""
_HEADER = re.compile(r'^(?:strict\s+)?(?:di)?graph(?:\s*"(?:[^"\\]|\\.)*"|\s+[\w.]+)?\s*\{?$', re.IGNORECASE)
"""``digraph {``, ``digraph name {``, ``strict digraph "name"``: the statement that opens a DOT graph."""
_SKIPPED = re.compile(r'^(?:(?:graph|node|edge)\s*\[.*\]|[\w.]+\s*=\s*(?:"(?:[^"\\]|\\.)*"|[\w.]+)|\{|\})\s*;?$',
                      re.IGNORECASE)
"""Statements that are not nodes: default attributes (``node [shape=box]``), a graph attribute
(``rankdir=LR``), and braces."""


def _endpoint(text: str, source: str, lineno: int) -> tuple[str, int]:
    m = _ENDPOINT.match(text)
    if not m:
        raise InputError(f"{source}:{lineno}: cannot read a node name from {text.strip()!r}")
    return (m.group(1) if m.group(1) is not None else m.group(2)), int(m.group(3) or 0)


def parse_dot(text: str, source: str = "graph.dot") -> tuple[list[str], list[tuple[str, str, int, bool]]]:
    """Node names (in first-seen order) and edges ``(src, dst, port, control)``."""
    seen: dict[str, None] = {}
    edges: list[tuple[str, str, int, bool]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("//", "#")) or _HEADER.match(line) or _SKIPPED.match(line) or \
                line.startswith("/*") and line.endswith("*/"):
            continue
        line = re.sub(r"\s*\[[^\]]*\]\s*;?\s*$", "", line).rstrip(";").strip()
        if not line:
            raise InputError(f"{source}:{lineno}: attributes without a node: {raw.strip()[:80]!r}")
        if "->" not in line:
            name, _ = _endpoint(line, source, lineno)
            seen.setdefault(name.lstrip("^"), None)
            continue
        left, right = line.split("->", 1)
        src, port = _endpoint(left, source, lineno)
        dst, _ = _endpoint(right, source, lineno)
        control = src.startswith("^")
        src = src.lstrip("^")
        dst = dst.lstrip("^")
        seen.setdefault(src, None)
        seen.setdefault(dst, None)
        edges.append((src, dst, 0 if control else port, control))
    return list(seen), edges


def parse_sizes(text: str, source: str = "sizes") -> tuple[dict[str, int], int]:
    """``"name": B,`` / ``"name":: B`` lines, and how many damaged lines were skipped.

    ``-1`` stays -1 (unknown). A few damaged lines (the shipped Inception table
    has one with a truncated name) are skipped with a warning; a file where
    more than 1% of lines are unreadable is not a size table and is an error.
    """
    out: dict[str, int] = {}
    bad: list[tuple[int, str]] = []
    lines = text.splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.strip() in ("{", "}"):
            continue
        m = _SIZE_LINE.match(line)
        if not m:
            bad.append((lineno, line))
            continue
        size = int(m.group(2))
        if size < -1:
            raise InputError(f"{source}:{lineno}: size of {m.group(1)[:80]!r} is {size}: a size is bytes, 0 or "
                             "more, or -1 for unknown")
        out[m.group(1)] = size
    if len(bad) > max(3, len(lines) // 100):
        lineno, line = bad[0]
        raise InputError(f"{source}:{lineno}: expected '\"name\": bytes', got {line.strip()[:80]!r}")
    for lineno, line in bad:
        log.warning("%s:%d: skipping damaged size line %r", source, lineno, line.strip()[:80])
    return out, len(bad)


def parse_durations(text: str, source: str = "durations") -> dict[str, float]:
    """``name::us`` lines, split at the last ``::``; keys lowercased for matching."""
    out: dict[str, float] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, value = line.rstrip("\r\n").rpartition("::")
        if not sep:
            raise InputError(f"{source}:{lineno}: expected 'name::microseconds', got {line.strip()[:80]!r}")
        try:
            us = float(value)
        except ValueError:
            raise InputError(f"{source}:{lineno}: duration of {name!r} is not a number: {value!r}") from None
        if not 0 <= us < math.inf:
            raise InputError(f"{source}:{lineno}: duration of {name!r} is {value.strip()!r}: a duration is "
                             "microseconds, finite and 0 or more")
        out[name.lower()] = us
    return out


def timeline_op_times(trace: dict, source: str = "timeline") -> tuple[dict[str, float], dict[str, str]]:
    """Per-op time (us) and op type from one TensorFlow Chrome-trace timeline."""
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise InputError(f"{source}: not a Chrome trace (no \"traceEvents\" list)")
    for i, e in enumerate(events):
        if not isinstance(e, dict) or not isinstance(e.get("args", {}), (dict, type(None))):
            raise InputError(f"{source}: traceEvents[{i}] is not an event object (with an \"args\" object)")
        pid, name = e.get("pid"), (e.get("args") or {}).get("name")
        if isinstance(pid, (list, dict)) or name is not None and not isinstance(name, str):
            raise InputError(f"{source}: traceEvents[{i}]: \"pid\" must be a number or string and \"args.name\" "
                             "a string")
    rows = {e.get("pid"): (e.get("args") or {}).get("name", "") for e in events
            if e.get("ph") == "M" and e.get("name") == "process_name"}
    kernel: dict[str, float] = defaultdict(float)
    host: dict[str, float] = defaultdict(float)
    types: dict[str, str] = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        args = e.get("args") or {}
        name = args.get("name")
        if not name:
            continue
        row = rows.get(e.get("pid"), "")
        if not row.endswith("Compute") or "memcpy" in row:
            continue
        dur = e.get("dur", 0)
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or not 0 <= dur < math.inf:
            raise InputError(f"{source}: the event of {name!r} has a \"dur\" that is not a finite number, 0 or "
                             f"more: {dur!r}")
        if "stream:all" in row:
            kernel[name] += float(dur)
        elif "/stream:" in row:
            continue   # per-stream rows repeat stream:all
        else:
            host[name] += float(dur)
            if "op" in args:
                types.setdefault(name, args["op"])
    times = dict(host)
    times.update(kernel)
    return times, types


def _ancestors_of_executed(names: list[str], edges: list[tuple[str, str, int, bool]], executed) -> set[str]:
    """The executed ops and every op they (transitively) depend on."""
    preds: dict[str, list[str]] = defaultdict(list)
    for s, d, _, _ in edges:
        preds[d].append(s)
    keep = {n for n in names if executed(n)}
    stack = list(keep)
    while stack:
        n = stack.pop()
        for p in preds.get(n, ()):
            if p not in keep:
                keep.add(p)
                stack.append(p)
    return keep


def _find(directory: Path, candidates: Iterable[str]) -> Path | None:
    for c in candidates:
        p = directory / c
        if p.exists():
            return p
    return None


def _last_component(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _op_type(name: str) -> str:
    return re.sub(r"_\d+$", "", _last_component(name))


def side_files(path: str | Path) -> tuple[Path | None, list[Path], Path | None]:
    """The side files `load_pardnn_dot` reads for the DOT file ``path`` when none are given: (sizes,
    timelines, durations); the durations only where there are no timelines."""
    here = Path(path).parent
    sizes = _find(here, ["tensors_sz.txt", "tensors_sz_32.txt", "tensors_sz_32.txt.gz", "../full/tensors_sz_32.txt.gz"])
    profs = here / "profs"
    found = sorted(profs.glob("*.json")) + sorted(profs.glob("*.json.gz")) if profs.is_dir() else []
    durations = None if found else _find(here, ["time_steps_32/nodes_average_durations.txt",
                                                "../full/time_steps_32/nodes_average_durations.txt.gz"])
    return sizes, found, durations


def load_pardnn_dot(path: str | Path, *, sizes: str | Path | None = None, durations: str | Path | None = None,
                    timelines: list[str | Path] | None = None, name: str | None = None,
                    keep_unexecuted: bool = False) -> OpGraph:
    """Read a ParDNN DOT graph with its side files (see the module docstring)."""
    p = Path(path)
    found_sizes, found_timelines, found_durations = side_files(p)
    if sizes is None:
        sizes = found_sizes
    if timelines is None and durations is None:
        if found_timelines:
            timelines = found_timelines
        else:
            durations = found_durations
    names, edges = parse_dot(read_text(p), str(p))
    size_of, skipped = parse_sizes(read_text(sizes), str(sizes)) if sizes else ({}, 0)
    time_of: dict[str, float] = {}
    lower_time: dict[str, float] = {}
    op_types: dict[str, str] = {}
    if timelines:
        samples: dict[str, list[float]] = defaultdict(list)
        for t in timelines:
            trace = read_json(t)
            times, types = timeline_op_times(trace, str(t))
            for k, v in times.items():
                samples[k].append(v)
            for k, v in types.items():
                op_types.setdefault(k, v)
        time_of = {k: robust_average(v) for k, v in samples.items()}
    elif durations:
        lower_time = parse_durations(read_text(durations), str(durations))

    def duration(n: str) -> float | None:
        if n in time_of:
            return time_of[n]
        return lower_time.get(n.lower())

    # Cut while-loop back edges.
    kept, cut = [], 0
    for e in edges:
        if _last_component(e[0]).startswith("NextIteration"):
            cut += 1
        else:
            kept.append(e)
    # Keep the step: profiled ops and their ancestors.
    pruned = 0
    if (time_of or lower_time) and not keep_unexecuted:
        step = _ancestors_of_executed(names, kept, lambda n: duration(n) is not None)
        pruned = len(names) - len(step)
        if step:
            names = [n for n in names if n in step]
            kept = [e for e in kept if e[0] in step and e[1] in step]
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for s, d, _, control in kept:
        if not control:
            preds[d].append(s)
            succs[s].append(d)

    def is_variable(n: str) -> bool:
        if op_types.get(n) in _VAR_OPS:
            return True
        if preds.get(n):
            return False
        marks = (f"{n}/read", f"{n}/Assign", f"{n}/Read/ReadVariableOp")
        return any(s in marks or s.startswith(f"{n}/IsInitialized/") for s in succs.get(n, ()))

    variables = [n for n in names if is_variable(n)]
    var_set = set(variables)
    # Union-find over variables, through optimizer Apply ops.
    parent = {v: v for v in variables}

    def find(v: str) -> str:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    consumer_vars: dict[str, list[str]] = defaultdict(list)
    for v in variables:
        for c in succs.get(v, ()):
            if c not in var_set and v not in consumer_vars[c]:
                consumer_vars[c].append(v)
    for c, vs in consumer_vars.items():
        if len(vs) > 1 and "Apply" in _last_component(c):
            for v in vs[1:]:
                parent[find(v)] = find(vs[0])
    group_of: dict[str, str] = {v: f"var:{find(v)}" for v in variables}
    for c, vs in consumer_vars.items():
        group_of[c] = f"var:{find(vs[0])}"

    def nbytes(n: str) -> int:
        s = size_of.get(n, -1)
        return s if s > 0 else 0

    persistent = {v: max([nbytes(v)] + [nbytes(c) for c in succs.get(v, ()) if c not in var_set]) for v in variables}
    model = name or p.name.split(".")[0].replace("_dot", "")
    b = GraphBuilder(f"pardnn-{model}", source=str(p))
    b.meta = {"source_format": "pardnn-dot", "source_file": p.name, "cut_back_edges": cut, "pruned_nodes": pruned, "skipped_size_lines": skipped,
              "sizes_file": Path(sizes).name if sizes else None,
              "duration_source": ("timelines" if timelines else "durations" if durations else "none")}
    for n in names:
        t = duration(n)
        extra = {} if t is not None else {"profiled": False}
        aliasing = n in group_of and n not in var_set
        b.add_node(n, op_types.get(n, _op_type(n)), time_us=t if t is not None else 1.0,
                   output_bytes=[0 if (aliasing or n in var_set) else nbytes(n)],
                   persistent_bytes=persistent.get(n, 0), colocation=group_of.get(n), **extra)
    for s, d, port, control in kept:
        if control:
            b.add_edge(s, d, control=True)
        else:
            size = persistent[s] if s in var_set else nbytes(s)
            b.add_edge(s, d, port=port, bytes=size if port == 0 else 0)
    return topologically_sorted(b.build())
