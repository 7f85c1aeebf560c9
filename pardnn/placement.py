"""A placement: which device runs each op, and its files (SPEC §4).

`Placement` is a value: an int array (device index per node id) plus the
device names. Two file forms are read and written: ``pardnn.placement`` JSON
and ParDNN's plain ``name device_index`` text (``.place``). Reading checks the
file against its graph: every node exactly once, no unknown names, device
indices in range.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .cluster import MAX_DEVICES
from .errors import InputError, PlacementError
from .fileio import atomic_write, parse_json, read_json, read_text, write_json
from .ir import OpGraph, check_graph

PLACEMENT_FORMAT = "pardnn.placement"
PLACEMENT_VERSION = 1


def device_indices(values: Any) -> np.ndarray:
    """``values`` (an array or a list, one device index per node id) as an int64 array.

    A `PlacementError` where it is not one whole number per node: a 2-D array, or a value such as 1.9 or
    NaN, which a plain ``astype(np.int64)`` would truncate to another device without a word.

    >>> device_indices([0, 1.0]).tolist()
    [0, 1]
    """
    a = np.asarray(values)
    if a.ndim != 1:
        raise PlacementError(f"a placement is one device index per node (a 1-D array), got shape {a.shape}")
    if a.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            odd = np.flatnonzero(~np.isfinite(a) | (a != np.trunc(a)))
        if odd.size:
            v = int(odd[0])
            raise PlacementError(f"node id {v} is placed on device {float(a[v])!r}; a device is a whole number")
    elif a.dtype.kind not in "iu":
        raise PlacementError(f"a placement's devices are whole numbers, got an array of {a.dtype}")
    return a.astype(np.int64, copy=False)


@dataclass(frozen=True, eq=False)
class Placement:
    """Device index of every node (``assignment[v]`` for node id ``v``)."""

    assignment: np.ndarray
    devices: tuple[str, ...]
    graph: str = ""
    predicted: dict | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        a = device_indices(self.assignment)
        object.__setattr__(self, "assignment", a)
        object.__setattr__(self, "devices", tuple(self.devices))
        if len(self.devices) > MAX_DEVICES:     # a cluster's most: simulating it said so naming no file
            raise PlacementError(f"a placement may list at most {MAX_DEVICES} devices, got {len(self.devices)}")
        if a.size and (a.min() < 0 or a.max() >= len(self.devices)):
            bad = int(np.flatnonzero((a < 0) | (a >= len(self.devices)))[0])
            raise PlacementError(f"node id {bad} is placed on device {a[bad]}, but there are "
                                 f"{len(self.devices)} devices (0..{len(self.devices) - 1})")

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    def same_as(self, other: "Placement") -> bool:
        return self.devices == other.devices and np.array_equal(self.assignment, other.assignment)

    def with_predicted(self, predicted: dict | None) -> "Placement":
        return Placement(self.assignment, self.devices, self.graph, predicted, dict(self.meta))

    def counts(self) -> np.ndarray:
        return np.bincount(self.assignment, minlength=self.num_devices)

    def to_dict(self, g: OpGraph) -> dict[str, Any]:
        if g.num_nodes != self.assignment.size:
            raise PlacementError(f"placement has {self.assignment.size} entries but graph {g.name!r} "
                                 f"has {g.num_nodes} nodes")
        out: dict[str, Any] = {
            "format": PLACEMENT_FORMAT, "version": PLACEMENT_VERSION,
            "graph": self.graph or g.name, "devices": list(self.devices),
            "assignment": dict(zip(g.names, self.assignment.tolist())),
        }
        if self.predicted is not None:
            out["predicted"] = self.predicted
        out.update({k: v for k, v in self.meta.items() if k not in out})
        return out


def _check_complete(g: OpGraph, assigned: np.ndarray, where: str) -> None:
    missing = np.flatnonzero(assigned < 0)
    if missing.size:
        first = g.names[int(missing[0])]
        raise PlacementError(f"{where}: {missing.size} node(s) of graph {g.name!r} have no device, "
                             f"for example {first!r}")


def placement_from_dict(d: Any, g: OpGraph, *, source: str | None = None) -> Placement:
    """Check a parsed ``pardnn.placement`` against ``g`` and build it."""
    where = source or "placement"
    if not isinstance(d, dict) or d.get("format") != PLACEMENT_FORMAT:
        got = d.get("format") if isinstance(d, dict) else type(d).__name__
        raise PlacementError(f"{where}: \"format\" is {got!r}, expected {PLACEMENT_FORMAT!r}")
    if isinstance(d.get("version"), bool) or d.get("version", PLACEMENT_VERSION) != PLACEMENT_VERSION:
        raise PlacementError(f"{where}: unsupported {PLACEMENT_FORMAT} version {d.get('version')!r}")
    devices = d.get("devices")
    if not isinstance(devices, list) or not devices or not all(isinstance(x, str) for x in devices):
        raise PlacementError(f"{where}: \"devices\" must be a non-empty list of device names")
    if len(devices) > MAX_DEVICES:
        raise PlacementError(f"{where}: \"devices\" may list at most {MAX_DEVICES} devices, got {len(devices)}")
    if len(set(devices)) != len(devices):
        dup = next(x for x in devices if devices.count(x) > 1)
        raise PlacementError(f"{where}: device name {dup!r} appears twice in \"devices\"")
    assignment = d.get("assignment")
    if not isinstance(assignment, dict):
        raise PlacementError(f"{where}: \"assignment\" must be an object mapping node names to device indices")
    graph_name = d.get("graph", "")
    if not isinstance(graph_name, str):
        raise PlacementError(f"{where}: \"graph\" must be the graph's name, a string, got {graph_name!r}")
    assigned = np.full(g.num_nodes, -1, dtype=np.int64)
    index = g.index
    K = len(devices)
    unknown = [n for n in assignment if n not in index]
    if unknown:
        hint = f" (the placement was made for graph {graph_name!r})" if graph_name and graph_name != g.name else ""
        raise PlacementError(f"{where}: node {unknown[0]!r} is not in graph {g.name!r}"
                             f"{f' ({len(unknown)} unknown names in all)' if len(unknown) > 1 else ''}{hint}")
    for name, dev in assignment.items():
        if isinstance(dev, bool) or not isinstance(dev, int) or not 0 <= dev < K:
            raise PlacementError(f"{where}: node {name!r} is on device {dev!r}, but the placement "
                                 f"lists {K} devices (0..{K - 1})")
        assigned[index[name]] = dev
    _check_complete(g, assigned, where)
    if graph_name and graph_name != g.name:
        logging.getLogger("pardnn").warning("%s: the placement was made for graph %r, not %r (every node name "
                                            "matches, so it is used)", where, graph_name, g.name)
    predicted = d.get("predicted")
    meta = {k: v for k, v in d.items() if k not in ("format", "version", "graph", "devices", "assignment",
                                                    "predicted")}
    return Placement(assigned, tuple(devices), graph_name, predicted, meta)


def check_batch_size(made: Any, batch_size: int | None, where: str, doing: str = "run") -> None:
    """Refuse to run (or rewrite, ``doing="rewrite"``) a placement made for one ``--batch-size`` with another.

    ``made`` is the placement's recorded ``batch_size`` (None: not recorded,
    nothing to check). Its tensor sizes, so its memory and times, were
    another step's: an `InputError` naming both.
    """
    if made is not None and made != batch_size:
        given = f"--batch-size {batch_size}" if batch_size is not None else "no --batch-size"
        raise InputError(f"{where}: the placement was made with --batch-size {made}, but this {doing} has {given}; "
                         f"{doing} with --batch-size {made}, or partition again for the batch you want")


def costs_of(graph_meta: dict) -> str | None:
    """What a framework graph's op times are, as a placement records it (``costs``): ``"profiled"`` (TensorFlow's
    or onnxruntime's profile), ``"roofline (PRESET)"`` (estimated for a device preset), or None (a graph that
    does not say: peers' files, hand-made graphs)."""
    tf_costs, onnx_costs = graph_meta.get("costs"), graph_meta.get("cost_model")
    if tf_costs == "profile" or (isinstance(onnx_costs, str) and "profile" in onnx_costs):
        return "profiled"
    if tf_costs == "roofline":
        return f"roofline ({graph_meta.get('device_profile', '?')})"
    if isinstance(onnx_costs, str) and onnx_costs.startswith("roofline"):
        return onnx_costs
    return None


def check_costs(made: Any, graph_meta: dict, where: str, doing: str = "run") -> None:
    """Warn where a run (or a simulation, a report: ``doing``) predicts with other op times than its placement
    was made with (a placement made with ``--profile`` run without it compared a roofline prediction with the
    measured step); ``made`` is the placement's recorded ``costs`` (None: nothing to check)."""
    now = costs_of(graph_meta)
    if isinstance(made, str) and now is not None and made != now:
        if made == "profiled":
            advice = "give it --profile, as the placement's graph had"
        elif now == "profiled":
            advice = "leave --profile out, as the placement's graph did"
        else:
            preset = made[len("roofline ("):-1] if made.startswith("roofline (") else made
            advice = f"give it --device-profile {preset}, as the placement's graph had"
        logging.getLogger("pardnn").warning("%s: the placement was made with %s op times, but this %s predicts "
                                            "with %s ones; %s, for a prediction of the same costs", where, made,
                                            doing, now, advice)


def note_batch_size(made: Any, graph_meta: dict, where: str, doing: str) -> None:
    """Warn where a simulation or a report (``doing``) reads the graph at another batch than its placement was
    made for: a what-if it may be, but its memory and times are another step's (`run` refuses it)."""
    now = graph_meta.get("batch_size")
    if made is not None and now is not None and made != now:
        logging.getLogger("pardnn").warning("%s: the placement was made with --batch-size %s; this %s reads the "
                                            "graph at --batch-size %s, another step's memory and times", where,
                                            made, doing, now)


_DEVICE_INDEX = re.compile(r"-?[0-9]+")
"""A ``.place`` line's device: ASCII digits, a minus for the range error (`int` also reads '1_0' and '+1')."""


def read_place_text(text: str, g: OpGraph, *, num_devices: int | None = None,
                    source: str | None = None) -> Placement:
    """Read ``name device`` lines (ParDNN's ``.place``); the device is split off at the last space."""
    where = source or "placement"
    assigned = np.full(g.num_nodes, -1, dtype=np.int64)
    index = g.index
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, dev = line.rpartition(" ")
        name = name.strip()
        if not name:
            raise PlacementError(f"{where}:{lineno}: expected 'name device', got {line!r}")
        if not _DEVICE_INDEX.fullmatch(dev):    # int() also reads '1_0' as 10, '+1' and other scripts' digits
            raise PlacementError(f"{where}:{lineno}: device of {name!r} must be an integer, got {dev!r}")
        digits = dev.lstrip("-").lstrip("0") or "0"
        # Python reads at most 4300 digits: a longer number is out of range anyway
        d = (-1 if dev.startswith("-") else 1) * (int(digits) if len(digits) <= 18 else MAX_DEVICES)
        v = index.get(name)
        if v is None:
            raise PlacementError(f"{where}:{lineno}: node {name!r} is not in graph {g.name!r}")
        limit = num_devices if num_devices is not None else MAX_DEVICES     # a cluster's most, as -k's
        if d < 0 or d >= limit:
            rng = f"0..{limit - 1}"
            shown = dev if len(dev) <= 24 else dev[:24] + "..."
            raise PlacementError(f"{where}:{lineno}: node {name!r} is on device {shown}, expected {rng}")
        if assigned[v] >= 0:
            raise PlacementError(f"{where}:{lineno}: node {name!r} is placed twice")
        assigned[v] = d
    _check_complete(g, assigned, where)
    K = num_devices if num_devices is not None else int(assigned.max()) + 1 if assigned.size else 1
    return Placement(assigned, tuple(f"/device:GPU:{i}" for i in range(K)), g.name)


def load_placement(path: str | Path, g: OpGraph, *, num_devices: int | None = None) -> Placement:
    """Read a ``pardnn.placement`` JSON file or a ``.place`` text file and check it against ``g``."""
    check_graph(g, "load_placement")
    p = Path(path)
    if p.suffix == ".place" or p.name.endswith(".place.gz"):
        return read_place_text(read_text(p), g, num_devices=num_devices, source=str(p))
    if not p.name.lower().endswith((".json", ".json.gz")) and p.is_file():
        text = read_text(p)          # another name (--place p.txt): the form tells, as for graphs (SPEC §5)
        if not text.lstrip().startswith("{"):
            return read_place_text(text, g, num_devices=num_devices, source=str(p))
        data = parse_json(text, p)
    else:
        data = read_json(p)
    pl = placement_from_dict(data, g, source=str(p))
    if num_devices is not None and pl.num_devices != num_devices:
        raise PlacementError(f"{p}: the placement has {pl.num_devices} devices but the cluster has {num_devices}")
    return pl


def is_place_text(path: str | Path) -> bool:
    """Whether ``path`` names ParDNN's ``.place`` text form (else a JSON placement)."""
    p = Path(path)
    return p.suffix == ".place" or p.name.endswith(".place.gz")


def _utf8(name: str) -> bool:
    """Whether ``name`` can be written as UTF-8 (a lone surrogate, ``"a\\ud800"`` from JSON, cannot)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_place_names(g: OpGraph, path: str | Path) -> None:
    """Raise a `PlacementError` when a node's name cannot be read back from a ``.place`` line: one with a line
    break, spaces at either end (a line is stripped) or a leading ``#`` (a comment)."""
    for name in g.names:
        if len(name.splitlines()) != 1 or name != name.strip() or name.startswith("#") or not _utf8(name):
            raise PlacementError(f"{path}: node {name!r} cannot be written in the .place text form (one line per "
                                 "name, not starting with '#' nor with spaces at either end); write a JSON "
                                 "placement instead")


def save_placement(pl: Placement, g: OpGraph, path: str | Path, *, text: bool | None = None) -> Path:
    """Write JSON, or ``name device`` text when the name ends in ``.place`` or ``text`` is true
    (`check_place_names`)."""
    check_graph(g, "save_placement")
    if not isinstance(pl, Placement):
        raise TypeError(f"save_placement: the placement must be a Placement, got {type(pl).__name__}")
    p = Path(path)
    if is_place_text(p) if text is None else text:
        check_place_names(g, p)
        lines = [f"{n} {d}" for n, d in zip(g.names, pl.assignment.tolist())]
        return atomic_write(p, "\n".join(lines) + "\n")
    return write_json(p, pl.to_dict(g))


def single_device(g: OpGraph, devices: Sequence[str] = ("/device:GPU:0",), device: int = 0) -> Placement:
    return Placement(np.full(g.num_nodes, device, dtype=np.int64), tuple(devices), g.name)
