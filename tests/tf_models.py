"""Small real Keras models and SavedModels for the TensorFlow frontend tests (needs TensorFlow)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def mlp(keras, batch: int = 8):
    """16 -> Dense(32, relu) -> Dense(4): 4 variables, 676 parameters; MSE; one real batch."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((16,), name="x")
    h = keras.layers.Dense(32, activation="relu", name="hidden")(inp)
    out = keras.layers.Dense(4, name="head")(h)
    model = keras.Model(inp, out, name="mlp")
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((batch, 16)).astype("float32"), rng.standard_normal((batch, 4)).astype("float32"))
    return model, keras.losses.MeanSquaredError(), data


def big_mlp(keras, batch: int = 256):
    """512 -> Dense(512) -> Dense(8): one large MatMul (2 x 256 x 512 x 512 = 134 MFLOP) among tiny ops."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((512,), name="x")
    h = keras.layers.Dense(512, activation="relu", name="wide")(inp)
    out = keras.layers.Dense(8, name="head")(h)
    model = keras.Model(inp, out, name="big_mlp")
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((batch, 512)).astype("float32"), rng.standard_normal((batch, 8)).astype("float32"))
    return model, keras.losses.MeanSquaredError(), data


def lstm(keras, batch: int = 4, seq: int = 5):
    """A one-layer LSTM (a while loop) over ``seq`` steps of 3 features, hidden 8, then Dense(2)."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((seq, 3), name="x")
    h = keras.layers.LSTM(8, name="lstm")(inp)
    out = keras.layers.Dense(2, name="head")(h)
    model = keras.Model(inp, out, name="tiny_lstm")
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((batch, seq, 3)).astype("float32"), rng.standard_normal((batch, 2)).astype("float32"))
    return model, keras.losses.MeanSquaredError(), data


def save_train_savedmodel(tf, keras, path: Path, *, batch: int | None = 8) -> Path:
    """Save the MLP as a SavedModel with a ``train_step`` and a ``serving_default`` signature.

    ``batch=None`` leaves the batch dimension unknown in both signatures.
    """
    model, loss_fn, _ = mlp(keras)
    opt = keras.optimizers.Adam(1e-3)
    opt.build(model.trainable_variables)
    x_spec = tf.TensorSpec((batch, 16), tf.float32, name="x")
    y_spec = tf.TensorSpec((batch, 4), tf.float32, name="y")

    class Trainer(tf.Module):
        def __init__(self):
            super().__init__()
            self.model, self.opt = model, opt

        @tf.function(input_signature=[x_spec, y_spec])
        def train_step(self, x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, self.model(x, training=True))
            grads = tape.gradient(loss, self.model.trainable_variables)
            self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
            return {"loss": loss}

        @tf.function(input_signature=[x_spec])
        def serve(self, x):
            return {"y": self.model(x, training=False)}

    trainer = Trainer()
    tf.saved_model.save(trainer, str(path), signatures={"train_step": trainer.train_step,
                                                        "serving_default": trainer.serve})
    return path


def transformer(keras, batch: int = 4, seq: int = 8, vocab: int = 64, d_model: int = 16, heads: int = 2,
                ff: int = 32, classes: int = 4):
    """A one-block Transformer encoder classifier (token and position embeddings, attention, dropout, layer
    norms, feed-forward). The position indices are a constant the traced step captures."""
    keras.utils.set_random_seed(0)
    L = keras.layers
    tokens = keras.Input((seq,), dtype="int32", name="tokens")
    x = L.Embedding(vocab, d_model, name="embed")(tokens)
    x = x + L.Embedding(seq, d_model, name="pos_embed")(keras.ops.arange(seq))
    att = L.MultiHeadAttention(heads, d_model // heads, name="attention")(x, x)
    x = L.LayerNormalization(name="norm1")(x + L.Dropout(0.1, name="drop1")(att))
    h = L.Dense(ff, activation="gelu", name="ff1")(x)
    h = L.Dense(d_model, name="ff2")(h)
    x = L.LayerNormalization(name="norm2")(x + h)
    x = L.GlobalAveragePooling1D(name="pool")(x)
    out = L.Dense(classes, name="classifier")(x)
    model = keras.Model(tokens, out, name="tiny_transformer")
    rng = np.random.default_rng(0)
    data = (rng.integers(0, vocab, (batch, seq)).astype("int32"), rng.integers(0, classes, (batch,)).astype("int32"))
    return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), data


def cnn(keras, batch: int = 4, size: int = 12, classes: int = 4):
    """A small CNN: two 3x3 convolutions with batch norm (moving statistics updated each step), pooling, Dense."""
    keras.utils.set_random_seed(0)
    L = keras.layers
    inp = keras.Input((size, size, 3), name="images")
    x = L.Conv2D(8, 3, padding="same", use_bias=False, name="conv1")(inp)
    x = L.ReLU(name="relu1")(L.BatchNormalization(name="bn1")(x))
    x = L.MaxPooling2D(name="pool1")(x)
    x = L.Conv2D(16, 3, padding="same", name="conv2")(x)
    x = L.ReLU(name="relu2")(L.BatchNormalization(name="bn2")(x))
    x = L.GlobalAveragePooling2D(name="gap")(x)
    out = L.Dense(classes, name="classifier")(x)
    model = keras.Model(inp, out, name="tiny_cnn")
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((batch, size, size, 3)).astype("float32"),
            rng.integers(0, classes, (batch,)).astype("int32"))
    return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), data


def save_keras_train_savedmodel(tf, keras, build, path: Path) -> Path:
    """Save ``build(keras)``'s model as a SavedModel whose ``train_step`` signature is one Adam step."""
    model, loss_fn, (x, y) = build(keras)
    opt = keras.optimizers.Adam(1e-2)
    opt.build(model.trainable_variables)
    x_spec = tf.TensorSpec(x.shape, tf.as_dtype(x.dtype), name="x")
    y_spec = tf.TensorSpec(y.shape, tf.as_dtype(y.dtype), name="y")

    class Trainer(tf.Module):
        def __init__(self):
            super().__init__()
            self.model, self.opt = model, opt
            self.state = list(model.variables)   # tracks what Keras 3 leaves untracked (dropout seed states)

        @tf.function(input_signature=[x_spec, y_spec])
        def train_step(self, x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, self.model(x, training=True))
            grads = tape.gradient(loss, self.model.trainable_variables)
            self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
            return {"loss": loss}

    trainer = Trainer()
    tf.saved_model.save(trainer, str(path), signatures={"train_step": trainer.train_step})
    return path
