"""METIS (Karypis & Kumar) through pymetis: balanced parts, least communication cut.

The graph handed to METIS has one vertex per unit (colocation groups
contracted, so a group is never split) and one undirected edge per pair of
units that exchange data, weighted by the bytes they exchange plus a
latency's worth of bytes per edge (``mean latency x mean bandwidth``), so
that control edges count too. Vertex weights:

* ``metis``: compute time only, balanced in proportion to device speed;
* ``m-metis``: compute time and static memory (persistent + outputs + temp,
  `mtopo.static_memory`) as two constraints, compute in proportion to speed
  and memory in proportion to capacity (unlimited devices count as the
  largest finite one).

Parts become devices; the simulator schedules them. Pinned units: parts are
matched to devices (among devices with the same targets) to keep as many
pinned units in place as possible (`scipy.optimize.linear_sum_assignment`),
and then every pinned unit is moved to its device. METIS runs with a fixed
seed, so the result is deterministic.

pymetis is an optional dependency (the ``bench`` and ``dev`` extras).
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.optimize import linear_sum_assignment

from ..cluster import Cluster
from ..errors import MissingDependencyError
from ..ir import OpGraph
from ..placement import Placement
from .common import capacity_shares, placement, speed_shares, unit_pins
from .mtopo import static_memory

_WEIGHT_TOTAL = 1 << 24
"""Integer scale of each vertex-weight constraint's total (METIS takes integers)."""
_EDGE_TOTAL = 1 << 30


def _pymetis():
    try:
        import pymetis
    except ImportError:
        raise MissingDependencyError("the metis placers need pymetis: pip install 'pardnn[bench]'") from None
    return pymetis


def unit_graph(g: OpGraph, cluster: Cluster) -> sparse.csr_matrix:
    """Symmetric unit adjacency with integer weights > 0 (bytes plus a latency's worth per edge)."""
    U = int(g.unit.max()) + 1 if g.num_nodes else 0
    ua, ub = g.unit[g.edge_src], g.unit[g.edge_dst]
    keep = ua != ub
    latency_bytes = cluster.mean_latency / cluster.mean_inv_bandwidth if cluster.mean_inv_bandwidth > 0 else 0.0
    w = np.where(g.edge_control, 0, g.edge_bytes)[keep].astype(np.float64) + latency_bytes
    rows = np.concatenate([ua[keep], ub[keep]])
    cols = np.concatenate([ub[keep], ua[keep]])
    A = sparse.csr_matrix((np.concatenate([w, w]), (rows, cols)), shape=(U, U))
    A.sum_duplicates()
    if A.nnz:
        scale = max(1.0, float(A.data.sum()) / _EDGE_TOTAL)
        A.data = np.maximum(1, np.rint(A.data / scale))
    return A


def _int_weights(x: np.ndarray) -> np.ndarray:
    total = float(x.sum())
    if total <= 0:
        return np.zeros(x.size, dtype=np.int64)
    return np.rint(x * (_WEIGHT_TOTAL / total)).astype(np.int64)


def partition(g: OpGraph, cluster: Cluster, *, memory: bool) -> np.ndarray:
    """The METIS part of every unit (before pins are applied)."""
    K = cluster.num_devices
    U = int(g.unit.max()) + 1 if g.num_nodes else 0
    if K == 1 or U == 0:
        return np.zeros(U, dtype=np.int64)
    pymetis = _pymetis()
    A = unit_graph(g, cluster)
    weights = [_int_weights(np.bincount(g.unit, weights=g.time_us, minlength=U))]
    targets = [speed_shares(cluster)]
    if memory:
        weights.append(_int_weights(np.bincount(g.unit, weights=static_memory(g), minlength=U)))
        targets.append(capacity_shares(cluster))
    vw = np.stack(weights, axis=1).ravel().tolist()
    tp = np.stack(targets, axis=1)                      # [K, ncon]
    opts = pymetis.Options()
    opts.seed = 0
    xadj, adjncy, ew = A.indptr.tolist(), A.indices.tolist(), A.data.astype(np.int64).tolist()
    uniform = np.allclose(tp, 1.0 / K)
    if uniform or tp.shape[1] == 1:
        res = pymetis.part_graph(K, pymetis.CSRAdjacency(xadj, adjncy), vweights=vw, eweights=ew or None,
                                 tpwgts=None if uniform else tp[:, 0].tolist(), options=opts)
        parts = res.vertex_part
    else:
        # One target per (part, constraint): METIS reads nparts x ncon numbers, which pymetis's
        # public wrapper does not pass through (it checks for nparts), so call its binding directly.
        from pymetis._internal import part_graph as _part_graph
        _, parts = _part_graph(K, xadj, adjncy, vw, ew or None, (tp / tp.sum(axis=0)).ravel().tolist(), opts,
                               K <= 8)
    return np.asarray(parts, dtype=np.int64)


def match_parts(parts: np.ndarray, pins: np.ndarray, cluster: Cluster) -> np.ndarray:
    """A device per part keeping the most pinned units in place (only among devices with equal targets)."""
    K = cluster.num_devices
    agree = np.zeros((K, K))
    sel = pins >= 0
    np.add.at(agree, (parts[sel], pins[sel]), 1.0)
    kind = np.stack([cluster.speed, capacity_shares(cluster)], axis=1)
    same = (np.abs(kind[:, None, :] - kind[None, :, :]) <= 1e-12).all(axis=2)
    cost = np.where(same, -agree - 1e-6 * np.eye(K), 1e9)     # prefer the identity on ties
    rows, cols = linear_sum_assignment(cost)
    mapping = np.empty(K, dtype=np.int64)
    mapping[rows] = cols
    return mapping


def _place(g: OpGraph, cluster: Cluster, memory: bool, method: str) -> Placement:
    if g.num_nodes == 0:
        return placement(g, cluster, np.zeros(0), method)
    parts = partition(g, cluster, memory=memory)
    pins = np.asarray(unit_pins(g, cluster.num_devices), dtype=np.int64)
    unit_dev = match_parts(parts, pins, cluster)[parts]
    unit_dev = np.where(pins >= 0, pins, unit_dev)
    return placement(g, cluster, unit_dev[g.unit], method)


def place(g: OpGraph, cluster: Cluster) -> Placement:
    """METIS balancing compute (in proportion to speed), cutting the fewest bytes."""
    return _place(g, cluster, False, "metis")


def place_m(g: OpGraph, cluster: Cluster) -> Placement:
    """METIS balancing compute (to speed) and static memory (to capacity), cutting the fewest bytes."""
    return _place(g, cluster, True, "m-metis")
