"""One task of a TensorFlow cluster: a ``tf.distribute.Server`` in a process of its own.

``pardnn serve`` runs this on each host of a real cluster; `pardnn.backend.tf_cluster`
starts one per task as a subprocess (``python -m pardnn.backend.tf_server``) for
``pardnn run --local-cluster N``. The process

1. with ``--cores``, pins itself to those CPU cores (``os.sched_setaffinity``)
   before TensorFlow starts, and with ``--intra-op-threads`` /
   ``--inter-op-threads`` sizes TensorFlow's thread pools, so that tasks on
   one host are devices that really run side by side;
   splits the host CPU into ``--cpus`` logical devices before TensorFlow
   initialises (and asks the server for them with ``device_count``);
2. starts the server for ``--task`` of ``--job`` in the cluster spec;
3. prints ``READY grpc://host:port`` (or ``FAILED <reason>``) on stdout;
4. serves until killed, until ``--lifetime`` seconds have passed, or, with
   ``--parent-pid``, until that process is gone. A server that cannot stop
   its gRPC threads cleanly exits with ``os._exit``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path


def _spec(text: str) -> dict:
    p = Path(text)
    raw = p.read_text(encoding="utf-8") if not text.lstrip().startswith("{") and p.exists() else text
    d = json.loads(raw)
    return d.get("cluster", d) if isinstance(d, dict) else d


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pardnn.backend.tf_server", description=__doc__.splitlines()[0])
    ap.add_argument("--cluster-spec", required=True, help="JSON text or file: {\"worker\": [\"host:port\", ...]}")
    ap.add_argument("--job", default="worker")
    ap.add_argument("--task", type=int, required=True)
    ap.add_argument("--cpus", type=int, default=0, help="logical CPU devices of this task (0: one)")
    ap.add_argument("--cores", default="", help="pin this task to these CPU cores, e.g. 0 or 2,3 (default: all)")
    ap.add_argument("--intra-op-threads", type=int, default=0, help="threads per op (0: TensorFlow's default)")
    ap.add_argument("--inter-op-threads", type=int, default=0, help="ops run at once (0: TensorFlow's default)")
    ap.add_argument("--lifetime", type=float, default=0.0, help="exit after this many seconds (0: never)")
    ap.add_argument("--parent-pid", type=int, default=0, help="exit when this process is gone")
    return ap


def parse_cores(text: str) -> tuple[int, ...]:
    """``"0,2-3"`` -> ``(0, 2, 3)``; raises ValueError on anything else.

    >>> parse_cores("0,2-3"), parse_cores("")
    ((0, 2, 3), ())
    """
    out: list[int] = []
    if not text.strip():
        return ()
    for part in (p.strip() for p in text.split(",")):   # an empty part ("0,,1", "0,") is refused, as "١" is
        m = _CORE_RANGE.fullmatch(part)
        if m is None or (m[2] is not None and int(m[2]) < int(m[1])):
            raise ValueError(f"cores {text!r}: expected a list such as 0,2-3")
        lo, hi = int(m[1]), int(m[2] or m[1])
        if hi > MAX_CORE:       # before the range is made: "0-9999999999" ran out of memory
            raise ValueError(f"cores {text!r}: core {hi} is past any machine's (at most {MAX_CORE})")
        out.extend(range(lo, hi + 1))
    return tuple(sorted(set(out)))


_CORE_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
MAX_CORE = 65_535
"""The largest core index `parse_cores` takes (Linux builds for at most 8,192 CPUs); which cores this process
may use is checked after."""


def serve(cluster_spec: dict, job: str, task: int, *, cpus: int = 0, lifetime_s: float = 0.0,
          parent_pid: int = 0, cores: tuple[int, ...] = (), intra_op_threads: int = 0, inter_op_threads: int = 0,
          out=sys.stdout) -> int:
    """Start the server and block (see the module docstring); the exit status."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if cores:
        try:
            os.sched_setaffinity(0, cores)
        except (OSError, ValueError) as exc:
            print(f"FAILED cannot pin task {task} to cores {','.join(map(str, cores))}: {exc}", file=out, flush=True)
            return 5
    try:
        import tensorflow as tf
    except ImportError as exc:
        print(f"FAILED TensorFlow is not installed ({exc})", file=out, flush=True)
        return 6
    try:
        if cpus > 1:
            phys = tf.config.list_physical_devices("CPU")
            tf.config.set_logical_device_configuration(phys[0], [tf.config.LogicalDeviceConfiguration()] * cpus)
        config = tf.compat.v1.ConfigProto()
        if cpus > 0:
            config.device_count["CPU"] = cpus
        config.gpu_options.allow_growth = True
        config.intra_op_parallelism_threads = intra_op_threads
        config.inter_op_parallelism_threads = inter_op_threads
        server = tf.distribute.Server(tf.train.ClusterSpec(cluster_spec), job_name=job, task_index=task,
                                      config=config, start=True)
    except Exception as exc:   # any failure to start is reported as one line to the parent
        text = str(exc).strip().splitlines()
        print(f"FAILED {text[0] if text else type(exc).__name__}", file=out, flush=True)
        return 5
    print(f"READY {server.target}", file=out, flush=True)
    start = time.monotonic()
    while True:
        time.sleep(0.2)
        if lifetime_s and time.monotonic() - start > lifetime_s:
            break
        if parent_pid and os.getppid() != parent_pid:   # the parent is gone: we were re-parented
            break
    return 0


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        spec = _spec(args.cluster_spec)
    except (OSError, ValueError) as exc:
        print(f"FAILED cannot read the cluster spec: {exc}", flush=True)
        os._exit(3)
    try:
        cores = parse_cores(args.cores)
    except ValueError as exc:
        print(f"FAILED {exc}", flush=True)
        os._exit(3)
    code = serve(spec, args.job, args.task, cpus=args.cpus, lifetime_s=args.lifetime, parent_pid=args.parent_pid,
                 cores=cores, intra_op_threads=args.intra_op_threads, inter_op_threads=args.inter_op_threads)
    sys.stdout.flush()
    os._exit(code)   # the gRPC server's threads never stop by themselves


if __name__ == "__main__":
    main()
