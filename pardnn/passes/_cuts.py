"""Contiguous cuts of a topological order: the seed pass's ``cut`` start.

A pipeline split puts the ops of a topological order on the devices in
consecutive segments, so data crosses devices only at the segment
boundaries. Where a graph is (nearly) a chain, as an inference step is, that
is what the best plan looks like, and a search from a path-based or list
schedule may not find it: each of its moves changes one op or path, and a
cut moves a whole tail at once.

Segment ``j`` runs on device ``j``; each boundary sits where the fewest bytes
cross it (a tensor crosses every boundary between its producer and its last
consumer), within a window of work around the boundary that balances the
work in proportion to the devices' speeds. Colocation units move whole (a
unit goes where its first op in the order falls), pinned units stay on their
devices.

>>> from pardnn.ir import GraphBuilder
>>> from pardnn.cluster import Cluster
>>> b = GraphBuilder("chain")
>>> for i, mb in enumerate([8, 8, 1, 8, 8, 8]):
...     _ = b.add_node(f"n{i}", time_us=10.0, output_bytes=mb * 10**6)
>>> for i in range(5):
...     _ = b.add_edge(f"n{i}", f"n{i + 1}")
>>> [p.tolist() for p in cut_plans(b.build(), Cluster.homogeneous(2), choices=2)]
[[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]]
"""

from __future__ import annotations

import numpy as np

from ..analysis import topological_order
from ..cluster import Cluster
from ..ir import OpGraph

WINDOW = 0.5
"""A boundary may move this share of a balanced segment's work either way from its balanced position."""


def crossing_bytes(g: OpGraph, pos: np.ndarray) -> np.ndarray:
    """``c[i]``: bytes of the tensors that cross a cut before position ``i`` of the order (``pos[v]``: op
    ``v``'s place), each once: produced before ``i``, read at or after it (data edges only)."""
    n = g.num_nodes
    data = ~g.edge_control
    pid = g.edge_port_id[data]
    last = np.full(g.num_ports, -1, dtype=np.int64)
    np.maximum.at(last, pid, pos[g.edge_dst[data]])
    owner = pos[g.port_owner]
    live = last > owner
    diff = np.zeros(n + 1, dtype=np.float64)
    np.add.at(diff, owner[live] + 1, g.port_bytes[live].astype(np.float64))
    np.add.at(diff, last[live] + 1, -g.port_bytes[live].astype(np.float64))
    return np.cumsum(diff)[:n]


def cut_plans(g: OpGraph, cluster: Cluster, *, choices: int = 4) -> list[np.ndarray]:
    """Up to ``choices`` distinct assignments: the ``r``-th takes, at every boundary, the position with the
    ``r``-th fewest crossing bytes in its window (ties: the one nearer the balanced place, then the earlier)."""
    K = cluster.num_devices
    n = g.num_nodes
    if K < 2 or n == 0:
        return []
    order = topological_order(g)
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    # a unit's place is its first op's: units (and colocation groups) are never split
    first = np.full(g.num_units, n, dtype=np.int64)
    np.minimum.at(first, g.unit, pos)
    upos = first[g.unit]
    # positions in the order of the units' places (ties: the order itself)
    seq = np.lexsort((pos, upos))
    place = np.empty(n, dtype=np.int64)
    place[seq] = np.arange(n)
    cross = crossing_bytes(g, place)
    work = np.cumsum(np.asarray(g.time_us, dtype=np.float64)[seq])
    total = float(work[-1])
    share = np.cumsum(cluster.speed) / float(cluster.speed.sum())
    # a cut at position i (1 <= i < n) puts seq[:i] before it; it may only fall between two units
    ok = np.zeros(n, dtype=bool)
    ok[1:] = upos[seq[1:]] != upos[seq[:-1]]
    half = WINDOW * total / K
    before = np.concatenate([[0.0], work[:-1]])      # the work before a cut at each position
    picks: list[np.ndarray] = []
    for j in range(K - 1):
        target = share[j] * total
        cand = np.flatnonzero(ok & (np.abs(before - target) <= half))
        if cand.size == 0:
            return []
        # fewest bytes first, then nearest the balanced place (a uniform chain ties everywhere), then earliest
        picks.append(cand[np.lexsort((cand, np.abs(before[cand] - target), cross[cand]))][:choices])
    plans: list[np.ndarray] = []
    pinned = g.unit_pin[g.unit]
    for r in range(min(choices, max(p.size for p in picks))):      # beyond, every boundary repeats its last
        cuts = [int(p[min(r, p.size - 1)]) for p in picks]
        if any(b <= a for a, b in zip(cuts, cuts[1:])):      # boundaries out of order: no such plan
            continue
        seg = np.searchsorted(np.asarray(cuts), place, side="right")
        dev = np.where((pinned >= 0) & (pinned < K), pinned, seg).astype(np.int64)
        if not any(np.array_equal(dev, p) for p in plans):
            plans.append(dev)
    return plans
