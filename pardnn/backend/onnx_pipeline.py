"""Run an ONNX model split along a placement: one onnxruntime session per stage, pipelined across devices.

1. **Stages** (`plan_stages`). The ONNX nodes are put in a topological order
   that stays on one device as long as it can (Kahn's algorithm preferring
   a ready node on the current device). Each maximal run of consecutive nodes
   on one device is a stage: one stage per device when that device's ops are
   contiguous, several ("topological segments") when they are not.
2. **Sub-models** (`stage_model`). Each stage becomes a model of its own: its
   nodes in order, the values it reads from graph inputs or earlier stages as
   inputs, the values later stages or the caller need as outputs, and a copy
   of every weight its nodes read (weights are loaded before the step, so a
   weight read on two devices lives on both).
3. **Pipeline** (`run_pipeline`). One `InferenceSession` per stage, on its
   device's provider (`pardnn.frontends.onnx.runtime.providers_for`: CUDA on
   ``/device:GPU:i`` when onnxruntime has it, the CPU provider otherwise).
   Each device runs its stages in order on a thread of its own; a stage starts
   when the stages it reads from have finished, so stages on different devices
   overlap wherever the graph allows.
4. **Check** (`run_placement`). The same inputs go through the whole model in
   one session; every output must match within ``rtol``/``atol``. The report
   puts the measured step time beside the machine model's prediction
   (`pardnn.machine.simulate`) for the same graph, placement and cluster.
"""

from __future__ import annotations

import heapq
import statistics
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..cluster import Cluster
from ..errors import MissingDependencyError, PlacementError, RuntimeFailure, naming
from ..frontends import FrontendOptions
from ..frontends.onnx import graph_from_prepared, prepare
from ..frontends.onnx.convert import node_reads
from ..frontends.onnx.inputs import logged
from ..frontends.onnx.model import PreparedModel
from ..frontends.onnx.runtime import example_feeds, make_session, provider_label, providers_for
from ..ir import OpGraph
from ..machine import simulate
from ..placement import Placement, check_batch_size, check_costs, load_placement
from .common import check_devices, checked_inputs, default_cluster, read_inputs


@dataclass(frozen=True)
class Stage:
    """A run of consecutive nodes on one device."""

    index: int
    device: int
    nodes: tuple[int, ...]          # ONNX node indices, in order
    inputs: tuple[str, ...]         # values read from graph inputs or earlier stages
    outputs: tuple[str, ...]        # values later stages or the caller read
    after: tuple[int, ...] = ()     # stages whose outputs it reads


@dataclass(frozen=True)
class StageReport:
    index: int
    device: int
    device_name: str
    provider: str
    nodes: int
    inputs: int
    outputs: int
    compute_us: float


@dataclass(frozen=True)
class RunReport:
    """What `run_placement` measured, and what the machine model predicted."""

    model: str
    graph: str
    devices: tuple[str, ...]
    predicted_us: float
    measured_us: float
    whole_model_us: float
    outputs_match: bool
    max_abs_diff: float
    steps: int
    cost_model: str
    stages: tuple[StageReport, ...]
    samples_us: tuple[float, ...] = field(default=(), repr=False)
    violations: tuple[str, ...] = ()
    """What the placement breaks in the machine model on this cluster (memory over a device's capacity, a
    split colocation group): the run goes ahead, and ``pardnn run`` exits 4 after its report."""
    short_bytes: int = 0
    """The bytes the worst device is short by, when memory is what breaks."""
    ops_per_device: tuple[int, ...] = ()
    """The graph's ops on each device, as the placement put them (each ONNX node runs where it is placed);
    `pardnn report --measured` checks a run against its placement by these."""

    @property
    def feasible(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "graph": self.graph, "devices": list(self.devices),
            "predicted_us": round(self.predicted_us, 3), "measured_us": round(self.measured_us, 3),
            "whole_model_us": round(self.whole_model_us, 3),
            "measured_over_predicted": round(self.measured_us / self.predicted_us, 4) if self.predicted_us > 0
            else None,
            "outputs_match": self.outputs_match, "max_abs_diff": self.max_abs_diff, "steps": self.steps,
            "steps_compared": 1, "feasible": self.feasible, "violations": list(self.violations),
            "cost_model": self.cost_model, "ops_per_device": list(self.ops_per_device),
            "stages": [{"stage": s.index, "device": s.device, "device_name": s.device_name, "provider": s.provider,
                        "nodes": s.nodes, "inputs": s.inputs, "outputs": s.outputs,
                        "compute_us": round(s.compute_us, 3)} for s in self.stages],
        }


# ---------------------------------------------------------------------------
# stages
# ---------------------------------------------------------------------------

def node_devices(pm: PreparedModel, g: OpGraph, placement: Placement) -> np.ndarray:
    """The device of each ONNX node, read from the placement of its pardnn node."""
    dev = np.empty(len(pm.graph.node), dtype=np.int64)
    for i, n in enumerate(pm.graph.node):
        v = g.index.get(n.name)
        if v is None:
            raise PlacementError(f"ONNX node {n.name!r} is not in graph {g.name!r}: the placement and the model "
                                 "do not match")
        dev[i] = placement.assignment[v]
    return dev


def device_first_order(pm: PreparedModel, dev: np.ndarray) -> list[int]:
    """A topological order of the ONNX nodes that changes device as seldom as greedily possible."""
    nodes = list(pm.graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    succ: list[list[int]] = [[] for _ in nodes]
    indeg = [0] * len(nodes)
    for i, n in enumerate(nodes):
        preds = {producer[t] for t in node_reads(n) if t in producer}
        preds.discard(i)
        for p in preds:
            succ[p].append(i)
        indeg[i] = len(preds)
    ready: dict[int, list[int]] = {}
    for i in range(len(nodes)):
        if indeg[i] == 0:
            heapq.heappush(ready.setdefault(int(dev[i]), []), i)
    order: list[int] = []
    current = None
    while len(order) < len(nodes):
        if current is None or not ready.get(current):
            live = [(heap[0], d) for d, heap in ready.items() if heap]
            if not live:
                raise RuntimeFailure("the ONNX graph has a cycle")   # prepare() checked; cannot happen
            current = min(live)[1]
        i = heapq.heappop(ready[current])
        order.append(i)
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready.setdefault(int(dev[s]), []), s)
    return order


def plan_stages(pm: PreparedModel, dev: np.ndarray) -> list[Stage]:
    """Stages from the placement's topological segments (see the module docstring)."""
    nodes = list(pm.graph.node)
    order = device_first_order(pm, dev)
    runs: list[list[int]] = []
    for i in order:
        if runs and dev[runs[-1][-1]] == dev[i]:
            runs[-1].append(i)
        else:
            runs.append([i])
    stage_of_value: dict[str, int] = {}
    for s, run in enumerate(runs):
        for i in run:
            for o in nodes[i].output:
                if o:
                    stage_of_value[o] = s
    inits = pm.initializer_names
    graph_outputs = [o.name for o in pm.graph.output]
    needed_later: dict[int, set[str]] = {s: set() for s in range(len(runs))}
    stage_inputs: list[list[str]] = []
    stage_after: list[set[int]] = []
    for s, run in enumerate(runs):
        ins: list[str] = []
        after: set[int] = set()
        for i in run:
            for t in node_reads(nodes[i]):
                if t in inits or t in ins:
                    continue
                src = stage_of_value.get(t)
                if src == s:
                    continue
                if src is not None:
                    needed_later[src].add(t)
                    after.add(src)
                ins.append(t)
        stage_inputs.append(ins)
        stage_after.append(after)
    for o in graph_outputs:
        if o in stage_of_value:
            needed_later[stage_of_value[o]].add(o)
    stages = []
    for s, run in enumerate(runs):
        produced = [o for i in run for o in nodes[i].output if o]
        outs = [o for o in produced if o in needed_later[s]]
        if not outs:   # a stage nobody reads from (dead ends): still run it, return its last values
            outs = [o for o in nodes[run[-1]].output if o]
        # a subgraph may capture a value defined by an enclosing body, not by any stage or input:
        feeds = set(pm.feed_names)
        ins = [t for t in stage_inputs[s] if t in stage_of_value or t in feeds]
        stages.append(Stage(s, int(dev[run[0]]), tuple(run), tuple(ins), tuple(outs), tuple(sorted(stage_after[s]))))
    return stages


def _value_info(pm: PreparedModel, name: str) -> onnx.ValueInfoProto:
    t = pm.tensors.get(name)
    if t is None:
        return onnx.ValueInfoProto(name=name)
    return t.value_info()


def stage_model(pm: PreparedModel, stage: Stage, weights: Mapping[str, onnx.TensorProto]) -> onnx.ModelProto:
    """The sub-model of one stage (``weights``: the full model's initializers, data loaded)."""
    nodes = [pm.graph.node[i] for i in stage.nodes]
    used = []
    for n in nodes:
        for t in node_reads(n):
            if t in weights and t not in used:
                used.append(t)
    produced = {o for n in nodes for o in n.output if o}
    graph = helper.make_graph(
        nodes, f"{pm.graph.name or 'model'}_stage{stage.index}",
        [_value_info(pm, t) for t in stage.inputs], [_value_info(pm, t) for t in stage.outputs],
        initializer=[weights[t] for t in used],
        value_info=[_value_info(pm, t) for t in produced if t not in stage.outputs and t in pm.tensors])
    m = helper.make_model(graph, opset_imports=list(pm.model.opset_import), producer_name="pardnn")
    m.ir_version = pm.model.ir_version
    return m


# ---------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------

def _loaded_weights(pm: PreparedModel) -> tuple[dict[str, onnx.TensorProto], onnx.ModelProto]:
    """The model's initializers with their data, and the whole model with its weights loaded."""
    m = onnx.ModelProto()
    m.CopyFrom(pm.model)
    onnx.external_data_helper.load_external_data_for_model(m, str(pm.path.parent))
    return {t.name: t for t in m.graph.initializer}, m


def _run(sess, names: Sequence[str], feeds: Mapping[str, np.ndarray], what: str) -> list[np.ndarray]:
    try:
        return sess.run(list(names), dict(feeds))
    except Exception as exc:
        raise RuntimeFailure(f"{what} failed in onnxruntime: {' '.join(str(exc).split())[:400]}") from None


class Pipeline:
    """Stage sessions and one worker thread per device; `step` runs one step. Use as a context manager.

    In a step each device runs its stages in order on its own thread; a stage
    first waits for the stages it reads from, so stages on different devices
    overlap wherever the graph allows (onnxruntime releases the GIL while it
    computes).
    """

    def __init__(self, stages: Sequence[Stage], sessions: Sequence):
        self.stages = list(stages)
        self.sessions = list(sessions)
        self.executors = {d: ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"pardnn-dev{d}")
                          for d in sorted({s.device for s in self.stages})}

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for ex in self.executors.values():
            ex.shutdown(wait=True)

    def step(self, feeds: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[float]]:
        """Every value the stages passed on (graph outputs included), and each stage's compute time (us)."""
        values: dict[str, np.ndarray] = dict(feeds)
        lock = threading.Lock()
        times = [0.0] * len(self.stages)
        futures: dict[int, Future] = {}

        def work(s: Stage) -> None:
            for a in s.after:
                futures[a].result()
            with lock:
                inputs = {t: values[t] for t in s.inputs}
            t0 = time.perf_counter()
            out = _run(self.sessions[s.index], s.outputs, inputs, f"stage {s.index} (device {s.device})")
            times[s.index] = (time.perf_counter() - t0) * 1e6
            with lock:
                values.update(zip(s.outputs, out))

        for s in self.stages:   # stage order is topological: a stage's producers are already submitted
            futures[s.index] = self.executors[s.device].submit(work, s)
        for s in self.stages:
            futures[s.index].result()
        return values, times


def compare_outputs(expected: Mapping[str, Any], got: Mapping[str, Any], *, rtol: float,
                    atol: float) -> tuple[bool, float]:
    """Whether every output matches within tolerance, and the largest absolute difference.

    An output may be a sequence of tensors (a list): it matches when it has as many elements and each
    matches.

    >>> compare_outputs({"s": [np.ones(2), np.ones(3)]}, {"s": [np.ones(2), np.ones(3) * 1.5]}, rtol=0, atol=0)
    (False, 0.5)
    """
    ok, worst = True, 0.0
    for name, want in expected.items():
        have = got[name]
        if isinstance(want, list) or isinstance(have, list):
            if not (isinstance(want, list) and isinstance(have, list) and len(want) == len(have)):
                ok, worst = False, float("inf")
                continue
            pairs = list(zip(have, want))
        else:
            pairs = [(have, want)]
        for h, w in pairs:
            same, diff = _compare_arrays(w, h, rtol=rtol, atol=atol)
            ok &= same
            worst = max(worst, diff)
    return ok, worst


def _compare_arrays(want, have, *, rtol: float, atol: float) -> tuple[bool, float]:
    want, have = np.asarray(want), np.asarray(have)
    if have.shape != want.shape:
        return False, float("inf")
    if want.dtype.kind in "fc":
        worst = float(np.nanmax(np.abs(have.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0
        return bool(np.allclose(have, want, rtol=rtol, atol=atol, equal_nan=True)), worst
    same = bool(np.array_equal(have, want))
    return same, 0.0 if same else float("inf")


def run_placement(model: str | Path, placement: str | Path | Placement, *,
                  cluster: Cluster | Callable[[Placement], Cluster] | None = None,
                  options: FrontendOptions | None = None, steps: int = 5, seed: int = 0, rtol: float = 1e-4,
                  atol: float = 1e-5, threads: int | None = 1,
                  inputs: str | Path | Mapping[str, np.ndarray] | None = None) -> RunReport:
    """Split ``model`` along ``placement``, run it as a pipeline, and check it against the whole model.

    ``cluster`` may be a function of the placement (the command line builds
    it from flags once it knows how many devices the placement has); None
    means the placement's devices, unlimited memory and default links.
    ``threads`` is the intra-op thread count of every session (1 by
    default: each CPU "device" is one core, and the whole model gets the
    same so that the two timings compare). ``inputs``: the batch to feed (arrays by input name, or a ``.npz``
    file of them, `pardnn.backend.common.read_inputs`) instead of the deterministic draws of ``seed``.
    """
    given, source = (read_inputs(inputs), str(inputs)) if isinstance(inputs, (str, Path)) else (inputs, "inputs")
    try:
        return _run_placement(model, placement, cluster=cluster, options=options, steps=steps, seed=seed, rtol=rtol,
                              atol=atol, threads=threads, given=given, source=source)
    except RuntimeFailure as exc:    # onnxruntime's words name the node, not the file
        raise naming(model, exc) from None


def _run_placement(model, placement, *, cluster, options, steps, seed, rtol, atol, threads, given=None,
                   source="inputs") -> RunReport:
    opts = options or FrontendOptions()
    if steps < 1:
        raise ValueError("steps must be at least 1")
    pm = prepare(model, dims=opts.dims, batch_size=opts.batch_size)
    spec = [(t, pm.tensors[t].elem_type, pm.tensors[t].shape) for t in pm.feed_names]
    ranges = pm.index_ranges()
    if given is not None:
        feeds = checked_inputs(given, [(t, helper.tensor_dtype_to_np_dtype(e), s) for t, e, s in spec], source,
                               ranges=ranges)
    else:
        feeds = example_feeds(spec, seed, logged(ranges, model))
    g = graph_from_prepared(pm, opts)
    pl = placement if isinstance(placement, Placement) else load_placement(placement, g)
    where = str(placement if not isinstance(placement, Placement) else model)
    check_batch_size(pl.meta.get("batch_size"), opts.batch_size, where)
    check_costs(pl.meta.get("costs"), g.meta, where)
    if pl.assignment.size != g.num_nodes:
        raise PlacementError(f"the placement has {pl.assignment.size} entries but graph {g.name!r} has "
                             f"{g.num_nodes} nodes: it was made for another graph")
    cl = cluster(pl) if callable(cluster) else cluster or default_cluster(pl)
    check_devices(g, pl, cl, None if isinstance(placement, Placement) else str(placement))
    sched = simulate(g, cl, pl)     # the placement checked against the model (memory, colocation)
    predicted = sched.makespan_us

    dev = node_devices(pm, g, pl)
    stages = plan_stages(pm, dev)
    weights, full = _loaded_weights(pm)
    sessions = []
    reports = []
    try:
        whole = make_session(full, providers=providers_for(cl.names[0]), threads=threads)
        for s in stages:
            provs = providers_for(cl.names[s.device])
            sessions.append(make_session(stage_model(pm, s, weights), providers=provs, threads=threads))
            reports.append((s, cl.names[s.device], provider_label(provs, sessions[-1])))
    except RuntimeFailure as exc:
        if pm.is_training:
            raise MissingDependencyError(f"{model}: running a training graph needs onnxruntime-training's "
                                         f"gradient kernels, which this onnxruntime lacks ({exc})") from None
        raise

    out_names = [o.name for o in pm.graph.output]
    expected = dict(zip(out_names, _run(whole, out_names, feeds, "the whole model")))
    whole_samples = []
    for _ in range(steps):
        t0 = time.perf_counter()
        _run(whole, out_names, feeds, "the whole model")
        whole_samples.append((time.perf_counter() - t0) * 1e6)

    samples, stage_times = [], []
    with Pipeline(stages, sessions) as pipe:
        values, _ = pipe.step(feeds)   # warm-up, and the values to check
        for _ in range(steps):
            t0 = time.perf_counter()
            _, times = pipe.step(feeds)
            samples.append((time.perf_counter() - t0) * 1e6)
            stage_times.append(times)
    got = {}
    for o in out_names:
        if o in values:
            got[o] = values[o]
        elif o in weights:
            got[o] = numpy_helper.to_array(weights[o])
        else:
            raise RuntimeFailure(f"graph output {o!r} was not produced by any stage")
    match, diff = compare_outputs(expected, got, rtol=rtol, atol=atol)
    stage_reports = tuple(
        StageReport(s.index, s.device, name, prov, len(s.nodes), len(s.inputs), len(s.outputs),
                    statistics.median(t[s.index] for t in stage_times))
        for s, name, prov in reports)
    return RunReport(model=str(model), graph=g.name, devices=tuple(cl.names), predicted_us=float(predicted),
                     measured_us=statistics.median(samples), whole_model_us=statistics.median(whole_samples),
                     outputs_match=match, max_abs_diff=diff, steps=steps,
                     cost_model=str(g.meta.get("cost_model", "")), stages=stage_reports,
                     samples_us=tuple(samples), violations=tuple(v.message for v in sched.violations),
                     short_bytes=int(sched.memory_shortfall()),
                     ops_per_device=tuple(int(c) for c in np.bincount(pl.assignment, minlength=cl.num_devices)))
