"""Memory fidelity: the machine model's single-device peak against TensorFlow's own allocator (issue 15).

For each model, in a fresh process: build it (random weights), import its training step (forward,
gradients, Adam) with ``frontends.tensorflow.import_keras``, then run the step with every op on one
device the way ``pardnn run`` runs its single-device reference (``pardnn.backend.tf_run.run_program``:
a ``tf.compat.v1.Session``, grappler off, graph optimizer at L0, a warm-up step) and read TensorFlow's
CPU allocator peak over 3 timed steps, less what the process held before (`pardnn.backend.tf_memory`).
Each measurement is 3 runs in one fresh process (the median is reported; TensorFlow's inter-op threads
interleave ops differently from run to run, and the allocator's free chunks differ after the first),
once with TensorFlow's default inter-op pool (as ``pardnn run``) and once, in another process, with one
inter-op thread (one op at a time, as the machine model's device runs them). Beside it: the machine model's
``single_device_peak`` as the frontend wrote the graph (forwarded and in-place outputs marked), and with
the ``forwarded_as`` marks dropped (the model before issue 15).

Run from the repository root (needs the ``tf`` extra; the keras-hub row needs keras-hub, else it is
skipped)::

    python benchmarks/memory_fidelity.py [--only NAME,...] [--save-graphs DIR] [--hub-python PY]

``--save-graphs`` also writes each imported graph (``NAME.json.gz``) for ``benchmarks/memory_min.py``.
``--hub-python`` runs the keras-hub rows with another interpreter (a venv with keras-hub installed).
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
sys.path.insert(0, str(HERE / "heldout"))

MIB = 1 << 20
STEPS = 3
REPEATS = 3

# name: (builder module, builder) -- resolved in the child process
MODELS = {
    "keras-resnet50": ("app", "ResNet50"),
    "keras-densenet121": ("app", "DenseNet121"),
    "keras-mobilenetv2": ("app", "MobileNetV2"),
    "keras-efficientnetb0": ("app", "EfficientNetB0"),
    "keras-transformer-24l": ("transformer", 24),
    "hub-gpt2-backbone": ("hub", "gpt2"),
    "test-transformer": ("tests", "transformer"),
    "test-cnn": ("tests", "cnn"),
    "lstm-2l": ("lstm", None),
    "test-big-mlp": ("tests", "big_mlp"),
}
# the tests' models at sizes where tensors, not the allocator's 256-byte granules, set the peak
TESTS_ARGS = {"transformer": dict(batch=8, seq=64, vocab=1000, d_model=128, heads=4, ff=512),
              "cnn": dict(batch=16, size=64), "big_mlp": {}}


def _lstm(keras, rng, batch: int = 16, seq: int = 32, features: int = 64, hidden: int = 256):
    """Two stacked LSTMs (while loops) of ``hidden`` units over ``seq`` steps, then Dense(10)."""
    inp = keras.Input((seq, features), name="x")
    h = keras.layers.LSTM(hidden, return_sequences=True, name="lstm1")(inp)
    h = keras.layers.LSTM(hidden, name="lstm2")(h)
    out = keras.layers.Dense(10, name="head")(h)
    model = keras.Model(inp, out, name="lstm_2l")
    data = (rng.standard_normal((batch, seq, features)).astype("float32"), rng.integers(0, 10, (batch,)).astype("int32"))
    return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), data


def _builder(name: str):
    """(build(keras, rng) -> (model, loss, batch)) for ``name``."""
    kind, arg = MODELS[name]
    if kind in ("app", "transformer", "hub"):
        import make_heldout as mh
        if kind == "app":
            b = mh._app(arg)
        elif kind == "transformer":
            b = mh._transformer(arg, d_model=128, heads=4, ff=512, seq=64, batch=4)
        else:
            b = mh._gpt2()
        return lambda keras, rng: b(keras, rng)[:3]
    if kind == "lstm":
        return _lstm
    from tests import tf_models
    fn = getattr(tf_models, arg)
    return lambda keras, rng: fn(keras, **TESTS_ARGS[arg])


def measure_one(name: str, save_dir: str | None, profile: int = 0, threads: int = 0) -> dict:
    """Import and run ``name`` on one device (this process); the row as a dict."""
    import dataclasses

    import keras
    import numpy as np

    from pardnn.backend import tf_run
    from pardnn.frontends import FrontendOptions
    from pardnn.frontends.tensorflow import import_keras
    from pardnn.ir import FORWARDED_AS, save_graph
    from pardnn.frontends.tensorflow.profile import feed_values
    from pardnn.machine import single_device_peak

    keras.utils.set_random_seed(0)
    model, loss, batch = _builder(name)(keras, np.random.default_rng(0))
    t0 = time.perf_counter()
    imp = import_keras(model, loss, keras.optimizers.Adam(1e-3, name="adam"), batch,
                       options=FrontendOptions(name=name, profile_steps=profile))
    import_s = time.perf_counter() - t0
    g = imp.graph
    if save_dir:
        save_graph(g, Path(save_dir) / f"{name}.json.gz")
    extra = tuple(({k: v for k, v in x.items() if k != FORWARDED_AS} or None) if x else None for x in g.edge_extra)
    plain = dataclasses.replace(g, edge_extra=extra if any(extra) else ())
    forwarded = sum(1 for x in g.edge_extra if x and FORWARDED_AS in x) if g.edge_extra else 0
    m = imp.model
    program = tf_run.build_program(m, m.graph_def, tf_run.starting_values(m))
    feed = feed_values(m, None)
    t0 = time.perf_counter()
    config = tf_run.session_config()
    if threads:
        config.inter_op_parallelism_threads = threads
    peaks = []
    for _ in range(REPEATS):
        run = tf_run.run_program(program, feed, steps=STEPS, config=config, trace=False, allocators=("CPU:0",))
        if run.peak_bytes is None:
            raise SystemExit(run.peak_note)
        peaks.append(run.peak_bytes["CPU:0"])
    run_s = time.perf_counter() - t0
    return {
        "model": name, "ops": g.num_nodes, "forwarding_edges": forwarded, "profile_steps": profile,
        "temp_bytes": int(g.temp_bytes.sum()), "persistent_bytes": int(g.persistent_bytes.sum()),
        "predicted_bytes": int(single_device_peak(g)), "predicted_unmarked_bytes": int(single_device_peak(plain)),
        "threads": threads, "measured_bytes": sorted(peaks)[REPEATS // 2], "measured_all": peaks,
        "import_s": round(import_s, 1), "run_s": round(run_s, 1),
    }


def _table(rows: list[dict]) -> str:
    out = ["| model | ops | params+slots MiB | predicted MiB | measured MiB (min-max) | predicted / measured | "
           "measured, 1 inter-op thread MiB | predicted / that | before issue 15 MiB | before / measured |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("skipped"):
            out.append(f"| {r['model']} | skipped: {r['skipped']} |" + " - |" * 8)
            continue
        meas, one = r["measured_bytes"], r["measured_1thread_bytes"]
        lo, hi = min(r["measured_all"]) / MIB, max(r["measured_all"]) / MIB
        out.append(f"| {r['model']} | {r['ops']} | {r['persistent_bytes'] / MIB:.1f} | "
                   f"{r['predicted_bytes'] / MIB:.1f} | {meas / MIB:.1f} ({lo:.1f}-{hi:.1f}) | "
                   f"{r['predicted_bytes'] / meas:.3f} | {one / MIB:.1f} | {r['predicted_bytes'] / one:.3f} | "
                   f"{r['predicted_unmarked_bytes'] / MIB:.1f} | {r['predicted_unmarked_bytes'] / meas:.3f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated model names (default: all)")
    ap.add_argument("--save-graphs", help="also write each imported graph here (NAME.json.gz)")
    ap.add_argument("--hub-python", default=sys.executable, help="interpreter for the keras-hub rows")
    ap.add_argument("--rows", help="append each row to this JSON-lines file")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="profile N steps at import (measured op times and kernel temporaries; default: roofline, "
                         "no temporaries)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one, args.save_graphs, args.profile, args.threads)))
        return
    names = args.only.split(",") if args.only else list(MODELS)
    if args.save_graphs:
        Path(args.save_graphs).mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        py = args.hub_python if MODELS[name][0] == "hub" else sys.executable
        row = {}
        for threads in (0, 1):      # 0: TensorFlow's default inter-op pool (as pardnn run); 1: one op at a time
            cmd = [py, __file__, "--one", name, "--profile", str(args.profile), "--threads", str(threads)] + (
                ["--save-graphs", args.save_graphs] if args.save_graphs and not threads else [])
            env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["?"])[-1]
                row = {"model": name, "skipped": last[:120]}
                break
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            if threads:
                row.update(measured_1thread_bytes=got["measured_bytes"], measured_1thread_all=got["measured_all"])
            else:
                row = got
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        if args.rows:
            with open(args.rows, "a") as f:
                f.write(json.dumps(row) + "\n")
    print(_table(rows))


if __name__ == "__main__":
    main()
