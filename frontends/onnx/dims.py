"""Dynamic input dimensions: which there are, their values from the user's flags, and writing them in.

``--dim NAME=VALUE`` sets a named dimension, ``--dim INPUT:AXIS=VALUE`` one
without a name, and ``--batch-size N`` every named dimension used as an
input's axis 0. A dimension left unresolved is an `InputError` naming the
input, the axis and the flag that fixes it: never a silent 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import onnx

from pardnn.errors import InputError


@dataclass(frozen=True)
class _Dyn:
    tensor: str
    axis: int
    param: str   # '' when unnamed

    @property
    def key(self) -> str:
        return self.param or f"{self.tensor}:{self.axis}"


def dynamic_dims(graph: onnx.GraphProto) -> list[_Dyn]:
    """Every dimension of a fed graph input without a fixed size, in input order."""
    inits = {t.name for t in graph.initializer}
    out = []
    for vi in graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            continue
        for axis, d in enumerate(tt.shape.dim):
            if not d.HasField("dim_value"):
                out.append(_Dyn(vi.name, axis, d.dim_param))
    return out


def sizes_a_batch(graph: onnx.GraphProto) -> bool:
    """Whether ``--batch-size`` sizes anything in ``graph``: a named dynamic dimension at axis 0 of an input."""
    return any(d.axis == 0 and d.param for d in dynamic_dims(graph))


def resolve_dims(graph: onnx.GraphProto, dims: Mapping[str, int], batch_size: int | None,
                 path: Path) -> dict[str, int]:
    """The value of every dynamic input dimension, keyed by `_Dyn.key`; raises naming the first unresolved.

    Precedence: ``--dim NAME=V`` (a named dimension, everywhere it occurs),
    ``--dim INPUT:AXIS=V`` (one axis of one input), then ``--batch-size`` for
    every named dimension that is axis 0 of some input (everywhere it
    occurs). An unnamed dimension needs ``--dim INPUT:AXIS=V`` even at axis 0:
    it is often not the batch (onnxruntime-training's ``labels`` is
    ``[batch * seq]``), and a guess would be silently wrong.
    """
    inits = {t.name for t in graph.initializer}
    for vi in graph.input:
        if vi.name not in inits and vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
            raise InputError(f"{path}: input {vi.name!r} has no shape in the model (not even its rank); "
                             "pardnn needs static shapes: re-export the model with input shapes")
    dyn = dynamic_dims(graph)
    known_keys = {d.param for d in dyn if d.param} | {f"{d.tensor}:{d.axis}" for d in dyn}
    for key, value in dims.items():
        if key not in known_keys:
            have = ", ".join(sorted({d.key for d in dyn})) or "none"
            raise InputError(f"{path}: --dim {key}={value}: the model has no dynamic input dimension named "
                             f"{key!r} (its dynamic dimensions: {have})")
        if int(value) < 1:
            raise InputError(f"{path}: --dim {key}={value}: a dimension must be at least 1")
    for d in dyn:      # a named dimension also given by its input and axis: the second value was dropped
        axis_key = f"{d.tensor}:{d.axis}"
        if d.param and d.param in dims and axis_key in dims and int(dims[axis_key]) != int(dims[d.param]):
            raise InputError(f"{path}: --dim {d.param}={dims[d.param]} and --dim {axis_key}={dims[axis_key]} "
                             f"disagree on dimension {d.param!r} (axis {d.axis} of input {d.tensor!r}); give "
                             "one of them")
    if batch_size is not None:
        for d in dyn:
            key = next((k for k in (d.param, f"{d.tensor}:{d.axis}") if k in dims), None) if d.axis == 0 else None
            if d.param and key is not None and dims[key] != batch_size:
                raise InputError(f"{path}: --dim {key}={dims[key]} and --batch-size {batch_size} disagree on "
                                 f"the batch dimension {d.param!r} (axis 0 of input {d.tensor!r}); give one of them")
    batch_params = {d.param for d in dyn if d.axis == 0 and d.param and d.param not in dims}
    out: dict[str, int] = {}
    unresolved: list[_Dyn] = []
    for d in dyn:
        value = dims.get(d.param) if d.param else None
        if value is None:
            value = dims.get(f"{d.tensor}:{d.axis}")
        if value is None and batch_size is not None and d.param in batch_params:
            value = batch_size
        if value is None:
            unresolved.append(d)
            continue
        if d.param and d.param in out and out[d.param] != int(value):
            raise InputError(f"{path}: dimension {d.param!r} gets two values ({out[d.param]} and {value}); "
                             f"give it once with --dim {d.param}=VALUE")
        out[d.key] = int(value)
    if unresolved:
        d = unresolved[0]
        what = f"dimension {d.axis} ({d.param!r})" if d.param else f"dimension {d.axis} (unnamed)"
        fix = f"--dim {d.key}=VALUE" + (" or --batch-size VALUE" if d.axis == 0 and d.param else "")
        more = {x.key for x in unresolved[1:]} - {d.key}
        tail = f"; also unresolved: {', '.join(sorted(more))}" if more else ""
        raise InputError(f"{path}: input {d.tensor!r} {what} is dynamic and pardnn needs its size: "
                         f"give it with {fix}{tail}")
    return out


def _fix_value_info(vi: onnx.ValueInfoProto, values: Mapping[str, int], *, by_axis: bool) -> None:
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return
    for axis, d in enumerate(vi.type.tensor_type.shape.dim):
        if d.HasField("dim_value"):
            continue
        v = values.get(d.dim_param) if d.dim_param else None
        if v is None and by_axis:
            v = values.get(f"{vi.name}:{axis}")
        if v is not None:
            d.dim_value = v   # clears dim_param (a oneof)


def fix_dims(model: onnx.ModelProto, values: Mapping[str, int]) -> None:
    """Write the resolved values into the graph's inputs, outputs and value infos, in place."""
    g = model.graph
    for vi in g.input:
        _fix_value_info(vi, values, by_axis=True)
    for vi in list(g.output) + list(g.value_info):
        _fix_value_info(vi, values, by_axis=False)
