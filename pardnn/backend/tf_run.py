"""Run a placed TensorFlow step on real devices and check it against a single-device run (needs TensorFlow).

The placed flat GraphDef (`pardnn.backend.tf_rewrite`) runs in a
``tf.compat.v1.Session`` with ``allow_soft_placement=False``, grappler off
and the classic graph optimizer at L0 (no constant folding, no CSE, no
inlining), so TensorFlow runs exactly the GraphDef's nodes on exactly their
devices:

* **one host**: the host's GPUs where it has enough, otherwise logical CPU
  devices. `setup_logical_cpus` configures them with
  ``tf.config.set_logical_device_configuration`` when TensorFlow has not
  initialised yet (``pardnn run`` does it first thing); the session also asks
  for them with ``device_count={"CPU": N}``, which a ``DirectSession``
  honours even after initialisation, so a run works from a Python process
  that has already used TensorFlow.
* **a cluster**: the session's target is task 0's ``grpc://`` address and the
  devices are ``/job:worker/replica:0/task:i/device:...`` (see
  `pardnn.backend.tf_cluster`).

`run_placed` runs ``2 + steps`` steps (a warm-up, a traced step, ``steps``
timed steps) from the same starting variables and batch, then the same
steps with every op on device 0 (host ops on its host CPU), and reports
(`TFRunReport`):

* whether every op ran where it was placed (the traced step's
  ``RunMetadata.step_stats``, `tf_checks.check_step_stats`);
* whether every fetched value of every step and every variable afterwards
  equals the single-device run's: within ``rtol``/``atol`` elementwise, or
  else within rounding noise, judged against a third run of the
  single-device step from starting values and inputs moved by a few units in
  the last place (`pardnn.backend.equivalence`; `compare_with_reference`);
* the median timed step beside the machine model's prediction
  (`pardnn.machine.simulate`) for the same graph, placement and cluster;
* TensorFlow's ``_Send``/``_Recv`` pairs (from the partition graphs,
  `tf_checks.count_send_recv`) beside the simulator's transfers.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..cluster import Cluster, named_as
from ..errors import PlacementError, RuntimeFailure
from ..frontends.common import error_node, first_line
from ..frontends.tensorflow._tf import config_pb2, tf
from ..frontends.tensorflow.build import TFImport
from ..frontends.tensorflow.colocation import VARIABLE_OPS
from ..frontends.tensorflow.model import TFModel, split_tensor_name
from ..frontends.tensorflow.profile import as_written, _concrete, _draw, feed_values
from ..frontends.tensorflow.shapes import import_graph, with_batch
from ..ir import OpGraph
from ..machine import simulate, single_device_peak
from ..placement import Placement
from .common import check_devices, checked_inputs, default_cluster
from .equivalence import NOISE_FACTOR, NOISE_SEED, Comparison, compare_tensors, perturbed, stack_steps
from .tf_checks import (PlacementCheck, SendRecvCount, check_step_stats, compare_transfers, count_send_recv,
                        is_real_device, reconcile_fused, traced_names)
from .tf_devices import ClusterTarget, LocalTarget, devices_needed, map_devices, same_device
from .tf_memory import PeakMeter, allocator_names
from .tf_rewrite import Assignment, assign_devices, check_placement_matches, is_host_op, placed_graph_def

log = logging.getLogger("pardnn.backend.tf")


# ---------------------------------------------------------------------------
# devices and sessions
# ---------------------------------------------------------------------------

def setup_logical_cpus(n: int) -> bool:
    """Split the host CPU into ``n`` logical devices; False when TensorFlow has already initialised.

    Call it before TensorFlow runs anything (a fresh process). When it is
    too late, a `run_placed` still gets its ``n`` CPU devices from the
    session's ``device_count``; only eager code (``tf.function``) would not.
    """
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * max(1, n))
    except RuntimeError:
        return len(tf.config.list_logical_devices("CPU")) >= n
    return True


def local_gpus() -> int:
    """Physical GPUs TensorFlow sees on this host (does not initialise the runtime)."""
    return len(tf.config.list_physical_devices("GPU"))


def local_target(placement: Placement, kind: str = "auto") -> LocalTarget:
    """GPUs when ``kind`` is ``gpu``, or ``auto`` and the host has a GPU for each placement device; else CPUs."""
    gpus = local_gpus()
    if kind == "gpu" or (kind == "auto" and gpus >= placement.num_devices):
        return LocalTarget("gpu", available=gpus)
    return LocalTarget("cpu")


def session_config(*, cpus: int | None = None, soft_placement: bool = False, timeout_s: float | None = None,
                   isolate: bool = False) -> "config_pb2.ConfigProto":
    """A session that runs the GraphDef exactly as placed (see the module docstring)."""
    config = as_written(config_pb2.ConfigProto(allow_soft_placement=soft_placement))
    if cpus:
        config.device_count["CPU"] = int(cpus)
    config.gpu_options.allow_growth = True
    if timeout_s:
        config.operation_timeout_in_ms = int(timeout_s * 1000)
    config.isolate_session_state = isolate
    return config


@contextmanager
def open_session(target: str = "", *, graph, config=None):
    """A ``tf.compat.v1.Session`` closed on leaving; after a failure, closed without a word.

    ``with tf.compat.v1.Session(...)`` closes a session that a failure leaves
    on a thread of its own, and a close that fails there too (a task that
    died mid-run: Deadline Exceeded) is printed as that thread's traceback,
    beside the failure's one line. Here such a close is given as long
    (30 s) and its error dropped: the failure is the news.
    """
    sess = tf.compat.v1.Session(target, graph=graph, config=config)
    try:
        yield sess
    except BaseException:
        _close_quietly(sess)
        raise
    sess.close()


def _close_quietly(sess, wait_s: float = 30.0) -> None:
    def close():
        try:
            sess.close()
        except Exception:   # the failure that brought us here is the one reported
            pass

    closer = threading.Thread(target=close, name="pardnn-session-close", daemon=True)
    closer.start()
    closer.join(wait_s)


def op_failure(exc: Exception, what: str) -> Exception:
    """A TensorFlow error as a one-line `PardnnError`: a missing device is a `PlacementError`."""
    name = error_node(exc)
    node = f" at node {name!r}" if name else ""
    line = first_line(exc)
    text = getattr(exc, "message", None) or str(exc)     # the cause may follow a header and stack lines
    if any(p in text for p in ("Cannot assign a device", "Could not satisfy explicit device", "Unknown device",
                               "was explicitly assigned to")):
        return PlacementError(f"{what}: a device in the placement does not exist here{node}: {line}")
    return RuntimeFailure(f"{what} failed{node}: {line}")


# ---------------------------------------------------------------------------
# the program: a placed graph plus its initialiser and variable reads
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class StepProgram:
    """A placed step in a ``tf.Graph``, with the ops that start and read its variables."""

    graph: Any
    fetches: tuple
    targets: tuple
    feeds: tuple
    """``(tensor, feed name)`` pairs."""
    init_ops: tuple
    init_feeds: Mapping
    reads: Mapping[str, Any]
    """A tensor reading each variable, on the variable's device, by variable node name."""


def feed_specs(model: TFModel, batch_size: int | None = None) -> list[tuple[str, Any, tuple | None]]:
    """``(name, numpy dtype, shape)`` of each input of ``model``, open dimensions ``batch_size`` (else None)."""
    out = []
    for f in model.feeds:
        shape = None if f.shape is None else tuple(batch_size if d is None else d for d in f.shape)
        out.append((f.name, np.dtype(tf.dtypes.as_dtype(f.dtype).as_numpy_dtype), shape))
    return out


def feed_aliases(model: TFModel) -> dict[str, str]:
    """Other names of ``model``'s inputs, to the tensor names: a SavedModel signature's keys."""
    return {f.arg: f.name for f in model.feeds if f.arg}


def starting_values(model: TFModel, batch_size: int | None = None) -> dict[str, np.ndarray]:
    """Every variable's starting value: the model's where known, else a deterministic draw.

    Floating-point draws are positive (``|normal| * 0.05``), so that a drawn
    learning rate, variance or scale is a valid one and a training step stays
    finite; other dtypes are zeros. Draws go in the GraphDef's order from one
    seeded generator, so two programs of the same model start alike.
    """
    known = dict(model.variable_values() if model.variable_values else {})
    rng = np.random.default_rng(0)
    out: dict[str, np.ndarray] = {}
    for node in model.graph_def.node:
        if node.op not in VARIABLE_OPS:
            continue
        value = known.get(node.name)
        if value is None:
            dtype = tf.dtypes.as_dtype(node.attr["dtype"].type)
            shape = tf.TensorShape(node.attr["shape"].shape)
            dims = tuple(shape.as_list()) if shape.rank is not None else None
            value = _draw(rng, dtype, _concrete(dims, batch_size, f"{model.source}: variable {node.name!r}"))
            if dtype.is_floating:
                value = np.abs(value)
        out[node.name] = np.asarray(value)
    return out


def build_program(model: TFModel, graph_def, values: Mapping[str, np.ndarray]) -> StepProgram:
    """Import the placed ``graph_def`` and add, on each variable's device, its initialiser and a read."""
    where = model.source or model.name
    graph = import_graph(graph_def, where=where)
    init_ops, init_feeds, reads = [], {}, {}
    with graph.as_default():
        for op in graph.get_operations():
            if op.type not in VARIABLE_OPS:
                continue
            value = values[op.name]
            with tf.device(op.device):
                ph = tf.compat.v1.placeholder(tf.dtypes.as_dtype(op.get_attr("dtype")), shape=value.shape,
                                              name=f"pardnn_init/{op.name}")
                handle = op.outputs[0]
                if handle.dtype == tf.resource:
                    init_ops.append(tf.raw_ops.AssignVariableOp(resource=handle, value=ph))
                    reads[op.name] = tf.raw_ops.ReadVariableOp(resource=handle, dtype=ph.dtype,
                                                               name=f"pardnn_read/{op.name}")
                else:
                    init_ops.append(tf.raw_ops.Assign(ref=handle, value=ph, validate_shape=False))
                    reads[op.name] = tf.identity(handle, name=f"pardnn_read/{op.name}")
            init_feeds[ph] = value
    fetches = tuple(graph.get_tensor_by_name(t) for t in model.fetches)
    targets = tuple(graph.get_operation_by_name(t) for t in model.targets)
    feeds = tuple((graph.get_tensor_by_name(f.name), f.name) for f in model.feeds)
    return StepProgram(graph, fetches, targets, feeds, tuple(init_ops), init_feeds, reads)


@dataclass(frozen=True, eq=False)
class StepRun:
    """What running a program produced."""

    outputs: tuple[tuple[np.ndarray, ...], ...]
    """The fetched values of every step."""
    step_us: tuple[float, ...]
    """Wall time of each timed step."""
    metadata: Any
    """``RunMetadata`` of the traced step."""
    variables: Mapping[str, np.ndarray]
    """Every variable after the last step."""
    peak_bytes: Mapping[str, int] | None = None
    """TensorFlow's allocator peak over the timed steps, by allocator (`tf_memory.PeakMeter`); None if not measured."""
    peak_note: str = ""
    """Why ``peak_bytes`` is None, when it was asked for."""


def run_program(program: StepProgram, batch: Mapping[str, np.ndarray], *, steps: int, target: str = "",
                config=None, what: str = "the placed step", trace: bool = True,
                allocators: Sequence[str] = ()) -> StepRun:
    """A warm-up step, one traced step and ``steps`` timed steps, then read every variable.

    ``trace=False`` runs the second step untraced (its ``metadata`` stays empty). ``allocators``
    (`tf_memory.allocator_names`): measure their peak over the timed steps.
    """
    feed = {t: batch[name] for t, name in program.feeds}
    run_list = [list(program.fetches), list(program.targets)]
    outputs: list[tuple[np.ndarray, ...]] = []
    times: list[float] = []
    meta = tf.compat.v1.RunMetadata()
    meter = PeakMeter(allocators) if allocators else None
    try:
        with open_session(target, graph=program.graph, config=config) as sess:
            if program.init_ops:
                sess.run(list(program.init_ops), feed_dict=dict(program.init_feeds))
            outputs.append(tuple(sess.run(run_list, feed_dict=feed)[0]))
            if trace:
                options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                                  output_partition_graphs=True)
                outputs.append(tuple(sess.run(run_list, feed_dict=feed, options=options, run_metadata=meta)[0]))
            else:
                outputs.append(tuple(sess.run(run_list, feed_dict=feed)[0]))
            if meter:
                meter.reset()
            for _ in range(steps):
                t0 = time.perf_counter()
                out = sess.run(run_list, feed_dict=feed)
                times.append((time.perf_counter() - t0) * 1e6)
                outputs.append(tuple(out[0]))
            peaks = meter.read() if meter else None
            names = sorted(program.reads)
            values = sess.run([program.reads[n] for n in names]) if names else []
    except tf.errors.OpError as exc:
        raise op_failure(exc, what) from None
    except ValueError as exc:   # a malformed feed
        raise RuntimeFailure(f"{what}: {first_line(exc)}") from None
    return StepRun(tuple(outputs), tuple(times), meta, dict(zip(names, values)), peaks,
                   meter.reason if meter and peaks is None else "")


# ---------------------------------------------------------------------------
# comparing
# ---------------------------------------------------------------------------

NOISE_MODES = ("auto", "always", "off")


@dataclass(frozen=True, eq=False)
class ReferenceCheck:
    """A placed program's run against the single-device reference run (and the noise reference, when it ran)."""

    run: StepRun
    reference: StepRun
    noise: StepRun | None
    """The single-device step from `equivalence.perturbed` starting values and inputs; None when not run."""
    outputs: Comparison
    """Each fetched output over all steps."""
    variables: Comparison
    """Each variable after the last step."""
    noise_s: float = 0.0
    """Wall time of the noise reference run (building and running it)."""

    @property
    def ok(self) -> bool:
        return self.outputs.ok and self.variables.ok

    @property
    def criterion(self) -> str:
        """``elementwise``, ``rounding noise`` or ``none`` (see `equivalence.Comparison.criterion`)."""
        if not self.ok:
            return "none"
        return "elementwise" if self.outputs.elementwise and self.variables.elementwise else "rounding noise"


def _compare(model: TFModel, run: StepRun, ref: StepRun, noise: StepRun | None, *, rtol: float, atol: float,
             factor: float) -> tuple[Comparison, Comparison]:
    fetches = [f"output {t}" for t in model.fetches]
    outputs = compare_tensors(stack_steps(run.outputs, fetches), stack_steps(ref.outputs, fetches),
                              None if noise is None else stack_steps(noise.outputs, fetches),
                              rtol=rtol, atol=atol, factor=factor)
    names = sorted(ref.variables)
    variables = compare_tensors(dict(run.variables), {n: ref.variables[n] for n in names},
                                None if noise is None else dict(noise.variables), rtol=rtol, atol=atol, factor=factor)
    return outputs, variables


def compare_with_reference(model: TFModel, placed_gd, reference_gd, values: Mapping[str, np.ndarray],
                           batch: Mapping[str, np.ndarray], *, steps: int, session_target: str = "", config=None,
                           rtol: float = 1e-4, atol: float = 1e-5, noise_factor: float = NOISE_FACTOR,
                           noise: str = "auto", where: str = "", allocators: Sequence[str] = ()) -> ReferenceCheck:
    """Run ``placed_gd`` and ``reference_gd`` (the same step on one device) from ``values`` and ``batch``; compare.

    Every fetched output of every step and every variable after the last step
    must be close elementwise (``rtol``/``atol``) or within rounding noise:
    at most ``noise_factor`` times the spread of a third run, ``reference_gd``
    from `equivalence.perturbed` values and batch (see
    `pardnn.backend.equivalence`). ``noise``: ``auto`` runs that noise
    reference only when some tensor is not close, ``always`` always,
    ``off`` never (elementwise only, as does ``noise_factor=0``). ``allocators``: measure their peaks in the
    placed and the single-device runs (`run_program`).
    """
    if noise not in NOISE_MODES:
        raise ValueError(f"noise {noise!r}: expected one of {', '.join(NOISE_MODES)}")
    where = where or model.source or model.name
    run = run_program(build_program(model, placed_gd, values), batch, steps=steps, target=session_target,
                      config=config, what=f"{where}: the placed step", allocators=allocators)
    ref = run_program(build_program(model, reference_gd, values), batch, steps=steps, target=session_target,
                      config=config, what=f"{where}: the single-device step", trace=False, allocators=allocators)
    outputs, variables = _compare(model, run, ref, None, rtol=rtol, atol=atol, factor=noise_factor)
    close = outputs.elementwise and variables.elementwise
    if noise == "off" or noise_factor <= 0 or (noise == "auto" and close):
        return ReferenceCheck(run, ref, None, outputs, variables)
    t0 = time.perf_counter()
    noisy = run_program(build_program(model, reference_gd, perturbed(values)), perturbed(batch, seed=NOISE_SEED + 1),
                        steps=steps,
                        target=session_target, config=config, what=f"{where}: the noise reference step", trace=False)
    noise_s = time.perf_counter() - t0
    outputs, variables = _compare(model, run, ref, noisy, rtol=rtol, atol=atol, factor=noise_factor)
    return ReferenceCheck(run, ref, noisy, outputs, variables, noise_s)


# ---------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class TFRunReport:
    """A placed TensorFlow run, checked against a single-device run and the machine model."""

    model: str
    graph: str
    mode: str
    """``gpu``, ``cpu`` (logical CPU devices) or ``cluster``."""
    devices: tuple[str, ...]
    """The TensorFlow device of each placement device."""
    session_target: str
    ops_per_device: tuple[int, ...]
    host_ops: int
    regrouped: int
    steps: int
    """Steps compared (a warm-up, a traced step, then the timed ones)."""
    predicted_us: float
    measured_us: float
    reference_us: float
    """Median step time with every op on device 0."""
    placement_check: PlacementCheck
    send_recv: SendRecvCount
    simulated_transfers: int
    simulated_feed_transfers: int
    """Of the simulator's transfers, those that leave a fed placeholder (TensorFlow delivers feeds itself)."""
    transfers_only_tf: int
    transfers_only_simulated: int
    transfers_fused: int
    """TensorFlow transfers from outputs its runtime fusion added to an op (`tf_checks.reconcile_fused`), left
    out of both counts above with the simulated transfers of the ops fused away."""
    outputs_match: bool
    max_output_diff: float
    variables_match: bool
    max_variable_diff: float
    variables_compared: int
    losses: tuple[float, ...] = ()
    reference_losses: tuple[float, ...] = ()
    violations: tuple[str, ...] = ()
    """What the placement as run (colocation groups kept whole) breaks in the machine model on this cluster
    (memory over a device's capacity): the run goes ahead, and ``pardnn run`` exits 4 after its report."""
    short_bytes: int = 0
    """The bytes the worst device is short by, when memory is what breaks."""
    soft_placement: bool = False
    finite: bool = True
    """Every fetched value of every step is finite (NaN or inf in both runs would "match" and prove nothing)."""
    samples_us: tuple[float, ...] = field(default=(), repr=False)
    cost_model: str = ""
    criterion: str = "elementwise"
    """What the results matched by: ``elementwise`` (``rtol``/``atol``), ``rounding noise`` (some tensor needed
    the noise reference, `pardnn.backend.equivalence`), or ``none``."""
    rtol: float = 1e-4
    atol: float = 1e-5
    noise_factor: float = NOISE_FACTOR
    noise_reference: bool = False
    """Whether the noise reference ran (by default only when some tensor is not close elementwise)."""
    max_output_ratio: float | None = None
    """Of the fetched outputs not close elementwise, the largest deviation beyond ``atol * sqrt(n)`` in units of
    the noise reference's spread (within noise when at most ``noise_factor``); None when all are close."""
    max_variable_ratio: float | None = None
    """The same for the variables."""
    mismatched: int = 0
    """Tensors (fetched outputs over all steps, variables) that matched by neither criterion."""
    mismatches: tuple[dict, ...] = ()
    """The first 10 of them, worst first (`equivalence.TensorCheck.to_dict`)."""
    noise_s: float = 0.0
    """Wall time of the noise reference run."""
    memory: Mapping[str, Any] = field(default_factory=dict)
    """TensorFlow's measured allocator peaks beside the machine model's (`memory_summary`)."""
    busy_us: tuple[float, ...] = ()
    """Per placement device: the traced step's time spent in the graph's ops there (step stats, op start to end;
    TensorFlow's own _Send/_Recv and copies left out), beside the model's per-device compute."""
    timeline: tuple[tuple[tuple[str, int, int], ...], ...] = field(default=(), repr=False)
    """Per placement device: the traced step's ops of the graph there as ``(name, start, duration)`` in
    microseconds from the step's first op (`measured_timeline`); `to_dict`'s ``measured_timeline``."""
    variables_written: int = 0
    """Variables the step writes (an assign or an optimizer's apply op takes their handle)."""
    variables_unchanged: tuple[str, ...] = ()
    """Of those, the ones the single-device run left exactly as they started: their update was zero (a zero
    gradient: every token masked, a branch the loss does not reach), so matching them checks nothing behind it.
    The model's weights come first, then optimizer slots (`weights_first`)."""

    @property
    def variables_updated(self) -> int:
        """Of the written variables, how many the steps changed."""
        return self.variables_written - len(self.variables_unchanged)
    trace: Mapping[str, Any] | None = field(default=None, repr=False)
    """With ``run_placed(..., trace=True)``: the predicted and the measured (traced step) timelines as one
    Chrome trace-event object (`pardnn.report.trace`); not part of `to_dict`."""

    @property
    def ok(self) -> bool:
        """Same results as one device, and (without soft placement) every op where it was placed."""
        placed_ok = self.soft_placement or not self.placement_check.moved
        return self.outputs_match and self.variables_match and placed_ok and self.finite

    @property
    def feasible(self) -> bool:
        """The placement as run fits the machine model's cluster (`violations` is empty); not part of `ok`."""
        return not self.violations

    def to_dict(self) -> dict[str, Any]:
        pc = self.placement_check
        return {
            "model": self.model, "graph": self.graph, "backend": "tensorflow", "mode": self.mode,
            "devices": list(self.devices), "session_target": self.session_target,
            "ops_per_device": list(self.ops_per_device), "host_ops": self.host_ops, "regrouped": self.regrouped,
            "steps": len(self.samples_us), "steps_compared": self.steps, "cost_model": self.cost_model,
            "feasible": self.feasible, "violations": list(self.violations),
            "predicted_us": round(self.predicted_us, 3), "measured_us": round(self.measured_us, 3),
            "reference_us": round(self.reference_us, 3),
            "measured_over_predicted": round(self.measured_us / self.predicted_us, 4) if self.predicted_us > 0
            else None,
            "ops_checked": pc.checked, "ops_moved": len(pc.moved), "ops_untraced": pc.untraced,
            "moved": [list(m) for m in pc.moved[:20]],
            "send_recv": self.send_recv.to_dict(),
            "simulated_transfers": self.simulated_transfers,
            "simulated_feed_transfers": self.simulated_feed_transfers,
            "transfers_only_tf": self.transfers_only_tf,
            "transfers_only_simulated": self.transfers_only_simulated, "transfers_fused": self.transfers_fused,
            "outputs_match": self.outputs_match, "max_output_diff": self.max_output_diff,
            "variables_match": self.variables_match, "max_variable_diff": self.max_variable_diff,
            "variables_compared": self.variables_compared, "variables_written": self.variables_written,
            "variables_updated": self.variables_updated, "variables_unchanged": list(self.variables_unchanged),
            "criterion": self.criterion, "rtol": self.rtol, "atol": self.atol, "noise_factor": self.noise_factor,
            "noise_reference": self.noise_reference, "max_output_ratio": _json_ratio(self.max_output_ratio),
            "max_variable_ratio": _json_ratio(self.max_variable_ratio), "mismatched": self.mismatched,
            "mismatches": list(self.mismatches),
            "noise_s": round(self.noise_s, 3),
            "losses": list(self.losses), "reference_losses": list(self.reference_losses),
            "finite": self.finite, "soft_placement": self.soft_placement, "ok": self.ok,
            "memory": dict(self.memory),
            "per_device": [{"device": i, "name": d, "busy_us": round(b, 3)}
                           for i, (d, b) in enumerate(zip(self.devices, self.busy_us))],
            "measured_timeline": {
                "source": "the traced step's step stats: microseconds from its first op",
                "columns": ["name", "start_us", "dur_us"],
                "devices": [{"device": i, "name": d, "ops": [list(op) for op in ops]}
                            for i, (d, ops) in enumerate(zip(self.devices, self.timeline))],
            },
        }


def _json_ratio(r: float | None) -> float | str | None:
    return r if r is None or math.isfinite(r) else "inf"


def all_finite(outputs: Sequence[Sequence[np.ndarray]]) -> bool:
    """Whether every fetched floating-point value of every step is finite."""
    return all(np.isfinite(np.asarray(v)).all() for step in outputs for v in step
               if np.asarray(v).dtype.kind in "fc")


def _scalars(outputs: Sequence[Sequence[np.ndarray]]) -> tuple[float, ...]:
    """The first fetched value of each step, when it is a scalar (the loss)."""
    out = []
    for step in outputs:
        if not step or np.asarray(step[0]).size != 1 or np.asarray(step[0]).dtype.kind not in "fiu":
            return ()
        out.append(float(np.asarray(step[0]).reshape(())))
    return tuple(out)


def _simulated(g: OpGraph, cluster: Cluster, assignment: np.ndarray, devices: Sequence[str]):
    """The machine model's schedule and its transfers as ``(producer, port, device name)``."""
    sched = simulate(g, cluster, assignment)
    tr = sched.transfers
    tensors = [(g.names[int(s)], int(p), devices[int(d)]) for s, p, d in zip(tr.src, tr.port, tr.dst_dev)]
    return sched, tensors


def memory_summary(g: OpGraph, mode: str, allocators: Sequence[str], predicted_peaks: Sequence[int],
                   run: StepRun, reference: StepRun) -> dict[str, Any]:
    """The machine model's peaks beside TensorFlow's measured ones (bytes), for ``TFRunReport.memory``.

    ``reference_peak_bytes`` (the all-on-device-0 step) is the figure to set against
    ``predicted_single_device_peak_bytes``; ``measured_over_predicted`` is their ratio. On logical CPU devices the
    placed run's one figure covers all devices together (one shared allocator).
    """
    single = single_device_peak(g)
    ref = reference.peak_bytes
    measured_ref = sum(ref.values()) if ref else None
    return {
        "allocators": list(allocators),
        "shared_allocator": mode == "cpu",
        "predicted_single_device_peak_bytes": int(single),
        "predicted_peak_bytes": [int(x) for x in predicted_peaks],
        "reference_peak_bytes": dict(ref) if ref else None,
        "measured_peak_bytes": dict(run.peak_bytes) if run.peak_bytes else None,
        "measured_over_predicted": round(measured_ref / single, 4) if measured_ref and single else None,
        "note": reference.peak_note or run.peak_note or ("the allocators are in the servers' processes"
                                                         if mode == "cluster" else ""),
    }


def effective_assignment(g: OpGraph, assignment: Assignment, devices: Sequence[str]) -> np.ndarray:
    """The placement device of every node as it runs (groups kept whole; host ops count as device 0)."""
    index = {d: i for i, d in enumerate(devices)}
    out = np.zeros(g.num_nodes, dtype=np.int64)
    for v, name in enumerate(g.names):
        out[v] = 0 if is_host_op(g, v) else index[assignment.device[name]]
    return out


def run_placed(imp: TFImport, placement: Placement, *, target: LocalTarget | ClusterTarget | None = None,
               session_target: str = "", cluster: Cluster | None = None, steps: int = 5, rtol: float = 1e-4,
               atol: float = 1e-5, noise_factor: float = NOISE_FACTOR, noise: str = "auto",
               batch_size: int | None = None, soft_placement: bool = False, timeout_s: float | None = 600.0,
               model_name: str = "", trace: bool = False,
               inputs: Mapping[str, np.ndarray] | None = None) -> TFRunReport:
    """Run ``imp``'s step along ``placement`` and check it (see the module docstring).

    ``inputs``: the batch to feed, by input name (`pardnn.backend.common.checked_inputs`); by default the
    model's own batch, else deterministic draws (`feed_values`).

    ``target`` says where the devices are: None means this host (its GPUs
    when it has one per placement device, else logical CPUs); a
    `ClusterTarget` with ``session_target`` task 0's ``grpc://`` address runs
    across a cluster's tasks. ``cluster`` is the machine model's cluster for
    the prediction (default: the placement's devices, default links).
    ``rtol``, ``atol``, ``noise_factor`` and ``noise``: see `compare_with_reference`. ``trace``: also keep both
    timelines, predicted and measured, as Chrome trace events (``TFRunReport.trace``).
    """
    g, model = imp.graph, imp.model
    where = model_name or model.source or model.name
    check_placement_matches(g, placement, model.graph_def, where=where)
    if steps < 1:
        raise ValueError("steps must be at least 1")
    cl = cluster or default_cluster(placement)
    check_devices(g, placement, cl, where)
    target = target or local_target(placement)
    devices = map_devices(placement.devices, target)
    assignment = assign_devices(g, placement, devices)
    if assignment.regrouped:
        log.warning("%s: the placement splits colocation groups; %d op(s) follow their group's variable "
                    "(first: %s)", where, len(assignment.regrouped), assignment.regrouped[0])
    gd = with_batch(model.graph_def, model.feeds, batch_size)
    placed = placed_graph_def(gd, assignment)
    mode = "cluster" if isinstance(target, ClusterTarget) else target.kind
    cpus = None
    if mode == "cpu":
        cpus = max(devices_needed(devices, "cpu").get(0, 1), 1)
    config = session_config(cpus=cpus, soft_placement=soft_placement, timeout_s=timeout_s,
                            isolate=mode == "cluster")
    values = starting_values(model, batch_size)
    if inputs is not None:
        batch = checked_inputs(inputs, feed_specs(model, batch_size), f"{where}: inputs", feed_aliases(model))
    else:
        batch = feed_values(model, batch_size)

    one = Assignment({n: (assignment.device[n] if is_host_op(g, g.index[n]) else devices[0]) for n in g.names},
                     assignment.host_ops, ())
    allocators = allocator_names(devices, mode)
    rc = compare_with_reference(model, placed, placed_graph_def(gd, one), values, batch, steps=steps,
                                session_target=session_target, config=config, rtol=rtol, atol=atol,
                                noise_factor=noise_factor, noise=noise, where=where, allocators=allocators)
    run, ref = rc.run, rc.reference
    check = check_step_stats(run.metadata.step_stats, assignment.device)
    sr = count_send_recv(run.metadata.partition_graphs, frozenset(g.names))
    effective = effective_assignment(g, assignment, devices)
    fed = {split_tensor_name(f.name)[0] for f in model.feeds}
    # the prediction names the devices the step ran on (a violation on logical CPUs named /device:GPU:0)
    sched, sim_tensors = _simulated(g, named_as(cl, devices), effective, devices)
    from_feeds = [t for t in sim_tensors if t[0] in fed]
    only_tf, only_sim = compare_transfers(sr.data_tensors, [t for t in sim_tensors if t[0] not in fed])
    outputs = dict(zip(g.names, np.diff(g.port_ptr).tolist()))
    only_tf, only_sim, fused = reconcile_fused(only_tf, only_sim, outputs, traced_names(run.metadata.step_stats))
    counts = np.bincount(effective, minlength=placement.num_devices)
    written = written_variables(model.graph_def)
    unchanged = weights_first([v for v in written if v in ref.variables and v in values
                               and np.array_equal(np.asarray(ref.variables[v]), np.asarray(values[v]))])
    failed = rc.outputs.failed() + rc.variables.failed()
    return TFRunReport(
        model=where, graph=g.name, mode=mode, devices=devices, session_target=session_target,
        ops_per_device=tuple(int(c) for c in counts), host_ops=assignment.host_ops,
        regrouped=len(assignment.regrouped), steps=len(run.outputs), predicted_us=float(sched.makespan_us),
        violations=tuple(v.message for v in sched.violations), short_bytes=int(sched.memory_shortfall()),
        measured_us=statistics.median(run.step_us), reference_us=statistics.median(ref.step_us),
        placement_check=check, send_recv=sr, simulated_transfers=len(sim_tensors),
        simulated_feed_transfers=len(from_feeds),
        transfers_only_tf=len(only_tf), transfers_only_simulated=len(only_sim), transfers_fused=fused,
        outputs_match=rc.outputs.ok, max_output_diff=rc.outputs.max_abs_diff, variables_match=rc.variables.ok,
        max_variable_diff=rc.variables.max_abs_diff, variables_compared=len(ref.variables),
        losses=_scalars(run.outputs), reference_losses=_scalars(ref.outputs),
        soft_placement=soft_placement, finite=all_finite(run.outputs), samples_us=run.step_us,
        cost_model=str(g.meta.get("costs", "")), criterion=rc.criterion, rtol=rtol, atol=atol,
        noise_factor=noise_factor, noise_reference=rc.noise is not None, max_output_ratio=rc.outputs.max_ratio,
        max_variable_ratio=rc.variables.max_ratio, noise_s=rc.noise_s, mismatched=len(failed),
        mismatches=tuple(c.to_dict() for c in sorted(failed, key=_badness, reverse=True)[:10]),
        memory=memory_summary(g, mode, allocators, sched.peak_bytes, run, ref),
        variables_written=len(written), variables_unchanged=unchanged,
        busy_us=measured_busy_us(run.metadata.step_stats, devices, frozenset(g.names)),
        timeline=measured_timeline(run.metadata.step_stats, devices, frozenset(g.names)),
        trace=_trace(g, sched, devices, run, where) if trace else None)


#: Op types that write the variable whose handle is their first input.
_WRITES = ("Assign", "ResourceApply", "ResourceSparseApply", "ResourceScatter", "Apply", "SparseApply", "Scatter")


def weights_first(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` in order: weights that have optimizer slots, other variables (a step counter, moving
    statistics), then the slots. A slot's name holds its weight's (Keras 3: ``adam/dense_kernel_momentum``
    for ``dense/kernel``; TF1: ``dense/kernel/Adam``).

    >>> weights_first(["adam/dense_kernel_momentum", "dense/kernel", "adam/iteration"])
    ('dense/kernel', 'adam/iteration', 'adam/dense_kernel_momentum')
    """
    def holds(slot: str, weight: str) -> bool:
        return slot != weight and (weight in slot or weight.replace("/", "_") in slot)

    slots = {n for n in names if any(holds(n, o) for o in names)}
    weights = sorted((n for n in names if n not in slots), key=lambda n: (not any(holds(s, n) for s in slots), n))
    return tuple(weights) + tuple(sorted(slots))


def written_variables(graph_def) -> tuple[str, ...]:
    """The variable nodes of ``graph_def`` that some op writes (assigns, optimizer applies, scatters), sorted.

    A handle is followed back through ``Identity``/``Enter``/``Switch`` to its ``VarHandleOp`` (or ref ``Variable``).
    """
    nodes = {n.name: n for n in graph_def.node}
    out = set()
    for n in graph_def.node:
        if not n.op.startswith(_WRITES) or not n.input:
            continue
        src = nodes.get(split_tensor_name(n.input[0].lstrip("^"))[0])
        hops = 0
        while src is not None and src.op in ("Identity", "Enter", "Switch", "RefEnter", "RefSwitch",
                                             "RefIdentity") and src.input and hops < 64:
            src = nodes.get(split_tensor_name(src.input[0].lstrip("^"))[0])
            hops += 1
        if src is not None and src.op in VARIABLE_OPS:
            out.add(src.name)
    return tuple(sorted(out))


def measured_busy_us(step_stats, devices: Sequence[str], names: frozenset) -> tuple[float, ...]:
    """Per device of ``devices``: the traced step's op time (start to end of each op named in ``names``)."""
    busy = [0.0] * len(devices)
    for dev in step_stats.dev_stats:
        if not is_real_device(dev.device):
            continue
        d = next((i for i, want in enumerate(devices) if same_device(want, dev.device)), None)
        if d is None:
            continue
        busy[d] += sum(max(n.op_end_rel_micros - n.op_start_rel_micros, 0) for n in dev.node_stats
                       if n.node_name in names)
    return tuple(float(b) for b in busy)


def measured_timeline(step_stats, devices: Sequence[str],
                      names: frozenset) -> tuple[tuple[tuple[str, int, int], ...], ...]:
    """Per device of ``devices``: the traced step's ops named in ``names`` as ``(name, start_us, dur_us)``.

    Times are whole microseconds (step stats' own unit) from the step's first node on any real device, op start to
    op end (as `measured_busy_us` counts them, so each device's durations sum to its busy time); sorted by start,
    then name. TensorFlow's own nodes (_Send/_Recv, copies, feeds' argument ops) are left out.
    """
    real = [dev for dev in step_stats.dev_stats if is_real_device(dev.device) and dev.node_stats]
    t0 = min((n.all_start_micros for dev in real for n in dev.node_stats), default=0)
    lanes: list[list[tuple[str, int, int]]] = [[] for _ in devices]
    for dev in real:
        d = next((i for i, want in enumerate(devices) if same_device(want, dev.device)), None)
        if d is None:
            continue
        lanes[d] += [(n.node_name, int(n.all_start_micros + n.op_start_rel_micros - t0),
                      int(max(n.op_end_rel_micros - n.op_start_rel_micros, 0)))
                     for n in dev.node_stats if n.node_name in names]
    return tuple(tuple(sorted(lane, key=lambda op: (op[1], op[0]))) for lane in lanes)


def _trace(g: OpGraph, sched, devices: Sequence[str], run: StepRun, where: str) -> dict[str, Any]:
    """The machine model's timeline and the traced step's, as one Chrome trace-event object."""
    from ..report.trace import schedule_events, step_stats_events, trace_document
    return trace_document(schedule_events(g, sched, devices), step_stats_events(run.metadata.step_stats),
                          metadata={"graph": g.name, "model": where})


def _badness(c) -> tuple[float, float]:
    return (c.ratio if c.ratio is not None else math.inf, c.max_abs_diff)
