"""A start from another effort: the passes before this one run again at the ``default`` effort, the plan a start.

A larger budget does not make a longer search's plan shorter case by case:
``--effort best`` also seeds from more list schedulers, so refinement splits
its budget among other starts and descends along other paths. On the tuning
suite (graphs up to 5k ops, K = 2, 4, 8, thirty-second round,
benchmarks/RESULTS.md) its plans were shorter than the default effort's in
64 of 201 cases and longer in 6 (by up to 16%: PipeDream's NASNet-A large at
K=8 under tight memory). So the best effort runs this pass: the passes its
pipeline ran before it, each with ``effort`` set to this pass's (the seed
pass with that effort's list schedulers; passes that run pipelines of their
own left out), and the ``best`` pass after it, on the same cluster, and
records the plan as a start. With the user's other options the same, that is
the plan the default effort gives, so the best effort's plan is never worse
than it (`final_key`'s order: a plan that fits first, then the shorter step).

Skipped where the plan so far fits and is no longer than the sound lower
bound (`pardnn.bounds.makespan_lower_bound`), and without a ``best`` pass
after it. Called outside a pipeline, it runs the default pipeline of its
``effort``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..cluster import Cluster
from ..ir import OpGraph
from ..machine import simulate
from ..pipeline import Pipeline, PlanState, check_pass_options
from ._nested import Nested, add_start, before_and_best, bound_met


@dataclass(frozen=True)
class Rerun(Nested):
    name: ClassVar[str] = "rerun"
    requires: ClassVar[tuple[str, ...]] = ("assignment",)

    effort: str = "default"
    """The effort the passes run at again (`pardnn.partitioner.default_spec`)."""

    def __post_init__(self) -> None:
        from ..partitioner import SEEDS
        if self.effort not in SEEDS:
            raise ValueError(f"rerun: unknown effort {self.effort!r}; choose {', '.join(SEEDS)}")
        check_pass_options(self)

    def at_effort(self, p: Any) -> Any:
        """Pass ``p`` at this pass's effort: the seed pass with its list schedulers where it has an effort's
        (a list of the user's own stays), a pass with an ``effort`` option with this one; any other as it is."""
        from ..partitioner import SEEDS
        from .seed import Seed
        if isinstance(p, Seed):
            preset = {e: o.get("schedulers", Seed().schedulers) for e, o in SEEDS.items()}
            return dataclasses.replace(p, schedulers=preset[self.effort]) if p.schedulers in preset.values() else p
        if any(f.name == "effort" for f in dataclasses.fields(p)):
            return dataclasses.replace(p, effort=self.effort)
        return p

    def inner(self, pipeline: Pipeline, i: int) -> tuple[Pipeline, bool]:
        """What it runs as entry ``i`` of ``pipeline``: the passes before it at this effort (those that run
        pipelines of their own left out), then the first ``best`` entry after it; and whether there is one."""
        return before_and_best(pipeline, i, lambda p: not hasattr(p, "inside"), self.at_effort)

    def what(self, figures: dict, cluster: Cluster) -> str:
        return f"at the {self.effort} effort"

    def _place(self, g: OpGraph, cluster: Cluster, state: PlanState, inner: Pipeline) -> PlanState:
        if g.num_nodes == 0:
            return state.with_stats(self.name, skipped="no ops")
        bounded = bool(np.isfinite(cluster.capacity).any())
        bound = bound_met(g, cluster, state, cluster)
        if bound is not None:
            return state.with_stats(self.name, skipped=f"the plan is no longer than the lower bound ({bound:.1f} us)")
        t0 = time.perf_counter()
        placed, _ = inner.run(g, cluster, PlanState())
        dev = placed.assignment.astype(np.int64)
        s = simulate(g, cluster, dev, memory=bounded)
        figures = dict(makespan_us=float(s.makespan_us), feasible=bool(s.feasible),
                       seconds=round(time.perf_counter() - t0, 4))
        return add_start(state, self.name, dev, s, bounded, figures)
