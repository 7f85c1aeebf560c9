"""Placers to compare against, each a function ``place(g, cluster) -> Placement``.

`PLACERS` maps the names the command line accepts to those functions.
"""

from __future__ import annotations

from typing import Callable

from ..cluster import Cluster
from ..ir import OpGraph
from ..placement import Placement
from . import mtopo

Placer = Callable[[OpGraph, Cluster], Placement]

PLACERS: dict[str, Placer] = {
    "m-topo": mtopo.place,
}
