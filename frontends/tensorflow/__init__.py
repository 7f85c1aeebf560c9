"""TensorFlow frontend: SavedModels, GraphDefs and Keras train steps as `pardnn.graph`s.

Three ways in, one flat graph out (forward, backward and optimizer ops all
visible, functions inlined, loop back edges cut):

* `load_tensorflow(path, options)`: a SavedModel directory, a ``.pb`` /
  ``.pbtxt`` GraphDef, or a compiled Keras model file (``.keras``, ``.h5``:
  its training step, `keras_file`); what ``pardnn import`` and ``pardnn
  partition`` call.
* `import_tensorflow(path, options)`: the same, returning a `TFImport` that
  also holds the flat GraphDef, feeds and fetches (`TFModel`) for the backend.
* `import_keras(model, loss, optimizer, batch)`: builds the Keras model's
  training step as a ``tf.function`` and imports it.
* `import_function(fn, *args)`: any ``tf.function`` (a custom training step),
  traced for ``args`` and imported.

See docs/tensorflow.md for the rules (colocation groups, host pins, costs).
"""

from __future__ import annotations

from pathlib import Path

from pardnn.errors import InputError
from pardnn.ir import OpGraph

from ..options import FrontendOptions
from .build import TFImport, to_opgraph
from pardnn.progress import substage

from .keras_file import is_keras_file, read_keras_file
from .keras_step import function_step, keras_train_step, make_train_step
from .model import Feed, TFModel
from .readers import read_graphdef, read_savedmodel

__all__ = ["load_tensorflow", "import_tensorflow", "import_keras", "import_function", "read_model", "TFImport",
           "TFModel", "Feed", "make_train_step"]


def read_model(path: str | Path, options: FrontendOptions | None = None) -> TFModel:
    """The flat `TFModel` of a SavedModel directory, GraphDef file or compiled Keras model file (no costs yet)."""
    opts = options or FrontendOptions()
    p = Path(path)
    if p.is_dir():
        return read_savedmodel(p, opts.signature, name=opts.name)
    if not p.exists():
        raise InputError(f"{p}: no such file or directory")
    if is_keras_file(p):
        return read_keras_file(p, batch_size=opts.batch_size, name=opts.name)
    if not p.name.lower().endswith((".pb", ".pbtxt")):
        raise InputError(f"{p}: expected a SavedModel directory, a .pb/.pbtxt GraphDef or a .keras model")
    return read_graphdef(p, opts.signature, name=opts.name)


def import_tensorflow(path: str | Path, options: FrontendOptions | None = None) -> TFImport:
    """Import a SavedModel, GraphDef or Keras model file: the weighted graph and the flat model behind it."""
    opts = options or FrontendOptions()
    model = read_model(path, opts)
    with substage(f"weighing {len(model.graph_def.node):,} ops"):
        return to_opgraph(model, profile_steps=opts.profile_steps, batch_size=opts.batch_size,
                          device_profile=opts.device_profile, name=opts.name)


def load_tensorflow(path: str | Path, options: FrontendOptions | None = None) -> OpGraph:
    """The weighted `OpGraph` of a SavedModel directory, GraphDef or Keras model file (``pardnn import``)."""
    return import_tensorflow(path, options).graph


def import_keras(model, loss, optimizer, batch=None, *, input_signature=None,
                 options: FrontendOptions | None = None) -> TFImport:
    """Build ``model``'s training step with ``loss`` and ``optimizer`` and import it.

    ``batch`` is one ``(x, y)`` batch (its shapes fix the graph's; its values
    feed profiled steps), or give ``input_signature=(x_spec, y_spec)``.
    ``options`` carries ``profile_steps``, ``batch_size``, ``device_profile``
    and ``name`` as on the command line.

    >>> import keras, numpy as np
    >>> m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    >>> imp = import_keras(m, "mse", "adam", (np.zeros((16, 8)), np.zeros((16, 4))))
    >>> imp.graph.num_nodes > 50, imp.model.fetches
    (True, ('Identity:0',))
    """
    opts = options or FrontendOptions()
    tfm = keras_train_step(model, loss, optimizer, batch, input_signature=input_signature, name=opts.name)
    return to_opgraph(tfm, profile_steps=opts.profile_steps, batch_size=opts.batch_size,
                      device_profile=opts.device_profile, name=opts.name)


def import_function(fn, *args, options: FrontendOptions | None = None) -> TFImport:
    """Trace the ``tf.function`` ``fn`` on ``args`` (real values: they fix the shapes and feed runs) and import it.

    Variables the function captures become variable nodes named after them.

    >>> import numpy as np, tensorflow as tf
    >>> v = tf.Variable(tf.ones((4, 4)), name="w")
    >>> @tf.function
    ... def step(x):
    ...     v.assign_sub(0.1 * tf.matmul(x, v))
    ...     return tf.reduce_sum(v)
    >>> imp = import_function(step, np.ones((4, 4), "float32"))
    >>> "w" in imp.graph.names
    True
    """
    opts = options or FrontendOptions()
    tfm = function_step(fn, *args, name=opts.name)
    return to_opgraph(tfm, profile_steps=opts.profile_steps, batch_size=opts.batch_size,
                      device_profile=opts.device_profile, name=opts.name)
