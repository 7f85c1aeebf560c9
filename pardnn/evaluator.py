"""Scoring placements for the passes: the SPEC §1 makespan (and peaks), counted.

`Evaluator` wraps `pardnn.machine.simulate` for passes that try many
assignments of one graph: it counts evaluations (the refinement budget is a
count, so results are deterministic) and remembers the best assignment seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .cluster import Cluster
from .ir import OpGraph
from .machine import Schedule, simulate


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
        from .machine import _static
        from ._schedkernel import simulate_kernel

        self.evaluations += 1
        sa = _static(self.g)
        c = self.cluster
        res = simulate_kernel(c.num_devices, dev, c.speed, c.latency, c.bandwidth, sa.time_us, sa.temp, sa.port_ptr,
                              sa.port_bytes, sa.port_owner, sa.pptr, sa.d_dst, sa.d_pid, sa.d_bytes, sa.iptr,
                              sa.i_edge, sa.cptr, sa.c_dst, sa.indeg, False)
        finish, tr_finish = res[1], res[7]
        ms = max(float(finish.max()) if finish.size else 0.0, float(tr_finish.max()) if tr_finish.size else 0.0)
        return ms

    def _remember(self, dev: np.ndarray, ms: float) -> None:
        if ms < self.best_makespan:
            self.best_makespan = ms
            self.best = np.array(dev, copy=True)
