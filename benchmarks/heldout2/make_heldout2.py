"""Build held-out set v2 of issue 14: new graphs, frozen before the next round of partitioner work.

Run from the repository root::

    python benchmarks/heldout2/make_heldout2.py --keras          # Keras applications, Transformer, GRU (tf extra)
    python benchmarks/heldout2/make_heldout2.py --freeze         # write SHA256SUMS (files + generated synthetics)
    python benchmarks/heldout2/make_heldout2.py --stats          # the README's table

Set v1 (benchmarks/heldout/) was partly looked at while tuning, so v2 holds
models that appear neither there nor in the tuning suite. Real models are
built and imported exactly as v1's (`make_heldout.build_real`: random weights,
seed 0, forward + gradients + Adam through `frontends.tensorflow.import_keras`,
profiled for 3 steps with one TensorFlow thread each way) and committed as
``benchmarks/heldout2/graphs/<name>.json.gz``; a regenerated file has other
op times and is a different set.

The synthetic graphs are `frontends.synthetic_wide.wide_training_graph` with
a seed v1 never used (1) at sizes v1 never used; like v1's they are
generated, not stored, and frozen by the SHA-256 of the uncompressed JSON
`pardnn.ir.save_graph` writes for them.

No tuning decision may look at these graphs (benchmarks/heldout2/README.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GRAPHS_DIR = HERE / "graphs"
SUMS = HERE / "SHA256SUMS"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "heldout"))

import make_heldout as v1  # noqa: E402  (the builders and the import, shared with set v1)

from make_heldout import PROFILE_STEPS, sha256_file  # noqa: E402,F401  (check_frozen and run_heldout use them)

ORIGIN = "benchmarks/heldout2/make_heldout2.py"
TAG = "issue 14, held-out set v2"


# ---------------------------------------------------------------------------
# Real models (random weights)
# ---------------------------------------------------------------------------

def _bigru(layers: int, *, units: int, seq: int, batch: int, embed: int = 64, vocab: int = 1000, classes: int = 10):
    """A classifier of ``layers`` stacked bidirectional GRUs: each direction is a while loop, two per layer."""
    def build(keras, rng):
        L = keras.layers
        tokens = keras.Input((seq,), dtype="int32", name="tokens")
        x = L.Embedding(vocab, embed, name="embed")(tokens)
        for i in range(layers):
            x = L.Bidirectional(L.GRU(units, return_sequences=True, name=f"gru{i}"), name=f"bigru{i}")(x)
        x = L.GlobalAveragePooling1D()(x)
        out = L.Dense(classes, name="classifier")(x)
        model = keras.Model(tokens, out, name=f"bigru_{layers}l")
        data = (rng.integers(0, vocab, (batch, seq)).astype("int32"),
                rng.integers(0, classes, (batch,)).astype("int32"))
        return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), data, {
            "batch": batch, "seq": seq, "embed": embed, "units": units, "layers": layers, "vocab": vocab}
    build.__name__ = f"bigru_{layers}l"
    return build


# 64x64 images where the model takes them; InceptionV3 needs at least 75x75 and Xception 71x71.
KERAS = {
    "keras-inceptionv3": v1._app("InceptionV3", size=75),
    "keras-xception": v1._app("Xception", size=71),
    "keras-resnet101v2": v1._app("ResNet101V2"),
    "keras-densenet169": v1._app("DenseNet169"),
    "keras-mobilenetv3small": v1._app("MobileNetV3Small"),
    "keras-efficientnetv2b0": v1._app("EfficientNetV2B0"),
    "keras-convnexttiny": v1._app("ConvNeXtTiny"),
    "keras-nasnetmobile": v1._app("NASNetMobile"),
    "keras-transformer-48l": v1._transformer(48, d_model=192, heads=6, ff=768, seq=48, batch=4),
    "keras-bigru-3l": _bigru(3, units=128, seq=64, batch=4),
}

# ---------------------------------------------------------------------------
# Synthetic wide family, a seed and sizes v1 never used (generated; frozen by checksum only)
# ---------------------------------------------------------------------------

SYNTHETIC_SIZES = (20_000, 100_000)
SYNTHETIC_SEED = 1


def synthetic_name(n: int, seed: int = SYNTHETIC_SEED) -> str:
    return f"wide-s{seed}-{n // 1000}k"


def synthetic_graph(n: int, seed: int = SYNTHETIC_SEED):
    from pardnn.frontends.synthetic_wide import wide_training_graph
    return wide_training_graph(n, seed=seed, name=synthetic_name(n, seed))


def synthetic_from_label(label: str, seed: int = SYNTHETIC_SEED):
    """The generated graph of a ``synthetic:<name>`` line of SHA256SUMS (check_frozen and run_heldout)."""
    return synthetic_graph(int(label.split("-")[-1].rstrip("k")) * 1000, seed)


def synthetic_sha256(n: int, seed: int = SYNTHETIC_SEED) -> str:
    """SHA-256 of the JSON `save_graph` writes for the synthetic graph of ``n`` ops (uncompressed)."""
    from pardnn.ir import save_graph

    with tempfile.TemporaryDirectory() as d:
        return sha256_file(save_graph(synthetic_graph(n, seed), Path(d) / f"{synthetic_name(n, seed)}.json"))


# ---------------------------------------------------------------------------
# Building and freezing
# ---------------------------------------------------------------------------

def expected_entries() -> list[tuple[str, str]]:
    """(kind, label) of every graph of set v2, in SHA256SUMS order."""
    return ([("file", f"graphs/{name}.json.gz") for name in KERAS]
            + [("synthetic", f"synthetic:{synthetic_name(n)}") for n in SYNTHETIC_SIZES])


def current_sums(skip_missing: bool = False, heldout=None) -> list[tuple[str, str]]:
    """(SHA-256, label) of every graph of a set: this one, or the build module ``heldout`` of a later set with
    the same layout (its HERE, expected_entries and synthetic_sha256)."""
    h = heldout or sys.modules[__name__]
    out = []
    for kind, label in h.expected_entries():
        if kind == "synthetic":
            out.append((h.synthetic_sha256(int(label.split("-")[-1].rstrip("k")) * 1000), label))
        elif (h.HERE / label).exists():
            out.append((sha256_file(h.HERE / label), label))
        elif skip_missing:
            print(f"{label}: not built, left out", file=sys.stderr)
        else:
            raise SystemExit(f"{h.HERE / label}: missing (build it first)")
    return out


def print_stats(heldout=None) -> None:
    """ops, edges, groups, total compute, critical path and single-device peak of every graph (v1's table), of
    this set or of ``heldout`` (as `current_sums` takes it)."""
    from pardnn.analysis import critical_path
    from pardnn.ir import load_graph
    from pardnn.machine import single_device_peak

    print("| graph | ops | edges | colocation groups | total compute ms | critical path ms | "
          "single-device peak MiB |\n|---|---:|---:|---:|---:|---:|---:|")
    h = heldout or sys.modules[__name__]
    for kind, label in h.expected_entries():
        if kind == "file" and not (h.HERE / label).exists():
            continue
        g = load_graph(h.HERE / label) if kind == "file" else h.synthetic_from_label(label)
        print(f"| {g.name} | {g.num_nodes} | {g.num_edges} | {len(g.group_names)} | {g.time_us.sum() / 1e3:.1f} | "
              f"{critical_path(g)[0] / 1e3:.1f} | {single_device_peak(g) / 2**20:.1f} |", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keras", action="store_true", help="build the real models (Keras applications, Transformer, GRU)")
    ap.add_argument("--only", help="build only graphs whose name contains this")
    ap.add_argument("--steps", type=int, default=PROFILE_STEPS, help=f"profiled steps (default {PROFILE_STEPS})")
    ap.add_argument("--freeze", action="store_true", help="write SHA256SUMS for the built files and synthetics")
    ap.add_argument("--stats", action="store_true", help="print a Markdown table of the graphs")
    ap.add_argument("--write-synthetic", metavar="DIR", help="also write the synthetic graphs to DIR")
    args = ap.parse_args(argv)

    for name, builder in (KERAS if args.keras else {}).items():
        if args.only and args.only not in name:
            continue
        t0 = time.perf_counter()
        v1.build_real(name, builder, args.steps, graphs_dir=GRAPHS_DIR, origin=ORIGIN, heldout=TAG)
        print(f"{name}: built in {time.perf_counter() - t0:.0f} s (model, import and profile)", flush=True)
    if args.write_synthetic:
        from pardnn.ir import save_graph
        for n in SYNTHETIC_SIZES:
            g = synthetic_graph(n)
            save_graph(g, Path(args.write_synthetic) / f"{synthetic_name(n)}.json.gz")
            print(f"{synthetic_name(n)}: {g.num_nodes} nodes, {g.num_edges} edges", flush=True)
    if args.stats:
        print_stats()
    if args.freeze:
        lines = [f"{h}  {label}" for h, label in current_sums(skip_missing=True)]
        SUMS.write_text("".join(line + "\n" for line in lines))
        print(f"{SUMS}: {len(lines)} entries")


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # One TensorFlow thread each way, as for set v1: op times are single-core profiles.
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
    main()
