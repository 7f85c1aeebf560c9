"""What every backend shares, without a framework: the machine model's cluster when none is given.

The TensorFlow modules import it from here rather than from one another, so
`tf_backend` (what ``pardnn run`` and ``pardnn rewrite`` call) sits above
`tf_run` and `tf_savedmodel` and nothing below imports it back.
"""

from __future__ import annotations

from pathlib import Path

from ..cluster import Cluster
from ..errors import InputError
from ..fileio import read_json
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
