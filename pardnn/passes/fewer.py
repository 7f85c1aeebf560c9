"""A start on fewer devices: the whole pipeline run on the faster half of the cluster, its plan a start.

A plan for K/2 devices is a plan for K, with half of them idle, and where
transfers cost more than the parallelism they buy it is the better one. The
pipeline at K does not find it: refinement moves units one at a time from
plans that use all K devices, and a move that empties a device only pays off
after many others. Run at K/2, the same passes search a space where every
plan is such a plan. So this pass places the graph again on the
``ceil(K * share)`` fastest devices (ties: more memory, then the lower
index) with the passes that came before it in its pipeline (without other
``fewer`` entries, unless ``recursive``) and the ``best`` pass that follows
it, the user's options included, and records the plan as a start, which
that ``best`` pass keeps when nothing beats it: the result is never longer
than the same pipeline's plan on the half. Called outside a pipeline, it
runs the default pipeline of its ``effort``. The plan is not one more start
of the pipeline's own refinement (that split refinement's budget among one
more plan: of the tuning suite's 177 loose cases 24 got shorter and 15
longer, by up to 6%); with ``refine`` (the default) the passes after the seed
pass (refine and the memory passes) run once more, at K, from the half's plan
alone, and their plan is a second start: a plan that leaves devices idle may
be a few moves from a shorter one that uses them (on the tuning suite up to
5k ops, loose, at ``--effort best``: 5 of 111 plans shorter, by up to 0.6%,
none longer, 21% more time; benchmarks/RESULTS.md, thirty-fourth round).

The pass runs after the others, before ``best``, and is skipped where it
cannot win or rarely would: when the plan so far fits and is no longer than
the sound lower bound on the half (`pardnn.bounds.makespan_lower_bound`; on
the tuning suite's loose cases, 95 of 177: all 59 at K=2, 24 at K=4, 12 at K=8), when the
half's memory in all is less than the step's peak on one device (a plan
there would rarely fit; under the benchmark's tight memory, 1.25x that peak
over all K devices, it never runs), when nodes are pinned to more devices
than the half has, on graphs of more than ``max_nodes`` ops, and on clusters
of fewer than ``min_devices`` devices. Devices that nodes are pinned to are
always in the half (then the fastest of the others), and the pins are
renumbered for it on a copy of the graph: a Keras graph pins its variables
to device 0, and on a cluster whose device 0 is slow the pass never ran.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..cluster import Cluster
from ..ir import OpGraph
from ..machine import device_order, simulate, single_device_peak
from ..pipeline import Pipeline, PlanState, check_pass_options
from ..units import is_number
from ._nested import Nested, add_start, alone, before_and_best, bound_met, log
from .keep_best import KeepBest
from .seed import Seed


def faster_half(cluster: Cluster, share: float) -> np.ndarray:
    """The indices, ascending, of the ``ceil(K * share)`` fastest devices (ties: more memory, then the lower
    index), at least one."""
    K = cluster.num_devices
    n = min(K, max(1, math.ceil(K * share - 1e-9)))
    return np.sort(device_order(cluster)[:n])     # the order the mapping and the memory pass fill devices in


def sub_cluster(cluster: Cluster, keep: np.ndarray) -> Cluster:
    """``cluster``'s devices ``keep`` with the links between them."""
    idx = [int(i) for i in keep]
    links = None if cluster.links is None else tuple(tuple(cluster.links[i][j] for j in idx) for i in idx)
    return Cluster(tuple(cluster.devices[i] for i in idx), cluster.latency_us, cluster.bandwidth_bytes_per_us,
                   links, cluster.transfer_cpu_us, cluster.transfer_cpu_bytes_per_us)


def half_with_pins(g: OpGraph, cluster: Cluster, share: float) -> np.ndarray | None:
    """The devices to place on, ascending: every device a node is pinned to, then the fastest others (as
    `faster_half`) up to ``ceil(K * share)`` in all; None where the pins name more devices than that."""
    half = faster_half(cluster, share)
    pins = np.unique(g.pinned[g.pinned >= 0])
    if pins.size > half.size:
        return None
    pinned = set(pins.tolist())
    others = [int(d) for d in device_order(cluster) if int(d) not in pinned]
    return np.sort(np.concatenate([pins, np.asarray(others[:half.size - pins.size], dtype=np.int64)]))


def pins_within(g: OpGraph, keep: np.ndarray) -> OpGraph:
    """``g`` with each pin renumbered to its device's index in ``keep`` (ascending, holding every pinned
    device): the graph the sub-cluster of ``keep`` is placed with. ``g`` itself where nothing changes."""
    if not (g.pinned >= 0).any() or np.array_equal(keep, np.arange(keep.size)):
        return g
    pinned = g.pinned.copy()
    on = pinned >= 0
    pinned[on] = np.searchsorted(keep, pinned[on])
    return dataclasses.replace(g, pinned=pinned)


def after_seed(inner: Pipeline) -> Pipeline | None:
    """The passes of ``inner`` after the last that makes a plan (slice, map) or seeds one (seed), but those
    that run pipelines of their own (a recursive ``fewer``), as a pipeline to run from a given plan on all K
    devices; None where no pass but ``best`` follows."""
    first = 1 + max((j for j, p in enumerate(inner.passes) if getattr(p, "makes", ()) or isinstance(p, Seed)),
                    default=-1)
    rest = [j for j in range(first, len(inner.passes)) if not hasattr(inner.passes[j], "inside")]    # no fewer
    if not any(not isinstance(inner.passes[j], KeepBest) for j in rest):
        return None
    return Pipeline(tuple(inner.passes[j] for j in rest), inner.verify, tuple(inner.label(j) for j in rest),
                    within=f"{inner.within} at K")


@dataclass(frozen=True)
class Fewer(Nested):
    name: ClassVar[str] = "fewer"
    requires: ClassVar[tuple[str, ...]] = ("assignment",)

    share: float = 0.5
    """Place on this share of the devices (rounded up)."""
    effort: str = "default"
    """Outside a pipeline only (the pass called alone): the effort of the default pipeline it runs on the half
    (`pardnn.partitioner.default_spec`). In a pipeline it runs the passes before it, whose options say the
    effort."""
    recursive: bool = False
    """The pipeline run on the half has this pass too, so it tries ``share`` of the half in turn, and so on
    down to ``min_devices``; else not."""
    min_devices: int = 2
    """Skipped where the cluster has fewer devices than this."""
    max_nodes: int = 50_000
    """Skipped on graphs of more ops than this (it about doubles the pipeline's time)."""
    refine: bool = True
    """Also hand the half's plan, on all K devices, to the passes after the pipeline's seed pass (refine and
    the memory passes) and record what they make as a second start: a plan that leaves devices idle may be
    a few moves from a shorter plan that uses them."""

    def __post_init__(self) -> None:
        from ..partitioner import SEEDS
        if self.effort not in SEEDS:
            raise ValueError(f"fewer: unknown effort {self.effort!r}; choose {', '.join(SEEDS)}")
        if not (is_number(self.share) and 0 < self.share < 1):     # before the rule of every float: "0 or more"
            raise ValueError(f"fewer: share must be above 0 and below 1, got {self.share!r}")
        check_pass_options(self)

    def spec(self) -> str:
        """The pipeline run on the smaller cluster when the pass is called alone, outside a pipeline."""
        return str(alone(self, self.effort).keywords["inner"])

    def inner(self, pipeline: Pipeline, i: int) -> tuple[Pipeline, bool]:
        """What it runs on the half as entry ``i`` of ``pipeline``: what that pipeline ran before it (other
        passes that run pipelines left out, unless ``recursive``: then this one stays) and the first ``best``
        entry after it, with their options; and whether there is such an entry."""
        return before_and_best(pipeline, i, lambda p: not hasattr(p, "inside"),
                               then=(self,) if self.recursive else ())

    def what(self, figures: dict, cluster: Cluster) -> str:
        return f"on {figures.get('devices')} of {cluster.num_devices} devices"

    def _place(self, g: OpGraph, cluster: Cluster, state: PlanState, inner: Pipeline) -> PlanState:
        K = cluster.num_devices
        if g.num_nodes == 0:
            return state.with_stats(self.name, skipped="no ops")
        if K < max(2, self.min_devices):
            return state.with_stats(self.name, skipped=f"{K} device{'s' if K != 1 else ''}"
                                    + (f", fewer than min_devices={self.min_devices}" if K >= 2 else ""))
        if g.num_nodes > self.max_nodes:
            return state.with_stats(self.name, skipped=f"more than {self.max_nodes:,} ops")
        keep = half_with_pins(g, cluster, self.share)
        if keep is None:
            n = faster_half(cluster, self.share).size
            return state.with_stats(self.name, skipped=f"nodes are pinned to {np.unique(g.pinned[g.pinned >= 0]).size}"
                                    f" devices, more than the {n} it would place on")
        sub = sub_cluster(cluster, keep)
        sg = pins_within(g, keep)
        bounded = bool(np.isfinite(cluster.capacity).any())
        if bounded and float(sub.capacity.sum()) < single_device_peak(g):
            return state.with_stats(self.name, skipped=f"{keep.size} device{'s hold' if keep.size != 1 else ' holds'} "
                                    "less than the step's peak on one")
        bound = bound_met(g, cluster, state, sub, sg)
        if bound is not None:
            return state.with_stats(self.name, skipped=f"the plan is no longer than the lower bound on "
                                    f"{keep.size} devices ({bound:.1f} us)")
        t0 = time.perf_counter()
        placed, _ = inner.run(sg, sub, PlanState())
        dev = keep[placed.assignment].astype(np.int64)
        s = simulate(g, cluster, dev, memory=bounded)
        figures = dict(devices=int(keep.size), makespan_us=float(s.makespan_us), feasible=bool(s.feasible),
                       seconds=round(time.perf_counter() - t0, 4))
        state = add_start(state, self.name, dev, s, bounded, figures)
        at_k = self.refine and after_seed(inner)
        if not at_k:
            return state
        t1 = time.perf_counter()
        refined, _ = at_k.run(g, cluster, PlanState(assignment=dev, starts=((self.name, dev),)))
        s = simulate(g, cluster, refined.assignment, memory=bounded)
        more = dict(refined_makespan_us=float(s.makespan_us), refined_feasible=bool(s.feasible),
                    refined_seconds=round(time.perf_counter() - t1, 4))
        return add_start(state, self.name, refined.assignment.astype(np.int64), s, bounded, more,
                         label=f"{self.name}-refined")

    def _run(self, g: OpGraph, cluster: Cluster, state: PlanState, *, inner: Pipeline,
             skip: str | None = None) -> PlanState:
        """`Nested._run`, then a ``-v`` line for the plan refined on all K devices, where there is one."""
        st = super()._run(g, cluster, state, inner=inner, skip=skip)
        f = st.stats.get(self.name, {})
        if "refined_makespan_us" in f:
            log.info("%s at K: refined on all %d devices, %.3f ms%s%s", inner.within, cluster.num_devices,
                     f["refined_makespan_us"] / 1000, "" if f["refined_feasible"] else " (over memory)",
                     ", the same as a start" if f.get(f"{self.name}-refined_same_as_a_start")
                     else ", a start for best")
        return st
