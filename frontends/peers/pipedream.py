"""PipeDream profiler ``graph.txt`` to a training-step ``pardnn.graph``.

PipeDream profiles each layer (module) of a model: forward and backward time
in milliseconds, activation size and parameter size in bytes, and the layer
DAG of the forward pass. A training step is built from it:

* **forward node** ``nodeN`` per layer: ``time_us`` = forward ms x 1000;
  ``output_bytes`` = the activation size(s) (a list for multi-output modules);
  ``persistent_bytes`` = the parameter size (weights; optimizer state is not
  recorded by PipeDream and is not invented here);
* **backward node** ``nodeN/grad`` per non-input layer: ``time_us`` = backward
  ms x 1000; one output, the gradient with respect to its inputs (the sum of
  its producers' first activations); ``temp_bytes`` = the parameter size (the
  weight gradient it produces);
* **edges**: each forward edge ``u -> v`` carries ``u``'s first activation
  (the format does not say which output of a multi-output module an edge
  carries, so it is taken to be the first); the gradient flows back
  ``v/grad -> u/grad`` with the same size; each backward node reads the
  stashed input activations of its layer (``u -> v/grad``), and a layer with
  no successors starts the backward pass from its own output (``v -> v/grad``);
* a layer with parameters keeps its forward and backward nodes in one
  colocation group (``layer:nodeN``), as both use its weights (MSR's graphs
  group them the same way);
* **gaps**: an ``Input`` node (``Input``, ``Input0``, ...)'s forward time is data loading, not compute: it
  gets ``time_us`` 0 and keeps the measured value in ``data_loading_us``.

Nodes are written in topological order: forward layers, then backward ones
in reverse. A layer or an edge given twice, and a metric that is negative or
not finite, are errors naming the line.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import networkx as nx

from pardnn.errors import InputError
from pardnn.fileio import read_text
from pardnn.ir import GraphBuilder, OpGraph

_METRIC = re.compile(r"(\w+)=(\[[^\]]*\]|[-+0-9.eE]+)")


def _sizes(text: str) -> list[float]:
    text = text.strip()
    if text.startswith("["):
        return [float(x) for x in text.strip("[]").split(";") if x.strip()]
    return [float(text)]


def parse_pipedream(text: str, source: str = "graph.txt") -> tuple[dict[str, dict], list[tuple[str, str]]]:
    """Layers (id -> fields) and forward edges of a PipeDream ``graph.txt``."""
    layers: dict[str, dict] = {}
    line_of: dict[str, int] = {}
    edges: list[tuple[str, str]] = []
    edge_line: dict[tuple[str, str], int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        if raw.startswith("\t"):
            parts = raw.strip().split(" -- ")
            if len(parts) != 2:
                raise InputError(f"{source}:{lineno}: expected an edge 'a -- b', got {raw.strip()!r}")
            e = (parts[0].strip(), parts[1].strip())
            if e in edge_line:
                raise InputError(f"{source}:{lineno}: the edge {e[0]} -- {e[1]} is given twice "
                                 f"(first at line {edge_line[e]})")
            edge_line[e] = lineno
            edges.append(e)
            continue
        parts = raw.split(" -- ")
        if len(parts) < 3:
            raise InputError(f"{source}:{lineno}: expected 'id -- module -- metrics', got {raw[:80]!r}")
        nid, desc, metrics = parts[0].strip(), " -- ".join(parts[1:-1]).strip(), parts[-1]
        if nid in line_of:
            raise InputError(f"{source}:{lineno}: layer {nid!r} is given twice (first at line {line_of[nid]})")
        line_of[nid] = lineno
        fields = dict(_METRIC.findall(metrics))
        try:
            layers[nid] = {
                "desc": desc,
                "fwd_ms": float(fields["forward_compute_time"]),
                "bwd_ms": float(fields["backward_compute_time"]),
                "act": _sizes(fields["activation_size"]),
                "params": float(fields["parameter_size"]),
            }
        except (KeyError, ValueError) as exc:
            raise InputError(f"{source}:{lineno}: layer {nid!r}: missing or bad metric ({exc})") from None
        L = layers[nid]
        for what, v in (("forward_compute_time", L["fwd_ms"]), ("backward_compute_time", L["bwd_ms"]),
                        *(("activation_size", a) for a in L["act"]), ("parameter_size", L["params"])):
            if not 0 <= v < math.inf:
                raise InputError(f"{source}:{lineno}: layer {nid!r}: {what} is {v:g}; it must be finite and "
                                 "0 or more")
    for a, b in edges:
        for n in (a, b):
            if n not in layers:
                raise InputError(f"{source}: edge {a} -- {b} names unknown layer {n!r}")
    return layers, edges


def _module_type(desc: str) -> str:
    return desc.split("(", 1)[0].strip() or "Layer"


def _layer_key(nid: str) -> tuple:
    m = re.search(r"(\d+)$", nid)
    return (int(m.group(1)) if m else 0, nid)


def load_pipedream(path: str | Path, *, name: str | None = None) -> OpGraph:
    """Read a PipeDream ``graph.txt`` as a training step (see the module docstring)."""
    p = Path(path)
    layers, edges = parse_pipedream(read_text(p), str(p))
    dag = nx.DiGraph()
    dag.add_nodes_from(layers)
    dag.add_edges_from(edges)
    try:
        order = list(nx.lexicographical_topological_sort(dag, key=_layer_key))
    except nx.NetworkXUnfeasible:
        cyc = nx.find_cycle(dag)
        raise InputError(f"{p}: the layer graph has a cycle through layer {cyc[0][0]!r}") from None
    is_input = {n: re.fullmatch(r"Input\d*", _module_type(layers[n]["desc"])) is not None for n in layers}
    model = name or (p.parent.name if p.name.startswith("graph") else p.stem)
    b = GraphBuilder(f"pipedream-{model}", source=str(p))
    b.meta = {"source_format": "pipedream", "source_file": p.name}

    def act0(n: str) -> int:
        return int(layers[n]["act"][0]) if layers[n]["act"] else 0

    for n in order:
        L = layers[n]
        group = f"layer:{n}" if L["params"] > 0 else None
        extra = {"phase": "forward", "module": L["desc"]}
        if is_input[n]:
            extra["data_loading_us"] = L["fwd_ms"] * 1000.0
        b.add_node(n, _module_type(L["desc"]), time_us=0.0 if is_input[n] else L["fwd_ms"] * 1000.0,
                   output_bytes=[int(x) for x in L["act"]], persistent_bytes=int(L["params"]),
                   colocation=group, **extra)
    for u, v in edges:
        b.add_edge(u, v, bytes=act0(u))
    for n in reversed(order):
        if is_input[n]:
            continue
        L = layers[n]
        preds = [u for u in dag.predecessors(n)]
        grad_bytes = sum(act0(u) for u in preds)
        b.add_node(f"{n}/grad", _module_type(L["desc"]) + "Grad", time_us=L["bwd_ms"] * 1000.0,
                   output_bytes=[grad_bytes], temp_bytes=int(L["params"]),
                   colocation=f"layer:{n}" if L["params"] > 0 else None, phase="backward")
        succs = [s for s in dag.successors(n)]
        if not succs:
            b.add_edge(n, f"{n}/grad", bytes=act0(n))
        for s in sorted(succs, key=_layer_key):
            b.add_edge(f"{s}/grad", f"{n}/grad", bytes=act0(n))
        for u in sorted(preds, key=_layer_key):
            b.add_edge(u, f"{n}/grad", bytes=act0(u))
    return b.build()
