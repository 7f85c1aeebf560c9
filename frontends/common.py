"""Helpers shared by the importers: robust averaging of profiled samples."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def robust_average(samples: Sequence[float]) -> float:
    """ParDNN's robust average of profiled durations.

    With five or more samples, drop the two lowest and two highest, then
    take (mean + median) / 2 of the rest. With fewer, the median.

    >>> round(robust_average([10, 11, 12, 13, 100, 1, 12]), 4)   # keeps 11, 12, 12
    11.8333
    >>> robust_average([4.0, 6.0])
    5.0
    """
    x = np.sort(np.asarray(samples, dtype=np.float64))
    if x.size == 0:
        raise ValueError("no samples")
    if x.size >= 5:
        x = x[2:-2]
        return float((x.mean() + np.median(x)) / 2)
    return float(np.median(x))
