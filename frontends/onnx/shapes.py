"""Static shapes of every value of an ONNX model: shape inference, shape arithmetic, training-op conventions.

`infer_tensors` runs ONNX shape inference (data propagation on) in rounds
with two helpers until nothing changes: shape arithmetic (``Shape -> Gather
-> Range``, masks from ``ConstantOfShape``) is evaluated with onnx's reference
ops (`_Folder`), and the ops of onnxruntime-training graphs are sized from
their inputs (``ConvGrad``, ``BatchNormInternal``, ``BatchNormalizationGrad``,
``MaxPoolGrad``, the ``SoftmaxCrossEntropyLoss*`` family; `_op_rule`) or by
their conventions (the gradient ``T_grad`` has the shape of ``T``;
`_training_rule`). What is still unsized is measured by a caller-given
fallback (an onnxruntime run); if that fails too, an `InputError` names the
tensor and the node that makes it.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections import ChainMap
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, NamedTuple

import numpy as np
import onnx
from onnx import TensorProto, helper

from pardnn.errors import InputError, MissingDependencyError

from ..common import one_line
from .training_ops import ORT_STANDARD_DOMAIN_OPS, training_rule

log = logging.getLogger("pardnn.frontends.onnx")



@dataclass(frozen=True)
class TensorInfo:
    """A value with a static shape: element type (``onnx.TensorProto`` enum) and dimensions.

    A sequence of tensors (``seq(tensor(T))``, from ``SplitToSequence``,
    ``SequenceConstruct``, ...) has ``elements``, the shape of each tensor in
    it; its ``shape`` is then ``(len(elements),)`` and its size the sum of its
    elements' sizes. An ``optional`` one (``optional(tensor(T))``, from
    ``Optional``) holds a tensor of ``shape``.
    """

    name: str
    elem_type: int
    shape: tuple[int, ...]
    elements: tuple[tuple[int, ...], ...] | None = None
    optional: bool = False

    @classmethod
    def sequence(cls, name: str, elem_type: int, elements) -> "TensorInfo":
        els = tuple(tuple(int(x) for x in e) for e in elements)
        return cls(name, elem_type, (len(els),), els)

    @property
    def is_sequence(self) -> bool:
        return self.elements is not None

    @property
    def numel(self) -> int:
        if self.elements is not None:
            return sum(math.prod(e) for e in self.elements)
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return element_size(self.elem_type)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    def value_info(self) -> onnx.ValueInfoProto:
        """The ONNX declaration of this value: a tensor type, or a sequence type for a sequence.

        >>> s = TensorInfo.sequence("s", TensorProto.FLOAT, [(1, 8), (1, 8), (2, 8)])
        >>> s.nbytes, s.value_info().type.sequence_type.elem_type.tensor_type.shape.dim[1].dim_value
        (128, 8)
        """
        if self.optional:
            tensor = helper.make_tensor_type_proto(self.elem_type, list(self.shape))
            return helper.make_value_info(self.name, helper.make_optional_type_proto(tensor))
        if self.elements is None:
            return helper.make_tensor_value_info(self.name, self.elem_type, list(self.shape))
        return helper.make_tensor_sequence_value_info(self.name, self.elem_type, common_shape(self.elements))


def common_shape(shapes) -> list[int | None] | None:
    """The shape all of ``shapes`` share: a dimension they differ in is None, differing ranks give None.

    >>> common_shape([(1, 8), (2, 8)]), common_shape([(3,), (3, 1)]), common_shape([])
    ([None, 8], None, None)
    """
    shapes = list(shapes)
    if not shapes or len({len(s) for s in shapes}) != 1:
        return None
    return [d[0] if len(set(d)) == 1 else None for d in zip(*shapes)]


@functools.lru_cache(maxsize=None)
def element_size(elem_type: int) -> int:
    """Bytes per element of an ONNX tensor type (strings count as a pointer, 8 bytes).

    >>> element_size(TensorProto.FLOAT), element_size(TensorProto.INT64), element_size(TensorProto.BFLOAT16)
    (4, 8, 2)
    """
    if elem_type in (TensorProto.UNDEFINED,):
        return 0
    try:
        return int(helper.tensor_dtype_to_np_dtype(elem_type).itemsize)
    except (KeyError, ValueError, TypeError):
        return 4


def _static(vi: onnx.ValueInfoProto) -> TensorInfo | None:
    if not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if not tt.HasField("shape") or tt.elem_type == TensorProto.UNDEFINED:
        return None
    shape = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        shape.append(int(d.dim_value))
    return TensorInfo(vi.name, tt.elem_type, tuple(shape))


def graph_tensors(g: onnx.GraphProto) -> dict[str, TensorInfo]:
    """The statically sized values a graph (or subgraph) declares: inputs, value infos, outputs, weights, constants."""
    out: dict[str, TensorInfo] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        info = _static(vi)
        if info is not None:
            out[vi.name] = info
    for t in g.initializer:
        out[t.name] = TensorInfo(t.name, t.data_type, tuple(int(x) for x in t.dims))
    for n in g.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output:
            for a in n.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    out[n.output[0]] = TensorInfo(n.output[0], a.t.data_type, tuple(int(x) for x in a.t.dims))
    return out


def small_values(g: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The values of a graph's small weights and ``Constant`` nodes (at most `_FOLD_LIMIT` elements, data inside)."""
    out: dict[str, np.ndarray] = {}
    tensors = [(t.name, t) for t in g.initializer]
    tensors += [(n.output[0], a.t) for n in g.node if n.op_type == "Constant" and n.domain in ("", "ai.onnx")
                and n.output for a in n.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR]
    for name, t in tensors:
        if t.data_location != TensorProto.EXTERNAL and np.prod(t.dims, dtype=np.int64) <= _FOLD_LIMIT:
            out[name] = onnx.numpy_helper.to_array(t)
    # a Constant of a plain number or list (value_int=10: how exporters write a Loop's trip count)
    plain = {"value_int": np.int64, "value_ints": np.int64, "value_float": np.float32, "value_floats": np.float32}
    for n in g.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output:
            for a in n.attribute:
                if a.name in plain:
                    out[n.output[0]] = np.asarray(helper.get_attribute_value(a), dtype=plain[a.name])
    return out


def with_bodies(g: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """The nodes of ``g`` that have subgraphs (``If``, ``Loop``, ``Scan``, ...), by name."""
    return {n.name: n for n in g.node
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute)}


def _bind_loop_inputs(g: onnx.GraphProto, scope: Mapping[str, TensorInfo]) -> int:
    """Give each unsized loop-carried input of a ``Loop`` body in ``g`` (nested ones too) the static type of the
    Loop's initial value, in place; returns how many were bound.

    ONNX shape inference leaves them unsized (a loop may change their shapes between iterations), and with
    them everything the body computes from them.
    """
    bound = 0
    for n in g.node:
        subs = [a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH]
        subs += [b for a in n.attribute if a.type == onnx.AttributeProto.GRAPHS for b in a.graphs]
        if n.op_type == "Loop" and subs:
            for vi, init in zip(subs[0].input[2:], n.input[2:]):
                t = scope.get(init)
                if _static(vi) is None and t is not None and not t.is_sequence:
                    vi.type.CopyFrom(t.value_info().type)
                    bound += 1
            # its final loop-carried values, unsized where inference left them so (inside an outer body, what
            # follows the inner Loop cost nothing): their body outputs' types, else their initial values'
            declared = {v.name: v for v in g.value_info}
            for out, body_out, init in zip(n.output, subs[0].output[1:], n.input[2:]):
                if not out or scope.get(out) is not None:
                    continue
                t = _static(body_out) or scope.get(init)
                if t is None or t.is_sequence:
                    continue
                if out in declared:
                    declared[out].type.CopyFrom(t.value_info().type)
                else:
                    g.value_info.append(replace(t, name=out).value_info())
                bound += 1
        for sub in subs:
            bound += _bind_loop_inputs(sub, ChainMap(graph_tensors(sub), scope))
    return bound


def _bodies_sized(inferred: onnx.ModelProto, known: Mapping[str, TensorInfo]) -> dict[str, onnx.NodeProto]:
    """`with_bodies` of ``inferred``, its Loop bodies inferred again with their loop-carried inputs bound
    (`_bind_loop_inputs`), in rounds for nested loops; a round shape inference refuses is dropped."""
    for _ in range(4):
        candidate = onnx.ModelProto()
        candidate.CopyFrom(inferred)
        if not _bind_loop_inputs(candidate.graph, known):
            break
        try:
            inferred = onnx.shape_inference.infer_shapes(candidate, data_prop=True)
        except Exception:   # the bound shapes contradict the body: keep what ONNX inferred
            break
    return with_bodies(inferred.graph)


def _infer(model: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:  # InferenceError: the model contradicts itself (often a wrong --dim)
        raise InputError(f"{path}: ONNX shape inference failed: {one_line(exc)}") from None


def _missing(model: onnx.ModelProto, known: Mapping[str, TensorInfo]) -> list[tuple[str, int]]:
    """(tensor, node index) of every node output without a static shape."""
    return [(o, i) for i, n in enumerate(model.graph.node) for o in n.output if o and o not in known]


def _apply_training_rules(model: onnx.ModelProto, known: dict[str, TensorInfo]) -> int:
    """Size what onnxruntime-training's ops and conventions size (`training_rule`); count the tensors sized."""
    added = 0
    producers = {o: n for n in model.graph.node for o in n.output if o}
    for n in model.graph.node:
        for j, o in enumerate(n.output):
            if not o or o in known:
                continue
            rule = training_rule(n, j, known, producers)
            if rule is not None:
                info = known[o] = TensorInfo(o, *rule)
                model.graph.value_info.append(helper.make_tensor_value_info(o, info.elem_type, list(info.shape)))
                added += 1
    return added


_FOLD_LIMIT = 1 << 16   # elements: larger values are sized, not kept
_NO_FOLD = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                      "Bernoulli", "If", "Loop", "Scan", "SequenceMap",
                      # a sequence or an optional is no tensor initializer: folding one declared it a tensor, and
                      # shape inference then refused the model ("type case mismatch")
                      "SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase", "SplitToSequence",
                      "Optional"})


class _Folder:
    """Evaluates shape arithmetic (``Shape -> Gather -> Range -> ...``) with onnx's reference ops.

    ONNX shape inference cannot size a tensor whose shape is computed from
    runtime values (``Range(0, seq)``, a mask built with ``ConstantOfShape``).
    The folder evaluates every standard-domain node whose inputs are all
    known small values (initializers, constants, shapes of sized tensors) and
    turns its outputs into initializers of a working copy of the model, so the
    next round of shape inference sees them as constants.
    """

    def __init__(self, work: onnx.ModelProto):
        self.work = work
        self.opsets = {o.domain or "": o.version for o in work.opset_import if o.domain in ("", "ai.onnx")}
        self.values: dict[str, np.ndarray] = {}
        for t in work.graph.initializer:
            if t.data_location != TensorProto.EXTERNAL and np.prod(t.dims, dtype=np.int64) <= _FOLD_LIMIT:
                self.values[t.name] = onnx.numpy_helper.to_array(t)

    def _shape_of(self, n: onnx.NodeProto, known: Mapping[str, TensorInfo]) -> np.ndarray:
        shape = np.asarray(known[n.input[0]].shape, dtype=np.int64)
        if n.op_type == "Size":
            return np.asarray(known[n.input[0]].numel, dtype=np.int64)
        attrs = {a.name: a.i for a in n.attribute}
        r = len(shape)
        start, end = attrs.get("start", 0), attrs.get("end", r)
        start, end = (start + r if start < 0 else start), (end + r if end < 0 else end)
        return shape[max(0, min(start, r)):max(0, min(end, r))]

    def fold(self, known: dict[str, TensorInfo]) -> int:
        """Fold what can be folded now; returns how many nodes were folded."""
        from onnx.reference import ReferenceEvaluator

        kept, folded = [], 0
        for n in self.work.graph.node:
            ok = n.domain in ("", "ai.onnx") and n.op_type not in _NO_FOLD and all(o for o in n.output)
            if n.op_type == "ConcatTraining" and not all(o for o in n.output):
                kept.append(n)
                continue
            if ok and n.op_type in ("Shape", "Size"):
                if n.input[0] not in known:
                    kept.append(n)
                    continue
                outs = [self._shape_of(n, known)]
            elif n.op_type == "ConcatTraining" and n.input and all(i in self.values for i in n.input):
                axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
                xs = [self.values[i] for i in n.input]
                outs = [np.concatenate(xs, axis=axis), np.asarray([x.shape[axis] for x in xs], dtype=np.int64)]
                outs = outs[:len(n.output)]
            elif ok and all(i == "" or i in self.values for i in n.input):
                feeds = {i: self.values[i] for i in n.input if i}
                try:
                    outs = ReferenceEvaluator(n, opsets=self.opsets).run(None, feeds)
                except Exception:   # an op the reference cannot run: leave it to inference
                    kept.append(n)
                    continue
            else:
                kept.append(n)
                continue
            outs = [np.asarray(v) for v in outs]
            if any(v.dtype == object or v.size > _FOLD_LIMIT for v in outs):
                for name, v in zip(n.output, outs):
                    if v.dtype != object:
                        known[name] = TensorInfo(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                kept.append(n)
                continue
            for name, v in zip(n.output, outs):
                self.values[name] = v
                self.work.graph.initializer.append(onnx.numpy_helper.from_array(v, name))
                known[name] = TensorInfo(name, helper.np_dtype_to_tensor_dtype(v.dtype), tuple(v.shape))
            folded += 1
        if folded:
            del self.work.graph.node[:]
            self.work.graph.node.extend(kept)
        return folded


class Inferred(NamedTuple):
    """What `infer_tensors` found."""

    tensors: dict[str, TensorInfo]
    """Every value of the main graph with a static shape."""
    measured: tuple[str, ...]
    """The values an onnxruntime run sized."""
    bodies: dict[str, onnx.NodeProto]
    """Each node with subgraphs (by name) as shape inference returned it: its subgraphs' value infos (and
    their nested subgraphs') hold the shapes inference gave their values, a Loop body's sized from the Loop's
    initial values (`_bind_loop_inputs`). For costs; ``model`` is not changed."""
    constants: dict[str, np.ndarray]
    """The small values known before running: weights, ``Constant`` nodes, folded shape arithmetic."""


_UNREGISTERED = re.compile(r"([\w.]*):(\w+)\(-?\d+\) is not a registered function/op")


def _training_only(message: str) -> bool:
    """Whether onnxruntime refused a model for an op that only onnxruntime-training has (a com.microsoft
    op, or one of its ops in the standard domain)."""
    m = _UNREGISTERED.search(message)
    return m is not None and (m.group(1) == "com.microsoft" or m.group(1) in ("", "ai.onnx") and (
        m.group(2) in ORT_STANDARD_DOMAIN_OPS or m.group(2).endswith("Grad")))


def infer_tensors(model: onnx.ModelProto, path: Path, *, run_fallback=None) -> Inferred:
    """Static shapes of every value; writes them into ``model``'s value infos (see `Inferred` for what it returns).

    Rounds of ONNX shape inference, folding of shape arithmetic (`_Folder`)
    and onnxruntime-training's gradient convention, until every node output
    is sized or nothing changes. ``run_fallback(model, names) -> {name:
    TensorInfo}`` then measures what is left (an onnxruntime run; a sequence
    comes back as one, with its elements' shapes); None disables it.
    """
    work = onnx.ModelProto()
    work.CopyFrom(model)
    folder = _Folder(work)
    known: dict[str, TensorInfo] = {}
    for _ in range(16):
        inferred = _infer(work, path)
        known.update(graph_tensors(inferred.graph))
        work.graph.ClearField("value_info")
        work.graph.value_info.extend(inferred.graph.value_info)
        if not _missing(model, known):
            break
        if not folder.fold(known) + _apply_training_rules(work, known):
            break
    # a Loop's trip count (and its first condition) computed by shape arithmetic (M = Shape(x)[0] / 4): folded
    # too, where every tensor was sized without it, so that the roofline multiplies its body by the count
    counts = [i for n in model.graph.node if n.op_type == "Loop" for i in n.input[:2] if i]
    for _ in range(16):
        if all(i in folder.values for i in counts) or not folder.fold(known):
            break
    missing = _missing(model, known)
    measured: tuple[str, ...] = ()
    if missing and run_fallback is not None:
        names = [t for t, _ in missing]
        log.info("%s: %d tensors have no static shape after ONNX shape inference; measuring them with "
                 "onnxruntime", path, len(names))
        try:
            got = run_fallback(model, names)
        except Exception as exc:
            t, i = missing[0]
            n = model.graph.node[i]
            what = f"{path}: tensor {t!r} (output of node {n.name!r}, {n.op_type}) has no static shape after ONNX " \
                   "shape inference, and running the model to measure it failed"
            if _training_only(str(exc)):
                raise MissingDependencyError(f"{what}: the model has ops this onnxruntime lacks; install "
                                             f"onnxruntime-training to read it ({one_line(exc)})") from None
            raise InputError(f"{what}: {one_line(exc)}") from None
        known.update(got)
        measured = tuple(sorted(got))
        missing = _missing(model, known)
    if missing:
        t, i = missing[0]
        n = model.graph.node[i]
        raise InputError(f"{path}: tensor {t!r} (output of node {n.name!r}, {n.op_type}) has no static shape "
                         f"after ONNX shape inference; fix the input dimensions with --dim/--batch-size "
                         f"({len(missing)} tensors unsized)")
    outputs = {o.name for o in model.graph.output}
    for o in model.graph.output:
        if o.name in known and _static(o) is None:
            t = known[o.name]
            o.type.CopyFrom(t.value_info().type)
    inputs = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    model.graph.ClearField("value_info")
    model.graph.value_info.extend(t.value_info() for name, t in known.items()
                                  if name not in outputs and name not in inputs)
    bodies = _bodies_sized(inferred, known) if any(n.op_type == "Loop" for n in inferred.graph.node) \
        else with_bodies(inferred.graph)
    return Inferred(known, measured, bodies, {**small_values(model.graph), **folder.values})
