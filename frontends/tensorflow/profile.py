"""Real op times and tensor sizes from profiled steps (``--profile N``).

The flat graph runs in a ``tf.compat.v1.Session`` on the host CPU with
grappler and the classic graph optimizer switched off, so TensorFlow
executes exactly the GraphDef's nodes under their own names, and with one
inter-op thread, so ops run one at a time and each op's time is its own
(each op still uses every core inside). The variables start from the
model's values where they are known (a Keras model's, a SavedModel's
checkpoint) and from deterministic draws otherwise (normal, scale 0.05, for
floating point; zeros for integers and booleans). Feeds are the batch given
to the Keras API, or deterministic draws of the same kinds, with unknown
dimensions from ``--batch-size``, but integer inputs used as indices (an
embedding's token ids, a loss's labels) are drawn uniformly over the values
they may take (`pardnn.frontends.tensorflow.inputs.index_ranges`) and other
integer inputs are 1 (an attention mask keeps every position).

One warm-up step runs untraced; then ``N`` steps run with
``RunOptions(trace_level=FULL_TRACE)`` and each step's
``RunMetadata.step_stats`` is read:

* **time**: per node, the sum over its executions in the step (a loop body
  runs once per iteration) of ``op_end_rel_nanos - op_start_rel_nanos``;
  the N per-step sums are combined with ParDNN's robust average
  (`pardnn.frontends.common.robust_average`: the median for fewer than 5 steps,
  else trimmed of the two lowest and two highest, then (mean + median) / 2);
* **output bytes**: per output slot, the largest size over all executions,
  from the traced tensor description: its shape times its dtype size (an
  output that views another tensor reports the whole underlying buffer as
  its allocation), or the allocation's ``requested_bytes`` for variants and
  strings;
* **temp bytes**: the op's peak allocation (its allocator records) beyond
  its outputs' allocated bytes, robust-averaged over the steps;
* **persistent bytes** of constants: ``memory_stats.persistent_memory_size``;
* **dispatch overhead**: a trace times each kernel, but the executor also
  spends time on every op it runs (readying it, allocating, passing its
  outputs on: about 1.5 us an op on a 2-core AMD EPYC, a quarter of a small
  ResNet's step). So ``N`` untraced steps are timed too, and the median
  step's time beyond the traced steps' summed op times, divided by the
  executions per step, is the overhead of one execution
  (`Profile.op_overhead_us`). Each op's time includes it once per execution
  (`Profile.executions`), so the op times add up to the measured step.

Nodes the trace never saw (the feeds, which TensorFlow replaces by its own
argument nodes; ops in branches not taken) have no profile; the caller
gives them zero time and static sizes.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from pardnn.errors import InputError, RuntimeFailure
from pardnn.progress import note, substage

from ..common import error_node, first_line, robust_average
from ._tf import config_pb2, tf
from .colocation import VARIABLE_OPS
from .inputs import IndexRange, index_ranges
from .model import TFModel
from .shapes import format_shape, import_graph, with_batch, without_back_edges

log = logging.getLogger("pardnn.frontends.tensorflow")


@dataclass(frozen=True)
class Profile:
    """Aggregated measurements by node name."""

    steps: int
    device: str
    time_us: Mapping[str, float]
    output_bytes: Mapping[str, Mapping[int, int]]
    temp_bytes: Mapping[str, int]
    persistent_bytes: Mapping[str, int]
    step_ms: Sequence[float] = field(default_factory=tuple)
    """Wall time of each traced step."""
    op_overhead_us: float = 0.0
    """The executor's time per op execution beyond the kernel's (see the module docstring), included in
    ``time_us``."""
    executions: Mapping[str, float] = field(default_factory=dict)
    """Per node, its executions per step (more than 1 in a loop body)."""
    untraced_step_ms: Sequence[float] = field(default_factory=tuple)
    """Wall time of each untraced step."""


def as_written(config: "config_pb2.ConfigProto") -> "config_pb2.ConfigProto":
    """``config`` with every graph rewrite off (grappler, constant folding, CSE, inlining): the GraphDef runs
    node for node as written. Returns ``config``."""
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    opts = config.graph_options.optimizer_options
    opts.opt_level = config_pb2.OptimizerOptions.L0
    opts.do_constant_folding = False
    opts.do_common_subexpression_elimination = False
    opts.do_function_inlining = False
    return config


def session_config() -> "config_pb2.ConfigProto":
    """A session that runs the GraphDef as written: no grappler, no constant folding, one inter-op thread."""
    return as_written(config_pb2.ConfigProto(inter_op_parallelism_threads=1, allow_soft_placement=True))


def _draw(rng: np.random.Generator, dtype, shape: Sequence[int]) -> np.ndarray:
    np_dtype = dtype.as_numpy_dtype
    if dtype.is_floating or dtype.is_complex:
        return (rng.standard_normal(shape) * 0.05).astype(np_dtype)
    return np.zeros(shape, dtype=np_dtype)


def _concrete(shape, fill: int | None, what: str) -> tuple[int, ...]:
    if shape is None:
        raise InputError(f"{what} has an unknown rank; a profiled run cannot make up its value")
    if any(d is None for d in shape) and fill is None:
        raise InputError(f"{what} has shape {format_shape(shape)} with an unknown dimension; "
                         "pass --batch-size N to use N for it")
    return tuple(fill if d is None else int(d) for d in shape)


def feed_values(model: TFModel, batch_size: int | None) -> dict[str, np.ndarray]:
    """The batch to feed: the model's own, else deterministic draws (integers in their `index_ranges`, else 1)."""
    if model.feed_values:
        return dict(model.feed_values)
    rng = np.random.default_rng(1)
    out = {}
    shapes = {}
    for f in model.feeds:
        dtype = tf.dtypes.as_dtype(f.dtype)
        if dtype.base_dtype in (tf.string, tf.variant, tf.resource):
            raise InputError(f"{model.source}: input {f.name!r} is a {dtype.name} tensor; a profiled run "
                             "cannot make up its value (import without --profile)")
        shapes[f.name] = _concrete(f.shape, batch_size, f"{model.source}: input {f.name!r}")
        if dtype.is_integer:        # a mask that keeps every position, a count or scale that changes nothing
            out[f.name] = np.ones(shapes[f.name], dtype=dtype.as_numpy_dtype)
        else:
            out[f.name] = _draw(rng, dtype, shapes[f.name])
    return with_index_draws(model, out, batch_size, names=shapes)


def input_ranges(model: TFModel, batch_size: int | None, *, names: Iterable[str] | None = None
                 ) -> dict[str, IndexRange]:
    """The `index_ranges` of ``model``'s integer inputs (of ``names``, default all), by input name."""
    chosen = None if names is None else set(names)
    wanted = [f.name for f in model.feeds if (chosen is None or f.name in chosen)
              and tf.dtypes.as_dtype(f.dtype).is_integer]
    if not wanted:
        return {}
    # imported again without the loops' back edges: their shapes (a recurrent layer's output, the logits
    # after it) are lost otherwise (`without_back_edges`)
    graph = import_graph(without_back_edges(with_batch(model.graph_def, model.feeds, batch_size)),
                         where=model.source or model.name)
    return index_ranges(graph, wanted)


def with_index_draws(model: TFModel, values: dict[str, np.ndarray], batch_size: int | None, *,
                     names: Iterable[str]) -> dict[str, np.ndarray]:
    """``values`` with the integer inputs of ``names`` redrawn in their `index_ranges` (uniformly, a generator
    seeded by the input's position, so other inputs' draws do not move); inputs with no known range keep theirs."""
    ranges = input_ranges(model, batch_size, names=names)
    position = {f.name: i for i, f in enumerate(model.feeds)}
    for f in model.feeds:
        r = ranges.get(f.name)
        if r is None:
            continue
        old = np.asarray(values[f.name])
        draw = np.random.default_rng([7, position[f.name]]).integers(0, r.high, size=old.shape)
        values[f.name] = draw.astype(old.dtype)
        shown = f"{f.arg!r} ({f.name})" if f.arg else repr(f.name)
        log.info("%s: input %s drawn in [0, %d): %s", model.source or model.name, shown, r.high, r.why)
    return values


def _initializer(graph, model: TFModel, values: Mapping[str, np.ndarray], batch_size: int | None):
    """Ops and feeds that set every variable of ``graph`` to its start value."""
    rng = np.random.default_rng(0)
    assigns, feeds = [], {}
    with graph.as_default():
        for op in graph.get_operations():
            if op.type not in VARIABLE_OPS:
                continue
            dtype = tf.dtypes.as_dtype(op.get_attr("dtype"))
            value = values.get(op.name)
            if value is None:
                shape = tf.TensorShape(op.get_attr("shape"))
                dims = tuple(shape.as_list()) if shape.rank is not None else None
                value = _draw(rng, dtype, _concrete(dims, batch_size, f"{model.source}: variable {op.name!r}"))
            ph = tf.compat.v1.placeholder(dtype, shape=value.shape, name=f"pardnn_init/{op.name}")
            if op.outputs[0].dtype == tf.resource:
                assigns.append(tf.raw_ops.AssignVariableOp(resource=op.outputs[0], value=ph))
            else:
                assigns.append(tf.raw_ops.Assign(ref=op.outputs[0], value=ph, validate_shape=False))
            feeds[ph] = value
    return assigns, feeds


def run_profile(model: TFModel, steps: int, *, batch_size: int | None = None) -> Profile:
    """Run ``steps`` traced steps of ``model`` (after one warm-up) and aggregate the traces."""
    if steps < 1:
        raise ValueError("steps must be at least 1")
    where = model.source or model.name
    gd = with_batch(model.graph_def, model.feeds, batch_size)
    graph = import_graph(gd, where=where)
    names = {n.name for n in gd.node}
    values = dict(model.variable_values() if model.variable_values else {})
    assigns, init_feeds = _initializer(graph, model, values, batch_size)
    batch = feed_values(model, batch_size)
    fetches = list(model.fetches) + list(model.targets)
    per_step_time: dict[str, list[float]] = {}
    per_step_temp: dict[str, list[float]] = {}
    out_bytes: dict[str, dict[int, int]] = {}
    persistent: dict[str, int] = {}
    step_ms: list[float] = []
    untraced_ms: list[float] = []
    op_sums: list[float] = []
    runs: list[float] = []
    per_step_runs: dict[str, list[float]] = {}
    device = ""
    with tf.compat.v1.Session(graph=graph, config=session_config()) as sess, substage("profiling: warm-up step"):
        try:
            if assigns:
                sess.run(assigns, feed_dict=init_feeds)
            sess.run(fetches, feed_dict=batch)
            options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
            for step in range(steps):
                note(f"profiling step {step + 1} of {steps}")
                meta = tf.compat.v1.RunMetadata()
                t0 = time.perf_counter()
                sess.run(fetches, feed_dict=batch, options=options, run_metadata=meta)
                step_ms.append((time.perf_counter() - t0) * 1e3)
                times, temps, counts, total = _read_step(meta.step_stats, names, out_bytes, persistent)
                op_sums.append(total[0])
                runs.append(total[1])
                for name, t in times.items():
                    per_step_time.setdefault(name, [0.0] * step).append(t)
                for name, b in temps.items():
                    per_step_temp.setdefault(name, [0.0] * step).append(b)
                for name, c in counts.items():
                    per_step_runs.setdefault(name, [0.0] * step).append(c)
                for d in (per_step_time, per_step_temp, per_step_runs):
                    for series in d.values():
                        if len(series) < step + 1:
                            series.append(0.0)
                device = device or next((d.device for d in meta.step_stats.dev_stats if d.node_stats), "")
            for step in range(steps):
                note(f"timing untraced step {step + 1} of {steps}")
                t0 = time.perf_counter()
                sess.run(fetches, feed_dict=batch)
                untraced_ms.append((time.perf_counter() - t0) * 1e3)
        except tf.errors.OpError as exc:
            name = error_node(exc)
            node = f" at node {name!r}" if name else ""
            raise RuntimeFailure(f"{where}: the profiled step failed{node}: {first_line(exc)}") from None
    log.info("%s: profiled %d steps on %s, median step %.1f ms", where, steps, device or "cpu",
             statistics.median(step_ms))
    executions = {n: robust_average(c) for n, c in per_step_runs.items()}
    overhead = dispatch_overhead_us(statistics.median(untraced_ms) * 1e3, statistics.median(op_sums),
                                    statistics.median(runs))
    log.info("%s: untraced median step %.1f ms; the executor's overhead %.2f us per op execution", where,
             statistics.median(untraced_ms), overhead)
    return Profile(steps=steps, device=device,
                   time_us={n: robust_average(s) + overhead * executions.get(n, 0.0)
                            for n, s in per_step_time.items()},
                   output_bytes=out_bytes,
                   temp_bytes={n: int(round(robust_average(s))) for n, s in per_step_temp.items()},
                   persistent_bytes=persistent, step_ms=tuple(step_ms), op_overhead_us=overhead,
                   executions=executions, untraced_step_ms=tuple(untraced_ms))


def dispatch_overhead_us(step_us: float, op_time_us: float, executions: float) -> float:
    """The executor's time per op execution: a step's wall time beyond its ops' kernel time, per execution.

    >>> dispatch_overhead_us(16000.0, 12000.0, 2000), dispatch_overhead_us(10.0, 12.0, 5), dispatch_overhead_us(1.0, 0.0, 0)
    (2.0, 0.0, 0.0)
    """
    if executions <= 0:
        return 0.0
    return max(0.0, (step_us - op_time_us) / executions)


def _read_step(step_stats, names, out_bytes: dict, persistent: dict) -> tuple[dict, dict, dict, tuple]:
    """One step's per-node time sums, temp peaks and executions, and (every traced op's summed time, their
    executions), the runtime's own nodes included; updates the output and persistent sizes."""
    times: dict[str, float] = {}
    temps: dict[str, float] = {}
    counts: dict[str, float] = {}
    total, runs = 0.0, 0
    for dev in step_stats.dev_stats:
        for ns in dev.node_stats:
            name = ns.node_name
            if ns.op_end_rel_nanos or ns.op_start_rel_nanos:
                dt = (ns.op_end_rel_nanos - ns.op_start_rel_nanos) / 1e3
            else:
                dt = float(ns.op_end_rel_micros - ns.op_start_rel_micros)
            total += max(dt, 0.0)
            runs += 1
            if name not in names:
                continue
            times[name] = times.get(name, 0.0) + max(dt, 0.0)
            counts[name] = counts.get(name, 0.0) + 1.0
            slots = out_bytes.setdefault(name, {})
            allocated = 0
            for o in ns.output:
                a = o.tensor_description.allocation_description
                size = _tensor_bytes(o.tensor_description)
                if size > slots.get(o.slot, -1):
                    slots[o.slot] = size
                allocated += a.allocated_bytes
            peak = sum(m.peak_bytes for m in ns.memory)
            temp = max(0, peak - allocated)
            if temp > temps.get(name, 0):
                temps[name] = float(temp)
            p = ns.memory_stats.persistent_memory_size
            if p > persistent.get(name, 0):
                persistent[name] = int(p)
    return times, temps, counts, (total, runs)


def _tensor_bytes(desc) -> int:
    """A traced output's size: its shape times its dtype size, else its allocation's requested bytes.

    The allocation of an output that views another tensor (a slice, a
    reshape) is the whole underlying buffer, so the shape is the better
    measure wherever there is one; variants and strings only have the
    allocation.
    """
    try:
        dtype = tf.dtypes.as_dtype(desc.dtype)
    except TypeError:
        dtype = None
    dims = [d.size for d in desc.shape.dim]
    if dtype is not None and dtype.base_dtype not in (tf.variant, tf.string, tf.resource) and not \
            desc.shape.unknown_rank and all(d >= 0 for d in dims):
        n = 1
        for d in dims:
            n *= d
        return n * int(dtype.base_dtype.size)
    return int(desc.allocation_description.requested_bytes)
