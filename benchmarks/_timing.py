"""Timing shared by the benchmark scripts, which import it as ``_timing`` (run them as
``python benchmarks/<script>.py``: their folder is then on the import path).
"""

from __future__ import annotations

import time
from typing import Callable


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """The shortest of ``repeat`` wall-clock timings of ``fn()``, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)
