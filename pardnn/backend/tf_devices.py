"""Which TensorFlow device runs each of a placement's devices (pure Python; no TensorFlow import).

A placement names its devices (``/device:GPU:0``, ``/device:CPU:3``, or full
names such as ``/job:worker/replica:0/task:1/device:GPU:0``) and numbers them
``0..K-1``. A run needs real TensorFlow device names, and which ones depends
on where it runs:

* **as named** (no target; what ``pardnn rewrite`` writes by default): each
  device keeps its placement name (``/device:GPU:1`` stays ``/device:GPU:1``).
* **one host, GPUs** (`LocalTarget` with ``kind="gpu"``): a device named
  ``/device:GPU:i`` runs on the host's GPU ``i``; any other name takes the
  GPU of its position ``d``. A GPU the host does not have is a
  `PlacementError`.
* **one host, logical CPUs** (``kind="cpu"``): device ``d`` runs on the
  logical CPU device ``/device:CPU:d`` (a name ``/device:CPU:i`` keeps its
  ``i``). The run creates as many logical CPUs as the highest index needs.
* **a cluster of tasks** (`ClusterTarget`): a name with a task
  (``/job:worker/task:1/device:GPU:0``) keeps it; other devices are dealt out
  in contiguous blocks, ``ceil(K / tasks)`` per task, in order, so device
  ``d`` is local device ``d % per_task`` of task ``d // per_task``. A task or
  device the cluster does not have is a `PlacementError`.

Host-only ops (``"host": true`` in the graph) run on the CPU of device 0's
task (`host_device`).

>>> parse_device("/job:worker/replica:0/task:1/device:GPU:2")
DeviceName(job='worker', replica=0, task=1, kind='GPU', index=2)
>>> map_devices(["/device:GPU:0", "/device:GPU:1"], LocalTarget("cpu"))
('/device:CPU:0', '/device:CPU:1')
>>> t = ClusterTarget(("h0:2222", "h1:2222"), kind="cpu", available=(2, 2))
>>> map_devices(["/device:GPU:0", "/device:GPU:1", "/device:GPU:2"], t)[2]
'/job:worker/replica:0/task:1/device:CPU:0'
>>> host_device(map_devices(["/device:GPU:0"], LocalTarget("gpu", available=1)))
'/device:CPU:0'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..errors import PlacementError

@dataclass(frozen=True)
class DeviceName:
    """A parsed TensorFlow device name; None where the name leaves a field out."""

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    kind: str | None = None
    """``CPU``, ``GPU``, ``TPU``, ... (upper case)."""
    index: int | None = None

    def full(self, job: str = "localhost", task: int = 0) -> str:
        """The fully qualified name, with ``job``/``task`` where this one has none."""
        return (f"/job:{self.job or job}/replica:{self.replica or 0}/task:{task if self.task is None else self.task}"
                f"/device:{self.kind or 'CPU'}:{self.index or 0}")


def parse_device(name: str) -> DeviceName:
    """Parse ``/job:j/replica:r/task:t/device:KIND:i`` and its short forms (``/gpu:0``, ``GPU:1``).

    >>> parse_device("/gpu:1"), parse_device("/device:CPU:0").full()
    (DeviceName(job=None, replica=None, task=None, kind='GPU', index=1), '/job:localhost/replica:0/task:0/device:CPU:0')
    """
    fields: dict = {}
    text = name.strip()
    if not text:
        raise PlacementError("an empty device name")
    if not text.startswith("/"):
        text = "/device:" + text if ":" in text else "/" + text
    parts = [p for p in text.split("/") if p]
    try:
        for part in parts:
            key, _, value = part.partition(":")
            low = key.lower()
            if low == "job":
                fields["job"] = value
            elif low in ("replica", "task"):
                fields[low] = int(value)
            elif low == "device":
                kind, _, index = value.partition(":")
                fields["kind"] = kind.upper()
                fields["index"] = int(index) if index else 0
            elif low in ("cpu", "gpu", "tpu"):
                fields["kind"] = low.upper()
                fields["index"] = int(value) if value else 0
            else:
                raise ValueError(part)
    except ValueError:
        raise PlacementError(f"device name {name!r} is not a TensorFlow device name "
                             "(expected e.g. /device:GPU:0 or /job:worker/replica:0/task:1/device:CPU:0)") from None
    return DeviceName(**fields)


@dataclass(frozen=True)
class LocalTarget:
    """One host: its GPUs (``kind="gpu"``, ``available`` of them) or logical CPU devices (``kind="cpu"``)."""

    kind: str = "cpu"
    available: int | None = None
    """GPUs the host has (``gpu``); None for logical CPUs, which the run creates."""


@dataclass(frozen=True)
class ClusterTarget:
    """Tasks of a TensorFlow cluster (``tf.distribute.Server``s), one per host."""

    tasks: tuple[str, ...]
    """``host:port`` of each task, in task order."""
    kind: str = "cpu"
    available: tuple[int, ...] | None = None
    """Devices of ``kind`` each task has (None: not known yet, nothing is checked)."""
    job: str = "worker"


def _kind(target: LocalTarget | ClusterTarget) -> str:
    return target.kind.upper()


def _distinct(devices: list[str], verb: str) -> tuple[str, ...]:
    """``devices`` as a tuple, once no two placement devices ``verb`` the same one."""
    if len(set(devices)) != len(devices):
        dup = next(x for x in devices if devices.count(x) > 1)
        raise PlacementError(f"two placement devices {verb} the same device {dup}")
    return tuple(devices)


def _local(names: Sequence[str], target: LocalTarget) -> tuple[str, ...]:
    kind = _kind(target)
    out = []
    for d, name in enumerate(names):
        p = parse_device(name)
        index = p.index if p.kind == kind and p.index is not None else d
        if kind == "GPU" and target.available is not None and index >= target.available:
            raise PlacementError(f"placement device {d} ({name}) needs GPU {index}, but this host has "
                                 f"{target.available} GPU(s)")
        out.append(f"/device:{kind}:{index}")
    return _distinct(out, "map to")


def _cluster(names: Sequence[str], target: ClusterTarget) -> tuple[str, ...]:
    kind = _kind(target)
    T = len(target.tasks)
    if T < 1:
        raise PlacementError("the cluster has no tasks")
    per_task = max(1, math.ceil(len(names) / T))
    out = []
    for d, name in enumerate(names):
        p = parse_device(name)
        if p.task is not None:
            if p.job is not None and p.job != target.job:
                raise PlacementError(f"placement device {d} ({name}) is in job {p.job!r}, but the cluster's job "
                                     f"is {target.job!r}")
            task, index = p.task, (p.index or 0)
            dev_kind = p.kind or kind
        else:
            task, index, dev_kind = d // per_task, d % per_task, kind
        if task >= T:
            raise PlacementError(f"placement device {d} ({name}) is on task {task}, but the cluster has {T} "
                                 f"task(s): {', '.join(target.tasks)}")
        if target.available is not None and dev_kind == kind and index >= target.available[task]:
            raise PlacementError(f"placement device {d} ({name}) needs {dev_kind}:{index} on task {task} "
                                 f"({target.tasks[task]}), which has {target.available[task]} {dev_kind} device(s)")
        out.append(f"/job:{target.job}/replica:0/task:{task}/device:{dev_kind}:{index}")
    return _distinct(out, "map to")


def _as_named(names: Sequence[str]) -> tuple[str, ...]:
    out = []
    for name in names:
        p = parse_device(name)
        if p.kind is None:
            raise PlacementError(f"placement device {name!r} names no device type (expected e.g. /device:GPU:0)")
        out.append(p.full() if p.job or p.task is not None else f"/device:{p.kind}:{p.index or 0}")
    return _distinct(out, "name")


def map_devices(names: Sequence[str], target: LocalTarget | ClusterTarget | None) -> tuple[str, ...]:
    """The TensorFlow device name for each placement device (rules in the module docstring).

    One host gives short names (``/device:CPU:2``), a cluster full ones.
    """
    if not names:
        raise PlacementError("the placement lists no devices")
    if target is None:
        return _as_named(names)
    if isinstance(target, ClusterTarget):
        return _cluster(names, target)
    return _local(names, target)


def host_device(devices: Sequence[str]) -> str:
    """The CPU of device 0's task: where host-only ops run (short form when device 0's name is short)."""
    p = parse_device(devices[0])
    if p.job is None and p.task is None:
        return "/device:CPU:0"
    return f"/job:{p.job or 'localhost'}/replica:{p.replica or 0}/task:{p.task or 0}/device:CPU:0"


def devices_needed(devices: Sequence[str], kind: str) -> dict[int, int]:
    """How many ``kind`` devices each task needs (highest index + 1), by task.

    >>> devices_needed(["/job:w/replica:0/task:1/device:CPU:2", "/job:w/replica:0/task:0/device:CPU:0"], "cpu")
    {0: 1, 1: 3}
    """
    need: dict[int, int] = {}
    for name in devices:
        p = parse_device(name)
        if p.kind == kind.upper():
            t = p.task or 0
            need[t] = max(need.get(t, 0), (p.index or 0) + 1)
    return dict(sorted(need.items()))


def same_device(a: str, b: str) -> bool:
    """Whether two device names denote the same device (missing fields default to job localhost, task 0).

    >>> same_device("/job:localhost/replica:0/task:0/device:CPU:1", "/device:CPU:1")
    True
    """
    pa, pb = parse_device(a), parse_device(b)
    if (pa.kind, pa.index or 0, pa.task or 0, pa.replica or 0) != (pb.kind, pb.index or 0, pb.task or 0,
                                                                   pb.replica or 0):
        return False
    return pa.job is None or pb.job is None or pa.job == pb.job
