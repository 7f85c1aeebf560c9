"""Slicing (ParDNN step 1.1): cut the graph into paths.

The first K clusters are *primary*: the critical path of the graph (compute
plus communication, `pardnn.costs.CostModel`), then the critical path of
what is left, and so on: one per device. Every remaining node then joins a
*secondary* cluster: the heaviest remaining paths, walked from the free node
with the largest bottom level along the heaviest free successor. Bottom
levels are recomputed on the free nodes for each primary path (K passes of
O(V+E)) and once for all secondary paths, so the pass is O(K(V+E) + V log V).

Tiny example::

    a(5) --> b(5) --> c(5)        primary 0 (K=1): a, b, c
      \\
       `--> x(1)                   secondary cluster 1: x

>>> from pardnn.ir import GraphBuilder
>>> from pardnn.cluster import Cluster
>>> bld = GraphBuilder("t")
>>> for n, t in [("a", 5), ("b", 5), ("c", 5), ("x", 1)]:
...     _ = bld.add_node(n, time_us=t)
>>> for s, d in [("a", "b"), ("b", "c"), ("a", "x")]:
...     bld.add_edge(s, d)
>>> st = Slice()(bld.build(), Cluster.homogeneous(1), PlanState())
>>> st.paths.path.tolist(), st.paths.num_primary
([0, 0, 0, 1], 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..analysis import topological_order
from ..cluster import Cluster
from ..machine import CostModel
from ..ir import OpGraph
from ..pipeline import Paths, PlanState
from ._kernels import slice_paths


@dataclass(frozen=True)
class Slice:
    name: ClassVar[str] = "slice"
    requires: ClassVar[tuple[str, ...]] = ()
    makes: ClassVar[tuple[str, ...]] = ("paths",)

    def __call__(self, g: OpGraph, cluster: Cluster, state: PlanState) -> PlanState:
        cm = CostModel.build(g, cluster)
        optr, oeids = g.out_csr
        cl, num_primary, num_paths = slice_paths(topological_order(g), optr, g.edge_dst[oeids], cm.c[oeids],
                                                    cm.w, cluster.num_devices)
        return state.replace(paths=Paths(cl, int(num_primary), int(num_paths))).with_stats(
            self.name, primary=int(num_primary), secondary=int(num_paths - num_primary))
