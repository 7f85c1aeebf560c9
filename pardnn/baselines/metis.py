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

pymetis's Python call passes one weight per vertex only, so the partition is
made by METIS's own C entry points inside pymetis's extension module (via
ctypes), which take any number of constraints and per-constraint targets.
Should those not be reachable, the public call is used with one weight, the
average of the normalised constraints.

Parts become devices; the simulator schedules them. Pinned units: parts are
matched to devices (among devices with the same targets) to keep as many
pinned units in place as possible (`scipy.optimize.linear_sum_assignment`),
and then every pinned unit is moved to its device. METIS runs with a fixed
seed, so the result is deterministic.

pymetis is a core dependency: the partitioner's seed pass also starts from a METIS partition.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

import numpy as np
from scipy import sparse

from ..cluster import Cluster
from ..errors import MissingDependencyError
from ..ir import OpGraph
from ..placement import Placement
from .common import capacity_shares, placement, speed_shares, unit_pins
from .mtopo import static_memory

_WEIGHT_TOTAL = 1 << 24
"""Integer scale of each vertex-weight constraint's total (METIS takes integers)."""
_EDGE_TOTAL = 1 << 30
_MAX_LATENCY_BYTES = 1e250
"""The most bytes a latency is worth in an edge's weight: a sum over any graph's edges stays a finite double,
and a tensor's bytes (below 2**63) are nothing beside it."""


def _pymetis():
    try:
        import pymetis
    except ImportError:
        raise MissingDependencyError("the metis placers and the seed pass need pymetis: pip install pymetis") from None
    return pymetis


def unit_graph(g: OpGraph, cluster: Cluster) -> sparse.csr_matrix:
    """Symmetric unit adjacency with integer weights > 0 (bytes plus a latency's worth per edge)."""
    U = g.num_units
    ua, ub = g.unit[g.edge_src], g.unit[g.edge_dst]
    keep = ua != ub
    latency_bytes = cluster.mean_latency / cluster.mean_inv_bandwidth if cluster.mean_inv_bandwidth > 0 else 0.0
    # at most 1e250: beyond a double (a bandwidth of 1e308 B/us), the weights were inf / inf = NaN, cast to
    # integers as garbage with a RuntimeWarning on stderr; so large, every edge weighs its latency alone as before
    latency_bytes = min(latency_bytes, _MAX_LATENCY_BYTES)
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


_STDOUT_LOCK = threading.Lock()


@contextlib.contextmanager
def _c_stdout_silenced():
    """Send what C code prints on stdout during the block to /dev/null. METIS's recursive bisection prints
    "***Cannot bisect a graph with 0 vertices!" there when a small graph has barely more vertices than
    parts (its partition is still complete and deterministic); a command's stdout is not the place."""
    import ctypes

    with _STDOUT_LOCK:      # fd 1 is the process's: threads take turns (their METIS calls overlap otherwise)
        try:
            libc = ctypes.CDLL(None)
            sys.stdout.flush()
            libc.fflush(None)
            saved = os.dup(1)
        except (OSError, AttributeError, ValueError, TypeError):   # no C library to flush, or no fd 1
            yield
            return
        try:
            null = os.open(os.devnull, os.O_WRONLY)
        except OSError:
            os.close(saved)
            yield
            return
        try:
            os.dup2(null, 1)
            yield
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
            os.close(null)


def _metis_c(pymetis, K: int, A: sparse.csr_matrix, vw: np.ndarray, tp: np.ndarray, seed: int = 0,
             ufactor: int | None = None) -> np.ndarray | None:
    """Call the METIS library inside pymetis directly, with ``ncon = vw.shape[1]`` constraints.

    pymetis's own wrapper always passes one constraint (the number of weights
    per vertex is not exposed), so two-constraint partitioning goes through
    METIS's C entry points, which its extension module exports. Returns None
    when that is not possible (no such symbols), and the caller falls back.
    ``seed`` is METIS's random seed; ``ufactor`` its load imbalance tolerance in
    thousandths (None: METIS's default, 1 for recursive bisection, 30 for k-way).
    """
    import ctypes

    from pymetis import _internal

    try:
        lib = ctypes.CDLL(_internal.__file__)
        fn = lib.METIS_PartGraphRecursive if K <= 8 else lib.METIS_PartGraphKway
        width = _internal._idx_type_width()
    except (OSError, AttributeError):
        return None
    idx = np.int64 if width == 64 else np.int32
    U, ncon = vw.shape

    def arr(x, dtype):
        return np.ascontiguousarray(x, dtype=dtype)

    nvtxs, ncon_a, nparts = arr([U], idx), arr([ncon], idx), arr([K], idx)
    xadj, adjncy, adjwgt = arr(A.indptr, idx), arr(A.indices, idx), arr(A.data, idx)
    vwgt, tpwgts = arr(vw.ravel(), idx), arr(tp.ravel(), np.float32)   # METIS's default real_t is float
    options = np.zeros(64, dtype=idx)
    lib.METIS_SetDefaultOptions(options.ctypes.data_as(ctypes.c_void_p))
    options[_internal.options_indices.SEED] = seed
    if ufactor is not None:
        options[_internal.options_indices.UFACTOR] = ufactor
    objval, part = np.zeros(1, dtype=idx), np.zeros(U, dtype=idx)
    ptr = [a.ctypes.data_as(ctypes.c_void_p) for a in (nvtxs, ncon_a, xadj, adjncy, vwgt)]
    with _c_stdout_silenced():
        status = fn(*ptr, None, adjwgt.ctypes.data_as(ctypes.c_void_p) if adjwgt.size else None,
                    nparts.ctypes.data_as(ctypes.c_void_p), tpwgts.ctypes.data_as(ctypes.c_void_p), None,
                    options.ctypes.data_as(ctypes.c_void_p), objval.ctypes.data_as(ctypes.c_void_p),
                    part.ctypes.data_as(ctypes.c_void_p))
    if status != 1:      # METIS_OK
        raise RuntimeError(f"METIS failed with status {status}")
    return part.astype(np.int64)


VARIANT_UFACTORS = (None, 50, 100, 200)
"""`variants`' imbalance tolerances, in turn (None: METIS's default)."""


def variants(n: int) -> list[tuple[int, int | None]]:
    """``(seed, ufactor)`` of ``n`` METIS runs: seed 0 and METIS's default tolerance first (the baselines'
    partition), then seeds 2, 3, ... (METIS's seed 1 made seed 0's partitions on all 81 cases tried) with the
    tolerances of `VARIANT_UFACTORS` in turn."""
    return [(0 if i == 0 else i + 1, VARIANT_UFACTORS[i % len(VARIANT_UFACTORS)]) for i in range(n)]


def partitions(g: OpGraph, cluster: Cluster, *, memory: bool,
               runs: list[tuple[int, int | None]] = ((0, None),)) -> list[np.ndarray]:
    """The METIS part of every unit (before pins are applied), once per ``(seed, ufactor)`` of ``runs`` (as
    `_metis_c` takes them; the baselines use the defaults), the unit graph built once."""
    K = cluster.num_devices
    U = g.num_units
    if K == 1 or U == 0:
        return [np.zeros(U, dtype=np.int64) for _ in runs]
    uniform = bool(np.ptp(speed_shares(cluster)) == 0 and (not memory or np.ptp(capacity_shares(cluster)) == 0))
    if U < K or (U == K and uniform):
        # METIS cannot make more parts than vertices (it prints an error, and its answer then depends on
        # uninitialised memory), nor, by recursive bisection, always as many (it put all five ops of a
        # chain on one of five devices): on equal devices the balanced answer is one unit per part
        return [np.arange(U, dtype=np.int64) for _ in runs]
    pymetis = _pymetis()
    A = unit_graph(g, cluster)
    weights = [_int_weights(np.bincount(g.unit, weights=g.time_us, minlength=U))]
    targets = [speed_shares(cluster)]
    if memory:
        weights.append(_int_weights(np.bincount(g.unit, weights=static_memory(g), minlength=U)))
        targets.append(capacity_shares(cluster))
    keep = [i for i, w in enumerate(weights) if w.sum() > 0]    # METIS rejects a constraint of total 0
    if not keep:
        weights, targets = [np.ones(U, dtype=np.int64)], [speed_shares(cluster)]
        keep = [0]
    vw = np.stack([weights[i] for i in keep], axis=1)                       # [U, ncon]
    tp = np.stack([targets[i] / targets[i].sum() for i in keep], axis=1)   # [K, ncon]
    out = []
    for seed, ufactor in runs:
        parts = _metis_c(pymetis, K, A, vw, tp, seed, ufactor)
        if parts is None:
            # Fallback through pymetis's public call: one constraint, the constraints' average.
            opts = pymetis.Options()
            opts.seed = seed
            if ufactor is not None:
                opts.ufactor = ufactor
            one = _int_weights((vw / np.maximum(vw.sum(axis=0), 1)).sum(axis=1))
            with _c_stdout_silenced():
                res = pymetis.part_graph(K, pymetis.CSRAdjacency(A.indptr.tolist(), A.indices.tolist()),
                                         vweights=one.tolist(), eweights=A.data.astype(np.int64).tolist() or None,
                                         tpwgts=tp.mean(axis=1).tolist(), options=opts)
            parts = np.asarray(res.vertex_part, dtype=np.int64)
        out.append(parts)
    return out


def partition(g: OpGraph, cluster: Cluster, *, memory: bool) -> np.ndarray:
    """The METIS part of every unit (before pins are applied)."""
    return partitions(g, cluster, memory=memory)[0]


def match_parts(parts: np.ndarray, pins: np.ndarray, cluster: Cluster) -> np.ndarray:
    """A device per part keeping the most pinned units in place (only among devices with equal targets)."""
    K = cluster.num_devices
    sel = pins >= 0
    if not sel.any():       # nothing to keep in place: the identity (what the assignment below gives)
        return np.arange(K, dtype=np.int64)
    agree = np.zeros((K, K))
    np.add.at(agree, (parts[sel], pins[sel]), 1.0)
    kind = np.stack([cluster.speed, capacity_shares(cluster)], axis=1)
    same = (np.abs(kind[:, None, :] - kind[None, :, :]) <= 1e-12).all(axis=2)
    cost = np.where(same, -agree - 1e-6 * np.eye(K), 1e9)     # prefer the identity on ties
    from scipy.optimize import linear_sum_assignment     # loaded when pins need it (0.15 s of start-up)

    rows, cols = linear_sum_assignment(cost)
    mapping = np.empty(K, dtype=np.int64)
    mapping[rows] = cols
    return mapping


def assignments(g: OpGraph, cluster: Cluster, *, memory: bool,
                runs: list[tuple[int, int | None]] = ((0, None),)) -> list[np.ndarray]:
    """The device of every op, once per run of `partitions`: METIS's parts matched to devices, pinned units on
    their devices."""
    if g.num_nodes == 0:
        return [np.zeros(0, dtype=np.int64) for _ in runs]
    pins = np.asarray(unit_pins(g, cluster.num_devices), dtype=np.int64)
    out = []
    for parts in partitions(g, cluster, memory=memory, runs=runs):
        unit_dev = match_parts(parts, pins, cluster)[parts]
        out.append(np.where(pins >= 0, pins, unit_dev)[g.unit])
    return out


def assignment(g: OpGraph, cluster: Cluster, *, memory: bool) -> np.ndarray:
    """The device of every op: METIS's parts matched to devices, pinned units on their devices."""
    return assignments(g, cluster, memory=memory)[0]


def _place(g: OpGraph, cluster: Cluster, memory: bool, method: str) -> Placement:
    return placement(g, cluster, assignment(g, cluster, memory=memory), method)


def place(g: OpGraph, cluster: Cluster) -> Placement:
    """METIS balancing compute (in proportion to speed), cutting the fewest bytes."""
    return _place(g, cluster, False, "metis")


def place_m(g: OpGraph, cluster: Cluster) -> Placement:
    """METIS balancing compute (to speed) and static memory (to capacity), cutting the fewest bytes."""
    return _place(g, cluster, True, "m-metis")
