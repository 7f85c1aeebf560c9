"""What every backend shares, without a framework: the machine model's cluster when none is given.

The TensorFlow modules import it from here rather than from one another, so
`tf_backend` (what ``pardnn run`` and ``pardnn rewrite`` call) sits above
`tf_run` and `tf_savedmodel` and nothing below imports it back.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..cluster import Cluster
from ..errors import InputError, PlacementError
from ..fileio import read_json
from ..ir import OpGraph
from ..placement import Placement


def default_cluster(placement: Placement) -> Cluster:
    """The machine model's cluster when none is given: the placement's devices, unlimited memory, default links."""
    return Cluster.homogeneous(placement.num_devices).renamed(placement.devices)


def placement_device_count(path: str | Path) -> int | None:
    """The number of devices a placement file lists, read without the graph (None when unknown)."""
    p = Path(path)
    if p.name.endswith((".place", ".place.gz")):
        return None
    try:
        d = read_json(p)
    except InputError:
        return None
    devices = d.get("devices") if isinstance(d, dict) else None
    return len(devices) if isinstance(devices, list) and devices else None


def check_devices(g: OpGraph, placement: Placement, cluster: Cluster, source: str | None = None) -> None:
    """Every used device must exist in the cluster; raises `PlacementError` naming the node (and ``source``,
    the placement's file, first)."""
    K = cluster.num_devices
    bad = np.flatnonzero(placement.assignment >= K)
    if bad.size:
        v = int(bad[0])
        d = int(placement.assignment[v])
        name = placement.devices[d] if d < len(placement.devices) else str(d)
        raise PlacementError(f"{source + ': ' if source else ''}node {g.names[v]!r} is placed on device {d} "
                             f"({name}), which is not in the cluster ({K} device{'s' if K != 1 else ''}: "
                             f"{', '.join(cluster.names)})")
