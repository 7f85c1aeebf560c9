"""Scoring placements for the passes: the SPEC §1 makespan (and peaks), counted.

`Evaluator` wraps `pardnn.machine.simulate` for passes that try many
assignments of one graph: it counts evaluations (the refinement budget is a
count, so results are deterministic) and remembers the best assignment seen.
With a ``memo`` (`new_memo`) it remembers every quick makespan by a
128-bit key of the assignment (`pardnn.machine.kernel.assignment_key`), so
that a search that tries the same assignment again (after a kick that falls
back to the same local optimum, say) is not simulated twice; it still counts
as an evaluation, so the result is the same with or without.
`Evaluator.first_shorter` runs a whole list of moves in one compiled call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..cluster import Cluster
from ..ir import OpGraph
from .._jit import HAVE_NUMBA
from .kernel import assignment_key, first_shorter, first_shorter_strands, new_memo, run_kernel
from .schedule import Schedule, digest, simulate

__all__ = ["Evaluator", "digest", "new_memo"]


@dataclass(eq=False)
class Evaluator:
    g: OpGraph
    cluster: Cluster
    evaluations: int = 0
    simulations: int = 0
    """Simulations run (evaluations that did not come from the memo; with strands, also the strands' tries
    after the answer, so this figure depends on timing and may exceed ``evaluations``; the plan does not)."""
    best_makespan: float = float("inf")
    best: np.ndarray | None = field(default=None, repr=False)
    memo: object | None = field(default=None, repr=False)
    """Quick makespans by `assignment_key` (a `new_memo`, shared by the evaluators of one graph and cluster
    that run one after the other; never by two at once: the compiled move loop writes to it without Python's
    lock); None: no memo."""
    strands: int = 1
    """`first_shorter` tries its moves on this many threads at once (`first_shorter_strands`: the same
    answer, sooner on a machine with the CPUs to spare), with ``run_on``; 1: on the caller's thread."""
    run_on: Callable | None = field(default=None, repr=False)
    """``run_on(fn, S)``: ``[fn(0), ..., fn(S - 1)]`` on threads at once (`pardnn.passes._threads.run_strands`)."""

    def __post_init__(self) -> None:
        if self.memo is not None and HAVE_NUMBA and type(self.memo) is dict:
            # the compiled move loop reads and writes the memo itself, which it can only do to numba's dict
            raise TypeError("Evaluator: memo must come from pardnn.machine.evaluator.new_memo() (a plain dict "
                            "cannot be shared with the compiled move loop)")

    def schedule(self, dev: np.ndarray, *, memory: bool = False) -> Schedule:
        self.evaluations += 1
        self.simulations += 1
        s = simulate(self.g, self.cluster, dev, memory=memory)
        self._remember(dev, s.makespan_us)
        return s

    def makespan(self, dev: np.ndarray) -> float:
        return float(self.schedule(dev).makespan_us)

    def quick_makespan(self, dev: np.ndarray) -> float:
        """The makespan alone, straight from the kernel (no memory, no `Schedule` built)."""
        self.evaluations += 1
        if self.memo is None:
            self.simulations += 1
            return run_kernel(self.g, self.cluster, dev, False).makespan_us
        with np.errstate(over="ignore"):     # the key's wrapping arithmetic, when run as plain Python
            key = tuple(np.uint64(x) for x in assignment_key(np.ascontiguousarray(dev), self.cluster.num_devices))
        if key in self.memo:
            return float(self.memo[key])
        self.simulations += 1
        ms = self.memo[key] = run_kernel(self.g, self.cluster, dev, False).makespan_us
        return ms

    def first_shorter(self, dev: np.ndarray, moves: tuple[np.ndarray, np.ndarray, np.ndarray], first: int,
                      limit: int, cur_ms: float) -> tuple[int, float, int]:
        """The first of ``moves`` (``(ptr, ops, target)``, from ``first`` on) whose quick makespan is under
        ``cur_ms``, trying at most ``limit`` that change ``dev``: ``(index or -1, makespan, where to go on)``.
        Each move tried counts as an evaluation, as `quick_makespan` of its assignment would."""
        if self.strands > 1 and self.run_on is not None:
            i, counted, ms, nxt, sims = first_shorter_strands(self.g, self.cluster, dev, *moves, first, limit,
                                                              cur_ms, self.memo, self.strands, self.run_on)
        else:
            i, counted, ms, nxt, sims = first_shorter(self.g, self.cluster, dev, *moves, first, limit, cur_ms,
                                                      self.memo)
        self.evaluations += counted
        self.simulations += sims
        return i, ms, nxt

    def _remember(self, dev: np.ndarray, ms: float) -> None:
        if ms < self.best_makespan:
            self.best_makespan = ms
            self.best = np.array(dev, copy=True)
