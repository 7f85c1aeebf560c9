"""A lower bound on the step time: no placement on the cluster runs the step faster (SPEC §1).

`makespan_lower_bound` takes the largest of five sound bounds. Each holds for every placement that keeps
the graph's pins and colocation groups, with any communication (a transfer or a control edge never makes
an op start earlier), because it counts compute alone and every device runs one op at a time without
pre-emption:

* **critical path**: the longest path of op times, at the fastest device's speed;
* **work**: the total op time over the sum of the devices' speeds;
* **unit**: a colocation unit runs on one device, one op at a time: its ops whose head is at least
  ``x`` cannot all be done before ``x`` plus their op time (at the fastest speed, or the speed of the
  device the unit is pinned to) plus the shortest tail among them; the same backwards, from tails. At
  the lowest head it is at least the unit's whole op time;
* **pinned**: the op time of the units pinned to each device (a pinned op's whole group goes with it), at
  that device's speed;
* **energy** (after Fernandez and Bussell's bound for precedence-constrained scheduling): an op ``v``
  of op time ``w[v]`` cannot start before its *head* ``h[v]``, the longest path of op times before it at
  the fastest speed ``smax``. So at least ``min(w[v], max(0, w[v] - smax (s - h[v])))`` of its op time
  runs after any instant ``s``, and the devices do at most ``sum(speed)`` op time per microsecond: ``T >=
  s + (that, summed over every op) / sum(speed)`` for every ``s`` before the last op's end (where some of
  that work is left). The largest of these is at a breakpoint ``h[v]`` or ``h[v] + w[v] / smax``, found
  exactly by sorting them. The same holds backwards, with *tails* (the longest path after an op). At
  ``s = 0`` it is the work bound; it rises above the work and the critical path where the graph is narrow at its
  start or end (a long chain of layers before a wide part).

A window open at both ends was tried as well (the part of each op that must run inside ``[a, T - b]``): it
added at most 0.06% on the held-out graphs and 0.1% geomean on the tuning graphs, at 15 times the cost, so
it was left out (benchmarks/RESULTS.md, twenty-fourth round).

It is a lower bound, not the optimum: it prices no communication and no memory, so a step whose plans are
bound by transfers (many small ops at K = 8) stays well above it. The work is O((V + E) log V): a
topological sweep each way and eight sorts.

Tiny example: two independent chains of 3 and 1 us on two devices can never finish before 3 us (the
critical path); on one device, before 4 us (the work)::

    >>> from pardnn.ir import GraphBuilder
    >>> from pardnn.cluster import Cluster
    >>> b = GraphBuilder("two")
    >>> for n, t in [("a", 1), ("b", 2), ("c", 1)]:
    ...     _ = b.add_node(n, time_us=t)
    >>> b.add_edge("a", "b")
    >>> g = b.build()
    >>> makespan_lower_bound(g, Cluster.homogeneous(2)).value_us
    3.0
    >>> makespan_lower_bound(g, Cluster.homogeneous(1)).value_us
    4.0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .analysis import bottom_levels, top_levels
from .cluster import Cluster
from .ir import OpGraph


@dataclass(frozen=True)
class LowerBound:
    """A step time no placement on the cluster beats, and the bounds it is the largest of (microseconds)."""

    critical_path_us: float
    work_us: float
    unit_us: float
    pinned_us: float
    energy_us: float

    @property
    def value_us(self) -> float:
        return max(self.critical_path_us, self.work_us, self.unit_us, self.pinned_us, self.energy_us)

    @property
    def binding(self) -> str:
        """Which bound is the largest: the first, in field order, within 1e-9 of it (sums in another order
        differ in their last bits, and the energy bound equals the work bound on one device)."""
        vals = {"critical path": self.critical_path_us, "work": self.work_us, "unit": self.unit_us,
                "pinned": self.pinned_us, "energy": self.energy_us}
        top = self.value_us
        return next(k for k, v in vals.items() if v >= top - 1e-9 * abs(top))


def how_far_above(makespan_us: float, lower_us: float) -> str:
    """How a step time stands to its lower bound, for a sentence: "reaches it", "is 3.2% above it", or, for a
    placement that breaks a pin or a colocation group (only such a one can be faster), "is below it"."""
    if makespan_us < lower_us * (1 - 1e-9):
        return "is below it: it breaks a pin or a colocation group"
    if makespan_us <= lower_us * (1 + 1e-9):
        return "reaches it"
    return f"is {100 * (makespan_us / lower_us - 1):.1f}% above it" if lower_us > 0 else "is above it"


def _ramp_max(r: np.ndarray, h: np.ndarray, rate: float, smax: float) -> float:
    """The largest ``s + sum(clamp(r + smax (h - s), 0, r)) / rate`` over the breakpoints ``s`` (0, each ``h``
    and each ``e = h + r / smax``): for ``s`` up to the last ``e`` some of the work is left after ``s``, so
    each value is a bound; past it the sum is 0 and ``s`` alone would be no bound at all.

    Each term is ``r`` up to ``s = h``, falls with slope ``smax`` to 0 at ``e``, and stays 0; the sum is
    piecewise linear, so the largest value up to the last ``e`` is at a breakpoint. With ``A = r + smax h``::

        sum = sum(r over h >= s) + sum(A over h < s) - smax s #(h < s) - (the same over e <= s)

    (an op with ``e <= s`` adds ``A - smax s <= 0`` to the middle term and is taken out again by the last;
    one with ``h = s = e`` has ``r = 0`` and adds 0 to both.)
    """
    e = h + r / smax
    a = r + smax * h
    oh = np.argsort(h, kind="stable")
    oe = np.argsort(e, kind="stable")
    hs, es = h[oh], e[oe]
    cr = np.concatenate(([0.0], np.cumsum(r[oh])))
    ca = np.concatenate(([0.0], np.cumsum(a[oh])))
    cae = np.concatenate(([0.0], np.cumsum(a[oe])))
    s = np.concatenate(([0.0], hs, es))
    ih = np.searchsorted(hs, s, side="left")         # ops with h < s
    ie = np.searchsorted(es, s, side="right")        # ops with e <= s
    total = (cr[-1] - cr[ih]) + (ca[ih] - smax * s * ih) - (cae[ie] - smax * s * ie)
    # those prefix sums cancel (A grows with h): the best s is taken from them, its value summed term by term
    best = float(s[int(np.argmax(s + total / rate))])
    return best + float(np.minimum(np.maximum(r + smax * (h - best), 0.0), r).sum()) / rate


def _one_device(key: np.ndarray, tail: np.ndarray, time: np.ndarray, unit: np.ndarray) -> float:
    """The largest ``x + sum(time over S) + min(tail over S)`` over each unit's sets ``S`` of the ops whose
    ``key`` is at least ``x``, one of their keys: the ops of a unit run one after another on one device.

    The sets grow from each unit's largest key down (ops of equal key join one by one: a smaller set is a
    weaker bound, never a wrong one). The running minimum of the tails restarts at each unit: on tail ranks
    offset by the unit's position, which keeps it exact.
    """
    n = key.size
    order = np.lexsort((-key, unit))
    u, q = unit[order], time[order]
    start = np.empty(n, dtype=bool)
    start[0] = True
    np.not_equal(u[1:], u[:-1], out=start[1:])
    seg = np.cumsum(start) - 1
    cum = np.cumsum(q)
    done = (cum - q)[np.flatnonzero(start)][seg]        # op time of the units before this one
    by_tail = np.argsort(tail, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[by_tail] = np.arange(n)
    least = np.minimum.accumulate(rank[order] - seg * n) + seg * n
    return float(np.max(key[order] + (cum - done) + tail[by_tail][least]))


_RECENT = "_lower_bound_recent"


def makespan_lower_bound(g: OpGraph, cluster: Cluster) -> LowerBound:
    """A step time that no placement of ``g`` on ``cluster`` beats under SPEC §1 (see the module's text).

    Deterministic: the same numpy calls on the same arrays. The last call's bound is kept on ``g`` and
    handed out again for the same cluster object (clusters and graphs are frozen): a command that prints
    the bound and writes the report asks twice, and each costs about 0.2 s at 200k ops.
    """
    recent = g.__dict__.get(_RECENT)
    if recent is not None and recent[0] is cluster:
        return recent[1]
    out = _lower_bound(g, cluster)
    object.__setattr__(g, _RECENT, (cluster, out))
    return out


def _lower_bound(g: OpGraph, cluster: Cluster) -> LowerBound:
    speed = cluster.speed
    smax, rate = float(speed.max()), float(speed.sum())
    w = np.asarray(g.time_us, dtype=np.float64)
    if g.num_nodes == 0:
        return LowerBound(0.0, 0.0, 0.0, 0.0, 0.0)
    p = w / smax
    h = top_levels(g, p)
    t = bottom_levels(g, p) - p
    cp = float(np.max(h + p + t))
    work = float(w.sum()) / rate
    unit_w = np.bincount(g.unit, weights=w, minlength=g.num_units)
    pin = g.unit_pin
    free = pin < 0
    # each op at the speed of the device its unit is pinned to (a pin past the last device breaks the rules)
    where = pin[g.unit]
    on = (where >= 0) & (where < cluster.num_devices)
    q = np.where(on, w / speed[np.where(on, where, 0)], p)
    unit = max(_one_device(h, t, q, g.unit), _one_device(t, h, q, g.unit))
    pinned = 0.0
    if not free.all():      # pins past the last device break the rules: no placement keeps them
        per = np.bincount(pin[~free], weights=unit_w[~free], minlength=cluster.num_devices)[:cluster.num_devices]
        pinned = float(np.max(per / speed))
    energy = max(_ramp_max(w, h, rate, smax), _ramp_max(w, t, rate, smax))
    return LowerBound(cp, work, unit, pinned, energy)
