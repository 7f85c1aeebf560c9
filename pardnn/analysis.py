"""Graph analyses: topological order, levels, longest paths, critical path.

Module-level functions, the graph first, in the networkx habit. Results that
depend only on the graph's structure (levels, a topological order) are cached
on the immutable graph.

Tiny example::

    a(1) --> b(2) --> d(1)
       \\             /
        `-> c(5) ---'

>>> from pardnn.ir import GraphBuilder
>>> b = GraphBuilder("diamond")
>>> for n, t in [("a", 1), ("b", 2), ("c", 5), ("d", 1)]:
...     _ = b.add_node(n, time_us=t)
>>> for s, d in [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]:
...     b.add_edge(s, d)
>>> g = b.build()
>>> topological_levels(g).tolist()
[0, 1, 1, 2]
>>> length, path = critical_path(g)
>>> length, [g.names[v] for v in path]
(7.0, ['a', 'c', 'd'])
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np

from ._jit import njit
from .errors import GraphError

if TYPE_CHECKING:   # the IR calls these analyses (its cycle check); they only read its arrays
    from .ir import OpGraph

_CACHE = "_analysis_cache"


def _cache(g: OpGraph) -> dict:
    c = g.__dict__.get(_CACHE)
    if c is None:
        c = {}
        object.__setattr__(g, _CACHE, c)
    return c


def _find_cycle_node(g: OpGraph, remaining: np.ndarray) -> int:
    """A node that lies on a cycle, given the nodes Kahn's algorithm could not order.

    Walking backwards along in-edges that stay inside ``remaining`` must
    revisit a node, and the first revisited node is on a cycle.
    """
    inside = np.zeros(g.num_nodes, dtype=bool)
    inside[remaining] = True
    ptr, eids = g.in_csr
    v = int(remaining[0])
    seen: dict[int, int] = {}
    step = 0
    while v not in seen:
        seen[v] = step
        step += 1
        for e in eids[ptr[v]:ptr[v + 1]]:
            u = int(g.edge_src[e])
            if inside[u]:
                v = u
                break
        else:  # cannot happen: every remaining node keeps an unresolved in-edge
            break
    return v


def topological_levels(g: OpGraph) -> np.ndarray:
    """Level of each node: the length in edges of the longest path from a source.

    Raises `GraphError` naming a node on a cycle when ``g`` is not a DAG.
    """
    c = _cache(g)
    if "levels" in c:
        return c["levels"]
    ptr, eids = g.out_csr
    lv_arr = _levels(topological_order(g), ptr, g.edge_dst[eids])
    c["levels"] = lv_arr
    return lv_arr


@njit
def _levels(order, ptr, succ):
    """`topological_levels` over ``order``, with successors ``succ[ptr[v]:ptr[v + 1]]``."""
    level = np.zeros(order.shape[0], dtype=np.int64)
    for v in order:
        lv = level[v] + 1
        for j in range(ptr[v], ptr[v + 1]):
            u = succ[j]
            if level[u] < lv:
                level[u] = lv
    return level


def topological_order(g: OpGraph) -> np.ndarray:
    """Node ids in the topological order closest to file order.

    Kahn's algorithm always taking the lowest-id ready node: the identity when
    the file is already in topological order (as frontends write it), and
    otherwise the order that keeps program order wherever the edges allow.
    Raises `GraphError` naming a node on a cycle when ``g`` is not a DAG.
    """
    c = _cache(g)
    if "topo" in c:
        return c["topo"]
    if is_topologically_ordered(g):
        order = np.arange(g.num_nodes, dtype=np.int64)
    else:
        ptr, eids = g.out_csr
        succ = g.edge_dst[eids].tolist()
        ptr_l = ptr.tolist()
        indeg = np.bincount(g.edge_dst, minlength=g.num_nodes).tolist()
        heap = [v for v in range(g.num_nodes) if indeg[v] == 0]
        out: list[int] = []
        while heap:
            v = heapq.heappop(heap)
            out.append(v)
            for u in succ[ptr_l[v]:ptr_l[v + 1]]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    heapq.heappush(heap, u)
        if len(out) != g.num_nodes:
            done = np.zeros(g.num_nodes, dtype=bool)
            done[out] = True
            v = _find_cycle_node(g, np.flatnonzero(~done))
            raise GraphError(f"graph {g.name!r} has a cycle through node {g.names[v]!r}")
        order = np.asarray(out, dtype=np.int64)
    c["topo"] = order
    return order


def is_topologically_ordered(g: OpGraph) -> bool:
    """Whether every edge goes from a lower to a higher id (file order is topological)."""
    return bool(np.all(g.edge_src < g.edge_dst)) if g.num_edges else True


def _longest_paths(g: OpGraph, order: np.ndarray, csr: tuple[np.ndarray, np.ndarray], far_end: np.ndarray,
                   node_w: np.ndarray, edge_w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """One sweep over ``order`` for `top_levels` (forwards, in-edges) and `bottom_levels` (backwards,
    out-edges): per node ``v``, ``reach[v]`` = the longest ``edge_w[e] + through[u]`` over its edges ``e``
    in ``csr`` (``u = far_end[e]``, swept before ``v``; 0 with no edges), and
    ``through[v] = reach[v] + node_w[v]``. Returns ``(reach, through)``.
    """
    ptr, eids = csr
    ew = np.zeros(g.num_edges) if edge_w is None else np.asarray(edge_w, dtype=np.float64)
    return _sweep(np.ascontiguousarray(order, dtype=np.int64), ptr.astype(np.int64),
                  far_end[eids].astype(np.int64), ew[eids], np.asarray(node_w, dtype=np.float64))


@njit
def _sweep(order, ptr, far, ew, w):
    """The loop of `_longest_paths`, compiled."""
    reach = np.zeros(w.shape[0])
    through = np.zeros(w.shape[0])
    for v in order:
        best = 0.0
        for i in range(ptr[v], ptr[v + 1]):
            t = ew[i] + through[far[i]]
            if t > best:
                best = t
        reach[v] = best
        through[v] = best + w[v]
    return reach, through


def top_levels(g: OpGraph, node_w: np.ndarray, edge_w: np.ndarray | None = None) -> np.ndarray:
    """Earliest start of each node: the longest weighted path ending just before it.

    ``tl[v] = max over edges u->v of tl[u] + node_w[u] + edge_w[e]`` (0 for sources).
    """
    tl, _ = _longest_paths(g, topological_order(g), g.in_csr, g.edge_src, node_w, edge_w)
    return tl


def bottom_levels(g: OpGraph, node_w: np.ndarray, edge_w: np.ndarray | None = None) -> np.ndarray:
    """Length of the longest weighted path starting at each node, its own weight included."""
    _, bl = _longest_paths(g, topological_order(g)[::-1], g.out_csr, g.edge_dst, node_w, edge_w)
    return bl


def critical_path(g: OpGraph, node_w: np.ndarray | None = None,
                  edge_w: np.ndarray | None = None) -> tuple[float, list[int]]:
    """The longest path (by ``node_w``, default ``time_us``; plus ``edge_w``) and its node ids.

    Ties go to the lower node id, so the answer is deterministic.
    """
    if g.num_nodes == 0:
        return 0.0, []
    w = g.time_us if node_w is None else np.asarray(node_w, dtype=np.float64)
    ew = np.zeros(g.num_edges) if edge_w is None else np.asarray(edge_w, dtype=np.float64)
    bl = bottom_levels(g, w, ew)
    indeg = np.bincount(g.edge_dst, minlength=g.num_nodes)
    sources = np.flatnonzero(indeg == 0)
    v = int(sources[np.argmax(bl[sources])])
    length = float(bl[v])
    path = [v]
    ptr, eids = g.out_csr
    while ptr[v + 1] > ptr[v]:
        out = eids[ptr[v]:ptr[v + 1]]
        vals = ew[out] + bl[g.edge_dst[out]]
        v = int(g.edge_dst[out[int(np.argmax(vals))]])  # first maximum: deterministic
        path.append(v)
    return length, path


def topologically_sorted(g: OpGraph) -> OpGraph:
    """``g`` with its nodes renumbered in `topological_order` (a no-op when already sorted)."""
    if is_topologically_ordered(g):
        return g
    return g.permuted(topological_order(g))


FORWARD, BACKWARD, OPTIMIZER, UNKNOWN = 0, 1, 2, 3
_PHASES = {"forward": FORWARD, "backward": BACKWARD, "optimizer": OPTIMIZER}


def phases(g: OpGraph) -> np.ndarray | None:
    """The training phase of each node, or None when the graph says nothing about phases.

    From the ``phase`` field frontends write; failing that, from TensorFlow's
    naming (``gradients/`` scopes are backward, ``Apply*`` / ``update_`` ops are
    optimizer updates).
    """
    c = _cache(g)
    if "phases" in c:
        return c["phases"]
    out = None
    if g.node_extra and any(x and "phase" in x for x in g.node_extra):
        out = np.array([_PHASES.get((x or {}).get("phase"), UNKNOWN) for x in g.node_extra], dtype=np.int64)
    elif any("gradients/" in n or "gradients_" in n for n in g.names[:: max(1, g.num_nodes // 2000)]):
        out = np.full(g.num_nodes, FORWARD, dtype=np.int64)
        for v, n in enumerate(g.names):
            if "gradients/" in n or n.startswith("gradients"):
                out[v] = BACKWARD
            elif "Apply" in n.rsplit("/", 1)[-1] or "/update_" in n:
                out[v] = OPTIMIZER
    c["phases"] = out
    return out


def layer_anchors(g: OpGraph) -> np.ndarray:
    """A position per node that puts each backward and optimizer op next to the forward op it serves.

    Forward ops keep their topological position. Any other op takes the anchor of the forward op whose
    output it reads with the most bytes (the stashed activation or weight it needs); without a forward
    input, the smallest anchor among its inputs. Sorting by anchor gives layer-wise stages that keep a
    layer's forward, backward and update together. Without phase information this is the topological
    position.
    """
    order = topological_order(g)
    pos = np.empty(g.num_nodes, dtype=np.int64)
    pos[order] = np.arange(g.num_nodes)
    ph = phases(g)
    if ph is None:
        return pos.astype(np.float64)
    ptr, eids = g.in_csr
    return _anchors(order, pos.astype(np.float64), ph, ptr, g.edge_src[eids], g.edge_bytes[eids],
                    g.edge_control[eids])


@njit
def _anchors(order, anc, ph, ptr, src, nbytes, ctrl):
    """`layer_anchors`' sweep: ``anc`` (topological positions) updated in place and returned."""
    for v in order:
        if ph[v] == FORWARD:
            continue
        best_fwd, best_b = -1, -1
        has_low = False
        low = 0.0
        for i in range(ptr[v], ptr[v + 1]):
            if ctrl[i]:
                continue
            u = src[i]
            if ph[u] == FORWARD and nbytes[i] >= best_b:
                if nbytes[i] > best_b or anc[u] > anc[best_fwd]:
                    best_fwd, best_b = u, nbytes[i]
            if not has_low or anc[u] < low:
                has_low = True
                low = anc[u]
        if best_fwd >= 0:
            anc[v] = anc[best_fwd] + 0.5
        elif has_low:
            anc[v] = low + 0.5
    return anc
