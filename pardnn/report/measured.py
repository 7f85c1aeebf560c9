"""A measured run (what ``pardnn run --json`` prints), read tolerantly for the report.

Only ``measured_us`` is required. Everything else is optional, so runs from
backends that report more (or less) still load:

* ``predicted_us``, ``whole_model_us``, ``steps``, ``outputs_match``,
  ``max_abs_diff``, ``cost_model``, ``backend``, ``devices``, ``samples_us``;
* per-device measured time, from ``per_device`` (a list of objects with a
  ``device`` index or ``name`` and one of ``measured_us`` / ``busy_us`` /
  ``compute_us``, or a plain list of numbers, one per device), or else summed
  from the ONNX backend's ``stages`` (``device``, ``device_name``,
  ``compute_us``);
* the traced step's ops per device, from ``measured_timeline`` (``devices``:
  objects with ``device``, ``name`` and ``ops``, a list of ``[name,
  start_us, dur_us]``; what ``pardnn run --json`` writes for TensorFlow). A
  run without one (an older file, an ONNX run) loads with ``lanes == ()``
  and ``no_lanes`` saying why; a malformed one is an `InputError`.

>>> run = measured_from_dict({"measured_us": 900.0, "predicted_us": 1000.0,
...                           "stages": [{"device": 0, "device_name": "a", "compute_us": 300},
...                                      {"device": 1, "device_name": "b", "compute_us": 500},
...                                      {"device": 0, "device_name": "a", "compute_us": 100}]})
>>> [(d.index, d.name, d.measured_us) for d in run.devices]
[(0, 'a', 400.0), (1, 'b', 500.0)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..fileio import read_json

_PER_DEVICE_TIME_KEYS = ("measured_us", "busy_us", "compute_us")


@dataclass(frozen=True)
class MeasuredDevice:
    index: int | None
    name: str
    measured_us: float


@dataclass(frozen=True, eq=False)
class MeasuredLane:
    """One device of the traced step: its ops, their starts and durations (microseconds from the step's start)."""

    index: int | None
    name: str
    ops: tuple[str, ...]
    start_us: np.ndarray
    dur_us: np.ndarray

    @property
    def finish_us(self) -> np.ndarray:
        return self.start_us + self.dur_us


@dataclass(frozen=True)
class MeasuredRun:
    """The parts of a run report that the HTML report shows."""

    source: str
    measured_us: float
    predicted_us: float | None = None
    whole_model_us: float | None = None
    steps: int | None = None
    outputs_match: bool | None = None
    max_abs_diff: float | None = None
    cost_model: str | None = None
    backend: str | None = None
    devices: tuple[MeasuredDevice, ...] = ()
    samples_us: tuple[float, ...] = ()
    lanes: tuple[MeasuredLane, ...] = field(default=(), repr=False)
    """The traced step's ops per device (``measured_timeline``); empty when the run has none."""
    no_lanes: str = ""
    """Why ``lanes`` is empty (when it is)."""
    ops_per_device: tuple[int, ...] = ()
    """The ops the run put on each of the placement's devices (TensorFlow runs say), else empty."""
    ops_rehomed: int = 0
    """Ops the run may have put elsewhere than the placement says: host ops (counted on device 0) and ops
    regrouped with their colocation group (``host_ops`` + ``regrouped``)."""

    def check_matches(self, placement, placement_source: str, num_devices: int) -> None:
        """Raise an `InputError` where this run cannot be of ``placement`` on a cluster of ``num_devices``:
        more ops on other devices than its host and regrouped ops explain (or another count of ops), or time
        measured on a device past the cluster's. (Names are not compared: a run names the model it ran, which
        need not be the name a graph was imported under.)"""
        mine = np.bincount(placement.assignment, minlength=len(placement.devices))
        if self.ops_per_device:
            theirs = np.asarray(self.ops_per_device, dtype=np.int64)
            n = max(theirs.size, mine.size)
            a, b = np.pad(theirs, (0, n - theirs.size)), np.pad(mine, (0, n - mine.size))
            # each op the run put elsewhere adds one to a device the placement has fewer on
            if a.sum() != b.sum() or int(np.maximum(a - b, 0).sum()) > self.ops_rehomed:
                raise InputError(f"{self.source}: the run put {_counts(np.trim_zeros(theirs, 'b'))} ops on its "
                                 f"devices, but {placement_source} puts {_counts(np.trim_zeros(mine, 'b'))}; give "
                                 f"--measured the run of {placement_source}")
        far = [d.index for d in self.devices
               if d.index is not None and not 0 <= d.index < num_devices and d.measured_us > 0]
        far += [lane.index for lane in self.lanes
                if lane.index is not None and not 0 <= lane.index < num_devices and lane.ops]
        if far:
            raise InputError(f"{self.source}: the run used device {far[0]}, but the placement's cluster has "
                             f"{num_devices} devices; give --measured the run of {placement_source}")


def _counts(c) -> str:
    return ", ".join(str(int(x)) for x in c) or "no"


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(float(x)):
        return None
    return float(x)


def _time(t: float | None, where: str) -> float | None:
    """``t``, refused when negative (a device is never busy for less than no time)."""
    if t is not None and t < 0:
        raise InputError(f"{where} is {t:g} us; a measured time is never negative")
    return t


def _per_device(d: dict, source: str) -> tuple[MeasuredDevice, ...]:
    names = d.get("devices") if isinstance(d.get("devices"), list) else []
    per = d.get("per_device")
    out: dict[Any, list] = {}
    if isinstance(per, list) and per:
        for i, item in enumerate(per):
            if isinstance(item, dict):
                idx = item.get("device", item.get("index"))
                idx = idx if isinstance(idx, int) and not isinstance(idx, bool) else None
                name = item.get("name") or item.get("device_name")
                t = next((_number(item[k]) for k in _PER_DEVICE_TIME_KEYS if _number(item.get(k)) is not None),
                         None)
            else:
                idx, name, t = i, None, _number(item)
            if t is None:
                continue
            _time(t, f"{source}: per_device[{i}]'s time")
            if name is None and idx is not None and 0 <= idx < len(names):
                name = names[idx]
            key = idx if idx is not None else str(name)
            slot = out.setdefault(key, [idx, str(name if name is not None else key), 0.0])
            slot[2] += t
    elif isinstance(d.get("stages"), list):
        for i, st in enumerate(d["stages"]):
            if not isinstance(st, dict):
                continue
            idx = st.get("device")
            t = _time(_number(st.get("compute_us")), f"{source}: stages[{i}].compute_us")
            if not isinstance(idx, int) or isinstance(idx, bool) or t is None:
                continue
            name = st.get("device_name") or (names[idx] if 0 <= idx < len(names) else f"device {idx}")
            slot = out.setdefault(idx, [idx, str(name), 0.0])
            slot[2] += t
    rows = sorted(out.values(), key=lambda r: (r[0] is None, r[0] if r[0] is not None else 0, r[1]))
    return tuple(MeasuredDevice(r[0], r[1], r[2]) for r in rows)


def _lanes(d: dict, source: str) -> tuple[tuple[MeasuredLane, ...], str]:
    tl = d.get("measured_timeline")
    if tl is None:
        if isinstance(d.get("stages"), list):
            return (), ("the run is an ONNX pipeline: onnxruntime times each stage, not each op, so there is no "
                        "measured per-op timeline")
        return (), (f"{source} has no \"measured_timeline\" (a run written before pardnn recorded one, or by "
                    "another backend)")
    where = f"{source}: measured_timeline"
    devs = tl.get("devices") if isinstance(tl, dict) else None
    if not isinstance(devs, list):
        raise InputError(f"{where}: expected an object with a \"devices\" list")
    lanes = []
    for i, dev in enumerate(devs):
        ops = dev.get("ops") if isinstance(dev, dict) else None
        if not isinstance(ops, list):
            raise InputError(f"{where}.devices[{i}]: expected an object with an \"ops\" list")
        idx = dev.get("device")
        idx = idx if isinstance(idx, int) and not isinstance(idx, bool) else None
        names, start, dur = [], [], []
        for j, op in enumerate(ops):
            ok = isinstance(op, list) and len(op) == 3 and isinstance(op[0], str)
            t = (_number(op[1]), _number(op[2])) if ok else (None, None)
            if t[0] is None or t[1] is None or t[1] < 0:
                raise InputError(f"{where}.devices[{i}].ops[{j}]: expected [name, start_us, dur_us] with "
                                 f"dur_us >= 0, got {str(op)[:80]}")
            names.append(op[0])
            start.append(t[0])
            dur.append(t[1])
        name = dev.get("name")
        lanes.append(MeasuredLane(idx, str(name) if name is not None else f"device {idx if idx is not None else i}",
                                  tuple(names), np.asarray(start, dtype=np.float64), np.asarray(dur, np.float64)))
    if not any(lane.ops for lane in lanes):
        return (), f"{source}: the measured timeline holds no ops"
    return tuple(lanes), ""


def measured_from_dict(d: Any, *, source: str = "measured run") -> MeasuredRun:
    """Read a ``pardnn run --json`` object; only ``measured_us`` is required."""
    if not isinstance(d, dict):
        raise InputError(f"{source}: expected a JSON object (the output of `pardnn run --json`), "
                         f"got {type(d).__name__}")
    measured = _number(d.get("measured_us"))
    if measured is None:
        raise InputError(f"{source}: no numeric \"measured_us\" field; is this the output of `pardnn run --json`?")
    if measured <= 0:
        raise InputError(f"{source}: \"measured_us\" is {d.get('measured_us')}; a measured step takes some time")
    steps = d.get("steps")
    match = d.get("outputs_match")
    samples = d.get("samples_us")
    lanes, no_lanes = _lanes(d, source)
    return MeasuredRun(
        source=source, measured_us=measured, predicted_us=_number(d.get("predicted_us")),
        whole_model_us=_time(_number(d.get("whole_model_us")), f"{source}: \"whole_model_us\""),
        steps=steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
        outputs_match=match if isinstance(match, bool) else None,
        max_abs_diff=_number(d.get("max_abs_diff")),
        cost_model=d.get("cost_model") if isinstance(d.get("cost_model"), str) else None,
        backend=d.get("backend") if isinstance(d.get("backend"), str) else None,
        devices=_per_device(d, source),
        samples_us=tuple(x for x in (_number(v) for v in samples) if x is not None) if isinstance(samples, list)
        else (),
        lanes=lanes, no_lanes=no_lanes,
        ops_per_device=tuple(int(x) for x in ops) if isinstance(ops := d.get("ops_per_device"), list)
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in ops) else (),
        ops_rehomed=sum(int(x) for x in (d.get("host_ops"), d.get("regrouped"))
                        if isinstance(x, int) and not isinstance(x, bool) and x > 0),
    )


def load_measured(path: str | Path) -> MeasuredRun:
    """`measured_from_dict` of a JSON file."""
    return measured_from_dict(read_json(path), source=str(path))
