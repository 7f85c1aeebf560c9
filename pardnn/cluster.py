"""The cluster: devices with memory and speed, and the links between them (SPEC §3).

>>> c = Cluster.homogeneous(2, memory_bytes=2**30)
>>> c.num_devices, c.transfer_time_us(0, 1, 12000)
(2, 26.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .errors import ClusterError
from .fileio import read_json, write_json

CLUSTER_FORMAT = "pardnn.cluster"
CLUSTER_VERSION = 1
DEFAULT_LATENCY_US = 25.0
DEFAULT_BANDWIDTH = 12000.0  # bytes per microsecond = 12 GB/s


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
    latency_us: float
    bandwidth_bytes_per_us: float


@dataclass(frozen=True, eq=False)
class Cluster:
    """Devices ``0..K-1`` fully connected by links (SPEC §1, §3)."""

    devices: tuple[Device, ...]
    latency_us: float = DEFAULT_LATENCY_US
    bandwidth_bytes_per_us: float = DEFAULT_BANDWIDTH
    links: tuple[tuple[Link | None, ...], ...] | None = None

    def __post_init__(self):
        if not self.devices:
            raise ClusterError("a cluster needs at least one device")
        if not (self.latency_us >= 0 and math.isfinite(self.latency_us)):
            raise ClusterError(f"latency_us must be a non-negative number, got {self.latency_us}")
        if not (self.bandwidth_bytes_per_us > 0):
            raise ClusterError(f"bandwidth_bytes_per_us must be positive, got {self.bandwidth_bytes_per_us}")
        names = [d.name for d in self.devices]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ClusterError(f"device name {dup!r} appears twice")
        for d in self.devices:
            if not (d.speed > 0 and math.isfinite(d.speed)):
                raise ClusterError(f"device {d.name!r}: speed must be a positive number, got {d.speed}")
            if d.memory_bytes is not None and d.memory_bytes < 0:
                raise ClusterError(f"device {d.name!r}: memory_bytes must be non-negative")
        if self.links is not None:
            K = len(self.devices)
            if len(self.links) != K or any(len(row) != K for row in self.links):
                raise ClusterError(f"links must be a {K}x{K} matrix")

    # ---- construction --------------------------------------------------------
    @classmethod
    def homogeneous(cls, k: int, memory_bytes: int | None = None, *, speed: float = 1.0,
                    latency_us: float = DEFAULT_LATENCY_US, bandwidth_bytes_per_us: float = DEFAULT_BANDWIDTH,
                    device_prefix: str = "/device:GPU:") -> "Cluster":
        if k < 1:
            raise ClusterError(f"need at least one device, got {k}")
        devs = tuple(Device(f"{device_prefix}{i}", memory_bytes, speed) for i in range(k))
        return cls(devs, latency_us, bandwidth_bytes_per_us)

    def with_memory(self, memory_bytes: int | Sequence[int | None] | None) -> "Cluster":
        """The same cluster with new capacities (one for all, or one per device)."""
        if memory_bytes is None or isinstance(memory_bytes, (int, np.integer, float)):
            mem = [None if memory_bytes is None else int(memory_bytes)] * self.num_devices
        else:
            mem = [None if m is None else int(m) for m in memory_bytes]
        devs = tuple(Device(d.name, m, d.speed) for d, m in zip(self.devices, mem))
        return Cluster(devs, self.latency_us, self.bandwidth_bytes_per_us, self.links)

    def renamed(self, names: Sequence[str]) -> "Cluster":
        devs = tuple(Device(n, d.memory_bytes, d.speed) for d, n in zip(self.devices, names))
        return Cluster(devs, self.latency_us, self.bandwidth_bytes_per_us, self.links)

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

    def _link_matrix(self, field: str, diagonal: float) -> np.ndarray:
        """K x K matrix of a link property (``field`` of `Link`): the link's own where `links` has one,
        the cluster's default (its own ``field``) elsewhere, ``diagonal`` on the diagonal."""
        K = self.num_devices
        m = np.full((K, K), float(getattr(self, field)))
        if self.links is not None:
            for a in range(K):
                for c in range(K):
                    if self.links[a][c] is not None:
                        m[a, c] = getattr(self.links[a][c], field)
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

    def transfer_time_us(self, a: int, c: int, nbytes: float) -> float:
        """Time to send ``nbytes`` from device ``a`` to ``c`` (0 on the same device)."""
        if a == c:
            return 0.0
        return float(self.latency[a, c] + nbytes / self.bandwidth[a, c])

    @cached_property
    def mean_latency(self) -> float:
        K = self.num_devices
        return float(self.latency.sum() / (K * (K - 1))) if K > 1 else 0.0

    @cached_property
    def mean_inv_bandwidth(self) -> float:
        """Average seconds-per-byte over distinct pairs (for device-agnostic cost estimates)."""
        K = self.num_devices
        if K < 2:
            return 0.0
        inv = 1.0 / self.bandwidth
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
            out["links"] = [[None if l is None else {"latency_us": l.latency_us,
                                                     "bandwidth_bytes_per_us": l.bandwidth_bytes_per_us}
                             for l in row] for row in self.links]
        return out


def _num(value: Any, what: str, where: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ClusterError(f"{where}: {what} must be a number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ClusterError(f"{where}: {what} must be {'positive' if positive else 'non-negative'}, got {value!r}")
    return float(value)


def cluster_from_dict(d: Any, *, source: str | None = None) -> Cluster:
    where = source or "cluster"
    if not isinstance(d, dict):
        raise ClusterError(f"{where}: expected a JSON object with \"format\": \"{CLUSTER_FORMAT}\"")
    if d.get("format") != CLUSTER_FORMAT:
        raise ClusterError(f"{where}: \"format\" is {d.get('format')!r}, expected {CLUSTER_FORMAT!r}")
    if d.get("version", CLUSTER_VERSION) != CLUSTER_VERSION:
        raise ClusterError(f"{where}: unsupported {CLUSTER_FORMAT} version {d.get('version')!r}")
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
        mem = dev.get("memory_bytes")
        mem_v = None if mem is None else int(_num(mem, "memory_bytes", f"{where}: device {name!r}"))
        speed = _num(dev.get("speed", 1.0), "speed", f"{where}: device {name!r}", positive=True)
        devices.append(Device(name, mem_v, speed))
    lat = _num(d.get("latency_us", DEFAULT_LATENCY_US), "latency_us", where)
    bw = _num(d.get("bandwidth_bytes_per_us", DEFAULT_BANDWIDTH), "bandwidth_bytes_per_us", where, positive=True)
    links = None
    if d.get("links") is not None:
        K = len(devices)
        rows = d["links"]
        if not isinstance(rows, list) or len(rows) != K or any(not isinstance(r, list) or len(r) != K for r in rows):
            raise ClusterError(f"{where}: links must be a {K}x{K} matrix")
        links = tuple(
            tuple(None if (a == c or cell is None) else Link(
                _num(cell.get("latency_us", lat), "latency_us", f"{where}: links[{a}][{c}]"),
                _num(cell.get("bandwidth_bytes_per_us", bw), "bandwidth_bytes_per_us",
                     f"{where}: links[{a}][{c}]", positive=True))
                  for c, cell in enumerate(row))
            for a, row in enumerate(rows))
        for a, row in enumerate(rows):
            for c, cell in enumerate(row):
                if cell is not None and not isinstance(cell, dict):
                    raise ClusterError(f"{where}: links[{a}][{c}] must be an object or null")
    try:
        return Cluster(tuple(devices), lat, bw, links)
    except ClusterError as exc:
        raise ClusterError(f"{where}: {exc}") from None


def load_cluster(path: str | Path) -> Cluster:
    return cluster_from_dict(read_json(path), source=str(path))


def save_cluster(c: Cluster, path: str | Path) -> Path:
    return write_json(path, c.to_dict(), indent=2)
