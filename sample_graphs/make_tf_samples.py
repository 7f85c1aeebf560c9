"""Export the TensorFlow sample graphs: real Keras training steps, profiled on this CPU.

Run from the repository root (needs the ``tf`` extra)::

    python sample_graphs/make_tf_samples.py [--steps 10] [--only transformer]

Each model is a small but complete Keras 3 model. Its training step (forward,
gradients, Adam) is built and flattened by `pardnn.frontends.tensorflow.import_keras`
and profiled for ``--steps`` steps on the host CPU; the graph is written as
``sample_graphs/tf_<name>.json.gz``. Profiles differ from run to run and
machine to machine, so regenerated files are not byte-identical; their
structure (node names, edges, groups) is.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def transformer(keras, rng, batch=16, seq=32, vocab=1000, d_model=64, heads=4, ff=128, layers=4, classes=10):
    """A Transformer encoder classifier: token + position embeddings, ``layers`` post-norm blocks."""
    tokens = keras.Input((seq,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(vocab, d_model, name="embed")(tokens)
    pos = keras.layers.Embedding(seq, d_model, name="pos_embed")(keras.ops.arange(seq))
    x = x + pos
    for i in range(layers):
        att = keras.layers.MultiHeadAttention(heads, d_model // heads, name=f"layer{i}_attention")(x, x)
        x = keras.layers.LayerNormalization(name=f"layer{i}_norm1")(x + keras.layers.Dropout(0.1)(att))
        h = keras.layers.Dense(ff, activation="gelu", name=f"layer{i}_ff1")(x)
        h = keras.layers.Dense(d_model, name=f"layer{i}_ff2")(h)
        x = keras.layers.LayerNormalization(name=f"layer{i}_norm2")(x + keras.layers.Dropout(0.1)(h))
    x = keras.layers.GlobalAveragePooling1D()(x)
    out = keras.layers.Dense(classes, name="classifier")(x)
    model = keras.Model(tokens, out, name=f"transformer_{layers}l")
    data = (rng.integers(0, vocab, (batch, seq)).astype("int32"), rng.integers(0, classes, (batch,)).astype("int32"))
    return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), data


def resnet(keras, rng, batch=16, size=32, widths=(16, 32, 64), blocks=2, classes=10):
    """A ResNet-style CNN for 32x32 images: a stem, ``len(widths)`` stages of ``blocks`` basic blocks."""
    L = keras.layers
    inp = keras.Input((size, size, 3), name="images")
    x = L.Conv2D(widths[0], 3, padding="same", use_bias=False, name="stem_conv")(inp)
    x = L.ReLU()(L.BatchNormalization(name="stem_bn")(x))
    for s, w in enumerate(widths):
        for b in range(blocks):
            stride = 2 if (b == 0 and s > 0) else 1
            name = f"stage{s}_block{b}"
            h = L.Conv2D(w, 3, strides=stride, padding="same", use_bias=False, name=f"{name}_conv1")(x)
            h = L.ReLU()(L.BatchNormalization(name=f"{name}_bn1")(h))
            h = L.Conv2D(w, 3, padding="same", use_bias=False, name=f"{name}_conv2")(h)
            h = L.BatchNormalization(name=f"{name}_bn2")(h)
            if stride != 1 or x.shape[-1] != w:
                x = L.BatchNormalization(name=f"{name}_proj_bn")(
                    L.Conv2D(w, 1, strides=stride, use_bias=False, name=f"{name}_proj")(x))
            x = L.ReLU()(L.Add()([x, h]))
    x = L.GlobalAveragePooling2D()(x)
    out = L.Dense(classes, name="classifier")(x)
    model = keras.Model(inp, out, name=f"resnet{2 + 2 * blocks * len(widths)}")
    data = (rng.standard_normal((batch, size, size, 3)).astype("float32"),
            rng.integers(0, classes, (batch,)).astype("int32"))
    return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), data


def lstm(keras, rng, batch=16, seq=20, features=32, hidden=64, layers=4, classes=10):
    """A stacked LSTM sequence classifier (Keras's LSTM: a while loop per layer)."""
    inp = keras.Input((seq, features), name="sequence")
    x = inp
    for i in range(layers):
        x = keras.layers.LSTM(hidden, return_sequences=i < layers - 1, name=f"lstm{i}")(x)
    out = keras.layers.Dense(classes, name="classifier")(x)
    model = keras.Model(inp, out, name=f"lstm_{layers}l")
    data = (rng.standard_normal((batch, seq, features)).astype("float32"),
            rng.integers(0, classes, (batch,)).astype("int32"))
    return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), data


MODELS = {
    # file name: (builder, graph name)
    "tf_transformer_4l.json.gz": (transformer, "keras-transformer-4l"),
    "tf_resnet14.json.gz": (resnet, "keras-resnet14"),
    "tf_lstm_4l.json.gz": (lstm, "keras-lstm-4l"),
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10, help="profiled steps per model (default 10)")
    ap.add_argument("--only", help="build only the model whose file name contains this")
    ap.add_argument("--out", default=str(HERE), help="output directory (default: sample_graphs/)")
    args = ap.parse_args(argv)

    import keras

    from pardnn.frontends import FrontendOptions
    from pardnn.frontends.tensorflow import import_keras
    from pardnn.ir import save_graph

    for out, (build, name) in MODELS.items():
        if args.only and args.only not in out:
            continue
        keras.backend.clear_session()   # Keras numbers names per process: start each model afresh
        keras.utils.set_random_seed(0)
        rng = np.random.default_rng(0)
        model, loss, batch = build(keras, rng)
        t0 = time.perf_counter()
        imp = import_keras(model, loss, keras.optimizers.Adam(1e-3, name="adam"), batch,
                           options=FrontendOptions(name=name, profile_steps=args.steps))
        model_meta = {"builder": f"sample_graphs/make_tf_samples.py:{build.__name__}",
                      "parameters": int(sum(np.prod(v.shape) for v in model.trainable_variables)),
                      "batch": int(len(batch[1])), "keras": keras.__version__}
        g = dataclasses.replace(imp.graph, meta={**imp.graph.meta, "model": model_meta})
        path = save_graph(g, Path(args.out) / out)
        print(f"{out}: {g.num_nodes} nodes, {g.num_edges} edges, {len(g.group_names)} groups, "
              f"phases {g.meta['phases']}, compute {g.time_us.sum() / 1e3:.1f} ms, "
              f"{path.stat().st_size / 1e3:.0f} kB, {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
