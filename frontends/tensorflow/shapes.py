"""Static dtypes and shapes of every op output.

The flat GraphDef is imported into a ``tf.Graph`` (TensorFlow's C++ shape
functions run on import); where that leaves a dimension unknown, grappler's
static shape inference (``GraphProperties``, which iterates through loops
and evaluates shape arithmetic) fills it in when it can. Before both, every
unknown dimension of a feed takes ``--batch-size`` when one is given.

What is still unknown afterwards (typically inside lowered while loops)
is reported by `unknown_dims`; the caller then uses ``--batch-size`` for it
or raises, never assuming 1.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Sequence

from pardnn.errors import InputError

from ..common import first_line
from ._tf import graph_pb2, meta_graph_pb2, tf
from .model import Feed, parse_input

log = logging.getLogger("pardnn.frontends.tensorflow")

Shape = tuple[int | None, ...] | None


@dataclass(frozen=True)
class TensorInfo:
    """dtype and static shape of one op output (None dims unknown; None shape unknown rank)."""

    dtype: object          # tf.DType
    shape: Shape

    @property
    def known(self) -> bool:
        return self.shape is not None and all(d is not None for d in self.shape)

    def elements(self, fill: int | None = None) -> int | None:
        """Number of elements, unknown dims taking ``fill`` (None if unknown and no fill)."""
        if self.shape is None:
            return None if fill is None else fill
        n = 1
        for d in self.shape:
            if d is None:
                if fill is None:
                    return None
                d = fill
            n *= d
        return n

    def nbytes(self, fill: int | None = None) -> int | None:
        """Bytes of the tensor; 0 for handles, variants and strings (their size is not static)."""
        size = dtype_size(self.dtype)
        if size == 0:
            return 0
        n = self.elements(fill)
        return None if n is None else n * size


@lru_cache(maxsize=None)
def dtype_size(dtype) -> int:
    """Bytes per element; 0 for resource, variant and string tensors.

    >>> dtype_size(tf.float32), dtype_size(tf.resource), dtype_size(tf.float32._as_ref)
    (4, 0, 4)
    """
    base = dtype.base_dtype
    if base in (tf.resource, tf.variant, tf.string):
        return 0
    return int(base.size)


def with_batch(graph_def, feeds: Sequence[Feed], batch_size: int | None):
    """A copy of ``graph_def`` whose feed placeholders have unknown dims set to ``batch_size``."""
    if batch_size is None:
        return graph_def
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    feed_nodes = {f.node for f in feeds}
    for node in out.node:
        if node.op == "Placeholder" and node.name in feed_nodes and "shape" in node.attr:
            for d in node.attr["shape"].shape.dim:
                if d.size < 0:
                    d.size = batch_size
    return out


def without_back_edges(graph_def):
    """A copy of ``graph_def`` whose loop ``Merge`` ops drop their ``NextIteration`` input.

    Only for shape inference: TensorFlow infers a ``Merge``'s shape before it
    has seen the back edge, and so loses every shape in a lowered loop. With
    the back edge gone, each loop variable takes the shape of its entry value,
    which is TensorFlow's own loop-invariance rule (a loop may not change the
    shape of a variable unless its shape invariant says so). For the same
    reason every ``Enter`` is marked constant here, so that its output keeps
    its input's shape (a non-constant ``Enter`` has an unknown shape).
    """
    loop_sources = {n.name for n in graph_def.node if n.op in ("NextIteration", "RefNextIteration")}
    if not loop_sources and not any(n.op in ("Enter", "RefEnter") for n in graph_def.node):
        return graph_def
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    for node in out.node:
        if node.op in ("Enter", "RefEnter"):
            node.attr["is_constant"].b = True
        if node.op not in ("Merge", "RefMerge"):
            continue
        kept = [r for r in node.input if r.startswith("^") or r.split(":")[0] not in loop_sources]
        n_data = sum(not r.startswith("^") for r in kept)
        if n_data == len([r for r in node.input if not r.startswith("^")]) or n_data == 0:
            continue
        del node.input[:]
        node.input.extend(kept)
        node.attr["N"].i = n_data
    return out


def import_graph(graph_def, *, where: str):
    """``graph_def`` imported into a new ``tf.Graph`` with its names unchanged."""
    g = tf.Graph()
    try:
        with g.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
    except Exception as exc:
        raise InputError(f"{where}: TensorFlow rejects the graph: {first_line(exc)}") from None
    return g


def _from_tf_shape(shape) -> Shape:
    if shape.rank is None:
        return None
    return tuple(shape.as_list())


def _grappler_shapes(graph_def, roots: Iterable[str]) -> dict[str, list[Shape]]:
    """grappler's static shapes by node name (empty when grappler cannot analyse the graph)."""
    from tensorflow.python.grappler import item as gitem

    mg = meta_graph_pb2.MetaGraphDef()
    mg.graph_def.CopyFrom(graph_def)
    mg.collection_def["train_op"].node_list.value.extend(roots)
    try:
        props = gitem.Item(mg).GetOpProperties()
    except Exception as exc:   # shape refinement is an improvement, not a requirement
        log.debug("grappler shape inference failed: %s", exc)
        return {}
    out: dict[str, list[Shape]] = {}
    for name, tensors in props.items():
        shapes: list[Shape] = []
        for p in tensors:
            if p.shape.unknown_rank:
                shapes.append(None)
            else:
                shapes.append(tuple(d.size if d.size >= 0 else None for d in p.shape.dim))
        out[name] = shapes
    return out


def _merge(a: Shape, b: Shape) -> Shape:
    if a is None:
        return b
    if b is None or len(a) != len(b):
        return a
    return tuple(x if x is not None else y for x, y in zip(a, b))


def static_tensor_info(graph: "tf.Graph", graph_def, roots: Iterable[str], *,
                       where: str = "") -> dict[str, list[TensorInfo]]:
    """Each node's outputs as `TensorInfo`: import-time shapes, TensorList elements, grappler's.

    ``graph`` is ``graph_def`` imported (use `without_back_edges` first for
    graphs with loops). When a TensorList read has an unknown element shape
    that `resolve_list_elements` can state, the graph is imported once more
    with it, for shape inference only; the names stay the same.
    """
    info = _import_info(graph)
    resolved = resolve_list_elements(graph_def, info) if _unknown_count(info) else None
    if resolved is not None:
        graph_def, overrides = resolved
        info = _import_info(import_graph(graph_def, where=where))
        for (name, port), shape in overrides.items():
            t = info[name][port]
            info[name][port] = TensorInfo(t.dtype, shape)
    if _unknown_count(info):
        refined = _grappler_shapes(graph_def, roots)
        for name, shapes in refined.items():
            outs = info.get(name)
            if outs is None or len(shapes) != len(outs):
                continue
            info[name] = [TensorInfo(o.dtype, _merge(o.shape, s)) for o, s in zip(outs, shapes)]
    _bound_broadcast_args(graph_def, info)
    return info


def _bound_broadcast_args(graph_def, info: dict[str, list[TensorInfo]]) -> None:
    """``BroadcastGradientArgs`` returns at most as many axes as its inputs have entries: use that bound.

    Its outputs (the axes a gradient sums over) have a data-dependent length;
    the bound is exact when no axis broadcasts and small either way.
    """
    for node in graph_def.node:
        if node.op != "BroadcastGradientArgs" or node.name not in info:
            continue
        outs = info[node.name]
        if all(o.known for o in outs):
            continue
        lengths = []
        for ref in node.input[:2]:
            src, port, _ = parse_input(ref)
            shape = info[src][port].shape if src in info else None
            if shape is None or len(shape) != 1 or shape[0] is None:
                break
            lengths.append(shape[0])
        else:
            bound = max(lengths)
            info[node.name] = [o if o.known else TensorInfo(o.dtype, (bound,)) for o in outs]


def _unknown_count(info: dict[str, list[TensorInfo]]) -> int:
    return sum(1 for outs in info.values() for o in outs if not o.known and dtype_size(o.dtype))


def _import_info(graph) -> dict[str, list[TensorInfo]]:
    info: dict[str, list[TensorInfo]] = {}
    for op in graph.get_operations():
        info[op.name] = [TensorInfo(t.dtype, _from_tf_shape(t.shape)) for t in op.outputs]
    return info


def format_shape(shape: Shape) -> str:
    """``(None, 16)`` -> ``"[?, 16]"``; unknown rank -> ``"<unknown rank>"``."""
    if shape is None:
        return "<unknown rank>"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


# ---------------------------------------------------------------------------
# TensorList element shapes (the stashes of a lowered loop's gradient)
# ---------------------------------------------------------------------------

_LIST_FORWARDING = frozenset({"Identity", "Enter", "RefEnter", "Exit", "RefExit", "NextIteration",
                              "RefNextIteration", "Snapshot"})
_LIST_WRITERS = {"TensorListPushBack": 1, "TensorListSetItem": 2}
"""List op -> input index of the element it writes."""
_LIST_READERS = {"TensorListPopBack": 1, "TensorListGetItem": 2, "TensorListStack": 1}
"""List op -> input index of its ``element_shape`` operand."""


def _list_classes(graph_def) -> dict[tuple[str, int], tuple[str, int]]:
    """Each variant tensor ``(node, port)`` mapped to a representative of the list it carries."""
    parent: dict[tuple[str, int], tuple[str, int]] = {}

    def find(x):
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    for node in graph_def.node:
        data = [parse_input(r) for r in node.input if not r.startswith("^")]
        if not data:
            continue
        op = node.op
        if op in _LIST_FORWARDING or op in _LIST_WRITERS or op in ("TensorListPopBack",):
            union((data[0][0], data[0][1]), (node.name, 0))
        elif op in ("Merge", "RefMerge"):
            for src, port, _ in data:
                union((src, port), (node.name, 0))
        elif op in ("Switch", "RefSwitch"):
            union((data[0][0], data[0][1]), (node.name, 0))
            union((data[0][0], data[0][1]), (node.name, 1))
        elif op == "IdentityN":
            for i, (src, port, _) in enumerate(data):
                union((src, port), (node.name, i))
    return {k: find(k) for k in list(parent)}


def resolve_list_elements(graph_def, info: dict[str, list[TensorInfo]]):
    """A copy of ``graph_def`` whose TensorList reads state the element shape the lists were written with.

    A loop's gradient pops the forward pass's values back out of
    TensorLists, and TensorFlow does not carry a list's element shape through
    the loop's plumbing, so every popped value has an unknown shape. The
    lists a read and a write (``TensorListPushBack``, ``TensorListSetItem``,
    or the rows of ``TensorListFromTensor``) touch are matched through the
    forwarding ops;
    a ``TensorListGetItem`` or ``TensorListStack`` whose element shape is
    unknown gets a constant ``element_shape`` holding the shape its list was
    written with, and the element a ``TensorListPopBack`` returns (and the
    shape vector ``TensorListElementShape`` returns, whose length is the
    element's rank) passes through an ``EnsureShape`` of it: their shape
    functions ignore what is known. For shape inference only.

    Returns ``(graph_def, overrides)``, ``overrides`` mapping ``(node, port)``
    to the shape stated for it, or None when nothing was resolved.
    """
    classes = _list_classes(graph_def)
    overrides: dict[tuple[str, int], Shape] = {}

    def shape_of(src: str, port: int) -> Shape:
        if (src, port) in overrides:
            return overrides[(src, port)]
        return info[src][port].shape if src in info and port < len(info[src]) else None

    def list_of(node) -> tuple[str, int]:
        lst = parse_input(node.input[0])
        return classes.get((lst[0], lst[1]), (lst[0], lst[1]))

    elem: dict[tuple[str, int], Shape] = {}
    for _ in range(4):   # a shape vector's length can depend on another list's element: iterate
        changed = False
        for node in graph_def.node:
            idx = _LIST_WRITERS.get(node.op)
            if idx is not None and len(node.input) > idx:
                src, port, _ = parse_input(node.input[idx])
                shape = shape_of(src, port)
                key = list_of(node)
                if shape is not None and all(d is not None for d in shape) and elem.get(key) != shape:
                    elem[key] = _merge(elem.get(key), shape)
                    changed = True
            elif node.op == "TensorListFromTensor" and node.input:
                src, port, _ = parse_input(node.input[0])
                shape = shape_of(src, port)
                key = classes.get((node.name, 0), (node.name, 0))
                if shape and all(d is not None for d in shape) and elem.get(key) != tuple(shape[1:]):
                    elem[key] = _merge(elem.get(key), tuple(shape[1:]))
                    changed = True
            elif node.op == "TensorListElementShape" and node.input:
                e = elem.get(list_of(node))
                if e is not None and (node.name, 0) not in overrides and not (
                        info.get(node.name) and info[node.name][0].known):
                    overrides[(node.name, 0)] = (len(e),)
                    changed = True
        if not changed:
            break
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    rewire: dict[str, str] = {}

    def ensure(node_name: str, port: int, dtype_enum: int, shape) -> None:
        ensure_node = out.node.add()
        ensure_node.name = f"pardnn_element_shape/{node_name}"
        ensure_node.op = "EnsureShape"
        ensure_node.input.append(f"{node_name}:{port}")
        ensure_node.attr["T"].type = dtype_enum
        ensure_node.attr["shape"].shape.CopyFrom(tf.TensorShape(list(shape)).as_proto())
        rewire[f"{node_name}:{port}"] = ensure_node.name
        if port == 0:
            rewire[node_name] = ensure_node.name

    for node in list(out.node):
        if node.op == "TensorListElementShape" and (node.name, 0) in overrides:
            ensure(node.name, 0, node.attr["shape_type"].type, overrides[(node.name, 0)])
            continue
        idx = _LIST_READERS.get(node.op)
        if idx is None or len(node.input) <= idx:
            continue
        port_of_elem = 1 if node.op == "TensorListPopBack" else 0
        current = info.get(node.name)
        if current and port_of_elem < len(current) and current[port_of_elem].known:
            continue
        shape = elem.get(list_of(node))
        if shape is None:
            continue
        if node.op == "TensorListPopBack":
            ensure(node.name, 1, node.attr["element_dtype"].type, shape)
            overrides[(node.name, 1)] = shape
            continue
        const = out.node.add()
        const.name = f"pardnn_element_shape/{node.name}"
        const.op = "Const"
        const.attr["dtype"].type = tf.int32.as_datatype_enum
        const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(list(shape), dtype=tf.int32,
                                                                 shape=[len(shape)]))
        node.input[idx] = const.name
        if "shape_type" in node.attr:
            node.attr["shape_type"].type = tf.int32.as_datatype_enum
        overrides.setdefault((node.name, -1), shape)
    if not overrides:
        return None
    if rewire:
        for node in out.node:
            if node.name.startswith("pardnn_element_shape/"):
                continue
            for i, ref in enumerate(node.input):
                if ref in rewire:
                    node.input[i] = rewire[ref]
    return out, {k: v for k, v in overrides.items() if k[1] >= 0}
