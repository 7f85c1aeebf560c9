"""The figures of a report as plain values, computed from the simulator's schedule.

Nothing here draws or formats: `summarize` gathers what the summary table
shows, `comm_matrix` counts the transfers between each pair of devices, and
`top_live` names the largest allocations at a device's peak. The HTML and
the figures are built from these values, so a test can compare the page
with the simulator number by number.

>>> from pardnn.ir import GraphBuilder
>>> from pardnn.cluster import Cluster
>>> from pardnn.machine import simulate
>>> b = GraphBuilder("chain")
>>> for n, t in [("a", 4), ("b", 2), ("c", 2)]:
...     _ = b.add_node(n, time_us=t, output_bytes=100)
>>> b.add_edge("a", "b"); b.add_edge("a", "c")
>>> g = b.build()
>>> c = Cluster.homogeneous(2, latency_us=1.0, bandwidth_bytes_per_us=100.0)
>>> s = simulate(g, c, [0, 0, 1])
>>> summ = summarize(g, c, s)
>>> summ.makespan_us, summ.serial_us, summ.speedup, summ.transfers, summ.bytes_moved
(8.0, 8.0, 1.0, 1, 100)
>>> comm_matrix(s)[0].tolist()
[[0, 100], [0, 0]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..bounds import makespan_lower_bound
from ..cluster import Cluster, Device
from ..ir import OpGraph
from ..machine import RECEIVED, TEMP, Schedule, describe_item, simulate
from ..pipeline import PassTiming
from ..placement import Placement

_KINDS = {RECEIVED: "received copy", TEMP: "temp"}


@dataclass(frozen=True)
class DeviceSummary:
    """One device's line of the summary table."""

    index: int
    name: str
    ops: int
    compute_us: float          # busy time (sum of its ops' durations)
    peak_bytes: int
    peak_time_us: float
    capacity_bytes: float      # inf = unlimited
    persistent_bytes: int
    speed: float

    @property
    def use(self) -> float | None:
        """Peak over capacity, or None when the capacity is unlimited."""
        return _ratio(self.peak_bytes, self.capacity_bytes, math.isfinite(self.capacity_bytes))


def _ratio(num: float, den: float, defined: bool) -> float | None:
    """``num / den``, or None when the ratio is not defined (or ``den`` is not positive)."""
    return num / den if defined and den > 0 else None


@dataclass(frozen=True)
class Summary:
    """The summary table of a report."""

    graph: str
    nodes: int
    edges: int
    method: str | None
    makespan_us: float
    serial_us: float                 # the whole step on `single_device` (or the fastest device if none fits)
    single_device_peak_bytes: int    # SPEC §1.1 rule 10
    single_device: int | None        # the device one-device runs are measured on; None: the graph fits none
    transfers: int
    bytes_moved: int
    feasible: bool
    violations: tuple[str, ...]
    devices: tuple[DeviceSummary, ...]
    lower_bound_us: float            # `pardnn.bounds.makespan_lower_bound`: no placement is faster
    pass_timings: tuple[PassTiming, ...] = ()

    @property
    def fits_one_device(self) -> bool:
        return self.single_device is not None

    @property
    def speedup(self) -> float | None:
        """One device's step time over the placed step's, or None when the graph fits no single device; 1 for a
        step of no compute (as `pardnn partition` prints it)."""
        if self.single_device is not None and self.makespan_us <= 0 and self.serial_us <= 0:
            return 1.0
        return _ratio(self.serial_us, self.makespan_us, self.single_device is not None)


@dataclass(frozen=True)
class LiveTensor:
    """One allocation alive at a device's peak."""

    name: str
    bytes: int
    kind: str            # "output", "received copy" or "temp"
    alloc_us: float
    free_us: float


def single_device_reference(g: OpGraph, cluster: Cluster) -> tuple[int | None, float, int]:
    """``(device, step time, peak)`` of the whole graph on one device of ``cluster``.

    The device is the fastest one whose capacity holds the single-device peak
    (lowest index on ties), or None when none does; the step time is then
    given for the fastest device anyway. Both figures come from the
    simulator, pins ignored (SPEC §1.1 rule 10).
    """
    speed = cluster.speed
    cap = cluster.capacity
    fastest = int(np.argmax(speed))
    one = Cluster((Device(cluster.devices[fastest].name, None, float(speed[fastest])),))
    s1 = simulate(g, one, np.zeros(g.num_nodes, dtype=np.int64))
    peak = int(s1.peak_bytes[0]) if g.num_nodes else 0
    fits = np.flatnonzero(cap >= peak)
    if fits.size == 0:
        return None, float(s1.makespan_us), peak
    best = int(fits[np.argmax(speed[fits])])
    if speed[best] == speed[fastest]:
        return best, float(s1.makespan_us), peak
    other = Cluster((Device(cluster.devices[best].name, None, float(speed[best])),))
    return best, float(simulate(g, other, np.zeros(g.num_nodes, dtype=np.int64), memory=False).makespan_us), peak


def pass_timings_of(timings: Sequence[PassTiming] | None, placement: Placement | None) -> tuple[PassTiming, ...]:
    """The pass timings given, else those a placement file recorded (``pass_seconds``), else none."""
    if timings:
        return tuple(timings)
    recorded = (placement.meta.get("pass_seconds") if placement is not None else None) or {}
    if not isinstance(recorded, dict):
        return ()
    return tuple(PassTiming(str(k), float(v), None) for k, v in recorded.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool))


def summarize(g: OpGraph, cluster: Cluster, schedule: Schedule, *, placement: Placement | None = None,
              timings: Sequence[PassTiming] | None = None) -> Summary:
    """Every figure of the summary table, straight from ``schedule`` and the simulator."""
    s = schedule
    K = cluster.num_devices
    counts = np.bincount(s.device, minlength=K)
    load = s.compute_load_us()
    devices = tuple(DeviceSummary(d, cluster.devices[d].name, int(counts[d]), float(load[d]), int(s.peak_bytes[d]),
                                  float(s.peak_time_us[d]), float(cluster.capacity[d]), int(s.persistent_bytes[d]),
                                  float(cluster.speed[d])) for d in range(K))
    single, serial, peak1 = single_device_reference(g, cluster)
    method = placement.meta.get("method") if placement is not None else None
    return Summary(g.name, g.num_nodes, g.num_edges, method if isinstance(method, str) else None,
                   float(s.makespan_us), serial, peak1, single, len(s.transfers), s.bytes_moved(), s.feasible,
                   tuple(v.message for v in s.violations), devices, makespan_lower_bound(g, cluster).value_us,
                   pass_timings_of(timings, placement))


def comm_matrix(schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes, count)``: K x K matrices of the transfers from row device to column device."""
    K = schedule.num_devices
    t = schedule.transfers
    nbytes = np.zeros((K, K), dtype=np.int64)
    count = np.zeros((K, K), dtype=np.int64)
    np.add.at(nbytes, (t.src_dev, t.dst_dev), t.bytes)
    np.add.at(count, (t.src_dev, t.dst_dev), 1)
    return nbytes, count


def top_live(g: OpGraph, schedule: Schedule, device: int, n: int = 8) -> tuple[list[LiveTensor], int, int]:
    """The ``n`` largest allocations alive on ``device`` at its peak, how many there are and their bytes.

    Largest first, ties by name. Persistent bytes are not items; the peak is
    ``persistent_bytes[device]`` plus the returned total.
    """
    items = schedule.live_at(device, float(schedule.peak_time_us[device]))
    total = int(items.bytes.sum())
    if items.bytes.size > n:      # describe only the candidates: the n largest and any tied with the n-th
        cut = np.partition(items.bytes, items.bytes.size - n)[items.bytes.size - n]
        candidates = np.flatnonzero(items.bytes >= cut)
    else:
        candidates = np.arange(items.bytes.size)
    described = [(int(items.bytes[i]), describe_item(g, schedule, items, int(i)), int(i)) for i in candidates]
    described.sort(key=lambda x: (-x[0], x[1]))
    out = []
    for nbytes, name, i in described[:n]:
        out.append(LiveTensor(name, nbytes, _KINDS.get(int(items.kind[i]), "output"), float(items.alloc_us[i]),
                              float(items.free_us[i])))
    return out, int(items.bytes.size), total

