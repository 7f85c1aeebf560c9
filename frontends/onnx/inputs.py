"""Which integers an integer input of an ONNX model may hold: the rows it indexes, the classes it names.

The ONNX counterpart of `pardnn.frontends.tensorflow.inputs`: a run that makes up
its inputs (`pardnn.frontends.onnx.runtime.example_feeds`) draws each integer
input over the values the model accepts, not all zeros (to a PyTorch
``Embedding(padding_idx=0)`` or an attention mask, zeros are padding).
`index_ranges` follows each integer graph input through nodes that only move
or convert its values (``Identity``, ``Cast``, reshapes, slices,
``Transpose``, ``Concat``, ``Where``'s branches) to the nodes that use them as
indices, and takes the smallest of their limits:

* ``Gather``/``GatherElements`` indices: the size of the data's gathered axis
  (an embedding's rows);
* ``SoftmaxCrossEntropyLoss``/``NegativeLogLikelihoodLoss`` labels: the
  scores' class axis (axis 1);
* ``OneHot`` indices: its depth.

An input none of these reach has no known range (the caller feeds it 1).
Shapes come from the prepared model's static shapes, constants from its folded ones.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

import numpy as np
import onnx

from ..common import IndexRange, smallest_limit

#: Nodes whose outputs hold only values of the listed inputs (by position; None: every input).
_PASS: dict[str, tuple[int, ...] | None] = {
    "Identity": (0,), "Cast": (0,), "Reshape": (0,), "Unsqueeze": (0,), "Squeeze": (0,), "Flatten": (0,),
    "Transpose": (0,), "Slice": (0,), "Gather": (0,), "GatherElements": (0,), "Expand": (0,), "Tile": (0,),
    "Concat": None, "Split": (0,), "Where": (1, 2), "CastLike": (0,),
}


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(onnx.helper.get_attribute_value(a))
    return default


def _dim(tensors: Mapping[str, Any], name: str, axis: int) -> int | None:
    info = tensors.get(name)
    if info is None or getattr(info, "elements", None):
        return None
    shape = tuple(info.shape)
    if not -len(shape) <= axis < len(shape):
        return None
    d = shape[axis]
    return int(d) if isinstance(d, (int, np.integer)) and d > 0 else None


def _limit(node: onnx.NodeProto, index: int, tensors, constants) -> tuple[int | None, str] | None:
    """The exclusive upper limit ``node`` puts on the values of its input ``index``, with what it is (else None)."""
    op, name = node.op_type, node.name
    if op in ("Gather", "GatherElements") and index == 1:
        axis = _attr(node, "axis", 0)
        return _dim(tensors, node.input[0], axis), f"the axis-{axis} size of the data {op} {name!r} reads"
    if op in ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss") and index == 1:
        return _dim(tensors, node.input[0], 1), f"the classes of the scores of {op} {name!r}"
    if op == "OneHot" and index == 0 and len(node.input) > 1:
        depth = constants.get(node.input[1])
        try:
            return int(np.asarray(depth).reshape(-1)[0]), f"the depth of OneHot {name!r}"
        except (TypeError, ValueError, IndexError):
            return None
    return None


def index_ranges(graph: onnx.GraphProto, inputs: Iterable[str], tensors: Mapping[str, Any],
                 constants: Mapping[str, Any] | None = None) -> dict[str, IndexRange]:
    """Per integer graph input of ``inputs``: the range its values may take, where one is known.

    ``tensors`` maps value names to infos with ``elem_type`` and ``shape``; ``constants``, value names to arrays.
    """
    constants = constants or {}
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for i, x in enumerate(node.input):
            if x:
                consumers.setdefault(x, []).append((node, i))

    def moved(node, i):
        passes = _PASS.get(node.op_type, ())
        return [y for y in node.output if y] if passes is None or i in passes else []

    out: dict[str, IndexRange] = {}
    for name in inputs:
        info = tensors.get(name)
        if info is None or not np.issubdtype(onnx.helper.tensor_dtype_to_np_dtype(info.elem_type), np.integer):
            continue
        best = smallest_limit(name, lambda v: consumers.get(v, ()),
                              lambda node, i: _limit(node, i, tensors, constants), moved)
        if best is not None:
            out[name] = best
    return out


def logged(ranges: Mapping[str, IndexRange], where: object) -> Mapping[str, IndexRange]:
    """``ranges``, each logged (``-v``) as the draw it makes of its input."""
    for name, r in ranges.items():
        logging.getLogger("pardnn.frontends.onnx").info("%s: input %r drawn in [0, %d): %s", where, name, r.high,
                                                         r.why)
    return ranges
