"""What the passes that run passes of their own share (``fewer``, ``rerun``): the pipeline they run, as their
pipeline had it before them, and the plan they make, recorded as a start for the ``best`` pass."""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable

import numpy as np

from ..bounds import makespan_lower_bound
from ..cluster import Cluster
from ..ir import OpGraph
from ..machine import Schedule, simulate
from ..pipeline import Pipeline, PlanState
from .keep_best import KeepBest, plan_key

log = logging.getLogger("pardnn.passes")


def before_and_best(pipeline: Pipeline, i: int, keep: Callable[[Any], bool],
                    change: Callable[[Any], Any] = lambda p: p, then: tuple[Any, ...] = ()) -> tuple[Pipeline, bool]:
    """The passes of ``pipeline`` before entry ``i`` that ``keep`` admits, each through ``change``, the passes
    ``then`` (labelled as entry ``i``), then the first ``best`` entry after ``i``, as a pipeline whose messages name entry ``i`` first ("fewer > refine");
    and whether there was such a ``best`` entry (a start only it weighs: without one, the nested pipeline
    would run for nothing)."""
    before = [j for j in range(i) if keep(pipeline.passes[j])]
    best = [j for j in range(i + 1, len(pipeline.passes)) if isinstance(pipeline.passes[j], KeepBest)][:1]
    inner = Pipeline(tuple(change(pipeline.passes[j]) for j in before) + then + tuple(pipeline.passes[j] for j in best),
                     pipeline.verify,
                     tuple(pipeline.label(j) for j in before) + (pipeline.label(i),) * len(then)
                     + tuple(pipeline.label(j) for j in best),
                     within=" > ".join(filter(None, (pipeline.within, pipeline.label(i)))))
    return inner, bool(best)


class Nested:
    """What a pass that runs passes of its own does around them: as entry ``i`` of a pipeline (``inside``) it
    runs ``self.inner(pipeline, i)``, skipped where no ``best`` entry follows it (its plan is a start, which only
    that pass weighs); called alone, it is an entry of the default pipeline of its ``effort`` (`alone`). The
    pass gives ``inner``, ``_place(g, cluster, state, inner)`` and ``what(figures, cluster)`` for its ``-v``
    line."""

    def inside(self, pipeline: Pipeline, i: int) -> Callable[[OpGraph, Cluster, PlanState], PlanState]:
        inner, has_best = self.inner(pipeline, i)
        return functools.partial(self._run, inner=inner, skip=None if has_best else "no best pass after it")

    def __call__(self, g: OpGraph, cluster: Cluster, state: PlanState) -> PlanState:
        return alone(self, self.effort)(g, cluster, state)

    def _run(self, g: OpGraph, cluster: Cluster, state: PlanState, *, inner: Pipeline,
             skip: str | None = None) -> PlanState:
        st = state.with_stats(self.name, skipped=skip) if skip else self._place(g, cluster, state, inner)
        figures = st.stats.get(self.name, {})
        log_outcome(inner.within, figures, self.what(figures, cluster))
        return st


def alone(p: Any, effort: str) -> Callable[[OpGraph, Cluster, PlanState], PlanState]:
    """Pass ``p`` (one with ``inside``) called outside a pipeline: as an entry of the default pipeline of
    ``effort`` (`pardnn.partitioner.default_spec`), just before its ``best`` pass, with the passes that run
    pipelines of their own left out, as its ``inside`` leaves them out of a pipeline of the user's."""
    from ..partitioner import PardnnOptions, default_spec
    from ..pipeline import parse_pipeline
    base = parse_pipeline(default_spec(PardnnOptions(effort=effort)))
    keep = [j for j, q in enumerate(base.passes) if not hasattr(q, "inside") and not isinstance(q, KeepBest)]
    ends = [j for j, q in enumerate(base.passes) if isinstance(q, KeepBest)]
    pipeline = Pipeline(tuple(base.passes[j] for j in keep) + (p,) + tuple(base.passes[j] for j in ends),
                        base.verify, tuple(base.label(j) for j in keep) + (p.name,)
                        + tuple(base.label(j) for j in ends))
    return p.inside(pipeline, len(keep))


def bound_met(g: OpGraph, cluster: Cluster, state: PlanState, on: Cluster,
              g_on: OpGraph | None = None) -> float | None:
    """The sound lower bound on cluster ``on`` (`pardnn.bounds.makespan_lower_bound`; of ``g_on``, the graph
    with its pins numbered for ``on``, where that is not ``g``) where the plan so far fits ``cluster`` and is
    no longer than it, so no plan on ``on`` can beat it; else None."""
    if state.assignment is None:
        return None
    now = simulate(g, cluster, state.assignment, memory=bool(np.isfinite(cluster.capacity).any()))
    bound = makespan_lower_bound(g if g_on is None else g_on, on).value_us
    return bound if now.feasible and now.makespan_us <= bound else None


def add_start(state: PlanState, pass_name: str, dev: np.ndarray, s: Schedule, bounded: bool,
              figures: dict, label: str | None = None) -> PlanState:
    """``state`` with plan ``dev`` (simulated as ``s``) recorded as the start ``label`` (default ``pass_name``)
    and ``figures`` as the pass's; a plan the ``best`` pass weighs already (the current one or a start: it
    does not weigh the alternatives) is not recorded twice, and the figures say so."""
    label = label or pass_name
    same = "same_as_a_start" if label == pass_name else f"{label}_same_as_a_start"
    if any(np.array_equal(a, dev) for a in (state.assignment, *(d for _, d in state.starts))):
        return state.with_stats(pass_name, **figures, **{same: True})
    return state.replace(starts=(*state.starts, (label, dev)),
                         start_keys={**state.start_keys, label: (plan_key(s, bounded), dev)}
                         ).with_stats(pass_name, **figures)


def log_outcome(within: str, figures: dict, what: str) -> None:
    """One line for ``pardnn -v``: why the pass skipped, or ``what`` it made and whether it is a new start."""
    if "skipped" in figures:
        log.info("%s: skipped: %s", within, figures["skipped"])
    else:
        log.info("%s: %s, %.3f ms%s%s", within, what, figures["makespan_us"] / 1000,
                 "" if figures["feasible"] else " (over memory)",
                 ", the same as a start" if figures.get("same_as_a_start") else ", a start for best")
