"""Two pinned TensorFlow servers on this host are two devices: a measured speedup on two towers (issue 16).

A step of two independent towers, each six chained (256 x 1024) @ (1024 x 1024) matmuls, runs on a local
cluster of 2 tasks (`pardnn.backend.tf_cluster.LocalCluster`, 127.0.0.1) placed two ways: every op on task 0,
and tower B on task 1. ``pardnn.backend.tf_run.run_placed`` runs both (the all-on-device-0 run is its reference)
and reports the median of the timed steps. Run three ways: unpinned (the tasks share the cores), pinned with
one inter-op thread per task, and pinned with two (`Pinning`'s default).

Run from the repository root (needs the ``tf`` extra and at least 2 cores)::

    python benchmarks/pinned_cluster.py [--steps 10]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

N, D, DEPTH = 256, 1024, 6


def two_towers(options=None):
    """The step as a `TFImport` (imported with ``options``), and the placement with tower B (ops under
    ``tower_b``) on device 1."""
    import numpy as np

    from pardnn.frontends.tensorflow import import_function
    from pardnn.frontends.tensorflow._tf import tf
    from pardnn.placement import Placement

    rng = np.random.default_rng(0)
    wa = [tf.constant(rng.standard_normal((D, D), dtype=np.float32) / 32) for _ in range(DEPTH)]
    wb = [tf.constant(rng.standard_normal((D, D), dtype=np.float32) / 32) for _ in range(DEPTH)]

    @tf.function
    def step(xa, xb):
        with tf.name_scope("tower_a"):
            a = xa
            for w in wa:
                a = tf.matmul(a, w)
        with tf.name_scope("tower_b"):
            b = xb
            for w in wb:
                b = tf.matmul(b, w)
        return tf.reduce_sum(a) + tf.reduce_sum(b)

    x = rng.standard_normal((N, D), dtype=np.float32)
    imp = import_function(step, x, x.copy(), options=options)
    g = imp.graph
    dev = np.array([1 if "tower_b" in name or name.startswith("xb") else 0 for name in g.names], dtype=np.int64)
    return imp, Placement(dev, ("/device:CPU:0", "/device:CPU:1"), g.name)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args(argv)
    from pardnn.backend.tf_backend import run_on_local_cluster
    from pardnn.backend.tf_cluster import Pinning

    imp, pl = two_towers()
    print(f"two towers: {imp.graph.num_nodes} ops; tower B's {int(pl.assignment.sum())} on device 1")
    print("| tasks | split (ms) | all on task 0 (ms) | speedup |")
    print("|---|---:|---:|---:|")
    for label, pinning in (("unpinned", None), ("pinned, 1 inter-op thread", Pinning(1, 1, 1)),
                           ("pinned, 2 inter-op threads", Pinning(1, 1, 2))):
        r = run_on_local_cluster(imp, pl, 2, pinning=pinning, steps=args.steps, noise="off")
        print(f"| {label} | {r.measured_us / 1e3:.1f} | {r.reference_us / 1e3:.1f} | "
              f"{r.reference_us / r.measured_us:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
