"""Running independent pieces of a pass on threads at once.

The compiled kernels (the simulator, the list schedulers, the move loop)
release Python's lock, so independent calls of them run in parallel on
threads. Each piece must be a pure function of its inputs: the results
are then collected in order, and a pass's plan is the same on any number
of threads.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform says, else the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def workers_for(jobs: int, threads: int | None) -> int:
    """Threads for ``jobs`` pieces: ``threads`` when given (1 or less: one after the other), else as many as
    there are pieces, at most the usable CPUs."""
    if threads is not None:
        return max(1, min(jobs, int(threads)))
    return max(1, min(jobs, usable_cpus()))


def map_in_order(fn: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """``[fn(x) for x in items]``, on ``workers`` threads at once when more than one. On an exception (Ctrl-C
    included) the pieces not begun are cancelled; running ones finish (a caller that needs them to stop
    sooner gives them a signal to watch, as refinement does)."""
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        return list(pool.map(fn, items))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
