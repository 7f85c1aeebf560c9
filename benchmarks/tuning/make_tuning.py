"""Build the tuning suite's Keras graphs: real models of 1.5k-50k ops, for tuning only.

Run from the repository root (tf extra)::

    python benchmarks/tuning/make_tuning.py            # build every graph missing from graphs/
    python benchmarks/tuning/make_tuning.py --only mobilenet

The tuning suite (`pardnn.bench.suite("full")`, `benchmarks/tune.py`) had no
real model between 5,000 and 50,000 ops, so size rules in that range (which
start runs on which graph, say) could be decided only on synthetic graphs.
These models fill the range; two small recurrent classifiers (an LSTM and a
bidirectional LSTM) give the suite the while-loop models it had none of.
They are built exactly as the held-out sets'
(`benchmarks/heldout/make_heldout.build_real`: random weights, seed 0,
forward + gradients + Adam through `frontends.tensorflow.import_keras`,
profiled for 3 steps with one TensorFlow thread each way), but none of them
is in held-out set v1 or v2, and tuning on them is what they are for.
`benchmarks/tune.py` reads every ``graphs/*.json.gz`` here.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GRAPHS_DIR = HERE / "graphs"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "heldout"))

import make_heldout as v1  # noqa: E402  (the builders and the import, shared with the held-out sets)

ORIGIN = "benchmarks/tuning/make_tuning.py"
PURPOSE = "tuning suite: tune on this graph (never in a held-out set)"


def _hub_encoder(ctor: str, *, layers: int, vocab: int, seq: int = 64, batch: int = 2, classes: int = 2, **kw):
    """A keras-hub encoder backbone (random init) with a classifier on its first token: one training step."""
    def build(keras, rng):
        import keras_hub
        size = {"vocab_size" if ctor == "ElectraBackbone" else "vocabulary_size": vocab}
        backbone = getattr(keras_hub.models, ctor)(**size, num_layers=layers, **kw)
        inputs = {"token_ids": keras.Input((seq,), dtype="int32", name="token_ids"),
                  "padding_mask": keras.Input((seq,), dtype="int32", name="padding_mask")}
        extra = {}
        if "segment_ids" in [i.name.split(":")[0] for i in backbone.inputs]:
            inputs["segment_ids"] = keras.Input((seq,), dtype="int32", name="segment_ids")
            extra["segment_ids"] = np.zeros((batch, seq), "int32")
        h = backbone(inputs)
        h = h["sequence_output"] if isinstance(h, dict) else h
        out = keras.layers.Dense(classes, name="classifier")(h[:, 0, :])
        model = keras.Model(inputs, out, name=f"{ctor.lower()}_classifier")
        x = {"token_ids": rng.integers(0, vocab, (batch, seq)).astype("int32"),
             "padding_mask": np.ones((batch, seq), "int32"), **extra}
        y = rng.integers(0, classes, (batch,)).astype("int32")
        return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), (x, y), {
            "backbone": ctor, "layers": layers, "vocab": vocab, "seq": seq, "batch": batch, **kw,
            "keras_hub": keras_hub.__version__}
    build.__name__ = f"hub_{ctor}"
    return build


def _hub_decoder(ctor: str, *, layers: int, vocab: int, seq: int = 64, batch: int = 2, **kw):
    """A keras-hub decoder backbone (random init) with its tied LM head: a next-token training step."""
    def build(keras, rng):
        import keras_hub
        backbone = getattr(keras_hub.models, ctor)(vocabulary_size=vocab, num_layers=layers, **kw)
        token_ids = keras.Input((seq,), dtype="int32", name="token_ids")
        padding_mask = keras.Input((seq,), dtype="int32", name="padding_mask")
        h = backbone({"token_ids": token_ids, "padding_mask": padding_mask})
        logits = backbone.token_embedding(h, reverse=True)
        model = keras.Model({"token_ids": token_ids, "padding_mask": padding_mask}, logits, name=f"{ctor.lower()}_lm")
        ids = rng.integers(0, vocab, (batch, seq + 1)).astype("int32")
        x = {"token_ids": ids[:, :-1], "padding_mask": np.ones((batch, seq), "int32")}
        return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), (x, ids[:, 1:]), {
            "backbone": ctor, "layers": layers, "vocab": vocab, "seq": seq, "batch": batch, **kw,
            "keras_hub": keras_hub.__version__}
    build.__name__ = f"hub_{ctor}"
    return build


# keras-hub backbones of the base shape (12 heads of 64, 3072 wide), none of them GPT-2 or BERT (held-out v1)
HUB = {
    "tune-hub-roberta": _hub_encoder("RobertaBackbone", layers=12, vocab=50265, num_heads=12, hidden_dim=768,
                                     intermediate_dim=3072, max_sequence_length=512),
    "tune-hub-distilbert": _hub_encoder("DistilBertBackbone", layers=6, vocab=30522, num_heads=12, hidden_dim=768,
                                        intermediate_dim=3072, max_sequence_length=512),
    "tune-hub-opt": _hub_decoder("OPTBackbone", layers=12, vocab=50272, num_heads=12, hidden_dim=768,
                                 intermediate_dim=3072, max_sequence_length=2048),
    "tune-hub-electra": _hub_encoder("ElectraBackbone", layers=12, vocab=30522, num_heads=4, hidden_dim=256,
                                     embedding_dim=128, intermediate_dim=1024, max_sequence_length=512),
}

def _recurrent(layers: int, *, units: int, seq: int, batch: int, bidirectional: bool = False, kernel: int = 3,
               embed: int = 64, vocab: int = 1000, classes: int = 10):
    """A classifier of ``layers`` stacked LSTMs (each a while loop; both directions side by side when
    ``bidirectional``) over a 1-D convolution (``kernel`` wide) of the embeddings. Held-out set v3's LSTM is
    built with it too (``kernel=5``; its metadata has no ``bidirectional`` key, so it stays as frozen)."""
    prefix = "bi" if bidirectional else ""

    def build(keras, rng):
        L = keras.layers
        tokens = keras.Input((seq,), dtype="int32", name="tokens")
        x = L.Embedding(vocab, embed, name="embed")(tokens)
        x = L.Conv1D(units, kernel, padding="same", activation="relu", name="conv")(x)
        for i in range(layers):
            cell = L.LSTM(units, return_sequences=i < layers - 1, name=f"lstm{i}")
            x = (L.Bidirectional(cell, name=f"bi{i}") if bidirectional else cell)(x)
        out = L.Dense(classes, name="classifier")(x)
        model = keras.Model(tokens, out, name=f"{prefix}lstm_{layers}l")
        data = (rng.integers(0, vocab, (batch, seq)).astype("int32"),
                rng.integers(0, classes, (batch,)).astype("int32"))
        return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), data, {
            "batch": batch, "seq": seq, "embed": embed, "units": units, "layers": layers, "vocab": vocab,
            **({"bidirectional": True} if bidirectional else {})}
    build.__name__ = f"{prefix}lstm_{layers}l"
    return build


# None of these is in held-out set v1 (ResNet50, DenseNet121, MobileNetV2, EfficientNetB0, GPT-2, BERT,
# Transformers of 24/96 layers) or v2 (InceptionV3, Xception, ResNet101V2, DenseNet169, MobileNetV3Small,
# EfficientNetV2B0, ConvNeXtTiny, NASNetMobile, a 48-layer Transformer, a GRU); the LSTMs differ from
# held-out set v3's (3 layers of 192 units over 48 steps) in depth, width, length and batch.
KERAS = {
    "tune-keras-mobilenet": v1._app("MobileNet"),
    "tune-keras-mobilenetv3large": v1._app("MobileNetV3Large"),
    "tune-keras-efficientnetb1": v1._app("EfficientNetB1"),
    "tune-keras-resnet152": v1._app("ResNet152"),
    "tune-keras-inceptionresnetv2": v1._app("InceptionResNetV2", size=75),
    "tune-keras-transformer-12l": v1._transformer(12, d_model=256, heads=8, ff=1024, seq=64, batch=4),
    "tune-keras-lstm-2l": _recurrent(2, units=256, seq=32, batch=8),
    "tune-keras-bilstm-2l": _recurrent(2, units=128, seq=40, batch=4, bidirectional=True),
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="build only graphs whose name contains this")
    ap.add_argument("--steps", type=int, default=v1.PROFILE_STEPS, help="profiled steps")
    ap.add_argument("--force", action="store_true", help="rebuild graphs that exist")
    ap.add_argument("--hub", action="store_true", help="also the keras-hub backbones (needs keras-hub)")
    args = ap.parse_args(argv)
    GRAPHS_DIR.mkdir(exist_ok=True)
    for name, builder in {**KERAS, **(HUB if args.hub else {})}.items():
        if (args.only and args.only not in name) or ((GRAPHS_DIR / f"{name}.json.gz").exists() and not args.force):
            continue
        t0 = time.perf_counter()
        v1.build_real(name, builder, args.steps, graphs_dir=GRAPHS_DIR, origin=ORIGIN, purpose=PURPOSE)
        print(f"{name}: built in {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
    main()
