"""The pardnn partitioner: ParDNN's passes composed into the default pipeline.

Step 1 (makespan): `Slice` -> `Map` -> `Refine`. Step 2 (memory): `FitMemory`
moves units off overloaded devices, then a memory-aware `Refine` recovers
step time while every device stays within its limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from .cluster import Cluster
from .ir import OpGraph
from .passes.mapping import Map
from .passes.memory import FitMemory
from .passes.refine import Refine
from .passes.slicing import Slice
from .pipeline import PassTiming, Pipeline, PlanState
from .placement import Placement
from .progress import Progress

METHOD = "pardnn"


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


def default_pipeline(options: PardnnOptions | None = None) -> Pipeline:
    o = options or PardnnOptions()
    refine = o.refine and o.refine_evals != 0
    passes = [Slice(), Map(comm_weight=o.comm_weight, try_fewer_devices=o.try_fewer_devices)]
    if refine:
        passes.append(Refine(max_evals=o.refine_evals))
    passes.append(FitMemory(heuristic=o.memory_heuristic))
    if refine and o.refine_memory:
        # after step 2 the plain budget (no small-graph boost): it recovers time from a refined plan
        passes.append(_MemoryRefine(max_evals=o.refine_evals, respect_memory=True, only_after_changes_by="memory",
                                    min_evals=40, boost=1.0))
    return Pipeline(tuple(passes))


@dataclass(frozen=True)
class _MemoryRefine(Refine):
    name = "refine-mem"


def run(g: OpGraph, cluster: Cluster, options: PardnnOptions | None = None, *,
        progress: Progress | None = None) -> tuple[Placement, PlanState, list[PassTiming]]:
    state, timings = default_pipeline(options).run(g, cluster, PlanState(), progress=progress)
    meta = {"method": METHOD, "pass_seconds": {t.name: round(t.seconds, 6) for t in timings}}
    return Placement(state.assignment, cluster.names, g.name, meta=meta), state, timings


def place(g: OpGraph, cluster: Cluster) -> Placement:
    """The placer interface (`pardnn.baselines.Placer`) for benchmarks."""
    return run(g, cluster)[0]
