"""The cluster: devices with memory and speed, and the links between them (SPEC §3).

>>> c = Cluster.homogeneous(2, memory_bytes=2**30)
>>> c.num_devices, c.transfer_time_us(0, 1, 12000)
(2, 26.0)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .errors import ClusterError
from .fileio import read_json, write_json
from .units import is_number, is_whole

CLUSTER_FORMAT = "pardnn.cluster"
CLUSTER_VERSION = 1
DEFAULT_LATENCY_US = 25.0
DEFAULT_BANDWIDTH = 12000.0  # bytes per microsecond = 12 GB/s
SPEED_RANGE = (1e-6, 1e6)
"""A device's speed, relative to 1.0. Further out, op times (up to 1e15 us) reach infinity or differ across
devices by more than the placers' integer weights hold (METIS failed at a ratio of 1e100)."""
MAX_LATENCY_US = 1e15
"""The most a latency (or a transfer's fixed CPU time) may be: a graph's op time limit (``ir.MAX_TIME_US``)."""
MAX_DEVICES = 4096
"""The most devices a cluster may have, from a file or from Python, as ``--devices`` allows (a larger count's
link tables alone take ``K * K`` cells; the placers' were tried up to 4,096)."""
MIN_BANDWIDTH = 1e-6
"""The least bytes per microsecond a link (or a transfer's CPU part) may move: 2**53 bytes then take 1e22 us."""


@dataclass(frozen=True)
class Device:
    """One device. ``memory_bytes`` None means unlimited."""

    name: str
    memory_bytes: int | None = None
    speed: float = 1.0

    @property
    def capacity(self) -> float:
        return math.inf if self.memory_bytes is None else float(self.memory_bytes)


@dataclass(frozen=True)
class Link:
    """One directed link's costs; a None endpoint field takes the cluster's value."""

    latency_us: float
    bandwidth_bytes_per_us: float
    transfer_cpu_us: float | None = None
    transfer_cpu_bytes_per_us: float | None = None


def named_as(cluster: "Cluster", names: Sequence[str]) -> "Cluster":
    """``cluster`` with its first ``len(names)`` devices named ``names`` (the rest keep theirs; names beyond its
    devices are left for the caller's check that the plan fits the cluster); unchanged where that would name
    two devices the same."""
    full = tuple(names[:cluster.num_devices]) + cluster.names[len(names):]
    return cluster if len(set(full)) != len(full) else cluster.renamed(full)


def check_cluster(cluster: object, fn: str) -> None:
    """A `TypeError` naming ``fn``'s argument where ``cluster`` is no `Cluster` (a device count given for it came
    out as ``'int' object has no attribute 'capacity'``)."""
    if not isinstance(cluster, Cluster):
        hint = " (Cluster.homogeneous(k) makes k devices)" if isinstance(cluster, int) else ""
        raise TypeError(f"{fn}: the cluster must be a Cluster{hint}, got {type(cluster).__name__}")


def _plain(x: Any) -> float | None:
    """A checked time or rate as Python's float (None stays None)."""
    return None if x is None else float(x)


def _plain_bytes(m: Any) -> int | float | None:
    """A checked ``memory_bytes`` as Python's int or float (whole bytes: a fraction is rounded half to even, as
    a cluster file's and a graph's are), None for unlimited (None or inf)."""
    if m is None or m == math.inf:
        return None
    if is_whole(m):
        return int(m)
    return float(m) if float(m).is_integer() else int(round(float(m)))


@dataclass(frozen=True, eq=False)
class Cluster:
    """Devices ``0..K-1`` fully connected by links (SPEC §1, §3).

    ``transfer_cpu_us`` and ``transfer_cpu_bytes_per_us`` (an extension of SPEC §1, off by default) say
    that a link has no copy engine: each transfer also runs on the sending device before it takes the link
    and on the receiving device after, ``transfer_cpu_us + bytes / transfer_cpu_bytes_per_us`` on each
    (None: no per-byte part), one op at a time like any op there (docs/machine-model.md).
    """

    devices: tuple[Device, ...]
    latency_us: float = DEFAULT_LATENCY_US
    bandwidth_bytes_per_us: float = DEFAULT_BANDWIDTH
    links: tuple[tuple[Link | None, ...], ...] | None = None
    transfer_cpu_us: float = 0.0
    transfer_cpu_bytes_per_us: float | None = None

    def __post_init__(self):
        if not self.devices:
            raise ClusterError("a cluster needs at least one device")
        if isinstance(self.devices, (str, bytes)) or not all(isinstance(d, Device) for d in self.devices):
            raise ClusterError("a cluster's devices must be Device objects (Cluster.homogeneous(k) makes k), got "
                               f"{self.devices!r:.80}")     # ('ab' was AttributeError: 'str' has no 'name')
        if len(self.devices) > MAX_DEVICES:
            raise ClusterError(f"a cluster may have at most {MAX_DEVICES} devices, got {len(self.devices)}")
        for name in ("latency_us", "bandwidth_bytes_per_us", "transfer_cpu_us", "transfer_cpu_bytes_per_us"):
            v = getattr(self, name)
            if v is not None and not (is_number(v) and (_finite(v) or v == math.inf or v != v)):
                # an integer of 400 digits was an OverflowError (the checks below compare floats)
                raise ClusterError(f"{name} must be a number of at most a double's range, got {v!r:.40}")
        if self.links is not None and (isinstance(self.links, (str, bytes)) or not all(
                not isinstance(row, (str, bytes)) and all(c is None or isinstance(c, Link) for c in row)
                for row in self.links)):
            raise ClusterError("links must be a K x K matrix of Link objects or None")
        if not (self.latency_us >= 0 and math.isfinite(self.latency_us)):
            raise ClusterError(f"latency_us must be a non-negative number, got {self.latency_us}")
        if not (0 < self.bandwidth_bytes_per_us < math.inf):    # (inf was saved as Infinity, which no file reads)
            raise ClusterError(f"bandwidth_bytes_per_us must be a positive finite number, got "
                               f"{self.bandwidth_bytes_per_us}")
        if not (self.transfer_cpu_us >= 0 and math.isfinite(self.transfer_cpu_us)):
            raise ClusterError(f"transfer_cpu_us must be a non-negative number, got {self.transfer_cpu_us}")
        if self.transfer_cpu_bytes_per_us is not None and not (0 < self.transfer_cpu_bytes_per_us < math.inf):
            raise ClusterError(f"transfer_cpu_bytes_per_us must be a positive finite number or None, got "
                               f"{self.transfer_cpu_bytes_per_us}")
        links = [cell for row in self.links or () for cell in row if cell is not None]
        for what, values in (("latency_us", [self.latency_us] + [c.latency_us for c in links]),
                             ("transfer_cpu_us", [self.transfer_cpu_us] + [c.transfer_cpu_us for c in links])):
            big = [v for v in values if v is not None and v > MAX_LATENCY_US]
            if big:
                raise ClusterError(f"{what} is {big[0]:g}, more than the largest allowed ({MAX_LATENCY_US:g})")
        for what, values in (("bandwidth_bytes_per_us",
                              [self.bandwidth_bytes_per_us] + [c.bandwidth_bytes_per_us for c in links]),
                             ("transfer_cpu_bytes_per_us",
                              [self.transfer_cpu_bytes_per_us] + [c.transfer_cpu_bytes_per_us for c in links])):
            small = [v for v in values if v is not None and v < MIN_BANDWIDTH]
            if small:
                raise ClusterError(f"{what} is {small[0]:g}, less than the smallest allowed ({MIN_BANDWIDTH:g})")
            endless = [v for v in values if v is not None and not v < math.inf]
            if endless:
                raise ClusterError(f"{what} must be finite, got {endless[0]:g}")
        names = [d.name for d in self.devices]
        for i, n in enumerate(names):   # as a cluster file's: a Cluster saved with Device(None) did not load
            if not isinstance(n, str) or not n:
                raise ClusterError(f"device {i}: name must be a non-empty string, got {n!r}")
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ClusterError(f"device name {dup!r} appears twice")
        for d in self.devices:
            if not (is_number(d.speed) and d.speed > 0 and _finite(d.speed)):
                raise ClusterError(f"device {d.name!r}: speed must be a positive number, got {d.speed}")
            if not SPEED_RANGE[0] <= d.speed <= SPEED_RANGE[1]:
                raise ClusterError(f"device {d.name!r}: speed must be from {SPEED_RANGE[0]:g} to "
                                   f"{SPEED_RANGE[1]:g}, got {d.speed:g}")
            m = d.memory_bytes
            if m is not None and (not is_number(m) or not m >= 0):   # not >=: NaN, which was no limit at all
                raise ClusterError(f"device {d.name!r}: memory_bytes must be a non-negative number of bytes or "
                                   f"None (unlimited), got {m!r}")
            if m is not None and m != math.inf and not _finite(m):    # 10**400: an OverflowError as a capacity
                raise ClusterError(f"device {d.name!r}: memory_bytes must be within a double's range, got "
                                   f"{m!r:.40}")
        if self.links is not None:
            K = len(self.devices)
            if len(self.links) != K or any(len(row) != K for row in self.links):
                raise ClusterError(f"links must be a {K}x{K} matrix")
        # Python's own numbers, so that to_dict writes plain JSON: numpy's int64 was no JSON, and an infinite
        # memory was written as Infinity, which load_cluster refused; inf is None (unlimited) here
        object.__setattr__(self, "devices", tuple(Device(d.name, _plain_bytes(d.memory_bytes), float(d.speed))
                                                  for d in self.devices))
        for name in ("latency_us", "bandwidth_bytes_per_us", "transfer_cpu_us", "transfer_cpu_bytes_per_us"):
            object.__setattr__(self, name, _plain(getattr(self, name)))     # (np.float64 was no JSON either)
        if self.links is not None:
            object.__setattr__(self, "links", tuple(tuple(None if c is None else Link(
                *(_plain(getattr(c, f.name)) for f in dataclasses.fields(Link))) for c in row) for row in self.links))

    # ---- construction --------------------------------------------------------
    @classmethod
    def homogeneous(cls, k: int, memory_bytes: int | None = None, *, speed: float = 1.0,
                    latency_us: float = DEFAULT_LATENCY_US, bandwidth_bytes_per_us: float = DEFAULT_BANDWIDTH,
                    device_prefix: str = "/device:GPU:") -> "Cluster":
        if k < 1:
            raise ClusterError(f"need at least one device, got {k}")
        if k > MAX_DEVICES:     # before building them: 2,000,000 devices took 7 s to be refused
            raise ClusterError(f"a cluster may have at most {MAX_DEVICES} devices, got {k}")
        devs = tuple(Device(f"{device_prefix}{i}", memory_bytes, speed) for i in range(k))
        return cls(devs, latency_us, bandwidth_bytes_per_us)

    def with_memory(self, memory_bytes: int | Sequence[int | None] | None) -> "Cluster":
        """The same cluster with new capacities (one for all, or one per device)."""
        one = memory_bytes is None or isinstance(memory_bytes, (int, float, np.number, str))
        mem = [memory_bytes] * self.num_devices if one else list(memory_bytes)
        if len(mem) != self.num_devices:    # zip dropped the devices past a short list without a word
            raise ClusterError(f"with_memory: {len(mem)} capacities for {self.num_devices} devices")
        # whole bytes; inf (unlimited) and what is no count go to the checks as they are (int(inf) raised)
        mem = [int(round(m)) if is_number(m) and _finite(m) else m for m in mem]    # (1.5 is 2, as a file's)
        devs = tuple(Device(d.name, m, d.speed) for d, m in zip(self.devices, mem))
        return dataclasses.replace(self, devices=devs)

    def renamed(self, names: Sequence[str]) -> "Cluster":
        if isinstance(names, str) or len(names) != self.num_devices:     # zip dropped devices, as with_memory did
            raise ClusterError(f"renamed: {len(names)} names for {self.num_devices} devices")
        devs = tuple(Device(n, d.memory_bytes, d.speed) for d, n in zip(self.devices, names))
        return dataclasses.replace(self, devices=devs)

    # ---- derived arrays --------------------------------------------------------
    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices)

    @cached_property
    def capacity(self) -> np.ndarray:
        """Memory capacity per device in bytes (``inf`` when unlimited)."""
        return np.array([d.capacity for d in self.devices], dtype=np.float64)

    @cached_property
    def speed(self) -> np.ndarray:
        return np.array([d.speed for d in self.devices], dtype=np.float64)

    def _link_matrix(self, field: str, diagonal: float, none: float = math.nan) -> np.ndarray:
        """K x K matrix of a link property (``field`` of `Link`): the link's own where `links` has one
        (and it is not None), the cluster's default (its own ``field``) elsewhere, ``diagonal`` on the
        diagonal; ``none`` where the value is None."""
        K = self.num_devices
        default = getattr(self, field)
        m = np.full((K, K), none if default is None else float(default))
        if self.links is not None:
            for a in range(K):
                for c in range(K):
                    link = self.links[a][c]
                    if link is not None and getattr(link, field) is not None:
                        m[a, c] = getattr(link, field)
        np.fill_diagonal(m, diagonal)
        return m

    @cached_property
    def latency(self) -> np.ndarray:
        """K x K latency matrix in microseconds (diagonal 0)."""
        return self._link_matrix("latency_us", 0.0)

    @cached_property
    def bandwidth(self) -> np.ndarray:
        """K x K bandwidth matrix in bytes per microsecond (diagonal inf)."""
        return self._link_matrix("bandwidth_bytes_per_us", np.inf)

    @cached_property
    def transfer_cpu(self) -> np.ndarray:
        """K x K: microseconds each transfer of a link runs on each of its two devices (diagonal 0)."""
        return self._link_matrix("transfer_cpu_us", 0.0)

    @cached_property
    def transfer_cpu_bandwidth(self) -> np.ndarray:
        """K x K: bytes per microsecond of a transfer's per-byte part on each device (inf: none)."""
        return self._link_matrix("transfer_cpu_bytes_per_us", np.inf, np.inf)

    @cached_property
    def has_transfer_cpu(self) -> bool:
        """Whether any link's transfers run on its devices (else the model is SPEC §1's exactly)."""
        return bool((self.transfer_cpu > 0).any() or np.isfinite(self.transfer_cpu_bandwidth).any())

    @cached_property
    def path_latency(self) -> np.ndarray:
        """K x K: a transfer's fixed cost end to end, its CPU at both ends included (`latency` without)."""
        if not self.has_transfer_cpu:
            return self.latency
        return self.latency + 2.0 * self.transfer_cpu

    @cached_property
    def path_bandwidth(self) -> np.ndarray:
        """K x K: the bandwidth a transfer gets end to end, its CPU at both ends included (`bandwidth` without)."""
        if not self.has_transfer_cpu:
            return self.bandwidth
        with np.errstate(divide="ignore"):
            inv = 1.0 / self.bandwidth + 2.0 / self.transfer_cpu_bandwidth
            out = np.where(inv > 0, 1.0 / np.where(inv > 0, inv, 1.0), np.inf)
        np.fill_diagonal(out, np.inf)
        return out

    @cached_property
    def twins(self) -> np.ndarray:
        """Per device, the lowest-numbered device interchangeable with it (itself when there is none).

        Two devices are interchangeable when swapping their numbers maps the cluster onto itself: the same
        speed and memory, the same links to and from every other device, and the same link each way between
        them. An assignment and the one with two interchangeable devices' ops swapped are simulated alike,
        so among devices that hold no op, a move needs trying on one of each class only. With the endpoint
        CPU extension each device is its own: a device's sends are queued by their destinations' numbers.
        """
        K = self.num_devices
        out = np.arange(K)
        if K < 2 or self.has_transfer_cpu:
            return out
        kind = [(float(self.speed[d]), float(self.capacity[d])) for d in range(K)]
        if self.links is None:      # every link alike: speed and memory decide
            first: dict[tuple, int] = {}
            return np.array([first.setdefault(k, d) for d, k in enumerate(kind)], dtype=np.int64)
        # Devices a and b are twins when their rows (and columns) agree off {a, b} and m[a,b] == m[b,a]
        # for both matrices. Comparing b with every earlier class's representative row by row costs
        # O(K) each, O(K^3) in all on a ring; instead each row and column gets a linear fingerprint
        # over Z/2^64 of its values' bits (diagonal 0): for twins, f[a] - f[b] = w[b] m[a,b] - w[a] m[b,a]
        # exactly, an O(1) test per pair that no twin fails, and a pair passing it is then checked exactly.
        bits = []
        for m in (self.latency, self.bandwidth):
            v = (m + 0.0).view(np.uint64).copy()        # + 0.0: -0.0 and 0.0 alike
            np.fill_diagonal(v, 0)
            bits.append(v)
        w = np.random.default_rng(0).integers(1, 2**63, size=(2, K), dtype=np.uint64) | np.uint64(1)
        with np.errstate(over="ignore"):
            fp = [(v * w[0]).sum(axis=1, dtype=np.uint64) for v in bits] \
                + [(v.T * w[1]).sum(axis=1, dtype=np.uint64) for v in bits]
        reps: dict[tuple, list[int]] = {}
        for b in range(K):
            R = reps.setdefault(kind[b], [])
            if R:
                r = np.asarray(R)
                ok = np.ones(len(r), dtype=bool)
                with np.errstate(over="ignore"):
                    for i, v in enumerate(bits):
                        ab, ba = v[r, b], v[b, r]
                        ok &= ab == ba
                        ok &= fp[i][r] - fp[i][b] == w[0][b] * ab - w[0][r] * ba
                        ok &= fp[2 + i][r] - fp[2 + i][b] == w[1][b] * ba - w[1][r] * ab
                for a in r[ok]:
                    rest = np.ones(K, dtype=bool)
                    rest[[a, b]] = False
                    if all(np.array_equal(v[a, rest], v[b, rest]) and np.array_equal(v[rest, a], v[rest, b])
                           for v in bits):
                        out[b] = a
                        break
                else:
                    R.append(b)
            else:
                R.append(b)
        return out

    def transfer_time_us(self, a: int, c: int, nbytes: float) -> float:
        """Time to send ``nbytes`` from device ``a`` to ``c`` (0 on the same device)."""
        if a == c:
            return 0.0
        return float(self.latency[a, c] + nbytes / self.bandwidth[a, c])

    @cached_property
    def mean_latency(self) -> float:
        """Average end-to-end latency over distinct pairs (`path_latency`: endpoint CPU included)."""
        K = self.num_devices
        return float(self.path_latency.sum() / (K * (K - 1))) if K > 1 else 0.0

    @cached_property
    def mean_inv_bandwidth(self) -> float:
        """Average seconds-per-byte over distinct pairs, end to end (for device-agnostic cost estimates)."""
        K = self.num_devices
        if K < 2:
            return 0.0
        inv = 1.0 / self.path_bandwidth
        np.fill_diagonal(inv, 0.0)
        return float(inv.sum() / (K * (K - 1)))

    # ---- files ------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": CLUSTER_FORMAT, "version": CLUSTER_VERSION,
            "devices": [{"name": d.name, "memory_bytes": d.memory_bytes, "speed": d.speed} for d in self.devices],
            "latency_us": self.latency_us,
            "bandwidth_bytes_per_us": self.bandwidth_bytes_per_us,
            "links": None,
        }
        if self.links is not None:
            out["links"] = [[None if l is None else _link_dict(l) for l in row] for row in self.links]
        if self.transfer_cpu_us or self.transfer_cpu_bytes_per_us is not None:
            out["transfer_cpu_us"] = self.transfer_cpu_us
            out["transfer_cpu_bytes_per_us"] = self.transfer_cpu_bytes_per_us
        return out


def _link_dict(link: Link) -> dict[str, Any]:
    out: dict[str, Any] = {"latency_us": link.latency_us, "bandwidth_bytes_per_us": link.bandwidth_bytes_per_us}
    if link.transfer_cpu_us is not None:
        out["transfer_cpu_us"] = link.transfer_cpu_us
    if link.transfer_cpu_bytes_per_us is not None:
        out["transfer_cpu_bytes_per_us"] = link.transfer_cpu_bytes_per_us
    return out


def _num(value: Any, what: str, where: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ClusterError(f"{where}: {what} must be a number, got {value!r}")
    if not _finite(value):
        raise ClusterError(f"{where}: {what} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ClusterError(f"{where}: {what} must be {'positive' if positive else 'non-negative'}, got {value!r}")
    return float(value)


def _finite(value: int | float) -> bool:
    """Whether ``value`` is a finite double: an integer of 400 digits, which JSON reads, is not (math.isfinite
    raised an OverflowError on it, an internal error)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _opt_num(value: Any, what: str, where: str) -> float | None:
    """A positive number, or None for null (absent)."""
    return None if value is None else _num(value, what, where, positive=True)


_KEYS = {"cluster": ("format", "version", "devices", "latency_us", "bandwidth_bytes_per_us", "links",
                     "transfer_cpu_us", "transfer_cpu_bytes_per_us"),
         "device": ("name", "memory_bytes", "speed"),
         "link": ("latency_us", "bandwidth_bytes_per_us", "transfer_cpu_us", "transfer_cpu_bytes_per_us")}
"""The keys each object of a cluster file may have. Any other is refused: a misspelt ``memroy_bytes`` would
otherwise leave a device unlimited without a word (the SPEC is silent here; graphs keep unknown fields)."""


def _known_keys(obj: dict, kind: str, where: str) -> None:
    unknown = [k for k in obj if k not in _KEYS[kind]]
    if unknown:
        raise ClusterError(f"{where}: unknown key {unknown[0]!r} (a {kind} has {', '.join(_KEYS[kind])})")


def _link_from_dict(cell: dict, lat: float, bw: float, where: str) -> Link:
    _known_keys(cell, "link", where)
    cpu = cell.get("transfer_cpu_us")
    return Link(_num(cell.get("latency_us", lat), "latency_us", where),
                _num(cell.get("bandwidth_bytes_per_us", bw), "bandwidth_bytes_per_us", where, positive=True),
                None if cpu is None else _num(cpu, "transfer_cpu_us", where),
                _opt_num(cell.get("transfer_cpu_bytes_per_us"), "transfer_cpu_bytes_per_us", where))


def cluster_from_dict(d: Any, *, source: str | None = None) -> Cluster:
    where = source or "cluster"
    if not isinstance(d, dict):
        raise ClusterError(f"{where}: expected a JSON object with \"format\": \"{CLUSTER_FORMAT}\"")
    if d.get("format") != CLUSTER_FORMAT:
        raise ClusterError(f"{where}: \"format\" is {d.get('format')!r}, expected {CLUSTER_FORMAT!r}")
    if isinstance(d.get("version"), bool) or d.get("version", CLUSTER_VERSION) != CLUSTER_VERSION:
        raise ClusterError(f"{where}: unsupported {CLUSTER_FORMAT} version {d.get('version')!r}")
    _known_keys(d, "cluster", where)
    raw = d.get("devices")
    if not isinstance(raw, list) or not raw:
        raise ClusterError(f"{where}: \"devices\" must be a non-empty list")
    devices = []
    for i, dev in enumerate(raw):
        if not isinstance(dev, dict):
            raise ClusterError(f"{where}: devices[{i}] must be an object")
        name = dev.get("name", f"/device:GPU:{i}")
        if not isinstance(name, str) or not name:
            raise ClusterError(f"{where}: devices[{i}]: name must be a non-empty string")
        _known_keys(dev, "device", f"{where}: device {name!r}")
        mem = dev.get("memory_bytes")
        # rounded half to even, as a graph's byte counts and --memory are (1.5 was cut to 1)
        mem_v = None if mem is None else int(round(_num(mem, "memory_bytes", f"{where}: device {name!r}")))
        speed = _num(dev.get("speed", 1.0), "speed", f"{where}: device {name!r}", positive=True)
        devices.append(Device(name, mem_v, speed))
    lat = _num(d.get("latency_us", DEFAULT_LATENCY_US), "latency_us", where)
    bw = _num(d.get("bandwidth_bytes_per_us", DEFAULT_BANDWIDTH), "bandwidth_bytes_per_us", where, positive=True)
    cpu = _num(d.get("transfer_cpu_us", 0.0), "transfer_cpu_us", where)
    cpu_bw = _opt_num(d.get("transfer_cpu_bytes_per_us"), "transfer_cpu_bytes_per_us", where)
    links = None
    if d.get("links") is not None:
        K = len(devices)
        rows = d["links"]
        if not isinstance(rows, list) or len(rows) != K or any(not isinstance(r, list) or len(r) != K for r in rows):
            raise ClusterError(f"{where}: links must be a {K}x{K} matrix")
        for a, row in enumerate(rows):
            for c, cell in enumerate(row):
                if cell is not None and not isinstance(cell, dict):
                    raise ClusterError(f"{where}: links[{a}][{c}] must be an object or null")
        links = tuple(
            tuple(None if (a == c or cell is None) else _link_from_dict(cell, lat, bw, f"{where}: links[{a}][{c}]")
                  for c, cell in enumerate(row))
            for a, row in enumerate(rows))
    try:
        return Cluster(tuple(devices), lat, bw, links, cpu, cpu_bw)
    except ClusterError as exc:
        raise ClusterError(f"{where}: {exc}") from None


def load_cluster(path: str | Path) -> Cluster:
    return cluster_from_dict(read_json(path), source=str(path))


def save_cluster(c: Cluster, path: str | Path) -> Path:
    check_cluster(c, "save_cluster")
    return write_json(path, c.to_dict(), indent=2)
