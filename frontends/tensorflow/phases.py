"""Label each op of a training step ``forward``, ``backward`` or ``optimizer``.

Rules, in order:

1. **backward**: a name component from TensorFlow's gradient code:
   ``gradient_tape`` (``tf.GradientTape``, with any suffix) or ``gradients``
   / ``gradients_N`` (``tf.gradients``).
2. **optimizer**: not backward, and either inside a known optimizer's name
   scope (a component equal to the optimizer's name: ``adam``, ``sgd``,
   ``Adam``, ``GradientDescent``, ...) or downstream, through data edges, of
   such an op (Keras increments ``adam/iteration`` outside the scope) or of
   a *computed* gradient: a backward op with a floating-point output and a
   data path from a forward op. The second condition leaves out what the
   gradient code builds beside the forward pass: constants, and the
   TensorLists a loop's forward pass fills for its gradient (variants sized
   from forward shapes), which feed the forward loop but are not gradients.
3. **optimizer**, too: an op whose every consumer is an optimizer op (the
   optimizer's own variables and their reads, the learning rate schedule),
   found backwards from the sinks.
4. **forward**: everything else.

An inference graph (no gradient ops) is all forward.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

import numpy as np

from pardnn.ir import OpGraph

_BACKWARD = re.compile(r"^(gradient_tape\w*|gradients(_\d+)?)$")
OPTIMIZER_SCOPES = frozenset({
    "adam", "adamw", "adamax", "nadam", "sgd", "rmsprop", "adagrad", "adadelta", "ftrl", "lion", "lamb",
    "adafactor", "loss_scale_optimizer", "Adam", "AdamW", "Adamax", "Nadam", "SGD", "RMSProp", "RMSprop",
    "Adagrad", "Adadelta", "Ftrl", "Momentum", "GradientDescent", "LossScaleOptimizer",
})


def is_gradient_name(name: str) -> bool:
    """Whether ``name`` lies in a scope TensorFlow's gradient code creates.

    >>> is_gradient_name("gradient_tape/dense/MatMul"), is_gradient_name("dense/MatMul")
    (True, False)
    """
    return any(_BACKWARD.match(c) for c in name.split("/"))


def label_phases(g: OpGraph, floating: Sequence[bool] | None = None,
                 optimizer_scopes: Iterable[str] = ()) -> list[str]:
    """One phase per node of ``g`` (a DAG whose file order is topological).

    ``floating[v]`` says whether node ``v`` has a floating-point output
    (default: all do).
    """
    scopes = OPTIMIZER_SCOPES | set(optimizer_scopes)
    V = g.num_nodes
    bw = [is_gradient_name(n) for n in g.names]
    if not any(bw):
        return ["forward"] * V
    scoped = [not bw[v] and any(c in scopes for c in g.names[v].split("/")) for v in range(V)]
    ptr, eids = g.in_csr
    data_in = eids[~g.edge_control[eids]]
    counts = np.bincount(g.edge_dst[data_in], minlength=V)
    dptr = np.zeros(V + 1, dtype=np.int64)
    np.cumsum(counts, out=dptr[1:])
    dsrc = g.edge_src[data_in].tolist()   # in_csr groups by destination, so this stays grouped
    dptr_l = dptr.tolist()
    # reach: a forward op, or data-downstream of one. computed: a gradient op so reached.
    reach = [False] * V
    after = [False] * V
    for v in range(V):
        preds = dsrc[dptr_l[v]:dptr_l[v + 1]]
        from_fwd = any(reach[u] for u in preds)
        reach[v] = (not bw[v] and not scoped[v]) or from_fwd
        computed = bw[v] and from_fwd and (floating is None or floating[v])
        after[v] = computed or scoped[v] or any(after[u] for u in preds)
    opt = [not bw[v] and (scoped[v] or after[v]) for v in range(V)]
    optr, oeids = g.out_csr
    dsts = g.edge_dst[oeids].tolist()
    optr_l = optr.tolist()
    for v in range(V - 1, -1, -1):
        if opt[v] or bw[v]:
            continue
        lo, hi = optr_l[v], optr_l[v + 1]
        if hi > lo and all(opt[dsts[i]] for i in range(lo, hi)):
            opt[v] = True
    return ["backward" if bw[v] else "optimizer" if opt[v] else "forward" for v in range(V)]


def phase_counts(phases: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in phases:
        out[p] = out.get(p, 0) + 1
    return out
