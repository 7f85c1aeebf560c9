"""Roofline estimates of TensorFlow op times, for graphs imported without a profile.

An op's time is ``launch + max(FLOPs / peak, bytes moved / bandwidth)`` on a
`pardnn.frontends.roofline.DeviceProfile` (``--device-profile``). FLOPs:

* ``MatMul``: 2·m·n·k; ``BatchMatMul``/``V2``/``V3``: 2·(output elements)·k;
* ``Conv2D``/``Conv3D``: 2·(output elements)·(kernel taps · input channels per
  group); ``Conv*BackpropInput``/``BackpropFilter`` the same product over the
  output gradient; depthwise convolutions 2·(output elements)·(kernel taps);
* ``Einsum``: 2·(product of every index's size) (`roofline.einsum_flops`);
* normalisation, softmax and cross-entropy: a few FLOPs per element (8, 12,
  5, 6); transcendental element-wise ops 4 per element; reductions 1 per
  input element; pooling one per window tap; any other op 1 per output
  element.

Bytes moved are the op's input and output bytes; a variable update also
reads and writes the variable. Ops that launch no kernel (identities,
reshapes, shape queries, constants, variable handles and reads, control-flow
plumbing, ``NoOp``) cost a fifth of the launch overhead and move nothing.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..roofline import DeviceProfile, conv_flops, einsum_flops, elementwise_flops, matmul_flops, op_time_us
from .shapes import TensorInfo

NO_KERNEL_OPS = frozenset({
    "Const", "HostConst", "Placeholder", "PlaceholderWithDefault", "Identity", "IdentityN", "Snapshot",
    "StopGradient", "PreventGradient", "Reshape", "Squeeze", "ExpandDims", "EnsureShape", "Shape", "ShapeN",
    "Size", "Rank", "NoOp", "ControlTrigger", "VarHandleOp", "VariableV2", "Variable", "ReadVariableOp",
    "VarIsInitializedOp", "VariableShape", "DisableCopyOnRead", "Enter", "RefEnter", "Exit", "RefExit",
    "Switch", "RefSwitch", "Merge", "RefMerge", "NextIteration", "RefNextIteration", "LoopCond",
    "BroadcastGradientArgs", "_Arg", "_Retval",
})
"""Ops that run no device kernel: they alias, forward or describe tensors."""

_TRANSCENDENTAL = frozenset({
    "Exp", "Expm1", "Log", "Log1p", "Tanh", "Sigmoid", "Erf", "Erfc", "Sqrt", "Rsqrt", "Pow", "Softplus",
    "Softsign", "Elu", "Selu", "Sin", "Cos", "Tan", "Atan", "Atan2", "Asin", "Acos", "Sinh", "Cosh",
    "TanhGrad", "SigmoidGrad", "SqrtGrad", "RsqrtGrad", "EluGrad", "SeluGrad", "SoftplusGrad", "Lgamma",
    "Digamma", "Reciprocal", "Inv", "RealDiv", "Div", "DivNoNan", "Xlogy", "Xdivy",
})
_REDUCTIONS = frozenset({"Sum", "Mean", "Max", "Min", "Prod", "All", "Any", "ArgMax", "ArgMin", "BiasAddGrad",
                         "L2Loss", "EuclideanNorm", "UnsortedSegmentSum", "SegmentSum"})
_PER_ELEMENT = {
    "FusedBatchNorm": 8.0, "FusedBatchNormV2": 8.0, "FusedBatchNormV3": 8.0,
    "FusedBatchNormGrad": 12.0, "FusedBatchNormGradV2": 12.0, "FusedBatchNormGradV3": 12.0,
    "Softmax": 5.0, "LogSoftmax": 5.0,
    "SoftmaxCrossEntropyWithLogits": 6.0, "SparseSoftmaxCrossEntropyWithLogits": 6.0,
}
_ASSIGN_RMW = frozenset({"AssignAddVariableOp", "AssignSubVariableOp"})


def _n(t: TensorInfo | None, fill: int | None) -> int:
    if t is None:
        return 0
    n = t.elements(fill)
    return int(n) if n is not None else 0


def _b(t: TensorInfo | None, fill: int | None) -> int:
    if t is None:
        return 0
    n = t.nbytes(fill)
    return int(n) if n is not None else 0


def _dims(t: TensorInfo | None, fill: int | None) -> list[int] | None:
    if t is None or t.shape is None:
        return None
    return [fill if d is None and fill is not None else d for d in t.shape]  # type: ignore[misc]


def _attr(attrs, key: str, default=None):
    if attrs is None or key not in attrs:
        return default
    a = attrs[key]
    kind = a.WhichOneof("value")
    if kind == "list":
        if a.list.i:
            return list(a.list.i)
        if a.list.s:
            return [s.decode() for s in a.list.s]
        return []
    value = getattr(a, kind) if kind else default
    return value.decode() if isinstance(value, bytes) else value


def op_flops(op: str, attrs, inputs: Sequence[TensorInfo | None], outputs: Sequence[TensorInfo],
             fill: int | None = None) -> float:
    """FLOPs of one op from its type, attributes and static tensor shapes (rules in the module docstring)."""
    out0 = outputs[0] if outputs else None
    n_out = _n(out0, fill)
    first = inputs[0] if inputs else None
    try:
        if op == "MatMul" or op == "_MklMatMul":
            a = _dims(first, fill)
            if a is None or len(a) != 2 or out0 is None:
                return float(n_out)
            o = _dims(out0, fill)
            k = a[0] if _attr(attrs, "transpose_a", False) else a[1]
            return matmul_flops(o[0], k, o[1]) if o and len(o) == 2 else 2.0 * n_out * k
        if op in ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"):
            a = _dims(first, fill)
            if not a or len(a) < 2:
                return float(n_out)
            k = a[-2] if _attr(attrs, "adj_x", False) else a[-1]
            return 2.0 * n_out * k
        if op in ("Conv2D", "Conv3D"):
            f = _dims(inputs[1], fill)
            if not f:
                return float(n_out)
            return conv_flops(n_out, f[-2], math.prod(f[:-2]))
        if op == "DepthwiseConv2dNative":
            f = _dims(inputs[1], fill)
            return conv_flops(n_out, 1, math.prod(f[:-2])) if f else float(n_out)
        if op in ("Conv2DBackpropInput", "Conv3DBackpropInputV2", "Conv3DBackpropInput"):
            f, dy = _dims(inputs[1], fill), inputs[2]
            return conv_flops(_n(dy, fill), f[-2], math.prod(f[:-2])) if f else float(n_out)
        if op in ("Conv2DBackpropFilter", "Conv3DBackpropFilterV2", "Conv3DBackpropFilter"):
            f, dy = _dims(out0, fill), inputs[2]
            return conv_flops(_n(dy, fill), f[-2], math.prod(f[:-2])) if f else float(n_out)
        if op in ("DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"):
            f = _dims(inputs[1], fill) if op.endswith("Input") else _dims(out0, fill)
            return conv_flops(_n(inputs[2], fill), 1, math.prod(f[:-2])) if f else float(n_out)
        if op == "Einsum":
            shapes = [_dims(t, fill) for t in inputs]
            if any(s is None for s in shapes):
                return float(n_out)
            return einsum_flops(_attr(attrs, "equation", ""), shapes)
        if op in ("MaxPool", "AvgPool", "MaxPoolV2", "MaxPool3D", "AvgPool3D"):
            return float(n_out) * math.prod(_attr(attrs, "ksize", [1]) or [1])
        if op in ("MaxPoolGrad", "AvgPoolGrad", "MaxPoolGradV2", "MaxPool3DGrad", "AvgPool3DGrad"):
            return float(n_out) * math.prod(_attr(attrs, "ksize", [1]) or [1])
    except (TypeError, ValueError, IndexError):
        return float(n_out)
    if op in _PER_ELEMENT:
        return elementwise_flops(_n(first, fill), _PER_ELEMENT[op])
    if op in _REDUCTIONS:
        return elementwise_flops(_n(first, fill))
    if op in _TRANSCENDENTAL:
        return elementwise_flops(n_out, 4.0)
    return elementwise_flops(max(n_out, sum(_n(o, fill) for o in outputs[1:])))


def bytes_moved(op: str, inputs: Sequence[TensorInfo | None], outputs: Sequence[TensorInfo],
                fill: int | None = None) -> float:
    """Bytes an op reads and writes in device memory."""
    ins = [_b(t, fill) for t in inputs]
    outs = sum(_b(t, fill) for t in outputs)
    data_in = sum(ins)
    if op == "AssignVariableOp":
        return 2.0 * data_in
    if op in _ASSIGN_RMW:
        return 3.0 * data_in
    if op.startswith("ResourceApply") or op.startswith("ResourceSparseApply"):
        n_handles = sum(1 for t in inputs if t is not None and t.dtype.base_dtype.name == "resource")
        largest = max(ins, default=0)
        return data_in + 2.0 * n_handles * largest
    if op in ("ResourceGather", "GatherV2", "Gather", "GatherNd", "ResourceGatherNd"):
        return 2.0 * outs + sum(ins[1:])
    return float(data_in + outs)


def estimate_time_us(op: str, attrs, inputs: Sequence[TensorInfo | None], outputs: Sequence[TensorInfo],
                     profile: DeviceProfile, fill: int | None = None) -> tuple[float, float]:
    """``(time_us, flops)`` of one op on ``profile``."""
    if op in NO_KERNEL_OPS:
        return 0.2 * profile.launch_us, 0.0
    flops = op_flops(op, attrs, inputs, outputs, fill)
    return op_time_us(flops, bytes_moved(op, inputs, outputs, fill), profile), flops
