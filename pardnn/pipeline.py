"""Passes composed into a pipeline, with timing and verification between them.

A pass is a frozen dataclass with a class-level ``name``; its fields are its
options. Calling it with ``(g, cluster, state)`` returns a new `PlanState`.
`Pipeline` runs passes in order, times each (``--time-passes``), verifies the
state after each one (every node placed on a real device, colocation groups
whole, pins honoured) and re-raises any failure as a `PassError` naming the
pass that failed and those that ran before it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Sequence

import numpy as np

from .cluster import Cluster
from .errors import InfeasibleError, OutOfMemory, PardnnError, PassError
from .ir import OpGraph
from .progress import Progress

log = logging.getLogger("pardnn.pipeline")


@dataclass(frozen=True, eq=False)
class Clustering:
    """The result of slicing: a cluster id per node, and which clusters are primary.

    Clusters ``0 .. num_primary-1`` are the primary clusters (one per device);
    the rest are secondary, numbered in extraction order (heaviest first).
    """

    cluster: np.ndarray        # int64 [V]
    num_primary: int
    num_clusters: int

    def members(self) -> list[np.ndarray]:
        order = np.argsort(self.cluster, kind="stable")
        counts = np.bincount(self.cluster, minlength=self.num_clusters)
        return np.split(order, np.cumsum(counts)[:-1])


@dataclass(frozen=True, eq=False)
class PlanState:
    """What passes hand to each other. Every field is a value; passes return new states."""

    assignment: np.ndarray | None = None     # device per node
    clustering: Clustering | None = None
    makespan_us: float | None = None         # of `assignment`, when a pass simulated it
    alternatives: tuple[np.ndarray, ...] = ()    # other promising assignments, for multi-start refinement
    stats: dict[str, Any] = field(default_factory=dict)   # per-pass figures, for reports

    def replace(self, **changes: Any) -> "PlanState":
        return dataclasses.replace(self, **changes)

    def with_stats(self, pass_name: str, **figures: Any) -> "PlanState":
        stats = dict(self.stats)
        stats[pass_name] = {**stats.get(pass_name, {}), **figures}
        return self.replace(stats=stats)


class Pass(Protocol):
    name: ClassVar[str]

    def __call__(self, g: OpGraph, cluster: Cluster, state: PlanState) -> PlanState: ...


def verify_state(g: OpGraph, cluster: Cluster, state: PlanState) -> None:
    """Raise ValueError describing the first broken invariant of ``state``."""
    if state.clustering is not None:
        c = state.clustering.cluster
        if c.shape != (g.num_nodes,) or (c.size and (c.min() < 0 or c.max() >= state.clustering.num_clusters)):
            raise ValueError("the clustering does not give every node exactly one cluster")
    a = state.assignment
    if a is None:
        return
    if a.shape != (g.num_nodes,):
        raise ValueError(f"the assignment has {a.size} entries for {g.num_nodes} nodes")
    K = cluster.num_devices
    if a.size and (a.min() < 0 or a.max() >= K):
        v = int(np.flatnonzero((a < 0) | (a >= K))[0])
        raise ValueError(f"node {g.names[v]!r} is on device {int(a[v])}, outside 0..{K - 1}")
    grouped = np.flatnonzero(g.colocation >= 0)
    if grouped.size:
        n = len(g.group_names)
        lo = np.full(n, K)
        hi = np.full(n, -1)
        np.minimum.at(lo, g.colocation[grouped], a[grouped])
        np.maximum.at(hi, g.colocation[grouped], a[grouped])
        split = np.flatnonzero((hi >= 0) & (lo != hi))
        if split.size:
            raise ValueError(f"colocation group {g.group_names[int(split[0])]!r} is split across devices")
    pinned = np.flatnonzero((g.pinned >= 0) & (g.pinned != a))
    if pinned.size:
        v = int(pinned[0])
        raise ValueError(f"node {g.names[v]!r} is pinned to device {int(g.pinned[v])} but placed on {int(a[v])}")


@dataclass(frozen=True)
class PassTiming:
    name: str
    seconds: float
    makespan_us: float | None


@dataclass(frozen=True)
class Pipeline:
    """Passes run in order on one graph and cluster."""

    passes: tuple[Any, ...]
    verify: bool = True
    """Check the state's invariants after every pass."""

    def run(self, g: OpGraph, cluster: Cluster, state: PlanState | None = None, *,
            progress: Progress | None = None) -> tuple[PlanState, list[PassTiming]]:
        progress = progress or Progress.off()
        state = state or PlanState()
        timings: list[PassTiming] = []
        done: list[str] = []
        for p in self.passes:
            t0 = time.perf_counter()
            try:
                with progress.stage(f"pass {p.name}", log_time=False):   # logged below, with the makespan
                    state = p(g, cluster, state)
                if self.verify:
                    verify_state(g, cluster, state)
            except InfeasibleError:
                raise
            except MemoryError:
                raise OutOfMemory(f"out of memory in pass {p.name!r} on {g.num_nodes:,} nodes and "
                                  f"{g.num_edges:,} edges, {cluster.num_devices} devices"
                                  + (f" (after {', '.join(done)})" if done else "")) from None
            except PardnnError as exc:
                if isinstance(exc, PassError):
                    raise
                raise type(exc)(f"{exc} (in pass {p.name!r})") from exc
            except Exception as exc:
                after = f" after {', '.join(done)}" if done else ""
                raise PassError(f"pass {p.name!r} failed{after}: {type(exc).__name__}: {exc}") from exc
            dt = time.perf_counter() - t0
            timings.append(PassTiming(p.name, dt, state.makespan_us))
            log.info("pass %-10s %7.3f s%s", p.name, dt,
                     f"  makespan {state.makespan_us / 1000:.3f} ms" if state.makespan_us is not None else "")
            done.append(p.name)
        return state, timings


def format_timings(timings: Sequence[PassTiming]) -> str:
    """The ``--time-passes`` table."""
    total = sum(t.seconds for t in timings) or 1.0
    lines = [f"{'pass':<12} {'seconds':>8} {'share':>6} {'makespan after':>15}"]
    for t in timings:
        ms = "-" if t.makespan_us is None else f"{t.makespan_us / 1000:.3f} ms"
        lines.append(f"{t.name:<12} {t.seconds:>8.3f} {100 * t.seconds / total:>5.1f}% {ms:>15}")
    lines.append(f"{'total':<12} {sum(t.seconds for t in timings):>8.3f}")
    return "\n".join(lines)
