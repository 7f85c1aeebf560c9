"""Read a SavedModel directory or a GraphDef file into a flat `TFModel`.

**SavedModel.** The signature is ``--signature`` when given; otherwise a
training-step signature (one whose key contains ``train``; the first in
sorted order if several), else ``serving_default``, else the only one. Its
inputs are the feeds, its outputs the fetches. The meta graph's functions
are inlined (`flatten.flatten`) and the graph pruned to what the signature
runs, so the variables' ``VarHandleOp`` nodes keep the SavedModel's names and
the save/restore and other signatures' ops are dropped. Variable values for
a profiled run come from the SavedModel's checkpoint (`savedmodel_values`).

**GraphDef** (``.pb`` binary, ``.pbtxt`` text). ``--signature`` may list the
output nodes to run, comma separated (``loss,train_op``). Without it, every
node that no other node consumes is an output, except the usual
non-step sinks: ``save/`` and ``save_N/`` scopes and the ``init``,
``init_N``, ``init_all_tables`` and ``legacy_init_op`` ops. Placeholders the
outputs depend on are the feeds. A ``saved_model.pb`` passed as a file is
read as its SavedModel directory.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Mapping

import numpy as np

from pardnn.errors import InputError

from ..common import first_line
from ._tf import graph_pb2, saved_model_pb2, tf
from .flatten import check_known_ops, flatten, prune
from .model import Feed, TFModel, parse_input, split_tensor_name

log = logging.getLogger("pardnn.frontends.tensorflow")

_NON_STEP_SINK = re.compile(r"^(save(_\d+)?/.*|init(_\d+)?|init_all_tables|legacy_init_op)$")


def _dims(shape_proto) -> tuple[int | None, ...] | None:
    if shape_proto.unknown_rank:
        return None
    return tuple(d.size if d.size >= 0 else None for d in shape_proto.dim)


# ---------------------------------------------------------------------------
# SavedModel
# ---------------------------------------------------------------------------

def _parse_saved_model(directory: Path):
    pb, pbtxt = directory / "saved_model.pb", directory / "saved_model.pbtxt"
    sm = saved_model_pb2.SavedModel()
    try:
        if pb.exists():
            sm.ParseFromString(pb.read_bytes())
            source = pb
        elif pbtxt.exists():
            from google.protobuf import text_format
            text_format.Parse(pbtxt.read_text(encoding="utf-8"), sm)
            source = pbtxt
        else:
            raise InputError(f"{directory}: not a SavedModel (no saved_model.pb inside)")
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"{pb if pb.exists() else pbtxt}: not a valid SavedModel ({first_line(exc)})") from None
    if not sm.meta_graphs:
        raise InputError(f"{source}: not a valid SavedModel (it holds no meta graph)")
    return sm, source


def choose_signature(available: list[str], wanted: str | None, where: str) -> str:
    """The signature key to import (see the module docstring for the default)."""
    listed = ", ".join(sorted(available)) or "none"
    if wanted:
        if wanted not in available:
            raise InputError(f"{where}: no signature {wanted!r}; it has: {listed}")
        return wanted
    train = sorted(k for k in available if "train" in k.lower())
    if train:
        return train[0]
    if "serving_default" in available:
        return "serving_default"
    real = [k for k in available if not k.startswith("__")]
    if len(real) == 1:
        return real[0]
    raise InputError(f"{where}: cannot tell which signature to import; pass --signature (it has: {listed})")


def read_savedmodel(directory: str | Path, signature: str | None = None, *, name: str | None = None) -> TFModel:
    directory = Path(directory)
    sm, source = _parse_saved_model(directory)
    where = str(directory)
    metas = [m for m in sm.meta_graphs if m.signature_def]
    if not metas:
        raise InputError(f"{source}: the SavedModel has no signatures to import")
    available = sorted({k for m in metas for k in m.signature_def})
    key = choose_signature(available, signature, where)
    mg = next(m for m in metas if key in m.signature_def)
    sig = mg.signature_def[key]
    feeds, fetches = [], []
    for arg, info in sorted(sig.inputs.items()):
        if not info.name:
            raise InputError(f"{where}: signature {key!r} input {arg!r} is not a plain tensor (composite inputs "
                             "are not supported)")
        feeds.append(Feed(info.name, tf.dtypes.as_dtype(info.dtype).name, _dims(info.tensor_shape), arg))
    for arg, info in sorted(sig.outputs.items()):
        if not info.name:
            raise InputError(f"{where}: signature {key!r} output {arg!r} is not a plain tensor")
        fetches.append(info.name)
    if not fetches:
        raise InputError(f"{where}: signature {key!r} has no outputs, so no step to import")
    check_known_ops(mg.graph_def, where)
    keep = [split_tensor_name(t)[0] for t in fetches] + [f.node for f in feeds]
    flat, inlined = flatten(mg.graph_def, keep, where=where)
    flat = prune(flat, keep, where=where)
    call_nodes = _signature_call_nodes(mg.graph_def, fetches)
    return TFModel(
        name=name or directory.resolve().name,
        graph_def=flat, feeds=tuple(feeds), fetches=tuple(fetches), targets=(),
        source=str(directory), source_format="tensorflow-savedmodel", signature=key,
        variable_values=lambda: savedmodel_values(directory, key, mg.graph_def, call_nodes, len(feeds)),
        inlined_functions=inlined,
    )


def _signature_call_nodes(graph_def, fetches) -> list[str]:
    by_name = {n.name: n for n in graph_def.node}
    out = []
    for t in fetches:
        node = by_name.get(split_tensor_name(t)[0])
        if node is not None and node.op in ("StatefulPartitionedCall", "PartitionedCall") and node.name not in out:
            out.append(node.name)
    return out


def savedmodel_values(directory: Path, key: str, graph_def, call_nodes: list[str],
                      n_args: int) -> Mapping[str, np.ndarray]:
    """Variable values from the SavedModel's checkpoint, by ``VarHandleOp`` node name.

    The signature's call node takes the signature's inputs and then one
    resource handle per captured variable; the SavedModel loader restores
    the same captures in the same order. Each value is checked against its
    ``VarHandleOp``'s shape and dtype; any mismatch, or a SavedModel the
    loader cannot read, gives an empty mapping (runs then draw values).
    """
    if len(call_nodes) != 1:
        return {}
    by_name = {n.name: n for n in graph_def.node}
    call = by_name[call_nodes[0]]
    handles = [parse_input(r)[0] for r in call.input if not r.startswith("^")][n_args:]
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)   # the loader warns about functions it will never differentiate here
    try:
        loaded = tf.saved_model.load(str(directory))
        captured = list(loaded.signatures[key].captured_inputs)
    except Exception as exc:  # the run can still go ahead with drawn values
        log.warning("%s: could not restore variable values (%s); drawing them instead", directory,
                    first_line(exc))
        return {}
    finally:
        absl.setLevel(level)
    if len(captured) != len(handles):
        return {}
    values: dict[str, np.ndarray] = {}
    for node_name, handle in zip(handles, captured):
        node = by_name.get(node_name)
        if node is None:
            return {}
        if node.op != "VarHandleOp":   # a captured constant (e.g. a position index): no value to restore
            continue
        dtype = tf.dtypes.as_dtype(node.attr["dtype"].type)
        try:
            value = tf.raw_ops.ReadVariableOp(resource=handle, dtype=dtype).numpy()
        except Exception:   # an uninitialised capture: leave it to be drawn
            continue
        shape = _dims(node.attr["shape"].shape)
        if shape is not None and (len(shape) != value.ndim or any(
                d is not None and d != s for d, s in zip(shape, value.shape))):
            return {}
        values[node_name] = value
    return values


# ---------------------------------------------------------------------------
# GraphDef
# ---------------------------------------------------------------------------

def parse_graphdef(path: Path):
    """The GraphDef in ``path`` (binary ``.pb`` or text ``.pbtxt``), checked for names and ops."""
    gd = graph_pb2.GraphDef()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        if path.name.lower().endswith(".pbtxt"):
            from google.protobuf import text_format
            text_format.Parse(data.decode("utf-8"), gd)
        else:
            gd.ParseFromString(data)
    except Exception as exc:
        raise InputError(f"{path}: not a valid GraphDef ({first_line(exc)})") from None
    if not gd.node:
        raise InputError(f"{path}: not a valid GraphDef (it has no nodes)")
    names = set()
    for i, node in enumerate(gd.node):
        if not node.name:
            raise InputError(f"{path}: not a valid GraphDef (node {i} has no name)")
        if node.name in names:
            raise InputError(f"{path}: node name {node.name!r} appears twice")
        names.add(node.name)
    return gd


def read_graphdef(path: str | Path, outputs: str | None = None, *, name: str | None = None) -> TFModel:
    path = Path(path)
    if path.name == "saved_model.pb":
        return read_savedmodel(path.parent, outputs, name=name)
    gd = parse_graphdef(path)
    where = str(path)
    check_known_ops(gd, where)
    names = {n.name for n in gd.node}
    if outputs:
        roots = [split_tensor_name(x.strip())[0] for x in outputs.split(",") if x.strip()]
        for r in roots:
            if r not in names:
                raise InputError(f"{where}: --signature names output node {r!r}, which the graph does not have")
    else:
        consumed = {parse_input(r)[0] for n in gd.node for r in n.input}
        roots = [n.name for n in gd.node if n.name not in consumed and not _NON_STEP_SINK.match(n.name)]
        if not roots:
            raise InputError(f"{where}: cannot tell the step's outputs; pass --signature OUTPUT[,OUTPUT...]")
    flat, inlined = flatten(gd, roots, where=where)
    flat = prune(flat, roots, where=where)
    by_name = {n.name: n for n in flat.node}
    fetches, targets = [], []
    for r in roots:
        node = by_name[r]
        if _has_outputs(node):
            fetches.append(f"{r}:0")
        else:
            targets.append(r)
    feeds = tuple(Feed(f"{n.name}:0", tf.dtypes.as_dtype(n.attr["dtype"].type).name, _dims(n.attr["shape"].shape)
                       if "shape" in n.attr else None)
                  for n in flat.node if n.op == "Placeholder")
    return TFModel(name=name or path.name.split(".")[0], graph_def=flat, feeds=feeds, fetches=tuple(fetches),
                   targets=tuple(targets), source=str(path), source_format="tensorflow-graphdef",
                   signature=outputs, variable_values=None, inlined_functions=inlined)


def _has_outputs(node) -> bool:
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(node.op)
    if op_def is None:
        return True
    return len(op_def.output_arg) > 0
