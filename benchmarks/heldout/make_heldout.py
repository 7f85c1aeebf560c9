"""Build the held-out graphs of issue 14: graphs the partitioner is never tuned on.

Run from the repository root::

    python benchmarks/heldout/make_heldout.py --keras            # Keras applications + Transformers (tf extra)
    python benchmarks/heldout/make_heldout.py --hub              # keras-hub GPT-2 and BERT (needs keras-hub)
    python benchmarks/heldout/make_heldout.py --freeze           # write SHA256SUMS (files + generated synthetics)

Real models are built with random weights (``weights=None``; keras-hub
backbones from their constructor, never ``from_preset``), their training step
(forward, gradients, Adam) is imported with `frontends.tensorflow.import_keras`
and profiled for ``--steps`` steps on this CPU, and the graph is written as
``benchmarks/heldout/graphs/<name>.json.gz``. Profiles vary from run to run,
which is why those files are committed and frozen by checksum: regenerating
them gives the same structure but other op times, and a regenerated file is
a *different* held-out set.

The synthetic wide family (`frontends.synthetic_wide.wide_training_graph`)
is generated, not stored; its checksum is the SHA-256 of the JSON that
`pardnn.ir.save_graph` writes for it (uncompressed ``.json``).

No tuning decision may look at these graphs (benchmarks/heldout/README.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GRAPHS_DIR = HERE / "graphs"
SUMS = HERE / "SHA256SUMS"
sys.path.insert(0, str(ROOT))

PROFILE_STEPS = 3


# ---------------------------------------------------------------------------
# Real models (random weights)
# ---------------------------------------------------------------------------

def _images(keras, rng, batch, size, classes=10):
    x = rng.standard_normal((batch, size, size, 3)).astype("float32")
    y = rng.integers(0, classes, (batch,)).astype("int32")
    return x, y


def _app(ctor_name: str, *, batch: int = 4, size: int = 64, classes: int = 10):
    """A keras.applications CNN with random weights on ``size`` x ``size`` images."""
    def build(keras, rng):
        ctor = getattr(keras.applications, ctor_name)
        model = ctor(weights=None, input_shape=(size, size, 3), classes=classes, classifier_activation=None)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return model, loss, _images(keras, rng, batch, size, classes), {"batch": batch, "image": size}
    build.__name__ = f"app_{ctor_name}"
    return build


def _transformer(layers: int, *, d_model: int, heads: int, ff: int, seq: int, batch: int, vocab: int = 1000,
                 classes: int = 10):
    """A pre-norm Transformer encoder classifier of ``layers`` blocks (written here, Keras 3 layers)."""
    def build(keras, rng):
        L = keras.layers
        tokens = keras.Input((seq,), dtype="int32", name="tokens")
        x = L.Embedding(vocab, d_model, name="embed")(tokens)
        x = x + L.Embedding(seq, d_model, name="pos_embed")(keras.ops.arange(seq))
        for i in range(layers):
            h = L.LayerNormalization(name=f"block{i}_ln1")(x)
            h = L.MultiHeadAttention(heads, d_model // heads, name=f"block{i}_attention")(h, h)
            x = x + L.Dropout(0.1)(h)
            h = L.LayerNormalization(name=f"block{i}_ln2")(x)
            h = L.Dense(ff, activation="gelu", name=f"block{i}_ff1")(h)
            h = L.Dense(d_model, name=f"block{i}_ff2")(h)
            x = x + L.Dropout(0.1)(h)
        x = L.LayerNormalization(name="final_ln")(x)
        x = L.GlobalAveragePooling1D()(x)
        out = L.Dense(classes, name="classifier")(x)
        model = keras.Model(tokens, out, name=f"transformer_{layers}l")
        data = (rng.integers(0, vocab, (batch, seq)).astype("int32"),
                rng.integers(0, classes, (batch,)).astype("int32"))
        return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), data, {
            "batch": batch, "seq": seq, "d_model": d_model, "heads": heads, "ff": ff, "layers": layers}
    build.__name__ = f"transformer_{layers}l"
    return build


def _gpt2(*, layers: int = 12, d_model: int = 768, heads: int = 12, ff: int = 3072, vocab: int = 50257,
          seq: int = 64, batch: int = 2):
    """keras-hub GPT2Backbone (GPT-2 small's shape, random init) with its tied LM head: next-token loss."""
    def build(keras, rng):
        import keras_hub
        backbone = keras_hub.models.GPT2Backbone(
            vocabulary_size=vocab, num_layers=layers, num_heads=heads, hidden_dim=d_model,
            intermediate_dim=ff, dropout=0.1, max_sequence_length=1024)
        token_ids = keras.Input((seq,), dtype="int32", name="token_ids")
        padding_mask = keras.Input((seq,), dtype="int32", name="padding_mask")
        h = backbone({"token_ids": token_ids, "padding_mask": padding_mask})
        logits = backbone.token_embedding(h, reverse=True)
        model = keras.Model({"token_ids": token_ids, "padding_mask": padding_mask}, logits, name="gpt2_lm")
        ids = rng.integers(0, vocab, (batch, seq + 1)).astype("int32")
        x = {"token_ids": ids[:, :-1], "padding_mask": np.ones((batch, seq), "int32")}
        return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), (x, ids[:, 1:]), {
            "batch": batch, "seq": seq, "d_model": d_model, "heads": heads, "ff": ff, "layers": layers,
            "vocab": vocab, "keras_hub": keras_hub.__version__}
    build.__name__ = "gpt2_backbone"
    return build


def _bert(*, layers: int = 12, d_model: int = 768, heads: int = 12, ff: int = 3072, vocab: int = 30522,
          seq: int = 64, batch: int = 2, classes: int = 2):
    """keras-hub BertBackbone (BERT-base's shape, random init) with a classifier on the pooled output."""
    def build(keras, rng):
        import keras_hub
        backbone = keras_hub.models.BertBackbone(
            vocabulary_size=vocab, num_layers=layers, num_heads=heads, hidden_dim=d_model,
            intermediate_dim=ff, dropout=0.1, max_sequence_length=512)
        inputs = {"token_ids": keras.Input((seq,), dtype="int32", name="token_ids"),
                  "segment_ids": keras.Input((seq,), dtype="int32", name="segment_ids"),
                  "padding_mask": keras.Input((seq,), dtype="int32", name="padding_mask")}
        pooled = backbone(inputs)["pooled_output"]
        out = keras.layers.Dense(classes, name="classifier")(keras.layers.Dropout(0.1)(pooled))
        model = keras.Model(inputs, out, name="bert_classifier")
        x = {"token_ids": rng.integers(0, vocab, (batch, seq)).astype("int32"),
             "segment_ids": np.zeros((batch, seq), "int32"), "padding_mask": np.ones((batch, seq), "int32")}
        y = rng.integers(0, classes, (batch,)).astype("int32")
        return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), (x, y), {
            "batch": batch, "seq": seq, "d_model": d_model, "heads": heads, "ff": ff, "layers": layers,
            "vocab": vocab, "keras_hub": keras_hub.__version__}
    build.__name__ = "bert_backbone"
    return build


KERAS = {
    # name: builder
    "keras-resnet50": _app("ResNet50"),
    "keras-densenet121": _app("DenseNet121"),
    "keras-mobilenetv2": _app("MobileNetV2"),
    "keras-efficientnetb0": _app("EfficientNetB0"),
    "keras-transformer-24l": _transformer(24, d_model=128, heads=4, ff=512, seq=64, batch=4),
    "keras-transformer-96l": _transformer(96, d_model=64, heads=4, ff=256, seq=32, batch=4),
}
HUB = {
    "hub-gpt2-backbone": _gpt2(),
    "hub-bert-backbone": _bert(),
}

# ---------------------------------------------------------------------------
# Synthetic wide family (generated; frozen by checksum only)
# ---------------------------------------------------------------------------

SYNTHETIC_SIZES = (10_000, 50_000, 200_000)
SYNTHETIC_SEED = 0


def synthetic_name(n: int) -> str:
    return f"wide-{n // 1000}k"


def synthetic_graph(n: int):
    from pardnn.frontends.synthetic_wide import wide_training_graph
    return wide_training_graph(n, seed=SYNTHETIC_SEED, name=synthetic_name(n))


# ---------------------------------------------------------------------------
# Building and freezing
# ---------------------------------------------------------------------------

def build_real(name: str, builder, steps: int, graphs_dir: Path = GRAPHS_DIR,
               origin: str = "benchmarks/heldout/make_heldout.py", heldout: str = "issue 14",
               purpose: str | None = None) -> Path:
    """Import ``builder``'s training step, profiled for ``steps`` steps, as ``graphs_dir/<name>.json.gz``.

    ``origin`` and ``heldout`` only label the graph's metadata (held-out set v2 builds with this too);
    ``purpose``, when given, replaces the "never tune on this graph" label (the tuning suite's graphs).
    """
    import keras

    from pardnn.frontends import FrontendOptions
    from pardnn.frontends.tensorflow import import_keras
    from pardnn.ir import save_graph
    from pardnn.machine import single_device_peak

    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model, loss, batch, cfg = builder(keras, rng)
    t0 = time.perf_counter()
    imp = import_keras(model, loss, keras.optimizers.Adam(1e-3, name="adam"), batch,
                       options=FrontendOptions(name=name, profile_steps=steps))
    meta = {"builder": f"{origin}:{builder.__name__}", **cfg,
            "parameters": int(sum(np.prod(v.shape) for v in model.trainable_variables)),
            "profile_steps": steps, "keras": keras.__version__, "weights": "random (seed 0)",
            **({"heldout": f"{heldout}: never tune on this graph"} if purpose is None else {"purpose": purpose})}
    g = dataclasses.replace(imp.graph, meta={**imp.graph.meta, "model": meta})
    path = save_graph(g, graphs_dir / f"{name}.json.gz")
    print(f"{name}: {g.num_nodes} nodes, {g.num_edges} edges, {len(g.group_names)} groups, "
          f"compute {g.time_us.sum() / 1e3:.1f} ms, peak {single_device_peak(g) / 2**20:.1f} MiB, "
          f"{path.stat().st_size / 1e3:.0f} kB, {time.perf_counter() - t0:.1f} s", flush=True)
    return path


def synthetic_from_label(label: str):
    """The generated graph of a ``synthetic:<name>`` line of SHA256SUMS (check_frozen and run_heldout)."""
    return synthetic_graph(int(label.split("-")[-1].rstrip("k")) * 1000)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def synthetic_sha256(n: int) -> str:
    """SHA-256 of the JSON `save_graph` writes for the synthetic graph of ``n`` ops (uncompressed)."""
    from pardnn.ir import save_graph

    with tempfile.TemporaryDirectory() as d:
        return sha256_file(save_graph(synthetic_graph(n), Path(d) / f"{synthetic_name(n)}.json"))


def expected_entries() -> list[tuple[str, str]]:
    """(kind, name) of every held-out graph, in SHA256SUMS order."""
    return ([("file", f"graphs/{name}.json.gz") for name in (*KERAS, *HUB)]
            + [("synthetic", f"synthetic:{synthetic_name(n)}") for n in SYNTHETIC_SIZES])


def current_sums(skip_missing: bool = False) -> list[tuple[str, str]]:
    out = []
    for kind, label in expected_entries():
        if kind == "file":
            p = HERE / label
            if not p.exists():
                if skip_missing:
                    print(f"{label}: not built, left out", file=sys.stderr)
                    continue
                raise SystemExit(f"{p}: missing (build it first)")
            out.append((sha256_file(p), label))
        else:
            n = int(label.split("-")[-1].rstrip("k")) * 1000
            out.append((synthetic_sha256(n), label))
    return out


def print_stats() -> None:
    """ops, edges, groups, total compute, critical path and single-device peak of every held-out graph."""
    from pardnn.analysis import critical_path
    from pardnn.ir import load_graph
    from pardnn.machine import single_device_peak

    print("| graph | ops | edges | colocation groups | total compute ms | critical path ms | "
          "single-device peak MiB |\n|---|---:|---:|---:|---:|---:|---:|")
    for kind, label in expected_entries():
        if kind == "file":
            p = HERE / label
            if not p.exists():
                continue
            g = load_graph(p)
        else:
            g = synthetic_graph(int(label.split("-")[-1].rstrip("k")) * 1000)
        print(f"| {g.name} | {g.num_nodes} | {g.num_edges} | {len(g.group_names)} | {g.time_us.sum() / 1e3:.1f} | "
              f"{critical_path(g)[0] / 1e3:.1f} | {single_device_peak(g) / 2**20:.1f} |", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keras", action="store_true", help="build the Keras applications and Transformers")
    ap.add_argument("--hub", action="store_true", help="build the keras-hub GPT-2 and BERT backbones")
    ap.add_argument("--only", help="build only graphs whose name contains this")
    ap.add_argument("--steps", type=int, default=PROFILE_STEPS, help=f"profiled steps (default {PROFILE_STEPS})")
    ap.add_argument("--freeze", action="store_true", help="write SHA256SUMS for the built files and synthetics")
    ap.add_argument("--stats", action="store_true", help="print a Markdown table of the frozen graphs")
    ap.add_argument("--write-synthetic", metavar="DIR", help="also write the synthetic graphs to DIR")
    args = ap.parse_args(argv)

    todo = {}
    if args.keras:
        todo.update(KERAS)
    if args.hub:
        todo.update(HUB)
    for name, builder in todo.items():
        if args.only and args.only not in name:
            continue
        build_real(name, builder, args.steps)
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
    # One TensorFlow thread each way: op times are single-core profiles, and the build stays light.
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
    main()
