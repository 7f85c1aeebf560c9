"""The pardnn partitioner: ParDNN's passes composed into the default pipeline.

Step 1 (makespan): `Slice` -> `Map` -> `Refine`. Step 2 (memory): `FitMemory`
moves units off overloaded devices, then a memory-aware `Refine` recovers
step time while every device stays within its limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from .cluster import Cluster
from .ir import OpGraph
from .pipeline import PassTiming, Pipeline, PlanState, order_problem, parse_pipeline, spec_entry
from .placement import Placement
from .progress import Progress

METHOD = "pardnn"
SEEDS = {"fast": {"schedulers": "heft+cpop+metis"}, "default": {},
         "best": {"schedulers": "heft+etf+etf-rank+cpop+metis+sct"}}
"""The seed pass's options at each effort (``{}``: its defaults)."""
FEWER = ("best",)
"""The efforts whose pipeline also places the graph on the faster half of the devices (the ``fewer`` pass, at
the same effort), its plan a start: at ``best`` the plan on K devices is never longer than the pipeline's on
the faster K/2. Where it runs it about doubles the time; at the default effort it would make the tuning
suite's Keras models' steps 1.1% shorter at K = 4 and 0.4% at 8 (loose; docs/partitioner.md), and the default
keeps its time (a second for graphs up to 5k ops)."""
RERUN = ("best",)
"""The efforts whose pipeline also runs its passes again at the default effort (the ``rerun`` pass), its plan a
start: so ``best`` is never worse than ``default`` with the same other options. Without it, on the tuning suite's
graphs up to 5k ops, 6 of 201 plans at ``best`` were longer than at ``default`` (by up to 16%); it adds the
default effort's time (docs/partitioner.md)."""


@dataclass(frozen=True)
class PardnnOptions:
    refine_evals: int | None = None
    """Simulations the refinement may spend (default: by graph size; 0 leaves refinement out)."""
    comm_weight: float = 1.0
    """Weight of communication in the mapping's load balancing (0: ParDNN's pure tie-break)."""
    try_fewer_devices: bool = True
    """Let the mapping use fewer devices when that is faster."""
    refine: bool = True
    refine_memory: bool = True
    """Run the memory-aware refinement after step 2. It never changes whether a plan fits, so the
    capacity search skips it."""
    memory_heuristic: str = "auto"
    """Step 2's heuristic: knapsack (I), residual (II) or auto (by graph size)."""
    effort: str = "default"
    """``fast``, ``default`` or ``best``: how much the refinement searches (``pardnn partition --effort``)."""
    seed: bool = True
    """Also start from list-scheduling plans (the ``seed`` pass) and return nothing worse than any start
    (the ``best`` pass)."""
    pipeline: str | None = None
    """A pipeline spec that replaces the one the options above describe (``pardnn partition --pipeline``)."""

    def __post_init__(self) -> None:
        if self.effort not in SEEDS:    # as the refine pass says it (a bare KeyError came out of default_spec)
            raise ValueError(f"unknown effort {self.effort!r}; choose {', '.join(SEEDS)}")
        # the passes' modules load here, not with this one: every command imports it (about 35 ms of start-up)
        from .passes.mapping import check_comm_weight
        from .passes.refine import check_max_evals
        check_max_evals(self.refine_evals, "refine_evals")    # what --refine-evals takes (IntRange(min=0))
        check_comm_weight(self.comm_weight)     # the passes' own checks, so a --pipeline spec says the same


def default_spec(options: PardnnOptions | None = None) -> str:
    """The pipeline spec the options describe (see `pardnn.pipeline.parse_pipeline`).

    With every option at its default: ``slice,map,seed,refine,memory,refine-mem,best``; at ``effort="best"``
    the ``fewer`` and ``rerun`` passes come before ``best``.
    """
    o = options or PardnnOptions()
    if o.pipeline:
        return o.pipeline
    refine = o.refine and o.refine_evals != 0
    evals = {} if o.refine_evals is None else {"max_evals": o.refine_evals}
    if o.effort != "default":
        evals["effort"] = o.effort
    mapping = {k: v for k, v, default in (("comm_weight", o.comm_weight, 1.0),
                                          ("try_fewer_devices", o.try_fewer_devices, True)) if v != default}
    parts = [spec_entry("slice"), spec_entry("map", **mapping)]
    if o.seed:
        parts.append(spec_entry("seed", **SEEDS[o.effort]))
    if refine:
        parts.append(spec_entry("refine", **evals))
    parts.append(spec_entry("memory", **({} if o.memory_heuristic == "auto" else {"heuristic": o.memory_heuristic})))
    if refine and o.refine_memory:
        parts.append(spec_entry("refine-mem", **evals))
    if o.effort in FEWER and o.seed:      # its plan is a start, which only the best pass weighs
        parts.append(spec_entry("fewer"))    # it runs the passes before it, these options' own
    if o.effort in RERUN and o.seed:
        parts.append(spec_entry("rerun"))    # the passes before it at the default effort
    if o.seed:
        parts.append(spec_entry("best"))
    return ",".join(parts)


def default_pipeline(options: PardnnOptions | None = None) -> Pipeline:
    """The pipeline the options describe; a ValueError where it cannot place from an empty plan
    (`pardnn.pipeline.order_problem`: ``pipeline="slice"`` was a PlacementError of shape ())."""
    pipeline = parse_pipeline(default_spec(options))
    problem = order_problem(pipeline)
    if problem:
        raise ValueError(problem)
    return pipeline


def run(g: OpGraph, cluster: Cluster, options: PardnnOptions | None = None, *,
        progress: Progress | None = None) -> tuple[Placement, PlanState, list[PassTiming]]:
    state, timings = default_pipeline(options).run(g, cluster, PlanState(), progress=progress)
    # no pass times here: the same input and options give the same placement, bytes included (the times are
    # in ``timings``; `pardnn partition --time-passes` records them)
    meta = {"method": METHOD, "passes": [t.name for t in timings]}
    return Placement(state.assignment, cluster.names, g.name, meta=meta), state, timings


def place(g: OpGraph, cluster: Cluster) -> Placement:
    """The placer interface (`pardnn.baselines.Placer`) for benchmarks."""
    return run(g, cluster)[0]
