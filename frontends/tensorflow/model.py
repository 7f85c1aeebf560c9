"""What the TensorFlow frontend hands on: the flat model and where its names come from.

A `TFModel` is one training (or inference) step as a single flat GraphDef,
with no function calls left, plus what is needed to run it: the tensors to
feed, the tensors to fetch, the ops to run for their side effects, and a way
to get the variables' starting values. The `pardnn.graph` built from it uses
the GraphDef's node names unchanged, so the backend can write a placement
back into ``graph_def`` node by node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np


def split_tensor_name(name: str) -> tuple[str, int]:
    """``"a/b:1"`` -> ``("a/b", 1)``; ``"a/b"`` -> ``("a/b", 0)``.

    >>> split_tensor_name("dense/MatMul:1"), split_tensor_name("x")
    (('dense/MatMul', 1), ('x', 0))
    """
    node, sep, port = name.rpartition(":")
    if sep and port.isdigit():
        return node, int(port)
    return name, 0


def parse_input(ref: str) -> tuple[str, int, bool]:
    """A NodeDef input string as ``(node, port, is_control)``.

    >>> parse_input("^init"), parse_input("a:2"), parse_input("a")
    (('init', 0, True), ('a', 2, False), ('a', 0, False))
    """
    if ref.startswith("^"):
        return ref[1:], 0, True
    node, port = split_tensor_name(ref)
    return node, port, False


@dataclass(frozen=True)
class Feed:
    """A tensor the step takes as input (a ``Placeholder``'s output)."""

    name: str
    """Tensor name, ``node:port``."""
    dtype: str
    """TensorFlow dtype name (``float32``, ``int64``, ...)."""
    shape: tuple[int | None, ...] | None
    """Static shape; None entries are unknown dimensions, None itself an unknown rank."""
    arg: str = ""
    """The signature's name for it (a SavedModel signature's input key), when it has one."""

    @property
    def node(self) -> str:
        return split_tensor_name(self.name)[0]


@dataclass(frozen=True, eq=False)
class TFModel:
    """One step of a TensorFlow model as a flat GraphDef, ready to analyse or run."""

    name: str
    graph_def: Any
    """``tf.compat.v1.GraphDef`` with every function inlined; node names are the graph's names."""
    feeds: tuple[Feed, ...]
    fetches: tuple[str, ...]
    """Tensor names the step returns (the loss, ...)."""
    targets: tuple[str, ...] = ()
    """Op names run for their side effects (variable updates not reached from the fetches)."""
    source: str = ""
    """Where it came from: a path, or ``keras``."""
    source_format: str = ""
    """``tensorflow-savedmodel``, ``tensorflow-graphdef`` or ``keras``."""
    signature: str | None = None
    variable_values: Callable[[], Mapping[str, np.ndarray]] | None = None
    """Starting values of the variables, by variable node name (None: unknown; runs draw them)."""
    feed_values: Mapping[str, np.ndarray] | None = None
    """A real input batch by feed tensor name, when one was given (the Keras API)."""
    inlined_functions: int = 0
    batch_size: int | None = None
    """The batch size that sized the step when it was built (a Keras model file's unknown batch dimension,
    filled by ``--batch-size``); the graph records it, so a placement of it is run with the same batch."""
    extra_meta: Mapping[str, Any] = field(default_factory=dict)
    variable_objects: Mapping[str, Any] | None = None
    """The live ``tf.Variable`` behind each variable node, when the step was traced in this process
    (the Keras and ``tf.function`` APIs); a placed run can write its values back into them."""
