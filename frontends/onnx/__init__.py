"""ONNX models as ``pardnn.graph`` graphs (the ``onnx`` extra: onnx and onnxruntime).

``load_onnx(path, options)`` reads any ``.onnx`` model, external weights
included, and returns an `OpGraph` with nodes in a topological order. The
rules, also in docs/onnx.md:

**Shapes.** ONNX shape inference sizes every value (see `pardnn.frontends.onnx.shapes`).
Dynamic input dimensions come from ``--dim NAME=VALUE`` (``--dim
INPUT:AXIS=VALUE`` for an unnamed one) and ``--batch-size`` (named axis-0
dimensions); an unresolved one is an error naming the input, the axis and the
flag, never a silent 1.

**Nodes.**

* one node per ONNX node, named by its ONNX name when that is non-empty and
  unique, else ``NAME_i``/``OPTYPE_i`` (``i`` its position); the original
  name is kept in the ``onnx_name`` field when it differs. ``op`` is the ONNX
  op type (``domain`` is added for non-standard domains); ``output_bytes`` has
  one port per ONNX output (an omitted optional output is 0 bytes);
* ``input:NAME`` (op ``Input``) per fed graph input: time 0 (the data is there
  when the step starts), one output of the input's bytes, so a consumer on
  another device pays its transfer;
* ``output:NAME`` (op ``Output``) per graph output: time 0, no outputs, in a
  colocation group with the node that computes the value, because the caller
  fetches a result from the device that made it (no transfer is charged);
* **weights.** An initializer read by exactly one node becomes
  ``persistent_bytes`` of that node (it owns it). One read by several nodes
  (tied embeddings, shared shape constants) becomes a node ``init:NAME`` (op
  ``Initializer``) holding it as ``persistent_bytes`` with a 0-byte output;
  each edge to a reader carries the weight's bytes, so a reader on another
  device pays one transfer and holds a received copy. ``Constant`` nodes
  follow the same rule: they hold their value as ``persistent_bytes``, take
  no time, and their edges carry the value's bytes;
* **forwarded outputs.** ``Identity``, ``Reshape``, ``Squeeze``,
  ``Unsqueeze`` and ``Flatten`` may hand their input's buffer on
  (onnxruntime's kernels declare the alias): the edge of input 0 is marked
  ``forwarded_as`` 0, so the output allocates nothing on its own device and
  keeps the input's buffer alive instead (docs/machine-model.md).

**Costs.** ``options.profile_steps > 0``: an onnxruntime profile with graph
optimisations off, ``profile_steps`` runs after a warm-up, combined with
`pardnn.frontends.common.robust_average` (`pardnn.frontends.onnx.costs.profile_times`); these
are times on this machine's onnxruntime provider. Otherwise the shared roofline
(`pardnn.frontends.roofline`) over ``options.device_profile`` from each node's FLOPs
and bytes moved (`pardnn.frontends.onnx.costs`); an ``If`` adds its costlier
branch, a ``Loop``/``Scan`` its body times the trip count (one iteration, with a
warning, where the count is not static). ``temp_bytes`` is 0 (ONNX does not
say how much scratch a kernel takes).

**Training graphs.** An onnxruntime-training ``training_model.onnx`` (forward,
loss, gradients and in-place gradient accumulators in one graph) is read the
same way, with ``phase`` set on every node: ``backward`` for gradient nodes
(``_Grad/`` names, ``T_grad`` outputs, com.microsoft ``*Grad`` ops),
``optimizer`` for in-place state updates (``InPlaceAccumulatorV2``, optimizer
ops), ``forward`` for the rest. Its parameters are graph inputs: each
parameter ``P`` (op ``Parameter``) and its gradient buffer
``P_grad.accumulation.buffer`` (op ``GradientBuffer``) is persistent and shares
the colocation group ``param:P`` with the accumulator that updates the buffer
in place. Inference models are all ``forward``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from pardnn.errors import InputError, MissingDependencyError, RuntimeFailure, naming
from pardnn.ir import OpGraph

from .. import roofline
from ..options import FrontendOptions
from .convert import to_graph
from .costs import profile_times, roofline_time_us, uncounted_loops
from .inputs import logged
from .model import PreparedModel, TensorInfo, prepare
from .runtime import feeds_for

__all__ = ["load_onnx", "prepare", "PreparedModel", "TensorInfo", "graph_from_prepared"]

log = logging.getLogger("pardnn.frontends.onnx")


def _weights_loaded(pm: PreparedModel):
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(pm.model)
    onnx.external_data_helper.load_external_data_for_model(m, str(pm.path.parent))
    return m


def _warn_uncounted_loops(pm: PreparedModel) -> None:
    """Warn once when the roofline costs a ``Loop``/``Scan`` body once because its trip count is not static."""
    where = [name for n in pm.graph.node if n.name in pm.bodies
             for name in uncounted_loops(pm.costed(n), pm.tensors, pm.constants)]
    if where:
        log.warning("%s: %d Loop/Scan node(s) with no static trip count (%s); the roofline costs each body as "
                    "one iteration (--profile measures it)", pm.path, len(where),
                    where[0] if len(where) == 1 else f"{where[0]}, ...")


def graph_from_prepared(pm: PreparedModel, options: FrontendOptions | None = None) -> OpGraph:
    """The `OpGraph` of an already prepared model (costs as ``options`` say)."""
    opts = options or FrontendOptions()
    try:
        device = roofline.get_profile(opts.device_profile)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    meta = {"source_format": "onnx", "onnx_file": str(pm.path), "opset": {o.domain or "ai.onnx": o.version
                                                                             for o in pm.model.opset_import},
            "dims": dict(pm.dims), "training": pm.is_training}
    if pm.batch_size is not None:     # `pardnn run` refuses a placement made from this graph for another
        meta["batch_size"] = pm.batch_size
    if pm.measured:
        meta["shapes_measured"] = list(pm.measured)
    if opts.profile_steps > 0:
        t0 = time.perf_counter()
        try:
            feeds = feeds_for(pm.model, pm.tensors, ranges=logged(pm.index_ranges(), pm.path))
            times = profile_times(_weights_loaded(pm), feeds, opts.profile_steps)
        except RuntimeFailure as exc:
            if pm.is_training:
                raise MissingDependencyError(
                    f"{pm.path}: profiling a training graph needs onnxruntime-training's gradient kernels, "
                    f"which this onnxruntime lacks ({exc}); omit --profile to use the roofline estimate") from None
            raise
        meta["cost_model"] = f"onnxruntime profile, {opts.profile_steps} runs, robust average (CPU provider)"
        log.info("%s: profiled %d onnxruntime runs in %.2f s", pm.path, opts.profile_steps, time.perf_counter() - t0)

        def time_fn(node):
            flops = roofline_time_us(pm.costed(node), pm.tensors, device, pm.constants)[1]
            return times.get(node.name, 0.0), flops
    else:
        meta["cost_model"] = f"roofline ({device.name})"
        _warn_uncounted_loops(pm)

        def time_fn(node):
            return roofline_time_us(pm.costed(node), pm.tensors, device, pm.constants)
    name = opts.name or pm.model.graph.name or pm.path.name.removesuffix(".onnx")
    return to_graph(pm, time_fn, name=name, source=str(pm.path), meta=meta)


def load_onnx(path: str | Path, options: FrontendOptions | None = None) -> OpGraph:
    """Read the ONNX model at ``path`` as a pardnn graph (see the module docstring for the rules)."""
    opts = options or FrontendOptions()
    try:
        pm = prepare(path, dims=opts.dims, batch_size=opts.batch_size)
        return graph_from_prepared(pm, opts)
    except RuntimeFailure as exc:    # onnxruntime's words name the node, not the file
        raise naming(path, exc) from None
