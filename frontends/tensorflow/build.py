"""Turn a flat `TFModel` into a weighted `OpGraph` (costs, groups, pins, phases).

Per node and output port:

* **tensor bytes** (what an edge carries to another device): the profiled
  ``requested_bytes`` when the node was profiled, else the static shape's
  elements times the dtype size. Resource handles count 0 (the variable's
  bytes are its ``persistent_bytes``), and so do variants and strings,
  whose size is not static.
* **output bytes** (memory the output takes on its own device): the tensor
  bytes, except outputs that alias memory already counted as persistent:
  variable reads (``ReadVariableOp``, ``Identity`` of a ref variable) and
  constants, which are 0.
* **forwarded outputs**: an op that hands its input's buffer on
  (``Identity``, ``IdentityN``, ``Reshape``, ``Squeeze``, ``ExpandDims``,
  ``StopGradient``, ``Snapshot``, ...: `FORWARDING_OPS`) marks that input's
  edge ``forwarded_as`` its output port, so the output allocates nothing on
  its own device and keeps the input's buffer alive instead
  (docs/machine-model.md).
* **persistent bytes**: a variable's shape times its dtype size (model
  weights and optimizer slots alike); a constant's tensor bytes.
* **time**: the profile's robust per-step average (a loop body's ops summed
  over the iterations; the executor's overhead per execution included,
  `profile`), or the roofline estimate (`costs`) on
  ``--device-profile``, times the trip counts of the loops around the op
  (`loops`).
* **unknown dimensions** take ``--batch-size``. Without it, an unknown
  dimension in a size the graph needs is an `InputError` naming the node.

``NextIteration -> Merge`` edges (while-loop back edges) are left out of the
`OpGraph`, so it is a DAG; they stay in the GraphDef. In their place, control
edges keep each loop's body after all of its ``Enter`` ops and before its
``Exit`` ops (`loops.order_edges`), as the iterations would. Nodes are written in a
topological order that keeps the GraphDef's order where it can.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from pardnn.analysis import topologically_sorted
from pardnn.errors import InputError
from pardnn.ir import FORWARDED_AS, GraphBuilder, OpGraph

from ..roofline import get_profile
from . import loops
from ._tf import tf
from .colocation import HOST_DEVICE, VARIABLE_OPS, colocation
from .costs import estimate_time_us
from .model import TFModel, parse_input, split_tensor_name
from .phases import label_phases, phase_counts
from .profile import Profile, run_profile
from .shapes import (TensorInfo, format_shape, import_graph, static_tensor_info, with_batch,
                     without_back_edges)

log = logging.getLogger("pardnn.frontends.tensorflow")

BACK_EDGE_SOURCES = loops.NEXT_OPS
FORWARDING_OPS = frozenset({"Identity", "Snapshot", "StopGradient", "PreventGradient", "CheckNumerics",
                            "EnsureShape", "Reshape", "Squeeze", "ExpandDims", "PlaceholderWithDefault",
                            "DebugIdentity", "DebugIdentityV2"})
"""Ops whose output 0 is their first input's buffer (`forwarded_output`; IdentityN forwards every input)."""
_UNARY = ("Abs", "Neg", "Sign", "Reciprocal", "Inv", "Square", "Sqrt", "Rsqrt", "Exp", "Expm1", "Log", "Log1p",
          "Sin", "Cos", "Tan", "Tanh", "Sigmoid", "Erf", "Erfc", "Floor", "Ceil", "Rint", "Round", "Relu", "Relu6",
          "Elu", "Selu", "LeakyRelu", "Softplus", "Softsign", "Softmax", "LogSoftmax", "OnesLike", "ZerosLike")
_BINARY = ("Add", "AddV2", "Sub", "Mul", "MulNoNan", "RealDiv", "Div", "DivNoNan", "Maximum", "Minimum", "Pow",
           "SquaredDifference", "FloorDiv", "FloorMod", "TruncateDiv", "TanhGrad", "SigmoidGrad", "RsqrtGrad",
           "SqrtGrad", "ReciprocalGrad", "InvGrad")
_GRADIENT = ("ReluGrad", "Relu6Grad", "EluGrad", "SeluGrad", "LeakyReluGrad", "SoftplusGrad", "SoftsignGrad",
             "BiasAdd", "BiasAddV1")
_SHARED_SOURCES = frozenset({"IdentityN", "Placeholder", "Enter", "RefEnter", "Merge", "RefMerge", "Switch",
                             "RefSwitch", "Exit", "RefExit", "NextIteration", "RefNextIteration"})
"""Sources whose output buffer something else may still hold (the caller's feed, a loop frame)."""
VIEW_SOURCES = frozenset({"Slice", "StridedSlice", "Split", "SplitV", "Unpack", "Cast", "Transpose",
                          "ConjugateTranspose", "BroadcastTo", "Bitcast", "TensorListGetItem", "TensorListStack",
                          "TensorListPopBack", "TensorArrayReadV3", "TensorArrayGatherV3"})
"""Sources whose output may share another tensor's buffer at run time: a slice or split along the first axis
is a view of its input (TensorFlow's ``Tensor::Slice``), a Cast to the same dtype, a Transpose by the identity
permutation and a BroadcastTo of the same shape hand their input on, and a list or array element stays held by
its list. A kernel never writes into such a buffer (it does not own its memory, or is not the only reference),
so an element-wise op reading one allocates its output. Which of them is a view depends on run-time details
(alignment, the permutation's value); the rule takes the safe side: never forwarded into."""
INPLACE_OPS: dict[str, tuple[int, ...] | None] = {
    **{op: (0,) for op in _UNARY + _GRADIENT}, **{op: (0, 1) for op in _BINARY}, "AddN": None}
"""Element-wise ops whose kernels write their output into an input's buffer when nothing else holds it
(TensorFlow's ``forward_input_or_allocate_output``): the inputs they try, in order (None: every input)."""


@dataclass(frozen=True, eq=False)
class TFImport:
    """The result of importing a TensorFlow model.

    ``graph`` is the weighted `OpGraph` whose node names are ``model.graph_def``'s
    node names; ``model`` is what the backend needs to place and run it.
    """

    graph: OpGraph
    model: TFModel
    profile: Profile | None = None


def _unknown(where: str, name: str, op: str, port: int, shape) -> InputError:
    return InputError(f"{where}: node {name!r} ({op}) output {port} has shape {format_shape(shape)} with an "
                      "unknown dimension; pass --batch-size N to use N for unknown dimensions")


def _static_bytes(info: TensorInfo, fill: int | None, where: str, name: str, op: str, port: int) -> int:
    n = info.nbytes(fill)
    if n is None:
        raise _unknown(where, name, op, port, info.shape)
    return int(n)


def _variable_bytes(node_def, fill: int | None, where: str, *, strict: bool = True) -> int | None:
    """A variable's bytes, unknown dimensions taking ``fill``; where that leaves it unsized, an error (or
    None when not ``strict``)."""
    dtype = tf.dtypes.as_dtype(node_def.attr["dtype"].type)
    shape_proto = node_def.attr["shape"].shape
    dims = None if shape_proto.unknown_rank else tuple(d.size if d.size >= 0 else None for d in shape_proto.dim)
    info = TensorInfo(dtype, dims)
    n = info.nbytes(fill)
    if n is None and not strict:
        return None
    if n is None:
        raise InputError(f"{where}: variable {node_def.name!r} has shape {format_shape(dims)} with an unknown "
                         "dimension; pass --batch-size N to use N for it")
    return int(n)


def to_opgraph(model: TFModel, *, profile_steps: int = 0, batch_size: int | None = None,
               device_profile: str = "h100", name: str | None = None) -> TFImport:
    """Weigh ``model``'s graph (rules in the module docstring) and return it with the model."""
    where = model.source or model.name
    try:
        device = get_profile(device_profile)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    gd = with_batch(model.graph_def, model.feeds, batch_size)
    node_defs = {n.name: n for n in gd.node}
    names = [n.name for n in gd.node]
    back_edges = [(src, n) for n in names for src, _, control in map(parse_input, node_defs[n].input)
                  if not control and node_defs[src].op in BACK_EDGE_SOURCES]
    analysed = without_back_edges(gd)
    graph = import_graph(analysed, where=where)
    roots = [split_tensor_name(t)[0] for t in model.fetches] + list(model.targets)
    info = static_tensor_info(graph, analysed, roots)
    prof = run_profile(model, profile_steps, batch_size=batch_size) if profile_steps > 0 else None

    # Tensor bytes per (node, port); ``fills``: the sizes that took --batch-size for an unknown dimension
    tensor_bytes: dict[str, list[int]] = {}
    fills = 0
    for n in names:
        nd = node_defs[n]
        outs = info[n]
        measured = prof.output_bytes.get(n, {}) if prof else {}
        sizes = []
        for port, t in enumerate(outs):
            if t.dtype.base_dtype == tf.resource:
                sizes.append(0)
            elif port in measured:
                sizes.append(int(measured[port]))
            else:
                fills += t.nbytes() is None
                sizes.append(_static_bytes(t, batch_size, where, n, nd.op, port))
        tensor_bytes[n] = sizes

    frame = loops.frames([op.name for op in graph.get_operations()], node_defs, BACK_EDGE_SOURCES)
    coloc = colocation(graph, names, node_defs, extra_edges=back_edges, frames=frame)
    b = GraphBuilder(name or model.name, source=where)
    allocated: dict[str, list[int]] = {}
    unprofiled = 0
    for i, n in enumerate(names):
        nd = node_defs[n]
        op = nd.op
        outs = info[n]
        sizes = tensor_bytes[n]
        persistent = 0
        output_bytes = list(sizes)
        if op in VARIABLE_OPS:
            persistent = _variable_bytes(nd, batch_size, where)
            fills += _variable_bytes(nd, None, where, strict=False) is None
        elif op in ("Const", "HostConst"):
            persistent = sum(sizes)
            output_bytes = [0] * len(sizes)
        elif op == "ReadVariableOp" or (op == "Identity" and _reads_ref_variable(nd, node_defs)):
            output_bytes = [0] * len(sizes)
        if prof is not None:
            time_us = prof.time_us.get(n)
            if time_us is None:
                unprofiled += op != "Placeholder"
                time_us = 0.0
            temp = prof.temp_bytes.get(n, 0)
        else:
            inputs = []
            for ref in nd.input:
                src, port, control = parse_input(ref)
                if not control:
                    src_outs = info.get(src)
                    inputs.append(src_outs[port] if src_outs and port < len(src_outs) else None)
            time_us, _ = estimate_time_us(op, nd.attr, inputs, outs, device, batch_size)
            temp = 0
        extra: dict[str, Any] = {}
        if coloc.host[i]:
            extra["host"] = True
        allocated[n] = output_bytes
        b.add_node(n, op, time_us=time_us, output_bytes=output_bytes, temp_bytes=temp,
                   persistent_bytes=persistent, colocation=coloc.group[i],
                   pinned=HOST_DEVICE if coloc.host[i] else None, **extra)
    inplace = inplace_inputs(names, node_defs, info, allocated, model.fetches)
    cut: list[list[str]] = []
    for n in names:
        nd = node_defs[n]
        data_input = 0
        for ref in nd.input:
            src, port, control = parse_input(ref)
            if control:
                b.add_edge(src, n, control=True)
                continue
            i, data_input = data_input, data_input + 1
            if node_defs[src].op in BACK_EDGE_SOURCES:
                cut.append([src, n])
                continue
            out = forwarded_output(nd.op, i, len(info[n]))
            if out is None and inplace.get(n) == i:
                out = 0
            extra = {FORWARDED_AS: out} if out is not None and tensor_bytes[n][out] > 0 else {}
            b.add_edge(src, n, port=port, bytes=tensor_bytes[src][port], **extra)
    order = loops.order_edges(names, node_defs, frame) if cut else []
    for src, dst in order:
        b.add_edge(src, dst, control=True)
    if cut:
        log.warning("%s: cut %d while-loop back edge(s) (NextIteration -> Merge) so the graph is a DAG; "
                    "a loop body appears once, its time %s", where, len(cut),
                    "summed over the iterations" if prof else "multiplied by the loop's trip count")
    b.meta = _meta(model, prof, device_profile, _batch_that_sized(model, batch_size, fills, where), cut, unprofiled)
    g = topologically_sorted(b.build())
    if back_edges or any(node_defs[n].op in loops.ENTER_OPS for n in names):
        g = _scale_loops(g, node_defs, info, graph, scale=prof is None)
    floating = [any(t.dtype.base_dtype.is_floating for t in info[n]) for n in g.names]
    phases = label_phases(g, floating, [model.extra_meta["optimizer"]] if model.extra_meta.get("optimizer") else [])
    extras = []
    for v in range(g.num_nodes):
        x = dict(g.node_extra[v]) if g.node_extra and g.node_extra[v] else {}
        x["phase"] = phases[v]
        extras.append(x)
    meta = dict(g.meta)
    meta["phases"] = phase_counts(phases)
    g = dataclasses.replace(g, node_extra=tuple(extras), meta=meta)
    return TFImport(graph=g, model=model, profile=prof)


def forwarded_output(op: str, data_input: int, num_outputs: int) -> int | None:
    """The output port of a ``op`` node that reuses the buffer of its ``data_input``-th data input, or None.

    TensorFlow's kernels for these ops hand their input's buffer on instead of allocating
    (``set_output(i, input(i))`` or a reshaped view of it, `FORWARDING_OPS`); ``IdentityN`` forwards input
    ``i`` as output ``i``.
    """
    if op == "IdentityN":
        return data_input if data_input < num_outputs else None
    if op in FORWARDING_OPS and data_input == 0 and num_outputs >= 1:
        return 0
    return None


def inplace_inputs(names, node_defs, info, allocated: Mapping[str, list[int]], fetches) -> dict[str, int]:
    """For each element-wise op that will write into an input's buffer, the data input it takes.

    TensorFlow's kernel forwards input ``i`` (`INPLACE_OPS`, first eligible in order) when, at run time,
    the op holds the only reference to that buffer and it matches the output in size and dtype. Known
    before running: the tensor has exactly one consumer (this op, once), is not fetched, and is a
    buffer of its own: allocated by an op that is not a view (`FORWARDING_OPS`, ``IdentityN``,
    `VIEW_SOURCES`), a variable read, a constant, a fed placeholder or a loop's control flow, whose buffers others hold too
    (those allocate 0 bytes here or are `_SHARED_SOURCES`).
    """
    consumers: dict[tuple[str, int], int] = {}
    for n in names:
        for ref in node_defs[n].input:
            src, port, control = parse_input(ref)
            if not control:
                consumers[(src, port)] = consumers.get((src, port), 0) + 1
    fetched = {split_tensor_name(t) for t in fetches}
    out: dict[str, int] = {}
    for n in names:
        nd = node_defs[n]
        if nd.op not in INPLACE_OPS or not info[n] or not allocated[n] or allocated[n][0] <= 0:
            continue
        inputs = [parse_input(r) for r in nd.input]
        data = [(src, port) for src, port, control in inputs if not control]
        tries = INPLACE_OPS[nd.op]
        for i in (range(len(data)) if tries is None else tries):
            if i >= len(data):
                break
            src, port = data[i]
            sop = node_defs[src].op
            if (consumers.get((src, port)) != 1 or (src, port) in fetched or sop in FORWARDING_OPS
                    or sop in _SHARED_SOURCES or sop in VIEW_SOURCES or port >= len(allocated.get(src, ()))):
                continue
            if allocated[src][port] != allocated[n][0] or info[src][port].dtype != info[n][0].dtype:
                continue
            out[n] = i
            break
    return out


def _scale_loops(g: OpGraph, node_defs, info, graph, *, scale: bool) -> OpGraph:
    """Record the loops and their trip counts; with estimated costs, multiply loop ops' times by them."""
    def constant_value(name: str, port: int):
        try:
            value = tf.get_static_value(graph.get_tensor_by_name(f"{name}:{port}"))
        except (KeyError, ValueError, TypeError):
            return None
        return int(value) if value is not None and np.ndim(value) == 0 else None

    frame = loops.frames(g.names, node_defs, BACK_EDGE_SOURCES)
    trips = loops.trip_counts(frame, node_defs, info, constant_value)
    meta = dict(g.meta)
    meta["loops"] = {f: trips[f] for f in sorted(trips)}
    if scale:
        mult = np.fromiter((loops.multiplier(frame[n], trips) for n in g.names), dtype=np.float64,
                           count=g.num_nodes)
        g = g.with_costs(time_us=g.time_us * mult)
        unknown = sorted(f for f, t in trips.items() if t is None)
        if unknown:
            log.warning("%d loop(s) have no trip count the graph states (%s); their ops count once per step",
                        len(unknown), unknown[0] if len(unknown) == 1 else f"{unknown[0]}, ...")
    return dataclasses.replace(g, meta=meta)


def _reads_ref_variable(nd, node_defs) -> bool:
    if not nd.input:
        return False
    src, _, control = parse_input(nd.input[0])
    return not control and node_defs[src].op in ("VariableV2", "Variable")


def _batch_that_sized(model: TFModel, batch_size: int | None, fills: int, where: str) -> int | None:
    """The batch size the graph records: the one that sized the step where it was built (`TFModel.batch_size`),
    else ``batch_size`` where it filled an unknown dimension (a feed's, a variable's, or one shape inference
    left open), else None. ``--batch-size`` on a model whose shapes are all fixed sizes nothing: it is not
    recorded (a placement of the graph then runs with the model's own shapes, whatever ``--batch-size`` a
    run is given), and a value that is no feed's leading dimension is named in a warning."""
    if model.batch_size is not None or batch_size is None:
        return model.batch_size
    open_feed = any(f.shape is None or None in f.shape for f in model.feeds)
    if open_feed or fills:
        return batch_size
    leading = {f.shape[0] for f in model.feeds if f.shape}
    if batch_size not in leading:     # (an input whose leading dimension it is: a batch the user knows; quiet)
        fixed = ", ".join(f"{f.name} {format_shape(f.shape)}" for f in model.feeds) or "none"
        log.warning("%s: --batch-size %d sizes nothing: the model's inputs have fixed shapes (%s), and they size "
                    "the step; ignored", where, batch_size, fixed)
    return None


def _meta(model: TFModel, prof: Profile | None, device_profile: str, batch_size: int | None,
          cut: list[list[str]], unprofiled: int) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "source_format": model.source_format,
        "source": model.source,
        "signature": model.signature,
        "tensorflow": tf.__version__,
        "batch_size": batch_size,
        "costs": "profile" if prof else "roofline",
    }
    if prof:
        meta.update(profile_steps=prof.steps, profile_device=prof.device or "CPU",
                    profile_step_ms=[round(x, 3) for x in prof.step_ms], unprofiled_ops=unprofiled,
                    profile_untraced_step_ms=[round(x, 3) for x in prof.untraced_step_ms],
                    profile_op_overhead_us=round(prof.op_overhead_us, 4))
    else:
        meta["device_profile"] = device_profile
    meta.update({
        "feeds": [{"name": f.name, "dtype": f.dtype, "shape": None if f.shape is None else list(f.shape)}
                  for f in model.feeds],
        "fetches": list(model.fetches),
        "targets": list(model.targets),
        "inlined_functions": model.inlined_functions,
        "cut_back_edges": cut,
    })
    meta.update(model.extra_meta)
    return meta
