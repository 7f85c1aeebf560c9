"""TensorFlow clusters for a placed run: a user's cluster spec, or local servers for testing.

* `read_cluster_spec`: a JSON cluster spec, ``{"worker": ["host0:2222", "host1:2222"]}``,
  or a ``TF_CONFIG``-style ``{"cluster": {"worker": [...]}}``. One job; its
  tasks in order are the tasks the placement's devices are dealt to.
* `LocalCluster`: ``pardnn run --local-cluster N`` starts N servers
  (`pardnn.backend.tf_server`), each in its own process, on free
  ``127.0.0.1`` ports, loopback only; with a `Pinning` (``--pin``) each on
  cores of its own. Starting is bounded (``start_timeout_s``),
  each server exits by itself after ``lifetime_s`` or when its parent is gone,
  and `LocalCluster.close` (the context manager's exit) terminates them all,
  killing any that do not stop within seconds.
* `check_reachable`: every task of a user's cluster must accept a TCP
  connection, or the run stops with a `RuntimeFailure` naming the task.
* `cluster_devices`: the devices a session on task 0 sees, per task.
"""

from __future__ import annotations

import errno
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..errors import InputError, RuntimeFailure
from ..fileio import read_json


@dataclass(frozen=True)
class TFClusterSpec:
    """The tasks of one job of a TensorFlow cluster."""

    tasks: tuple[str, ...]
    """``host:port`` of each task, in task order."""
    job: str = "worker"
    source: str | None = field(default=None, compare=False)
    """The file it was read from, when it was (an error's hint names it)."""

    def to_dict(self) -> dict[str, list[str]]:
        return {self.job: list(self.tasks)}

    @property
    def target(self) -> str:
        """The session target of task 0 (where the step is run from)."""
        return f"grpc://{self.tasks[0]}"


def cluster_spec_from_dict(d, *, source: str | None = None) -> TFClusterSpec:
    """Check and build a spec (rules in the module docstring); ``source``: the file it was read from."""
    where = source or "cluster spec"
    if isinstance(d, dict) and isinstance(d.get("cluster"), dict):
        d = d["cluster"]
    if not isinstance(d, dict) or not d:
        raise InputError(f"{where}: expected a JSON object such as {{\"worker\": [\"host0:2222\", \"host1:2222\"]}}")
    if len(d) != 1:
        raise InputError(f"{where}: expected one job, got {', '.join(sorted(d))}; pardnn runs one task per host "
                         "in a single job")
    job, tasks = next(iter(d.items()))
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) and t for t in tasks):
        raise InputError(f"{where}: job {job!r} must list its tasks as \"host:port\" strings")
    for i, t in enumerate(tasks):
        host, sep, port = t.rpartition(":")
        if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise InputError(f"{where}: task address {t!r} is not host:port")
        if t in tasks[:i]:
            raise InputError(f"{where}: tasks {tasks.index(t)} and {i} of job {job!r} are both at {t}; each task "
                             "needs an address of its own")
    return TFClusterSpec(tuple(tasks), job, source)


def check_bindable(address: str, task: int) -> None:
    """Raise a `RuntimeFailure` when task ``task``'s server could not listen on ``address``'s port because
    something listens there already. TensorFlow's server binds the port on every interface with
    ``SO_REUSEADDR`` (so a port a closed server left in TIME_WAIT is free), whatever host the spec names (a
    NAT or public address need not be on an interface): the probe does the same. The server itself would
    only say that it did not start, after seconds of loading TensorFlow."""
    port = int(address.rpartition(":")[2])
    for family, anywhere in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((anywhere, port))
            return
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise RuntimeFailure(f"task {task} cannot serve at {address}: port {port} is in use (another "
                                     "server, or a task started twice?)") from None
            continue        # no IPv6 here (or no IPv4): try the other; neither says nothing


def read_cluster_spec(path: str | Path) -> TFClusterSpec:
    return cluster_spec_from_dict(read_json(path), source=str(path))


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports the OS reports free on ``host`` now."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def check_reachable(spec: TFClusterSpec, timeout_s: float = 5.0) -> None:
    """Raise `RuntimeFailure` for the first task that does not accept a TCP connection."""
    for i, addr in enumerate(spec.tasks):
        host, _, port = addr.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                pass
        except OSError as exc:
            raise RuntimeFailure(f"task {i} of job {spec.job!r} at {addr} is not reachable "
                                 f"({exc.strerror or exc}); start its server there with "
                                 f"`pardnn serve --cluster-spec {spec.source or 'SPEC'} --task {i}`") from None


def cluster_devices(spec: TFClusterSpec, timeout_s: float = 30.0) -> tuple[str, ...]:
    """Every device a session on task 0 sees (full names)."""
    from ..frontends.tensorflow._tf import config_pb2, tf

    config = config_pb2.ConfigProto(operation_timeout_in_ms=int(timeout_s * 1000))
    try:
        with tf.compat.v1.Session(spec.target, graph=tf.Graph(), config=config) as sess:
            return tuple(d.name for d in sess.list_devices())
    except tf.errors.OpError as exc:
        text = str(exc).strip().splitlines()
        raise RuntimeFailure(f"cannot list the devices of the cluster at {spec.target}: "
                             f"{text[0] if text else type(exc).__name__}") from None


def _reader(stream, lines: "queue.Queue[str | None]") -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


@dataclass(frozen=True)
class Pinning:
    """Each local task on CPU cores of its own, TensorFlow's thread pools sized to them.

    Unpinned, N servers on one host share its cores and time each other's ops: they are not N devices. Pinned
    (``os.sched_setaffinity`` in each server before TensorFlow starts), task ``i`` owns the ``i``-th block of
    ``cores_per_task`` cores of those this process may use, runs each op on ``intra_op_threads`` threads and keeps
    ``inter_op_threads`` ops in flight. Keep that at 2 or more: a task's received tensors and its local partition
    share the pool, and with one thread the partition blocks it (measured: no speedup at all).
    """

    cores_per_task: int = 0
    """0: this process's usable cores split evenly between the tasks."""
    intra_op_threads: int = 0
    """0: the task's cores."""
    inter_op_threads: int = 2

    def deal(self, tasks: int, available: Sequence[int] | None = None) -> list[tuple[int, ...]]:
        """The cores of each task; `InputError` when the host has too few.

        >>> Pinning().deal(2, [0, 1, 2, 3]), Pinning(cores_per_task=1).deal(2, [5, 7, 9])
        ([(0, 1), (2, 3)], [(5,), (7,)])
        """
        cores = sorted(os.sched_getaffinity(0) if available is None else available)
        per = self.cores_per_task or len(cores) // max(tasks, 1)
        if per < 1 or per * tasks > len(cores):
            raise InputError(f"pinning {tasks} task(s) to {max(per, 1)} core(s) each needs {tasks * max(per, 1)} "
                             f"cores; this process may use {len(cores)}")
        return [tuple(cores[i * per:(i + 1) * per]) for i in range(tasks)]

    def threads(self, cores: Sequence[int]) -> tuple[int, int]:
        """(intra-op, inter-op) threads for a task on ``cores``."""
        return self.intra_op_threads or len(cores), self.inter_op_threads


@dataclass
class _Task:
    index: int
    address: str
    process: subprocess.Popen
    lines: "queue.Queue[str | None]"
    log: Path


class LocalCluster:
    """``tasks`` TensorFlow servers on 127.0.0.1, one process each; use as a context manager.

    >>> with LocalCluster(2, cpus_per_task=2) as lc:      # doctest: +SKIP
    ...     lc.spec.target
    'grpc://127.0.0.1:40123'
    """

    def __init__(self, tasks: int, *, cpus_per_task: int = 1, start_timeout_s: float = 120.0,
                 lifetime_s: float = 1800.0, gpus_per_task: int = 0, job: str = "worker",
                 pinning: Pinning | None = None):
        if tasks < 1:
            raise ValueError("a cluster needs at least one task")
        self.pinning = pinning
        self.cores = pinning.deal(tasks) if pinning else None
        """The cores each task is pinned to (None: unpinned)."""
        self.num_tasks = tasks
        self.cpus_per_task = cpus_per_task
        self.gpus_per_task = gpus_per_task
        self.start_timeout_s = start_timeout_s
        self.lifetime_s = lifetime_s
        self.job = job
        self.spec: TFClusterSpec | None = None
        self._tasks: list[_Task] = []
        self._dir: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def processes(self) -> list[subprocess.Popen]:
        return [t.process for t in self._tasks]

    def start(self) -> TFClusterSpec:
        """Start every server and wait until each says it is ready; on any failure stop them all."""
        try:
            return self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> TFClusterSpec:
        self._dir = tempfile.TemporaryDirectory(prefix="pardnn-cluster-")
        ports = free_ports(self.num_tasks)
        spec = TFClusterSpec(tuple(f"127.0.0.1:{p}" for p in ports), self.job)
        spec_text = json.dumps(spec.to_dict())
        for i, addr in enumerate(spec.tasks):
            env = dict(os.environ)
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            if self.gpus_per_task:
                first = i * self.gpus_per_task
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(first + k) for k in range(self.gpus_per_task))
            else:
                env["CUDA_VISIBLE_DEVICES"] = ""
            log = Path(self._dir.name) / f"task{i}.log"
            cmd = [sys.executable, "-m", "pardnn.backend.tf_server", "--cluster-spec", spec_text, "--job", self.job,
                   "--task", str(i), "--cpus", str(self.cpus_per_task), "--lifetime", str(self.lifetime_s),
                   "--parent-pid", str(os.getpid())]
            if self.pinning and self.cores:
                intra, inter = self.pinning.threads(self.cores[i])
                cmd += ["--cores", ",".join(map(str, self.cores[i])), "--intra-op-threads", str(intra),
                        "--inter-op-threads", str(inter)]
            with open(log, "wb") as err:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                        text=True, env=env, start_new_session=True)
            lines: "queue.Queue[str | None]" = queue.Queue()
            threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
            self._tasks.append(_Task(i, addr, proc, lines, log))
        deadline = time.monotonic() + self.start_timeout_s
        for t in self._tasks:
            self._wait_ready(t, deadline)
        self.spec = spec
        return spec

    def _wait_ready(self, t: _Task, deadline: float) -> None:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeFailure(f"the server of task {t.index} on {t.address} did not start within "
                                     f"{self.start_timeout_s:g} s")
            try:
                line = t.lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if line is None:
                t.process.wait(timeout=5)
                raise RuntimeFailure(f"the server of task {t.index} on {t.address} did not start (exit status "
                                     f"{t.process.returncode}){_tail(t.log)}")
            if line.startswith("READY"):
                return
            if line.startswith("FAILED"):
                raise RuntimeFailure(f"the server of task {t.index} on {t.address} did not start: "
                                     f"{line[len('FAILED'):].strip()}")

    def close(self) -> None:
        """Stop every server: terminate, wait up to 5 s, then kill."""
        for t in self._tasks:
            if t.process.poll() is None:
                t.process.terminate()
        for t in self._tasks:
            try:
                t.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                t.process.kill()
                t.process.wait(timeout=5)
            if t.process.stdout is not None:
                t.process.stdout.close()
        self._tasks = [t for t in self._tasks if t.process.poll() is None]
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


def _tail(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return f": {lines[-1].strip()[:300]}" if lines else ""


def devices_per_task(names: Sequence[str], kind: str) -> tuple[int, ...]:
    """Count the ``kind`` devices of each task among full device names (tasks without any count 0)."""
    from .tf_devices import parse_device

    counts: dict[int, int] = {}
    tasks = 0
    for n in names:
        p = parse_device(n)
        t = p.task or 0
        tasks = max(tasks, t + 1)
        if p.kind == kind.upper():
            counts[t] = counts.get(t, 0) + 1
    return tuple(counts.get(t, 0) for t in range(tasks))
