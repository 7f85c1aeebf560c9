"""Time fidelity: predicted against measured step time on a pinned 2-task TensorFlow cluster (issue 16).

For each model, in a fresh process:

1. build it (random weights) and import its training step (forward, gradients, Adam) with ``--profile``
   steps taken while the process is pinned to one core, so TensorFlow's pools have one thread, as each
   pinned task's will (``os.sched_setaffinity``; TensorFlow sizes its pools from the affinity);
2. partition it for the calibrated cluster (``pardnn calibrate --local-cluster 2 --pin``, written once by
   this script to ``--cluster``, or the file given);
3. run it on a pinned local cluster of 2 tasks (one core each, one intra-op and two inter-op threads), the
   placement and the all-on-task-0 reference, ``--steps`` timed steps each (median);
4. report the machine model's predicted step time for the placement and for one device beside the
   measured ones, and both speedups.

Run from the repository root (needs the ``tf`` extra and 2 cores)::

    python benchmarks/time_fidelity.py [--only NAME,...] [--steps 20] [--repeat 3] [--cluster pinned.json]

The rows of the table in docs/machine-model.md are `benchmarks/time_fidelity.jsonl`, measured with the
cluster `benchmarks/pinned-cluster.json` (`pardnn calibrate --local-cluster 2 --pin` on this machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

PROFILE_STEPS = 5
MODELS = ("two-towers", "inception-blocks", "resnet-small", "transformer-4l", "lstm-2l")


def _inception(keras, rng, batch: int = 8, size: int = 32, blocks: int = 3):
    """An Inception-style CNN: blocks of four parallel branches (1x1; 1x1-3x3; 1x1-5x5; pool-1x1), concatenated."""
    L = keras.layers
    inp = keras.Input((size, size, 3), name="images")
    x = L.Conv2D(32, 3, padding="same", activation="relu", name="stem")(inp)
    for i in range(blocks):
        b1 = L.Conv2D(32, 1, activation="relu", name=f"b{i}_1x1")(x)
        b2 = L.Conv2D(48, 3, padding="same", activation="relu", name=f"b{i}_3x3")(
            L.Conv2D(24, 1, activation="relu", name=f"b{i}_3x3_reduce")(x))
        b3 = L.Conv2D(16, 5, padding="same", activation="relu", name=f"b{i}_5x5")(
            L.Conv2D(8, 1, activation="relu", name=f"b{i}_5x5_reduce")(x))
        b4 = L.Conv2D(16, 1, activation="relu", name=f"b{i}_pool_proj")(
            L.MaxPooling2D(3, 1, padding="same", name=f"b{i}_pool")(x))
        x = L.Concatenate(name=f"b{i}_concat")([b1, b2, b3, b4])
    out = L.Dense(10, name="logits")(L.GlobalAveragePooling2D()(x))
    model = keras.Model(inp, out, name="inception_blocks")
    data = (rng.standard_normal((batch, size, size, 3)).astype("float32"), rng.integers(0, 10, (batch,)).astype("int32"))
    return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), data


def _resnet(keras, rng, batch: int = 8, size: int = 32):
    """A small ResNet (three stages of two basic blocks, 16/32/64 channels) on 32x32 images."""
    L = keras.layers
    inp = keras.Input((size, size, 3), name="images")
    x = L.ReLU()(L.BatchNormalization()(L.Conv2D(16, 3, padding="same", use_bias=False)(inp)))
    for stage, ch in enumerate((16, 32, 64)):
        for blk in range(2):
            stride = 2 if stage and not blk else 1
            h = L.ReLU()(L.BatchNormalization()(L.Conv2D(ch, 3, stride, padding="same", use_bias=False)(x)))
            h = L.BatchNormalization()(L.Conv2D(ch, 3, padding="same", use_bias=False)(h))
            skip = x if stride == 1 and x.shape[-1] == ch else L.Conv2D(ch, 1, stride, use_bias=False)(x)
            x = L.ReLU()(L.Add()([h, skip]))
    out = L.Dense(10)(L.GlobalAveragePooling2D()(x))
    model = keras.Model(inp, out, name="resnet_small")
    data = (rng.standard_normal((batch, size, size, 3)).astype("float32"), rng.integers(0, 10, (batch,)).astype("int32"))
    return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), data


def _transformer(keras, rng):
    sys.path.insert(0, str(HERE / "heldout"))
    import make_heldout as mh
    return mh._transformer(4, d_model=128, heads=4, ff=512, seq=64, batch=8)(keras, rng)[:3]


def _lstm(keras, rng):
    import memory_fidelity as mf
    return mf._lstm(keras, rng)


def _import(name: str):
    """The profiled `TFImport` of ``name`` (this process must be pinned to one core already)."""
    import keras
    import numpy as np

    from pardnn.frontends import FrontendOptions
    from pardnn.frontends.tensorflow import import_function, import_keras

    opts = FrontendOptions(name=name, profile_steps=PROFILE_STEPS)
    if name == "two-towers":
        import pinned_cluster as pc
        imp, _ = pc.two_towers(options=opts)
        return imp
    keras.utils.set_random_seed(0)
    build = {"inception-blocks": _inception, "resnet-small": _resnet, "transformer-4l": _transformer,
             "lstm-2l": _lstm}[name]
    model, loss, batch = build(keras, np.random.default_rng(0))
    return import_keras(model, loss, keras.optimizers.Adam(1e-3, name="adam"), batch, options=opts)


def measure_one(name: str, cluster_path: str, steps: int) -> dict:
    import numpy as np

    all_cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(all_cores)})          # profile as a pinned task runs: one core, one thread
    t0 = time.perf_counter()
    imp = _import(name)
    import_s = time.perf_counter() - t0
    os.sched_setaffinity(0, all_cores)

    from pardnn.api import partition
    from pardnn.backend.tf_backend import run_on_local_cluster
    from pardnn.backend.tf_cluster import Pinning
    from pardnn.cluster import load_cluster
    from pardnn.machine import simulate

    cluster = load_cluster(cluster_path)
    g = imp.graph
    t0 = time.perf_counter()
    placement, sched = partition(g, cluster)
    place_s = time.perf_counter() - t0
    one = simulate(g, cluster, np.zeros(g.num_nodes, dtype=np.int64), memory=False).makespan_us
    r = run_on_local_cluster(imp, placement, 2, pinning=Pinning(1, 1, 2), steps=steps, noise="off", cluster=cluster)
    return {"model": name, "ops": g.num_nodes, "ops_on_1": int((placement.assignment == 1).sum()),
            "predicted_us": r.predicted_us, "measured_us": r.measured_us,
            "predicted_one_us": float(one), "measured_one_us": r.reference_us,
            "ok": r.ok, "transfers": r.simulated_transfers, "import_s": round(import_s, 1),
            "place_s": round(place_s, 2), "samples_us": list(r.samples_us)}


def _median_rows(rows: list[dict]) -> list[dict]:
    """Per model, the repeat with the median predicted / measured ratio (its range over the repeats added)."""
    out = []
    for name in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == name and not r.get("skipped")]
        if not mine:
            out.append(next(r for r in rows if r["model"] == name))
            continue
        mine.sort(key=lambda r: r["predicted_us"] / r["measured_us"])
        row = dict(mine[len(mine) // 2])
        ratios = [r["predicted_us"] / r["measured_us"] for r in mine]
        row["ratio_range"] = (min(ratios), max(ratios))
        row["repeats"] = len(mine)
        out.append(row)
    return out


def _table(rows: list[dict]) -> str:
    out = ["| model | ops | on task 1 | transfers | predicted ms | measured ms | predicted / measured | "
           "range over repeats | one task: predicted ms | measured ms | one task: predicted / measured | "
           "predicted speedup | measured speedup |", "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("skipped"):
            out.append(f"| {r['model']} | skipped: {r['skipped']} |" + " - |" * 11)
            continue
        p, m, p1, m1 = (r[k] / 1e3 for k in ("predicted_us", "measured_us", "predicted_one_us", "measured_one_us"))
        lo, hi = r.get("ratio_range", (p / m, p / m))
        out.append(f"| {r['model']} | {r['ops']} | {r['ops_on_1']} | {r.get('transfers', '-')} | {p:.1f} | {m:.1f} | "
                   f"{p / m:.3f} | {lo:.2f}-{hi:.2f} ({r.get('repeats', 1)}) | {p1:.1f} | {m1:.1f} | {p1 / m1:.3f} | "
                   f"{p1 / p:.2f}x | {m1 / m:.2f}x |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated model names (default: all)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=1,
                    help="measure each model this many times (fresh processes, interleaved); the table shows the "
                         "repeat with the median ratio and the range")
    ap.add_argument("--cluster", help="a calibrated pardnn.cluster (default: calibrate now, into --out-cluster)")
    ap.add_argument("--out-cluster", default="pinned-cluster.json")
    ap.add_argument("--rows", help="append each row to this JSON-lines file")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one, args.cluster, args.steps)))
        return
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    cluster = args.cluster
    if not cluster:
        cluster = args.out_cluster
        subprocess.run([sys.executable, "-c", "from pardnn.cli import main; main()", "calibrate", "--local-cluster",
                        "2", "--pin", "-o", cluster], check=True, env=env, cwd=ROOT)
    rows = []
    names = args.only.split(",") if args.only else list(MODELS)
    for name in [n for _ in range(max(1, args.repeat)) for n in names]:
        proc = subprocess.run([sys.executable, __file__, "--one", name, "--cluster", cluster, "--steps",
                               str(args.steps)], capture_output=True, text=True, env=env, cwd=ROOT)
        if proc.returncode != 0:
            row = {"model": name, "skipped": (proc.stderr.strip().splitlines() or ["?"])[-1][:160]}
        else:
            row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "samples_us"}), file=sys.stderr, flush=True)
        if args.rows:
            with open(args.rows, "a") as f:
                f.write(json.dumps(row) + "\n")
    print(_table(_median_rows(rows)))


if __name__ == "__main__":
    main()
