"""Op costs for ONNX nodes: FLOPs and bytes moved for the shared roofline, or times from an onnxruntime profile.

Roofline (`node_flops`, `node_bytes_moved`, then `pardnn.frontends.roofline.op_time_us`):

* ``MatMul``/``FusedMatMul``/``MatMulInteger``/``QLinearMatMul``: 2 x M x K x N per batch element;
  ``Gemm``: the same plus the bias;
* ``Conv`` (and the quantised forms): 2 x output elements x (Cin / group) x kernel taps, plus the bias;
  ``ConvTranspose``: 2 x input elements x (Cout / group) x kernel taps;
* ``Einsum``: `pardnn.frontends.roofline.einsum_flops` over the equation;
* ``LSTM``, ``GRU``, ``RNN`` (and onnxruntime-training's ``LSTMTraining``, ``GRUTraining``, ``LSTMGrad``,
  ``GRUGrad``): `_recurrent`, the gates' products over every step, direction and batch row, timed as that
  many steps one after another (each one launch, with its share of the FLOPs and bytes); ``GridSample``:
  the taps its mode reads per output element;
* attention ops (com.microsoft ``Attention`` with its QKV projection, ``MultiHeadAttention``,
  ``GroupQueryAttention``, ONNX ``Attention``): `pardnn.frontends.roofline.attention_flops`;
* element-wise and normalisation ops: `pardnn.frontends.roofline.ELEMENTWISE_FLOPS` per output element;
  reductions one per input element; pooling one per output element per kernel tap;
* onnxruntime-training's gradients: ``ConvGrad`` the forward convolution's FLOPs for each of ``dX`` and
  ``dW`` it computes, plus one per ``dY`` element for ``dB``; ``MaxPoolGrad`` one per ``dY`` element,
  ``AveragePoolGrad`` one per ``dY`` element per tap; ``BatchNormInternal`` and
  ``BatchNormalizationGrad`` as training-mode normalisations, ``ReluGrad``, ``Scale``, the
  ``SoftmaxCrossEntropyLoss*`` family per element from the same table;
* everything else moves data only;
* a node with subgraphs (`body_cost`): its own roofline time plus an ``If``'s costlier branch, a
  ``Loop``/``Scan``'s body times `trip_count` (once where that is not static: `uncounted_loops`), each
  subgraph the sum of its nodes' costs over the shapes shape inference gave its values, recursively.

Bytes moved are the bytes of every input and output (a sequence of tensors
counts the sum of its elements), except that view ops (``Reshape``,
``Squeeze``, ``Flatten``, ``Identity``, ``SequenceLength``, ...) move nothing
and gathers, slices and ``SequenceAt`` read only what they write. Values that are not ops at run
time (graph inputs, initializers, ``Constant``) cost nothing.

Profile (`profile_times`): the model runs ``steps`` times (after one warm-up
run) in onnxruntime with graph optimisations off, so each node is one kernel;
each node's kernel times per run are summed, and the runs are combined with
`pardnn.frontends.common.robust_average`.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections import ChainMap, defaultdict
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import onnx

from pardnn.errors import RuntimeFailure
from pardnn.progress import note, substage

from .. import roofline
from ..common import robust_average
from .model import TensorInfo
from .shapes import graph_tensors, small_values
from .runtime import make_session

VIEW_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Shape", "Size", "Constant",
                      "Optional", "OptionalGetElement", "SequenceLength"})
_READS_WHAT_IT_WRITES = frozenset({"Gather", "GatherElements", "GatherND", "Slice", "Compress", "SequenceAt"})
_REDUCE = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                     "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin",
                     "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "CumSum"})
_POOL = frozenset({"MaxPool", "AveragePool", "LpPool", "MaxRoiPool", "QLinearAveragePool"})
_POOL_GRAD = frozenset({"MaxPoolGrad", "AveragePoolGrad"})
_MATMUL = frozenset({"MatMul", "FusedMatMul", "MatMulInteger", "QLinearMatMul", "MatMulNBits",
                     "DynamicQuantizeMatMul", "MatMulIntegerToFloat"})


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _shape(tensors: Mapping[str, TensorInfo], name: str) -> tuple[int, ...] | None:
    t = tensors.get(name) if name else None
    return t.shape if t is not None else None


def _numel(shape: Sequence[int] | None) -> int:
    return int(math.prod(shape)) if shape is not None else 0


def _matmul(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> float:
    a, out = _shape(tensors, node.input[0]), _shape(tensors, node.output[0])
    if a is None or out is None or not a:
        return 0.0
    trans_a = bool(_attr(node, "transA", 0)) if node.op_type == "FusedMatMul" else False
    k = a[0] if len(a) == 1 else (a[-2] if trans_a else a[-1])
    return 2.0 * _numel(out) * k


def _gemm(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> float:
    a, out = _shape(tensors, node.input[0]), _shape(tensors, node.output[0])
    if a is None or out is None or len(a) != 2:
        return 0.0
    k = a[0] if _attr(node, "transA", 0) else a[1]
    bias = _numel(out) if len(node.input) > 2 and node.input[2] else 0
    return roofline.matmul_flops(out[0], k, out[1]) + bias


def _conv(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> float:
    w_index = 3 if node.op_type == "QLinearConv" else 1
    w = _shape(tensors, node.input[w_index]) if len(node.input) > w_index else None
    x, out = _shape(tensors, node.input[0]), _shape(tensors, node.output[0])
    if w is None or out is None or len(w) < 2:
        return 0.0
    taps = _numel(w[2:]) if len(w) > 2 else 1
    if node.op_type == "ConvTranspose":
        if x is None:
            return 0.0
        return roofline.conv_flops(_numel(x), w[1], taps) + (_numel(out) if len(node.input) > 2 else 0)
    bias_index = 8 if node.op_type == "QLinearConv" else 2
    bias = _numel(out) if len(node.input) > bias_index and node.input[bias_index] else 0
    return roofline.conv_flops(_numel(out), w[1], taps) + bias


def _conv_grad(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> float:
    """``ConvGrad(dY, X, W) -> dX, dW, dB``: each of dX and dW costs the forward convolution, dB one per dY element."""
    dy, w = _shape(tensors, node.input[0]), _shape(tensors, node.input[2]) if len(node.input) > 2 else None
    if dy is None or w is None or len(w) < 2:
        return 0.0
    outs = [bool(o) for o in node.output] + [False] * 3
    conv = roofline.conv_flops(_numel(dy), w[1], _numel(w[2:]) if len(w) > 2 else 1)
    return conv * (outs[0] + outs[1]) + (_numel(dy) if outs[2] else 0)


def _attention(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> float:
    q = _shape(tensors, node.input[0])
    if q is None:
        return 0.0
    heads = int(_attr(node, "num_heads", _attr(node, "q_num_heads", 1)) or 1)
    if node.op_type == "Attention" and node.domain == "com.microsoft":
        w = _shape(tensors, node.input[1]) if len(node.input) > 1 else None
        if w is None or len(q) != 3:
            return 0.0
        b, s, hidden_in = q
        proj = roofline.matmul_flops(b * s, hidden_in, w[1])
        hidden = w[1] // 3
        return proj + roofline.attention_flops(b, heads, s, s, max(1, hidden // heads))
    k = _shape(tensors, node.input[1]) if len(node.input) > 1 and node.input[1] else None
    if len(q) == 4:                              # [batch, heads, seq, head_dim]
        b, h, s, hd = q
        kv = k[2] if k is not None and len(k) == 4 else s
        return roofline.attention_flops(b, h, s, kv, hd)
    if len(q) == 3:                              # [batch, seq, hidden]
        b, s, hidden = q
        kv = k[1] if k is not None and len(k) >= 2 else s
        return roofline.attention_flops(b, heads, s, kv, max(1, hidden // heads))
    return 0.0


_RECURRENT_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1, "LSTMTraining": 4, "GRUTraining": 3, "LSTMGrad": 4, "GRUGrad": 3}
"""Gates of each recurrent op (ONNX ``LSTM``/``GRU``/``RNN``, onnxruntime-training's forward and gradient ops)."""
_RECURRENT_PER_UNIT = {4: 10, 3: 9, 1: 2}
"""Element-wise FLOPs per hidden unit per step besides the matrix products, by gates: an LSTM's three
sigmoids, two tanh and the cell update, a GRU's two sigmoids, tanh, reset product and blend, an RNN's add
and activation (counted as `pardnn.frontends.roofline.ELEMENTWISE_FLOPS` counts an activation: one each)."""


def _is_recurrent(node: onnx.NodeProto) -> bool:
    """An op of `_RECURRENT_GATES` (the ONNX ``LSTM``, ``GRU`` and ``RNN`` in the standard domain only)."""
    return node.op_type in _RECURRENT_GATES and (node.domain in ("", "ai.onnx")
                                                 or node.op_type not in ("LSTM", "GRU", "RNN"))


def _seq_batch(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> tuple[int, int] | None:
    """A recurrent op's (steps, batch rows) from ``X``: ``[seq, batch, input]``, or ``[batch, seq, input]``
    with ``layout=1`` (ONNX ops only); None where ``X`` is not sized as that."""
    x = _shape(tensors, node.input[0])
    if x is None or len(x) != 3:
        return None
    return (x[1], x[0]) if node.domain in ("", "ai.onnx") and _attr(node, "layout", 0) else (x[0], x[1])


def _recurrent(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> float:
    """``LSTM``/``GRU``/``RNN(X, W, R, B, ...)``: per step, direction and batch row, the gates' two products
    ``2 x gates x hidden x (input + hidden)``, the biases ``2 x gates x hidden`` where ``B`` is given, and
    `_RECURRENT_PER_UNIT` per hidden unit; a gradient op (``LSTMGrad``, ``GRUGrad``) twice the products (the
    inputs' and the weights' gradients) and the rest once (steps and rows: `_seq_batch`)."""
    sb = _seq_batch(node, tensors)
    w = _shape(tensors, node.input[1]) if len(node.input) > 1 and node.input[1] else None
    if sb is None or w is None or len(w) != 3:
        return 0.0
    gates = _RECURRENT_GATES[node.op_type]
    dirs, gh, inp = w
    hidden = int(_attr(node, "hidden_size", 0) or gh // gates)
    seq, batch = sb
    products = 2.0 * gates * hidden * (inp + hidden)
    bias = 2.0 * gates * hidden if len(node.input) > 3 and node.input[3] else 0.0
    if node.op_type.endswith("Grad"):
        products *= 2
    return float(seq * batch * dirs) * (products + bias + _RECURRENT_PER_UNIT[gates] * hidden)


def _grid_sample(node: onnx.NodeProto, out: tuple[int, ...] | None) -> float:
    """``GridSample``: per output element, the taps its mode reads (nearest 1, linear 4 per spatial axis pair,
    cubic 16) times a multiply and an add, plus the grid's coordinate arithmetic (4)."""
    mode = _attr(node, "mode", b"linear")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    taps = {"nearest": 1, "cubic": 16, "bicubic": 16}.get(mode, 4)
    return float(_numel(out) * (2 * taps + 4))


def node_flops(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> float:
    """Floating-point operations of one node (see the module docstring for the rules)."""
    op = node.op_type
    out = _shape(tensors, node.output[0]) if node.output and node.output[0] else None
    if op in _MATMUL:
        return _matmul(node, tensors)
    if op == "Gemm":
        return _gemm(node, tensors)
    if op in ("Conv", "ConvInteger", "QLinearConv", "ConvTranspose", "FusedConv"):
        return _conv(node, tensors)
    if op == "Einsum":
        shapes = [_shape(tensors, i) for i in node.input]
        if any(s is None for s in shapes):
            return 0.0
        equation = _attr(node, "equation", b"")
        try:
            return roofline.einsum_flops(equation.decode() if isinstance(equation, bytes) else str(equation), shapes)
        except ValueError:
            return 0.0
    if op in ("Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention",
              "PackedMultiHeadAttention"):
        return _attention(node, tensors)
    if op == "ConvGrad":
        return _conv_grad(node, tensors)
    if _is_recurrent(node):
        return _recurrent(node, tensors)
    if op == "GridSample":
        return _grid_sample(node, out)
    if op in _REDUCE:
        return float(_numel(_shape(tensors, node.input[0])))
    if op in _POOL:
        kernel = _attr(node, "kernel_shape", []) or []
        return float(_numel(out) * max(1, math.prod(kernel)))
    if op in _POOL_GRAD:             # one per incoming gradient element (per tap when averaging)
        taps = max(1, math.prod(_attr(node, "kernel_shape", []) or [])) if op == "AveragePoolGrad" else 1
        return float(_numel(_shape(tensors, node.input[0])) * taps)
    if op == "LRN":
        return float(_numel(out) * 2 * int(_attr(node, "size", 1)))
    per = roofline.ELEMENTWISE_FLOPS.get(op)
    if per is not None:
        return float(_numel(out)) * per
    return 0.0


def node_bytes_moved(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> float:
    """Bytes a node reads and writes (see the module docstring)."""
    if node.op_type in VIEW_OPS:
        return 0.0
    written = sum(tensors[o].nbytes for o in node.output if o and o in tensors)
    if node.op_type in _READS_WHAT_IT_WRITES:
        small = sum(tensors[i].nbytes for i in node.input[1:] if i and i in tensors)
        return float(2 * written + small)
    read = sum(tensors[i].nbytes for i in node.input if i and i in tensors)
    return float(read + written)


def roofline_time_us(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo],
                     profile: roofline.DeviceProfile, values: Mapping[str, np.ndarray] | None = None
                     ) -> tuple[float, float]:
    """``(time_us, flops)`` of a node on ``profile``; graph constants cost nothing.

    A node with subgraphs adds their cost (`body_cost`) to its own (its inputs and outputs moved, one
    launch). ``values``: small values known statically (a ``Loop``'s trip count is read from them).
    """
    if node.op_type == "Constant":
        return 0.0, 0.0
    if subgraphs(node):
        own = roofline.op_time_us(0.0, node_bytes_moved(node, tensors), profile)
        body_us, body_flops = body_cost(node, tensors, profile, values or {})
        return own + body_us, body_flops
    flops = node_flops(node, tensors)
    sb = _seq_batch(node, tensors) if flops and _is_recurrent(node) else None
    if sb is not None and sb[0] > 1:   # one step after another, each a launch, with its share of FLOPs and bytes
        steps = int(sb[0])
        return steps * roofline.op_time_us(flops / steps, node_bytes_moved(node, tensors) / steps, profile), flops
    return roofline.op_time_us(flops, node_bytes_moved(node, tensors), profile), flops


# ---------------------------------------------------------------------------
# control flow: If, Loop, Scan
# ---------------------------------------------------------------------------

_MAX_TRIPS = 2**31 - 1   # a larger Loop M is exporters' "no limit" (the condition ends the loop)


def subgraphs(node: onnx.NodeProto) -> list[tuple[str, onnx.GraphProto]]:
    """``(attribute name, graph)`` for each subgraph of a node, in attribute order."""
    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append((a.name, a.g))
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend((a.name, g) for g in a.graphs)
    return out


def _scalar(values: Mapping[str, np.ndarray], name: str):
    v = values.get(name) if name else None
    return np.asarray(v).reshape(-1)[0].item() if v is not None and np.asarray(v).size == 1 else None


def trip_count(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo],
               values: Mapping[str, np.ndarray]) -> int | None:
    """How many times a ``Loop``/``Scan`` runs its body, where that is known statically; else None.

    ``Loop``: its trip count ``M`` when a constant (an upper bound when the condition can end the loop
    earlier; an ``M`` of 2^31 or more is "no limit"), 0 when the initial condition is a constant false.
    ``Scan``: the length of its first scan input along its scan axis (``Scan`` 8, with a batch axis first:
    batch x length).

    >>> from onnx import helper
    >>> loop = helper.make_node("Loop", ["M", "c"], ["y"])
    >>> trip_count(loop, {}, {"M": np.array(10)}), trip_count(loop, {}, {})
    (10, None)
    >>> trip_count(loop, {}, {"M": np.array(2**62)}), trip_count(loop, {}, {"M": np.array(5), "c": np.array(False)})
    (None, 0)
    """
    if node.op_type == "Loop":
        if len(node.input) > 1 and _scalar(values, node.input[1]) is False:
            return 0
        m = _scalar(values, node.input[0]) if node.input else None
        return int(m) if m is not None and 0 <= m < _MAX_TRIPS else None
    if node.op_type == "Scan":
        k = int(_attr(node, "num_scan_inputs", 0) or 0)
        body = _attr(node, "body")
        if k < 1 or body is None or len(node.input) < k:
            return None
        shape = _shape(tensors, node.input[-k])
        if len(node.input) == len(body.input) + 1:          # Scan 8: [sequence_lens] + states + scans, batch first
            return shape[0] * shape[1] if shape is not None and len(shape) >= 2 else None
        axes = list(_attr(node, "scan_input_axes", []) or [0])
        if shape is None or not shape:
            return None
        axis = axes[0] + len(shape) if axes[0] < 0 else axes[0]
        return shape[axis] if 0 <= axis < len(shape) else None
    return None


def graph_cost(graph: onnx.GraphProto, tensors: Mapping[str, TensorInfo], profile: roofline.DeviceProfile,
               values: Mapping[str, np.ndarray]) -> tuple[float, float]:
    """``(time_us, flops)`` of running a subgraph once: the sum of its nodes' roofline costs.

    Its values are sized from what it declares (shape inference writes its value infos), then from the
    enclosing scopes (``tensors``), so nested subgraphs are costed the same way.
    """
    scope = ChainMap(graph_tensors(graph), tensors)
    consts = ChainMap(small_values(graph), values)
    time_us = flops = 0.0
    for n in graph.node:
        t, f = roofline_time_us(n, scope, profile, consts)
        time_us += t
        flops += f
    return time_us, flops


def body_cost(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo], profile: roofline.DeviceProfile,
              values: Mapping[str, np.ndarray]) -> tuple[float, float]:
    """``(time_us, flops)`` of a node's subgraphs: an ``If`` its costlier branch, a ``Loop``/``Scan`` its body
    times `trip_count` (once when that is unknown, see `uncounted_loops`), any other op each subgraph once."""
    costs = [graph_cost(g, tensors, profile, values) for _, g in subgraphs(node)]
    if not costs:
        return 0.0, 0.0
    if node.op_type == "If":
        return max(costs)
    trips = trip_count(node, tensors, values) if node.op_type in ("Loop", "Scan") else None
    trips = 1 if trips is None else trips
    return trips * sum(t for t, _ in costs), trips * sum(f for _, f in costs)


def uncounted_loops(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo],
                    values: Mapping[str, np.ndarray]) -> list[str]:
    """The ``Loop``/``Scan`` nodes, ``node`` and those nested in its subgraphs, with no static trip count: each
    named by its path from ``node`` (``outer/inner``; a nameless node by its op)."""
    here = node.name or node.op_type
    out = [here] if node.op_type in ("Loop", "Scan") and trip_count(node, tensors, values) is None else []
    for _, g in subgraphs(node):
        scope, consts = ChainMap(graph_tensors(g), tensors), ChainMap(small_values(g), values)
        out += [f"{here}/{name}" for n in g.node if subgraphs(n) for name in uncounted_loops(n, scope, consts)]
    return out


# ---------------------------------------------------------------------------
# onnxruntime profiles
# ---------------------------------------------------------------------------

def parse_profile(events: list[dict]) -> list[dict[str, float]]:
    """Per-run node times from onnxruntime profile events: one ``{node name: summed us}`` per model run.

    Kernel events (``cat == "Node"``, names ending in ``_kernel_time``) are
    assigned to the ``model_run`` event whose interval holds them.

    >>> ev = [{"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},
    ...       {"cat": "Node", "name": "a_kernel_time", "ts": 10, "dur": 4},
    ...       {"cat": "Node", "name": "a_kernel_time", "ts": 20, "dur": 1},
    ...       {"cat": "Session", "name": "model_run", "ts": 200, "dur": 100},
    ...       {"cat": "Node", "name": "a_kernel_time", "ts": 210, "dur": 3}]
    >>> parse_profile(ev)
    [{'a': 5.0}, {'a': 3.0}]
    """
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    out: list[dict[str, float]] = [defaultdict(float) for _ in runs]
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        ts = e["ts"]
        for r, (t0, t1) in enumerate(runs):
            if t0 <= ts <= t1:
                name = e.get("args", {}).get("node_name") or e["name"][:-len("_kernel_time")]
                out[r][name] += float(e["dur"])
                break
    return [dict(r) for r in out]


def profile_times(model: onnx.ModelProto, feeds: Mapping, steps: int, *, providers=None) -> dict[str, float]:
    """Robust per-node times (us) over ``steps`` profiled runs of ``model`` (weights loaded), after a warm-up."""
    if steps < 1:
        raise ValueError("profile needs at least one step")
    with tempfile.TemporaryDirectory(prefix="pardnn-ort-profile-") as tmp:
        sess = make_session(model, providers=providers, profile_prefix=str(Path(tmp) / "ort"))
        try:
            with substage("profiling: warm-up run"):
                for i in range(steps + 1):
                    if i:
                        note(f"profiling run {i} of {steps}")
                    sess.run(None, dict(feeds))
        except Exception as exc:
            raise RuntimeFailure(f"onnxruntime run failed while profiling: {' '.join(str(exc).split())[:400]}") \
                from None
        events = json.loads(Path(sess.end_profiling()).read_text())
    runs = parse_profile(events)[1:]   # the first run is the warm-up
    names = sorted({n for r in runs for n in r})
    return {n: robust_average([r.get(n, 0.0) for r in runs]) for n in names}
