"""Write a placement into a TensorFlow graph: ``node.device`` on every node (needs TensorFlow).

`assign_devices` decides, `placed_graph_def` applies (the analysis and the
transformation are separate):

* each node gets the TensorFlow device of its placement device
  (`pardnn.backend.tf_devices.map_devices`);
* a host-only op (``"host": true`` in the graph, see docs/tensorflow.md) gets
  the CPU of device 0's task, not device 0 itself;
* a colocation group stays on one device. TensorFlow would otherwise refuse
  the graph (``allow_soft_placement=False``) or silently move the ops (with
  soft placement). A placement that splits a group has the whole group put on
  the device of the group's variable (the node the group is named after), or
  else on the device most of its members got; the ops this moves are counted
  in `Assignment.regrouped`.

`write_graph_def` writes the placed GraphDef (``.pb`` binary or ``.pbtxt``
text); `pardnn.backend.tf_savedmodel` writes a placed SavedModel.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..errors import PlacementError
from ..fileio import atomic_write
from ..ir import OpGraph
from ..placement import Placement
from .tf_devices import host_device


@dataclass(frozen=True)
class Assignment:
    """The TensorFlow device of every node, and how it was reached."""

    device: Mapping[str, str]
    """Full TensorFlow device name by node name."""
    host_ops: int
    """Ops put on the host CPU of device 0's task."""
    regrouped: tuple[str, ...]
    """Nodes moved off their placement device to keep their colocation group together."""


def is_host_op(g: OpGraph, v: int) -> bool:
    return bool(g.node_extra and g.node_extra[v] and g.node_extra[v].get("host"))


def check_placement_matches(g: OpGraph, placement: Placement, graph_def=None, *, where: str = "") -> None:
    """Raise `PlacementError` when ``placement`` (or ``graph_def``) does not belong to ``g``."""
    prefix = f"{where}: " if where else ""
    if placement.assignment.size != g.num_nodes:
        hint = f" (it was made for graph {placement.graph!r})" if placement.graph and placement.graph != g.name else ""
        raise PlacementError(f"{prefix}the placement has {placement.assignment.size} entries but graph {g.name!r} "
                             f"has {g.num_nodes} nodes: it was made for another graph{hint}")
    if graph_def is not None:
        index = g.index
        for node in graph_def.node:
            if node.name not in index:
                raise PlacementError(f"{prefix}node {node.name!r} of the model is not in graph {g.name!r}: the "
                                     "placement and the model do not match")


def assign_devices(g: OpGraph, placement: Placement, devices: Sequence[str]) -> Assignment:
    """Each node's TensorFlow device (``devices[d]`` for placement device ``d``), groups kept whole."""
    if len(devices) < placement.num_devices:
        raise PlacementError(f"the placement has {placement.num_devices} devices but only {len(devices)} "
                             "TensorFlow devices were given")
    check_placement_matches(g, placement)
    dev = placement.assignment.copy()
    regrouped: list[str] = []
    for gid, members in enumerate(g.groups):
        if members.size < 2:
            continue
        used = dev[members]
        if (used == used[0]).all():
            continue
        anchor = g.index.get(g.group_names[gid])
        if anchor is not None and g.colocation[anchor] == gid:
            target = int(dev[anchor])
        else:
            counts = Counter(used.tolist())
            target = min(counts, key=lambda d: (-counts[d], d))
        moved = members[used != target]
        regrouped.extend(g.names[int(v)] for v in moved)
        dev[members] = target
    host = host_device(devices)
    out: dict[str, str] = {}
    host_ops = 0
    for v, name in enumerate(g.names):
        if is_host_op(g, v):
            out[name] = host
            host_ops += 1
        else:
            out[name] = devices[int(dev[v])]
    return Assignment(out, host_ops, tuple(regrouped))


def placed_graph_def(graph_def, assignment: Assignment | Mapping[str, str]):
    """A copy of ``graph_def`` with ``node.device`` set for every node."""
    device = assignment.device if isinstance(assignment, Assignment) else assignment
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    for node in out.node:
        d = device.get(node.name)
        if d is None:
            raise PlacementError(f"node {node.name!r} of the model has no device in the placement")
        node.device = d
    return out


def devices_used(graph_def) -> np.ndarray:
    """The distinct ``node.device`` strings of a GraphDef (sorted)."""
    return np.array(sorted({n.device for n in graph_def.node}))


def write_graph_def(graph_def, path: str | Path) -> Path:
    """Write ``graph_def`` as binary (``.pb``) or text (``.pbtxt``), atomically."""
    p = Path(path)
    name = p.name.lower()
    if name.endswith(".pbtxt"):
        from google.protobuf import text_format

        return atomic_write(p, text_format.MessageToString(graph_def))
    if name.endswith(".pb"):
        return atomic_write(p, graph_def.SerializeToString())
    raise PlacementError(f"{p}: a placed GraphDef is written as .pb or .pbtxt")
