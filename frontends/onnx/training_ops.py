"""What pardnn knows of onnxruntime-training's ops: which update state, how big their outputs are.

onnx's shape inference has no schemas for the ops that onnxruntime-training
writes into a ``training_model.onnx`` (com.microsoft ``ConvGrad``,
``BatchNormInternal``, ``BatchNormalizationGrad``, ``ReluGrad``, ...; and a
few in the standard domain, such as ``MaxPoolGrad``). `training_rule` sizes
their outputs: first from the op's own inputs (`_op_rule`), then by
onnxruntime's naming convention (a gradient ``T_grad`` has the shape of
``T``) and the ops that keep their first input's shape.
`pardnn.frontends.onnx.shapes` applies it between rounds of shape inference.
"""

from __future__ import annotations

import re
from typing import Mapping, Protocol

import numpy as np
import onnx
from onnx import TensorProto

#: Ops that onnxruntime-training writes into training graphs: in-place state updates.
STATE_UPDATE_OPS = frozenset({"InPlaceAccumulator", "InPlaceAccumulatorV2", "ZeroGradient", "AdamOptimizer",
                              "AdamWOptimizer", "SGDOptimizer", "SGDOptimizerV2", "LambOptimizer"})
#: onnxruntime-training ops that onnxruntime registers in the standard ONNX domain, where onnx has no schema.
ORT_STANDARD_DOMAIN_OPS = frozenset({"MaxPoolGrad", "AveragePoolGrad", "SoftmaxCrossEntropy",
                                     "SoftmaxCrossEntropyGrad", "SparseSoftmaxCrossEntropy",
                                     "SparseSoftmaxCrossEntropyGrad"})


class Sized(Protocol):
    """A value with a static shape (`pardnn.frontends.onnx.shapes.TensorInfo`)."""

    elem_type: int
    shape: tuple[int, ...]


Shape = tuple[int, tuple[int, ...]]
"""(element type, dimensions) of a value."""


_GRAD_NAME = re.compile(r"^(.*)_grad(?:_\d+)?$")
#: com.microsoft ops of training graphs whose first output has the shape of their first input.
_LIKE_INPUT0 = frozenset({"BiasGelu", "FastGelu", "BiasGeluGrad_dX", "FastGeluGrad", "GeluGrad", "ReluGrad",
                          "SigmoidGrad", "TanhGrad", "SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad",
                          "LogSoftmaxGrad_13", "DropoutGrad", "BiasDropout", "BitmaskDropout", "InPlaceAccumulator",
                          "QuickGelu", "QuickGeluGrad", "BiasSoftmax", "Scale"})
#: Gradient ops whose outputs have the shapes of the forward values they differentiate, by input index:
#: ``ConvGrad(dY, X, W) -> dX, dW, dB`` and ``BatchNormalizationGrad(dY, X, scale, mean, inv_std) -> dX,
#: dscale, dbias`` (dB and dbias: one per output channel, like ``scale``).
_GRAD_OF_INPUTS = {"ConvGrad": (1, 2, None), "BatchNormalizationGrad": (1, 2, 2),
                   "SoftmaxCrossEntropyLossGrad": (1,), "SoftmaxCrossEntropyLossInternalGrad": (1,)}


#: onnxruntime-training's recurrent ops (com.microsoft; ``X`` is ``[seq, batch, input]``): what each output
#: holds: every step's hidden (or cell) state ``[seq, directions, batch, hidden]`` ("all"), the last one
#: ``[directions, batch, hidden]`` ("last"), or every step's gates ``[seq, directions, batch, gates x hidden]``
#: (LSTM's ``iofc``, GRU's ``zrh``); with the op's gates.
_RNN_TRAINING = {"LSTMTraining": (4, ("all", "last", "last", "all", "gates")),
                 "GRUTraining": (3, ("all", "last", "gates"))}


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...], trans_a: bool, trans_b: bool) -> tuple[int, ...]:
    """Shape of a (batched, broadcasting) matrix product, with optional transposes of the last two axes."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError("FusedMatMul needs matrices")
    m = a[-1] if trans_a else a[-2]
    n = b[-2] if trans_b else b[-1]
    batch = np.broadcast_shapes(a[:-2], b[:-2])
    return tuple(int(x) for x in batch) + (int(m), int(n))


def _op_rule(n: onnx.NodeProto, j: int, ins: list, producers: Mapping[str, onnx.NodeProto],
             known: Mapping[str, Sized]) -> Shape | None:
    """(element type, shape) of output ``j`` of an onnxruntime-training op, from its inputs' shapes, or None.

    * ``BatchNormInternal(X, scale, B, mean, var) -> Y, running_mean, running_var, saved_mean,
      saved_inv_std``: ``Y`` like ``X``, the others one value per channel (``X``'s axis 1);
    * `_GRAD_OF_INPUTS`: each gradient like the input it differentiates (``ConvGrad``'s ``dB`` one value
      per output channel, ``W``'s axis 0);
    * ``MaxPoolGrad(dY, Indices) -> dX``: like the input of the ``MaxPool`` that made ``Indices``;
    * ``LSTMTraining`` and ``GRUTraining(X, W, R, ...)``: `_RNN_TRAINING`, sized by ``X`` and
      ``hidden_size`` (else ``R``'s last axis);
    * ``SoftmaxCrossEntropyLossInternal(logits, labels, ...) -> loss, log_prob``: ``log_prob`` like
      ``logits``; ``loss`` a scalar, or like ``labels`` with ``reduction="none"``.
    """
    op = n.op_type
    if op == "BatchNormInternal" and ins and ins[0] is not None:
        x = ins[0]
        if j == 0:
            return x.elem_type, x.shape
        if len(x.shape) < 2:
            return None
        et = ins[1].elem_type if len(ins) > 1 and ins[1] is not None else x.elem_type
        return et, (x.shape[1],)
    if op in _GRAD_OF_INPUTS and j < len(_GRAD_OF_INPUTS[op]):
        src = _GRAD_OF_INPUTS[op][j]
        if src is None:                                  # ConvGrad's dB: one per output channel
            w = ins[2] if len(ins) > 2 else None
            return (w.elem_type, (w.shape[0],)) if w is not None and w.shape else None
        t = ins[src] if len(ins) > src else None
        if t is None:
            return None
        return t.elem_type, ((t.shape[1],) if op == "BatchNormalizationGrad" and j == 2 and len(t.shape) > 1
                             else t.shape)
    if op == "MaxPoolGrad" and j == 0 and len(n.input) > 1:
        pool = producers.get(n.input[1])
        x = known.get(pool.input[0]) if pool is not None and pool.input else None
        if x is not None and ins and ins[0] is not None:
            return ins[0].elem_type, x.shape
        return None
    if op in _RNN_TRAINING and ins and ins[0] is not None and len(ins[0].shape) == 3:
        seq, batch = ins[0].shape[0], ins[0].shape[1]
        hidden = next((a.i for a in n.attribute if a.name == "hidden_size"), 0)
        if not hidden and len(ins) > 2 and ins[2] is not None and len(ins[2].shape) == 3:
            hidden = ins[2].shape[2]                      # R: [directions, gates x hidden, hidden]
        if not hidden:
            return None
        dirs = 2 if next((a.s for a in n.attribute if a.name == "direction"), b"forward") == b"bidirectional" else 1
        gates, kinds = _RNN_TRAINING[op]
        if j >= len(kinds):
            return None
        width = gates * hidden if kinds[j] == "gates" else hidden
        return ins[0].elem_type, ((dirs, batch, width) if kinds[j] == "last" else (seq, dirs, batch, width))
    if op == "SoftmaxCrossEntropyLossInternal" and len(ins) > 1 and ins[0] is not None:
        if j == 1:
            return ins[0].elem_type, ins[0].shape
        reduction = next((a.s for a in n.attribute if a.name == "reduction"), b"mean")
        if reduction == b"none":
            return (ins[0].elem_type, ins[1].shape) if ins[1] is not None else None
        return ins[0].elem_type, ()
    return None


def training_rule(n: onnx.NodeProto, j: int, known: Mapping[str, Sized],
                  producers: Mapping[str, onnx.NodeProto] | None = None) -> Shape | None:
    """(element type, shape) of output ``j`` of ``n`` by onnxruntime-training's ops and conventions, or None.

    An op's own rule (`_op_rule`, from its inputs) comes first; then the
    naming convention (``T_grad`` has the shape of ``T``) and the ops that
    keep their input's shape.
    """
    o = n.output[j]
    ins = [known.get(i) for i in n.input]
    rule = _op_rule(n, j, ins, producers or {}, known)
    if rule is not None:
        return rule
    m = _GRAD_NAME.match(o)
    if m and m.group(1) in known:                    # T_grad, T_grad_1, ... have the shape of T
        return known[m.group(1)].elem_type, known[m.group(1)].shape
    if n.op_type in _LIKE_INPUT0 and j == 0 and ins and ins[0] is not None:
        return ins[0].elem_type, ins[0].shape
    if n.op_type == "InPlaceAccumulatorV2":         # output 0: an "updated" flag; 1: the accumulated buffer
        if j == 0:
            return TensorProto.BOOL, (1,)
        return (ins[0].elem_type, ins[0].shape) if ins and ins[0] is not None else None
    if n.op_type == "ConcatTraining":
        if j == 1:
            return TensorProto.INT64, (len(n.input),)
        if all(x is not None for x in ins) and ins:
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            shape = list(ins[0].shape)
            axis = axis + len(shape) if axis < 0 else axis
            shape[axis] = sum(x.shape[axis] for x in ins)
            return ins[0].elem_type, tuple(shape)
    if n.op_type == "FusedMatMul" and j == 0 and len(ins) >= 2 and ins[0] is not None and ins[1] is not None:
        attrs = {a.name: a.i for a in n.attribute}
        try:
            shape = _matmul_shape(ins[0].shape, ins[1].shape, bool(attrs.get("transA")), bool(attrs.get("transB")))
        except ValueError:
            return None
        return ins[0].elem_type, shape
    return None
