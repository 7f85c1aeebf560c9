"""From timings to a `pardnn.cluster`: least-squares link fits and device speeds (numpy only).

``pardnn calibrate`` (`pardnn.backend.tf_calibrate`) times a fixed set of ops on each device and transfers
of several sizes on each link; this module turns those timings into the machine model's parameters:

* a device's **speed** is device 0's time for the op set over its own (SPEC §1: an op of time ``t`` takes
  ``t / speed``), so device 0 has speed 1;
* a link's **latency and bandwidth** are the non-negative least-squares fit of
  ``time = overhead + count * (latency + bytes / bandwidth)`` to steps that each move ``count`` tensors of
  ``bytes`` (`fit_link`). A fitted slope of 0 means the sizes tried moved faster than the timer could tell
  (logical CPU devices in one process pass tensors by reference): the bandwidth is then `FAST_BANDWIDTH`;
* a link between **CPU devices of two different tasks** has no copy engine: gRPC serialises, copies and
  deserialises each tensor on the two tasks' cores, the cores that run the ops. Its fitted time, measured
  with both tasks idle, is that CPU work, so the link is written as a transfer that runs half of it on each
  end (``transfer_cpu_us`` = latency / 2, ``transfer_cpu_bytes_per_us`` = 2 x bandwidth) over a link that
  itself costs nothing (latency 0, `FAST_BANDWIDTH`): an idle transfer is predicted as measured, and a busy
  core delays it (docs/machine-model.md, "Transfers that run on the devices") (`on_cpu_link`).

>>> f = fit_link([0, 1000, 2000], [30.0, 40.0, 50.0])
>>> round(f.latency_us, 6), round(f.bandwidth_bytes_per_us, 6), f.max_residual_us < 1e-9
(30.0, 100.0, True)
>>> f = fit_link([100, 100, 10000, 10000], [80.0, 260.0, 179.0, 656.0], counts=[1, 4, 1, 4])
>>> round(f.overhead_us, 3), round(f.latency_us, 3), round(f.bandwidth_bytes_per_us, 3)
(20.0, 59.0, 100.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .cluster import Cluster, Device, Link

FAST_BANDWIDTH = 1e9
"""Bytes per microsecond given to a link whose fitted slope is not positive (1 PB/s: free)."""


RELATIVE_FLOOR = 0.02
"""`fit_link` weighs each time by its inverse, but no time below this fraction of the largest counts more."""


@dataclass(frozen=True)
class LinkFit:
    """``time = overhead + count * (latency + bytes / bandwidth)`` fitted to one link's timed steps.

    Each measurement moves ``count`` tensors of ``bytes`` each in one step. ``overhead`` is what a step pays
    once for using the link at all (in a cluster: the extra task's part of the step), apart from the
    per-transfer ``latency`` the machine model charges every tensor.
    """

    latency_us: float
    bandwidth_bytes_per_us: float
    overhead_us: float
    sizes: tuple[int, ...]
    counts: tuple[int, ...]
    times_us: tuple[float, ...]
    residuals_us: tuple[float, ...]
    """Measured minus fitted, per measurement."""

    @property
    def slope_positive(self) -> bool:
        """False when the bytes cost nothing measurable (the bandwidth is then `FAST_BANDWIDTH`)."""
        return self.bandwidth_bytes_per_us < FAST_BANDWIDTH

    @property
    def max_residual_us(self) -> float:
        return float(max((abs(r) for r in self.residuals_us), default=0.0))

    @property
    def relative_residual(self) -> float:
        """The largest residual over the largest measured time (0 when nothing took time)."""
        top = max((abs(t) for t in self.times_us), default=0.0)
        return self.max_residual_us / top if top > 0 else 0.0

    def to_dict(self) -> dict:
        return {"latency_us": self.latency_us, "bandwidth_bytes_per_us": self.bandwidth_bytes_per_us,
                "overhead_us": self.overhead_us, "sizes": list(self.sizes), "counts": list(self.counts),
                "times_us": list(self.times_us), "residuals_us": list(self.residuals_us)}


def fit_link(sizes: Sequence[float], times_us: Sequence[float], counts: Sequence[int] | None = None) -> LinkFit:
    """Non-negative least squares of ``time = overhead + count * latency + count * bytes / bandwidth``, each
    measurement weighed by the inverse of its time (`RELATIVE_FLOOR`).

    ``counts`` (default: all 1) is how many tensors of ``sizes[i]`` bytes each measurement moved. With a
    single count, overhead and latency cannot be told apart and all of the intercept is latency. Needs at
    least two distinct sizes. A slope of 0 (the bytes cost nothing measurable) gives `FAST_BANDWIDTH`.
    """
    from scipy.optimize import nnls

    x = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(times_us, dtype=np.float64)
    c = np.ones_like(x) if counts is None else np.asarray(counts, dtype=np.float64)
    if x.shape != y.shape or x.shape != c.shape or x.ndim != 1:
        raise ValueError("sizes, counts and times must be lists of the same length")
    if np.unique(x).size < 2:
        raise ValueError("a link fit needs transfers of at least two sizes")
    if not (np.all(np.isfinite(y)) and np.all(c >= 1)):
        raise ValueError("transfer times must be finite and counts at least 1")
    two_counts = np.unique(c).size > 1
    scale = max(float(x.max()), 1.0)          # keep the columns' magnitudes comparable for the solver
    cols = [c, c * x / scale] if not two_counts else [np.ones_like(x), c, c * x / scale]
    # relative least squares: times span orders of magnitude, and absolute errors would let the largest
    # transfers' noise decide the per-transfer latency that small transfers measure
    w = 1.0 / np.maximum(np.abs(y), RELATIVE_FLOOR * max(float(np.abs(y).max()), 1e-9))
    coef, _ = nnls(np.stack(cols, axis=1) * w[:, None], y * w)
    if two_counts:
        overhead, latency, slope = coef
    else:
        overhead, (latency, slope) = 0.0, coef
    slope /= scale
    bandwidth = 1.0 / slope if slope > 1.0 / FAST_BANDWIDTH else FAST_BANDWIDTH
    fitted = overhead + c * latency + c * x * slope
    return LinkFit(float(latency), float(bandwidth), float(overhead), tuple(int(s) for s in x),
                   tuple(int(k) for k in c), tuple(float(t) for t in y), tuple(float(r) for r in y - fitted))


def speeds(times_us: Sequence[float]) -> list[float]:
    """Each device's speed relative to device 0, from its time for the same op set.

    >>> speeds([100.0, 50.0, 200.0])
    [1.0, 2.0, 0.5]
    """
    t = [float(x) for x in times_us]
    if not t or any(not (x > 0) for x in t):
        raise ValueError("every device's op-set time must be positive")
    return [t[0] / x for x in t]


SAME_SPEED = 0.05
"""Devices whose measured speed is within this fraction of device 0's are given device 0's speed."""


@dataclass(frozen=True)
class SpeedFit:
    """Each device's speed from several rounds of timing the same op set on every device in turn."""

    speeds: tuple[float, ...]
    """What the cluster is given: the measured speed, or exactly 1 where it is the same as device 0's
    (`same`)."""
    measured: tuple[float, ...]
    """The median over the rounds of device 0's time over the device's own."""
    noise: tuple[float, ...]
    """The largest distance of a round's ratio from ``measured``."""
    same: tuple[bool, ...]
    """Whether the device is as fast as device 0 within the noise (or `SAME_SPEED`)."""


def fit_speeds(rounds_us: Sequence[Sequence[float]], tolerance: float = SAME_SPEED) -> SpeedFit:
    """Speeds from ``rounds_us[r][d]``, device ``d``'s op-set time in round ``r`` (rounds interleave the
    devices, so a machine that slows down for a while slows every device's round alike).

    A device within ``max(tolerance, its rounds' spread)`` of device 0 is given speed 1: on a busy host two
    identical devices measure a few percent apart from run to run, and a placement that favours one of
    them for it gains nothing real (measured: two pinned CPU tasks calibrated at 1.000 and 1.071; the
    partitioner then put a whole ResNet on the "faster" one, which ran it no faster).

    >>> f = fit_speeds([[100.0, 95.0], [100.0, 104.0], [100.0, 98.0]])
    >>> f.speeds, f.same
    ((1.0, 1.0), (True, True))
    >>> f = fit_speeds([[100.0, 50.0], [102.0, 50.0], [98.0, 51.0]])
    >>> [round(x, 3) for x in f.speeds], f.same
    ([1.0, 2.0], (True, False))
    """
    t = np.asarray(rounds_us, dtype=np.float64)
    if t.ndim != 2 or t.shape[0] < 1 or t.shape[1] < 1 or not (t > 0).all() or not np.isfinite(t).all():
        raise ValueError("every device's op-set time must be a positive number in every round")
    ratio = t[:, :1] / t
    med = np.median(ratio, axis=0)
    noise = np.abs(ratio - med).max(axis=0)
    same = np.abs(med - 1.0) <= np.maximum(noise, tolerance)
    same[0] = True
    out = np.where(same, 1.0, med)
    return SpeedFit(tuple(float(x) for x in out), tuple(float(x) for x in med), tuple(float(x) for x in noise),
                    tuple(bool(x) for x in same))


def _task(name: str) -> str | None:
    """The ``/job:../replica:../task:..`` part of a full TensorFlow device name (None for a local name)."""
    parts = [p for p in name.split("/") if p.startswith(("job:", "replica:", "task:"))]
    return "/".join(parts) if any(p.startswith("task:") for p in parts) else None


def on_cpu_link(a: str, b: str) -> bool:
    """Whether a transfer between devices ``a`` and ``b`` (TensorFlow names) runs on their cores: both are
    CPUs, of two different tasks (gRPC between processes).

    >>> on_cpu_link("/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0")
    True
    >>> on_cpu_link("/device:CPU:0", "/device:CPU:1")
    False
    >>> on_cpu_link("/job:w/task:0/device:GPU:0", "/job:w/task:1/device:GPU:0")
    False
    """
    cpu = all("CPU:" in n.upper().rpartition("/")[2] for n in (a, b))
    ta, tb = _task(a), _task(b)
    return cpu and ta is not None and tb is not None and ta != tb


def link_of(fit: LinkFit, cpu: bool, cpu_fit: LinkFit | None = None) -> Link:
    """The modelled link of a fit: as fitted, or on a CPU link (`on_cpu_link`) a transfer that runs on both
    ends over a free link: each end's CPU as ``cpu_fit`` measured it (per transfer and end), else half the
    fitted wall time on each end.

    >>> link = link_of(fit_link([0, 1000], [30.0, 40.0]), True)
    >>> link.latency_us, link.bandwidth_bytes_per_us
    (0.0, 1000000000.0)
    >>> round(link.transfer_cpu_us, 6), round(link.transfer_cpu_bytes_per_us, 6)
    (15.0, 200.0)
    """
    if not cpu:
        return Link(fit.latency_us, fit.bandwidth_bytes_per_us)
    if cpu_fit is not None:
        per_byte = cpu_fit.bandwidth_bytes_per_us if cpu_fit.slope_positive else None
        return Link(0.0, FAST_BANDWIDTH, cpu_fit.latency_us, per_byte)
    per_byte = 2.0 * fit.bandwidth_bytes_per_us if fit.slope_positive else None
    return Link(0.0, FAST_BANDWIDTH, fit.latency_us / 2.0, per_byte)


def calibrated_cluster(names: Sequence[str], device_times_us: Sequence[float],
                       links: Sequence[Sequence[LinkFit | None]], memory_bytes: Sequence[int | None] | None = None,
                       speed: Sequence[float] | None = None,
                       cpu_links: Sequence[Sequence[LinkFit | None]] | None = None) -> Cluster:
    """The cluster: measured speeds (``speed``, else `speeds` of the times), a link per fitted ordered pair
    (`link_of`), and the links' medians as the cluster-wide values (used where a pair has no fit)."""
    K = len(names)
    mem = list(memory_bytes) if memory_bytes is not None else [None] * K
    devs = tuple(Device(n, m, s) for n, m, s in zip(names, mem, speed if speed is not None
                                                      else speeds(device_times_us)))
    matrix = tuple(tuple(None if (a == b or links[a][b] is None) else
                         link_of(links[a][b], on_cpu_link(names[a], names[b]),
                                 cpu_links[a][b] if cpu_links is not None else None)
                         for b in range(K)) for a in range(K))
    made = [link for row in matrix for link in row if link is not None]
    if not made:
        return Cluster(devs)
    lat = float(np.median([x.latency_us for x in made]))
    bw = float(np.median([x.bandwidth_bytes_per_us for x in made]))
    cpu = float(np.median([x.transfer_cpu_us or 0.0 for x in made]))
    per_byte = [x.transfer_cpu_bytes_per_us for x in made if x.transfer_cpu_bytes_per_us is not None]
    return Cluster(devs, lat, bw, matrix, cpu, float(np.median(per_byte)) if per_byte else None)
