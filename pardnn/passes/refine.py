"""Refinement (ParDNN step 1.3), scored by the SPEC §1 simulator.

With ``respect_memory`` (after step 2) a move is accepted only if every
device stays within its memory, so refinement recovers step time without
undoing the memory pass.

ParDNN refines with path swapping and node switching on the critical path,
estimating the gain. Here every move is judged by the makespan the user will
be told (an exact simulation), the plan never gets worse, and the best plan
seen is kept:

1. Simulate the current plan and trace its *critical chain* backwards from
   the op that finishes last: at each op, either it waited for an input (a
   local predecessor, a transfer, a control edge) or for its device (the op
   that ran before it there).
2. Propose moves, cheapest neighbourhood first, widening only when a
   neighbourhood yields nothing (and narrowing again after any gain):
   (a) along the chain's longest waits, (b) along the whole chain with every
   target device, (c) every slicing path's part on a device moved whole to
   each other device, (d) every unit to every other device. Along the chain:
   * across a transfer or cross-device control edge ``p -> c``: move ``c``'s
     unit to ``p``'s device, ``p``'s unit to ``c``'s, and the segment of
     ``c``'s slicing path on its device to ``p``'s device ("path swapping");
   * where an op waited for its busy device: move its unit, or its path
     segment, to each other device ("node switching").
   Units are colocation groups (or single ops); pinned units never move.
3. Rank the moves by an estimated gain (the delay on the chain minus the
   communication the move adds), simulate them in that order, and accept the
   first that shortens the step; after a few rejected moves in a row in
   (a) or (b), end the round: propose again from the new chain after a
   gain, widen otherwise. Stop when no proposal helps or the evaluation
   budget is spent. With memory checked, a move that shortens the step but
   breaks a limit is first repaired with one round of step 2's
   exact moves (`memory.knapsack_moves`), never moving back what it moved.

The budget is a number of simulations, not seconds, so the same input gives
the same plan on any machine.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..cluster import Cluster
from ..ir import OpGraph, _csr
from ..machine import DEVICE, EDGE, Chain, CostModel, Evaluator, Schedule, simulate
from ..machine.evaluator import digest, new_memo
from ..pipeline import PlanState, check_pass_options
from ..units import is_whole
from . import MAX_EVALS
from ._threads import map_in_order, run_strands, strands_for, workers_for
from .memory import _Units, apply_moves, knapsack_moves


# Tuning constants (each chosen on the tuning suite; benchmarks/RESULTS.md has the figures)
@dataclass(frozen=True)
class Effort:
    """How many simulations refinement may spend, by graph size (see `default_budget`)."""

    work: float
    """The base budget is ``work / (V + E)`` simulations: each costs O(V + E), so about the same time."""
    boost: float
    """Multiplier of the budget up to `BOOST_FULL_BELOW` nodes plus edges, tapering to 1 at `BOOST_NONE_ABOVE`."""
    floor: int
    """The budget's floor on the largest graphs."""
    kicks: bool
    """Perturb and descend again when descent stalls with budget left (iterated local search)."""
    ceiling: int
    """The budget's ceiling, reached on tiny graphs."""
    mem_work: float
    """``work`` for the memory-aware refinement after step 2 (`respect_memory` True), which recovers the
    step time step 2 gave up; it runs only when step 2 changed the plan."""
    mem_ceiling: int
    """``ceiling`` for that refinement."""
    mem_boost: float = 1.0
    """``boost`` for that refinement."""
    mem_min: int = 0
    """``refine-mem`` is skipped when its budget by size comes out under this many simulations (above about
    400k nodes plus edges at ``default``): so few moves barely touch a graph that large (measured on synthetic
    training graphs at K=8: 116 simulations won 1.1% at 100k ops, 51 won 0.14% at 150k, 37 won 0.02% at
    200k, for 2-3 s each). An explicit ``max_evals`` always runs."""
    mem_mid_boost: float | None = None
    """``refine-mem``'s boost on mid-sized graphs, ramping up from ``mem_boost`` between the same sizes as
    ``mid_boost`` (None: ``mem_boost``)."""
    mid_boost: float | None = None
    """Step 1's boost on mid-sized graphs, from `MID_BOOST_FULL_FROM` nodes plus edges on (None: ``boost``).
    It ramps up from ``boost`` at `MID_BOOST_FROM`, where the budget stays flat; graphs below that keep the
    budget that holds them to about a second."""
    mid_extra: float = 1.0
    """A further multiplier of step 1's budget on graphs of `MID_BOOST_FULL_FROM` to `MID_EXTRA_FULL_UP_TO`
    nodes plus edges (about 10k-60k ops), ramping up from 1 at `MID_BOOST_FROM` and down to 1 at
    `MID_EXTRA_NONE_FROM`; not for a plan that breaks a memory limit, nor for ``refine-mem``."""


EFFORTS = {
    "fast": Effort(work=1e6, boost=1.0, floor=5, kicks=False, ceiling=500, mem_work=2e6, mem_ceiling=2000),
    "default": Effort(work=5e6, boost=1.5, floor=30, kicks=True, ceiling=3000, mem_work=2e7, mem_ceiling=20000,
                      mem_boost=2.0, mid_boost=3.0, mem_mid_boost=3.0, mem_min=50, mid_extra=4.0),
    "best": Effort(work=2e7, boost=3.0, floor=100, kicks=True, ceiling=20000, mem_work=2e7, mem_ceiling=20000,
                   mem_boost=2.0, mem_mid_boost=3.0, mid_extra=2.0),
}
"""``pardnn partition --effort``: deterministic for each (a budget in simulations, never in seconds)."""
BUDGET_WORK = EFFORTS["best"].work
BOOST_FULL_BELOW = 1.5e5
"""Up to this many nodes plus edges the budget gets the full boost."""
BOOST_NONE_ABOVE = 4e5
"""From this many nodes plus edges on, no boost; between the two the boost tapers linearly."""
MID_BOOST_FROM = 1.2e4
"""Up to this many nodes plus edges (graphs of about 5k ops) the boost is ``boost``, not ``mid_boost``."""
MID_BOOST_FULL_FROM = 2.4e4
"""From this many nodes plus edges on, ``mid_boost`` in full (up to `BOOST_FULL_BELOW`, then tapering)."""
MID_EXTRA_FULL_UP_TO = 1.5e5
"""Up to this many nodes plus edges (about 60k ops; the tuning suite's largest mid-sized graph has 131k)
step 1 gets ``Effort.mid_extra`` in full."""
MID_EXTRA_NONE_FROM = 2.0e5
"""From this many nodes plus edges on (about 75k ops), no ``mid_extra``: larger graphs keep their budget."""
FUSE_FROM = 2.4e4
"""From this many nodes plus edges on (graphs of about 10k ops), step 1's refinement descends with coarse
units first (`Refine.fuse`). On the tuning suite's graphs of 10k-50k ops (loose, K = 2, 4, 8) that made 29
of 42 plans shorter and 7 longer (geomean 0.970). On graphs up to 5k ops it made 12 shorter and 39 longer:
their budgets let the fine moves find it all."""
PATH_GAIN_SHARE = 0.9
"""A path switch's estimated gain, relative to switching its single waiting node (it moves more)."""
KICK_SHARE = 0.05
"""A kick sends this share of the units on or next to the critical chain (at least 2) to other devices."""
KICK_SEED = 12345
"""Seed of the kicks' random choices (a fixed seed: the same input gives the same plan)."""
MOVE_CHUNK = 64
"""Moves handed to the kernel at once at first (`Evaluator.first_shorter`); each further batch of one
neighbourhood is twice the last, so a descent that accepts early expands few moves it never tries."""
LADDER = ("chain", "chain, every target", "paths", "units")
"""The descent's neighbourhoods, cheapest first; a gain returns to the first."""
_NEVER = threading.Event()
"""A stop signal that is never set (searches run without one)."""


def default_budget(g: OpGraph, *, floor: int = 100, boost: float = 3.0, work: float = BUDGET_WORK,
                   ceiling: int = 20000, mid_boost: float | None = None, mid_extra: float = 1.0) -> int:
    """Simulations allowed: about ``boost`` x ``work`` / (V + E) up to `BOOST_FULL_BELOW`, the boost
    falling to 1 at `BOOST_NONE_ABOVE` and beyond; between ``floor`` for large graphs and ``ceiling`` for
    tiny ones. With ``mid_boost``, the boost rises from ``boost`` at `MID_BOOST_FROM` to ``mid_boost`` at
    `MID_BOOST_FULL_FROM` (in proportion to the size when ``mid_boost`` is twice ``boost``, so the budget
    stays flat there) before it tapers. ``mid_extra`` multiplies the budget from `MID_BOOST_FULL_FROM` to
    `MID_EXTRA_FULL_UP_TO`, ramping up from 1 at `MID_BOOST_FROM` and down to 1 at `MID_EXTRA_NONE_FROM`.

    A simulation costs O(V + E), so at the best effort refinement takes a few seconds on graphs up to
    ~50k ops. On the largest graphs the budget falls towards its floor.
    """
    size = g.num_nodes + g.num_edges
    ramp = float(np.clip((size - MID_BOOST_FROM) / (MID_BOOST_FULL_FROM - MID_BOOST_FROM), 0.0, 1.0))
    if mid_boost is not None:
        boost = boost + (mid_boost - boost) * ramp
    taper = BOOST_NONE_ABOVE - BOOST_FULL_BELOW
    scale = 1.0 + (boost - 1.0) * float(np.clip((BOOST_NONE_ABOVE - size) / taper, 0.0, 1.0))
    down = float(np.clip((MID_EXTRA_NONE_FROM - size) / (MID_EXTRA_NONE_FROM - MID_EXTRA_FULL_UP_TO), 0.0, 1.0))
    scale *= 1.0 + (mid_extra - 1.0) * min(ramp, down)
    return int(np.clip(scale * work / max(size, 1), floor, ceiling))


class _Move:
    """A proposed move: the units of ``nodes`` to device ``target``, with its estimated ``gain``.

    ``nodes`` are representative nodes; their whole units move. A path segment is one array shared by every
    move that names it (never copied per move), so proposals stay O(V + E) however long the chain. (A plain
    class with slots: a search makes tens of thousands, and a frozen dataclass's constructor costs twice
    as much.)"""

    __slots__ = ("gain", "nodes", "target", "label")

    def __init__(self, gain: float, nodes: tuple[int, ...] | np.ndarray, target: int, label: str):
        self.gain = gain
        self.nodes = nodes
        self.target = target
        self.label = label


class _Mover:
    """Turns proposals into assignments, keeping units whole and pins fixed."""

    def __init__(self, g: OpGraph, paths):
        self.g = g
        self.unit = g.unit
        self.unit_ptr, self.unit_members = g.unit_members
        self.pinned_unit = g.unit_pin >= 0
        self.units = None
        """Step 2's per-unit arrays, built when a move is first repaired."""
        self.fine: _Mover | None = None
        """For a coarse mover (`coarsened`), the mover it was made from, which holds step 2's arrays."""
        self.path = paths.path if paths is not None else None
        if self.path is not None:
            porder = np.argsort(self.path, kind="stable")
            pcounts = np.bincount(self.path, minlength=paths.num_paths)
            self.path_ptr = np.concatenate([[0], np.cumsum(pcounts)])
            self.path_members = porder

    def coarsened(self) -> "_Mover":
        """This mover with `fused_units`' coarse units as its move units: the same paths, and the same step 2
        arrays (those of the graph's own units, which a repair moves), built once for both."""
        out = copy.copy(self)
        out.unit, out.unit_ptr, out.unit_members, out.pinned_unit = fused_units(self.g)
        out.fine = self
        return out

    def prepare(self, g: OpGraph, cm: CostModel) -> _Units:
        """Step 2's per-unit arrays (built once, before searches share this mover across threads)."""
        if self.fine is not None:
            return self.fine.prepare(g, cm)
        if self.units is None:
            self.units = _Units(g, cm)
        return self.units

    def members(self, u: int) -> np.ndarray:
        return self.unit_members[self.unit_ptr[u]:self.unit_ptr[u + 1]]

    def path_segment(self, v: int, dev: np.ndarray, cache: dict | None = None) -> np.ndarray:
        """Nodes of ``v``'s slicing path that share ``v``'s device.

        With ``cache`` (a dict kept for one ``dev``), each segment is computed once and shared.
        """
        if self.path is None:
            return np.array([v])
        c = int(self.path[v])
        key = (c, int(dev[v]))
        if cache is not None and key in cache:
            return cache[key]
        nodes = self.path_members[self.path_ptr[c]:self.path_ptr[c + 1]]
        seg = nodes[dev[nodes] == dev[v]]
        if cache is not None:
            cache[key] = seg
        return seg

    def expand(self, moves: list[_Move]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``moves`` as `Evaluator.first_shorter` takes them: ``(ptr, ops, target)``, move ``i`` putting ops
        ``ops[ptr[i]:ptr[i + 1]]`` (the units of its nodes in ascending order, pinned units left out) on
        ``target[i]``."""
        n = len(moves)
        lens = np.fromiter((len(m.nodes) for m in moves), dtype=np.int64, count=n)
        one = lens == 1
        nodes = np.empty(int(lens.sum()), dtype=np.int64)
        at = np.concatenate([[0], np.cumsum(lens)])
        nodes[at[:-1][one]] = np.fromiter((m.nodes[0] for m, o in zip(moves, one.tolist()) if o), dtype=np.int64,
                                          count=int(one.sum()))
        for i in np.flatnonzero(~one).tolist():
            nodes[at[i]:at[i + 1]] = moves[i].nodes
        owner = np.repeat(np.arange(n), lens)
        flat = self.unit[nodes].astype(np.int64)
        order = np.lexsort((flat, owner))        # by move, then unit: each move's units ascending
        owner, flat = owner[order], flat[order]
        keep = ~self.pinned_unit[flat]
        if flat.size:
            keep[1:] &= (flat[1:] != flat[:-1]) | (owner[1:] != owner[:-1])    # a unit once per move
        owner, flat = owner[keep], flat[keep]
        sizes = self.unit_ptr[flat + 1] - self.unit_ptr[flat]
        ops = self.unit_members[np.repeat(self.unit_ptr[flat] - np.cumsum(np.concatenate([[0], sizes[:-1]])), sizes)
                                + np.arange(int(sizes.sum()))] if flat.size else np.empty(0, dtype=np.int64)
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, weights=sizes, minlength=n).astype(np.int64), out=ptr[1:])
        target = np.fromiter((m.target for m in moves), dtype=np.int64, count=n)
        return ptr, np.ascontiguousarray(ops, dtype=np.int64), target

    def apply(self, dev: np.ndarray, nodes, target: int) -> np.ndarray | None:
        """``dev`` with the units of ``nodes`` (the unpinned ones) on ``target``; None when that changes nothing."""
        if len(nodes) == 1:         # most proposals: one op (its unit)
            u = int(self.unit[int(nodes[0])])
            if self.pinned_unit[u]:
                return None
            moved = self.members(u)
        else:
            units = np.unique(self.unit[np.asarray(nodes, dtype=np.int64)])
            units = units[~self.pinned_unit[units]]
            if units.size == 0:
                return None
            moved = np.concatenate([self.members(int(u)) for u in units])
        if np.all(dev[moved] == target):
            return None
        out = dev.copy()
        out[moved] = target
        return out


def fused_units(g: OpGraph):
    """Coarse move units, in two rounds from the graph's units (colocation groups, single ops), never
    joining a pinned unit: first each op whose only consumer (over data and control edges) is in another
    unit joins that unit, transitively (a chain of single-consumer ops is one unit); then each unit of the
    first round whose consumers all lie in one other such unit joins it. Returns ``(unit, ptr, members,
    pinned)`` as `OpGraph.unit`, `OpGraph.unit_members` and ``unit_pin >= 0`` give them for the graph's
    own units.

    Four Transformer models of the tuning suite (5k-14k ops) keep 11-15% of their units (the first round
    alone: 23-24%). More rounds, to the fixed point, left 11-12% and made the two-level descent worse on
    the tuning suite's graphs of 10k-50k ops (loose): 21 plans shorter and 13 longer than with the graph's
    units alone, against 29 and 7 with two rounds and 23 and 7 with the first round alone."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    def join(n, a, b):
        return connected_components(coo_matrix((np.ones(a.size), (a, b)), shape=(n, n)), directed=False)

    U = g.num_units
    outdeg = np.bincount(g.edge_src, minlength=g.num_nodes)
    us, ud = g.unit[g.edge_src], g.unit[g.edge_dst]
    free = g.unit_pin < 0
    m = (outdeg[g.edge_src] == 1) & (us != ud) & free[us] & free[ud]
    n, comp = join(U, us[m], ud[m])
    # the second round: a first-round unit with one consuming unit joins it
    pinned = np.zeros(n, dtype=bool)
    pinned[comp[~free]] = True
    cs, cd = comp[us], comp[ud]
    cross = cs != cd
    pairs = np.unique(np.stack([cs[cross], cd[cross]]), axis=1)
    consumers = np.bincount(pairs[0], minlength=n)
    m = (consumers[pairs[0]] == 1) & ~pinned[pairs[0]] & ~pinned[pairs[1]]
    n, second = join(n, pairs[0][m], pairs[1][m])
    unit = second[comp][g.unit].astype(np.int64)
    ptr, members = _csr(unit, n)
    pinned = np.zeros(n, dtype=bool)
    pinned[unit[g.pinned >= 0]] = True
    return unit, ptr, members, pinned


def free_at(s: Schedule, K: int, t: np.ndarray) -> np.ndarray:
    """``F[i, d]``: when device ``d`` is next free at or after time ``t[i]``."""
    out = np.repeat(t[:, None], K, axis=1).astype(np.float64)
    for d in range(K):
        on = np.flatnonzero(s.device == d)
        if on.size == 0:
            continue
        order = on[np.argsort(s.start_us[on], kind="stable")]
        st, fi = s.start_us[order], s.finish_us[order]
        j = np.searchsorted(st, t, side="right") - 1
        running = (j >= 0) & (fi[np.maximum(j, 0)] > t)
        out[running, d] = fi[j[running]]
    return out


def targets(cluster: Cluster, dev: np.ndarray) -> list[int]:
    """The devices a move may go to: those holding ops, and the lowest-numbered empty device of each class
    of interchangeable devices (`Cluster.twins`): a move to another empty twin gives the same simulated step
    and would be tried after it. A tiny graph on many devices tries a few targets, not K. The targets are
    those of the plan a round proposes from: when a move to an empty twin is accepted, the rest of that
    round's list tries no other twin of its class; the next round (which starts over from the first
    neighbourhood after any accepted move) proposes from the new plan, where the next empty twin stands in."""
    K = cluster.num_devices
    used = np.bincount(dev, minlength=K) > 0
    empty = np.flatnonzero(~used)
    _, first = np.unique(cluster.twins[empty], return_index=True)
    used[empty[first]] = True
    return np.flatnonzero(used).tolist()


_LABELS = ("move consumer", "pull consumer", "pull path", "push producer", "switch node", "switch path")
"""The labels `propose` gives its moves, in alphabetical order: ties in its order are broken by label."""


def propose(g: OpGraph, cluster: Cluster, cm: CostModel, s: Schedule, chain: Chain, mover: _Mover, *,
            top_links: int = 64, every_target: bool = False) -> list[_Move]:
    """Moves along the chain's ``top_links`` longest waits, best estimated gain first.

    Along each link (longest first): across a transfer ``p -> c`` (devices a, b), ``c`` to a ("pull
    consumer"), ``p`` to b ("push producer"), ``c``'s path segment to a ("pull path"), and with
    ``every_target`` ``c`` to each third device ("move consumer", no estimated gain); where ``c`` waited
    for its device, ``c`` ("switch node") and its path segment ("switch path") to each other device.
    Sorted by estimated gain (highest first), then target, first four nodes, label, and the order above;
    each (nodes, target) kept once, where it ranks first. Moves with no estimated gain are left out unless
    ``every_target``. Built with numpy, not one Python object per candidate: the second neighbourhood's
    list covers the whole chain at every target.
    """
    K = cluster.num_devices
    dev = s.device
    if len(chain) == 0:
        return []
    pick = np.argsort(-chain.delay_us, kind="stable")[:top_links]
    pick = pick[chain.delay_us[pick] > 0]
    if pick.size == 0:
        return []
    A = cm.comm_by_device(g, dev, K)
    to = np.asarray(targets(cluster, dev), dtype=np.int64)
    T = to.size
    slots = 3 + 2 * T           # the order in which one link's moves were listed, within the link
    src, dst, delay = chain.src[pick].astype(np.int64), chain.dst[pick].astype(np.int64), chain.delay_us[pick]
    is_edge = chain.kind[pick] == EDGE
    # transfers and control edges between devices (a link within one device proposes nothing); ``el``, ``wl``:
    # the links' places in ``pick``
    el = np.flatnonzero(is_edge & (dev[src] != dev[dst]))
    ep, ec, ed = src[el], dst[el], delay[el]
    ea, eb = dev[ep], dev[ec]
    # waits for a busy device
    wl = np.flatnonzero(~is_edge)
    wc, wd = dst[wl], delay[wl]
    here = dev[wc]
    # path segments of the consumers (one shared array per (path, device), as `_Mover.path_segment` keeps)
    segs: list[np.ndarray] = []
    cons = np.concatenate([ec, wc])
    seg_of = np.full(cons.size, -1, dtype=np.int64)      # index into ``segs``, -1 for a segment of one op
    if mover.path is not None and cons.size:
        keys = mover.path[cons].astype(np.int64) * K + dev[cons]
        uniq, first, inv = np.unique(keys, return_index=True, return_inverse=True)
        cache: dict = {}
        sid = np.full(uniq.size, -1, dtype=np.int64)
        for u, v in enumerate(cons[first].tolist()):
            seg = mover.path_segment(v, dev, cache)
            if seg.size > 1:
                sid[u] = len(segs)
                segs.append(seg)
        seg_of = sid[inv.reshape(-1)]
    eseg, wseg = seg_of[:el.size], seg_of[el.size:]
    gains, nodes, segids, tgts, labels, seqs = [], [], [], [], [], []

    def add(gain, node, segid, target, label, seq):
        n = np.size(gain)
        gains.append(np.asarray(gain, dtype=np.float64).reshape(n))
        for out, x in ((nodes, node), (segids, segid), (tgts, target), (seqs, seq)):
            out.append(np.broadcast_to(np.asarray(x, dtype=np.int64), (n,)))
        labels.append(np.full(n, _LABELS.index(label), dtype=np.int64))

    add(ed - (A[ec, eb] - A[ec, ea]), ec, -1, ea, "pull consumer", el * slots)
    add(ed - (A[ep, ea] - A[ep, eb]), ep, -1, eb, "push producer", el * slots + 1)
    ps = np.flatnonzero(eseg >= 0)
    add(ed[ps], -1, eseg[ps], ea[ps], "pull path", el[ps] * slots + 2)
    if every_target and T:
        third = (to[None, :] != ea[:, None]) & (to[None, :] != eb[:, None])
        r, k = np.nonzero(third)
        add(ed[r] - (A[ec[r], eb[r]] - A[ec[r], to[k]]) - ed[r], ec[r], -1, to[k], "move consumer",
            el[r] * slots + 3 + k)
    if wl.size and T:
        frees = free_at(s, K, s.ready_us[wc])
        other = to[None, :] != here[:, None]
        r, k = np.nonzero(other)
        c, t = wc[r], to[k]
        gain = wd[r] - (A[c, here[r]] - A[c, t]) - (frees[r, t] - s.ready_us[c])
        add(gain, c, -1, t, "switch node", wl[r] * slots + 2 * k)
        sp = np.flatnonzero(wseg[r] >= 0)
        add(gain[sp] * PATH_GAIN_SHARE, -1, wseg[r[sp]], t[sp], "switch path",
            wl[r[sp]] * slots + 2 * k[sp] + 1)
    gain, node, segid, tgt, label, seq = (np.concatenate(x) for x in (gains, nodes, segids, tgts, labels, seqs))
    if not every_target:
        keep = gain > 0
        gain, node, segid, tgt, label, seq = gain[keep], node[keep], segid[keep], tgt[keep], label[keep], seq[keep]
    if gain.size == 0:
        return []
    # the first four nodes (a single op's: itself, then -1s, so it sorts before a segment it starts)
    head = np.full((gain.size, 4), -1, dtype=np.int64)
    single = segid < 0
    head[single, 0] = node[single]
    if segs:
        heads = np.full((len(segs), 4), -1, dtype=np.int64)
        for i, seg in enumerate(segs):
            heads[i, :min(4, seg.size)] = seg[:4]
        head[~single] = heads[segid[~single]]
    order = np.lexsort((seq, label, head[:, 3], head[:, 2], head[:, 1], head[:, 0], tgt, -gain))
    # each (op or segment, target) once, where it ranks first
    ident = np.where(single, node, g.num_nodes + segid)[order] * K + tgt[order]
    _, firsts = np.unique(ident, return_index=True)
    order = order[np.sort(firsts)]
    out = []
    for gn, nd, sg, tg, lb in zip(gain[order].tolist(), node[order].tolist(), segid[order].tolist(),
                                  tgt[order].tolist(), label[order].tolist()):
        out.append(_Move(gn, (nd,) if sg < 0 else segs[sg], tg, _LABELS[lb]))
    return out


def path_moves(g: OpGraph, cluster: Cluster, cm: CostModel, dev: np.ndarray, mover: _Mover) -> list[_Move]:
    """Every slicing path's part on each device, moved whole to every other device (heaviest first; of
    interchangeable empty devices, one: `targets`)."""
    if mover.path is None:
        return []
    K = cluster.num_devices
    to = targets(cluster, dev)
    key = mover.path * K + dev
    order = np.lexsort((np.arange(g.num_nodes), key))
    bounds = np.flatnonzero(np.concatenate([[True], key[order][1:] != key[order][:-1], [True]]))
    parts = [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    work = [float(cm.w[p].sum()) for p in parts]
    moves = []
    for i in np.argsort(-np.asarray(work), kind="stable").tolist():
        nodes = parts[i]        # one array, shared by the moves to each target
        here = int(dev[nodes[0]])
        moves.extend(_Move(work[i], nodes, e, "move path") for e in to if e != here)
    return moves


def unit_moves(g: OpGraph, cluster: Cluster, cm: CostModel, dev: np.ndarray, mover: _Mover) -> list[_Move]:
    """Every movable unit to every other device (heaviest units first; of interchangeable empty devices,
    one: `targets`)."""
    to = targets(cluster, dev)
    work = np.bincount(mover.unit, weights=cm.w)
    first = np.full(work.size, -1, dtype=np.int64)
    first[mover.unit[::-1]] = np.arange(g.num_nodes)[::-1]
    moves = []
    for u in np.argsort(-work, kind="stable").tolist():
        if mover.pinned_unit[u] or first[u] < 0:
            continue
        v = int(first[u])
        moves.extend(_Move(float(work[u]), (v,), e, "move unit") for e in to if e != dev[v])
    return moves


def check_max_evals(r: object, what: str = "max_evals") -> None:
    """Refuse a budget that is not a whole number of simulations, 0 or more, or None (``PardnnOptions`` checks
    its ``refine_evals`` with this too): -1 and 2.5 ran as some budget."""
    whole = is_whole(r) or isinstance(r, float) and r.is_integer()     # 1e3 in a --pipeline spec reads as a float
    if r is not None and (not whole or not 0 <= r <= MAX_EVALS):
        raise ValueError(f"{what} must be a whole number of simulations, 0 to {MAX_EVALS:.0e}, or None, got {r!r}")


@dataclass(frozen=True)
class Refine:
    name: ClassVar[str] = "refine"
    requires: ClassVar[tuple[str, ...]] = ("assignment",)
    max_evals: int | None = None
    """Simulations allowed (default: `default_budget` by graph size and ``effort``)."""
    effort: str = "default"
    """``fast``, ``default`` or ``best`` (`EFFORTS`): the budget by graph size, and whether to kick."""
    max_rounds: int = 1000
    """Stop after this many accepted moves."""
    top_links: int = 64
    """Propose moves along this many of the chain's longest waits per round."""
    patience: int = 24
    """End a round after this many rejected proposals in a row, and retrace the chain."""
    wide_patience: int | None = 6
    """The same for a round of the second neighbourhood (the whole chain, every target; None: no limit, the
    round tries its whole list). Its list is long (16k moves on a 12k-op graph at K=8), ranked by gains
    estimated on the chain it was proposed from, which each accepted move changes; on graphs of 5k-50k ops a
    round could spend the rest of the budget walking it. On the tuning suite's 45 loose cases of 5k-50k ops
    6 made 21 plans shorter and none longer than no limit (geomean 0.977; 3: 0.977, 12: 0.979, 24: 0.982, 48:
    0.989, 96: 0.997, 192: 1.000; the same limit on the paths and units neighbourhoods as well, at 24:
    0.991, 13 longer); graphs up to 5k ops 22 shorter, 17 longer (0.9995); tight, in ``refine`` and
    ``refine-mem``, 36 shorter, 28 longer (0.994)."""
    respect_memory: bool | str = "auto"
    """Accept only moves that keep every device within its memory: True, False, or "auto" (when the plan
    it starts from fits). After step 2 it is True: refinement recovers time without undoing the memory pass."""
    kicks: bool = True
    """When descent stalls with budget left, perturb the best plan and descend again (iterated local search;
    never at the ``fast`` effort)."""
    stale_kicks: int = 20
    """Stop after this many kicks in a row that did not improve the best plan (small graphs converge long
    before their budget is spent). On the tuning suite (graphs up to 12k ops) no search gained after more
    than 20 such kicks: 30 (100 before) left all 240 of its placements as they were, and 20 (30 before)
    all 312 of today's suite (graphs up to 60k ops); 10 made 3 of them longer."""
    min_evals: int | None = None
    """The budget's floor on large graphs (default: the effort's times ``floor_share``; see `default_budget`)."""
    floor_share: float = 1.0
    """The share of the effort's floor this pass gets when ``min_evals`` is not given."""
    boost: float | None = None
    """The budget's multiplier on graphs up to 150k nodes plus edges (default: the effort's)."""
    overflow_share: float = 0.4
    """When the plan starts over a memory limit, the floor is at most this share of the effort's (40
    simulations at the best effort, 12 at the default): step 2 will rewrite the plan, so on the largest
    graphs, where the floor binds, step 1 spends less on its step time (the same share as ``refine-mem``'s
    floor)."""
    repair: bool = True
    """With memory checked, a move that shortens the step but breaks a limit gets one round of step 2's
    exact moves (heuristic I) before it is judged."""
    first_share: float = 0.25
    """Successive halving's first round: this share of the budget is split evenly among the starts, the rest
    goes to the search from the best plan they reached. A plan that breaks a memory limit (step 2 will rewrite
    it) gets 0.5 whatever this says; ``refine-mem`` has 0.5. On the tuning suite's 45 loose cases of 5k-50k
    ops (4-5 starts, budgets of 1-2k simulations that run out before the search converges) 0.25 made 41
    plans shorter and 4 longer than 0.5 (geomean 0.995), 0.1 38 and 7 (0.994), 0.75 1 and 44 (1.007); on
    graphs up to 5k ops, whose searches converge, it changed little (24 shorter, 15 longer, 1.000).
    ``refine-mem`` at 0.25: tight geomean 1.0015 against 0.5 (22 shorter, 10 longer)."""
    remember: bool = True
    """Remember what was simulated (quick makespans by assignment, rejected full judgements by plan and
    trial) so that a repeat costs no simulation; it still counts against the budget, so the plan is the
    same either way (off: to check exactly that)."""
    skip_replays: bool = True
    """Leave out the search on the best start's plan with the rest of the budget when it would only replay
    that start's own search (which ended on its own, its best plan where its first descent ended: the same
    descent, the same seeded kicks, no gain). The plan is the same either way (off: to check exactly that);
    small graphs, whose searches converge long before the budget is spent, take less time."""
    only_if_changed: bool = False
    """Skip the pass when the pass before it left the assignment unchanged (`PlanState.changed`)."""
    fuse: bool | str = "auto"
    """Descend first with coarse units (`fused_units`: an op whose only consumer is in another unit joined
    to it, so a move never leaves a single-consumer op behind), then with the graph's own units (two-level
    refinement: on large graphs, where the budget allows few simulations per unit, the coarse moves make
    more of each). True, False, or "auto": in step 1's refinement (``respect_memory`` not True; not in
    ``refine-mem``), on graphs from `FUSE_FROM` nodes plus edges on."""
    threads: int | None = None
    """Search the starts' shares of the budget (successive halving's first round) on this many threads at
    once; None: as many as there are starts, at most the CPUs this process may use, on graphs up to
    `_threads.THREADS_UP_TO` nodes plus edges (one thread above); 1 or less: one after the other. Each search is
    independent, so the plan is the same on any number of threads. A search that runs alone tries its moves on
    `_threads.strands_for` strands at once (with this many threads: as many, at most 2), the same plan again."""

    def __post_init__(self) -> None:
        check_max_evals(self.max_evals)     # its ceiling; check_pass_options makes a whole float the int
        if self.effort not in EFFORTS:
            raise ValueError(f"unknown effort {self.effort!r}; choose {', '.join(EFFORTS)}")
        if not (isinstance(self.fuse, bool) or self.fuse == "auto"):
            raise ValueError(f"fuse must be true, false or auto, not {self.fuse!r}")
        w = self.wide_patience
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 1):
            raise ValueError(f"wide_patience must be a positive whole number or none, not {w!r}")
        if isinstance(self.first_share, bool) or not isinstance(self.first_share, (int, float)) \
                or not 0 < self.first_share <= 1:
            raise ValueError(f"first_share must be a number in (0, 1], not {self.first_share!r}")
        if not (isinstance(self.respect_memory, bool) or self.respect_memory == "auto"):
            raise ValueError(f"respect_memory must be true, false or auto, not {self.respect_memory!r}")
        check_pass_options(self)

    def __call__(self, g: OpGraph, cluster: Cluster, state: PlanState) -> PlanState:
        if state.assignment is None:
            raise ValueError("refine needs an assignment: run the map pass first")
        if cluster.num_devices == 1 or g.num_nodes == 0:
            return state
        if self.only_if_changed and not state.changed:
            return state.with_stats(self.name, skipped="the pass before it changed nothing")
        effort = EFFORTS[self.effort]
        bounded = bool(np.isfinite(cluster.capacity).any())
        budget = self.max_evals
        first = None     # the start's schedule with memory, when the budget needed it; the search reuses it
        if budget is None:
            # (at most MAX_EVALS: floor_share=1e308 made it inf, an OverflowError in int)
            floor = int(round(min(effort.floor * self.floor_share, MAX_EVALS))) if self.min_evals is None \
                else self.min_evals
            # after step 2 (respect_memory True) the memory-aware refinement's figures
            work, ceiling, boost, mid, extra = (
                (effort.mem_work, effort.mem_ceiling, effort.mem_boost, effort.mem_mid_boost, 1.0)
                if self.respect_memory is True else
                (effort.work, effort.ceiling, effort.boost, effort.mid_boost, effort.mid_extra))
            if self.boost is not None:
                boost, mid, extra = self.boost, None, 1.0
            budget = default_budget(g, floor=floor, boost=boost, work=work, ceiling=ceiling, mid_boost=mid,
                                    mid_extra=extra)
            if self.respect_memory is True and budget < effort.mem_min:
                return state.with_stats(self.name, skipped=f"a budget of {budget} simulations, under the "
                                        f"{effort.mem_min} the {self.effort} effort asks for", budget=budget)
            if bounded:
                first = simulate(g, cluster, state.assignment, memory=True)
                if not first.feasible:
                    # step 2 will rewrite the plan: a smaller floor, and no extra time for its step
                    floor = min(floor, int(round(min(effort.floor * self.overflow_share, MAX_EVALS))))
                    budget = default_budget(g, floor=floor, boost=boost, work=work, ceiling=ceiling)
        # successive halving: a share of the budget split among the starts, the rest for the best of them;
        # half of it when the plan breaks a memory limit (step 2 rewrites it: the starts' diversity counts more)
        several = bool(state.alternatives)
        fits = not several or not bounded or (first.feasible if first is not None
                                              else simulate(g, cluster, state.assignment, memory=True).feasible)
        if self.respect_memory is False:
            first = None     # the search simulates without memory
        cm = CostModel.build(g, cluster)
        mover = _Mover(g, state.paths)
        fuse = self.fuse if self.fuse != "auto" else (self.respect_memory is not True
                                                       and g.num_nodes + g.num_edges >= FUSE_FROM)
        coarse = mover.coarsened() if fuse else None
        starts = [state.assignment] + list(state.alternatives)
        # quick makespans by assignment, and (plan, trial) pairs judged in full and rejected, shared by the
        # searches (see `Evaluator.memo` and `_descend`); searches on threads at once get a memo each
        rejected = {} if self.remember else None
        share = int(budget * (self.first_share if fits else 0.5)) // len(starts) if several else budget
        workers = workers_for(len(starts), self.threads, g)
        # a search that runs alone tries its moves on strands at once (the same plan; `first_shorter_strands`)
        strands = strands_for(self.threads, g, cluster.num_devices)
        # on threads, one memo per search (the compiled move loop writes to it without the GIL; one shared
        # memo corrupted the process); one after the other, one memo for all. ``rejected`` is a plain dict
        # that only Python code touches, and a hit costs what judging again would
        memos = ([new_memo() if self.remember else None for _ in starts] if workers > 1
                 else [new_memo() if self.remember else None] * len(starts))

        stop = threading.Event()    # set when the caller is interrupted: the other searches end at once

        def search(i: int) -> dict:
            return self._search(g, cluster, cm, mover, starts[i], share, bounded, first if i == 0 else None,
                                memos[i], rejected, stop, coarse, strands if workers == 1 else 1)

        if workers > 1 and bounded:     # the repairs' arrays, built once here rather than by two threads at once
            mover.prepare(g, cm)
        # on Ctrl-C, searches not begun never run and running ones stop at their next move
        results = map_in_order(search, range(len(starts)), workers, stop)
        for i, r in enumerate(results):
            r["memo"] = memos[i]
        used = sum(r["evaluations"] for r in results)
        simulated = sum(r.get("simulated", 0) for r in results)
        valid = [r for r in results if r.get("skipped") is None]
        if not valid:
            return state.with_stats(self.name, skipped=results[0]["skipped"])
        best = min(valid, key=lambda r: r["after_us"])     # ties: the earlier start
        # the rest of the budget, for the best start's plan; not when it would only replay that start's search
        # from its best plan (the same descent, the same kicks, no gain; a replay cut short by the budget ends
        # no better), so the plan is the same without it
        if len(starts) > 1 and budget - used > 0 and not (self.skip_replays and best["replays"]):
            more = self._search(g, cluster, cm, mover, best["assignment"], budget - used, bounded,
                                memo=best["memo"], rejected=rejected, strands=strands)
            if more.get("skipped") is None and more["after_us"] <= best["after_us"]:
                for k in ("accepted", "repairs", "repaired"):
                    more[k] += best[k]
                best = {**more, "before_us": best["before_us"]}
            used += more["evaluations"]
            simulated += more.get("simulated", 0)
        stats = {k: v for k, v in best.items() if k not in ("assignment", "memo", "replays")}
        # ``simulated``: the evaluations that ran the simulator (the rest came from the memo)
        stats.update(evaluations=used, simulated=simulated, budget=budget, starts=len(starts), start_share=share)
        if coarse is not None:
            stats["coarse_units"] = int(coarse.pinned_unit.size)
        return state.replace(assignment=best["assignment"], makespan_us=best["after_us"],
                             alternatives=()).with_stats(self.name, **stats)

    def _search(self, g, cluster, cm, mover, start, budget, bounded, start_schedule=None, memo=None,
                rejected=None, stop=None, coarse=None, strands=1) -> dict:
        """Iterated local search from ``start`` with ``budget`` evaluations.

        Descend with the move ladder until no neighbourhood helps; while budget remains, perturb the
        best plan (a few units near its critical chain sent to other devices, from a fixed seed) and
        descend again, keeping the best plan seen. ``start_schedule``, when given, is ``start``'s
        schedule as this search would simulate it; it still counts as one evaluation. ``stop`` (an Event):
        once set, the search returns what it has at its next move (its caller was interrupted).
        """
        stop = stop or _NEVER
        ev = Evaluator(g, cluster, memo=memo, strands=strands, run_on=run_strands)
        if start_schedule is None:
            s = ev.schedule(start, memory=bounded and self.respect_memory is not False)
        else:
            s, ev.evaluations = start_schedule, 1
        if self.respect_memory is True and bounded and not s.feasible:
            return {"skipped": "the plan does not fit memory", "evaluations": ev.evaluations}
        check_memory = bounded and (self.respect_memory is True or (self.respect_memory == "auto" and s.feasible))
        start_ms = float(s.makespan_us)
        best, best_s, best_ms = start.copy(), s, start_ms
        kinds: dict[str, int] = {}
        totals = {"accepted": 0, "rounds": 0, "kicks": 0, "repairs": 0, "repaired": 0}
        rng = np.random.default_rng(KICK_SEED)
        cur, cur_s = best, best_s
        stale = 0
        best_kick = 0       # the kicks made before the best plan was found
        converged = False   # the search ended on its own (not for the budget, the rounds' limit or a stop)
        while ev.evaluations < budget and not stop.is_set():
            if totals["kicks"] == 0 and coarse is not None:     # the coarse descent, before the first kick
                cur, cur_s, cur_ms = self._descend(g, cluster, cm, coarse, ev, cur, cur_s, budget,
                                                   check_memory, kinds, totals, rejected, stop)
            cur, cur_s, cur_ms = self._descend(g, cluster, cm, mover, ev, cur, cur_s, budget, check_memory, kinds,
                                               totals, rejected, stop)
            # a kicked plan may break a memory limit: only a plan that fits can become the best
            if cur_ms < best_ms - 1e-9 and (not check_memory or cur_s.feasible):
                best, best_s, best_ms = cur, cur_s, cur_ms
                stale = 0
                best_kick = totals["kicks"]
            else:
                stale += 1
            if ev.evaluations >= budget or stop.is_set():
                break
            kicking = self.kicks and EFFORTS[self.effort].kicks and stale <= self.stale_kicks
            kicked = self._kick(g, cluster, mover, best, best_s, rng) if kicking else None
            if kicked is None:
                converged = totals["accepted"] < self.max_rounds
                break
            totals["kicks"] += 1
            cur = kicked
            cur_s = ev.schedule(cur, memory=check_memory)
        return {"assignment": best, "evaluations": ev.evaluations, "simulated": ev.simulations,
                "rounds": totals["rounds"],
                "accepted": totals["accepted"], "kicks": totals["kicks"], "repairs": totals["repairs"],
                "repaired": totals["repaired"], "moves": kinds, "before_us": start_ms,
                "after_us": best_ms,
                # searching on from the best plan would replay this search: the best plan is where its first
                # descent ended, every kick was made from it by the same seeded choices, and the memory checks
                # would be the same (they are whenever this search checked memory: then its best plan fits)
                "replays": converged and best_kick == 0 and (check_memory or not bounded
                                                             or self.respect_memory is False)}

    def _kick(self, g, cluster, mover, dev, s, rng) -> np.ndarray | None:
        """A perturbation of ``dev``: a few units on or next to its critical chain, to random other devices."""
        chain = s.critical_chain()
        if len(chain) == 0:
            return None
        nodes = np.unique(np.concatenate([chain.src, chain.dst]))
        units = np.unique(mover.unit[nodes])
        units = units[~mover.pinned_unit[units]]
        if units.size == 0:
            return None
        count = int(min(units.size, max(2, round(KICK_SHARE * units.size))))
        out = dev.copy()
        K = cluster.num_devices
        for u in rng.choice(units, size=count, replace=False).tolist():
            members = mover.members(u)
            here = int(out[members[0]])
            out[members] = (here + 1 + int(rng.integers(0, K - 1))) % K
        return out

    def _repair_move(self, g, cluster, cm, mover, ev, cur, trial, s2):
        """A move that shortens the step but breaks a memory limit, made to fit: one round of heuristic I's
        cheapest moves off each overloaded device at its peak, never moving back the units the move itself
        moved. (assignment, schedule), or None when the round has no moves."""
        units = mover.prepare(g, cm)
        moved = np.zeros(units.n, dtype=bool)
        moved[g.unit[trial != cur]] = True
        moves = knapsack_moves(g, cluster, cm, units, s2, frozen=moved)
        if not moves:
            return None
        fixed = apply_moves(units, trial, moves)
        return fixed, ev.schedule(fixed, memory=True)

    def _descend(self, g, cluster, cm, mover, ev, cur, s, budget, check_memory, kinds, totals, rejected=None,
                 stop=None):
        """First-improvement descent through the move ladder until no neighbourhood helps.

        ``rejected`` (a dict shared by the searches of one pass) remembers each (plan, trial) pair that was
        simulated in full and rejected, with what judging it cost (simulations, repairs): met again from
        the same plan, it is rejected at once and its cost counted again, so the budget runs out exactly
        as without it. The key includes ``check_memory``: with ``respect_memory="auto"`` one start may be
        searched with memory checks and another without, and a rejection for memory is no rejection
        without them."""
        stop = stop or _NEVER
        cur_ms = float(s.makespan_us)
        here = None      # digest of ``cur``, when needed
        stage = 0
        K = cluster.num_devices
        while ev.evaluations < budget and totals["accepted"] < self.max_rounds and stage < len(LADDER) \
                and not stop.is_set():
            totals["rounds"] += 1
            if stage == 0:
                moves = propose(g, cluster, cm, s, s.critical_chain(), mover, top_links=self.top_links)
            elif stage == 1:
                moves = propose(g, cluster, cm, s, s.critical_chain(), mover,
                                top_links=g.num_nodes, every_target=True)
            elif stage == 2:
                moves = path_moves(g, cluster, cm, cur, mover)
            else:
                moves = unit_moves(g, cluster, cm, cur, mover)
            gained = False
            misses = 0
            patience = self.patience if stage == 0 else self.wide_patience if stage == 1 else None
            pos, base, batch, chunk = 0, 0, None, MOVE_CHUNK
            while pos < len(moves):
                if ev.evaluations >= budget or (patience is not None and misses >= patience) or stop.is_set():
                    break
                if batch is None or pos >= base + batch[2].size:     # the next moves, as the kernel takes them
                    base, batch = pos, mover.expand(moves[pos:pos + chunk])
                    chunk *= 2
                limit = budget - ev.evaluations if patience is None else min(budget - ev.evaluations,
                                                                             patience - misses)
                if limit <= 0:      # (the checks above make this unreachable; it guards the loop's progress)
                    break
                # the quick simulations, in one call, up to the first move that shortens the step
                e0 = ev.evaluations
                i, _, nxt = ev.first_shorter(cur, batch, pos - base, limit, cur_ms)
                misses += ev.evaluations - e0 - (i >= 0)
                pos = base + nxt
                if i < 0:
                    continue
                m = moves[base + i]
                trial = cur.copy()
                trial[batch[1][batch[0][i]:batch[0][i + 1]]] = batch[2][i]
                key = None
                if rejected is not None:
                    if here is None:     # the plan, and whether this search checks memory (searches differ)
                        here = digest(cur, K) + (b"m" if check_memory else b"q")
                    key = here + digest(trial, K)
                    known = rejected.get(key)
                    if known is not None:       # judged before from this same plan: rejected, at the same cost
                        gate, sims, repaired = known
                        ev.evaluations += 1
                        if gate and ev.evaluations < budget:
                            ev.evaluations += sims
                            totals["repairs"] += repaired
                        misses += 1
                        continue
                s2 = ev.schedule(trial, memory=check_memory)
                fixed = None
                gate = bool(check_memory and self.repair and not s2.feasible and s2.makespan_us < cur_ms - 1e-9)
                tried, sims = False, 0
                if gate and ev.evaluations < budget:
                    tried, e0 = True, ev.evaluations
                    fixed = self._repair_move(g, cluster, cm, mover, ev, cur, trial, s2)
                    sims = ev.evaluations - e0
                    if fixed is not None:
                        trial, s2 = fixed
                        totals["repairs"] += 1
                if s2.makespan_us < cur_ms - 1e-9 and (not check_memory or s2.feasible):
                    cur, s, cur_ms = trial, s2, float(s2.makespan_us)
                    here = None
                    totals["accepted"] += 1
                    totals["repaired"] += fixed is not None
                    kinds[m.label] = kinds.get(m.label, 0) + 1
                    gained = True
                    misses = 0
                else:
                    misses += 1
                    if key is not None and (tried or not gate):     # not when the budget kept the repair out
                        rejected[key] = (gate, sims, int(fixed is not None))
            stage = 0 if gained else stage + 1
        return cur, s, cur_ms
