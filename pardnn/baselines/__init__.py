"""Placers to compare against, each a function ``place(g, cluster) -> Placement``.

`PLACERS` maps the names the command line accepts to those functions. Every
placer keeps colocation groups whole and pinned ops on their device. A name
starting with ``m-`` is the memory-aware variant: it skips devices without
room (see `pardnn.baselines.common`); the plain name ignores memory as the
published algorithm does. The simulator scores every placement.

==========  ================================================================
single      everything on the device with the most memory
m-topo      Baechi's m-TOPO: topological order, fill devices up to a share
etf         earliest task first list scheduling (Hwang et al.)
m-etf       Baechi's m-ETF
sct         small communication times: favourite-child LP + list scheduling
m-sct       Baechi's m-SCT
heft        HEFT: upward rank, earliest finish time, insertion (Topcuoglu et al.)
m-heft      HEFT skipping devices without room
cpop        CPOP: critical path on one device, the rest by earliest finish
m-cpop      CPOP skipping devices without room
metis       METIS on the unit graph, balancing compute (pymetis)
m-metis     METIS balancing compute and memory
expert      a topological order cut into chunks of equal compute
m-expert    the same, ending a chunk early when memory runs out
==========  ================================================================
"""

from __future__ import annotations

from typing import Callable

from ..cluster import Cluster
from ..ir import OpGraph
from ..placement import Placement
from . import etf, expert, heft, metis, mtopo, sct, single

Placer = Callable[[OpGraph, Cluster], Placement]

PLACERS: dict[str, Placer] = {
    "single": single.place,
    "m-topo": mtopo.place,
    "etf": etf.place,
    "m-etf": etf.place_m,
    "sct": sct.place,
    "m-sct": sct.place_m,
    "heft": heft.place,
    "m-heft": heft.place_m,
    "cpop": heft.place_cpop,
    "m-cpop": heft.place_m_cpop,
    "metis": metis.place,
    "m-metis": metis.place_m,
    "expert": expert.place,
    "m-expert": expert.place_m,
}
