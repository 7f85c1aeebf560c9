"""onnxruntime plumbing shared by the frontend (profiles, shape measurement) and the backend (stage runs).

* `providers_for` picks the execution provider for a device name: the CUDA
  provider (with that GPU's index) when onnxruntime has it and the device is
  a GPU, else the CPU provider;
* `make_session` builds an `onnxruntime.InferenceSession` from a model in
  memory, with graph optimisations off by default so that nodes map 1:1 to
  kernels; models over protobuf's 2 GiB limit go through a temporary file
  with external data;
* `example_feeds` makes deterministic inputs: normal floats, integers drawn
  over their index ranges (`pardnn.frontends.onnx.inputs`), else ones, false booleans.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from pardnn.errors import MissingDependencyError, RuntimeFailure

from .shapes import TensorInfo

_GPU = re.compile(r"(?:^|/)device:GPU:(\d+)$", re.IGNORECASE)
_TWO_GIB = 2**31 - 2**20


def _ort():
    try:
        import onnxruntime
    except ImportError as exc:  # pragma: no cover - the extra is installed with onnx
        raise MissingDependencyError(f"running ONNX models needs onnxruntime (pip install 'pardnn[onnx]'): "
                                     f"{exc}") from None
    return onnxruntime


def available_providers() -> list[str]:
    return list(_ort().get_available_providers())


def providers_for(device_name: str | None, available: Sequence[str] | None = None) -> list:
    """The onnxruntime providers for a device: CUDA on ``/device:GPU:i`` when available, else CPU.

    >>> providers_for("/device:GPU:1", ["CUDAExecutionProvider", "CPUExecutionProvider"])
    [('CUDAExecutionProvider', {'device_id': 1}), 'CPUExecutionProvider']
    >>> providers_for("/device:GPU:1", ["CPUExecutionProvider"])
    ['CPUExecutionProvider']
    >>> providers_for("/job:worker/replica:0/task:0/device:CPU:0", ["CUDAExecutionProvider", "CPUExecutionProvider"])
    ['CPUExecutionProvider']
    """
    avail = list(available) if available is not None else available_providers()
    m = _GPU.search(device_name or "")
    if m and "CUDAExecutionProvider" in avail:
        return [("CUDAExecutionProvider", {"device_id": int(m.group(1))}), "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def provider_label(requested: Sequence, session=None) -> str:
    """A short name for the provider a session really runs on (``CUDA:1``, ``CPU``).

    onnxruntime falls back to the CPU when a requested provider cannot start
    (a GPU build without CUDA libraries reports CUDA as available): the label
    then says so.

    >>> provider_label(["CPUExecutionProvider"])
    'CPU'
    >>> provider_label([("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"])
    'CUDA:1'
    """
    first = requested[0]
    want = first[0] if isinstance(first, tuple) else str(first)
    label = want.removesuffix("ExecutionProvider")
    if isinstance(first, tuple):
        label += f":{first[1].get('device_id', 0)}"
    if session is not None:
        used = session.get_providers()[0]
        if used != want:
            return f"{used.removesuffix('ExecutionProvider')} ({label} unavailable)"
    return label


def make_session(model: onnx.ModelProto, *, providers: Sequence | None = None, optimize: bool = False,
                 profile_prefix: str | None = None, threads: int | None = None):
    """An `InferenceSession` for ``model`` (weights in memory); raises `RuntimeFailure` in one line."""
    ort = _ort()
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    provs = list(providers) if providers is not None else ["CPUExecutionProvider"]
    if any(isinstance(p, tuple) or p != "CPUExecutionProvider" for p in provs):
        # a provider that cannot start falls back to the CPU; keep its loader's errors off stderr
        ort.set_default_logger_severity(4)
    try:
        if model.ByteSize() < _TWO_GIB:
            return ort.InferenceSession(model.SerializeToString(), sess_options=so, providers=provs)
        with tempfile.TemporaryDirectory(prefix="pardnn-onnx-") as tmp:
            f = Path(tmp) / "model.onnx"
            onnx.save_model(model, str(f), save_as_external_data=True, all_tensors_to_one_file=True,
                            location="weights.bin", size_threshold=1024)
            return ort.InferenceSession(str(f), sess_options=so, providers=provs)
    except Exception as exc:
        raise RuntimeFailure(f"onnxruntime cannot load the model: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:400] if text else type(exc).__name__


def example_feeds(inputs: Sequence[tuple[str, int, Sequence[int]]], seed: int = 0,
                  ranges: Mapping[str, Any] | None = None, fill: int = 1) -> dict[str, np.ndarray]:
    """Deterministic values for ``(name, elem_type, shape)`` inputs.

    Floats are standard normal draws; an integer input with an entry in ``ranges`` (an
    `pardnn.frontends.onnx.inputs.IndexRange`, or its ``high``) is drawn uniformly in ``[0, high)`` from a
    generator of its own (so the others' draws do not move); other integers are ``fill``: 1 by default (an
    attention mask that keeps every position, a count or a scale that changes nothing: zeros masked every
    token of a Hugging Face model), 0 where any index must be valid; booleans False.

    >>> f = example_feeds([("x", TensorProto.FLOAT, [2]), ("mask", TensorProto.INT64, [3])])
    >>> f["x"].dtype.name, f["mask"].tolist()
    ('float32', [1, 1, 1])
    >>> bool(example_feeds([("ids", TensorProto.INT64, [6])], ranges={"ids": 3})["ids"].max() < 3)
    True
    """
    rng = np.random.default_rng(seed)
    ranges = ranges or {}
    out = {}
    for position, (name, elem_type, shape) in enumerate(inputs):
        dtype = helper.tensor_dtype_to_np_dtype(elem_type)
        high = getattr(ranges.get(name), "high", ranges.get(name))
        if np.issubdtype(dtype, np.floating):
            out[name] = rng.standard_normal(tuple(shape)).astype(dtype)
        elif dtype == np.dtype(object):
            out[name] = np.full(tuple(shape), "", dtype=object)
        elif high is not None and np.issubdtype(dtype, np.integer):
            draw = np.random.default_rng([seed, 7, position]).integers(0, int(high), size=tuple(shape))
            out[name] = draw.astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            out[name] = np.full(tuple(shape), fill, dtype=dtype)
        else:
            out[name] = np.zeros(tuple(shape), dtype=dtype)
    return out


def feeds_for(model: onnx.ModelProto, tensors: Mapping | None = None, seed: int = 0,
              ranges: Mapping[str, Any] | None = None, fill: int = 1) -> dict[str, np.ndarray]:
    """Example feeds for the graph inputs of ``model`` (shapes from ``tensors`` or the inputs' own; ``ranges``
    and ``fill``: see `example_feeds`)."""
    inits = {t.name for t in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if tensors is not None and vi.name in tensors:
            t = tensors[vi.name]
            specs.append((vi.name, t.elem_type, t.shape))
            continue
        tt = vi.type.tensor_type
        specs.append((vi.name, tt.elem_type, [d.dim_value for d in tt.shape.dim]))
    return example_feeds(specs, seed, ranges, fill)


def with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs ``names`` (intermediate values)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in names:
        if name not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
    return m


def measure_shapes(model: onnx.ModelProto, names: Sequence[str], *, base_dir: Path) -> dict[str, TensorInfo]:
    """Run ``model`` once on example inputs and return the `TensorInfo` of each of ``names``.

    A tensor (or an optional tensor that holds one) is sized by its array; a
    sequence of tensors (onnxruntime returns a list) by its elements' shapes,
    with the element type onnxruntime declares. Any other kind of value (a
    map, a sequence of maps, an empty optional) is a `RuntimeFailure` naming it.
    """
    m = with_outputs(model, names)
    onnx.external_data_helper.load_external_data_for_model(m, str(base_dir))
    sess = make_session(m)
    feeds = feeds_for(m, fill=0)      # no ranges known yet: zeros are valid indices of any table
    try:
        values = sess.run(list(names), feeds)
    except Exception as exc:
        raise RuntimeFailure(f"onnxruntime run failed: {_one_line(exc)}") from None
    declared = {o.name: o.type for o in sess.get_outputs()}
    return {name: measured_info(name, v, declared.get(name, "")) for name, v in zip(names, values)}


_SEQ_OF_TENSOR = re.compile(r"^seq\(tensor\((\w+)\)\)$")
_OPTIONAL_TENSOR = re.compile(r"^optional\(tensor\((\w+)\)\)$")
_ORT_NUMPY_NAMES = {"float": "float32", "double": "float64", "string": "object"}


def _ort_dtype(element: str) -> np.dtype | None:
    """The numpy dtype of an onnxruntime element type name (``float``, ``int64``, ...); None if numpy has none."""
    try:
        return np.dtype(_ORT_NUMPY_NAMES.get(element, element))
    except TypeError:
        return None


def measured_info(name: str, value, ort_type: str) -> TensorInfo:
    """The `TensorInfo` of one value onnxruntime returned (``ort_type``: its declared type, ``seq(tensor(float))``).

    >>> measured_info("s", [np.zeros((1, 8), np.float32)] * 2, "seq(tensor(float))").elements
    ((1, 8), (1, 8))
    >>> measured_info("e", [], "seq(tensor(int64))").elem_type == TensorProto.INT64
    True
    >>> measured_info("o", np.zeros(3, np.float32), "optional(tensor(float))").optional
    True
    """
    if isinstance(value, np.ndarray):
        return TensorInfo(name, _elem_type(value.dtype), tuple(int(x) for x in value.shape),
                          optional=ort_type.startswith("optional(tensor("))
    empty = _OPTIONAL_TENSOR.match(ort_type)
    if value is None and empty:      # an empty optional holds no tensor: no bytes
        dtype = _ort_dtype(empty.group(1))
        dtype = np.dtype(np.float32) if dtype is None else dtype
        return TensorInfo(name, _elem_type(dtype), (0,), optional=True)
    m = _SEQ_OF_TENSOR.match(ort_type)
    if isinstance(value, list) and m and all(isinstance(e, np.ndarray) for e in value):
        dtype = _ort_dtype(m.group(1))
        if dtype is None and value:
            dtype = value[0].dtype
        if dtype is not None:
            return TensorInfo.sequence(name, _elem_type(dtype), [e.shape for e in value])
    kind = ort_type or type(value).__name__
    raise RuntimeFailure(f"value {name!r} is {'an' if kind[:1] in 'aeiou' else 'a'} {kind}: pardnn sizes tensors, "
                         "sequences of tensors and optional tensors only")


def _elem_type(dtype: np.dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(dtype) if dtype != object else TensorProto.STRING
