"""``pardnn calibrate``: measure a TensorFlow cluster's devices and links (needs TensorFlow).

Everything runs in ``tf.compat.v1.Session`` steps on the devices a placed run would use (this host's GPUs or
logical CPUs, or a cluster's tasks; `pardnn.backend.tf_devices`), with grappler off as in ``pardnn run``:

* **device speed**: a fixed op set (four chained 512 x 512 matmuls, a 3 x 3 convolution over 4 x 32 x 32 x 16,
  element-wise ops), its inputs made on the device, timed on each device; the median of ``repeats`` steps
  after a warm-up, less the median of a one-op step on the same device (what running anything there costs:
  in a cluster, reaching the task) (`OP_SET`). ``rounds`` rounds take every device in turn; a device as fast
  as device 0 within the rounds' spread or 5% gets speed 1 (`pardnn.calibration.fit_speeds`);
* **links**: for each ordered pair of devices (a, b) and each size, a step in which ``count`` tensors of that
  size, read from variables on a, are each sliced on b, against the same step with the slices on a. The
  difference of the two medians is what the transfers cost. Counts 1 and 4 separate a step's one-off cost of
  using the link from the per-transfer latency (`pardnn.calibration.fit_link`);
* **the CPU a transfer takes** (a local cluster's CPU tasks, where ``cpu_seconds`` can read each task's
  process): the same steps, each task's CPU time (every thread of its process, from
  ``/proc/PID/task/*/schedstat``) against the local step's, per transfer and end; fitted like the link. gRPC
  between CPU tasks runs on the cores that compute, and the wall time of idle steps shows only a fraction
  of it: measured on two pinned tasks, 70 us and 1.7 GB/s of CPU on each end, where the wall-time fit gave
  16 us and 2.7 GB/s (`pardnn.calibration.link_of`).

`calibrate` returns a `Calibration`: the times, the fits and the `pardnn.cluster.Cluster` they give.
"""

from __future__ import annotations

import glob
import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ..calibration import LinkFit, SpeedFit, calibrated_cluster, fit_link, fit_speeds, on_cpu_link
from ..cluster import Cluster
from ..errors import RuntimeFailure
from ..frontends.tensorflow._tf import tf
from .tf_run import op_failure, open_session, session_config

DEFAULT_SIZES = (4, 4 << 10, 256 << 10, 2 << 20, 8 << 20)
COUNTS = (1, 4)
CPU_REPEATS = 3
"""The CPU of a transfer is read over this many times ``repeats`` steps (the process counters are coarser than
the wall clock)."""
OP_SET = "4 chained 512x512 matmuls, a 3x3 conv over 4x32x32x16, relu/tanh reductions"


@dataclass(frozen=True)
class Calibration:
    devices: tuple[str, ...]
    """The TensorFlow devices measured, in cluster order."""
    device_times_us: tuple[float, ...]
    """Median time of the op set on each device, less that of a one-op step there (the median over the
    rounds)."""
    links: tuple[tuple[LinkFit | None, ...], ...]
    """The fit of each ordered pair (None on the diagonal)."""
    cluster: Cluster
    seconds: float
    speed_fit: SpeedFit | None = None
    """The speeds as measured, their noise, and which devices count as device 0's speed."""
    cpu_links: tuple[tuple[LinkFit | None, ...], ...] | None = None
    """Per ordered pair, the fit of the CPU time one end spends per transfer (the mean of both ends),
    where it was measured; else None."""

    def to_dict(self) -> dict:
        sf = self.speed_fit
        return {"devices": list(self.devices), "op_set": OP_SET,
                "device_times_us": list(self.device_times_us),
                "speed": [d.speed for d in self.cluster.devices],
                "measured_speed": list(sf.measured) if sf else None,
                "speed_noise": list(sf.noise) if sf else None,
                "links": [[None if f is None else f.to_dict() for f in row] for row in self.links],
                "cpu_links": None if self.cpu_links is None else
                [[None if f is None else f.to_dict() for f in row] for row in self.cpu_links],
                "cluster": self.cluster.to_dict(), "seconds": round(self.seconds, 2)}


def _median_us(sess, fetch, repeats: int) -> float:
    sess.run(fetch)                       # warm-up: kernels, rendezvous, allocator
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sess.run(fetch)
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def process_cpu_s(pid: int) -> float:
    """CPU seconds every thread of process ``pid`` has run (``/proc/PID/task/*/schedstat``, nanoseconds; the
    clock-tick counts of ``/proc/PID/stat`` where schedstat is missing)."""
    total, seen = 0, False
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
            seen = True
        except (OSError, ValueError, IndexError):
            continue
    if seen:
        return total / 1e9
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_per_step_us(sess, fetch, repeats: int, cpu_seconds: Callable[[], Sequence[float]], a: int, b: int
                     ) -> tuple[float, float]:
    """Devices ``a`` and ``b``'s CPU microseconds per step of ``fetch`` (after a warm-up)."""
    sess.run(fetch)
    before = cpu_seconds()
    for _ in range(repeats):
        sess.run(fetch)
    after = cpu_seconds()
    return ((after[a] - before[a]) * 1e6 / repeats, (after[b] - before[b]) * 1e6 / repeats)


def _op_set(device: str):
    with tf.device(device):
        a = tf.random.stateless_uniform([512, 512], seed=[1, 2])
        m = a
        for _ in range(4):
            m = tf.matmul(m, a) * (1.0 / 512)
        img = tf.random.stateless_uniform([4, 32, 32, 16], seed=[3, 4])
        k = tf.random.stateless_uniform([3, 3, 16, 16], seed=[5, 6])
        c = tf.nn.conv2d(img, k, 1, "SAME")
        return (tf.reduce_sum(tf.nn.relu(m)) + tf.reduce_sum(tf.tanh(c))).op


def _empty_step(device: str):
    with tf.device(device):
        return tf.random.stateless_uniform([1], seed=[7, 8]).op


def calibrate(devices: Sequence[str], *, session_target: str = "", config=None,
              sizes: Sequence[int] = DEFAULT_SIZES, repeats: int = 7, rounds: int = 5,
              memory_bytes: Sequence[int | None] | None = None,
              progress: Callable[[str], None] | None = None,
              cpu_seconds: Callable[[], Sequence[float]] | None = None) -> Calibration:
    """Measure ``devices`` (TensorFlow device names, which the cluster's devices are named after) from a session
    on ``session_target`` (see the module docstring).

    ``cpu_seconds``: the CPU seconds each device's process has run so far, in ``devices`` order (a local
    cluster's server processes, `process_cpu_s`); with it, the CPU cost of transfers between CPU tasks is
    measured too.
    """
    K = len(devices)
    t_all = time.perf_counter()
    config = config or session_config()
    sizes = sorted({int(s) for s in sizes})
    if len(sizes) < 2:
        raise ValueError("calibrate needs at least two transfer sizes")
    note = progress or (lambda _msg: None)
    graph = tf.Graph()
    with graph.as_default():
        op_sets = [_op_set(d) for d in devices]
        empties = [_empty_step(d) for d in devices]
        pairs = [(a, b) for a in range(K) for b in range(K) if a != b]
        variables = {}                     # (device index, size, copy) -> variable, on every device a link leaves
        for a in sorted({a for a, _ in pairs}):
            with tf.device(devices[a]):
                for n in sizes:
                    for i in range(max(COUNTS)):
                        variables[(a, n, i)] = tf.compat.v1.get_variable(
                            f"calib_{a}_{n}_{i}", shape=[n // 4], dtype=tf.float32,
                            initializer=tf.compat.v1.zeros_initializer(), use_resource=True)

        def step(a: int, b: int, n: int, count: int):
            ends = []
            for i in range(count):
                with tf.device(devices[a]):
                    x = variables[(a, n, i)].read_value()
                with tf.device(devices[b]):
                    ends.append(tf.slice(x, [0], [1]).op)
            return tf.group(*ends)

        steps = {(a, b, n, c): (step(a, b, n, c), step(a, a, n, c)) for a, b in pairs for n in sizes for c in COUNTS}
        init = tf.compat.v1.global_variables_initializer()
    try:
        with open_session(session_target, graph=graph, config=config) as sess:
            sess.run(init)
            rounds_us = []
            for r in range(max(1, rounds)):
                note(f"timing the op set on every device, round {r + 1} of {max(1, rounds)}")
                rounds_us.append([_median_us(sess, op, repeats) - _median_us(sess, empty, repeats)
                                  for op, empty in zip(op_sets, empties)])
            dev_times = [statistics.median(col) for col in zip(*rounds_us)]
            links: list[list[LinkFit | None]] = [[None] * K for _ in range(K)]
            cpu_links: list[list[LinkFit | None]] = [[None] * K for _ in range(K)]
            for a, b in pairs:
                note(f"timing transfers {devices[a]} -> {devices[b]}")
                xs, cs, ts, us = [], [], [], []
                on_cpu = cpu_seconds is not None and on_cpu_link(devices[a], devices[b])
                for n in sizes:
                    for c in COUNTS:
                        cross, local = steps[(a, b, n, c)]
                        t_cross = _median_us(sess, cross, repeats)
                        t_local = _median_us(sess, local, repeats)
                        xs.append(n)
                        cs.append(c)
                        ts.append(max(t_cross - t_local, 0.0))
                        if on_cpu:
                            ca, cb = _cpu_per_step_us(sess, cross, CPU_REPEATS * repeats, cpu_seconds, a, b)
                            la, lb = _cpu_per_step_us(sess, local, CPU_REPEATS * repeats, cpu_seconds, a, b)
                            us.append(max(((ca - la) + (cb - lb)) / 2.0, 0.0))
                links[a][b] = fit_link(xs, ts, cs)
                if on_cpu:
                    cpu_links[a][b] = fit_link(xs, us, cs)
    except tf.errors.OpError as exc:
        raise op_failure(exc, "calibration") from None
    if any(not (t > 0) for row in rounds_us for t in row):
        raise RuntimeFailure("calibration: a device ran the op set in no measurable time")
    sf = fit_speeds(rounds_us)
    measured_cpu = any(f is not None for row in cpu_links for f in row)
    cluster = calibrated_cluster(list(devices), dev_times, links, memory_bytes, speed=sf.speeds,
                                 cpu_links=cpu_links if measured_cpu else None)
    return Calibration(tuple(devices), tuple(dev_times), tuple(tuple(r) for r in links), cluster,
                       time.perf_counter() - t_all, sf,
                       tuple(tuple(r) for r in cpu_links) if measured_cpu else None)
