"""A saved Keras model (``.keras``, or a legacy ``.h5``) as its training step, for the command line.

A model saved after ``model.compile(optimizer, loss)`` carries its loss and
optimizer, which is all `keras_train_step` needs besides one batch:

* **the step** is what ``model.fit`` runs for one batch: the forward pass,
  the compiled loss through ``model.compute_loss`` (so several outputs, loss
  weights and regularisation losses count as they do in ``fit``), the
  gradients and the compiled optimizer's ``apply_gradients``. Metrics are
  left out: they do not change the weights.
* **the batch** is made here, deterministically (one seeded generator): a
  floating-point input is drawn from a normal distribution, an integer
  input (token ids) uniformly over the values the step takes (an
  embedding's rows: `pardnn.frontends.tensorflow.inputs`; 1 where the
  step sets no limit), a string input from {"0", "1"}; a label has the output's shape and dtype,
  drawn in [0, 1), except for sparse categorical losses, whose labels are
  class indices (the output's shape less its last axis, int32) in
  [0, classes), and ``categorical_crossentropy``, whose labels are one-hot.
  The batch size is the model's when its inputs fix one, else
  ``--batch-size``. Any other unknown dimension is an error naming the input.

A model saved without ``compile`` (no optimizer or no loss) is refused with
one line saying what is missing. Loading uses ``keras.saving.load_model``
with ``safe_mode`` on: a file that needs custom objects or unsafe lambdas
fails with Keras's own first line.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np

from pardnn.errors import InputError
from pardnn.progress import substage

from ..common import first_line
from ._tf import tf
from .keras_step import keras_train_step
from .model import TFModel
from .profile import with_index_draws

KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")
"""File names `read_keras_file` reads."""

_SPARSE = ("sparse_categorical_crossentropy", "sparsecategoricalcrossentropy", "sparse_categorical_focal")


def is_keras_file(path: str | Path) -> bool:
    return Path(path).name.lower().endswith(KERAS_SUFFIXES)


def read_keras_file(path: str | Path, *, batch_size: int | None = None, name: str | None = None) -> TFModel:
    """The training step of the compiled Keras model saved at ``path`` (rules in the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    with substage(f"loading the Keras model {p.name}"):
        model = _load(p)
    optimizer = _unbuilt_if_foreign(model, getattr(model, "optimizer", None))
    loss = getattr(model, "loss", None)
    missing = [what for what, value in (("an optimizer", optimizer), ("a loss", loss)) if value is None]
    if missing:
        raise InputError(f"{p}: the model was saved without {' and '.join(missing)}; pardnn builds the training "
                         "step from a compiled model: call model.compile(optimizer=..., loss=...) before "
                         "model.save, or use pardnn.frontends.tensorflow.import_keras from Python")
    batch = synthetic_batch(model, loss, batch_size, where=str(p))

    def compiled_loss(y, y_pred):
        return model.compute_loss(x=None, y=y, y_pred=y_pred)

    compiled_loss.__name__ = _loss_name(loss)
    with substage("building the training step"):
        tfm = keras_train_step(model, compiled_loss, optimizer, batch, name=name or model.name or p.stem,
                               where=str(p))
    meta = dict(tfm.extra_meta)
    meta["keras_file"] = p.name
    # --batch-size sized the step where it filled a batch dimension the model leaves open (one it fixes
    # refuses another value, above)
    open_batch = any(list(t.shape)[:1] == [None] for t in list(model.inputs) + list(model.outputs))
    # integer inputs (token ids) over the values the step takes (an embedding's rows), not just 0 and 1;
    # the step's feeds are x's leaves, then y's (whose labels already span the classes)
    x_feeds = [f.name for f in tfm.feeds[:len(tf.nest.flatten(batch[0]))]]
    values = with_index_draws(tfm, dict(tfm.feed_values or {}), None, names=x_feeds)
    return _replace(tfm, source=str(p), extra_meta=meta, batch_size=batch_size if open_batch else None,
                    feed_values=values, feeds=_named_feeds(model, tfm.feeds, len(x_feeds)))


def _named_feeds(model, feeds, n_x: int):
    """``feeds`` (x's leaves, then y's, as the step was traced) with the names a Keras user gives them: the
    model's input names, and for several outputs the output names (`Feed.arg`; ``run --inputs`` takes them)."""
    import dataclasses

    def leaves(which: str, names: list[str]) -> list[str]:
        return [str(n) for n in tf.nest.flatten(_packed(model, which, names))] if names else []

    x_names = leaves("input", [getattr(t, "name", "") or "" for t in list(getattr(model, "inputs", None) or [])])
    outputs = list(getattr(model, "outputs", None) or [])
    y_names = leaves("output", list(getattr(model, "output_names", None) or [])) if len(outputs) > 1 else []
    names = (x_names if len(x_names) == n_x else [""] * n_x) + y_names
    taken = {f.name.rsplit(":", 1)[0] for f in feeds}
    out = []
    for f, arg in zip(feeds, names + [""] * (len(feeds) - len(names))):
        own = f.name.rsplit(":", 1)[0]
        out.append(dataclasses.replace(f, arg=arg) if arg and arg != own and arg not in taken else f)
    return tuple(out)


def _replace(tfm: TFModel, **changes) -> TFModel:
    import dataclasses

    return dataclasses.replace(tfm, **changes)


def _load(p: Path):
    try:
        import keras
    except ImportError as exc:   # pragma: no cover - keras comes with tensorflow
        raise InputError(f"{p}: reading a Keras model needs keras: {exc}") from None
    if p.suffix.lower() == ".keras":
        import zipfile

        if not zipfile.is_zipfile(p):    # else Keras says "File not found" of a file that is there
            raise InputError(f"{p}: not a loadable Keras model (a .keras file is a zip archive; this is not one)")
    try:
        with warnings.catch_warnings():
            # An optimizer saved before its first step holds fewer variables than the built one: Keras warns
            # that it skips loading them, which is right (they start at zero either way).
            warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
            return keras.saving.load_model(str(p), compile=True, safe_mode=True)
    except Exception as exc:
        missing = re.search(r"Could not locate (?:class|function) '([^']+)'", str(exc))
        if missing and _keras_has(keras, missing.group(1)) and not _saved_as_own(p, missing.group(1)):
            # a class of Keras's own, in an entry Keras did not write (no module, no registered name): damaged
            raise InputError(f"{p}: not a loadable Keras model (its config names Keras's {missing.group(1)!r} "
                             "without the module Keras reads it from: the file is damaged, or not written by "
                             "Keras)") from None
        if missing:     # Keras words it at the end of a long message that starts with the enclosing model
            raise InputError(f"{p}: the Keras model uses {missing.group(1)!r}, a class or function of its own "
                             "code that Keras cannot rebuild without it; load the model in Python with that "
                             "code imported and give it to pardnn.frontends.tensorflow.import_keras") from None
        if "safe_mode" in str(exc):    # a Lambda layer's Python code: Keras's advice names a loader argument
            raise InputError(f"{p}: the Keras model holds Python code (a Lambda layer) that Keras loads only "
                             "with safe_mode=False; if you trust the file, load it in Python with "
                             "keras.saving.load_model(path, safe_mode=False) and give the model to "
                             "pardnn.frontends.tensorflow.import_keras") from None
        raise InputError(f"{p}: not a loadable Keras model ({first_line(exc)})") from None


def _saved_as_own(p: Path, name: str) -> bool:
    """Whether the first entry of ``p``'s config for class ``name`` says what Keras writes of a class of the
    user's own (a ``registered_name``, or a module of its own): a user's ``Attention`` layer shares its name with
    Keras's. True when the config cannot be read (the user's code is the likelier cause)."""
    import json
    import zipfile

    try:
        with zipfile.ZipFile(p) as z:
            config = json.loads(z.read("config.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return True
    stack = [config]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            if o.get("class_name") == name:
                module = o.get("module")
                return bool(o.get("registered_name")) or (isinstance(module, str)
                                                          and not module.startswith("keras"))
            stack.extend(reversed(list(o.values())))
        elif isinstance(o, list):
            stack.extend(reversed(o))
    return True


def _keras_has(keras, name: str) -> bool:
    """Whether ``name`` is a class or function Keras itself provides (a model, a layer, a loss, ...)."""
    spaces = (keras, keras.models, keras.layers, keras.losses, keras.optimizers, keras.metrics, keras.activations,
              keras.initializers, keras.regularizers, keras.constraints)
    return any(callable(getattr(ns, name, None)) for ns in spaces)


def _unbuilt_if_foreign(model, optimizer):
    """``optimizer``, or a new one from its config when it was built for variables other than the model's.

    A legacy ``.h5`` file's compiled optimizer comes back built for no variables at all, and Keras refuses
    to apply it to the model's ("can only be called for the variables it was originally built with"). Its
    state would start at zero in the traced step either way, so its config is all that matters."""
    if optimizer is None or not getattr(optimizer, "built", False):
        return optimizer
    own = {id(v) for v in getattr(optimizer, "_trainable_variables", None) or ()}
    if all(id(v) in own for v in model.trainable_variables):
        return optimizer
    return type(optimizer).from_config(optimizer.get_config())


def _loss_name(loss) -> str:
    if isinstance(loss, str):
        return loss
    if isinstance(loss, (list, tuple)):
        return "+".join(_loss_name(x) for x in loss)
    if isinstance(loss, dict):
        return "+".join(f"{k}:{_loss_name(v)}" for k, v in sorted(loss.items()))
    return str(getattr(loss, "name", None) or getattr(loss, "__name__", None) or type(loss).__name__)


def _per_output(loss, output_names: list[str]) -> list:
    if isinstance(loss, dict):
        return [loss.get(n) for n in output_names]
    if isinstance(loss, (list, tuple)):
        return list(loss) + [None] * (len(output_names) - len(loss))
    return [loss] * len(output_names)


def _kind(loss) -> str:
    key = _loss_name(loss).lower().replace(" ", "")
    if any(s in key for s in _SPARSE):
        return "sparse"
    if "categorical_crossentropy" in key or "categoricalcrossentropy" in key:
        return "one-hot"
    return "dense"


def _dims(shape, what: str, batch_size: int | None, where: str) -> tuple[int, ...]:
    dims = list(shape)
    if not dims:
        return ()
    if dims[0] is None:
        if batch_size is None:
            raise InputError(f"{where}: {what} has no fixed batch size; give --batch-size")
        dims[0] = batch_size
    elif batch_size is not None and dims[0] != batch_size:
        raise InputError(f"{where}: {what} has batch size {dims[0]} fixed in the model, not --batch-size "
                         f"{batch_size}")
    if any(d is None for d in dims[1:]):
        raise InputError(f"{where}: {what} has unknown dimensions {tuple(shape)} besides the batch; save the model "
                         "with a fixed input shape (keras.Input(shape=...))")
    return tuple(int(d) for d in dims)


def synthetic_batch(model, loss, batch_size: int | None, *, where: str):
    """One deterministic ``(x, y)`` batch that fits ``model``'s inputs and ``loss``'s labels.

    Integer inputs are 1 here (booleans random); once the step is traced, `read_keras_file` redraws those the
    step uses as indices over all the values they may take (`pardnn.frontends.tensorflow.inputs`).
    """
    inputs = list(getattr(model, "inputs", None) or [])
    outputs = list(getattr(model, "outputs", None) or [])
    if not inputs or not outputs:
        raise InputError(f"{where}: the model has no known inputs and outputs (a subclassed model that was "
                         "never built on keras.Input); use import_keras from Python with a sample batch")
    rng = np.random.default_rng(0)
    xs = []
    for t in inputs:
        shape = _dims(t.shape, f"input {getattr(t, 'name', '?')!r}", batch_size, where)
        if str(t.dtype) == "string":      # no NumPy dtype; tokens as text, as the integers below
            xs.append(rng.integers(0, 2, size=shape).astype(str).astype(object))
            continue
        dtype = np.dtype(str(t.dtype))
        if np.issubdtype(dtype, np.floating):
            xs.append(rng.normal(size=shape).astype(dtype))
        elif dtype == np.bool_:
            xs.append(rng.integers(0, 2, size=shape).astype(dtype))
        else:   # 1: a mask that keeps every position; `read_keras_file` redraws the ones used as indices
            xs.append(np.ones(shape, dtype))
    names = [getattr(t, "name", str(i)) for i, t in enumerate(outputs)]
    output_names = list(getattr(model, "output_names", None) or names)
    ys = []
    for t, out_loss, oname in zip(outputs, _per_output(loss, output_names), output_names):
        shape = _dims(t.shape, f"output {oname!r}", batch_size, where)
        kind = _kind(out_loss) if out_loss is not None else "dense"
        classes = shape[-1] if shape else 1
        if kind == "sparse":
            ys.append(rng.integers(0, classes, size=shape[:-1]).astype(np.int32))
        elif kind == "one-hot":
            ys.append(np.eye(classes, dtype=np.dtype(str(t.dtype)))[rng.integers(0, classes, size=shape[:-1])])
        else:
            ys.append(rng.random(size=shape).astype(np.dtype(str(t.dtype))))
    return _packed(model, "input", xs), _packed(model, "output", ys)


def _packed(model, which: str, flat: list):
    """``flat`` (in the order of ``model.inputs`` or ``model.outputs``) in the structure the model was built with:
    a dict for a model of named inputs ({"a": ..., "b": ...}), which Keras refuses a list for."""
    import keras

    try:
        structure = getattr(model, which)
    except (AttributeError, ValueError):      # no single structure (a layer called more than once)
        structure = None
    if structure is None or len(keras.tree.flatten(structure)) != len(flat):
        return flat[0] if len(flat) == 1 else flat
    return keras.tree.pack_sequence_as(structure, flat)
