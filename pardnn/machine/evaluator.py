"""Scoring placements for the passes: the SPEC §1 makespan (and peaks), counted.

`Evaluator` wraps `pardnn.machine.simulate` for passes that try many
assignments of one graph: it counts evaluations (the refinement budget is a
count, so results are deterministic) and remembers the best assignment seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..cluster import Cluster
from ..ir import OpGraph
from .kernel import run_kernel
from .schedule import Schedule, simulate


@dataclass(eq=False)
class Evaluator:
    g: OpGraph
    cluster: Cluster
    evaluations: int = 0
    best_makespan: float = float("inf")
    best: np.ndarray | None = field(default=None, repr=False)

    def schedule(self, dev: np.ndarray, *, memory: bool = False) -> Schedule:
        self.evaluations += 1
        s = simulate(self.g, self.cluster, dev, memory=memory)
        self._remember(dev, s.makespan_us)
        return s

    def makespan(self, dev: np.ndarray) -> float:
        return float(self.schedule(dev).makespan_us)

    def quick_makespan(self, dev: np.ndarray) -> float:
        """The makespan alone, straight from the kernel (no memory, no `Schedule` built)."""
        self.evaluations += 1
        return run_kernel(self.g, self.cluster, dev, False).makespan_us

    def _remember(self, dev: np.ndarray, ms: float) -> None:
        if ms < self.best_makespan:
            self.best_makespan = ms
            self.best = np.array(dev, copy=True)
