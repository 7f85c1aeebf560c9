"""Which integers an integer input of a step may hold: the rows it indexes, the classes it names.

A run that makes up its inputs (`pardnn.frontends.tensorflow.profile.feed_values`)
needs integers the step accepts and that exercise it: all zeros are valid
indices, but to an ``Embedding(mask_zero=True)`` every zero is padding, so a
step fed zeros masks every token and the layers behind it get no gradient.
`index_ranges` follows each integer feed through ops that only move or
convert its values (identity, casts, reshapes, slices, transposes,
selects, concatenations) to the ops that use them as indices, and takes the
smallest of their limits:

* ``GatherV2``/``Gather``/``ResourceGather`` indices: the gathered axis's size
  (an embedding's rows);
* ``SparseSoftmaxCrossEntropyWithLogits`` labels and ``InTopKV2`` targets: the
  logits' last dimension (the classes);
* ``OneHot`` indices: its depth; ``UnsortedSegment*`` segment ids: the segment count.

A feed none of these reach has no known range (the caller feeds it 1).
Shapes and constants are TensorFlow's static ones after import.
"""

from __future__ import annotations

from typing import Iterable

from ..common import IndexRange, smallest_limit
from ._tf import tf

#: Ops whose outputs hold only values of the listed inputs (by position; None: every input).
_PASS: dict[str, tuple[int, ...] | None] = {
    "Identity": (0,), "Cast": (0,), "Reshape": (0,), "ExpandDims": (0,), "Squeeze": (0,), "Transpose": (0,),
    "StridedSlice": (0,), "Slice": (0,), "GatherV2": (0,), "Tile": (0,), "BroadcastTo": (0,), "ReverseV2": (0,),
    "Pack": None, "Unpack": (0,), "Split": (1,), "SplitV": (0,), "ConcatV2": None, "Select": (1, 2),
    "SelectV2": (1, 2), "IdentityN": None, "StopGradient": (0,), "Snapshot": (0,),
}


def _dim(tensor, axis: int) -> int | None:
    shape = tensor.shape
    if shape.rank is None or not -shape.rank <= axis < shape.rank:
        return None
    d = shape.as_list()[axis]
    return int(d) if d is not None else None


def _const(tensor) -> int | None:
    value = tf.get_static_value(tensor)
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _variable_rows(handle) -> int | None:
    """Rows of the resource variable behind ``handle`` (a ``VarHandleOp``'s shape attribute)."""
    op = handle.op
    while op.type in ("Identity", "Enter") and op.inputs:
        op = op.inputs[0].op
    if op.type != "VarHandleOp":
        return None
    shape = tf.TensorShape(op.get_attr("shape"))
    if shape.rank is None or shape.rank < 1 or shape[0] is None:
        return None
    return int(shape[0])


def _limit(op, index: int) -> tuple[int | None, str] | None:
    """The exclusive upper limit ``op`` puts on the values of its input ``index``, with what it is (else None)."""
    kind = op.type
    if kind in ("GatherV2", "Gather") and index == 1:
        axis = _const(op.inputs[2]) if kind == "GatherV2" else 0
        if axis is None:
            return None
        return _dim(op.inputs[0], axis), f"the axis-{axis} size of the table {kind} {op.name!r} reads"
    if kind == "ResourceGather" and index == 1:
        return _variable_rows(op.inputs[0]), f"the rows of the variable ResourceGather {op.name!r} reads"
    if kind == "SparseSoftmaxCrossEntropyWithLogits" and index == 1:
        return _dim(op.inputs[0], -1), f"the classes of the logits of {op.name!r}"
    if kind == "InTopKV2" and index == 1:
        return _dim(op.inputs[0], -1), f"the classes of the predictions of {op.name!r}"
    if kind == "OneHot" and index == 0:
        return _const(op.inputs[1]), f"the depth of OneHot {op.name!r}"
    if kind.startswith("UnsortedSegment") and index == 1:
        return _const(op.inputs[2]), f"the segment count of {op.name!r}"
    return None


def index_ranges(graph: "tf.Graph", feeds: Iterable[str]) -> dict[str, IndexRange]:
    """Per integer feed tensor name of ``feeds`` (in ``graph``): the range its values may take, where one is known."""
    def uses(t):
        return [(op, i) for op in t.consumers() for i, x in enumerate(op.inputs) if x is t]

    def moved(op, i):
        # any dtype: Keras casts labels to the logits' float type and back
        passes = _PASS.get(op.type, ())
        return list(op.outputs) if passes is None or i in passes else []

    out: dict[str, IndexRange] = {}
    for name in feeds:
        start = graph.get_tensor_by_name(name)
        if not start.dtype.is_integer:
            continue
        best = smallest_limit(start, uses, _limit, moved, key=lambda t: t.name)
        if best is not None:
            out[start.name] = best
    return out
