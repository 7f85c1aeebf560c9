"""Read an ONNX model and make it ready to convert or run: names, dimensions, shapes.

`prepare` is the one entry point the frontend and the backend share, so both
see the same node names and the same static shapes:

1. **read** the model without its external weights (their sizes are in the
   tensor headers; the files are checked to exist and be long enough), check
   it with `onnx.checker` (onnxruntime-training's gradient ops in the
   standard domain, such as ``MaxPoolGrad``, have no onnx schema: their
   schema check alone is skipped, see `check_model`), and inline model-local
   functions so that nodes map 1:1 to onnxruntime kernels;
2. **name** every node uniquely and stably (`unique_node_names`): ONNX names
   may be empty or repeated; the original is kept beside;
3. **fix dynamic dimensions** of the graph inputs from the user's values
   (`pardnn.frontends.onnx.dims.resolve_dims`): ``--dim NAME=VALUE`` for a named dimension,
   ``--dim INPUT:AXIS=VALUE`` for one without a name, and ``--batch-size N``
   for every named dimension used as an input's axis 0. A dimension left unresolved is an
   `InputError` naming the input, the axis and the flag that fixes it: never
   a silent 1;
4. **infer shapes** with ONNX shape inference (data propagation on), in
   rounds with two helpers until nothing changes: shape arithmetic
   (``Shape -> Gather -> Range``, masks from ``ConstantOfShape``) is evaluated
   with onnx's reference ops, and the com.microsoft ops of
   onnxruntime-training graphs are sized from their inputs (``ConvGrad``,
   ``BatchNormInternal``, ``MaxPoolGrad``, ...) or by their conventions (the
   gradient ``T_grad`` has the shape of ``T``); see `pardnn.frontends.onnx.shapes`. What is still
   unsized is measured by running the model once with onnxruntime; if that
   fails too, an `InputError` names the tensor and the node that makes it.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import onnx
from onnx import TensorProto

from pardnn.errors import InputError

from ..common import one_line
from .dims import fix_dims, resolve_dims, sizes_a_batch
from .inputs import IndexRange, index_ranges
from .runtime import measure_shapes
from .shapes import TensorInfo, element_size, infer_tensors
from .training_ops import ORT_STANDARD_DOMAIN_OPS, STATE_UPDATE_OPS

_GRAD_BUFFER_SUFFIX = "_grad.accumulation.buffer"


@dataclass(frozen=True, eq=False)
class PreparedModel:
    """A model ready for conversion or a run (see the module docstring)."""

    model: onnx.ModelProto
    """Functions inlined, every node's ``name`` its unique pardnn name, dynamic input dims fixed."""
    path: Path
    original_names: tuple[str, ...]
    """The ONNX name of each node as the file had it ('' when it had none)."""
    tensors: Mapping[str, TensorInfo]
    """Every value with a known static shape: inputs, initializers, node outputs."""
    dims: Mapping[str, int] = field(default_factory=dict)
    """The dynamic dimensions fixed, by name (``INPUT:AXIS`` for unnamed ones)."""
    measured: tuple[str, ...] = ()
    """Tensors whose shapes came from an onnxruntime run rather than shape inference."""
    batch_size: int | None = None
    """``--batch-size`` when it sized the model's batch (a named dynamic dimension at axis 0), else None."""
    bodies: Mapping[str, onnx.NodeProto] = field(default_factory=dict)
    """Each node with subgraphs (``If``, ``Loop``, ``Scan``) by name, as ONNX shape inference returned it: its
    subgraphs carry the shapes of their values (the costs read them; runs use ``model``)."""
    constants: Mapping[str, Any] = field(default_factory=dict)
    """Small values known without running (numpy arrays): weights, ``Constant`` nodes, folded shape
    arithmetic; a ``Loop``'s trip count comes from here."""

    def costed(self, node: onnx.NodeProto) -> onnx.NodeProto:
        """``node`` as the costs read it: with the shapes of its subgraphs' values when it has subgraphs."""
        return self.bodies.get(node.name, node)

    @property
    def graph(self) -> onnx.GraphProto:
        return self.model.graph

    @property
    def initializer_names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.graph.initializer)

    @property
    def feed_names(self) -> list[str]:
        """Graph inputs a run must feed (inputs that are not initializers)."""
        inits = self.initializer_names
        return [i.name for i in self.graph.input if i.name not in inits]

    def index_ranges(self) -> dict[str, IndexRange]:
        """The values each integer feed may take, where the model limits them (`inputs.index_ranges`)."""
        return index_ranges(self.graph, self.feed_names, self.tensors, self.constants)

    @property
    def is_training(self) -> bool:
        """True for an onnxruntime-training ``training_model.onnx`` (gradients and accumulators inside)."""
        return is_training_graph(self.graph)


def is_training_graph(graph: onnx.GraphProto) -> bool:
    """Whether ``graph`` has onnxruntime-training's gradient or state-update ops."""
    return any(n.op_type in STATE_UPDATE_OPS or (n.domain == "com.microsoft" and n.op_type.endswith("Grad"))
               or "_Grad/" in n.name for n in graph.node) or any(
        i.name.endswith(_GRAD_BUFFER_SUFFIX) for i in graph.input)


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------



def read_model(path: str | Path, *, load_data: bool = False) -> onnx.ModelProto:
    """The model at ``path``; external weights are checked, and loaded only with ``load_data``."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such ONNX file")
    try:
        m = onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError and friends
        raise InputError(f"{p}: not a readable ONNX model ({one_line(exc)})") from None
    if not m.HasField("graph") or len(m.graph.node) == 0:
        raise InputError(f"{p}: not an ONNX model with a graph (no nodes found)")
    _check_external_data(m, p)
    if load_data:
        try:
            onnx.external_data_helper.load_external_data_for_model(m, str(p.parent))
        except OSError as exc:
            raise InputError(f"{p}: cannot read external weights ({one_line(exc)})") from None
    return m


def _check_external_data(m: onnx.ModelProto, p: Path) -> None:
    base = p.parent.resolve()
    for t in _all_tensors(m):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        f = (base / loc).resolve()
        if not loc or base not in f.parents and f != base:
            raise InputError(f"{p}: initializer {t.name!r} points outside the model's folder ({loc!r})")
        if not f.is_file():
            raise InputError(f"{p}: initializer {t.name!r} needs external data file {loc!r}, which is missing "
                             f"(looked in {base})")
        offset, length = (_external_count(p, t.name, info, key) for key in ("offset", "length"))
        if length is None:      # as far as the tensor's own bytes go (a 10-byte file for 512 was taken)
            length = _packed_bytes(t)
        need = (offset or 0) + (length or 0)
        if need > f.stat().st_size:
            raise InputError(f"{p}: external data file {loc!r} is {f.stat().st_size} bytes, but initializer "
                             f"{t.name!r} needs {need}: truncated?")


def _external_count(p: Path, name: str, info: Mapping[str, str], key: str) -> int | None:
    """External data's ``offset`` or ``length``: a whole number of bytes, 0 or more (None when not given);
    ``length: "abc"`` was a ValueError (exit 1) and ``offset: "-5"`` was taken."""
    text = info.get(key)
    if text is None or text == "":
        return None
    t = text.strip()
    if not (t.isascii() and t.isdigit()):
        raise InputError(f"{p}: initializer {name!r}: external data {key} must be a whole number of bytes, "
                         f"got {text!r}")
    return int(t)


_WHOLE_BYTE_TYPES = frozenset(getattr(TensorProto, n) for n in (
    "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64",
    "COMPLEX64", "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")
    if hasattr(TensorProto, n))
"""Element types stored a whole number of bytes per element (not strings, nor 4- and 2-bit types, packed)."""


def _packed_bytes(t: TensorProto) -> int | None:
    """The bytes a tensor's data takes in an external file, where its type says (None: not known)."""
    if t.data_type not in _WHOLE_BYTE_TYPES:
        return None
    n = 1
    for d in t.dims:
        n *= max(int(d), 0)
    return n * element_size(t.data_type)


def _all_tensors(m: onnx.ModelProto):
    yield from m.graph.initializer
    for n in m.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t


def unregistered_training_ops(model: onnx.ModelProto) -> list[int]:
    """Indices of the nodes `check_model` lets through: onnxruntime-training ops that onnx cannot check.

    A node qualifies when the model imports the ``com.microsoft`` domain (it
    came through onnxruntime), the node is in the standard domain, onnx has no
    schema for its op type, and the op is one of onnxruntime's
    (`ORT_STANDARD_DOMAIN_OPS`, or a name ending in ``Grad``). Any other
    unknown standard op is still a checker error.
    """
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        return []
    return [i for i, n in enumerate(model.graph.node)
            if n.domain in ("", "ai.onnx") and (n.op_type in ORT_STANDARD_DOMAIN_OPS or n.op_type.endswith("Grad"))
            and not onnx.defs.has(n.op_type)]


def check_model(path: Path, model: onnx.ModelProto | None = None) -> None:
    """`onnx.checker` on the file (external data resolved beside it); a failure is one `InputError` line.

    onnxruntime-training graphs put a few gradient ops (``MaxPoolGrad``, ...)
    in the standard domain, where onnx has no schema and the checker would
    refuse them. Given the ``model`` read from ``path``, those nodes
    (`unregistered_training_ops`) are moved to the ``com.microsoft`` domain
    in a copy, and the copy is checked: everything else (graph structure,
    topological order, the other nodes' schemas, types and attributes) is
    still checked. ops in custom domains are never checked by onnx.
    """
    skip = unregistered_training_ops(model) if model is not None else []
    try:
        if not skip:
            onnx.checker.check_model(str(path))
        else:
            work = onnx.ModelProto()
            work.CopyFrom(model)
            for i in skip:
                work.graph.node[i].domain = "com.microsoft"
            onnx.checker.check_model(work)
    except onnx.checker.ValidationError as exc:
        raise InputError(f"{path}: invalid ONNX model: {one_line(exc)}") from None
    if model is not None:
        check_versions(path, model)


_ELEM_TYPES = frozenset(TensorProto.DataType.values())


def check_versions(path: Path, model: onnx.ModelProto) -> None:
    """Refuse what `onnx.checker` lets through but no run can take: a standard-domain opset newer than the
    installed onnx knows (its ops' meaning is not known here), and a tensor whose element type is no ONNX
    type (a graph input, output, value or initializer). Both were read and failed only at ``pardnn run``."""
    newest = onnx.defs.onnx_opset_version()
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version > newest:
            raise InputError(f"{path}: opset {o.version} of the standard domain is newer than onnx "
                             f"{onnx.__version__} knows (up to {newest}); export with opset {newest} or older")
    g = model.graph
    for kind, values in (("input", g.input), ("output", g.output), ("value", g.value_info)):
        for v in values:
            t = v.type
            if t.HasField("tensor_type") and t.tensor_type.elem_type not in _ELEM_TYPES:
                raise InputError(f"{path}: {kind} {v.name!r} has element type {t.tensor_type.elem_type}, "
                                 f"which is no ONNX tensor type")
    for t in g.initializer:
        if t.data_type not in _ELEM_TYPES:
            raise InputError(f"{path}: initializer {t.name!r} has element type {t.data_type}, which is no ONNX "
                             f"tensor type")


# ---------------------------------------------------------------------------
# names
# ---------------------------------------------------------------------------

def unique_node_names(nodes) -> list[str]:
    """A unique, stable name for each node, in order.

    A node whose ONNX name is non-empty and appears once keeps it. Every other
    node (empty or repeated name) gets ``NAME_i`` (or ``OPTYPE_i`` when it has
    no name), ``i`` its position in the graph, with ``_`` appended until unique.

    >>> from onnx import helper
    >>> ns = [helper.make_node("Relu", ["a"], ["b"], name="r"), helper.make_node("Relu", ["b"], ["c"]),
    ...       helper.make_node("Add", ["c", "c"], ["d"], name="x"), helper.make_node("Add", ["d", "d"], ["e"], name="x")]
    >>> unique_node_names(ns)
    ['r', 'Relu_1', 'x_2', 'x_3']
    """
    counts = Counter(n.name for n in nodes)
    taken = {name for name, c in counts.items() if name and c == 1}
    out: list[str] = []
    for i, n in enumerate(nodes):
        if n.name and counts[n.name] == 1:
            out.append(n.name)
            continue
        cand = f"{n.name or n.op_type}_{i}"
        while cand in taken:
            cand += "_"
        taken.add(cand)
        out.append(cand)
    return out


# ---------------------------------------------------------------------------
# the entry point
# ---------------------------------------------------------------------------

def _warn_unsized_batch(g: onnx.GraphProto, batch_size: int, p: Path) -> None:
    """``--batch-size`` where no input has a named dynamic axis 0 sizes nothing (as the TensorFlow frontend
    says): a warning naming the inputs' shapes, unless it is some input's fixed leading dimension."""
    inits = {t.name for t in g.initializer}
    shapes = []
    for vi in g.input:
        if vi.name in inits or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        shapes.append((vi.name, [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                                 for d in vi.type.tensor_type.shape.dim]))
    if any(dims and dims[0] == batch_size for _, dims in shapes):
        return
    fixed = ", ".join(f"{name} [{', '.join(str(d) for d in dims)}]" for name, dims in shapes) or "none"
    logging.getLogger("pardnn.frontends.onnx").warning(
        "%s: --batch-size %d sizes nothing: no input has a named dynamic first dimension (inputs: %s); ignored",
        p, batch_size, fixed)


def prepare(path: str | Path, *, dims: Mapping[str, int] | None = None, batch_size: int | None = None,
            measure_unknown: bool = True) -> PreparedModel:
    """Read, check, name, fix dimensions and infer shapes (see the module docstring).

    ``path`` may also be a folder of onnxruntime-training artifacts: its
    ``training_model.onnx`` is read.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "training_model.onnx"
    model = read_model(p)
    check_model(p, model)
    if len(model.functions):
        from onnx import inliner
        model = inliner.inline_local_functions(model)
    g = model.graph
    originals = tuple(n.name for n in g.node)
    for n, name in zip(g.node, unique_node_names(g.node)):
        n.name = name
    values = resolve_dims(g, dims or {}, batch_size, p)
    batch = batch_size if batch_size is not None and sizes_a_batch(g) else None
    if batch_size is not None and batch is None:
        _warn_unsized_batch(g, batch_size, p)
    fix_dims(model, values)
    fallback = functools.partial(measure_shapes, base_dir=p.parent) if measure_unknown else None
    shapes = infer_tensors(model, p, run_fallback=fallback)
    return PreparedModel(model, p, originals, shapes.tensors, values, shapes.measured, batch, shapes.bodies,
                         shapes.constants)
