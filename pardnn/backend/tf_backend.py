"""``pardnn run`` and ``pardnn rewrite`` for TensorFlow models: where the step runs, and the files written.

* `run_placement`: a SavedModel or GraphDef and a placement, run on this
  host (GPUs, else logical CPUs), on servers `LocalCluster` starts on
  127.0.0.1 (``local_cluster=N``), or on a user's cluster
  (``cluster_spec=PATH``), and checked (`pardnn.backend.tf_run.run_placed`).
* `run_on_cluster`: the same for an imported step and a running cluster.
* `rewrite`: the placed GraphDef or SavedModel, without running it.

The logical CPU devices are configured before anything else touches
TensorFlow's runtime (`pardnn.backend.tf_run.setup_logical_cpus`), which is
why `run_placement` reads the placement's device count from the file first.
The modules that import TensorFlow (`tf_run`, `tf_savedmodel`, the
TensorFlow frontend) are imported inside the functions that need them, so
importing this module does not start TensorFlow, and a missing ``tf`` extra
is one `MissingDependencyError`. None of them imports this module.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from ..cluster import Cluster
from ..errors import InputError, MissingDependencyError, PlacementError
from ..frontends import FrontendOptions
from ..placement import Placement, check_batch_size, check_costs, load_placement
from .common import check_devices, checked_inputs, placement_device_count, read_inputs
from .tf_cluster import LocalCluster, Pinning, TFClusterSpec, check_reachable, cluster_devices, devices_per_task, \
    read_cluster_spec
from .tf_devices import ClusterTarget, LocalTarget, map_devices
from .tf_rewrite import assign_devices, placed_graph_def

log = logging.getLogger("pardnn.backend.tf")

DEVICE_KINDS = ("auto", "gpu", "cpu")


def cluster_target(spec: TFClusterSpec, placement: Placement, kind: str = "auto", *,
                   timeout_s: float = 30.0) -> ClusterTarget:
    """The cluster's devices per task, and the kind the placement runs on (GPUs where every task has enough)."""
    names = cluster_devices(spec, timeout_s)
    T = len(spec.tasks)
    per_task = math.ceil(placement.num_devices / T)
    gpus = devices_per_task(names, "gpu") + (0,) * T
    cpus = devices_per_task(names, "cpu") + (0,) * T
    if kind == "auto":
        kind = "gpu" if all(gpus[t] >= min(per_task, placement.num_devices) for t in range(T)) else "cpu"
    available = (gpus if kind == "gpu" else cpus)[:T]
    return ClusterTarget(spec.tasks, kind=kind, available=tuple(available), job=spec.job)


def run_on_cluster(imp, placement: Placement, spec: TFClusterSpec, *, device_kind: str = "auto",
                   connect_timeout_s: float = 10.0, **options):
    """Run ``imp``'s step along ``placement`` on a running cluster, from a session on task 0."""
    from .tf_run import run_placed

    check_reachable(spec, connect_timeout_s)
    target = cluster_target(spec, placement, device_kind, timeout_s=max(connect_timeout_s, 30.0))
    return run_placed(imp, placement, target=target, session_target=spec.target, **options)


def run_on_local_cluster(imp, placement: Placement, tasks: int, *, start_timeout_s: float = 120.0,
                         lifetime_s: float = 1800.0, pinning: Pinning | None = None, **options):
    """Start ``tasks`` servers on 127.0.0.1 (each on cores of its own with ``pinning``), run on them, and always
    shut them down."""
    per_task = math.ceil(placement.num_devices / tasks)
    with LocalCluster(tasks, cpus_per_task=per_task, start_timeout_s=start_timeout_s, lifetime_s=lifetime_s,
                      pinning=pinning) as lc:
        return run_on_cluster(imp, placement, lc.spec, device_kind="cpu", **options)


def run_placement(model: str | Path, placement: str | Path | Placement, *,
                  cluster: Cluster | Callable[[Placement], Cluster] | None = None,
                  options: FrontendOptions | None = None, steps: int = 5, rtol: float = 1e-4, atol: float = 1e-5,
                  noise_factor: float | None = None, local_cluster: int | None = None,
                  cluster_spec: str | Path | None = None,
                  device_kind: str = "auto", soft_placement: bool = False, timeout_s: float = 600.0,
                  write: str | Path | None = None, trace: bool = False, pinning: Pinning | None = None,
                  inputs: str | Path | Mapping[str, np.ndarray] | None = None):
    """Import ``model``, run it along ``placement`` where asked, check it; the `TFRunReport`.

    ``write``: also write the placed model there (``.pb``/``.pbtxt``, or a
    directory for a SavedModel input) with the devices the run used.
    ``trace``: keep the predicted and measured timelines (``TFRunReport.trace``).
    ``pinning``: with ``local_cluster``, each task on cores of its own (`tf_cluster.Pinning`).
    ``inputs``: the batch to feed instead of the model's own or made-up one: arrays by input name, or a ``.npz``
    file of them (`pardnn.backend.common.read_inputs`).
    ``noise_factor``: how far beyond ``rtol``/``atol`` results may differ, in
    units of a perturbed single-device run's spread (None: the default,
    `pardnn.backend.equivalence.NOISE_FACTOR`; 0: elementwise only).
    """
    if device_kind not in DEVICE_KINDS:
        raise InputError(f"device kind {device_kind!r}: expected one of {', '.join(DEVICE_KINDS)}")
    if local_cluster and cluster_spec:
        raise InputError("give either a local cluster or a cluster spec, not both")
    if pinning and not local_cluster:
        raise InputError("pinning applies to a local cluster only (pardnn serve --cores pins a task of yours)")
    opts = options or FrontendOptions()
    spec = read_cluster_spec(cluster_spec) if cluster_spec else None
    given, source = (read_inputs(inputs), str(inputs)) if isinstance(inputs, (str, Path)) else (inputs, "inputs")
    k = None if isinstance(placement, Placement) else placement_device_count(placement)
    try:
        from ..frontends.tensorflow import import_tensorflow
        from ..frontends.tensorflow.profile import input_ranges
        from . import tf_run
    except ImportError as exc:
        raise MissingDependencyError(f"{model}: running TensorFlow models needs the 'tf' extra "
                                     f"(pip install 'pardnn[tf]'): {exc}") from None
    if not local_cluster and not spec and device_kind != "gpu":
        n = k if k is not None else (placement.num_devices if isinstance(placement, Placement) else 1)
        if tf_run.local_gpus() < n or device_kind == "cpu":
            tf_run.setup_logical_cpus(n)     # before TensorFlow initialises, where it has not yet
    imp = import_tensorflow(model, opts)
    pl = placement if isinstance(placement, Placement) else load_placement(placement, imp.graph)
    where = str(placement if not isinstance(placement, Placement) else model)
    check_batch_size(pl.meta.get("batch_size"), opts.batch_size, where)
    check_costs(pl.meta.get("costs"), imp.graph.meta, where)
    cl = cluster(pl) if callable(cluster) else cluster
    if cl is not None:
        check_devices(imp.graph, pl, cl, where)     # before the servers start and the steps run
    batch = None
    if given is not None:
        batch = checked_inputs(given, tf_run.feed_specs(imp.model, opts.batch_size), source,
                               tf_run.feed_aliases(imp.model), input_ranges(imp.model, opts.batch_size))
    common = dict(cluster=cl, steps=steps, rtol=rtol, atol=atol, batch_size=opts.batch_size, inputs=batch,
                  soft_placement=soft_placement, timeout_s=timeout_s, model_name=str(model), trace=trace)
    if noise_factor is not None:
        common["noise_factor"] = noise_factor
    if local_cluster:
        report = run_on_local_cluster(imp, pl, local_cluster, start_timeout_s=min(timeout_s, 180.0), pinning=pinning,
                                      lifetime_s=timeout_s * 3, **common)
    elif spec is not None:
        report = run_on_cluster(imp, pl, spec, device_kind=device_kind, **common)
    else:
        target = tf_run.local_target(pl, device_kind)
        report = tf_run.run_placed(imp, pl, target=target, **common)
    if write:
        _write(imp, pl, report.devices, write, opts.batch_size)
    return report


VALUED_FORMATS = ("tensorflow-savedmodel", "keras")
"""Source formats whose variables have values, so that a placed SavedModel can be written for them."""


def _write(imp, placement: Placement, devices, out, batch_size):
    from ..frontends.tensorflow.shapes import with_batch
    from .tf_run import starting_values
    from .tf_savedmodel import write_placed

    model = imp.model
    placed = placed_graph_def(with_batch(model.graph_def, model.feeds, batch_size),
                              assign_devices(imp.graph, placement, devices))
    values = starting_values(model, batch_size) if model.source_format in VALUED_FORMATS else None
    return write_placed(model, placed, values, out)


def target_for(placement: Placement, device_kind: str = "as-named", tasks: int | None = None,
               cluster_spec: TFClusterSpec | None = None):
    """Where ``rewrite`` maps the devices: as named, this host's CPUs/GPUs, or a cluster's tasks (unchecked)."""
    if cluster_spec is not None or tasks:
        addresses = cluster_spec.tasks if cluster_spec else tuple(f"task{i}" for i in range(tasks))
        kind = "gpu" if device_kind == "gpu" else "cpu"
        return ClusterTarget(addresses, kind=kind, job=cluster_spec.job if cluster_spec else "worker")
    if device_kind in ("gpu", "cpu"):
        return LocalTarget(device_kind)
    return None


def rewrite(model: str | Path, placement: str | Path | Placement, output: str | Path, *,
            options: FrontendOptions | None = None, device_kind: str = "as-named", tasks: int | None = None,
            cluster_spec: str | Path | None = None) -> tuple[Path, dict]:
    """Write ``model`` with ``placement``'s devices to ``output``; the path and a summary."""
    from ..frontends.tensorflow import import_tensorflow

    opts = options or FrontendOptions()
    spec = read_cluster_spec(cluster_spec) if cluster_spec else None
    imp = import_tensorflow(model, opts)
    pl = placement if isinstance(placement, Placement) else load_placement(placement, imp.graph)
    check_batch_size(pl.meta.get("batch_size"), opts.batch_size, str(placement if not isinstance(
        placement, Placement) else model), doing="rewrite")
    target = target_for(pl, device_kind, tasks, spec)
    devices = map_devices(pl.devices, target)
    assignment = assign_devices(imp.graph, pl, devices)
    path = _write(imp, pl, devices, output, opts.batch_size)
    if not path:
        raise PlacementError(f"{output}: nothing written")
    counts: dict[str, int] = {}
    for d in assignment.device.values():
        counts[d] = counts.get(d, 0) + 1
    return path, {"graph": imp.graph.name, "output": str(path), "devices": list(devices),
                  "ops_per_device": dict(sorted(counts.items())), "host_ops": assignment.host_ops,
                  "regrouped": len(assignment.regrouped)}
