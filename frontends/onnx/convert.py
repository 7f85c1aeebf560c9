"""A prepared ONNX model as a ``pardnn.graph`` (the rules are listed in `pardnn.frontends.onnx`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterable, Mapping

import onnx

from pardnn.analysis import topologically_sorted
from pardnn.errors import InputError
from pardnn.ir import FORWARDED_AS, GraphBuilder, OpGraph

from .model import _GRAD_BUFFER_SUFFIX, PreparedModel
from .training_ops import _GRAD_NAME, STATE_UPDATE_OPS

TimeFn = Callable[[onnx.NodeProto], tuple[float, float]]   # node -> (time_us, flops)

FORWARDING_OPS = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})
"""ONNX ops whose output 0 may be their input 0's buffer (onnxruntime's kernels declare the alias): the
input's edge is marked ``forwarded_as`` 0, so the output allocates nothing on its own device."""


def subgraph_captures(node: onnx.NodeProto) -> list[str]:
    """Outer-scope values a node's subgraphs (``If``/``Loop``/``Scan`` bodies) read, in first-use order."""
    out: list[str] = []
    for a in node.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs) \
            if a.type == onnx.AttributeProto.GRAPHS else []
        for g in graphs:
            local = {i.name for i in g.input} | {t.name for t in g.initializer}
            for n in g.node:
                for name in list(n.input) + subgraph_captures(n):
                    if name and name not in local and name not in out:
                        out.append(name)
                local.update(o for o in n.output if o)
    return out


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Every value a node reads: its inputs (once each, in order) and its subgraphs' outer captures."""
    seen: list[str] = []
    for name in list(node.input) + subgraph_captures(node):
        if name and name not in seen:
            seen.append(name)
    return seen


def training_state(pm: PreparedModel) -> tuple[dict[str, str], set[str]]:
    """Parameters and gradient buffers among the graph inputs of a training graph.

    Returns ``{input name: parameter it belongs to}`` (a parameter maps to
    itself, its ``P_grad.accumulation.buffer`` to ``P``) and the set of
    buffers. A graph input ``P`` is a parameter when the graph has its
    gradient buffer or computes ``P_grad``.
    """
    feeds = pm.feed_names
    produced = {o for n in pm.graph.node for o in n.output if o}
    owner: dict[str, str] = {}
    buffers: set[str] = set()
    feed_set = set(feeds)
    for name in feeds:
        if name.endswith(_GRAD_BUFFER_SUFFIX) and name[:-len(_GRAD_BUFFER_SUFFIX)] in feed_set:
            owner[name] = name[:-len(_GRAD_BUFFER_SUFFIX)]
            buffers.add(name)
    for name in feeds:
        if name in buffers:
            continue
        if name + _GRAD_BUFFER_SUFFIX in feed_set or name + "_grad" in produced:
            owner[name] = name
    return owner, buffers


def node_phase(node: onnx.NodeProto) -> str:
    """``forward``, ``backward`` or ``optimizer`` for a node of an onnxruntime-training graph.

    Gradient nodes carry ``_Grad/`` in their names or produce ``T_grad``
    values; in-place state updates (gradient accumulators, optimizers) are
    ``optimizer``; the rest is the forward pass (the loss included).
    """
    if node.op_type in STATE_UPDATE_OPS:
        return "optimizer"
    if "_Grad/" in node.name or (node.domain == "com.microsoft" and node.op_type.endswith(("Grad", "Grad_dX"))) \
            or any(_GRAD_NAME.match(o) for o in node.output if o):
        return "backward"
    return "forward"


class _Names:
    """Claims unique node names: compute nodes first, then prefixed names for inputs, weights and outputs."""

    def __init__(self, taken: Iterable[str]):
        self.taken = set(taken)

    def claim(self, want: str) -> str:
        name = want
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name


def to_graph(pm: PreparedModel, time_fn: TimeFn, *, name: str, source: str | None = None,
             meta: Mapping | None = None) -> OpGraph:
    """The pardnn graph of ``pm``; ``time_fn`` gives each node's time and FLOPs."""
    g = pm.graph
    nodes = list(g.node)
    tensors = pm.tensors
    training = pm.is_training
    inits = {t.name: t for t in g.initializer}
    feeds = pm.feed_names
    outputs = [o.name for o in g.output]

    reads = [node_reads(n) for n in nodes]
    producer: dict[str, tuple[int, int]] = {}
    for i, n in enumerate(nodes):
        for port, o in enumerate(n.output):
            if o:
                producer[o] = (i, port)
    consumers: dict[str, list[int]] = defaultdict(list)
    for i, rs in enumerate(reads):
        for t in rs:
            consumers[t].append(i)
    for o in outputs:
        consumers[o].append(-1)   # fetched by the caller

    owner, buffers = training_state(pm) if training else ({}, set())
    phases = [node_phase(n) if training else "forward" for n in nodes]

    b = GraphBuilder(name, source=source)
    names = _Names(n.name for n in nodes)
    node_of_input: dict[str, str] = {}
    node_of_init: dict[str, str] = {}
    folded: dict[int, int] = defaultdict(int)     # node index -> bytes of weights it alone reads
    group: dict[str, str] = {}

    def nbytes(t: str) -> int:
        info = tensors.get(t)
        if info is None:
            raise InputError(f"{pm.path}: value {t!r} has no known shape")
        return info.nbytes

    # Graph inputs: activations fed by the caller; parameters and gradient buffers are persistent state.
    for t in feeds:
        v = names.claim(f"input:{t}")
        node_of_input[t] = v
        if t in owner:
            kind = "GradientBuffer" if t in buffers else "Parameter"
            phase = "optimizer" if t in buffers else "forward"
            b.add_node(v, kind, output_bytes=[0], persistent_bytes=nbytes(t), onnx_value=t, phase=phase)
            group[v] = f"param:{owner[t]}"
        else:
            b.add_node(v, "Input", output_bytes=[nbytes(t)], onnx_value=t, phase="forward")

    # Initializers: the one node that reads a weight holds it; a weight read by several gets its own node.
    for t, tp in inits.items():
        users = consumers.get(t, [])
        size = nbytes(t)
        if len(users) == 1 and users[0] >= 0:
            folded[users[0]] += size
            continue
        if not users:
            continue   # unused weight: onnxruntime drops it too
        v = names.claim(f"init:{t}")
        node_of_init[t] = v
        first = min(u for u in users if u >= 0) if any(u >= 0 for u in users) else None
        b.add_node(v, "Initializer", output_bytes=[0], persistent_bytes=size, onnx_value=t,
                   phase=phases[first] if first is not None else "forward")

    # Compute nodes.
    for i, n in enumerate(nodes):
        time_us, flops = time_fn(n)
        extra = {"phase": phases[i]}
        if pm.original_names[i] != n.name:
            extra["onnx_name"] = pm.original_names[i]
        if n.domain not in ("", "ai.onnx"):
            extra["domain"] = n.domain
        if flops:
            extra["flops"] = flops
        if n.op_type == "Constant":   # a weight written as a node: held, not computed
            size = sum(nbytes(o) for o in n.output if o)
            b.add_node(n.name, n.op_type, output_bytes=[0] * len(n.output), persistent_bytes=size + folded[i],
                       **extra)
            continue
        out_bytes = [nbytes(o) if o else 0 for o in n.output]
        b.add_node(n.name, n.op_type, time_us=time_us, output_bytes=out_bytes, persistent_bytes=folded[i], **extra)

    phase_of = {n.name: phases[i] for i, n in enumerate(nodes)}
    phase_of.update({v: ("optimizer" if t in buffers else "forward") for t, v in node_of_input.items()})

    def source_of(t: str, reader: str) -> tuple[str, int, int | None]:
        if t in producer:
            j, port = producer[t]
            src = nodes[j]
            return src.name, port, (nbytes(t) if src.op_type == "Constant" else None)
        if t in node_of_input:
            return node_of_input[t], 0, (nbytes(t) if t in owner else None)
        if t in node_of_init:
            return node_of_init[t], 0, nbytes(t)
        raise InputError(f"{pm.path}: node {reader!r} reads {t!r}, which no node, input or initializer provides")

    for i, n in enumerate(nodes):
        forwards = n.op_type in FORWARDING_OPS and n.domain in ("", "ai.onnx") and len(n.input) > 0 \
            and bool(n.input[0]) and len(n.output) > 0 and bool(n.output[0])
        for t in reads[i]:
            if t in inits and t not in node_of_init:
                continue   # folded into this node
            try:
                src, port, size = source_of(t, n.name)
            except InputError:
                if t not in n.input:   # a subgraph value defined in an enclosing body, not the graph
                    continue
                raise
            extra = {}
            if forwards and t == n.input[0]:
                extra[FORWARDED_AS] = 0
                forwards = False      # one edge forwards (a value read twice is one buffer)
            b.add_edge(src, n.name, port=port, bytes=size, **extra)

    # Training state: a parameter, its gradient buffer and the ops that update it in place share a device.
    if training:
        for i, n in enumerate(nodes):
            if n.op_type in STATE_UPDATE_OPS:
                for t in n.input:
                    if t in buffers:
                        group[n.name] = f"param:{owner[t]}"
    # Outputs: a sink per graph output, on the device that computes it (no transfer charged).
    for o in outputs:
        src, port, size = source_of(o, f"output:{o}")
        v = names.claim(f"output:{o}")
        grp = group.get(src) or f"output:{src}"
        group[src] = grp
        group[v] = grp
        b.add_node(v, "Output", output_bytes=[], onnx_value=o, phase=phase_of.get(src, "forward"))
        b.add_edge(src, v, port=port, bytes=size if size is not None else nbytes(o))
    for v, grp in group.items():
        b.set_colocation(v, grp)
    b.meta = dict(meta or {})
    return topologically_sorted(b.build())
