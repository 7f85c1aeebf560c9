"""One flat GraphDef per step: inline every function, lower control flow, prune.

TensorFlow 2 keeps a step's work in functions: a SavedModel's signature is a
``StatefulPartitionedCall`` of a function that calls others, and loops are
``While`` ops whose bodies are functions. Grappler's function optimizer
inlines them all (nested calls included) and lowers functional ``While`` and
``If`` to ``Enter/Merge/Switch/NextIteration/Exit`` dataflow, so every op of
the forward pass, the gradients and the optimizer becomes a node of one
graph. `flatten` runs that optimizer alone (the MetaOptimizer with only
``"function"`` enabled; nothing else is rewritten, so names stay
predictable: an inlined node is named ``<call node>/<node in the function>``,
and the call node itself survives as an ``IdentityN`` carrying its outputs).

`prune` then keeps only what the step runs: the fetched tensors and target
ops and everything they depend on (data and control inputs), in the
GraphDef's order.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Iterable

from pardnn.errors import InputError

from ..common import first_line
from ._tf import config_pb2, graph_pb2, meta_graph_pb2, tf
from .model import parse_input

log = logging.getLogger("pardnn.frontends.tensorflow")

CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall", "While", "StatelessWhile", "If",
                      "StatelessIf", "Case", "StatelessCase", "SymbolicGradient", "RemoteCall"})


def check_known_ops(graph_def, where: str) -> None:
    """Raise `InputError` naming the first node whose op type TensorFlow does not know.

    Op types that name a function of the graph's library (TF1-style direct
    function calls) are known.
    """
    from tensorflow.python.framework import op_def_registry

    functions = {f.signature.name for f in graph_def.library.function}
    seen: set[str] = set()

    def check(nodes, scope: str) -> None:
        for node in nodes:
            op = node.op
            if op in seen or op in functions:
                continue
            if not op:
                raise InputError(f"{where}: node {node.name!r}{scope} has no op type")
            if op_def_registry.get(op) is None:
                raise InputError(f"{where}: node {node.name!r}{scope} has op type {op!r}, which TensorFlow "
                                 f"{tf.__version__} does not know (a custom op whose library is not loaded?)")
            seen.add(op)

    check(graph_def.node, "")
    for f in graph_def.library.function:
        check(f.node_def, f" in function {f.signature.name!r}")


def flatten(graph_def, keep: Iterable[str], *, where: str):
    """``graph_def`` with every function call inlined and functional control flow lowered.

    ``keep`` names the nodes that must survive (fetches, targets, feeds).
    Returns ``(flat_graph_def, inlined)`` where ``inlined`` counts the
    functions of the library. A GraphDef without functions is returned as it
    is. Call ops grappler could not inline stay as single nodes, with a
    warning.
    """
    n_functions = len(graph_def.library.function)
    if n_functions == 0:
        return graph_def, 0
    mg = meta_graph_pb2.MetaGraphDef()
    mg.graph_def.CopyFrom(graph_def)
    for f in mg.graph_def.library.function:
        # A function with an alternative implementation (e.g. a cuDNN kernel
        # picked at run time) is not inlined unless the choice is removed.
        if "api_implements" in f.attr:
            del f.attr["api_implements"]
    fetch = mg.collection_def["train_op"].node_list
    for name in keep:
        fetch.value.append(name)
    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.min_graph_nodes = -1
    rewrite.optimizers.append("function")
    from tensorflow.python.grappler import tf_optimizer

    try:
        flat = tf_optimizer.OptimizeGraph(config, mg, verbose=False)
    except Exception as exc:  # grappler reports bad graphs as assorted TF errors
        raise InputError(f"{where}: TensorFlow could not inline the model's functions: {first_line(exc)}") from None
    left = sorted({n.op for n in flat.node if n.op in CALL_OPS})
    if left:
        log.warning("%s: %d function call op(s) could not be inlined (%s); each stays one node",
                    where, sum(n.op in CALL_OPS for n in flat.node), ", ".join(left))
    return flat, n_functions


def prune(graph_def, roots: Iterable[str], *, where: str):
    """Only the nodes ``roots`` depend on (through data and control inputs), in GraphDef order.

    ``roots`` are node names; an unknown one is an `InputError`.
    """
    by_name = {n.name: n for n in graph_def.node}
    keep: set[str] = set()
    queue: deque[str] = deque()
    for r in roots:
        if r not in by_name:
            raise InputError(f"{where}: the graph has no node named {r!r}")
        if r not in keep:
            keep.add(r)
            queue.append(r)
    while queue:
        node = by_name[queue.popleft()]
        for ref in node.input:
            src = parse_input(ref)[0]
            if src not in by_name:
                raise InputError(f"{where}: node {node.name!r} takes input {ref!r} from a node that does not exist")
            if src not in keep:
                keep.add(src)
                queue.append(src)
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(n for n in graph_def.node if n.name in keep)
    for n in out.node:
        # a colocation with a node that was pruned away would make TensorFlow reject the graph
        if "_class" in n.attr:
            specs = [s for s in n.attr["_class"].list.s if not s.startswith(b"loc:@") or s[5:].decode() in keep]
            if len(specs) != len(n.attr["_class"].list.s):
                if specs:
                    del n.attr["_class"].list.s[:]
                    n.attr["_class"].list.s.extend(specs)
                else:
                    del n.attr["_class"]
    return out
