"""The last pass: the plan handed on is never worse than any start the pipeline recorded.

A pass that makes a starting plan (the mapped plan, each list-scheduled seed)
records it in `PlanState.starts`. Refinement never makes its own start worse,
but step 2 may have to trade step time for memory, and a start that already
fit may then be faster than the repaired plan. This pass simulates the
current plan and every recorded start, with memory when the cluster has
limits, and keeps the best by the machine model's order: a plan that fits
before one that does not, then the shorter step; among plans that do not fit,
the one whose worst device is least over its capacity (the memory each
device would need to grow by, as the error message and the capacity search
say), then less total overflow, then the shorter step (`final_key`). Ties
keep the current plan. So the pipeline's result is never worse than any of its starts. A start
whose key the pass that recorded it already computed (`PlanState.start_keys`)
is simulated again only when that key beats the current plan's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..cluster import Cluster
from ..ir import OpGraph
from ..machine import Evaluator, Schedule
from ..pipeline import PlanState


def plan_key(s: Schedule, bounded: bool) -> tuple:
    """Smaller is better: fits first; then the shorter step, or the smaller shortfall when nothing fits."""
    if not bounded or s.feasible:
        return (0, float(s.makespan_us), 0.0)
    return (1,) + s.shortfall_key()


def final_key(s: Schedule, bounded: bool) -> tuple:
    """The order of the plan handed to the user, smaller first: `plan_key`'s for plans that fit; among plans
    that do not, the smallest worst ratio of peak to capacity first, then `plan_key`'s (less total overflow,
    then the shorter step). Passes that search use `plan_key`: total overflow measures their progress. The
    user gets the plan that needs the least more memory to run: by total overflow, a plan 106% over on one
    device beat one 61% over on each."""
    if not bounded or s.feasible:
        return plan_key(s, bounded)
    cap = s.capacity
    limited = np.isfinite(cap)
    worst = float(np.max(s.peak_bytes[limited] / np.maximum(cap[limited], 1.0))) if limited.any() else 0.0
    return (1, worst) + s.shortfall_key()


@dataclass(frozen=True)
class KeepBest:
    name: ClassVar[str] = "best"
    requires: ClassVar[tuple[str, ...]] = ("assignment",)

    def __call__(self, g: OpGraph, cluster: Cluster, state: PlanState) -> PlanState:
        if not state.starts:
            return state.with_stats(self.name, starts=0, kept="current")
        bounded = bool(np.isfinite(cluster.capacity).any())
        ev = Evaluator(g, cluster)
        best, best_s = state.assignment, ev.schedule(state.assignment, memory=bounded)
        best_key, kept = final_key(best_s, bounded), "current"
        for label, dev in state.starts:
            if np.array_equal(dev, best):
                continue
            known, scored = state.start_keys.get(label, (None, None))
            # scored when it was recorded (by `plan_key`), and no better: while the best plan fits, the two
            # orders agree
            if scored is dev and best_key[0] == 0 and not known < best_key:
                continue
            s = ev.schedule(dev, memory=bounded)
            key = final_key(s, bounded)
            if key < best_key:
                best, best_s, best_key, kept = dev, s, key, label
        return state.replace(assignment=best.copy() if kept != "current" else best,
                             makespan_us=float(best_s.makespan_us)).with_stats(
            self.name, starts=len(state.starts), kept=kept)
