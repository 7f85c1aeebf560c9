"""Pure numpy helpers that shrink a step's intervals to what a figure can show.

A 200,000-op step drawn one rectangle per op is both slow and unreadable: at
1,400 pixels across, each pixel holds a hundred ops. The report instead
measures, per pixel-wide bin of time, how long each lane was busy in each
category (`busy_by_bin`), merges runs that touch within a pixel
(`merge_runs`), and keeps the maximum of a memory curve per bin
(`max_envelope`, so the peak survives). All are O(n log n) in the number of
intervals plus O(bins).

>>> import numpy as np
>>> busy_by_bin(np.array([0.0, 3.0]), np.array([2.0, 4.0]), np.array([0, 1]), 2, np.array([0.0, 1.0, 4.0]))
array([[1., 0.],
       [1., 1.]])
>>> merge_runs(np.array([0.0, 2.0, 10.0]), np.array([1.5, 3.0, 11.0]), tol=0.5)
(array([ 0., 10.]), array([ 3., 11.]))
>>> max_envelope(np.array([0.0, 1.0, 2.5]), np.array([5, 9, 1]), np.array([0.0, 2.0, 4.0]))
array([9, 9])

`idle_gaps` finds where a lane did nothing between its first and its last op
(the measured timeline's "largest gap").
"""

from __future__ import annotations

import numpy as np


def busy_time_until(start: np.ndarray, finish: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Total busy time of the intervals ``[start, finish)`` before each instant of ``at``.

    Intervals may overlap (their busy times add up). Zero-length ones count 0.

    >>> busy_time_until(np.array([0.0, 1.0]), np.array([2.0, 5.0]), np.array([0.0, 1.5, 10.0])).tolist()
    [0.0, 2.0, 6.0]
    """
    start = np.asarray(start, dtype=np.float64)
    finish = np.asarray(finish, dtype=np.float64)
    at = np.asarray(at, dtype=np.float64)
    keep = finish > start
    s = np.sort(start[keep])
    f = np.sort(finish[keep])
    cs = np.concatenate([[0.0], np.cumsum(s)])
    cf = np.concatenate([[0.0], np.cumsum(f)])
    started = np.searchsorted(s, at, side="left")     # intervals with start < t
    ended = np.searchsorted(f, at, side="right")      # intervals with finish <= t
    # ended ones contribute finish - start; running ones contribute t - start
    return cf[ended] + at * (started - ended) - cs[started]


def busy_by_bin(start: np.ndarray, finish: np.ndarray, category: np.ndarray, n_categories: int,
                edges: np.ndarray) -> np.ndarray:
    """Busy time per bin (rows, between consecutive ``edges``) and category (columns)."""
    edges = np.asarray(edges, dtype=np.float64)
    category = np.asarray(category, dtype=np.int64)
    out = np.zeros((max(edges.size - 1, 0), n_categories))
    for c in range(n_categories):
        sel = category == c
        if sel.any():
            out[:, c] = np.diff(busy_time_until(start[sel], finish[sel], edges))
    return np.maximum(out, 0.0)


def merge_runs(start: np.ndarray, finish: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals that overlap or lie within ``tol`` of each other into runs ``(starts, finishes)``."""
    start = np.asarray(start, dtype=np.float64)
    finish = np.asarray(finish, dtype=np.float64)
    if start.size == 0:
        return start.copy(), finish.copy()
    order = np.argsort(start, kind="stable")
    s, f = start[order], finish[order]
    reach = np.maximum.accumulate(f)
    new = np.concatenate([[True], s[1:] > reach[:-1] + tol])
    first = np.flatnonzero(new)
    last = np.concatenate([first[1:], [s.size]]) - 1
    return s[first], reach[last]


def max_envelope(times: np.ndarray, levels: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The maximum of a step function (``levels[i]`` from ``times[i]`` on) over each bin of ``edges``.

    ``times`` must be sorted. A bin takes the level carried into it and every
    level set inside it, so no peak is lost.
    """
    times = np.asarray(times, dtype=np.float64)
    levels = np.asarray(levels)
    edges = np.asarray(edges, dtype=np.float64)
    n = edges.size - 1
    carry_idx = np.searchsorted(times, edges[:-1], side="right") - 1
    out = np.where(carry_idx >= 0, levels[np.maximum(carry_idx, 0)], levels[0] if levels.size else 0)
    inside = np.searchsorted(edges, times, side="right") - 1
    ok = (inside >= 0) & (inside < n)
    # a point exactly on the last edge belongs to the last bin
    ok |= times == edges[-1]
    inside = np.minimum(inside, n - 1)
    if ok.any():
        np.maximum.at(out, inside[ok], levels[ok])
    return out


def idle_gaps(start: np.ndarray, finish: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gaps ``(from, to)`` between the merged runs of the intervals ``[start, finish)``, in time order.

    >>> idle_gaps(np.array([0.0, 1.0, 7.0, 4.0]), np.array([2.0, 3.0, 9.0, 5.0]))
    (array([3., 5.]), array([4., 7.]))
    """
    a, b = merge_runs(start, finish, 0.0)
    return b[:-1], a[1:]


def covered_time(start: np.ndarray, finish: np.ndarray) -> float:
    """The length of the union of the intervals (overlapping ones count once).

    >>> covered_time(np.array([0.0, 1.0, 7.0]), np.array([2.0, 3.0, 9.0]))
    5.0
    """
    a, b = merge_runs(start, finish, 0.0)
    return float((b - a).sum())
