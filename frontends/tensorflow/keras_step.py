"""A Keras model's training step, built here, as a flat `TFModel`.

`keras_train_step` writes the usual step as a ``tf.function``::

    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))

traces it for the batch's shapes, and turns the trace into a standalone
GraphDef: each captured variable becomes a ``VarHandleOp`` named after the
variable (``dense/kernel``, ``adam/dense_kernel_momentum``, ...) in place of
the function's resource placeholder, captured constants become ``Const``
nodes, and nested functions (``While`` bodies of recurrent layers, ...) are
inlined by `flatten.flatten`. The variables' current values and the batch
are kept, so a profiled run uses them.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from pardnn.errors import InputError
from pardnn.progress import substage

from ._tf import tf
from .flatten import flatten, prune
from .model import Feed, TFModel, parse_input


def _spec_of(x) -> Any:
    t = tf.convert_to_tensor(x)
    return tf.TensorSpec(t.shape, t.dtype)


def _resolve(loss, optimizer):
    import keras

    loss_fn = keras.losses.get(loss) if isinstance(loss, (str, dict)) else loss
    opt = keras.optimizers.get(optimizer) if isinstance(optimizer, (str, dict)) else optimizer
    if not callable(loss_fn):
        raise InputError(f"loss {loss!r} is not callable")
    return loss_fn, opt


def make_train_step(model, loss_fn: Callable, optimizer) -> Callable:
    """The training step of ``model`` as a (not yet traced) ``tf.function`` of ``(x, y)``."""

    def train_step(x, y):
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            loss = loss_fn(y, pred)
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    return tf.function(train_step)


def keras_train_step(model, loss, optimizer, batch=None, *, input_signature=None,
                     name: str | None = None, where: str | None = None) -> TFModel:
    """Trace ``model``'s training step and return it as a flat `TFModel`.

    Parameters
    ----------
    model : keras.Model
    loss : a Keras loss (object, function or name such as ``"mse"``)
    optimizer : a Keras optimizer (object or name such as ``"adam"``)
    batch : ``(x, y)``, one real batch (arrays or tensors; ``x`` may be a list or
        dict for several inputs). Its shapes fix the graph's shapes and its
        values feed profiled runs.
    input_signature : ``(x_spec, y_spec)`` as ``tf.TensorSpec`` structures,
        instead of a batch (a ``None`` dimension then needs ``--batch-size``).
    where : what messages name (default: the model), such as the file it was read from.
    """
    if batch is None and input_signature is None:
        raise InputError("keras: give a sample batch (x, y) or an input_signature (x_spec, y_spec)")
    loss_fn, opt = _resolve(loss, optimizer)
    if batch is not None:
        x, y = batch
        specs = (tf.nest.map_structure(_spec_of, x), tf.nest.map_structure(_spec_of, y))
        if not model.built:
            model(x)
    else:
        specs = tuple(input_signature)
    if hasattr(opt, "build") and not getattr(opt, "built", True):
        opt.build(model.trainable_variables)
    step = make_train_step(model, loss_fn, opt)
    return function_model(
        step, specs, batch, name=name or model.name, source=f"keras:{model.name}", source_format="keras",
        signature="train_step", where=where or f"keras model {model.name!r}",
        extra_meta={"optimizer": getattr(opt, "name", type(opt).__name__),
                    "loss": getattr(loss_fn, "name", getattr(loss_fn, "__name__", type(loss_fn).__name__))})


def function_model(fn, specs, args=None, *, name: str, source: str, source_format: str = "tf.function",
                   signature: str | None = None, where: str | None = None,
                   extra_meta: Mapping[str, Any] | None = None) -> TFModel:
    """Trace the ``tf.function`` ``fn`` for ``specs`` (one spec structure per argument) as a flat `TFModel`.

    ``args``, when given, are real argument values; they become the model's
    ``feed_values``. Captured variables become ``VarHandleOp`` nodes named
    after the variables, with their current values and the variables
    themselves kept (``variable_values``, ``variable_objects``).
    """
    where = where or source
    with substage("tracing"):
        cf = fn.get_concrete_function(*specs)
        gd = cf.graph.as_graph_def()
    n_args = len(tf.nest.flatten(specs))
    arg_tensors = cf.inputs[:n_args]
    graph_def, values, objects = _bind_captures(gd, cf, where)
    feeds = tuple(Feed(t.name, t.dtype.name, tuple(t.shape.as_list()) if t.shape.rank is not None else None)
                  for t in arg_tensors)
    feed_values = None
    if args is not None:
        flat_args = [np.asarray(v) for v in tf.nest.flatten(args)]
        feed_values = {f.name: v for f, v in zip(feeds, flat_args)}
    fetches = tuple(t.name for t in tf.nest.flatten(cf.outputs))
    # by name: the function's control outputs are a set, in another order from one process to the next (the
    # graph file's `targets` differed between two imports of one model)
    targets = tuple(sorted(op.name for op in cf.graph.control_outputs))
    keep = [f.node for f in feeds] + [t.split(":")[0] for t in fetches] + list(targets)
    with substage("inlining functions"):
        flat, inlined = flatten(graph_def, keep, where=where)
        flat = prune(flat, keep, where=where)
    present = {n.name for n in flat.node}
    return TFModel(
        name=name, graph_def=flat, feeds=feeds, fetches=fetches,
        targets=tuple(t for t in targets if t in present), source=source, source_format=source_format,
        signature=signature, variable_values=(lambda: values), feed_values=feed_values,
        inlined_functions=inlined, extra_meta=dict(extra_meta or {}),
        variable_objects={k: v for k, v in objects.items() if k in present},
    )


def function_step(fn, *args, name: str | None = None) -> TFModel:
    """A ``tf.function`` (or a plain Python function, wrapped in one) applied to ``args``, as a flat `TFModel`.

    The arguments fix the traced shapes and are kept as the feed values.
    """
    if not hasattr(fn, "get_concrete_function"):
        fn = tf.function(fn)
    specs = tuple(tf.nest.map_structure(_spec_of, a) for a in args)
    label = name or getattr(fn, "__name__", None) or getattr(getattr(fn, "python_function", None), "__name__", "fn")
    return function_model(fn, specs, args, name=label, source=f"tf.function:{label}", signature=label)


def _bind_captures(gd, cf, where: str) -> tuple[Any, Mapping[str, np.ndarray], Mapping[str, Any]]:
    """Replace the function's capture placeholders by variables and constants.

    Returns the new GraphDef, and the variables' values and the variables by node name.
    """
    variables = {id(v.handle): v for v in cf.graph.variables}
    taken = {n.name for n in gd.node}
    rename: dict[str, str] = {}
    values: dict[str, np.ndarray] = {}
    objects: dict[str, Any] = {}
    by_name = {n.name: n for n in gd.node}
    for external, internal in cf.graph.captures:
        node = by_name[internal.op.name]
        var = variables.get(id(external))
        if var is not None:
            base = var.name.split(":")[0]
            new = base
            k = 1
            while new in taken and new != node.name:
                new = f"{base}_{k}"
                k += 1
            taken.add(new)
            node.ClearField("attr")
            node.op = "VarHandleOp"
            node.attr["dtype"].type = var.dtype.as_datatype_enum
            node.attr["shape"].shape.CopyFrom(var.shape.as_proto())
            node.attr["shared_name"].s = new.encode()
            node.attr["container"].s = b""
            rename[node.name] = new
            values[new] = var.numpy()
            objects[new] = var
        elif external.dtype != tf.resource:
            value = external.numpy() if hasattr(external, "numpy") else None
            if value is None:
                raise InputError(f"{where}: the train step captures {internal.name!r}, which is neither a "
                                 "variable nor a constant")
            node.ClearField("attr")
            node.op = "Const"
            node.attr["dtype"].type = external.dtype.as_datatype_enum
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
        else:
            table = any(c.type.startswith("LookupTable") for c in internal.consumers())
            raise InputError(f"{where}: the train step captures a resource {internal.name!r} that is not a "
                             "variable of the model or optimizer" + (
                                 ": a lookup table (StringLookup, IntegerLookup, TextVectorization), which pardnn "
                                 "cannot give a value; apply that layer to the data outside the model" if table
                                 else ""))
    if rename:
        for node in gd.node:
            if node.name in rename:
                node.name = rename[node.name]
            for i, ref in enumerate(node.input):
                src, port, control = parse_input(ref)
                if src in rename:
                    new = rename[src]
                    node.input[i] = f"^{new}" if control else (f"{new}:{port}" if port else new)
    return gd, values, objects
